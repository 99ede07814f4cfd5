#include "comm/trace/analysis.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

namespace tandem::trace {

using nlohmann::json;

namespace {

bool open_state(const json& e) { return e["state"] == "posted" || e["state"] == "matched"; }

std::string site_of(const json& e) {
  std::string site = e["site"].is_string() ? e["site"].get<std::string>() : "unknown site";
  if (e["direct"].is_string() && e["direct"] != e["site"]) site += " via " + e["direct"].get<std::string>();
  return site;
}

std::string tensor_of(const json& e) {
  if (e["dtype"].get<std::string>().empty()) return "";
  std::string out = e["dtype"].get<std::string>() + "[";
  bool first = true;
  for (const auto& d : e["shape"]) {
    out += (first ? "" : ", ") + std::to_string(d.get<long long>());
    first = false;
  }
  return out + "]";
}

// "allreduce f32[4] (in backward, stage 1 microbatch 2)"
std::string what(const json& e) {
  std::string out = e["op"].get<std::string>();
  const std::string tensor = tensor_of(e);
  if (!tensor.empty()) out += " " + tensor;
  std::vector<std::string> notes;
  if (!e["collective"].get<bool>()) {
    notes.push_back((e.value("receive", false) ? "from rank " : "to rank ") +
                    std::to_string(e["peer"].get<int>()) + ", tag " + std::to_string(e["tag"].get<int>()) +
                    (e["sequence"].get<long long>() >= 0 ? ", message #" + std::to_string(e["sequence"].get<long long>())
                                                         : std::string()));
  } else if (e["peer"].get<int>() >= 0) {
    notes.push_back("root " + std::to_string(e["peer"].get<int>()));
  }
  if (!e.value("context", std::string()).empty()) notes.push_back(e["context"].get<std::string>());
  if (e["stage"].get<long long>() >= 0)
    notes.push_back("stage " + std::to_string(e["stage"].get<long long>()) + " microbatch " +
                    std::to_string(e["microbatch"].get<long long>()));
  if (!notes.empty()) {
    out += " (";
    for (std::size_t i = 0; i < notes.size(); ++i) out += (i ? ", " : "") + notes[i];
    out += ")";
  }
  return out;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

struct RankDump {
  int world_rank;
  const json* doc;
};

// The collectives of one communicator on one rank, by sequence number.
using Collectives = std::map<long long, const json*>;

std::string signature(const json& e) {
  std::string s = e["op"].get<std::string>() + "|" + std::to_string(e["peer"].get<int>()) + "|" + e["dtype"].get<std::string>();
  const std::string op = e["op"];
  if (op == "allreduce" || op == "reduce") s += "|" + e["shape"].dump();
  return s;
}

}  // namespace

std::string analyze(const std::vector<json>& dumps) {
  std::ostringstream out;
  if (dumps.empty()) return "tandem trace report: no dumps\n";
  const int world = dumps.front().value("world_size", 1);
  std::map<int, const json*> by_rank;
  for (const json& d : dumps) by_rank[d["rank"].get<int>()] = &d;
  out << "tandem trace report (job " << dumps.front().value("job", std::string("?")) << "): " << by_rank.size()
      << " of " << world << " rank(s) dumped";
  std::vector<int> missing;
  for (int r = 0; r < world; ++r)
    if (!by_rank.count(r)) missing.push_back(r);
  if (!missing.empty()) {
    out << "; no dump from rank(s)";
    for (int r : missing) out << " " << r;
  }
  out << "\n";
  for (const auto& [rank, d] : by_rank)
    out << "  rank " << rank << " (" << d->value("host", std::string("?")) << ", pid " << d->value("pid", 0LL)
        << "): " << first_line(d->value("reason", std::string("?"))) << "\n";

  // Communicators: id -> world ranks (from any dump that knows it).
  std::map<int, std::vector<int>> members;
  for (const json& d : dumps)
    for (const json& c : d["communicators"]) members[c["id"].get<int>()] = c["world_ranks"].get<std::vector<int>>();

  std::vector<std::string> findings;
  // --- collectives: the first sequence number at which the ranks differ -----------------------
  for (const auto& [comm, ranks] : members) {
    std::map<int, Collectives> per_rank;  // communicator rank -> collectives
    std::map<int, long long> oldest;      // the first sequence still in each rank's ring
    for (std::size_t cr = 0; cr < ranks.size(); ++cr) {
      auto it = by_rank.find(ranks[cr]);
      if (it == by_rank.end()) continue;
      Collectives& mine = per_rank[static_cast<int>(cr)];
      for (const json& e : (*it->second)["entries"])
        if (e["collective"].get<bool>() && e["comm"].get<int>() == comm && e["sequence"].get<long long>() >= 0)
          mine[e["sequence"].get<long long>()] = &e;
      oldest[static_cast<int>(cr)] = mine.empty() ? 0 : mine.begin()->first;
    }
    if (per_rank.size() < 2) continue;
    long long from = 0, to = -1;
    for (const auto& [cr, mine] : per_rank) {
      from = std::max(from, oldest[cr]);
      if (!mine.empty()) to = std::max(to, mine.rbegin()->first);
    }
    for (long long s = from; s <= to; ++s) {
      std::map<std::string, std::vector<int>> groups;  // signature -> communicator ranks
      std::vector<int> absent;
      for (const auto& [cr, mine] : per_rank) {
        auto e = mine.find(s);
        if (e == mine.end()) absent.push_back(cr);
        else groups[signature(*e->second)].push_back(cr);
      }
      if (groups.size() <= 1 && absent.empty()) continue;
      std::ostringstream f;
      f << "collective #" << s << " of communicator " << comm << " (" << ranks.size()
        << " ranks): the ranks disagree:";
      for (const auto& [sig, crs] : groups)
        for (int cr : crs) {
          const json& e = *per_rank[cr].at(s);
          f << "\n    rank " << cr << " is in " << what(e) << " at " << site_of(e) << " [" << e["state"].get<std::string>()
            << "]";
        }
      for (int cr : absent) {
        const Collectives& mine = per_rank[cr];
        f << "\n    rank " << cr << " never reached it";
        auto last = mine.lower_bound(s);
        if (last != mine.begin()) {
          --last;
          f << " (its last collective: #" << last->first << " " << what(*last->second) << " at "
            << site_of(*last->second) << ")";
        }
      }
      findings.push_back(f.str());
      break;  // the first one explains the rest
    }
  }

  // --- point to point: per channel (communicator, sender, receiver, tag) ----------------------
  struct Channel {
    std::map<long long, const json*> sends, recvs;
  };
  std::map<std::tuple<int, int, int, int>, Channel> channels;
  std::map<std::tuple<int, int>, bool> dumped;  // (communicator, rank) had a dump
  for (const auto& [comm, ranks] : members)
    for (std::size_t cr = 0; cr < ranks.size(); ++cr) dumped[{comm, static_cast<int>(cr)}] = by_rank.count(ranks[cr]) > 0;
  for (const json& d : dumps)
    for (const json& e : d["entries"]) {
      if (e["collective"].get<bool>() || e["sequence"].get<long long>() < 0 || e["peer"].get<int>() < 0) continue;
      const bool recv = e.value("receive", false);
      const int me = e["rank"], peer = e["peer"], comm = e["comm"], tag = e["tag"];
      Channel& c = channels[{comm, recv ? peer : me, recv ? me : peer, tag}];
      (recv ? c.recvs : c.sends)[e["sequence"].get<long long>()] = &e;
    }
  for (const auto& [key, c] : channels) {
    const auto [comm, from, to, tag] = key;
    for (const auto& [n, send] : c.sends) {
      if (c.recvs.count(n) || !dumped[{comm, to}]) continue;
      const long long received = c.recvs.empty() ? 0 : c.recvs.rbegin()->first + 1;
      if (n < received) continue;  // older than the receiver's ring
      std::ostringstream f;
      f << "rank " << from << " sent " << what(*send) << " at " << site_of(*send) << " [" << (*send)["state"].get<std::string>()
        << "], which rank " << to << " never received on tag " << tag;
      findings.push_back(f.str());
      break;
    }
    for (const auto& [n, recv] : c.recvs) {
      if (c.sends.count(n) || !open_state(*recv) || !dumped[{comm, from}]) continue;
      std::ostringstream f;
      f << "rank " << to << " waits in " << what(*recv) << " at " << site_of(*recv) << ", which rank " << from
        << " never sent";
      std::set<int> other_tags;
      for (const auto& [k2, c2] : channels)
        if (std::get<0>(k2) == comm && std::get<1>(k2) == from && std::get<2>(k2) == to && std::get<3>(k2) != tag &&
            !c2.sends.empty())
          other_tags.insert(std::get<3>(k2));
      if (!other_tags.empty()) {
        f << " (it sent to rank " << to << " on tag(s)";
        for (int t : other_tags) f << " " << t;
        f << ")";
      }
      findings.push_back(f.str());
    }
  }

  out << (findings.empty() ? "no mismatch found between the ranks' communications\n" : "first mismatches:\n");
  for (const std::string& f : findings) out << "  - " << f << "\n";

  // --- who waited on what ------------------------------------------------------------------
  out << "what each rank was doing when it dumped:\n";
  for (const auto& [rank, d] : by_rank) {
    const json* waiting = nullptr;
    const json* failed = nullptr;
    for (const json& e : (*d)["entries"]) {
      if (open_state(e)) waiting = &e;
      if (e["state"] == "failed") failed = &e;
    }
    const long long at = d->value("time_us", 0LL);
    out << "  rank " << rank << ": ";
    if (waiting) {
      out << "waiting in " << what(*waiting) << " at " << site_of(*waiting) << " for "
          << (at - (*waiting)["posted_us"].get<long long>()) / 1000 << " ms";
    } else if (failed) {
      out << "failed in " << what(*failed) << " at " << site_of(*failed) << ": " << first_line((*failed)["error"]);
    } else if ((*d)["entries"].empty()) {
      out << "no communication recorded";
    } else {
      const json& last = (*d)["entries"].back();
      out << "not communicating; last: " << what(last) << " at " << site_of(last) << " [" << last["state"].get<std::string>()
          << "]";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace tandem::trace

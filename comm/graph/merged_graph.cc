#include "comm/graph/merged_graph.h"

#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"

namespace tandem {

namespace {

using Exchange = FunctionDescription::Exchange;
using nlohmann::json;

// What a rank sends to rank 0: its graph's DOT statements, ready for its cluster, and its
// communication on comm in graph order, to be matched with the other ranks'.
std::string rank_graph(Communicator& comm, const Variables& outputs, const VariableNames& names) {
  const ComputationalGraph graph = build_computational_graph(outputs, names);
  const std::string prefix = detail::concat("r", comm.rank(), "_");
  json exchanges = json::array();
  for (const auto& node : graph.nodes) {
    const FunctionDescription& d = node.description;
    if (d.exchange == Exchange::none || d.communicator != &comm) continue;
    exchanges.push_back({{"id", prefix + node.id},
                         {"kind", static_cast<int>(d.exchange)},
                         {"peer", d.peer},
                         {"tag", d.tag},
                         {"name", node.label.substr(0, node.label.find('\n'))}});
  }
  const json mine = {{"statements", graph.dot_statements(prefix, "    ")}, {"exchanges", exchanges}};
  // Names are the user's: bytes that are not UTF-8 become U+FFFD rather than an error.
  return mine.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Rank 0: the clusters, then the edges between them.
std::string merge(const std::vector<std::string>& gathered) {
  std::vector<json> ranks;
  for (const std::string& text : gathered) ranks.push_back(json::parse(text));
  std::string out = "digraph job {\n  newrank=true;\n";
  for (std::size_t r = 0; r < ranks.size(); ++r)
    out += detail::concat("  subgraph cluster_rank", r, " {\n    label=\"rank ", r, "\";\n",
                          ranks[r]["statements"].get<std::string>(), "  }\n");

  // Sends and recvs by (sender, receiver, tag), each list in graph order; collectives by rank.
  std::map<std::tuple<int, int, int>, std::vector<std::string>> sends, recvs;
  std::vector<std::vector<std::pair<std::string, std::string>>> collectives(ranks.size());  // (id, name)
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const int rank = static_cast<int>(r);
    for (const json& e : ranks[r]["exchanges"]) {
      const auto kind = static_cast<Exchange>(e["kind"].get<int>());
      const int peer = e["peer"].get<int>(), tag = e["tag"].get<int>();
      const std::string id = e["id"].get<std::string>();
      if (kind == Exchange::send) sends[{rank, peer, tag}].push_back(id);
      if (kind == Exchange::recv) recvs[{peer, rank, tag}].push_back(id);
      if (kind == Exchange::collective) collectives[r].emplace_back(id, e["name"].get<std::string>());
    }
  }
  std::string unmatched;
  // The n-th message from s to d on a tag is the n-th that d receives from s on it (MPI's order).
  for (const auto& [key, ids] : sends) {
    const auto& [from, to, tag] = key;
    const std::vector<std::string>& matches = recvs[key];
    for (std::size_t n = 0; n < ids.size(); ++n) {
      if (n < matches.size()) {
        out += "  " + ids[n] + " -> " + matches[n] + " [color=\"#c03000\", penwidth=2];\n";
      } else {
        unmatched += detail::concat("  // unmatched: ", ids[n], " (send from rank ", from, " to rank ", to, ", tag ",
                                    tag, ")\n");
      }
    }
  }
  for (const auto& [key, ids] : recvs) {
    const auto& [from, to, tag] = key;
    const auto sent = sends.find(key);
    for (std::size_t n = sent == sends.end() ? 0 : sent->second.size(); n < ids.size(); ++n)
      unmatched += detail::concat("  // unmatched: ", ids[n], " (recv on rank ", to, " from rank ", from, ", tag ",
                                  tag, ")\n");
  }
  // The n-th collective of every rank is one operation: a shared node joins its ranks' nodes.
  std::size_t instances = 0;
  for (const auto& list : collectives) instances = std::max(instances, list.size());
  for (std::size_t n = 0; n < instances; ++n) {
    std::string name, joins;
    std::set<std::string> ops;
    int ranks_in = 0;
    for (std::size_t r = 0; r < collectives.size(); ++r) {
      if (n >= collectives[r].size()) continue;
      const auto& [id, op] = collectives[r][n];
      if (ops.insert(op).second) name += (name.empty() ? "" : " / ") + op;  // ranks that differ: shown
      joins += "  " + id + detail::concat(" -> c", n, " [dir=none, style=dashed, color=\"#2050c0\"];\n");
      ++ranks_in;
    }
    out += detail::concat("  c", n, " [label=\"", dot_escape(name), " #", n, "\", shape=hexagon, color=\"#2050c0\"];\n",
                          joins);
    if (ranks_in != static_cast<int>(collectives.size()))
      unmatched += detail::concat("  // unmatched: collective #", n, " (", name, ") on ", ranks_in, " of ",
                                  collectives.size(), " ranks\n");
  }
  return out + unmatched + "}\n";
}

}  // namespace

std::string merged_graph_dot(Communicator& comm, const Variables& outputs, const VariableNames& names) {
  const std::vector<std::string> gathered = comm.gather_obj(rank_graph(comm, outputs, names), 0);
  return comm.rank() == 0 ? merge(gathered) : "";
}

void dump_merged_graph(Communicator& comm, const Variables& outputs, const std::string& path,
                       const VariableNames& names) {
  const std::string dot = merged_graph_dot(comm, outputs, names);
  if (comm.rank() != 0) return;
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << dot;
    file.flush();
    TANDEM_CHECK(file.good(), "dump_merged_graph: rank 0 cannot write '", path, "'");
  }
  render_dot(path);
}

}  // namespace tandem

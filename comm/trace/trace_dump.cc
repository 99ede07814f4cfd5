#include "comm/trace/trace_dump.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "comm/trace/flight_recorder.h"
#include "core/error.h"

namespace tandem::trace {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::mutex g_identity_mutex;
DumpIdentity g_identity;
std::atomic<bool> g_dumped{false};

json site_json(const CallSite& site) { return site.known() ? json(site.str()) : json(nullptr); }

json entry_json(const FlightEntry& e) {
  return json{{"id", e.id},
              {"op", e.op},
              {"collective", e.collective},
              {"receive", e.receive},
              {"in_flight", e.in_flight},
              {"context", e.context},
              {"comm", e.comm},
              {"rank", e.rank},
              {"peer", e.peer},
              {"tag", e.tag},
              {"sequence", e.sequence},
              {"dtype", e.dtype},
              {"shape", std::vector<std::int64_t>(e.shape)},
              {"stage", e.stage},
              {"microbatch", e.microbatch},
              {"site", site_json(e.site)},
              {"direct", site_json(e.direct)},
              {"state", state_name(e.state)},
              {"posted_us", e.posted_us},
              {"matched_us", e.matched_us},
              {"ended_us", e.ended_us},
              {"error", e.error}};
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

void set_dump_identity(DumpIdentity identity) {
  std::lock_guard<std::mutex> lock(g_identity_mutex);
  g_identity = std::move(identity);
}

DumpIdentity dump_identity() {
  std::lock_guard<std::mutex> lock(g_identity_mutex);
  return g_identity;
}

std::string trace_dir() {
  const char* dir = std::getenv("TANDEM_TRACE_DIR");
  return dir && *dir ? dir : "";
}

std::string dump_path(const std::string& dir, const std::string& job, int rank) {
  return (fs::path(dir) / ("tandem-trace-" + job + "-rank" + std::to_string(rank) + ".json")).string();
}

json dump_json(const std::string& reason) {
  const DumpIdentity me = dump_identity();
  const FlightRecorder& recorder = FlightRecorder::instance();
  json communicators = json::array();
  for (const CommunicatorInfo& c : recorder.communicators())
    communicators.push_back(json{{"id", c.id}, {"world_ranks", c.world_ranks}});
  json entries = json::array();
  for (const FlightEntry& e : recorder.entries()) entries.push_back(entry_json(e));
  return json{{"tandem_trace", 1},
              {"job", me.job},
              {"rank", me.rank},
              {"world_size", me.world_size},
              {"host", host_name()},
              {"pid", static_cast<long long>(getpid())},
              {"reason", reason},
              {"time_us", now_us()},
              {"capacity", recorder.capacity()},
              {"dropped", recorder.dropped()},
              {"communicators", communicators},
              {"entries", entries}};
}

std::string write_dump(const std::string& reason, bool again) {
  const std::string dir = trace_dir();
  if (dir.empty()) return "";
  if (!again && g_dumped.exchange(true)) return "";
  const DumpIdentity me = dump_identity();
  const std::string path = dump_path(dir, me.job, me.rank);
  try {
    std::error_code error;
    fs::create_directories(dir, error);
    const std::string temporary = path + ".tmp";
    {
      std::ofstream out(temporary);
      out << dump_json(reason).dump(1) << "\n";
      if (!out) throw std::runtime_error("cannot write " + temporary);
    }
    fs::rename(temporary, path);
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tandem: rank %d: could not write the flight recorder to %s: %s\n", me.rank, dir.c_str(),
                 e.what());
    return "";
  }
}

std::vector<json> read_dumps(const std::string& dir, const std::string& job) {
  std::error_code error;
  TANDEM_CHECK(fs::is_directory(dir, error), "read_dumps: ", dir, " is not a directory");
  struct Found {
    fs::path path;
    fs::file_time_type time;
    std::string job;
  };
  std::vector<Found> found;
  for (const auto& item : fs::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    const std::string prefix = "tandem-trace-";
    const auto rank_at = name.rfind("-rank");
    if (name.rfind(prefix, 0) != 0 || rank_at == std::string::npos || item.path().extension() != ".json") continue;
    found.push_back({item.path(), item.last_write_time(), name.substr(prefix.size(), rank_at - prefix.size())});
  }
  std::string wanted = job;
  if (wanted.empty() && !found.empty()) {
    wanted = std::max_element(found.begin(), found.end(), [](const Found& a, const Found& b) {
               return a.time < b.time;
             })->job;
  }
  std::vector<json> dumps;
  for (const Found& f : found) {
    if (f.job != wanted) continue;
    std::ifstream in(f.path);
    json doc;
    try {
      in >> doc;
    } catch (const std::exception& e) {
      TANDEM_FAIL("read_dumps: ", f.path.string(), " is not valid JSON: ", e.what());
    }
    TANDEM_CHECK(doc.is_object() && doc.value("tandem_trace", 0) == 1 && doc.contains("entries"), "read_dumps: ",
                 f.path.string(), " is not a tandem flight-recorder dump");
    dumps.push_back(std::move(doc));
  }
  std::sort(dumps.begin(), dumps.end(), [](const json& a, const json& b) { return a["rank"] < b["rank"]; });
  return dumps;
}

}  // namespace tandem::trace

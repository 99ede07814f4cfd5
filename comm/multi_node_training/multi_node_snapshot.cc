#include "comm/multi_node_training/multi_node_snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "layers/serializers/npz.h"

namespace tandem {

namespace {

constexpr const char* kFormat = "tandem multi-node snapshot manifest 1";

std::string snapshot_path(const std::string& dir, const std::string& prefix, std::int64_t iteration) {
  return dir + "/" + prefix + std::to_string(iteration) + ".npz";
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads a whole file; false (with errno's text in `error`) when it cannot be opened.
bool read_file(const std::string& path, std::string& bytes, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = std::strerror(errno);
    return false;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  bytes = buffer.str();
  return true;
}

std::string fnv1a64(const std::string& bytes) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(Fnv1a64().bytes(bytes).digest()));
  return text;
}

// ---- the manifest and its JSON ----------------------------------------------------------------

struct ManifestFile {
  int rank = 0;
  std::string path;  // relative to the manifest's directory when under it
  std::int64_t bytes = 0;
  std::string digest;  // FNV-1a 64, 16 hex digits
};

struct Manifest {
  std::int64_t iteration = 0;
  int ranks = 0;
  std::vector<ManifestFile> files;      // one per rank, in rank order
  std::vector<std::int64_t> complete;  // complete snapshots still on disk, oldest first
};

// A string as JSON, escaped by nlohmann. Bytes that are not UTF-8 become U+FFFD, so the manifest
// stays valid JSON (of a path, only the file's base name, tandem's own, is read back).
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The manifest's layout (see the header): one line per rank's file, which nlohmann's dump cannot
// lay out; the strings are nlohmann's.
std::string format_manifest(const Manifest& m) {
  std::ostringstream out;
  out << "{\n  \"format\": " << quoted(kFormat) << ",\n  \"iteration\": " << m.iteration
      << ",\n  \"ranks\": " << m.ranks << ",\n  \"files\": [\n";
  for (std::size_t i = 0; i < m.files.size(); ++i) {
    const ManifestFile& f = m.files[i];
    out << "    {\"rank\": " << f.rank << ", \"path\": " << quoted(f.path) << ", \"bytes\": " << f.bytes
        << ", \"fnv1a64\": " << quoted(f.digest) << "}" << (i + 1 < m.files.size() ? ",\n" : "\n");
  }
  out << "  ],\n  \"complete\": [";
  for (std::size_t i = 0; i < m.complete.size(); ++i) out << (i ? ", " : "") << m.complete[i];
  out << "]\n}\n";
  return out.str();
}

// Reads a manifest from its bytes on disk, which may be anything: whatever is not a well-formed
// manifest is a tandem::Error naming `source` and what is wrong, never a crash (nlohmann parses
// and frees without recursion, however deep the nesting).
class ManifestReader {
 public:
  explicit ManifestReader(std::string source) : source_(std::move(source)) {}

  Manifest parse(const std::string& text) const {
    nlohmann::json root;
    try {
      root = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(without_id(e.what()));  // "parse error at line 3, column 5: syntax error ..."
    }
    try {
      return manifest(root);
    } catch (const nlohmann::json::exception& e) {  // the checks below leave none; one would be a bug here
      fail(without_id(e.what()));
    }
  }

 private:
  Manifest manifest(const nlohmann::json& root) const {
    if (!root.is_object()) fail("the manifest has the wrong type");
    if (text(member(root, "format"), "\"format\"") != kFormat)
      fail(std::string("\"format\" is not \"") + kFormat + "\"");
    Manifest m;
    m.iteration = non_negative(member(root, "iteration"), "\"iteration\"");
    const std::int64_t ranks = non_negative(member(root, "ranks"), "\"ranks\"");
    const nlohmann::json& files = member(root, "files");
    if (!files.is_array()) fail("\"files\" has the wrong type");
    if (ranks < 1 || files.size() != static_cast<std::uint64_t>(ranks))
      fail("\"files\" has " + std::to_string(files.size()) + " entries for " + std::to_string(ranks) + " ranks");
    m.ranks = static_cast<int>(ranks);
    for (std::size_t r = 0; r < files.size(); ++r) {
      const nlohmann::json& entry = files[r];
      if (!entry.is_object()) fail("a file entry has the wrong type");
      ManifestFile f;
      const std::int64_t rank = non_negative(member(entry, "rank"), "\"rank\"");
      if (rank != static_cast<std::int64_t>(r))
        fail("file entry " + std::to_string(r) + " is for rank " + std::to_string(rank));
      f.rank = static_cast<int>(r);
      f.path = text(member(entry, "path"), "\"path\"");
      f.bytes = non_negative(member(entry, "bytes"), "\"bytes\"");
      f.digest = text(member(entry, "fnv1a64"), "\"fnv1a64\"");
      if (f.path.empty() || f.digest.size() != 16) fail("file entry " + std::to_string(r) + " is malformed");
      m.files.push_back(f);
    }
    const nlohmann::json& complete = member(root, "complete");
    if (!complete.is_array()) fail("\"complete\" has the wrong type");
    for (const nlohmann::json& it : complete) m.complete.push_back(non_negative(it, "an entry of \"complete\""));
    return m;
  }

  [[noreturn]] void fail(const std::string& why) const {
    TANDEM_FAIL("snapshot manifest ", source_, " is malformed: ", why);
  }
  // nlohmann's messages start with an id, "[json.exception.parse_error.101] ".
  static std::string without_id(const std::string& what) {
    const auto end = what.find("] ");
    return what.compare(0, 16, "[json.exception.") == 0 && end != std::string::npos ? what.substr(end + 2) : what;
  }
  const nlohmann::json& member(const nlohmann::json& object, const std::string& key) const {
    const auto it = object.find(key);
    if (it == object.end()) fail("no \"" + key + "\"");
    return *it;
  }
  const std::string& text(const nlohmann::json& v, const std::string& what) const {
    if (!v.is_string()) fail(what + " has the wrong type");
    return v.get_ref<const std::string&>();
  }
  std::int64_t non_negative(const nlohmann::json& v, const std::string& what) const {
    if (!v.is_number_integer()) fail(what + " has the wrong type");
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      fail(what + " is too large");
    const auto value = v.get<std::int64_t>();
    if (value < 0) fail(what + " is negative");
    return value;
  }

  std::string source_;
};

// What each rank reports to rank 0 after writing: "ok\n<iteration>\n<bytes>\n<digest>\n<path>",
// or "error\n<message>".
struct Record {
  bool ok = false;
  std::string error;
  std::int64_t iteration = 0;
  ManifestFile file;
};

Record parse_record(const std::string& text) {
  Record r;
  std::istringstream in(text);
  std::string status;
  std::getline(in, status);
  if (status != "ok") {
    r.error = text.substr(std::min(text.size(), status.size() + 1));
    return r;
  }
  in >> r.iteration >> r.file.bytes >> r.file.digest;
  in.ignore(1);
  std::getline(in, r.file.path);
  r.ok = true;
  return r;
}

}  // namespace

MultiNodeSnapshotWriter::MultiNodeSnapshotWriter(CommunicatorPtr comm, MultiNodeSnapshotOptions options)
    : comm_(std::move(comm)), options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "MultiNodeSnapshotWriter: a communicator is required");
  TANDEM_CHECK(options_.keep >= 0, "MultiNodeSnapshotWriter: keep must be >= 0 (0 keeps every snapshot), got ",
               options_.keep);
  TANDEM_CHECK(!options_.prefix.empty() && options_.prefix.find('/') == std::string::npos,
               "MultiNodeSnapshotWriter: the prefix must be a non-empty file name prefix, got '", options_.prefix, "'");
}

void MultiNodeSnapshotWriter::operator()(Trainer& trainer) {
  const std::int64_t iteration = trainer.iteration();
  const std::string path = snapshot_path(trainer.out(), options_.prefix, iteration);
  // 1. This rank's file. A failure is reported to the others instead of thrown here: a rank
  // that left the collective below would leave them waiting.
  std::string record;
  try {
    trainer.save_snapshot(path);
    sync_directory(trainer.out());
    std::string bytes, error;
    TANDEM_CHECK(read_file(path, bytes, error), "cannot read back '", path, "': ", error);
    inject_fault_if_requested("snapshot", iteration);
    record = "ok\n" + std::to_string(iteration) + "\n" + std::to_string(bytes.size()) + "\n" + fnv1a64(bytes) + "\n" +
             path;
  } catch (const std::exception& e) {
    record = std::string("error\n") + e.what();
  }
  // 2-4. Agree, commit at rank 0, and learn the outcome.
  const std::vector<std::string> records = comm_->gather_obj(record, 0);
  std::string outcome = comm_->rank() == 0 ? commit(trainer, iteration, records) : std::string();
  outcome = comm_->bcast_obj(outcome, 0);
  if (outcome.compare(0, 6, "error\n") == 0) throw Error(outcome.substr(6));
  // The manifest no longer names these: delete this rank's files of them.
  std::istringstream prune(outcome.substr(std::min<std::size_t>(outcome.size(), 3)));
  for (std::int64_t old; prune >> old;) ::unlink(snapshot_path(trainer.out(), options_.prefix, old).c_str());
}

std::string MultiNodeSnapshotWriter::commit(const Trainer& trainer, std::int64_t iteration,
                                            const std::vector<std::string>& records) {
  const std::string dir = trainer.out();
  const std::string manifest_path = dir + "/" + kSnapshotManifest;
  try {
    Manifest m;
    m.iteration = iteration;
    m.ranks = comm_->size();
    std::string failures;
    for (int r = 0; r < comm_->size(); ++r) {
      const Record record = parse_record(records[r]);
      std::string problem;
      if (!record.ok)
        problem = record.error;
      else if (record.iteration != iteration)
        problem = "it snapshotted iteration " + std::to_string(record.iteration);
      if (!problem.empty()) {
        failures += (failures.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + problem);
        continue;
      }
      ManifestFile file = record.file;
      file.rank = r;
      const std::string under = dir + "/";
      if (file.path.compare(0, under.size(), under) == 0) file.path = file.path.substr(under.size());
      m.files.push_back(file);
    }
    if (!failures.empty())
      return "error\nMultiNodeSnapshotWriter: the snapshot of iteration " + std::to_string(iteration) +
             " is incomplete (" + manifest_path + " is not updated): " + failures;

    // The complete snapshots still on disk: the previous manifest's, up to this iteration (a
    // fresh run into an old directory starts the list again).
    std::string previous, unused;
    if (read_file(manifest_path, previous, unused)) {
      try {
        const Manifest old = ManifestReader(manifest_path).parse(previous);
        if (old.ranks == m.ranks)
          for (std::int64_t it : old.complete)
            if (it < iteration) m.complete.push_back(it);
      } catch (const Error&) {
        // An unreadable old manifest is replaced; its list is lost (files are only kept longer).
      }
    }
    m.complete.push_back(iteration);
    std::string pruned;
    if (options_.keep > 0 && m.complete.size() > static_cast<std::size_t>(options_.keep)) {
      const auto cut = m.complete.end() - options_.keep;
      for (auto it = m.complete.begin(); it != cut; ++it) pruned += " " + std::to_string(*it);
      m.complete.erase(m.complete.begin(), cut);
    }
    write_file_atomically(manifest_path, format_manifest(m));
    sync_directory(dir);
    return "ok" + pruned;
  } catch (const std::exception& e) {
    return "error\nMultiNodeSnapshotWriter: writing " + manifest_path + " for iteration " +
           std::to_string(iteration) + " failed: " + e.what();
  }
}

std::shared_ptr<MultiNodeSnapshotWriter> create_multi_node_snapshot_writer(CommunicatorPtr comm,
                                                                           MultiNodeSnapshotOptions options) {
  return std::make_shared<MultiNodeSnapshotWriter>(std::move(comm), std::move(options));
}

CompleteSnapshot latest_complete_snapshot(Communicator& comm, const std::string& out_dir) {
  const std::string who = "latest_complete_snapshot (rank " + std::to_string(comm.rank()) + " of " +
                          std::to_string(comm.size()) + "): ";
  // Rank 0 reads the manifest; every rank then judges the same text.
  std::string message;
  if (comm.rank() == 0) {
    const std::string manifest_path = out_dir + "/" + kSnapshotManifest;
    std::string text, error;
    message = read_file(manifest_path, text, error)
                  ? "ok\n" + manifest_path + "\n" + text
                  : "error\nno snapshot manifest " + manifest_path + " (" + error +
                        "): no snapshot has been completed by all ranks in " + out_dir;
  }
  message = comm.bcast_obj(message, 0);
  if (message.compare(0, 6, "error\n") == 0) throw Error(who + message.substr(6));
  const std::size_t newline = message.find('\n', 3);
  const std::string manifest_path = message.substr(3, newline - 3);
  const Manifest m = ManifestReader(manifest_path).parse(message.substr(newline + 1));
  TANDEM_CHECK(m.ranks == comm.size(), who, "the snapshot manifest ", manifest_path, " was written by a job of ",
               m.ranks, " ranks; this job has ", comm.size(), " (resume with the same number of ranks)");

  // Each rank checks its own file; then every rank learns every rank's verdict.
  const ManifestFile& entry = m.files[comm.rank()];
  CompleteSnapshot result{m.iteration, out_dir + "/" + base_name(entry.path)};
  std::string problem, bytes, error;
  if (!read_file(result.path, bytes, error)) {
    problem = result.path + " is missing (" + error + ")";
  } else if (static_cast<std::int64_t>(bytes.size()) != entry.bytes) {
    problem = result.path + " has " + std::to_string(bytes.size()) + " bytes, the manifest records " +
              std::to_string(entry.bytes);
  } else if (fnv1a64(bytes) != entry.digest) {
    problem = result.path + " does not match its digest in the manifest (fnv1a64 " + fnv1a64(bytes) + ", recorded " +
              entry.digest + "): it changed after the snapshot was taken";
  }
  if (!problem.empty()) problem = "rank " + std::to_string(comm.rank()) + ": " + problem;
  std::string problems;
  if (comm.rank() == 0) {
    for (const std::string& p : comm.gather_obj(problem, 0))
      if (!p.empty()) problems += (problems.empty() ? "" : "; ") + p;
  } else {
    comm.gather_obj(problem, 0);
  }
  problems = comm.bcast_obj(problems, 0);
  TANDEM_CHECK(problems.empty(), who, "the complete snapshot of iteration ", m.iteration, " (", manifest_path,
               ") cannot be resumed: ", problems);
  return result;
}

}  // namespace tandem

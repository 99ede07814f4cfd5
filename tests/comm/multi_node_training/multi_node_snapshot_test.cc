// Multi-rank tests of MultiNodeSnapshotWriter and latest_complete_snapshot (run on 2 and 3
// ranks). Every rank trains its own small classifier (the writer only needs each rank's
// Trainer) into <dir> on rank 0 and <dir>/rank<r> on rank r, as the trainers do.
//
// Checks use CHECK, not REQUIRE, so that a failed check never skips a rank's part of a
// collective; every error case is an error on every rank, after the same collectives.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <utility>
#include <vector>

#include "comm/transport/communicator.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "core/error.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A fresh directory for a test case: rank 0 removes what a previous run left, then every rank
// may create its own subdirectory.
std::string fresh_base(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base = std::string(tmp ? tmp : "/tmp") + "/snapshot_test/" + name;
  if (world()->rank() == 0) REQUIRE(std::system(("rm -rf '" + base + "'").c_str()) == 0);
  world()->barrier();
  return base;
}

std::string rank_dir(const std::string& base, int rank) {
  return rank == 0 ? base : base + "/rank" + std::to_string(rank);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A classifier of 3 features into 2 classes on 40 examples of this rank's own: 4 iterations
// of 10 examples per epoch.
struct Run {
  std::shared_ptr<Classifier> model;
  std::unique_ptr<Trainer> trainer;
};

Run make_run(const std::string& out, std::int64_t epochs, MultiNodeSnapshotOptions options = {},
             CommunicatorPtr comm = world()) {
  const int rank = world()->rank();
  Generator gen(3 + rank);
  const Tensor x = randn({40, 3}, gen);
  const Tensor t = argmax(matmul(x, randn({3, 2}, gen)), 1).to(DType::i32);
  auto data = std::make_shared<TupleDataset>(std::vector<Tensor>{x, t});
  Run run;
  manual_seed(7 + rank);
  run.model = std::make_shared<Classifier>(std::make_shared<Linear>(3, 2));
  auto optimizer = std::make_shared<Adam>(0.05);
  optimizer->setup(run.model);
  auto iterator = std::make_shared<SerialIterator>(data, 10, true, true, 5 + rank);
  auto updater = std::make_shared<StandardUpdater>(iterator, optimizer, classifier_loss(run.model));
  run.trainer = std::make_unique<Trainer>(updater, Trigger::epochs(epochs), out, run.model);
  run.trainer->extend(create_multi_node_snapshot_writer(comm, options), Trigger::epochs(1));
  return run;
}

std::vector<float> flat_params(const Link& link) {
  std::vector<float> out;
  for (const Variable& p : link.params())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

std::int64_t manifest_iteration(const std::string& base) {
  std::smatch match;
  const std::string text = read_all(base + "/" + kSnapshotManifest);
  if (!std::regex_search(text, match, std::regex("\"iteration\": (\\d+)"))) return -1;
  return std::stoll(match[1]);
}

// A complete snapshot of iteration 8 (2 epochs) in a fresh base directory.
std::string two_epochs(const std::string& name) {
  const std::string base = fresh_base(name);
  make_run(rank_dir(base, world()->rank()), 2).trainer->run();
  return base;
}

}  // namespace

TEST_CASE("the manifest names every rank's snapshot, and resuming from it continues exactly") {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  const std::string base = two_epochs("complete");
  const std::string dir = rank_dir(base, rank);
  CHECK(exists(dir + "/snapshot_iter_4.npz"));
  CHECK(exists(dir + "/snapshot_iter_8.npz"));

  const std::string manifest = read_all(base + "/" + kSnapshotManifest);
  CHECK(manifest_iteration(base) == 8);
  CHECK_THAT(manifest, Contains("\"ranks\": " + std::to_string(size)));
  CHECK_THAT(manifest, Contains("\"complete\": [4, 8]"));
  for (int r = 0; r < size; ++r) {
    const std::string file = (r == 0 ? "" : "rank" + std::to_string(r) + "/") + "snapshot_iter_8.npz";
    const std::string bytes = read_all(rank_dir(base, r) + "/snapshot_iter_8.npz");
    CHECK_THAT(manifest, Contains("{\"rank\": " + std::to_string(r) + ", \"path\": \"" + file + "\", \"bytes\": " +
                                  std::to_string(bytes.size()) + ", \"fnv1a64\": \""));
  }

  const CompleteSnapshot latest = latest_complete_snapshot(*comm, dir);
  CHECK(latest.iteration == 8);
  CHECK(latest.path == dir + "/snapshot_iter_8.npz");

  // Two more epochs from the snapshot end where four uninterrupted epochs do.
  Run resumed = make_run(dir, 4);
  resumed.trainer->load_snapshot(latest.path);
  CHECK(resumed.trainer->iteration() == 8);
  resumed.trainer->run();
  const std::string whole_base = fresh_base("complete_whole");
  Run whole = make_run(rank_dir(whole_base, rank), 4);
  whole.trainer->run();
  CHECK(flat_params(*resumed.model) == flat_params(*whole.model));
  CHECK(manifest_iteration(base) == 16);
}

TEST_CASE("a rank whose snapshot fails keeps the manifest where it was, and every rank says so") {
  auto comm = world();
  const int rank = comm->rank(), last = comm->size() - 1;
  const std::string base = two_epochs("failed_write");
  const std::string dir = rank_dir(base, rank);
  // The last rank cannot write iteration 12: a directory stands where its file would go.
  if (rank == last) REQUIRE(::mkdir((dir + "/snapshot_iter_12.npz").c_str(), 0755) == 0);
  comm->barrier();
  Run more = make_run(dir, 3);
  more.trainer->load_snapshot(latest_complete_snapshot(*comm, dir).path);
  const std::string error = error_of([&] { more.trainer->run(); });
  CHECK_THAT(error, Contains("the snapshot of iteration 12 is incomplete"));
  CHECK_THAT(error, Contains("rank " + std::to_string(last) + ": write: could not complete '" +
                             rank_dir(base, last) + "/snapshot_iter_12.npz'"));
  // The other ranks wrote theirs, but the manifest, and so a resume, stays at iteration 8.
  if (rank != last) CHECK(exists(dir + "/snapshot_iter_12.npz"));
  CHECK(manifest_iteration(base) == 8);
  CHECK(latest_complete_snapshot(*comm, dir).iteration == 8);
}

TEST_CASE("a newer snapshot on one rank, without a manifest update, is ignored") {
  auto comm = world();
  const int rank = comm->rank();
  const std::string base = two_epochs("newer_on_one_rank");
  const std::string dir = rank_dir(base, rank);
  // What a crash between one rank's write and the manifest's leaves behind.
  if (rank == 1) {
    Run other = make_run(dir, 4);
    other.trainer->load_snapshot(dir + "/snapshot_iter_8.npz");
    other.trainer->save_snapshot(dir + "/snapshot_iter_12.npz");
    CHECK(latest_snapshot(dir) == dir + "/snapshot_iter_12.npz");  // what each rank's newest would be
  }
  const CompleteSnapshot latest = latest_complete_snapshot(*comm, dir);
  CHECK(latest.iteration == 8);
  CHECK(latest.path == dir + "/snapshot_iter_8.npz");

  // The resumed run overwrites the stale file with the agreed one of iteration 12.
  Run resumed = make_run(dir, 3);
  resumed.trainer->load_snapshot(latest.path);
  resumed.trainer->run();
  CHECK(latest_complete_snapshot(*comm, dir).iteration == 12);
}

TEST_CASE("a missing, truncated or corrupted file is an error on every rank that names the rank and path") {
  auto comm = world();
  const int rank = comm->rank(), last = comm->size() - 1;
  const std::string base = two_epochs("damaged");
  const std::string dir = rank_dir(base, rank);
  const std::string path = dir + "/snapshot_iter_8.npz";
  const std::string last_path = rank_dir(base, last) + "/snapshot_iter_8.npz";
  const std::string good = read_all(path);
  const std::size_t last_size = read_all(last_path).size();
  comm->barrier();  // every rank has read the intact files before one is damaged
  const std::string prefix = "the complete snapshot of iteration 8 (" + base + "/" + kSnapshotManifest +
                             ") cannot be resumed: rank " + std::to_string(last) + ": " + last_path;

  SECTION("corrupted: same size, one byte changed") {
    if (rank == last) {
      std::string bad = good;
      bad[bad.size() / 2] = static_cast<char>(bad[bad.size() / 2] ^ 0x5a);
      write_all(path, bad);
    }
    comm->barrier();
    const std::string error = error_of([&] { latest_complete_snapshot(*comm, dir); });
    CHECK_THAT(error, Contains("latest_complete_snapshot (rank " + std::to_string(rank) + " of "));
    CHECK_THAT(error, Contains(prefix + " does not match its digest in the manifest"));
  }
  SECTION("truncated") {
    if (rank == last) write_all(path, good.substr(0, 100));
    comm->barrier();
    CHECK_THAT(error_of([&] { latest_complete_snapshot(*comm, dir); }),
               Contains(prefix + " has 100 bytes, the manifest records " + std::to_string(last_size)));
  }
  SECTION("missing on two ranks: both are named") {
    if (rank == last || rank == 0) REQUIRE(std::remove(path.c_str()) == 0);
    comm->barrier();
    const std::string error = error_of([&] { latest_complete_snapshot(*comm, dir); });
    CHECK_THAT(error, Contains("rank 0: " + base + "/snapshot_iter_8.npz is missing (No such file or directory)"));
    CHECK_THAT(error, Contains("rank " + std::to_string(last) + ": " + last_path + " is missing"));
  }
  comm->barrier();
}

TEST_CASE("no manifest, a malformed one, or one of another number of ranks is an error on every rank") {
  auto comm = world();
  const int rank = comm->rank(), size = comm->size();
  {
    const std::string base = fresh_base("no_manifest");
    // Snapshots without a manifest (SnapshotWriter's) are not complete ones.
    if (rank == 0) make_run(base, 1).trainer->save_snapshot(base + "/snapshot_iter_4.npz");
    comm->barrier();
    CHECK_THAT(error_of([&] { latest_complete_snapshot(*comm, rank_dir(base, rank)); }),
               Contains("no snapshot manifest " + base + "/" + kSnapshotManifest +
                        " (No such file or directory): no snapshot has been completed by all ranks"));
  }
  {
    const std::string base = two_epochs("malformed");
    if (rank == 0) {
      std::string text = read_all(base + "/" + kSnapshotManifest);
      write_all(base + "/" + kSnapshotManifest, text.substr(0, text.size() / 2));
    }
    comm->barrier();
    CHECK_THAT(error_of([&] { latest_complete_snapshot(*comm, rank_dir(base, rank)); }),
               Contains("snapshot manifest " + base + "/" + kSnapshotManifest + " is malformed"));
  }
  {
    // A job of one rank fewer writes the manifest; this job cannot resume from it.
    const std::string base = fresh_base("fewer_ranks");
    CommunicatorPtr part = comm->split(rank < size - 1 ? 0 : 1, rank);
    if (rank < size - 1) make_run(rank_dir(base, part->rank()), 1, {}, part).trainer->run();
    comm->barrier();
    CHECK_THAT(error_of([&] { latest_complete_snapshot(*comm, rank_dir(base, rank)); }),
               Contains("the snapshot manifest " + base + "/" + kSnapshotManifest + " was written by a job of " +
                        std::to_string(size - 1) + " ranks; this job has " + std::to_string(size)));
  }
}

TEST_CASE("a damaged manifest is an error naming it and what is wrong, never a crash") {
  auto comm = world();
  const int rank = comm->rank();
  const std::string base = two_epochs("damaged");
  const std::string path = base + "/" + kSnapshotManifest;
  const std::string good = read_all(path);
  comm->barrier();  // every rank has read it before rank 0 overwrites it
  // `good` with its first `from` replaced by `to`.
  const auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const auto at = text.find(from);
    CHECK(at != std::string::npos);
    return at == std::string::npos ? text : text.replace(at, from.size(), to);
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "parse error at line 1, column 1"},
      {"\xff\xfe", "parse error"},
      {good + "}", "parse error"},
      {std::string(100000, '[') + std::string(100000, ']'), "the manifest has the wrong type"},
      {"[1, 2]", "the manifest has the wrong type"},
      {"{}", "no \"format\""},
      {edited("tandem multi-node snapshot manifest 1", "tandem manifest 2"), "\"format\" is not \""},
      {edited("\"iteration\": 8", "\"iteration\": -8"), "\"iteration\" is negative"},
      {edited("\"iteration\": 8", "\"iteration\": 8.5"), "\"iteration\" has the wrong type"},
      {edited("\"iteration\": 8", "\"iteration\": \"8\""), "\"iteration\" has the wrong type"},
      {edited("\"iteration\": 8", "\"iteration\": 99999999999999999999"), "\"iteration\" has the wrong type"},
      {edited("\"iteration\": 8", "\"iteration\": 18446744073709551615"), "\"iteration\" is too large"},
      {edited("\"ranks\": ", "\"ranks\": 1"), "entries for 1"},
      {edited("{\"rank\": 0", "{\"rank\": 1"), "file entry 0 is for rank 1"},
      {edited("\"fnv1a64\": \"", "\"fnv1a64\": \"0"), "file entry 0 is malformed"},
      {edited("\"complete\": [4, 8]", "\"complete\": [4, null]"), "an entry of \"complete\" has the wrong type"},
      {edited("\"complete\": [4, 8]", "\"complete\": {}"), "\"complete\" has the wrong type"},
  };
  for (const auto& [text, why] : cases) {
    if (rank == 0) write_all(path, text);
    comm->barrier();
    const std::string error = error_of([&] { latest_complete_snapshot(*comm, rank_dir(base, rank)); });
    CHECK_THAT(error, Contains("snapshot manifest " + path + " is malformed: ") && Contains(why));
    comm->barrier();
  }
  // The writer replaces a damaged manifest, starting its list of complete snapshots again.
  if (rank == 0) write_all(path, "{\"format\":");
  comm->barrier();
  Run resumed = make_run(rank_dir(base, rank), 3);
  resumed.trainer->load_snapshot(rank_dir(base, rank) + "/snapshot_iter_8.npz");
  resumed.trainer->run();
  CHECK_THAT(read_all(path), Contains("\"complete\": [12]"));
  CHECK(latest_complete_snapshot(*comm, rank_dir(base, rank)).iteration == 12);
}

TEST_CASE("keep: every rank deletes its files of the complete snapshots beyond the newest few") {
  auto comm = world();
  const std::string base = fresh_base("keep");
  const std::string dir = rank_dir(base, comm->rank());
  MultiNodeSnapshotOptions options;
  options.keep = 2;
  make_run(dir, 4, options).trainer->run();
  CHECK(!exists(dir + "/snapshot_iter_4.npz"));
  CHECK(!exists(dir + "/snapshot_iter_8.npz"));
  CHECK(exists(dir + "/snapshot_iter_12.npz"));
  CHECK(exists(dir + "/snapshot_iter_16.npz"));
  CHECK_THAT(read_all(base + "/" + kSnapshotManifest), Contains("\"complete\": [12, 16]"));
  CHECK(latest_complete_snapshot(*comm, dir).iteration == 16);
}

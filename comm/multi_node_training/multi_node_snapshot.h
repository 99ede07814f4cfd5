// Checkpoint and resume across ranks: snapshots that a crash can never leave half-taken.
//
// Each rank of a multi-rank job snapshots its own part of the run (its model part, optimizer
// and iterator; Trainer::save_snapshot) into its own directory, the trainer's out(): by the
// trainers' convention <out> on rank 0 and <out>/rank<r> on rank r. A snapshot of iteration N
// is *complete* when every rank's file of iteration N is on disk; only a complete one can be
// resumed. MultiNodeSnapshotWriter takes them, on its trigger:
//   1. every rank writes <its out>/<prefix><N>.npz atomically (temporary file, fsync, rename;
//      then its directory is synced) and computes the file's size and digest (FNV-1a 64);
//   2. the ranks agree: rank 0 gathers every rank's outcome (size and digest, or the error);
//   3. only if every rank succeeded, rank 0 atomically replaces the manifest
//      <rank 0's out>/snapshot_manifest.json, which names the iteration, the number of ranks and
//      each rank's file with its size and digest:
//        {"format": "tandem multi-node snapshot manifest 1", "iteration": 240, "ranks": 2,
//         "files": [{"rank": 0, "path": "snapshot_iter_240.npz", "bytes": 1234,
//                    "fnv1a64": "89abcdef01234567"},
//                   {"rank": 1, "path": "rank1/snapshot_iter_240.npz", ...}],
//         "complete": [120, 240]}
//      ("path" is relative to the manifest's directory when the file is under it; "complete"
//      lists the complete snapshots still on disk, oldest first);
//   4. rank 0 broadcasts the outcome: a failed write on any rank is an error on every rank that
//      names the rank, and the manifest still names the previous complete snapshot. With
//      keep > 0, every rank then deletes its files of the complete snapshots beyond the newest
//      `keep`.
// A crash anywhere before step 3's rename leaves the manifest naming the previous complete
// snapshot: files of iteration N that some ranks wrote are ignored on resume, and overwritten
// when the resumed run reaches N again. Every rank must run the writer on the same trigger (it
// is a collective).
//
// latest_complete_snapshot is `--resume latest`: rank 0 reads the manifest and broadcasts it;
// every rank checks that the manifest is for a job of this many ranks and that its own file of
// that iteration is there with the recorded size and digest; the ranks then share their
// verdicts, so a missing manifest, a rank-count mismatch, or a missing, truncated or corrupted
// file on any rank is the same error on every rank, naming the rank and the path (never a hang,
// never a resume of some ranks only).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/transport/communicator.h"
#include "training/trainer.h"

namespace tandem {

// The manifest's file name, in rank 0's out directory.
inline constexpr const char* kSnapshotManifest = "snapshot_manifest.json";

struct MultiNodeSnapshotOptions {
  std::string prefix = "snapshot_iter_";  // files are <out>/<prefix><iteration>.npz
  int keep = 0;  // complete snapshots kept on disk (older ones are deleted); 0 keeps them all
};

class MultiNodeSnapshotWriter final : public Extension {
 public:
  explicit MultiNodeSnapshotWriter(CommunicatorPtr comm, MultiNodeSnapshotOptions options = {});
  std::string name() const override { return "MultiNodeSnapshotWriter"; }
  int priority() const override { return -100; }  // last, like SnapshotWriter
  void operator()(Trainer& trainer) override;

 private:
  // Rank 0: writes the manifest if every rank succeeded. Returns the outcome to broadcast.
  std::string commit(const Trainer& trainer, std::int64_t iteration, const std::vector<std::string>& records);

  CommunicatorPtr comm_;
  MultiNodeSnapshotOptions options_;
};

std::shared_ptr<MultiNodeSnapshotWriter> create_multi_node_snapshot_writer(CommunicatorPtr comm,
                                                                           MultiNodeSnapshotOptions options = {});

struct CompleteSnapshot {
  std::int64_t iteration = 0;
  std::string path;  // this rank's file: <out_dir>/<file name in the manifest>
};

// The newest snapshot that every rank completed, for this rank (a collective). out_dir is this
// rank's own directory (its trainer's out(); the manifest is read from rank 0's). Each rank
// loads its file from its own directory, under the name the manifest records. Throws on every
// rank when there is no usable complete snapshot (see above).
CompleteSnapshot latest_complete_snapshot(Communicator& comm, const std::string& out_dir);

}  // namespace tandem

// Sharded checkpoints: every rank writes the pieces it owns, in parallel, into one directory
// with a manifest (checkpoint_manifest.h); any layout loads them, each rank reading only the byte
// ranges it needs. PyTorch's torch.distributed.checkpoint and Megatron's dist_checkpointing do
// the same; here a change of layout that cannot work is an error naming the tensor, never a
// silent half-load.
//
// Saving (collective over every rank of the job):
//   1. every rank describes its pieces (ShardEntry: a tensor's global name, its box, a range of
//      the box's elements); rank 0 gathers the descriptions, works out each tensor's global
//      shape (the boxes of a tensor-parallel split laid side by side), keeps one copy of each
//      piece that several ranks hold (replicas: data-parallel ranks, a tensor group's
//      replicated parameters) and gives it to the holder with the fewest bytes so far;
//   2. every rank writes its pieces into <root>/step_<N>.partial/rank<r>.bin (fsync), with a
//      digest per 1 MiB block;
//   3. rank 0 writes the manifest into the directory and renames it to <root>/step_<N>: a
//      checkpoint is there whole or not at all, and a directory that still ends in .partial (a
//      save cut short by a crash) is never read. A failure on any rank is an error on every
//      rank naming it, and the previous checkpoint stays the newest.
// A SavingCheckpoint splits the save so that step 2 can run in a thread while training goes on
// (the pieces are first copied to host memory): see checkpoint_writer.h.
//
// Loading (collective): every rank describes the pieces it needs the same way; rank 0 checks
// them against the manifest: a tensor the layout needs that the checkpoint lacks, a global shape
// or dtype that differs, or a tensor of the checkpoint that no rank asks for (unless its name
// starts with one of options.ignore) is an error on every rank naming the tensor. Each rank
// then reads the blocks that hold its bytes, checks their digests and copies its elements.
//
// All ranks must see the same filesystem (one machine, or a shared one).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/checkpoint/checkpoint_manifest.h"
#include "comm/checkpoint/staging_buffer.h"
#include "comm/transport/communicator.h"
#include "core/tensor.h"

namespace tandem {

// A rank's piece of a tensor, to save or to load.
struct ShardEntry {
  std::string name;  // the tensor's global name
  // Saving: this rank's elements; loading: where they go (allocated, with the checkpoint's dtype,
  // on any device). The box's shape, or [end - begin] for a range of the box's elements.
  Tensor value;
  Shape box;  // the shape of this rank's box
  // A split over a group of ranks: the box is the split_index-th of split_count boxes laid side
  // by side along split_axis (tensor parallelism; the group's boxes may differ in extent along
  // it). -1: the box is the whole tensor.
  int split_axis = -1, split_index = 0, split_count = 1;
  std::int64_t begin = 0, end = -1;  // elements [begin, end) of the box (ZeRO); -1: to its end
  // Saving: every rank that holds this piece holds the same bytes, or the save is an error
  // naming the ranks (state each rank keeps for itself that the checkpoint keeps once: an
  // iterator's order, a random stream).
  bool check_replicas = false;
  // Saving: where the piece comes from when that is not in its name (a pipeline stage's id): two
  // ranks whose pieces have the same name and place but different origins are an error, never
  // taken for replicas of each other.
  std::string origin;
};

struct CheckpointSaveOptions {
  int keep = 0;        // complete checkpoints kept in root (older ones are deleted); 0: all
  // Copy this rank's pieces into this buffer first (for a write in another thread, while the
  // tensors change); null: write from the tensors themselves.
  StagingBuffer* staging = nullptr;
};

// "<root>/step_<step>".
std::string checkpoint_directory(const std::string& root, std::int64_t step);

// One save in progress (steps 1-3 above).
class SavingCheckpoint {
 public:
  // Step 1 (collective): the plan, and this rank's pieces (copied into options.staging if given).
  SavingCheckpoint(Communicator& comm, std::string root, std::int64_t step, const std::vector<ShardEntry>& entries,
                   std::map<std::string, std::string> info, CheckpointSaveOptions options = {});
  // Step 2 (this rank only; from any thread): writes this rank's file. Never throws: a failure
  // is reported by commit.
  void write();
  // Step 3 (collective): returns the checkpoint's directory, or throws on every rank.
  std::string commit(Communicator& comm);

  std::int64_t step() const { return step_; }
  std::int64_t bytes_written() const { return bytes_; }

 private:
  std::string root_, partial_;
  std::int64_t step_;
  CheckpointSaveOptions options_;
  int rank_ = 0;
  std::vector<std::pair<const char*, std::size_t>> pieces_;  // this rank's file, in order
  std::vector<Tensor> held_;                                 // the host tensors pieces_ point into
  CheckpointManifest manifest_;                          // rank 0: without the files' digests
  std::string outcome_;                                  // this rank's write: JSON
  std::int64_t bytes_ = 0;
};

// A synchronous save: all three steps. Returns the checkpoint's directory.
std::string save_sharded_checkpoint(Communicator& comm, const std::string& root, std::int64_t step,
                                    const std::vector<ShardEntry>& entries,
                                    const std::map<std::string, std::string>& info = {},
                                    const CheckpointSaveOptions& options = {});

// The newest complete checkpoint in root (its directory), "" when there is none: the one committed
// last (root/latest names it), else the highest step. Collective: rank 0 looks, every rank gets
// its answer.
std::string latest_sharded_checkpoint(Communicator& comm, const std::string& root);
// A checkpoint's manifest, read by rank 0 and given to every rank (collective).
CheckpointManifest read_sharded_checkpoint_manifest(Communicator& comm, const std::string& directory);

struct CheckpointLoadOptions {
  std::vector<std::string> ignore;  // name prefixes of the checkpoint's tensors no rank needs to ask for
};

struct CheckpointLoadStats {
  std::int64_t bytes_read = 0;  // by this rank, whole blocks included
};

// Fills every request's value from the checkpoint in `directory` (collective; see above).
CheckpointLoadStats load_sharded_checkpoint(Communicator& comm, const std::string& directory,
                                            const CheckpointManifest& manifest, std::vector<ShardEntry>& requests,
                                            const CheckpointLoadOptions& options = {});

// One process, no communicator (tools): the manifest, and a whole tensor.
CheckpointManifest read_checkpoint_manifest(const std::string& directory);
Tensor read_checkpoint_tensor(const std::string& directory, const CheckpointManifest& manifest,
                              const std::string& name);

}  // namespace tandem

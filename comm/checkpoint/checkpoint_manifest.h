// The manifest of a sharded checkpoint (sharded_checkpoint.h): what a checkpoint directory holds.
//
//   <root>/step_<N>/manifest.json   this file, written last: a directory without one is not a
//                                   checkpoint (a save that did not finish)
//   <root>/step_<N>/rank<r>.bin     the pieces rank r wrote, back to back
//
// manifest.json:
//   {"format": "tandem checkpoint 1", "step": 40, "ranks": 4,
//    "info": {"layout": "tp 2 x pp 2 x dp 1", ...},          (strings the trainer adds)
//    "files": [{"path": "rank0.bin", "bytes": 1234, "block_bytes": 1048576,
//               "digests": ["89abcdef01234567", ...]}, ...],  (one per block of the file)
//    "tensors": {"model/block0/attn/qkv/W": {"dtype": "f32", "shape": [96, 32],
//                 "chunks": [{"file": 0, "at": 0, "offsets": [0, 0], "box": [48, 32],
//                             "begin": 0, "end": 1536}, ...]}, ...}}
// Each tensor's chunks are pieces of it (shard_placement.h) that together hold every element
// once; a chunk's elements lie at bytes [at, at + elements x dtype size) of its file. A block's
// digest is the word-wise FNV-1a of core/hash.h (Fnv1a64::mix over its 8-byte little-endian words,
// then its last bytes one by one), so a reader checks every block it reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/checkpoint/shard_placement.h"
#include "core/dtype.h"

namespace tandem {

inline constexpr const char* kCheckpointFormat = "tandem checkpoint 1";
inline constexpr const char* kCheckpointManifestName = "manifest.json";
// <root>/latest: "step_<N>", the checkpoint committed last (what --resume-checkpoint latest takes).
inline constexpr const char* kLatestCheckpointName = "latest";
inline constexpr std::int64_t kCheckpointBlockBytes = 1 << 20;

struct CheckpointFile {
  std::string path;  // relative to the checkpoint's directory
  std::int64_t bytes = 0;
  std::int64_t block_bytes = kCheckpointBlockBytes;
  std::vector<std::uint64_t> digests;  // one per block
};

struct CheckpointChunk {
  int file = 0;
  std::int64_t at = 0;  // byte offset in the file
  ShardPlacement placement;
};

struct CheckpointTensor {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<CheckpointChunk> chunks;
};

struct CheckpointManifest {
  std::int64_t step = 0;
  int ranks = 0;
  std::map<std::string, std::string> info;
  std::vector<CheckpointFile> files;
  std::map<std::string, CheckpointTensor> tensors;

  std::int64_t total_bytes() const;
};

std::string format_checkpoint_manifest(const CheckpointManifest& manifest);
// Whatever is not a well-formed manifest (syntax, types, a chunk outside its tensor or its
// file, chunks that do not hold every element once) is an error naming `source`.
CheckpointManifest parse_checkpoint_manifest(const std::string& text, const std::string& source);

// The digest of one block (see above).
std::uint64_t checkpoint_block_digest(const void* data, std::size_t bytes);
std::string digest_hex(std::uint64_t digest);

}  // namespace tandem

// Fuzz target: the sharded checkpoint's manifest parser, comm/checkpoint/checkpoint_manifest.h.
//
// The input is the text of a manifest.json. parse_checkpoint_manifest must turn any input into
// a manifest or a tandem::Error. A manifest it accepts must hold what its header promises, since
// the loader trusts it (it allocates each tensor from its shape and copies chunks by their
// placements without checking them again): every file a plain name with one digest per block;
// every chunk a piece of its tensor (ShardPlacement::check) inside its file; each tensor's
// elements held exactly once by its chunks (counted without overflow, and, for tensors small
// enough to walk, no element in two chunks); and formatting it gives a manifest that parses back
// to the same text.
#include <cstdint>
#include <sstream>
#include <string>

#include "comm/checkpoint/checkpoint_manifest.h"
#include "comm/checkpoint/shard_placement.h"
#include "core/error.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;

namespace {

std::string shape_text(const Shape& shape) {
  std::ostringstream out;
  out << shape;
  return out.str();
}

// The product of the extents, or -1 past 2^62 (no overflow, whatever the extents).
std::int64_t exact_numel(const Shape& shape) {
  __int128 n = 1;
  for (std::int64_t e : shape) {
    if (e < 0) return -1;
    n *= e;
    if (n > (__int128(1) << 62)) {
      // Still 0 if a later extent is 0.
      for (std::int64_t z : shape)
        if (z == 0) return 0;
      return -1;
    }
  }
  return static_cast<std::int64_t>(n);
}

void check_accepted(const CheckpointManifest& m) {
  FUZZ_REQUIRE(m.ranks >= 1, "checkpoint_manifest_fuzzer: accepted ranks " + std::to_string(m.ranks));
  FUZZ_REQUIRE(m.step >= 0, "checkpoint_manifest_fuzzer: accepted step " + std::to_string(m.step));
  for (const CheckpointFile& f : m.files) {
    FUZZ_REQUIRE(!f.path.empty() && f.path.find('/') == std::string::npos && f.path[0] != '.',
                 "checkpoint_manifest_fuzzer: accepted the file path '" + f.path + "'");
    FUZZ_REQUIRE(f.bytes >= 0 && f.block_bytes >= 8 && f.block_bytes % 8 == 0,
                 "checkpoint_manifest_fuzzer: accepted " + f.path + " of " + std::to_string(f.bytes) +
                     " bytes in blocks of " + std::to_string(f.block_bytes));
    const std::int64_t blocks = (f.bytes + f.block_bytes - 1) / f.block_bytes;
    FUZZ_REQUIRE(static_cast<std::int64_t>(f.digests.size()) == blocks,
                 "checkpoint_manifest_fuzzer: accepted " + f.path + " with " + std::to_string(f.digests.size()) +
                     " digests for " + std::to_string(blocks) + " blocks");
  }
  for (const auto& [name, t] : m.tensors) {
    const std::int64_t numel = exact_numel(t.shape);
    // Each element once, counted.
    __int128 held = 0;
    for (const CheckpointChunk& c : t.chunks) {
      FUZZ_REQUIRE(c.file >= 0 && c.file < static_cast<int>(m.files.size()),
                   "checkpoint_manifest_fuzzer: '" + name + "': a chunk of file " + std::to_string(c.file));
      FUZZ_REQUIRE(c.placement.global == t.shape, "checkpoint_manifest_fuzzer: '" + name + "': a chunk's global shape");
      try {
        c.placement.check("checkpoint_manifest_fuzzer");
      } catch (const Error& e) {
        FUZZ_REQUIRE(false, "checkpoint_manifest_fuzzer: '" + name +
                                "': accepted a chunk that check() rejects: " + std::string(e.what()));
      }
      const std::int64_t box = exact_numel(c.placement.box);
      FUZZ_REQUIRE(box >= 0 && c.placement.begin >= 0 && c.placement.begin <= c.placement.end && c.placement.end <= box,
                   "checkpoint_manifest_fuzzer: '" + name + "': accepted the chunk " + c.placement.str() +
                       " (a box of more than 2^62 elements, or a range outside its box)");
      const __int128 end = __int128(c.at) + __int128(c.placement.numel()) * dtype_size(t.dtype);
      FUZZ_REQUIRE(c.at >= 0 && end <= m.files[c.file].bytes, "checkpoint_manifest_fuzzer: '" + name +
                                                                  "': a chunk at byte " + std::to_string(c.at) +
                                                                  " past the end of " + m.files[c.file].path);
      held += c.placement.numel();
    }
    FUZZ_REQUIRE(numel >= 0 && held == numel, "checkpoint_manifest_fuzzer: accepted '" + name + "' whose chunks hold " +
                                                  std::to_string(static_cast<long long>(held)) + " elements of " +
                                                  (numel < 0 ? std::string("more than 2^62") : std::to_string(numel)) +
                                                  " (shape " + shape_text(t.shape) + ")");
    // ... and no element in two chunks (only where that is cheap to walk).
    if (numel <= (1 << 16) && t.chunks.size() <= 64) {
      for (std::size_t i = 0; i < t.chunks.size(); ++i)
        for (std::size_t j = i + 1; j < t.chunks.size(); ++j) {
          std::int64_t shared = 0;
          for_each_shared_run(t.chunks[i].placement, t.chunks[j].placement,
                              [&](std::int64_t, std::int64_t, std::int64_t n) { shared += n; });
          FUZZ_REQUIRE(shared == 0, "checkpoint_manifest_fuzzer: accepted '" + name + "' whose chunks " +
                                        t.chunks[i].placement.str() + " and " + t.chunks[j].placement.str() +
                                        " share " + std::to_string(shared) + " elements (and so miss as many)");
        }
    }
  }
  // Formatting and parsing again gives the same manifest.
  const std::string formatted = format_checkpoint_manifest(m);
  CheckpointManifest again;
  try {
    again = parse_checkpoint_manifest(formatted, "formatted");
  } catch (const Error& e) {
    FUZZ_REQUIRE(false, "checkpoint_manifest_fuzzer: a formatted manifest does not parse: " + std::string(e.what()));
  }
  FUZZ_REQUIRE(format_checkpoint_manifest(again) == formatted,
               "checkpoint_manifest_fuzzer: a manifest changes when formatted and parsed again");
  FUZZ_REQUIRE(again.total_bytes() == m.total_bytes(), "checkpoint_manifest_fuzzer: total_bytes changed");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  CheckpointManifest manifest;
  try {
    manifest = parse_checkpoint_manifest(text, "fuzz/manifest.json");
  } catch (const Error&) { return 0; }
  check_accepted(manifest);
  return 0;
}

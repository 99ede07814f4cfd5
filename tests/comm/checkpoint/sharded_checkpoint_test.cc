// Sharded checkpoints (comm/checkpoint/sharded_checkpoint.h) on 1 to 4 ranks.
//
// Every rank saves pieces of a few global tensors (f32, f64, bf16, i64; 0-D to 3-D) under one
// layout: tensor-parallel splits with uneven extents (a zero extent among them on 3 and 4
// ranks), ZeRO-like element ranges of a box (two per rank for one tensor, an empty one on 4
// ranks), a split box cut again into ranges, replicas held by several ranks with and without
// check_replicas. They load under other layouts (another split axis and count, other ranges,
// whole tensors on every rank), and every element is compared with the global tensor that one
// process computes from the element's global index. Then: the manifest (each tensor stored once,
// the files' sizes and digests), keep and latest_sharded_checkpoint, and the errors that must
// reach every rank naming what is wrong (replicas that differ, a missing, unused, mistyped or
// misshapen tensor, a damaged or truncated file) without a hang.
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/checkpoint/checkpoint_manifest.h"
#include "comm/checkpoint/shard_placement.h"
#include "comm/checkpoint/sharded_checkpoint.h"
#include "comm/transport/communicator.h"
#include "core/error.h"
#include "core/tensor.h"

using namespace tandem;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

std::int64_t product(const Shape& shape) {
  std::int64_t n = 1;
  for (std::int64_t e : shape) n *= e;
  return n;
}

// A fresh directory for one test case, shared by every rank: rank 0 makes it under TEST_TMPDIR
// and tells the others.
std::string fresh_directory(const std::string& name) {
  auto comm = world();
  std::string dir;
  if (comm->rank() == 0) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string pattern =
        std::string(tmp ? tmp : "/tmp") + "/" + name + "_" + std::to_string(comm->size()) + "ranks_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    REQUIRE(::mkdtemp(buffer.data()) != nullptr);
    dir = buffer.data();
  }
  return comm->bcast_obj(dir, 0);
}

// ---- the global tensors ---------------------------------------------------------------------

struct Global {
  std::string name;
  DType dtype;
  Shape shape;
  int seed;
};

// Element g of a global tensor, as bytes: distinct per element and tensor, exact in its dtype.
void element_bytes(const Global& t, std::int64_t g, char* out) {
  switch (t.dtype) {
    case DType::f32: {
      const float v = 0.25f * static_cast<float>(t.seed * 1000 + g) - 3.0f;
      std::memcpy(out, &v, 4);
      break;
    }
    case DType::f64: {
      const double v = t.seed * 1e6 + 0.5 * static_cast<double>(g) - 7.0;
      std::memcpy(out, &v, 8);
      break;
    }
    case DType::i64: {
      const std::int64_t v = (std::int64_t(t.seed) << 40) - 3 * g - 1;
      std::memcpy(out, &v, 8);
      break;
    }
    case DType::bf16: {  // finite bfloat16 bit patterns, distinct for the first 0x3000 elements
      const std::uint16_t v = static_cast<std::uint16_t>(0x3c00 + (g + 13 * t.seed) % 0x3000);
      std::memcpy(out, &v, 2);
      break;
    }
    default:
      FAIL("element_bytes: no values for " << dtype_name(t.dtype));
  }
}

// The global index of each of a piece's stored elements (element by element: the box's
// coordinates of element begin + j, shifted by the offsets, raveled in the global shape).
std::vector<std::int64_t> global_indices(const ShardPlacement& p) {
  std::vector<std::int64_t> out;
  const std::size_t axes = p.global.size();
  for (std::int64_t k = p.begin; k < p.end; ++k) {
    std::vector<std::int64_t> coord(axes);
    std::int64_t rest = k;
    for (std::size_t a = axes; a-- > 0;) {
      coord[a] = rest % p.box[a];
      rest /= p.box[a];
    }
    std::int64_t g = 0;
    for (std::size_t a = 0; a < axes; ++a) g = g * p.global[a] + coord[a] + p.offsets[a];
    out.push_back(g);
  }
  return out;
}

// The piece's elements of the global tensor, as the piece stores them.
std::string expected_bytes(const Global& t, const ShardPlacement& p) {
  const std::size_t size = dtype_size(t.dtype);
  const std::vector<std::int64_t> indices = global_indices(p);
  std::string out(indices.size() * size, '\0');
  for (std::size_t j = 0; j < indices.size(); ++j) element_bytes(t, indices[j], out.data() + j * size);
  return out;
}

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.raw_data()), t.nbytes()); }

// Where element i of each stored piece differs first, for a readable failure.
std::string first_difference(const std::string& got, const std::string& want, std::size_t element) {
  if (got.size() != want.size())
    return "sizes differ: " + std::to_string(got.size()) + " and " + std::to_string(want.size()) + " bytes";
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return "element " + std::to_string(i / element) + " differs";
  return "equal";
}

// ---- pieces: a ShardEntry together with the placement the test expects it to have ------------

struct Piece {
  const Global* tensor;
  ShardPlacement placement;
  ShardEntry entry;
};

// Extents of `count` boxes along an axis of `total`: uneven (the first one larger, zeros where
// total < count), rotated by `rotate` so that two layouts of the same count differ.
std::vector<std::int64_t> uneven_extents(std::int64_t total, int count, int rotate = 0) {
  std::vector<std::int64_t> e(count, total / count);
  for (int i = 0; i < total % count; ++i) ++e[i];
  if (count >= 2 && e[count - 1] > 0) {
    --e[count - 1];
    ++e[0];
  }
  std::rotate(e.begin(), e.begin() + (rotate % count), e.end());
  return e;
}

// Cut points 0 = c_0 <= ... <= c_m = n of m uneven ranges (quadratic: the first ones short).
std::vector<std::int64_t> uneven_cuts(std::int64_t n, int m) {
  std::vector<std::int64_t> c(m + 1);
  for (int i = 0; i <= m; ++i) c[i] = n * i * i / (std::int64_t(m) * m);
  return c;
}

// Piece `index` of `extents` along `axis` (-1: the whole tensor), elements [begin, end) of its
// box (end -1: to the box's end). `fill`: the value holds the global tensor's elements (a save),
// otherwise a sentinel (a load).
Piece piece(const Global& t, int axis, const std::vector<std::int64_t>& extents, int index, std::int64_t begin = 0,
            std::int64_t end = -1, bool fill = true) {
  Piece p;
  p.tensor = &t;
  p.placement.global = t.shape;
  p.placement.offsets.assign(t.shape.size(), 0);
  p.placement.box = t.shape;
  if (axis >= 0) {
    std::int64_t at = 0;
    for (int i = 0; i < index; ++i) at += extents[i];
    p.placement.offsets[axis] = at;
    p.placement.box[axis] = extents[index];
  }
  const std::int64_t n = product(p.placement.box);
  p.placement.begin = begin;
  p.placement.end = end < 0 ? n : end;
  p.placement.check("test piece of '" + t.name + "'");
  ShardEntry& e = p.entry;
  e.name = t.name;
  e.box = p.placement.box;
  e.split_axis = axis;
  e.split_index = axis >= 0 ? index : 0;
  e.split_count = axis >= 0 ? static_cast<int>(extents.size()) : 1;
  e.begin = begin;
  e.end = end;
  const bool whole_box = begin == 0 && (end < 0 || end == n);
  e.value = Tensor(whole_box ? p.placement.box : Shape{p.placement.numel()}, t.dtype);
  if (fill) {
    const std::string bytes = expected_bytes(t, p.placement);
    if (!bytes.empty()) std::memcpy(e.value.raw_data(), bytes.data(), bytes.size());
  } else if (e.value.nbytes() > 0) {
    std::memset(e.value.raw_data(), 0x5a, e.value.nbytes());
  }
  return p;
}

Piece whole(const Global& t, bool fill = true) { return piece(t, -1, {}, 0, 0, -1, fill); }

std::vector<ShardEntry> entries_of(const std::vector<Piece>& pieces) {
  std::vector<ShardEntry> out;
  for (const Piece& p : pieces) out.push_back(p.entry);
  return out;
}

// After a load: every piece holds exactly its elements of the global tensor.
void require_loaded(const std::vector<Piece>& pieces, const std::vector<ShardEntry>& loaded) {
  REQUIRE(loaded.size() == pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    INFO("rank " << world()->rank() << ": '" << p.tensor->name << "' " << p.placement.str());
    REQUIRE(loaded[i].value.dtype() == p.tensor->dtype);
    const std::string got = bytes_of(loaded[i].value), want = expected_bytes(*p.tensor, p.placement);
    INFO(first_difference(got, want, dtype_size(p.tensor->dtype)));
    REQUIRE(got == want);
  }
}

// The test's tensors.
const Global kTp{"model/tp/w", DType::f32, {5, 9, 3}, 1};       // 3-D, tensor-parallel
const Global kZero{"model/zero/m", DType::f64, {6, 7}, 2};      // 2-D, tp x ZeRO ranges
const Global kEmb{"model/rep/emb", DType::bf16, {3, 4, 5}, 3};  // 3-D, replicated (checked)
const Global kStep{"state/step", DType::i64, {}, 4};            // 0-D, replicated (checked)
const Global kCounts{"state/counts", DType::i64, {3, 8}, 5};    // 2-D, split in 2, replicated
const Global kFlat{"optim/flat", DType::f32, {50}, 6};          // 1-D, two ZeRO ranges per rank
const std::vector<const Global*> kAll = {&kTp, &kZero, &kEmb, &kStep, &kCounts, &kFlat};

// The layout the checkpoint is saved under, on `n` ranks (this is rank r's part).
std::vector<Piece> save_layout(int n, int r) {
  std::vector<Piece> out;
  // Along axis 1 in n uneven boxes, one of no columns on 3 and 4 ranks.
  {
    const std::vector<std::vector<std::int64_t>> extents = {{9}, {6, 3}, {5, 0, 4}, {4, 0, 3, 2}};
    const std::vector<std::int64_t> mine = n <= 4 ? extents[n - 1] : uneven_extents(9, n);
    out.push_back(piece(kTp, 1, mine, r));
  }
  // Along axis 0 in tp = min(n, 2) boxes (2 and 4 rows), each cut in ranges among the ranks
  // that hold it (r % tp == index).
  {
    const int tp = std::min(n, 2), index = r % tp;
    const int members = (n - index + tp - 1) / tp, position = r / tp;
    const std::vector<std::int64_t> extents = tp == 1 ? std::vector<std::int64_t>{6} : std::vector<std::int64_t>{2, 4};
    const std::vector<std::int64_t> cuts = uneven_cuts(extents[index] * 7, members);
    out.push_back(piece(kZero, tp == 1 ? -1 : 0, extents, index, cuts[position], cuts[position + 1]));
  }
  // Whole on every rank, identical, checked.
  out.push_back(whole(kEmb));
  out.back().entry.check_replicas = true;
  out.push_back(whole(kStep));
  out.back().entry.check_replicas = true;
  // Split in min(n, 2) along axis 1 (3 and 5 columns), each box held by every rank with r % 2 ==
  // index: replicas the save keeps once, unchecked.
  {
    const int count = std::min(n, 2);
    const std::vector<std::int64_t> extents =
        count == 1 ? std::vector<std::int64_t>{8} : std::vector<std::int64_t>{3, 5};
    out.push_back(piece(kCounts, 1, extents, r % count));
  }
  // 2n uneven ranges of the whole tensor; rank r holds ranges r and r + n (on 4 ranks range 1
  // is empty: cuts 0, 0, 3, 7, 12, 19, 28, 38, 50).
  {
    const std::vector<std::int64_t> cuts = uneven_cuts(50, 2 * n);
    out.push_back(piece(kFlat, -1, {}, 0, cuts[r], cuts[r + 1]));
    out.push_back(piece(kFlat, -1, {}, 0, cuts[r + n], cuts[r + n + 1]));
  }
  return out;
}

// Another layout: other split axes and counts, other ranges; sentinel values.
std::vector<Piece> load_layout(int n, int r) {
  std::vector<Piece> out;
  // Along axis 0 (5 rows) in n boxes, rotated; the last rank takes a range of its box only.
  {
    const std::vector<std::int64_t> extents = uneven_extents(5, n, 1);
    const std::int64_t box = extents[r] * 9 * 3;
    if (r == n - 1 && box > 2) out.push_back(piece(kTp, 0, extents, r, 1, box - 1, false));
    else out.push_back(piece(kTp, 0, extents, r, 0, -1, false));
  }
  // Along axis 1 (7 columns) in n uneven boxes, rotated by 2 (saved: rows, cut in ranges).
  out.push_back(piece(kZero, 1, uneven_extents(7, n, 2), r, 0, -1, false));
  // n uneven ranges of the whole tensor.
  {
    const std::vector<std::int64_t> cuts = uneven_cuts(60, n);
    out.push_back(piece(kEmb, -1, {}, 0, cuts[r], cuts[r + 1], false));
  }
  out.push_back(whole(kStep, false));
  // Along axis 0 (3 rows) in n boxes (4 ranks: extents 0, 1, 1, 1: a box of no rows).
  out.push_back(piece(kCounts, 0, uneven_extents(3, n, 3), r, 0, -1, false));
  // Along its only axis in n boxes, and two ranges of each box on ranks whose box allows.
  {
    const std::vector<std::int64_t> extents = uneven_extents(50, n, 1);
    const std::int64_t e = extents[r];
    if (e >= 4) {
      out.push_back(piece(kFlat, 0, extents, r, 0, e / 3, false));
      out.push_back(piece(kFlat, 0, extents, r, e / 2, e, false));
    } else {
      out.push_back(piece(kFlat, 0, extents, r, 0, -1, false));
    }
  }
  return out;
}

std::vector<Piece> whole_layout() {
  std::vector<Piece> out;
  for (const Global* t : kAll) out.push_back(whole(*t, false));
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The manifest against the global tensors and the files on disk.
void require_manifest(const std::string& dir, const CheckpointManifest& m, std::int64_t step, int ranks,
                      const std::vector<const Global*>& tensors) {
  REQUIRE(m.step == step);
  REQUIRE(m.ranks == ranks);
  REQUIRE(m.tensors.size() == tensors.size());
  std::int64_t payload = 0;
  for (const Global* t : tensors) {
    INFO("'" << t->name << "'");
    const auto it = m.tensors.find(t->name);
    REQUIRE(it != m.tensors.end());
    const CheckpointTensor& ct = it->second;
    REQUIRE(ct.dtype == t->dtype);
    REQUIRE(ct.shape == t->shape);
    // Each element stored once: the chunks' elements sum to the numel and none is in two chunks.
    std::int64_t held = 0;
    std::vector<int> seen(static_cast<std::size_t>(product(t->shape)), 0);
    for (const CheckpointChunk& c : ct.chunks) {
      REQUIRE(c.placement.global == t->shape);
      REQUIRE_NOTHROW(c.placement.check("manifest chunk"));
      held += c.placement.numel();
      for (std::int64_t g : global_indices(c.placement)) ++seen[g];
    }
    REQUIRE(held == product(t->shape));
    REQUIRE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; }));
    payload += held * static_cast<std::int64_t>(dtype_size(t->dtype));
  }
  // One file per rank; its bytes are exactly its chunks', back to back; its digests are its
  // blocks'.
  REQUIRE(m.files.size() == static_cast<std::size_t>(ranks));
  REQUIRE(m.total_bytes() == payload);
  for (int f = 0; f < ranks; ++f) {
    const CheckpointFile& file = m.files[f];
    INFO("file " << f << ": " << file.path);
    REQUIRE(file.path == "rank" + std::to_string(f) + ".bin");
    REQUIRE(static_cast<std::int64_t>(fs::file_size(dir + "/" + file.path)) == file.bytes);
    std::vector<std::pair<std::int64_t, std::int64_t>> spans;
    for (const auto& [name, ct] : m.tensors)
      for (const CheckpointChunk& c : ct.chunks)
        if (c.file == f) spans.emplace_back(c.at, c.at + c.placement.numel() * std::int64_t(dtype_size(ct.dtype)));
    std::sort(spans.begin(), spans.end());
    std::int64_t at = 0;
    for (const auto& [from, to] : spans) {
      REQUIRE(from == at);
      at = to;
    }
    REQUIRE(at == file.bytes);
    REQUIRE(file.block_bytes == kCheckpointBlockBytes);
    const std::string bytes = read_file(dir + "/" + file.path);
    const std::int64_t blocks = (file.bytes + file.block_bytes - 1) / file.block_bytes;
    REQUIRE(static_cast<std::int64_t>(file.digests.size()) == blocks);
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t from = b * file.block_bytes, size = std::min(file.block_bytes, file.bytes - from);
      REQUIRE(checkpoint_block_digest(bytes.data() + from, static_cast<std::size_t>(size)) == file.digests[b]);
    }
  }
}

// Every rank runs `action`, which must fail, with a message that contains every one of `parts`.
template <typename F>
void require_error_everywhere(F&& action, const std::vector<std::string>& parts) {
  std::string message;
  try {
    action();
  } catch (const Error& e) { message = e.what(); }
  INFO("rank " << world()->rank() << ": " << message);
  REQUIRE(!message.empty());
  for (const std::string& part : parts) {
    INFO("expected to contain: " << part);
    REQUIRE(message.find(part) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("sharded checkpoint: save under one layout, load under others, every element") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("layouts");
  REQUIRE(latest_sharded_checkpoint(*comm, root).empty());

  const std::vector<Piece> saved = save_layout(n, r);
  const std::map<std::string, std::string> info = {{"layout", "test " + std::to_string(n)}, {"note", "x"}};
  const std::string dir = save_sharded_checkpoint(*comm, root, 40, entries_of(saved), info);
  REQUIRE(dir == checkpoint_directory(root, 40));
  REQUIRE(dir == root + "/step_40");
  REQUIRE(fs::exists(dir + "/" + kCheckpointManifestName));
  REQUIRE(!fs::exists(dir + ".partial"));
  REQUIRE(latest_sharded_checkpoint(*comm, root) == dir);

  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, dir);
  REQUIRE(manifest.info == info);
  require_manifest(dir, manifest, 40, n, kAll);
  // The same manifest read without a communicator.
  REQUIRE(format_checkpoint_manifest(read_checkpoint_manifest(dir)) == format_checkpoint_manifest(manifest));

  SECTION("another layout") {
    const std::vector<Piece> pieces = load_layout(n, r);
    std::vector<ShardEntry> requests = entries_of(pieces);
    const CheckpointLoadStats stats = load_sharded_checkpoint(*comm, dir, manifest, requests);
    require_loaded(pieces, requests);
    REQUIRE(stats.bytes_read > 0);
    REQUIRE(stats.bytes_read <= manifest.total_bytes());
  }
  SECTION("the same layout") {
    const std::vector<Piece> pieces = save_layout(n, r);
    std::vector<ShardEntry> requests = entries_of(pieces);
    for (ShardEntry& e : requests)
      if (e.value.nbytes() > 0) std::memset(e.value.raw_data(), 0, e.value.nbytes());
    load_sharded_checkpoint(*comm, dir, manifest, requests);
    require_loaded(pieces, requests);
  }
  SECTION("whole tensors on every rank") {
    const std::vector<Piece> pieces = whole_layout();
    std::vector<ShardEntry> requests = entries_of(pieces);
    const CheckpointLoadStats stats = load_sharded_checkpoint(*comm, dir, manifest, requests);
    require_loaded(pieces, requests);
    REQUIRE(stats.bytes_read == manifest.total_bytes());  // small files: one block each, read whole
  }
  SECTION("read_checkpoint_tensor, one process") {
    for (const Global* t : kAll) {
      INFO("'" << t->name << "'");
      const Tensor whole_tensor = read_checkpoint_tensor(dir, manifest, t->name);
      REQUIRE(whole_tensor.dtype() == t->dtype);
      REQUIRE(whole_tensor.shape() == t->shape);
      REQUIRE(bytes_of(whole_tensor) == expected_bytes(*t, ShardPlacement::whole(t->shape)));
    }
    REQUIRE_THROWS_WITH(read_checkpoint_tensor(dir, manifest, "model/nope"), Contains("'model/nope'"));
  }
  comm->barrier();
}

TEST_CASE("sharded checkpoint: keep deletes older checkpoints; latest finds the newest complete one") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("keep");
  const std::vector<ShardEntry> entries = entries_of(save_layout(n, r));
  const std::string first = save_sharded_checkpoint(*comm, root, 3, entries);
  REQUIRE(latest_sharded_checkpoint(*comm, root) == first);
  CheckpointSaveOptions options;
  options.keep = 1;
  const std::string second = save_sharded_checkpoint(*comm, root, 12, entries, {}, options);
  REQUIRE(second == root + "/step_12");
  comm->barrier();
  REQUIRE(!fs::exists(first));
  REQUIRE(fs::exists(second + "/" + kCheckpointManifestName));
  REQUIRE(latest_sharded_checkpoint(*comm, root) == second);
  // A save cut short (.partial) and a directory without a manifest are not checkpoints.
  if (r == 0) {
    fs::create_directories(root + "/step_90.partial");
    fs::create_directories(root + "/step_80");
    fs::create_directories(root + "/step_x1");
  }
  comm->barrier();
  REQUIRE(latest_sharded_checkpoint(*comm, root) == second);
  // keep = 2 keeps the two newest complete ones by step number (a save of step 9 after step 12
  // keeps both; the next one, of step 100, deletes step 9, not step 12).
  options.keep = 2;
  const std::string third = save_sharded_checkpoint(*comm, root, 9, entries, {}, options);
  const std::string fourth = save_sharded_checkpoint(*comm, root, 100, entries, {}, options);
  comm->barrier();
  REQUIRE(!fs::exists(third));
  REQUIRE(fs::exists(second));
  REQUIRE(fs::exists(fourth));
  REQUIRE(fs::exists(root + "/step_80"));  // not a checkpoint: left alone
  REQUIRE(latest_sharded_checkpoint(*comm, root) == fourth);
  // The newest loads.
  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, fourth);
  REQUIRE(manifest.step == 100);
  std::vector<Piece> pieces = whole_layout();
  std::vector<ShardEntry> requests = entries_of(pieces);
  load_sharded_checkpoint(*comm, fourth, manifest, requests);
  require_loaded(pieces, requests);
  comm->barrier();
}

TEST_CASE("sharded checkpoint: replicas that differ under check_replicas are an error naming both ranks") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("replicas");
  const Global rng{"state/rng", DType::i64, {4}, 9};
  // The same values everywhere: saved once.
  {
    std::vector<Piece> pieces = {whole(rng), whole(kStep)};
    pieces[0].entry.check_replicas = true;
    const std::string dir = save_sharded_checkpoint(*comm, root, 1, entries_of(pieces));
    const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, dir);
    REQUIRE(manifest.tensors.at("state/rng").chunks.size() == 1);
    REQUIRE(manifest.total_bytes() == 4 * 8 + 8);
  }
  // A value that depends on the rank: unchecked, the save keeps one rank's copy without a word;
  // checked, it is an error on every rank naming the tensor and two ranks that differ.
  std::vector<Piece> pieces = {whole(rng), whole(kStep)};
  pieces[0].entry.value.data<std::int64_t>()[2] += r;
  pieces[0].entry.check_replicas = true;
  if (n == 1) {
    REQUIRE_NOTHROW(save_sharded_checkpoint(*comm, root, 2, entries_of(pieces)));
  } else {
    require_error_everywhere([&] { save_sharded_checkpoint(*comm, root, 2, entries_of(pieces)); },
                             {"'state/rng'", "differs between rank 0 and rank 1"});
    // Nothing committed: the previous checkpoint stays the newest.
    REQUIRE(latest_sharded_checkpoint(*comm, root) == root + "/step_1");
    comm->barrier();
    REQUIRE(!fs::exists(root + "/step_2"));
    // Only the last rank differs: named with rank 0.
    std::vector<Piece> last = {whole(rng), whole(kStep)};
    if (r == n - 1) last[0].entry.value.data<std::int64_t>()[0] = -5;
    last[0].entry.check_replicas = true;
    require_error_everywhere([&] { save_sharded_checkpoint(*comm, root, 3, entries_of(last)); },
                             {"'state/rng'", "rank 0 and rank " + std::to_string(n - 1)});
  }
  comm->barrier();
}

TEST_CASE("sharded checkpoint: a layout that does not match the checkpoint is an error naming the tensor") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("mismatch");
  const std::vector<const Global*> tensors = {&kTp, &kStep, &kFlat};
  std::vector<Piece> saved;
  for (const Global* t : tensors) saved.push_back(whole(*t));
  const std::string dir = save_sharded_checkpoint(*comm, root, 7, entries_of(saved));
  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, dir);
  require_manifest(dir, manifest, 7, n, tensors);

  const auto requests_for = [&](const std::vector<const Global*>& which) {
    std::vector<Piece> out;
    for (const Global* t : which) out.push_back(whole(*t, false));
    return out;
  };
  const auto load = [&](std::vector<Piece> pieces, const CheckpointLoadOptions& options = {}) {
    std::vector<ShardEntry> requests = entries_of(pieces);
    load_sharded_checkpoint(*comm, dir, manifest, requests, options);
    require_loaded(pieces, requests);
  };

  SECTION("a tensor the checkpoint lacks") {
    const Global extra{"model/extra/b", DType::f32, {3}, 11};
    std::vector<Piece> pieces = requests_for(tensors);
    pieces.push_back(whole(extra, false));
    require_error_everywhere([&] { load(pieces); }, {"'model/extra/b'", "which this layout needs"});
  }
  SECTION("a tensor the checkpoint lacks, asked by one rank only") {
    std::vector<Piece> pieces = requests_for(tensors);
    const Global extra{"model/only_last", DType::f32, {2}, 12};
    if (r == n - 1) pieces.push_back(whole(extra, false));
    require_error_everywhere([&] { load(pieces); }, {"'model/only_last'"});
  }
  SECTION("a tensor of the checkpoint that no rank asks for") {
    require_error_everywhere([&] { load(requests_for({&kTp, &kFlat})); }, {"'state/step'", "no rank of this layout"});
  }
  SECTION("... named in ignore: loads without it") {
    CheckpointLoadOptions options;
    options.ignore = {"state/"};
    REQUIRE_NOTHROW(load(requests_for({&kTp, &kFlat}), options));
    options.ignore = {"model/"};  // a prefix of another tensor: still an error for state/step
    require_error_everywhere([&] { load(requests_for({&kTp, &kFlat}), options); }, {"'state/step'"});
  }
  SECTION("another dtype") {
    const Global as_f64{kFlat.name, DType::f64, kFlat.shape, kFlat.seed};
    require_error_everywhere([&] { load(requests_for({&kTp, &kStep, &as_f64})); }, {"'optim/flat'", "f32", "f64"});
  }
  SECTION("another dtype on one rank only") {
    const Global as_bf16{kTp.name, DType::bf16, kTp.shape, kTp.seed};
    require_error_everywhere(
        [&] {
          load(requests_for({r == n - 1 ? &as_bf16 : &kTp, &kStep, &kFlat}));
        },
        {"'model/tp/w'"});
  }
  SECTION("another global shape") {
    const Global wider{kTp.name, kTp.dtype, {5, 10, 3}, kTp.seed};
    require_error_everywhere([&] { load(requests_for({&wider, &kStep, &kFlat})); }, {"'model/tp/w'", "[5, 9, 3]"});
    const Global scalar_as_vector{kStep.name, kStep.dtype, {1}, kStep.seed};
    require_error_everywhere([&] { load(requests_for({&kTp, &scalar_as_vector, &kFlat})); }, {"'state/step'"});
  }
  SECTION("another global shape through a split: the boxes add up to more") {
    // Every rank holds a box of 3 columns (n boxes along axis 1): 3n columns, not 9 (unless n == 3).
    // (The entry is made by hand: past 9 columns it is no piece of the test's tensor.)
    std::vector<Piece> pieces = requests_for({&kStep, &kFlat});
    ShardEntry e;
    e.name = kTp.name;
    e.box = {5, 3, 3};
    e.split_axis = 1;
    e.split_index = r;
    e.split_count = n;
    e.value = Tensor(e.box, kTp.dtype);
    std::vector<ShardEntry> requests = entries_of(pieces);
    requests.push_back(e);
    if (n == 3) {
      REQUIRE_NOTHROW(load_sharded_checkpoint(*comm, dir, manifest, requests));
      pieces.push_back(piece(kTp, 1, {3, 3, 3}, r, 0, -1, false));
      require_loaded(pieces, requests);
    } else {
      require_error_everywhere([&] { load_sharded_checkpoint(*comm, dir, manifest, requests); },
                               {"'model/tp/w'", "[5, 9, 3]", "[5, " + std::to_string(3 * n) + ", 3]"});
    }
  }
  // After all those errors the ranks are still in step: a correct load works.
  load(requests_for(tensors));
  comm->barrier();
}

TEST_CASE("sharded checkpoint: a damaged or truncated file is an error naming the file and the block") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("damage");
  // 2.5 MiB of one tensor, held by every rank (one of them writes it: three blocks of its file),
  // and a small one.
  const Global big{"model/big", DType::f32, {5 * 131072}, 21};
  const std::vector<const Global*> tensors = {&big, &kStep};
  std::vector<Piece> saved;
  for (const Global* t : tensors) saved.push_back(whole(*t));
  const std::string dir = save_sharded_checkpoint(*comm, root, 5, entries_of(saved));
  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, dir);
  require_manifest(dir, manifest, 5, n, tensors);
  const CheckpointChunk& chunk = manifest.tensors.at("model/big").chunks.at(0);
  const CheckpointFile& file = manifest.files.at(chunk.file);
  REQUIRE(file.digests.size() == 3);
  const std::string path = dir + "/" + file.path;

  const auto load_whole = [&] {
    std::vector<Piece> pieces;
    for (const Global* t : tensors) pieces.push_back(whole(*t, false));
    std::vector<ShardEntry> requests = entries_of(pieces);
    load_sharded_checkpoint(*comm, dir, manifest, requests);
    require_loaded(pieces, requests);
  };
  load_whole();

  // One byte of block 1 flipped.
  const std::int64_t at = kCheckpointBlockBytes + 12345;
  REQUIRE(chunk.at <= at);
  if (r == 0) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x10);
    f.seekp(at);
    f.write(&c, 1);
  }
  comm->barrier();
  require_error_everywhere(load_whole, {file.path, "block 1 ", "does not match its digest"});
  // Only the ranks that need the block read it: a rank asking for elements of block 0 alone loads.
  {
    std::vector<Piece> pieces = {piece(big, -1, {}, 0, 10, 1000, false), whole(kStep, false)};
    std::vector<ShardEntry> requests = entries_of(pieces);
    load_sharded_checkpoint(*comm, dir, manifest, requests);
    require_loaded(pieces, requests);
  }
  // Truncated: named with its size.
  if (r == 0) fs::resize_file(path, static_cast<std::uintmax_t>(file.bytes - 100));
  comm->barrier();
  require_error_everywhere(load_whole, {file.path, std::to_string(file.bytes - 100) + " bytes"});
  comm->barrier();
}

// A rank may hold several boxes of one split (more boxes than ranks: a layout of 2n boxes on n
// ranks, each rank holding boxes r and r + n), saving and loading (a rank's entries were once told
// apart by name and range only, and two boxes starting at element 0 were "given twice").
TEST_CASE("sharded checkpoint: a rank holding two boxes of one split saves and loads") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  const std::string root = fresh_directory("two_boxes");
  const Global t{"model/experts/w", DType::f32, {4 * n + 1, 3}, 31};
  std::vector<std::int64_t> extents(2 * n, 2);
  extents[0] = 3;  // uneven
  const std::vector<Piece> saved = {piece(t, 0, extents, r), piece(t, 0, extents, r + n)};
  const std::string dir = save_sharded_checkpoint(*comm, root, 1, entries_of(saved));
  const CheckpointManifest manifest = read_sharded_checkpoint_manifest(*comm, dir);
  require_manifest(dir, manifest, 1, n, {&t});
  // Loaded as the same 2n boxes the other way round (rank r: boxes n - 1 - r and 2n - 1 - r).
  const std::vector<Piece> pieces = {piece(t, 0, extents, n - 1 - r, 0, -1, false),
                                     piece(t, 0, extents, 2 * n - 1 - r, 0, -1, false)};
  std::vector<ShardEntry> requests = entries_of(pieces);
  load_sharded_checkpoint(*comm, dir, manifest, requests);
  require_loaded(pieces, requests);
  comm->barrier();
}

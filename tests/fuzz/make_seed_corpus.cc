// Writes the seed corpora of the fuzz targets (small valid inputs of each format):
//
//   bazel run //tests/fuzz:make_seed_corpus -- $PWD/tests/fuzz/corpus
//
// Files are named after what they hold and overwritten in place; regression/ directories and
// the NumPy-written seeds (tests/fuzz/make_numpy_seeds.py) are left alone. The output is
// committed, so this only needs to run again when a format changes.
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/transport/message.h"
#include "core/ops.h"
#include "core/random.h"
#include "layers/links/linear.h"
#include "layers/serializers/npz.h"
#include "layers/serializers/serializers.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/snapshot_fixture.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<std::uint8_t>;

void put_be32(Bytes& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(v >> shift));
}

// An IDX file: type code, extents, then `elements` (already big-endian bytes).
Bytes idx(std::uint8_t type_code, const std::vector<std::uint32_t>& extents, const Bytes& elements) {
  Bytes out = {0, 0, type_code, static_cast<std::uint8_t>(extents.size())};
  for (std::uint32_t e : extents) put_be32(out, e);
  out.insert(out.end(), elements.begin(), elements.end());
  return out;
}

Bytes counting(std::size_t n) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint8_t>(i * 37 + 11);
  return out;
}

void write(const fs::path& path, const void* data, std::size_t size) {
  fs::create_directories(path.parent_path());
  fuzz::write_file(path.string(), data, size);
  std::printf("%s (%zu bytes)\n", path.c_str(), size);
}

void write(const fs::path& path, const Bytes& bytes) { write(path, bytes.data(), bytes.size()); }

void write_gzip(const fs::path& path, const Bytes& bytes) {
  gzFile file = gzopen(path.c_str(), "wb9");
  FUZZ_REQUIRE(file != nullptr &&
                   gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()) &&
                   gzclose(file) == Z_OK,
               "make_seed_corpus: cannot write " + path.string());
  std::printf("%s (gzip of %zu bytes)\n", path.c_str(), bytes.size());
}

void idx_seeds(const fs::path& dir) {
  const Bytes images = idx(0x08, {2, 3, 3}, counting(18));  // MNIST image magic 2051
  const Bytes labels = idx(0x08, {2}, {7, 1});              // MNIST label magic 2049
  write(dir / "images_u8_2x3x3.idx", images);
  write(dir / "labels_u8_2.idx", labels);
  write_gzip(dir / "images_u8_2x3x3.idx.gz", images);
  write_gzip(dir / "labels_u8_2.idx.gz", labels);
  write(dir / "i8_4.idx", idx(0x09, {4}, {0x80, 0xff, 0, 0x7f}));
  write(dir / "i16_2x2.idx", idx(0x0B, {2, 2}, counting(8)));
  write(dir / "i32_3.idx", idx(0x0C, {3}, {0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0}));
  write(dir / "f32_2.idx", idx(0x0D, {2}, {0x3f, 0x80, 0, 0, 0x7f, 0xc0, 0, 0}));  // 1.0, NaN
  write(dir / "f64_1.idx", idx(0x0E, {1}, {0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}));  // pi
  write(dir / "u8_scalar.idx", idx(0x08, {}, {42}));
  write(dir / "u8_empty_0x3x3.idx", idx(0x08, {0, 3, 3}, {}));
}

void npz_and_npy_seeds(const fs::path& npz_dir, const fs::path& npy_dir) {
  Generator gen(3);
  const NamedTensors arrays = {
      {"f32", randn({2, 3}, gen)},
      {"f64", randn({3}, gen).to(DType::f64)},
      {"i32", from_vector(std::vector<std::int32_t>{-1, 0, 7})},
      {"i64", from_vector(std::vector<std::int64_t>{1, 2, 3, 4}, {2, 2})},
      {"bool", from_vector(std::vector<bool>{true, false, true})},
      {"scalar", full({}, 2.5, DType::f32)},
      {"empty", zeros({0, 4})},
  };
  fs::create_directories(npz_dir);
  write_npz((npz_dir / "all_dtypes.npz").string(), arrays);
  write_npz((npz_dir / "empty_archive.npz").string(), {});
  manual_seed(1);
  Linear linear(2, 3);
  save_npz((npz_dir / "linear_2x3.npz").string(), linear);
  for (const auto& [name, tensor] : arrays) {
    const std::string bytes = encode_npy(tensor);
    write(npy_dir / (name + ".npy"), bytes.data(), bytes.size());
  }
  const std::string text = encode_npy(string_to_tensor("{\"epoch\": 1}\n"));
  write(npy_dir / "text_i32.npy", text.data(), text.size());
}

void message_seeds(const fs::path& dir) {
  using namespace tandem::comm_detail;
  auto emit = [&](const std::string& name, const MessageHeader& header, std::size_t inline_bytes) {
    std::vector<char> out;
    encode_header(header, out);
    for (std::size_t i = 0; i < inline_bytes; ++i) out.push_back(static_cast<char>(i));
    write(dir / (name + ".msg"), out.data(), out.size());
  };
  MessageHeader send;
  send.kind = OpKind::tensor_send;
  send.dtype = DType::f32;
  send.tag = 3;
  send.sequence = 2;
  send.shape = {2, 3};
  send.payload_bytes = 24;
  emit("send_f32_2x3", send, 0);
  MessageHeader inline_send = send;
  inline_send.flags = kFlagInlinePayload;
  inline_send.shape = {2};
  inline_send.payload_bytes = 8;
  emit("send_inline_f32_2", inline_send, 8);
  MessageHeader grad = send;
  grad.kind = OpKind::layer_message;
  grad.flags = kFlagList;
  grad.label = "gradient";
  grad.layer_flags = 2;
  grad.dtype = DType::f64;
  grad.list_index = 1;
  grad.list_size = 2;
  grad.shape = {1, 1, 1, 1, 1, 1, 1, 5};
  grad.payload_bytes = 40;
  emit("recv_grad_f64_8d_list", grad, 0);
  MessageHeader object;
  object.kind = OpKind::object_send;
  object.flags = kFlagInlinePayload;
  object.payload_bytes = 5;
  object.shape = {};
  emit("send_obj_inline", object, 5);
  MessageHeader allreduce;
  allreduce.kind = OpKind::allreduce;
  allreduce.flags = kFlagTyped;
  allreduce.dtype = DType::i64;
  allreduce.sequence = 9;
  allreduce.reduce_op = 1;
  allreduce.digest = 0x1234567890abcdefULL;
  allreduce.shape = {4};
  allreduce.payload_bytes = 32;
  emit("allreduce_typed_i64_4", allreduce, 0);
  MessageHeader bcast;
  bcast.kind = OpKind::bcast;
  bcast.root = 0;
  bcast.sequence = 1;
  emit("bcast_untyped", bcast, 0);
  MessageHeader alltoall;
  alltoall.kind = OpKind::alltoall;
  alltoall.flags = kFlagTyped | kFlagAbandoned;
  alltoall.dtype = DType::boolean;
  alltoall.aux = 3;
  alltoall.shape = {0, 3};
  alltoall.payload_bytes = 0;
  emit("alltoall_abandoned_bool_empty", alltoall, 0);
}

void snapshot_seeds(const fs::path& dir) {
  const std::string work = fuzz::temp_dir() + "/snapshot_seeds";
  for (std::int64_t iterations : {1, 3}) {
    fuzz::SnapshotFixture s = fuzz::make_snapshot_fixture(work, iterations);
    s.trainer->run();
    const fs::path path = dir / ("trainer_iter_" + std::to_string(iterations) + ".npz");
    fs::create_directories(dir);
    s.trainer->save_snapshot(path.string());
    std::printf("%s (%ju bytes)\n", path.c_str(), static_cast<std::uintmax_t>(fs::file_size(path)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (e.g. $PWD/tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  fuzz::init();
  const fs::path root = argv[1];
  idx_seeds(root / "idx");
  npz_and_npy_seeds(root / "npz", root / "npy");
  message_seeds(root / "message");
  snapshot_seeds(root / "snapshot");
  return 0;
}

// .npz round trips, NumPy compatibility of the bytes, atomic writes, and load errors.
#include <catch2/catch.hpp>

#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "layers/serializers/serializers.h"

using namespace tandem;

namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class Net : public Chain {
 public:
  Net() {
    add_link("l1", std::make_shared<Linear>(3, 4));
    add_link("l2", std::make_shared<Linear>(4, 2));
    add_persistent("steps", full({}, 7, DType::i64));
  }
};

}  // namespace

TEST_CASE("npy encoding matches NumPy's byte layout", "[npz]") {
  const std::string bytes = encode_npy(from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}));
  REQUIRE(bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  const std::size_t header_length = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  REQUIRE((10 + header_length) % 64 == 0);
  const std::string header = bytes.substr(10, header_length);
  REQUIRE(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 0) == 0);
  REQUIRE(header.back() == '\n');
  REQUIRE(bytes.size() == 10 + header_length + 24);
  // 1-D shapes carry the trailing comma, 0-D shapes are ().
  REQUIRE(encode_npy(zeros({5}, DType::i64)).find("'shape': (5,)") != std::string::npos);
  REQUIRE(encode_npy(zeros({}, DType::f64)).find("'shape': ()") != std::string::npos);
}

TEST_CASE("npz round trip of every dtype and shape", "[npz]") {
  Generator gen(1);
  NamedTensors arrays = {{"a/W", randn({3, 4}, gen)},
                         {"b", randn({2, 1, 3}, gen, 0, 1, DType::f64)},
                         {"labels", from_vector<std::int32_t>({1, -2, 3})},
                         {"index", from_vector<std::int64_t>({1LL << 40})},
                         {"mask", from_vector<bool>({true, false})},
                         {"scalar", full({}, 2.5)},
                         {"empty", zeros({0, 3})}};
  const std::string path = temp_path("round_trip.npz");
  write_npz(path, arrays);
  const NamedTensors back = read_npz(path);
  REQUIRE(back.size() == arrays.size());
  for (std::size_t i = 0; i < arrays.size(); ++i) {
    REQUIRE(back[i].first == arrays[i].first);
    REQUIRE(back[i].second.shape() == arrays[i].second.shape());
    REQUIRE(back[i].second.dtype() == arrays[i].second.dtype());
    REQUIRE(back[i].second.to_vector<double>() == arrays[i].second.to_vector<double>());
  }
}

TEST_CASE("deflated (savez_compressed) and Fortran-order entries load", "[npz]") {
  // Build a zip with one deflated entry by hand, as numpy.savez_compressed writes it.
  const std::string npy = encode_npy(from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}));
  std::string deflated(compressBound(npy.size()) + 64, '\0');
  z_stream s{};
  deflateInit2(&s, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(npy.data()));
  s.avail_in = npy.size();
  s.next_out = reinterpret_cast<Bytef*>(deflated.data());
  s.avail_out = deflated.size();
  REQUIRE(deflate(&s, Z_FINISH) == Z_STREAM_END);
  deflated.resize(s.total_out);
  deflateEnd(&s);
  const uLong crc = crc32(crc32(0, Z_NULL, 0), reinterpret_cast<const Bytef*>(npy.data()), npy.size());
  auto put16 = [](std::string& o, unsigned v) { o.push_back(v & 0xff); o.push_back((v >> 8) & 0xff); };
  auto put32 = [&](std::string& o, unsigned long v) { put16(o, v & 0xffff); put16(o, (v >> 16) & 0xffff); };
  const std::string name = "x.npy";
  std::string zip;
  put32(zip, 0x04034b50); put16(zip, 20); put16(zip, 0); put16(zip, 8); put16(zip, 0); put16(zip, 0);
  put32(zip, crc); put32(zip, deflated.size()); put32(zip, npy.size()); put16(zip, name.size()); put16(zip, 0);
  zip += name + deflated;
  const unsigned long cd = zip.size();
  put32(zip, 0x02014b50); put16(zip, 20); put16(zip, 20); put16(zip, 0); put16(zip, 8); put16(zip, 0); put16(zip, 0);
  put32(zip, crc); put32(zip, deflated.size()); put32(zip, npy.size()); put16(zip, name.size()); put16(zip, 0);
  put16(zip, 0); put16(zip, 0); put16(zip, 0); put32(zip, 0); put32(zip, 0);
  zip += name;
  const unsigned long cd_size = zip.size() - cd;
  put32(zip, 0x06054b50); put16(zip, 0); put16(zip, 0); put16(zip, 1); put16(zip, 1); put32(zip, cd_size);
  put32(zip, cd); put16(zip, 0);
  const NamedTensors back = parse_npz(zip, "compressed.npz");
  REQUIRE(back.size() == 1);
  REQUIRE(back[0].first == "x");
  REQUIRE(back[0].second.to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});

  // A Fortran-ordered 2x3 array stores its columns one after another.
  std::string fortran = encode_npy(from_vector<double>({1, 4, 2, 5, 3, 6}, {2, 3}));
  fortran.replace(fortran.find("False"), 5, "True ");
  REQUIRE(decode_npy(fortran, "f.npy").to_vector<double>() == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("corrupt archives are errors that name the file", "[npz]") {
  const std::string path = temp_path("good.npz");
  write_npz(path, {{"w", from_vector<float>({1, 2, 3})}});
  const std::string good = read_all(path);
  REQUIRE_THROWS_WITH(parse_npz(good.substr(0, good.size() / 2), "half.npz"), Catch::Contains("half.npz"));
  std::string flipped = good;
  flipped[flipped.find("NUMPY") + 80] ^= 0x5a;  // a data byte
  REQUIRE_THROWS_WITH(parse_npz(flipped, "flipped.npz"), Catch::Contains("CRC") && Catch::Contains("flipped.npz"));
  REQUIRE_THROWS_WITH(parse_npz("not a zip at all, certainly not", "junk.npz"), Catch::Contains("not a zip"));
  REQUIRE_THROWS_WITH(read_npz(temp_path("missing.npz")), Catch::Contains("missing.npz"));
  // Every truncation of a valid archive is an error, never a crash.
  for (std::size_t cut = 0; cut < good.size(); cut += 7) REQUIRE_THROWS_AS(parse_npz(good.substr(0, cut), "cut"), Error);
}

TEST_CASE("a failed write leaves the old file intact and no temporary file behind", "[npz]") {
  const std::string dir = temp_path("atomic");
  REQUIRE(std::system(("mkdir -p " + dir).c_str()) == 0);
  const std::string path = dir + "/model.npz";
  write_npz(path, {{"w", from_vector<float>({1})}});
  write_npz(path, {{"w", from_vector<float>({3})}});  // replaced whole
  REQUIRE(read_npz(path)[0].second.item() == 3.0);
  REQUIRE_THROWS_AS(write_npz(path, {{"w", from_vector<float>({2})}, {"", zeros({1})}}), Error);
  REQUIRE(read_npz(path)[0].second.item() == 3.0);
  // Renaming onto a directory fails after the temporary was written: it must be removed.
  REQUIRE(std::system(("mkdir -p " + dir + "/occupied.npz").c_str()) == 0);
  REQUIRE_THROWS_WITH(write_npz(dir + "/occupied.npz", {{"w", zeros({1})}}), Catch::Contains("occupied.npz"));
  REQUIRE(std::system(("test -z \"$(ls " + dir + " | grep tmp)\"").c_str()) == 0);
  REQUIRE_THROWS_AS(write_npz("/nonexistent-dir/x.npz", {{"w", zeros({1})}}), Error);
}

TEST_CASE("save_npz/load_npz restore a link and check names, shapes and dtypes", "[npz][link]") {
  Net a, b;
  const std::string path = temp_path("net.npz");
  save_npz(path, a);
  std::vector<std::string> names;
  for (const auto& entry : read_npz(path)) names.push_back(entry.first);
  REQUIRE(names == std::vector<std::string>{"l1/W", "l1/b", "l2/W", "l2/b", "steps"});
  b.persistent("steps").copy_(full({}, 0, DType::i64));
  load_npz(path, b);
  for (std::size_t i = 0; i < a.params().size(); ++i)
    REQUIRE(a.params()[i].data().to_vector<float>() == b.params()[i].data().to_vector<float>());
  REQUIRE(b.persistent("steps").item() == 7);

  Linear wrong(3, 5);
  REQUIRE_THROWS_WITH(load_npz(path, wrong, false), Catch::Contains("'W'"));
  write_npz(path, {{"W", zeros({5, 3}, DType::f64)}, {"b", zeros({5})}});
  REQUIRE_THROWS_WITH(load_npz(path, wrong), Catch::Contains("f64[5, 3]") && Catch::Contains("f32[5, 3]"));
  write_npz(path, {{"W", zeros({5, 3})}, {"b", zeros({5})}, {"extra", zeros({1})}});
  REQUIRE_THROWS_WITH(load_npz(path, wrong), Catch::Contains("extra"));
  load_npz(path, wrong, false);
  REQUIRE(sum(abs(wrong.W().data())).item() == 0);
  Linear lazy(-1, 5);
  load_npz(path, lazy, false);  // the file gives W its shape
  REQUIRE(lazy.W().shape() == Shape{5, 3});
  REQUIRE(lazy.in_size() == 3);
}

namespace {

// Lazy shapes at every level: Linear(-1, n), Convolution2D(-1, ...), and a nested chain.
class LazyNet : public Chain {
 public:
  LazyNet() {
    conv = add_link("conv", std::make_shared<Convolution2D>(-1, 3, Convolution2DOptions::make(3, 1, 1)));
    auto head = add_link("head", std::make_shared<Chain>());
    fc = std::make_shared<Linear>(-1, 4);
    head->add_link("fc", fc);
    add_persistent("steps", full({}, 0, DType::i64));
  }
  Variable forward(const Variable& x) override {
    const Variable h = (*conv)(x);
    return (*fc)(h);
  }
  std::shared_ptr<Convolution2D> conv;
  std::shared_ptr<Linear> fc;
};

}  // namespace

TEST_CASE("load_npz creates lazily shaped parameters from the file, without a forward pass", "[npz][link]") {
  manual_seed(3);
  LazyNet trained;
  Generator gen(5);
  const Variable x(randn({2, 2, 5, 5}, gen));
  const Variable want = trained(x);  // the forward pass fixes every shape
  trained.persistent("steps").copy_(full({}, 9, DType::i64));
  const std::string path = temp_path("lazy.npz");
  save_npz(path, trained);

  manual_seed(4);  // other initial values: every parameter must come from the file
  LazyNet fresh;
  REQUIRE(fresh.params().size() == 2);  // the biases; both Ws wait for their shapes
  load_npz(path, fresh);
  const auto mine = fresh.namedparams(), theirs = trained.namedparams();
  REQUIRE(mine.size() == 4);
  REQUIRE(mine.size() == theirs.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    REQUIRE(mine[i].first == theirs[i].first);
    REQUIRE(mine[i].second.shape() == theirs[i].second.shape());
    REQUIRE(mine[i].second.data().to_vector<float>() == theirs[i].second.data().to_vector<float>());
    REQUIRE(mine[i].second.requires_grad());
  }
  REQUIRE(fresh.fc->in_size() == 3 * 5 * 5);
  REQUIRE(fresh.persistent("steps").item() == 9);
  REQUIRE(fresh(x).data().to_vector<float>() == want.data().to_vector<float>());

  // The dtype comes from the file; the parameter owns a copy of the value.
  const Tensor w64 = randn({4, 6}, gen).to(DType::f64);
  Linear lazy64(-1, 4, LinearOptions{true});
  load_link_state(lazy64, {{"W", w64}});
  REQUIRE(lazy64.W().dtype() == DType::f64);
  REQUIRE(lazy64.W().data().to_vector<double>() == w64.to_vector<double>());
  REQUIRE_FALSE(lazy64.W().data().shares_storage_with(w64));
}

TEST_CASE("a saved shape that does not fit is an error naming the parameter", "[npz][link]") {
  const std::string path = temp_path("misfit.npz");
  // A lazy Linear(-1, 5) cannot take a W of 4 rows, nor a Convolution2D another kernel size.
  write_npz(path, {{"W", zeros({4, 3})}, {"b", zeros({5})}});
  Linear lazy(-1, 5);
  REQUIRE_THROWS_WITH(load_npz(path, lazy), Catch::Contains("'W'") && Catch::Contains("f32[4, 3]") &&
                                                Catch::Contains("out_size"));
  write_npz(path, {{"W", zeros({3, 2, 5, 5})}, {"b", zeros({3})}});
  Convolution2D conv(-1, 3, Convolution2DOptions::make(3));
  REQUIRE_THROWS_WITH(load_npz(path, conv), Catch::Contains("'W'") && Catch::Contains("[3, 2, 5, 5]"));
  // An initialised parameter keeps its shape: a conflict names it and both shapes.
  write_npz(path, {{"l1/W", zeros({4, 7})}, {"l1/b", zeros({4})}, {"l2/W", zeros({2, 4})}, {"l2/b", zeros({2})},
                   {"steps", zeros({}, DType::i64)}});
  Net net;
  REQUIRE_THROWS_WITH(load_npz(path, net), Catch::Contains("'l1/W'") && Catch::Contains("f32[4, 7]") &&
                                               Catch::Contains("f32[4, 3]"));
  // initialize_param_from is for uninitialised parameters only.
  REQUIRE_THROWS_WITH(net.initialize_param_from("l1/W", zeros({4, 3})), Catch::Contains("already initialised"));
  REQUIRE_THROWS_WITH(net.initialize_param_from("l3/W", zeros({4, 3})), Catch::Contains("no parameter 'l3/W'"));
}

TEST_CASE("optimizer state saves and loads", "[npz][optimizer]") {
  auto model = std::make_shared<Linear>(2, 2);
  Adam adam;
  adam.setup(model);
  model->W().set_grad(ones({2, 2}));
  model->b().set_grad(ones({2}));
  adam.update();
  const std::string path = temp_path("adam.npz");
  save_npz(path, adam);
  Adam restored;
  restored.setup(model);
  load_npz(path, restored);
  REQUIRE(restored.t() == 1);
  const auto a = adam.state_dict(), b = restored.state_dict();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(a[i].second.to_vector<double>() == b[i].second.to_vector<double>());
}

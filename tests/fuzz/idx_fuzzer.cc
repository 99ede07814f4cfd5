// Fuzz target: the IDX (MNIST-format) reader, data/mnist.h.
//
// The input is the bytes of one IDX file. It is parsed in memory (parse_idx, to every dtype);
// gzip data and MNIST image files (magic 2051) are also read as a file (read_idx, which
// gunzips, so gzipped seeds exercise zlib's error paths too) and as the image file of an MNIST
// directory (get_mnist, which reshapes and scales the pixels). The only acceptable outcomes are a tensor or a
// tandem::Error.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>

#include "core/error.h"
#include "data/mnist.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;

namespace {

// A directory whose train and t10k image files are both the fuzz input (the second a symlink).
const std::string& mnist_dir() {
  static const std::string dir = [] {
    const std::string made = fuzz::temp_dir() + "/mnist";
    FUZZ_REQUIRE(::mkdir(made.c_str(), 0755) == 0, "idx_fuzzer: cannot create the MNIST directory");
    FUZZ_REQUIRE(::symlink("train-images-idx3-ubyte", (made + "/t10k-images-idx3-ubyte").c_str()) == 0,
                  "idx_fuzzer: cannot create the t10k symlink");
    return made;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  for (DType dtype : {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean}) {
    try {
      fuzz::consume(parse_idx(data, size, dtype, "fuzz"));
    } catch (const Error&) {
    }
  }

  // From a file. Plain bytes other than an MNIST image file read back exactly as parsed above,
  // so only gzip data and image files go this slower way (it allocates megabytes per read).
  const bool gzip = size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
  const bool images = size >= 4 && data[0] == 0 && data[1] == 0 && data[2] == 0x08 && data[3] == 3;
  if (!gzip && !images) return 0;
  const std::string path = mnist_dir() + "/train-images-idx3-ubyte";
  fuzz::write_file(path, data, size);
  try {
    fuzz::consume(read_idx(path, DType::i64));
  } catch (const Error&) {
  }

  MnistOptions options;
  options.dir = mnist_dir();
  options.withlabel = false;
  // The three layouts and both dtypes, chosen by the last byte (size >= 2 here).
  options.ndim = 1 + data[size - 1] % 3;
  options.dtype = data[size - 1] / 3 % 2 ? DType::f32 : DType::f64;
  try {
    auto [train, test] = get_mnist(options);
    FUZZ_REQUIRE(train->size() == test->size(), "idx_fuzzer: the same file gave two sizes");
    fuzz::consume(train->fields().at(0));
  } catch (const Error&) {
  }
  return 0;
}

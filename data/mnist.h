// MNIST-format datasets (chainer.datasets.get_mnist) and the IDX file format they are stored in.
//
// The default directory holds Fashion-MNIST, as installed by Debian's dataset-fashion-mnist
// (same format, shapes and class count as the handwritten digits; the digits work too: point
// TANDEM_MNIST_DIR or MnistOptions::dir at a directory with their IDX files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "data/tuple_dataset.h"

namespace tandem {

// ---- IDX (http://yann.lecun.com/exdb/mnist/) -------------------------------------------------
// A big-endian header: two zero bytes, an element type code (0x08 u8, 0x09 i8, 0x0B i16,
// 0x0C i32, 0x0D f32, 0x0E f64), the number of axes, then one u32 extent per axis; then the
// elements, row-major, big-endian.

struct IdxHeader {
  std::uint32_t magic = 0;     // the first four bytes, big-endian (2051 for MNIST images)
  std::uint8_t type_code = 0;  // 0x08 ... 0x0E
  Shape shape;
  std::size_t header_bytes = 0;   // 4 + 4 * shape.size()
  std::size_t element_bytes = 0;  // 1, 2, 4 or 8
};

// Parses and validates the header of the IDX data in bytes [data, data + size): the type code,
// that the extents are readable, and that the size is exactly header + payload. Errors begin
// with `context` (e.g. "read_idx: /path/file") and say what is wrong ("expected 7856 bytes,
// got 1000 (truncated)"). Never reads outside [data, data + size).
IdxHeader parse_idx_header(const std::uint8_t* data, std::size_t size, const std::string& context);

// The IDX data in [data, data + size) as a tensor of `dtype` (values converted, not scaled).
// Integer data converts to any numeric dtype; floating data (0x0D, 0x0E) only to f32/f64.
Tensor parse_idx(const std::uint8_t* data, std::size_t size, DType dtype = DType::i32,
                 const std::string& context = "parse_idx");

// All bytes of a file, gunzipped when it is gzip-compressed (recognised by its content, not
// its name). Errors (cannot open, read error, corrupt or truncated gzip stream) begin with
// "OP: PATH: ".
std::vector<std::uint8_t> read_file_maybe_gzip(const std::string& path, const std::string& op = "read_file");

// An IDX file, plain or gzipped, as parse_idx.
Tensor read_idx(const std::string& path, DType dtype = DType::i32);

// ---- MNIST -----------------------------------------------------------------------------------

struct MnistOptions {
  // The directory with train-images-idx3-ubyte, train-labels-idx1-ubyte,
  // t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte, each plain or with a .gz suffix (the
  // plain file is used when both exist). Empty: default_mnist_dir().
  std::string dir;
  // 1: each image flat ([784]); 2: [28, 28]; 3: [1, 28, 28] (channels first).
  int ndim = 1;
  // Pixels become pixel / 255 * scale, so [0, scale].
  double scale = 1.0;
  DType dtype = DType::f32;        // of the images: f32 or f64
  DType label_dtype = DType::i32;  // i32 or i64
  // true: examples are {image, label}; false: {image}.
  bool withlabel = true;
};

// $TANDEM_MNIST_DIR when set and non-empty, else /usr/share/datasets/fashion-mnist.
std::string default_mnist_dir();

// The training set (60000 examples for MNIST) and the test set (10000). Fields: images
// [N, ...] of options.dtype, and (withlabel) labels [N] of options.label_dtype. Files are
// validated (magic numbers 2051 and 2049, exact byte lengths, equal image and label counts)
// and errors name the file and what is wrong; a missing file names the directory and how to
// get the data. Images of any size are accepted (28 x 28 for MNIST).
std::pair<std::shared_ptr<TupleDataset>, std::shared_ptr<TupleDataset>> get_mnist(
    const MnistOptions& options = MnistOptions());

}  // namespace tandem

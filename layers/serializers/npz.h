// NumPy's .npz format (a zip archive of .npy arrays), so that tandem's weights open in Python
// with numpy.load and arrays saved by numpy.savez / savez_compressed load here.
//
// Writing is atomic: the archive goes to a temporary file in the same directory, is flushed to
// disk, and is then renamed over the target, so a crash never leaves a half-written file.
// Reading validates every offset and size and each entry's CRC; malformed input is an error
// naming the file and what is wrong, never a crash.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/atomic_file.h"  // write_file_atomically and sync_directory, which every saver uses
#include "core/tensor.h"

namespace tandem {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Entries are stored uncompressed as "<name>.npy", in the given order.
void write_npz(const std::string& path, const NamedTensors& arrays);
NamedTensors read_npz(const std::string& path);
// The same from bytes in memory; `source` names them in errors.
NamedTensors parse_npz(const std::string& bytes, const std::string& source);

// One .npy array to and from bytes.
std::string encode_npy(const Tensor& tensor);
Tensor decode_npy(const std::string& bytes, const std::string& source);

// Text carried in an .npz as an i32 array of its bytes (snapshot metadata: RNG state, logs).
Tensor string_to_tensor(const std::string& text);
std::string tensor_to_string(const Tensor& tensor);


}  // namespace tandem

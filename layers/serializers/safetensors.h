// The safetensors format (Hugging Face's; what PyTorch users exchange weights in), so that
// tandem's weights open with safetensors.torch.load_file and a .safetensors file loads here:
//   8 bytes   N, the header's length (unsigned, little-endian)
//   N bytes   a JSON object: per tensor {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}
//             (offsets into the data that follows, end exclusive), and optionally
//             "__metadata__": {string: string}; padded with spaces to a multiple of 8 bytes
//   the data  each tensor's elements, row-major, little-endian, back to back
// dtypes: F64, F32, BF16, F16, I64, I32, BOOL (tandem's); a file holding another (U8, I16, F8_*,
// ...) is an error naming the tensor. Reading checks what the format's reference reader checks:
// the header's size and syntax, every tensor's byte count against its shape, offsets inside the
// data, no overlap and no gap; and BOOL bytes are 0 or 1. Writing is atomic (write_file_atomically).
#pragma once

#include <map>
#include <string>

#include "layers/serializers/npz.h"

namespace tandem {

using SafetensorsMetadata = std::map<std::string, std::string>;

// Tensors in the given order (the header lists them by name); names must be unique and not
// "__metadata__".
void write_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsMetadata& metadata = {});
// Tensors in the order of their data; the metadata into *metadata when given.
NamedTensors read_safetensors(const std::string& path, SafetensorsMetadata* metadata = nullptr);

// The same to and from bytes in memory; `source` names them in errors.
std::string encode_safetensors(const NamedTensors& tensors, const SafetensorsMetadata& metadata = {});
NamedTensors decode_safetensors(const std::string& bytes, const std::string& source,
                                SafetensorsMetadata* metadata = nullptr);

}  // namespace tandem

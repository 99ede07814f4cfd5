// Fuzz target: the .npy array decoder inside the .npz reader (decode_npy), and the text
// decoding that snapshots apply to some arrays (tensor_to_string), layers/serializers/npz.h.
//
// The input is the bytes of one .npy array: magic, version, header length, the header dict
// ('descr', 'fortran_order', 'shape') and the data. Reached directly, without a zip around
// it, so no CRC stands in the way. The only acceptable outcomes are a tensor or a tandem::Error.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "layers/serializers/npz.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Tensor tensor;
  try {
    tensor = decode_npy(bytes, "fuzz.npy");
  } catch (const Error&) {
    return 0;
  }
  fuzz::consume(tensor);
  // A decoded array must encode and decode to the same dtype, shape and bytes.
  const Tensor again = decode_npy(encode_npy(tensor), "re-encoded");
  FUZZ_REQUIRE(again.dtype() == tensor.dtype() && again.shape() == tensor.shape() &&
                    again.nbytes() == tensor.nbytes() &&
                    std::memcmp(again.raw_data(), tensor.raw_data(), tensor.nbytes()) == 0,
                "npy_fuzzer: re-encoding changed the array");
  try {
    (void)tensor_to_string(tensor);
  } catch (const Error&) {
  }
  return 0;
}

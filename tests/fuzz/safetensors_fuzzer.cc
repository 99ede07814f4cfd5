// Fuzz target: the safetensors reader, layers/serializers/safetensors.h.
//
// The input is the bytes of a .safetensors file: the header's length, its JSON (names, dtypes,
// shapes, offsets, metadata) and the data. Each tensor it returns is read in full. The only
// acceptable outcomes are named tensors or a tandem::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "layers/serializers/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    SafetensorsMetadata metadata;
    const NamedTensors tensors =
        decode_safetensors(std::string(reinterpret_cast<const char*>(data), size), "fuzz.safetensors", &metadata);
    for (const auto& [name, tensor] : tensors) {
      FUZZ_REQUIRE(tensor.defined(), "safetensors_fuzzer: '" + name + "' parsed to an undefined tensor");
      fuzz::consume(tensor);
    }
  } catch (const Error&) {}
  return 0;
}

// Fuzz target: the .npz reader (a zip archive of .npy arrays), layers/serializers/npz.h.
//
// The input is the bytes of an .npz file. It is parsed as given (the zip layer: end record,
// central directory, local headers, stored and deflated entries, CRCs), then once more with
// every entry's CRC recomputed (fuzz::with_zip_crcs_fixed), so that mutated entry data reaches
// the .npy decoder. Each array it returns is read in full. The only acceptable outcomes are
// named tensors or a tandem::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "layers/serializers/npz.h"
#include "tests/fuzz/fuzz_util.h"

using namespace tandem;

namespace {

void parse(const std::string& bytes) {
  try {
    const NamedTensors arrays = parse_npz(bytes, "fuzz.npz");
    for (const auto& [name, tensor] : arrays) {
      FUZZ_REQUIRE(tensor.defined(), "npz_fuzzer: entry '" + name + "' parsed to an undefined tensor");
      fuzz::consume(tensor);
    }
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  parse(bytes);
  const std::string fixed = fuzz::with_zip_crcs_fixed(bytes);
  if (fixed != bytes) parse(fixed);
  return 0;
}

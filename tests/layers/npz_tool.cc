// Helper for npz_numpy_interop_test.sh:
//   npz_tool write PATH   writes known arrays with tandem
//   npz_tool read PATH    prints "name dtype shape values..." for every array tandem reads
#include <cstdio>
#include <string>

#include "core/ops.h"
#include "layers/serializers/npz.h"

using namespace tandem;

int main(int argc, char** argv) {
  try {
    if (argc != 3) throw Error("usage: npz_tool write|read PATH");
    const std::string mode = argv[1], path = argv[2];
    if (mode == "write") {
      write_npz(path, {{"model/W", from_vector<float>({1.5f, -2, 3, 4, 5, 6}, {2, 3})},
                       {"b", from_vector<double>({0.25})},
                       {"t", full({}, 42, DType::i64)},
                       {"labels", from_vector<std::int32_t>({7, -1})},
                       {"mask", from_vector<bool>({true, false, true})},
                       // 1/3 and 1.00390625 (f32) round to nearest even in each 16-bit type.
                       {"half", from_vector<float>({1.0f / 3, 65504, -0.0f, 1.00390625f}).to(DType::f16)},
                       {"brain", from_vector<float>({1.0f / 3, -3e38f, 1e-40f, 1.00390625f}).to(DType::bf16)}});
      // The file must read back whole before NumPy is asked about it.
      TANDEM_CHECK(read_npz(path).size() == 7, "npz_tool: ", path, " did not read back with 7 arrays");
      return 0;
    }
    for (const auto& [name, tensor] : read_npz(path)) {
      std::printf("%s %s %s", name.c_str(), dtype_name(tensor.dtype()), shape_str(tensor.shape()).c_str());
      for (double v : tensor.to_vector<double>()) std::printf(" %g", v);
      std::printf("\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "npz_tool: %s\n", e.what());
    return 1;
  }
}

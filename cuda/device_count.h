#pragma once

namespace tandem {
namespace cuda {

// Number of visible CUDA devices; 0 if the CUDA runtime reports an error
// (e.g. no driver or no GPU). Defined only when built with --config=cuda
// (TANDEM_WITH_CUDA is then defined for dependents).
int device_count();

}  // namespace cuda
}  // namespace tandem

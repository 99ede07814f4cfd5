#include "layers/links/layer_normalization.h"

#include "autograd/functions/normalization.h"

namespace tandem {

LayerNormalization::LayerNormalization(std::int64_t size, double eps, DType dtype) : eps_(eps) {
  TANDEM_CHECK(size > 0 && eps > 0, "LayerNormalization: size and eps must be positive, got size ", size, ", eps ",
               eps);
  add_param("gamma", ones({size}, dtype));
  add_param("beta", zeros({size}, dtype));
}

Variable LayerNormalization::forward(const Variable& x) {
  return functions::layer_normalization(x, param("gamma"), param("beta"), eps_);
}

}  // namespace tandem

#include "layers/links/batch_normalization.h"

#include "autograd/functions/normalization.h"
#include "autograd/grad_mode.h"
#include "core/ops.h"

namespace tandem {

BatchNormalization::BatchNormalization(std::int64_t size, double decay, double eps, DType dtype)
    : decay_(decay), eps_(eps) {
  TANDEM_CHECK(size > 0, "BatchNormalization: size must be positive, got ", size);
  TANDEM_CHECK(decay >= 0 && decay <= 1 && eps > 0, "BatchNormalization: decay must be in [0, 1] and eps positive");
  add_param("gamma", ones({size}, dtype));
  add_param("beta", zeros({size}, dtype));
  add_persistent("avg_mean", zeros({size}, dtype));
  add_persistent("avg_var", ones({size}, dtype));
  add_persistent("N", zeros({}, DType::i64));
}

Variable BatchNormalization::forward(const Variable& x) {
  if (replacement_) return replacement_->forward(x);
  if (is_train() && train_mode()) {
    count_batch();
    return functions::batch_normalization(x, param("gamma"), param("beta"), eps_, &persistent("avg_mean"),
                                          &persistent("avg_var"), decay_);
  }
  return functions::fixed_batch_normalization(x, param("gamma"), param("beta"), Variable(persistent("avg_mean")),
                                              Variable(persistent("avg_var")), eps_);
}

void BatchNormalization::count_batch() {
  Tensor& count = persistent("N");
  add_(count, ones({}, DType::i64, count.device()));
}

}  // namespace tandem

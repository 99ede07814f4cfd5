#include "comm/multi_node_links/multi_node_batch_normalization.h"

#include "autograd/grad_mode.h"
#include "comm/functions/multi_node_batch_normalization.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

MultiNodeBatchNormalization::MultiNodeBatchNormalization(std::int64_t size, CommunicatorPtr comm, double decay,
                                                         double eps, DType dtype)
    : BatchNormalization(size, decay, eps, dtype), comm_(std::move(comm)) {
  TANDEM_CHECK(comm_ != nullptr, "MultiNodeBatchNormalization: no communicator");
}

Variable MultiNodeBatchNormalization::forward(const Variable& x) {
  if (!(is_train() && train_mode())) return BatchNormalization::forward(x);
  count_batch();
  return functions::multi_node_batch_normalization(*comm_, x, param("gamma"), param("beta"), eps_,
                                                   &persistent("avg_mean"), &persistent("avg_var"), decay_);
}

}  // namespace tandem

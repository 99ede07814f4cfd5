#include "comm/data_parallel/order_free_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/order_free_gradients.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

void order_free_allreduce_grads(Communicator& comm, std::vector<Variable>& params, double scale, std::uint64_t digest,
                                const char* operation) {
  std::vector<OrderFreeSum*> sums;
  std::int64_t total = 0;
  for (Variable& p : params) {
    if (!p.grad().defined()) p.set_grad(zeros(p.shape(), p.dtype(), p.data().device()));
    sums.push_back(&order_free_gradient(p));
    total += p.numel();
  }
  // 1. Each element's top level over the ranks.
  Tensor tops({total}, DType::i32);
  {
    std::int32_t* out = tops.data<std::int32_t>();
    for (const OrderFreeSum* s : sums) out = std::copy(s->top().begin(), s->top().end(), out);
  }
  const std::vector<Tensor> all_tops = comm.allgather(tops);
  std::vector<std::int16_t> levels(static_cast<std::size_t>(total), OrderFreeSum::kEmpty);
  for (const Tensor& theirs : all_tops) {
    TANDEM_CHECK(theirs.numel() == total, operation, " (deterministic mode): rank ", comm.rank(), " sums ", total,
                 " gradient elements, another rank ", theirs.numel());
    const std::int32_t* t = theirs.data<std::int32_t>();
    for (std::int64_t i = 0; i < total; ++i)
      levels[i] = std::max<std::int16_t>(levels[i], static_cast<std::int16_t>(t[i]));
  }
  // 2. The slices at those levels, added over the ranks: exact, so in any order.
  Tensor slices({total * OrderFreeSum::kLevels}, DType::f64);
  {
    double* out = slices.data<double>();
    std::int64_t begin = 0;
    for (OrderFreeSum* s : sums) {
      s->align_to(std::vector<std::int16_t>(levels.begin() + begin, levels.begin() + begin + s->size()));
      out = std::copy(s->slices().begin(), s->slices().end(), out);
      begin += s->size();
    }
  }
  const Tensor summed = comm.allreduce_checked(slices, AllreduceOp::sum, digest, operation);
  const double* in = summed.data<double>();
  for (std::size_t k = 0; k < params.size(); ++k) {
    std::copy(in, in + sums[k]->slices().size(), sums[k]->slices().begin());
    in += sums[k]->slices().size();
    round_order_free_gradient(params[k], scale);
  }
}

std::int64_t gradient_groups_over(Communicator& comm, double share, std::uint64_t digest, const char* operation) {
  const std::int64_t mine = std::max<std::int64_t>(1, gradient_groups());
  const Tensor total = comm.allreduce_checked(from_vector(std::vector<std::int64_t>{mine}, {1}), AllreduceOp::sum,
                                              digest ^ 0x67726f757073ull, operation);
  const double groups = static_cast<double>(total.data<std::int64_t>()[0]) / share;
  TANDEM_CHECK(groups >= 1 && std::fabs(groups - std::round(groups)) < 1e-9, operation,
               " (deterministic mode): ", total.data<std::int64_t>()[0], " gradient groups over ", comm.size(),
               " ranks do not make a whole number of the batch's groups at share ", share);
  return static_cast<std::int64_t>(std::llround(groups));
}

}  // namespace tandem

#include "comm/tensor_parallel/parallel_dropout.h"

#include "autograd/grad_mode.h"
#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem::functions {

namespace {

class DropoutInParallelRegion final : public CommunicationNode {
 public:
  DropoutInParallelRegion(Communicator& comm, double ratio, std::int64_t axis, Generator& generator)
      : CommunicationNode(comm, std::nullopt, Participation::as_usual), ratio_(ratio), axis_(axis),
        generator_(generator) {}
  std::string name() const override { return "dropout_in_parallel_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    TANDEM_CHECK(is_floating(x.dtype()) && x.dim() > 0, name(), ": rank ", comm_->rank(),
                 " needs a floating input with an axis, got ", x.description());
    const auto dims = static_cast<std::int64_t>(x.dim());
    const std::int64_t axis = axis_ < 0 ? axis_ + dims : axis_;
    TANDEM_CHECK(axis >= 0 && axis < dims, name(), ": axis ", axis_, " out of range for ", x.description());
    // Where this rank's share lies in the whole tensor (every rank's extent along the axis).
    const std::vector<Tensor> extents = comm_->allgather(from_vector(std::vector<std::int64_t>{x.size(axis)}, {1}));
    std::int64_t begin = 0, total = 0;
    for (int r = 0; r < comm_->size(); ++r) {
      const std::int64_t e = extents[r].data<std::int64_t>()[0];
      if (r < comm_->rank()) begin += e;
      total += e;
    }
    Shape whole = x.shape();
    whole[static_cast<std::size_t>(axis)] = total;
    // The whole tensor's uniform numbers, as F::dropout draws them; this rank keeps its share.
    const Tensor u = slice(philox_uniform(whole, generator_, 0, 1, x.dtype(), x.device()), axis, begin,
                           begin + x.size(axis));
    const Tensor mask = where(greater_equal(u, ratio_), full({}, 1.0 / (1.0 - ratio_), x.dtype(), x.device()),
                              zeros({}, x.dtype(), x.device()));
    save_for_backward({mask});
    return {mul(x, mask)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override { return {mul(gy[0], saved()[0])}; }

 private:
  double ratio_;
  std::int64_t axis_;
  Generator& generator_;
};

}  // namespace

Variable dropout_in_parallel_region(Communicator& comm, const Variable& x, double ratio, std::int64_t axis,
                                    Generator* generator) {
  TANDEM_CHECK(x.defined(), "dropout_in_parallel_region: rank ", comm.rank(), " passed an undefined variable");
  TANDEM_CHECK(ratio >= 0 && ratio < 1, "dropout_in_parallel_region: ratio must be in [0, 1), got ", ratio);
  if (!train_mode() || ratio == 0) return x;
  return call<DropoutInParallelRegion>({x}, comm, ratio, axis, generator ? *generator : global_generator())[0];
}

}  // namespace tandem::functions

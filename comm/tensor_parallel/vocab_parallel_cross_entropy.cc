#include "comm/tensor_parallel/vocab_parallel_cross_entropy.h"

#include "comm/functions/communication_node.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem::functions {

namespace {

class VocabParallelCrossEntropy final : public CommunicationNode {
 public:
  VocabParallelCrossEntropy(Communicator& comm, std::int64_t ignore_label)
      : CommunicationNode(comm, std::nullopt, Participation::as_usual), ignore_label_(ignore_label) {}
  std::string name() const override { return "vocab_parallel_softmax_cross_entropy"; }

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& logits = in[0];
    const Tensor& targets = in[1];
    TANDEM_CHECK(logits.dim() == 2 && is_floating(logits.dtype()), name(), ": rank ", comm_->rank(),
                 ": logits must be floating [N, classes of this rank], got ", logits.description());
    TANDEM_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && !is_floating(targets.dtype()) &&
                     targets.dtype() != DType::boolean,
                 name(), ": rank ", comm_->rank(), ": targets must be integers [N] for logits ", logits.description(),
                 ", got ", targets.description());
    const std::int64_t n = logits.size(0), classes = logits.size(1);
    // Where this rank's classes start, and the whole vocabulary.
    const std::vector<Tensor> counts = comm_->allgather(from_vector(std::vector<std::int64_t>{classes}, {1}));
    std::int64_t begin = 0, vocabulary = 0;
    for (int r = 0; r < comm_->size(); ++r) {
      const std::int64_t c = counts[r].data<std::int64_t>()[0];
      if (r < comm_->rank()) begin += c;
      vocabulary += c;
    }
    const Tensor t = targets.to(DType::i64).to(Device::cpu());
    const Tensor valid_host = not_equal(t, static_cast<double>(ignore_label_));
    {
      const std::int64_t* v = t.data<std::int64_t>();
      for (std::int64_t i = 0; i < n; ++i)
        TANDEM_CHECK(v[i] == ignore_label_ || (v[i] >= 0 && v[i] < vocabulary), name(), ": target ", v[i], " of row ",
                     i, " is outside the vocabulary [0, ", vocabulary, ") split over ", comm_->size(),
                     " ranks (ignore_label ", ignore_label_, ")");
    }
    // The row maxima over every rank's classes (allgather: every rank's [N, 1], shapes checked).
    Tensor m = max(logits, {1}, true);
    for (const Tensor& other : comm_->allgather(m)) {
      TANDEM_CHECK(other.shape() == m.shape(), name(), ": the ranks disagree on the rows: rank ", comm_->rank(),
                   " has ", n, ", another rank ", other.size(0));
      m = maximum(m, other.to(m.device()));
    }
    const Tensor e = exp(sub(logits, m));
    const Tensor sums = comm_->allreduce(sum(e, {1}, true), AllreduceOp::sum);  // [N, 1]
    // One-hot of the targets within this rank's classes ([N, classes], false outside them).
    const Device device = logits.device();
    const Tensor local = sub(t, static_cast<double>(begin)).to(device).reshape({n, 1});
    const Tensor columns = arange(0, static_cast<double>(classes), 1, DType::i64, device).reshape({1, classes});
    onehot_ = equal(columns, local).to(logits.dtype());
    const Tensor target_logit =
        comm_->allreduce(sum(mul(onehot_, logits), {1}, true), AllreduceOp::sum);  // [N, 1]
    valid_ = valid_host.to(logits.dtype()).to(device).reshape({n, 1});
    count_ = std::max<double>(1.0, sum(valid_host.to(DType::f64)).item());
    softmax_ = div(e, sums);
    // loss_i = log(sum exp(x - m)) + m - x_target, averaged over the valid rows.
    const Tensor per_row = sub(add(log(sums), m), target_logit);
    return {div(sum(mul(per_row, valid_)), count_)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& gy) override {
    // d loss / d logits = (softmax - onehot) * valid / count, this rank's classes only.
    const Tensor scale = div(gy[0].to(softmax_.device()), count_);
    return {mul(mul(sub(softmax_, onehot_), valid_), scale), Tensor()};
  }

 private:
  std::int64_t ignore_label_;
  Tensor softmax_, onehot_, valid_;
  double count_ = 1;
};

}  // namespace

Variable vocab_parallel_softmax_cross_entropy(Communicator& comm, const Variable& logits, const Variable& targets,
                                              std::int64_t ignore_label) {
  TANDEM_CHECK(logits.defined() && targets.defined(), "vocab_parallel_softmax_cross_entropy: rank ", comm.rank(),
               " passed an undefined variable");
  return call<VocabParallelCrossEntropy>({logits, targets}, comm, ignore_label)[0];
}

}  // namespace tandem::functions

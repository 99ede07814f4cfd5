// ParallelConvolution2D and MultiNodeBatchNormalization on several ranks, each against the
// identical layer on one process: values, gradients, and a few training steps.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/functions.h"
#include "comm/multi_node_links/multi_node_batch_normalization.h"
#include "comm/multi_node_links/parallel_convolution_2d.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// Rows [begin, end) of t's first axis, as doubles.
std::vector<double> rows(const Tensor& t, std::int64_t begin, std::int64_t end) {
  return values(t.slice_rows(begin, end));
}

Variable weighted_sum(const Variable& y, std::uint64_t seed) {
  return F::sum(F::mul(y, Variable(test_util::uniform(y.shape(), seed, 0.5, 2.0))));
}

}  // namespace

TEST_CASE("ParallelConvolution2D: values and gradients equal Convolution2D with the same seed") {
  auto comm = world();
  for (const std::int64_t in_channels : {3, -1}) {  // given, and inferred at the first forward
    INFO("in_channels " << in_channels);
    const auto options = Convolution2DOptions::make(3, 1, 1);
    manual_seed(7);
    ParallelConvolution2D pconv(comm, in_channels, 5, options);  // 5 channels: uneven shares
    manual_seed(7);
    Convolution2D conv(in_channels, 5, options);
    Generator gen(8);
    conv.b().set_data(randn({5}, gen));  // nonzero biases, the shares cut from the same vector
    pconv.b().set_data(conv.b().data().slice_rows(pconv.channel_begin(), pconv.channel_end()).clone());

    Variable x(test_util::uniform({2, 3, 6, 5}, 11), true), x_ref(x.data().clone(), true);
    manual_seed(9);  // a lazy W is drawn at the first forward
    const Variable y = pconv(x);
    manual_seed(9);
    const Variable y_ref = conv(x_ref);
    const std::int64_t begin = pconv.channel_begin(), end = pconv.channel_end();
    REQUIRE(end - begin == 5 / comm->size() + (comm->rank() < 5 % comm->size() ? 1 : 0));
    require_values(pconv.W().data(), rows(conv.W().data(), begin, end));  // the same draw
    require_values(y.data(), values(y_ref.data()), 1e-5, 1e-6);

    weighted_sum(y, 12).backward();
    weighted_sum(y_ref, 12).backward();
    require_values(x.grad(), values(x_ref.grad()), 1e-5, 1e-6);  // the sum over every rank's share
    require_values(pconv.W().grad(), rows(conv.W().grad(), begin, end), 1e-5, 1e-6);
    require_values(pconv.b().grad(), rows(conv.b().grad(), begin, end), 1e-5, 1e-6);
  }
}

namespace {

// conv(1->4) relu, conv(4->6, stride 2) relu, Linear -> 3 classes: parallel or not.
template <typename Conv>
class SmallCNN : public Chain {
 public:
  template <typename... CommArg>
  explicit SmallCNN(CommArg... comm) {
    c1 = add_link("c1", std::make_shared<Conv>(comm..., 1, 4, Convolution2DOptions::make(3, 1, 1)));
    c2 = add_link("c2", std::make_shared<Conv>(comm..., 4, 6, Convolution2DOptions::make(3, 2, 1)));
    fc = add_link("fc", std::make_shared<Linear>(6 * 4 * 4, 3));
  }
  Variable forward(const Variable& x) override { return (*fc)(F::relu((*c2)(F::relu((*c1)(x))))); }
  std::shared_ptr<Conv> c1, c2;
  std::shared_ptr<Linear> fc;
};

}  // namespace

TEST_CASE("ParallelConvolution2D: a CNN trained with plain SGD follows the one-process CNN") {
  auto comm = world();
  manual_seed(21);
  auto model = std::make_shared<SmallCNN<ParallelConvolution2D>>(comm);
  manual_seed(21);
  auto reference = std::make_shared<SmallCNN<Convolution2D>>();
  SGD optimizer(0.2), reference_optimizer(0.2);
  optimizer.setup(model);
  reference_optimizer.setup(reference);

  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const Variable x(test_util::uniform({4, 1, 8, 8}, 30 + step));
    const Variable t(from_vector(std::vector<std::int32_t>{0, 2, 1, 2}, {4}));
    Variable loss, reference_loss;
    optimizer.update([&] { return loss = F::softmax_cross_entropy((*model)(x), t); });
    reference_optimizer.update([&] { return reference_loss = F::softmax_cross_entropy((*reference)(x), t); });
    require_values(loss.data(), values(reference_loss.data()), 1e-5, 1e-6);
  }
  for (auto [pconv, conv] : {std::pair{model->c1, reference->c1}, std::pair{model->c2, reference->c2}}) {
    require_values(pconv->W().data(), rows(conv->W().data(), pconv->channel_begin(), pconv->channel_end()), 1e-4, 1e-6);
    require_values(pconv->b().data(), rows(conv->b().data(), pconv->channel_begin(), pconv->channel_end()), 1e-4, 1e-6);
  }
  require_values(model->fc->W().data(), values(reference->fc->W().data()), 1e-4, 1e-6);  // replicated, equal
}

TEST_CASE("ParallelConvolution2D and gather_from_parallel_region: misuse is a clear error") {
  auto comm = world();
  const int n = comm->size();
  REQUIRE_THROWS_WITH(ParallelConvolution2D(comm, 3, n - 1), Contains("fewer than the communicator's"));
  auto grouped = Convolution2DOptions::make(3);
  grouped.conv.groups = 2;
  REQUIRE_THROWS_WITH(ParallelConvolution2D(comm, 4, 4, grouped), Contains("groups must be 1"));
  // Shares that differ on an axis other than the gathered one: every rank sees it.
  const Variable y(zeros({comm->rank() + 1, 2}));
  REQUIRE_THROWS_WITH(F::gather_from_parallel_region(*comm, y, 1),
                      Contains("gather_from_parallel_region") && Contains("except along axis 1"));
  comm->barrier();
}

namespace {

// Rank q's part of the global batch: sizes differ per rank (rank 0's may be empty).
Tensor part_of(int q, std::int64_t first_size, const Shape& rest) {
  Shape shape{first_size + q};
  shape.insert(shape.end(), rest.begin(), rest.end());
  return test_util::uniform(shape, 40 + q, -2, 3);
}

}  // namespace

TEST_CASE("MultiNodeBatchNormalization normalises the global batch as one process would") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  for (const std::int64_t first_size : {2, 0}) {
    for (const Shape& rest : {Shape{3, 2, 2}, Shape{3}}) {
      INFO("rank 0's batch " << first_size << ", example shape " << rest.size() << "-d");
      MultiNodeBatchNormalization bn(3, comm);
      BatchNormalization reference(3);
      Generator gen(50);
      const Tensor gamma = randn({3}, gen), beta = randn({3}, gen);
      for (BatchNormalization* layer : {static_cast<BatchNormalization*>(&bn), &reference}) {
        layer->gamma().set_data(gamma.clone());
        layer->beta().set_data(beta.clone());
      }
      std::vector<Tensor> parts, weights;
      std::int64_t offset = 0;
      for (int q = 0; q < n; ++q) {
        parts.push_back(part_of(q, first_size, rest));
        weights.push_back(test_util::uniform(parts.back().shape(), 60 + q, 0.5, 2.0));
        if (q < r) offset += parts.back().size(0);
      }
      Variable x(parts[r].clone(), true), x_all(concat(parts, 0), true);
      for (int pass = 0; pass < 2; ++pass) {  // twice: the running averages accumulate
        bn.cleargrads();
        reference.cleargrads();
        x.cleargrad();
        x_all.cleargrad();
        const Variable y = bn(x), y_all = reference(x_all);
        F::sum(F::mul(y, Variable(weights[r]))).backward();
        F::sum(F::mul(y_all, Variable(concat(weights, 0)))).backward();
        const std::int64_t local = parts[r].size(0);
        require_values(y.data(), rows(y_all.data(), offset, offset + local), 1e-5, 1e-5);
        require_values(x.grad(), rows(x_all.grad(), offset, offset + local), 1e-4, 1e-5);
        // gamma and beta get this rank's share; summed over ranks they are the whole batch's.
        require_values(comm->allreduce(bn.gamma().grad()), values(reference.gamma().grad()), 1e-4, 1e-5);
        require_values(comm->allreduce(bn.beta().grad()), values(reference.beta().grad()), 1e-4, 1e-5);
        require_values(bn.persistent("avg_mean"), values(reference.persistent("avg_mean")), 1e-5, 1e-6);
        require_values(bn.persistent("avg_var"), values(reference.persistent("avg_var")), 1e-5, 1e-6);
      }
      TrainModeGuard test_mode(false);  // then the running averages, equal on every rank
      if (parts[r].size(0) > 0)
        require_values(bn(Variable(parts[r])).data(), rows(reference(Variable(x_all.data())).data(), offset,
                                                            offset + parts[r].size(0)), 1e-5, 1e-5);
    }
  }
}

TEST_CASE("MultiNodeBatchNormalization: an empty global batch is an error on every rank") {
  auto comm = world();
  MultiNodeBatchNormalization bn(3, comm);
  REQUIRE_THROWS_WITH(bn(Variable(zeros({0, 3}))), Contains("global batch is empty"));
  REQUIRE_THROWS_WITH(bn(Variable(zeros({2, 4}))), Contains("multi_node_batch_normalization") && Contains("[C] = [4]"));
  comm->barrier();
}

namespace {

class BNNet : public Chain {
 public:
  template <typename BN, typename... CommArg>
  static std::shared_ptr<BNNet> make(CommArg... comm) {
    auto net = std::make_shared<BNNet>();
    net->l1 = net->add_link("l1", std::make_shared<Linear>(4, 5));
    net->bn = net->add_link("bn", std::make_shared<BN>(5, comm...));
    net->l2 = net->add_link("l2", std::make_shared<Linear>(5, 3));
    return net;
  }
  Variable forward(const Variable& x) override { return (*l2)(F::relu((*bn)(F::tanh((*l1)(x))))); }
  std::shared_ptr<Linear> l1, l2;
  std::shared_ptr<BatchNormalization> bn;
};

Tensor labels(std::int64_t count, std::uint64_t seed) {
  std::vector<std::int32_t> t(count);
  for (std::int64_t i = 0; i < count; ++i) t[i] = static_cast<std::int32_t>((i * 7 + seed) % 3);
  return from_vector(t, {count});
}

}  // namespace

TEST_CASE("MultiNodeBatchNormalization with the multi-node optimizer trains as one process on the whole batch") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  manual_seed(70);
  auto model = BNNet::make<MultiNodeBatchNormalization>(comm);
  manual_seed(70);
  auto reference = BNNet::make<BatchNormalization>();
  auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.3), comm);
  SGD reference_optimizer(0.3);
  optimizer->setup(model);
  reference_optimizer.setup(reference);
  constexpr std::int64_t kLocal = 3;
  for (int step = 0; step < 3; ++step) {  // the replicas start equal: updates from step 0
    INFO("step " << step);
    std::vector<Tensor> xs, ts;
    for (int q = 0; q < n; ++q) {
      xs.push_back(test_util::uniform({kLocal, 4}, 80 + 10 * step + q));
      ts.push_back(labels(kLocal, step + q));
    }
    Variable loss;
    optimizer->update([&] { return loss = F::softmax_cross_entropy((*model)(Variable(xs[r])), Variable(ts[r])); });
    Variable reference_loss;
    reference_optimizer.update([&] {
      return reference_loss = F::softmax_cross_entropy((*reference)(Variable(concat(xs, 0))), Variable(concat(ts, 0)));
    });
    // The mean of the ranks' mean losses is the whole batch's mean loss.
    require_values(comm->allreduce(loss.data(), AllreduceOp::mean), values(reference_loss.data()), 1e-5, 1e-6);
  }
  for (const auto& [name, p] : model->namedparams()) {
    INFO(name);
    Variable want;
    for (const auto& [ref_name, q] : reference->namedparams())
      if (ref_name == name) want = q;
    require_values(p.data(), values(want.data()), 1e-4, 1e-6);
  }
}

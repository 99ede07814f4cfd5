// Data-parallel training pieces on several ranks: the multi-node optimizer (the first update
// broadcasts rank 0's parameters, later ones average the gradients) against the same updates
// computed on one process, the multi-node evaluator, and the multi-node NStepLSTM (an encoder
// on rank 0 handing its state to a decoder on rank 1) against one process.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "autograd/check_finite.h"
#include "autograd/functions.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "comm/multi_node_links/multi_node_n_step_rnn.h"
#include "comm/multi_node_training/multi_node_evaluator.h"
#include "comm/trace/flight_recorder.h"
#include "data/data.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

Variable loss_on(Linear& model, int rank) {
  Variable x(uniform({4, 3}, 10 + rank));
  return F::sum(F::mul(F::tanh(model(x)), Variable(uniform({4, 2}, 20 + rank, 0.5, 2.0))));
}

}  // namespace

TEST_CASE("multi-node optimizer: broadcast first, then averaged gradients, as on one process") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  manual_seed(100 + r);  // every rank starts from different weights
  auto model = std::make_shared<Linear>(3, 2);
  auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.1), comm);
  optimizer->setup(model);

  // The reference: rank 0's initial weights, gradients averaged by hand.
  std::vector<double> W0, b0;
  {
    manual_seed(100);
    Linear first(3, 2);
    W0 = values(first.W().data());
    b0 = values(first.b().data());
  }
  optimizer->update([&] { return loss_on(*model, r); });  // broadcasts, does not update
  REQUIRE(optimizer->t() == 0);
  require_values(model->W().data(), W0);
  require_values(model->b().data(), b0);

  for (int step = 0; step < 2; ++step) {
    Linear reference(3, 2);
    reference.W().set_data(model->W().data().clone());
    reference.b().set_data(model->b().data().clone());
    std::vector<double> gW(6, 0.0), gb(2, 0.0);
    for (int q = 0; q < n; ++q) {
      reference.cleargrads();
      loss_on(reference, q).backward();
      const auto w = values(reference.W().grad()), b = values(reference.b().grad());
      for (int i = 0; i < 6; ++i) gW[i] += w[i] / n;
      for (int i = 0; i < 2; ++i) gb[i] += b[i] / n;
    }
    std::vector<double> want_W = values(model->W().data()), want_b = values(model->b().data());
    for (int i = 0; i < 6; ++i) want_W[i] -= 0.1 * gW[i];
    for (int i = 0; i < 2; ++i) want_b[i] -= 0.1 * gb[i];
    optimizer->update([&] { return loss_on(*model, r); });
    REQUIRE(optimizer->t() == step + 1);
    require_values(model->W().grad(), gW, 1e-5, 1e-7);
    require_values(model->W().data(), want_W, 1e-5, 1e-7);
    require_values(model->b().data(), want_b, 1e-5, 1e-7);
  }
}

TEST_CASE("multi-node optimizer: replicas already equal (same seed, a resumed snapshot) update from the first step") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  for (int round = 0; round < 2; ++round) {  // round 1: a fresh optimizer, as after --resume
    INFO("round " << round);
    manual_seed(300);  // the same weights on every rank
    auto model = std::make_shared<Linear>(3, 2);
    auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.1), comm);
    optimizer->setup(model);
    if (round == 1) {  // two updates first, then a new optimizer on the trained replicas
      optimizer->update([&] { return loss_on(*model, r); });
      optimizer->update([&] { return loss_on(*model, r); });
      optimizer = create_multi_node_optimizer(std::make_shared<SGD>(0.1), comm);
      optimizer->setup(model);
    }
    Linear reference(3, 2);
    reference.W().set_data(model->W().data().clone());
    reference.b().set_data(model->b().data().clone());
    std::vector<double> want_W = values(reference.W().data());
    for (int q = 0; q < n; ++q) {
      reference.cleargrads();
      loss_on(reference, q).backward();
      const auto g = values(reference.W().grad());
      for (std::size_t i = 0; i < g.size(); ++i) want_W[i] -= 0.1 * g[i] / n;
    }
    optimizer->update([&] { return loss_on(*model, r); });
    REQUIRE(optimizer->t() == 1);  // updated, not merely broadcast
    require_values(model->W().data(), want_W, 1e-5, 1e-7);
  }
}

TEST_CASE("multi_node_mean_grad: a missing gradient stops every rank; zero_fill counts it as zeros") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  Linear model(2, 2);
  model.W().set_grad(full({2, 2}, r + 1.0));
  if (r != 0) model.b().set_grad(full({2}, 1.0));  // rank 0 has no gradient for b
  REQUIRE_THROWS_WITH(multi_node_mean_grad(*comm, model), Contains("multi_node_mean_grad"));
  model.W().set_grad(full({2, 2}, r + 1.0));
  if (r != 0) model.b().set_grad(full({2}, 1.0));
  multi_node_mean_grad(*comm, model, /*zero_fill=*/true);
  require_values(model.W().grad(), std::vector<double>(4, (n + 1) / 2.0), 1e-6);
  require_values(model.b().grad(), std::vector<double>(2, (n - 1.0) / n), 1e-6);
  REQUIRE(model.b().grad().defined());
}

TEST_CASE("check_finite: a NaN gradient stops every rank before the allreduce, naming its rank and parameter") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  set_check_finite(true);
  Linear model(2, 2);
  model.W().set_grad(full({2, 2}, 1.0));
  model.b().set_grad(full({2}, 1.0));
  if (r == n - 1) model.b().set_grad(from_vector<float>({0, std::numeric_limits<float>::quiet_NaN()}, {2}));
  if (r == n - 1) {
    REQUIRE_THROWS_WITH(multi_node_mean_grad(*comm, model),
                        Contains("check_finite: multi_node_mean_grad: on rank " + std::to_string(r)) &&
                            Contains("'b' holds NaN at [1] of f32[2] before the allreduce"));
  } else {
    REQUIRE_THROWS_WITH(multi_node_mean_grad(*comm, model), Contains("has a NaN/Inf gradient"));
  }
  // Forward errors name the rank too (the communicator labels the process).
  REQUIRE_THROWS_WITH(F::log(Variable(full({1}, -1.0))),
                      Contains("check_finite: log produced NaN") &&
                          Contains("on rank " + std::to_string(r) + " of " + std::to_string(n)));
  set_check_finite(false);
  comm->barrier();
}

TEST_CASE("multi-node evaluator averages every metric over the ranks") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  auto dataset = std::make_shared<TupleDataset>(std::vector<Tensor>{full({4, 1}, r)});
  auto iterator = std::make_shared<SerialIterator>(dataset, 2, false, false);
  auto evaluator = std::make_shared<Evaluator>(iterator, [r](const Example& batch) {
    return Observation{{"accuracy", r + 1.0}, {"loss", 10.0 * r + batch[0].data<float>()[0]}};
  });
  const Observation mean = create_multi_node_evaluator(evaluator, comm)->evaluate();
  REQUIRE(mean.at("accuracy") == Approx((n + 1) / 2.0));
  REQUIRE(mean.at("loss") == Approx(11.0 * (n - 1) / 2.0));
}

TEST_CASE("multi-node NStepLSTM: encoder state handed from rank 0 to rank 1, as on one process") {
  auto comm = world();
  const int r = comm->rank();
  auto make_lstm = [](std::uint64_t seed) {
    manual_seed(seed);
    return std::make_shared<NStepLSTM>(2, 3, 4);
  };
  const Variables source{Variable(uniform({5, 3}, 1)), Variable(uniform({2, 3}, 2))};
  const Variables target{Variable(uniform({3, 3}, 3)), Variable(uniform({4, 3}, 4))};
  auto decoder_loss = [&](const Variables& ys) {
    Variable total = F::sum(F::mul(ys[0], Variable(uniform({3, 4}, 5, 0.5, 2.0))));
    return F::add(total, F::sum(F::mul(ys[1], Variable(uniform({4, 4}, 6, 0.5, 2.0)))));
  };
  // One process: encoder then decoder.
  auto ref_encoder = make_lstm(7), ref_decoder = make_lstm(8);
  auto encoded = ref_encoder->forward(Variable(), Variable(), source);
  Variable ref_loss = decoder_loss(ref_decoder->forward(encoded.hy, encoded.cy, target).ys);
  ref_loss.backward();

  if (r == 0) {
    auto encoder = create_multi_node_n_step_rnn(make_lstm(7), comm, -1, 1);
    auto out = encoder->forward(Variable(), Variable(), source);
    REQUIRE(out.delegate.defined());
    out.delegate.backward();
    const auto got = encoder->lstm().namedparams(), want = ref_encoder->namedparams();
    for (std::size_t i = 0; i < got.size(); ++i)
      require_values(got[i].second.grad(), values(want[i].second.grad()), 1e-4, 1e-6);
  } else if (r == 1) {
    auto decoder = create_multi_node_n_step_rnn(make_lstm(8), comm, 0, -1);
    auto out = decoder->forward(Variable(), Variable(), target);
    REQUIRE_FALSE(out.delegate.defined());
    Variable loss = decoder_loss(out.ys);
    loss.backward();
    REQUIRE(loss.data().item() == Approx(ref_loss.data().item()).epsilon(1e-5));
    const auto got = decoder->lstm().namedparams(), want = ref_decoder->namedparams();
    for (std::size_t i = 0; i < got.size(); ++i)
      require_values(got[i].second.grad(), values(want[i].second.grad()), 1e-4, 1e-6);
  }
}

TEST_CASE("allreduce_grad_dtype: gradients averaged in bf16 or f16 as one process rounds them, half the bytes") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  trace::FlightRecorder::instance().reset(512);
  for (DType wire : {DType::bf16, DType::f16}) {
    INFO(dtype_name(wire));
    // A small model (its gradients travel with the headers, summed in rank order) and a larger one
    // (through MPI's reduction, whose order MPI chooses).
    for (std::int64_t width : {3, 300}) {
      INFO("width " << width);
      manual_seed(7);  // equal replicas: the first update averages
      auto model = std::make_shared<Linear>(width, 2);
      auto optimizer = create_multi_node_optimizer(std::make_shared<SGD>(1.0), comm, false, wire);
      optimizer->setup(model);
      const std::vector<double> W_before = values(model->W().data());
      const auto loss = [&](Linear& m, int rank) {
        Variable x(uniform({4, width}, 10 + rank));
        return F::sum(F::mul(F::tanh(m(x)), Variable(uniform({4, 2}, 20 + rank, 0.5, 2.0))));
      };
      optimizer->update([&] { return loss(*model, r); });
      REQUIRE(optimizer->t() == 1);
      // One process: each rank's gradient rounded to the wire's dtype, summed in rank order with
      // each partial sum rounded, divided (in f32, rounded once), then widened back to f32.
      Tensor sum, exact, magnitude;
      for (int k = 0; k < n; ++k) {
        manual_seed(7);
        Linear replica(width, 2);
        loss(replica, k).backward();
        const Tensor g = replica.W().grad();
        sum = k == 0 ? g.to(wire) : add(sum, g.to(wire));
        exact = k == 0 ? g.to(DType::f64) : add(exact, g.to(DType::f64));
        magnitude = k == 0 ? abs(g.to(DType::f64)) : add(magnitude, abs(g.to(DType::f64)));
      }
      const Tensor mean = mul(sum.to(DType::f32), 1.0 / n).to(wire).to(DType::f32);
      const Tensor W_after = model->W().data();
      REQUIRE(W_after.dtype() == DType::f32);
      const std::vector<double> got = values(W_after), want_step = values(mean), exact_step = values(exact),
                                bound = values(magnitude);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double step = W_before[i] - got[i];
        if (width == 3 || n == 2) {
          REQUIRE(static_cast<float>(W_before[i] - want_step[i]) == static_cast<float>(got[i]));
        } else {  // a rounding of each term, n - 1 of partial sums in MPI's order, one of the mean
          const double unit = wire == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
          REQUIRE(std::abs(step - exact_step[i] / n) <= (n + 1) * unit * bound[i] / n + 1e-12);
        }
      }
    }
    // The gradients went as `wire` (2 bytes an element), never as f32.
    bool wire_seen = false;
    for (const trace::FlightEntry& e : trace::FlightRecorder::instance().entries()) {
      if (e.op != "allreduce" || e.dtype == "i64") continue;  // i64: the census
      REQUIRE(e.dtype == dtype_name(wire));
      wire_seen = true;
    }
    REQUIRE(wire_seen);
    trace::FlightRecorder::instance().reset(512);
  }
  trace::FlightRecorder::instance().reset(0);
}

TEST_CASE("16-bit collectives: sums in f32 rounded once; a bf16 rank against an f16 rank fails on both") {
  auto comm = world();
  const int n = comm->size(), r = comm->rank();
  for (DType dtype : {DType::bf16, DType::f16}) {
    // 1 + 2^-9 * r: each term rounds, and so does each partial sum.
    const Tensor mine = full({5}, 1.0 + std::ldexp(1.0, -9) * r, DType::f32).to(dtype);
    const Tensor total = comm->allreduce(mine);
    REQUIRE(total.dtype() == dtype);
    Tensor want;
    for (int k = 0; k < n; ++k) {
      const Tensor term = full({5}, 1.0 + std::ldexp(1.0, -9) * k, DType::f32).to(dtype);
      want = k == 0 ? term : add(want, term);
    }
    require_values(total, values(want));
  }
  const Tensor odd = full({4}, 1.0, DType::f32).to(r == 0 ? DType::bf16 : DType::f16);
  REQUIRE_THROWS_WITH(comm->allreduce(odd), Contains("bf16") && Contains("f16"));
  REQUIRE_THROWS_WITH(comm->allreduce(full({4}, 1.0, DType::boolean)), Contains("cannot sum"));
}

// create_multi_node_n_step_rnn on 2 ranks, called as ChainerMN's is: forward(xs) alone, the
// initial state coming from the other rank (or zeros without one). Values and gradients against
// the same encoder and decoder on one process; a state passed where it comes from a rank is an
// error.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/multi_node_links/multi_node_n_step_rnn.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

std::shared_ptr<NStepLSTM> make_lstm(std::uint64_t seed) {
  manual_seed(seed);
  return std::make_shared<NStepLSTM>(1, 3, 4);
}

Variable weighted_loss(const Variables& ys) {
  Variable total = F::sum(F::mul(ys[0], Variable(uniform(ys[0].shape(), 5, 0.5, 2.0))));
  return F::add(total, F::sum(F::mul(ys[1], Variable(uniform(ys[1].shape(), 6, 0.5, 2.0)))));
}

void require_same_grads(const Link& got_link, const Link& want_link) {
  const auto got = got_link.namedparams(), want = want_link.namedparams();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    require_values(got[i].second.grad(), values(want[i].second.grad()), 1e-4, 1e-6);
}

}  // namespace

TEST_CASE("forward(xs): the decoder's state from the encoder's rank, the encoder's from zeros") {
  auto comm = create_communicator("naive");
  const int r = comm->rank();
  const Variables source{Variable(uniform({5, 3}, 1)), Variable(uniform({2, 3}, 2))};
  const Variables target{Variable(uniform({3, 3}, 3)), Variable(uniform({4, 3}, 4))};
  auto ref_encoder = make_lstm(7), ref_decoder = make_lstm(8);
  auto encoded = ref_encoder->forward(Variable(), Variable(), source);
  Variable ref_loss = weighted_loss(ref_decoder->forward(encoded.hy, encoded.cy, target).ys);
  ref_loss.backward();

  if (r == 0) {
    auto encoder = create_multi_node_n_step_rnn(make_lstm(7), comm, /*rank_in=*/-1, /*rank_out=*/1);
    MultiNodeNStepRNNResult out = encoder->forward(source);
    require_values(out.hy.data(), values(encoded.hy.data()), 1e-6);
    out.delegate.backward();
    require_same_grads(encoder->lstm(), *ref_encoder);
  } else if (r == 1) {
    auto decoder = create_multi_node_n_step_rnn(make_lstm(8), comm, /*rank_in=*/0, /*rank_out=*/-1);
    // Checked before anything is received: the pair from rank 0 still waits for the call below.
    REQUIRE_THROWS_WITH(decoder->forward(Variable(zeros({2, 1, 4})), Variable(), target),
                        Contains("comes from rank 0") && Contains("forward(xs)"));
    MultiNodeNStepRNNResult out = decoder->forward(target);
    REQUIRE_FALSE(out.delegate.defined());
    Variable loss = weighted_loss(out.ys);
    loss.backward();
    REQUIRE(loss.data().item() == Approx(ref_loss.data().item()).epsilon(1e-5));
    require_same_grads(decoder->lstm(), *ref_decoder);
  }
}

// The vocabulary split across ranks (Megatron-LM's): VocabParallelEmbedding against EmbedID, and
// vocab_parallel_softmax_cross_entropy against softmax_cross_entropy of the full logits, alone
// and after a ColumnParallelLinear (the language model's output layer), at 1 to 4 ranks with a
// vocabulary that does not divide (11), an ignored label included; f64, to 1e-10.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/functions.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "comm/tensor_parallel/vocab_parallel_embedding.h"
#include "core/random.h"
#include "layers/links/embed_id.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": " << got.description() << " vs " << want.description());
  REQUIRE(got.defined());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": " << g[i] << " vs " << w[i]);
    REQUIRE(std::abs(g[i] - w[i]) <= 1e-10 * (1 + std::abs(w[i])));
  }
}

Tensor f64(const Shape& shape, std::uint64_t seed) { return test_util::uniform(shape, seed, -2, 2, DType::f64); }
Tensor columns(const Tensor& x, const Share& s) { return slice(x, 1, s.begin, s.end); }
Tensor rows(const Tensor& x, const Share& s) { return x.slice_rows(s.begin, s.end).clone(); }

constexpr std::int64_t kVocabulary = 11;

Tensor targets() {  // includes the first and last class and an ignored row (-1)
  return from_vector(std::vector<std::int64_t>{0, 10, 3, -1, 7, 5}, {6});
}

}  // namespace

TEST_CASE("VocabParallelEmbedding equals EmbedID: the embedding and the table's gradient") {
  const CommunicatorPtr comm = world();
  manual_seed(21);
  auto full = std::make_shared<EmbedID>(kVocabulary, 4, -1, nullptr, DType::f64);
  manual_seed(21);
  auto split = std::make_shared<VocabParallelEmbedding>(comm, kVocabulary, 4, -1, nullptr, DType::f64);
  const Tensor ids = from_vector(std::vector<std::int32_t>{0, 10, 3, 3, -1, 6, 9, 1}, {2, 4});
  Variable y_full = (*full)(Variable(ids)), y_split = (*split)(Variable(ids));
  require_close(y_split.data(), y_full.data(), "embedding (every rank)");
  const Tensor w = f64(y_full.shape(), 3);
  F::sum(F::mul(y_full, Variable(w))).backward();
  F::sum(F::mul(y_split, Variable(w))).backward();
  require_close(split->W().grad(), rows(full->W().grad(), split->share()), "W gradient (this rank's rows)");
  REQUIRE_THROWS_WITH((*split)(Variable(from_vector(std::vector<std::int32_t>{2, 11}, {2}))),
                      Contains("VocabParallelEmbedding: ids outside [0, 11)"));
}

TEST_CASE("vocab_parallel_softmax_cross_entropy equals softmax_cross_entropy of the full logits") {
  const CommunicatorPtr comm = world();
  const Share s = share_of(kVocabulary, comm->rank(), comm->size());
  const Tensor logits = f64({6, kVocabulary}, 7);
  Variable full(logits.clone(), true), mine(columns(logits, s), true);
  Variable loss_full = F::softmax_cross_entropy(full, Variable(targets()));
  Variable loss_mine = F::vocab_parallel_softmax_cross_entropy(*comm, mine, Variable(targets()));
  REQUIRE(std::abs(loss_mine.data().item() - loss_full.data().item()) <= 1e-12);
  loss_full.backward();
  loss_mine.backward();
  require_close(mine.grad(), columns(full.grad(), s), "logits gradient (this rank's classes)");
  // Large logits: the row maxima keep exp finite, as in the unsplit function.
  Variable big(mul(columns(logits, s), 400.0), true);
  Variable big_full(mul(logits, 400.0), true);
  REQUIRE(std::abs(F::vocab_parallel_softmax_cross_entropy(*comm, big, Variable(targets())).data().item() -
                   F::softmax_cross_entropy(big_full, Variable(targets())).data().item()) <= 1e-9);
  REQUIRE_THROWS_WITH(
      F::vocab_parallel_softmax_cross_entropy(*comm, mine, Variable(from_vector(std::vector<std::int64_t>{0, 11, 0, 0, 0, 0}, {6}))),
      Contains("target 11 of row 1 is outside the vocabulary [0, 11)"));
}

TEST_CASE("the language model's output layer: ColumnParallelLinear then the parallel cross-entropy") {
  const CommunicatorPtr comm = world();
  LinearOptions options;
  options.dtype = DType::f64;
  manual_seed(31);
  auto full = std::make_shared<Linear>(5, kVocabulary, options);
  manual_seed(31);
  auto split = std::make_shared<ColumnParallelLinear>(comm, 5, kVocabulary, false, options);
  const Tensor h = f64({6, 5}, 9);
  Variable h_full(h.clone(), true), h_split(h.clone(), true);
  Variable loss_full = F::softmax_cross_entropy((*full)(h_full), Variable(targets()));
  Variable loss_split = F::vocab_parallel_softmax_cross_entropy(*comm, (*split)(h_split), Variable(targets()));
  REQUIRE(std::abs(loss_split.data().item() - loss_full.data().item()) <= 1e-12);
  loss_full.backward();
  loss_split.backward();
  require_close(h_split.grad(), h_full.grad(), "hidden state gradient (every rank)");
  require_close(split->W().grad(), rows(full->W().grad(), split->share()), "W gradient");
}

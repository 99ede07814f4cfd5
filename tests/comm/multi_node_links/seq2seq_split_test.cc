// The model-parallel seq2seq of examples/seq2seq (the Encoder on rank 0 sends its final state
// to the Decoder on rank 1) against the same encoder and decoder on one process, with equal
// weights: the same loss, gradients and Adam updates for a few steps, and the same greedy
// translations. Also the example's data: number -> words and the held-out split.
#include <catch2/catch.hpp>

#include <set>

#include "autograd/functions.h"
#include "examples/seq2seq/number_words.h"
#include "examples/seq2seq/seq2seq_data.h"
#include "examples/seq2seq/seq2seq_model.h"
#include "layers/optimizers/adam.h"
#include "tests/core/test_util.h"

using namespace tandem;
using namespace tandem::examples;
using test_util::require_values;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// Seeded token sequences of lengths 1 .. max_length, ids in [first_id, vocab).
TokenSequences random_sequences(std::uint64_t seed, std::size_t count, std::int32_t first_id, std::int32_t vocab,
                                std::size_t max_length) {
  Generator generator(seed);
  TokenSequences out(count);
  for (auto& sequence : out) {
    sequence.resize(1 + generator.next() % max_length);
    for (auto& id : sequence) id = first_id + static_cast<std::int32_t>(generator.next() % (vocab - first_id));
  }
  return out;
}

// Every parameter's gradient and value in `got` equals the one of the same name in `want`.
void require_same_params(const Link& got, const Link& want) {
  const auto g = got.namedparams(), w = want.namedparams();
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    INFO("parameter " << g[i].first);
    REQUIRE(g[i].first == w[i].first);
    REQUIRE(g[i].second.grad().defined());
    require_values(g[i].second.grad(), values(w[i].second.grad()), 1e-4, 1e-6);
    require_values(g[i].second.data(), values(w[i].second.data()), 1e-5, 1e-6);
  }
}

}  // namespace

TEST_CASE("number_to_words writes numbers as English words") {
  CHECK(number_to_words(0) == "zero");
  CHECK(number_to_words(7) == "seven");
  CHECK(number_to_words(15) == "fifteen");
  CHECK(number_to_words(40) == "forty");
  CHECK(number_to_words(101) == "one hundred one");
  CHECK(number_to_words(1204) == "one thousand two hundred four");
  CHECK(number_to_words(20013) == "twenty thousand thirteen");
  CHECK(number_to_words(99999) == "ninety nine thousand nine hundred ninety nine");
  CHECK(number_to_words(100000) == "one hundred thousand");
  CHECK(number_to_words(1000001) == "one million one");
  REQUIRE_THROWS_WITH(number_to_words(-1), Catch::Matchers::Contains("number_to_words: -1 is outside"));
}

TEST_CASE("number data: digits to words, and a held-out split that training never sees") {
  const std::vector<SentencePair> pairs = number_pairs(1000);
  REQUIRE(pairs[305].source == Tokens{"3", "0", "5"});
  REQUIRE(pairs[305].target == Tokens{"three", "hundred", "five"});
  const Seq2seqData data = make_seq2seq_data(pairs, 100, 0, 7);
  REQUIRE(data.test->size() == 100);
  REQUIRE(data.train->size() == 900);
  REQUIRE(data.source_vocab.size() == 10);
  REQUIRE(data.target_vocab.token(kEos) == "<eos>");
  REQUIRE(data.max_target_length == 4);  // "three hundred seventy three"
  auto numbers = [&](const DatasetPtr& set) {
    std::vector<std::int64_t> all(set->size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    std::set<std::string> out;
    const Example batch = set->get_batch(all);
    const TokenSequences sources = unpad(batch[0]), targets = unpad(batch[1]);
    for (std::size_t i = 0; i < sources.size(); ++i) {
      std::string digits;
      for (std::int32_t id : sources[i]) digits += data.source_vocab.token(id);
      REQUIRE(data.target_vocab.join(targets[i]) == number_to_words(std::stoll(digits)));
      out.insert(digits);
    }
    return out;
  };
  const std::set<std::string> test = numbers(data.test), train = numbers(data.train);
  REQUIRE(test.size() == 100);
  REQUIRE(train.size() == 900);
  for (const auto& n : test) REQUIRE(train.count(n) == 0);
  // Both ranks of the trainer compare digests: equal for the same split, not for another.
  REQUIRE(make_seq2seq_data(pairs, 100, 0, 7).digest == data.digest);
  REQUIRE(make_seq2seq_data(pairs, 100, 0, 8).digest != data.digest);
  REQUIRE(make_seq2seq_data(pairs, 100, 50, 7).train->size() == 50);
}

TEST_CASE("seq2seq split over 2 ranks: the same loss, gradients, updates and translations as on one process") {
  auto comm = world();
  REQUIRE(comm->size() == 2);
  const int rank = comm->rank();
  Seq2seqOptions options;
  options.layers = 2;
  options.units = 8;
  options.source_vocab = 6;
  options.target_vocab = 7;
  // One process: both halves on every rank, from fixed seeds.
  manual_seed(1);
  auto ref_encoder = std::make_shared<Encoder>(options);
  manual_seed(2);
  auto ref_decoder = std::make_shared<Decoder>(options);
  Adam ref_encoder_adam(0.01), ref_decoder_adam(0.01);
  ref_encoder_adam.setup(ref_encoder);
  ref_decoder_adam.setup(ref_decoder);

  // The split model: other initial weights, overwritten with the reference's.
  manual_seed(100 + rank);
  std::shared_ptr<Link> part;
  if (rank == 0) part = std::make_shared<Encoder>(options, comm, 1);
  else part = std::make_shared<Decoder>(options, comm, 0);
  const Link& ref_part = rank == 0 ? static_cast<const Link&>(*ref_encoder) : *ref_decoder;
  REQUIRE(values(part->namedparams()[0].second.data()) != values(ref_part.namedparams()[0].second.data()));
  part->copyparams(ref_part);
  Adam adam(0.01);
  adam.setup(part);

  for (int step = 0; step < 3; ++step) {
    INFO("step " << step);
    const TokenSequences sources = random_sequences(10 + step, 5, 0, 6, 6);
    const TokenSequences targets = random_sequences(20 + step, 5, 1, 7, 5);
    ref_encoder->cleargrads();
    ref_decoder->cleargrads();
    const MultiNodeNStepRNNResult encoded = ref_encoder->forward(sources);
    const DecoderLoss ref_loss = ref_decoder->loss(encoded.hy, encoded.cy, targets);
    ref_loss.loss.backward();
    ref_encoder_adam.update();
    ref_decoder_adam.update();

    if (rank == 0) {
      auto encoder = std::static_pointer_cast<Encoder>(part);
      adam.update([&] {
        const Variable delegate = encoder->forward(sources).delegate;
        REQUIRE(delegate.defined());
        return delegate;
      });
    } else {
      auto decoder = std::static_pointer_cast<Decoder>(part);
      DecoderLoss loss;
      adam.update([&] {
        loss = decoder->loss({}, {}, targets);  // the state comes from rank 0
        return loss.loss;
      });
      REQUIRE(loss.loss.data().item() == Approx(ref_loss.loss.data().item()).epsilon(1e-5));
      REQUIRE(loss.accuracy == Approx(ref_loss.accuracy));
    }
    require_same_params(*part, ref_part);
  }

  // Greedy decoding: the decoder's first step receives the encoder's state, later steps feed
  // back its own predictions.
  NoGradGuard no_grad;
  const TokenSequences sources = random_sequences(30, 6, 0, 6, 6);
  const MultiNodeNStepRNNResult encoded = ref_encoder->forward(sources);
  const TokenSequences want = ref_decoder->translate(encoded.hy, encoded.cy, 6, 8);
  std::size_t longest = 0;
  for (const auto& sequence : want) longest = std::max(longest, sequence.size());
  REQUIRE(longest > 1);  // a translation that says something, so that the comparison means something
  if (rank == 0) {
    std::static_pointer_cast<Encoder>(part)->forward(sources);
  } else {
    const TokenSequences got = std::static_pointer_cast<Decoder>(part)->translate({}, {}, 6, 8);
    REQUIRE(got == want);
  }
}

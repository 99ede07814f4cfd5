// Activation checkpointing under the data-parallel optimizer on 2 ranks, in f64: a model of a
// token embedding and a linear layer outside any checkpoint, then 2 TransformerBlocks recomputing
// both branches, or one of them (autograd/checkpoint.h, TransformerBlock::set_recompute), trained
// 3 Adam steps with create_multi_node_optimizer, each rank on its own batch, ends with the
// parameters the same model trains to without recompute (1e-12), equal on every rank: with the
// default options (the averaging overlapped with backward through the backward observers, which
// the recompute's nested backward does not notify), with small buckets (several launched during
// backward), after backward, under ZeRO 1, and under ZeRO 3 (the parameters gathered for the
// recompute and its backward). A parameter read both inside a checkpointed region and outside it
// is averaged with the region's share of its gradient, in every mode.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autograd/checkpoint.h"
#include "autograd/functions.h"
#include "comm/data_parallel/multi_node_optimizer.h"
#include "layers/links/embed_id.h"
#include "layers/links/linear.h"
#include "layers/links/transformer.h"
#include "layers/optimizers/adam.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using test_util::values;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

constexpr std::int64_t kVocab = 16, kDim = 16, kBatch = 2, kLength = 8;

// embed -> linear "mix" -> 2 blocks -> head; softmax cross entropy over random targets.
// shared: a linear layer also read inside a checkpointed region of its own, before its use outside.
class Model : public Chain {
 public:
  // recompute: the blocks'; region: whether the shared layer's region inside is checkpointed.
  Model(Recompute recompute, bool shared, bool region) : shared_(shared), region_(region) {
    manual_seed(17);  // the same weights on every rank and in both models
    const DType f64 = DType::f64;
    LinearOptions linear;
    linear.dtype = f64;
    embed = add_link("embed", std::make_shared<EmbedID>(kVocab, kDim, std::nullopt, nullptr, f64));
    mix = add_link("mix", std::make_shared<Linear>(kDim, kDim, linear));
    TransformerBlockOptions options;
    options.heads = 2;
    options.linear = linear;
    for (int i = 0; i < 2; ++i) {
      blocks.push_back(add_link("block" + std::to_string(i), std::make_shared<TransformerBlock>(kDim, options)));
      blocks.back()->set_recompute(recompute);
    }
    head = add_link("head", std::make_shared<Linear>(kDim, kVocab, linear));
    // Registered last: its bucket is the first of the overlapped order.
    if (shared_) both = add_link("both", std::make_shared<Linear>(kDim, kDim, linear));
  }

  Variable loss(const Tensor& ids, const Tensor& targets) {
    Variable h = F::tanh(forward_last_axis(*mix, (*embed)(Variable(ids))));
    if (shared_) {
      const auto region = [this](const Variable& x) { return F::tanh(forward_last_axis(*both, x)); };
      h = F::add(h, region_ ? checkpoint(region, h) : region(h));
    }
    for (const auto& block : blocks) h = (*block)(h);
    if (shared_) h = F::add(h, forward_last_axis(*both, h));  // read again, outside, later
    const Variable logits = F::reshape(forward_last_axis(*head, h), {kBatch * kLength, kVocab});
    return F::softmax_cross_entropy(logits, Variable(targets));
  }

  std::shared_ptr<EmbedID> embed;
  std::shared_ptr<Linear> mix, head, both;
  std::vector<std::shared_ptr<TransformerBlock>> blocks;

 private:
  bool shared_, region_;
};

Tensor tokens(int step, int rank, std::uint64_t salt) {
  Generator g(1000 * salt + 10 * step + rank);
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < kBatch * kLength; ++i) v.push_back(static_cast<std::int64_t>(g.next() % kVocab));
  return from_vector(v, {kBatch, kLength});
}

const Recompute kNone{false, false}, kBoth{true, true};

struct Trained {
  std::vector<std::string> names;
  std::vector<std::vector<double>> params;
};

// 3 Adam steps on this rank's batches, data-parallel with `options` (none: the defaults).
Trained train(Recompute recompute, bool shared, bool region, const std::optional<DataParallelOptions>& options) {
  auto comm = world();
  auto model = std::make_shared<Model>(recompute, shared, region);
  auto adam = options ? create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, *options)
                      : create_multi_node_optimizer(std::make_shared<Adam>(0.01), comm, DataParallelOptions{});
  adam->setup(model);
  for (int step = 0; step < 3; ++step) {
    model->cleargrads();
    model->loss(tokens(step, comm->rank(), 1), tokens(step, comm->rank(), 2).reshape({kBatch * kLength})).backward();
    adam->update();
    REQUIRE(adam->t() == step + 1);
  }
  const auto whole = gather_parameters(*adam);  // zero = 3: the parameters are sharded
  Trained out;
  for (const auto& [name, p] : model->namedparams()) {
    out.names.push_back(name);
    out.params.push_back(values(p.data()));
  }
  return out;
}

void require_close(const Trained& got, const Trained& want, double tolerance) {
  REQUIRE(got.names == want.names);
  for (std::size_t i = 0; i < got.params.size(); ++i) {
    INFO("parameter " << got.names[i]);
    REQUIRE(got.params[i].size() == want.params[i].size());
    for (std::size_t j = 0; j < got.params[i].size(); ++j) {
      INFO("element " << j);
      REQUIRE(got.params[i][j] == Approx(want.params[i][j]).epsilon(tolerance).margin(tolerance));
    }
  }
}

// Every rank's parameters equal rank 0's, bit for bit.
void require_equal_across_ranks(const Trained& mine) {
  auto comm = world();
  for (std::size_t i = 0; i < mine.params.size(); ++i) {
    INFO("parameter " << mine.names[i]);
    const std::vector<Tensor> all = comm->allgather(from_vector(mine.params[i]));
    for (const Tensor& other : all) REQUIRE(values(other) == mine.params[i]);
  }
}

DataParallelOptions make(bool overlap, double bucket_mb, int zero) {
  DataParallelOptions o;
  o.overlap = overlap;
  o.bucket_mb = bucket_mb;
  o.zero = zero;
  return o;
}

struct Mode {
  const char* name;
  std::optional<DataParallelOptions> options;
};

const Mode kDefault{"default options (overlap, 4 MiB buckets)", std::nullopt};
const Mode kSmallBuckets{"overlap, buckets of about 2 KiB", make(true, 0.002, 0)};
const Mode kAfterBackward{"after backward", make(false, 0.002, 0)};
const Mode kZero1{"ZeRO 1, overlap", make(true, 0.002, 1)};
const Mode kZero3{"ZeRO 3, overlap", make(true, 0.002, 3)};

std::string name_of(Recompute r) {
  return std::string("recompute") + (r.attention ? " attention" : "") + (r.mlp ? " mlp" : "");
}

}  // namespace

TEST_CASE("data-parallel with recomputed transformer blocks trains as without recompute, equal on every rank") {
  REQUIRE(world()->size() == 2);
  const Trained reference = train(kNone, false, false, std::nullopt);
  // The ranks' batches differ: without the averaging they would part.
  require_equal_across_ranks(reference);
  for (const Mode& mode : {kDefault, kSmallBuckets, kAfterBackward, kZero1}) {
    INFO(mode.name);
    const Trained want = train(kNone, false, false, mode.options);
    require_close(want, reference, 1e-12);
    for (const Recompute r : {kBoth, Recompute{false, true}, Recompute{true, false}}) {
      INFO(name_of(r));
      const Trained got = train(r, false, false, mode.options);
      require_close(got, want, 1e-12);
      require_equal_across_ranks(got);
    }
  }
}

// The recompute reads the links' parameters again in backward, and its nested backward reads them
// after that: under ZeRO 3 they must still be gathered then.
TEST_CASE("data-parallel with recomputed transformer blocks under ZeRO 3") {
  const Trained want = train(kNone, false, false, kZero3.options);
  require_close(want, train(kNone, false, false, std::nullopt), 1e-12);
  for (const Recompute r : {kBoth, Recompute{false, true}, Recompute{true, false}}) {
    INFO(name_of(r));
    Trained got;
    REQUIRE_NOTHROW(got = train(r, false, false, kZero3.options));
    require_close(got, want, 1e-12);
    require_equal_across_ranks(got);
  }
}

// The outer backward counts only the uses it sees: the parameter's gradient is complete for it
// once its use outside is done, before the checkpoint's recompute adds the region's share.
TEST_CASE("data-parallel: a parameter read inside a checkpointed region and again outside it is averaged whole") {
  const Trained reference = train(kNone, true, false, std::nullopt);
  for (const Mode& mode : {kDefault, kSmallBuckets, kAfterBackward, kZero1, kZero3}) {
    INFO(mode.name);
    const Trained want = train(kNone, true, false, mode.options);
    require_close(want, reference, 1e-12);
    Trained got;
    REQUIRE_NOTHROW(got = train(kNone, true, true, mode.options));
    require_close(got, want, 1e-12);
    require_equal_across_ranks(got);
  }
}

// The transformer's links: PositionalEmbedding, MultiHeadSelfAttention, TransformerMLP,
// TransformerBlock, forward_last_axis and initializers::seeded. Values against the functions
// composed by hand, gradients (input and every parameter) against central differences in f64,
// causality, the weights' draw order, errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/gradcheck.h"
#include "core/ops.h"
#include "layers/links/multi_head_attention.h"
#include "layers/links/positional_embedding.h"
#include "layers/links/transformer.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

Tensor uniform(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1) {
  Generator generator(seed);
  return rand_uniform(shape, generator, low, high, DType::f64);
}

// Every parameter variable of `link` and its descendants, as references into the links.
void collect_params(Link& link, std::vector<Variable*>& out) {
  for (const auto& [name, value] : link.namedparams())
    if (name.find('/') == std::string::npos) out.push_back(&link.param(name));
  for (const auto& [name, child] : link.children()) collect_params(*child, out);
}

// gradcheck of link(x) with respect to x and every parameter: the checker's variables are put in
// place of the link's parameters, so the gradients flow to them.
GradcheckResult link_gradcheck(Link& link, const Tensor& x) {
  std::vector<Variable*> params;
  collect_params(link, params);
  std::vector<Tensor> inputs{x};
  for (Variable* p : params) inputs.push_back(p->data().clone());
  return gradcheck(
      [&](const Variables& xs) -> Variables {
        for (std::size_t i = 0; i < params.size(); ++i) *params[i] = xs[i + 1];
        return {link.forward(xs[0])};
      },
      inputs);
}

LinearOptions f64_options(std::uint64_t seed) {
  LinearOptions options;
  options.dtype = DType::f64;
  options.initialW = initializers::seeded(seed, initializers::lecun_normal());
  options.initial_bias = initializers::seeded(seed + 1, initializers::normal(0.1));  // non-zero biases
  return options;
}

}  // namespace

TEST_CASE("forward_last_axis: a Linear over the last axis of a sequence", "[links][transformer]") {
  Linear linear(4, 5, f64_options(1));
  const Tensor x = uniform({2, 3, 4}, 2);
  const Variable y = forward_last_axis(linear, Variable(x));
  REQUIRE(y.shape() == Shape{2, 3, 5});
  const Variable rows = linear(Variable(x.reshape({6, 4})));
  CHECK(y.data().to_vector<double>() == rows.data().to_vector<double>());
}

TEST_CASE("initializers::seeded: its own stream, shared by copies, the global one untouched", "[initializers]") {
  manual_seed(5);
  const double global_first = randn({1}, global_generator()).to_vector<double>()[0];
  manual_seed(5);
  auto init = initializers::seeded(9, initializers::normal(1.0));
  auto copy = init;
  const Tensor a = init({3}, DType::f64), b = copy({3}, DType::f64);
  Generator reference(9);
  CHECK(a.to_vector<double>() == randn({3}, reference, 0, 1, DType::f64).to_vector<double>());
  CHECK(b.to_vector<double>() == randn({3}, reference, 0, 1, DType::f64).to_vector<double>());  // the copy went on
  CHECK(randn({1}, global_generator()).to_vector<double>()[0] == global_first);
}

TEST_CASE("PositionalEmbedding: x + W[0:T], gradients, errors", "[links][transformer]") {
  PositionalEmbedding pos(5, 3, initializers::seeded(3, initializers::normal(1.0)), DType::f64);
  REQUIRE(pos.W().shape() == Shape{5, 3});
  const Tensor x = uniform({2, 4, 3}, 4);
  const std::vector<double> y = pos(Variable(x)).data().to_vector<double>(), xs = x.to_vector<double>(),
                            W = pos.W().data().to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t)
      for (int c = 0; c < 3; ++c) CHECK(y[(b * 4 + t) * 3 + c] == xs[(b * 4 + t) * 3 + c] + W[t * 3 + c]);
  const GradcheckResult result = link_gradcheck(pos, x);
  INFO(result.report);
  CHECK(result.ok);
  CHECK(pos(Variable(uniform({1, 5, 3}, 5))).shape() == Shape{1, 5, 3});  // T = max_length
  CHECK_THROWS_WITH(pos(Variable(uniform({1, 6, 3}, 6))), Catch::Contains("needs 1 <= T <= max_length 5"));
  CHECK_THROWS_WITH(pos(Variable(uniform({1, 4, 2}, 7))), Catch::Contains("input must be [B, T, 3]"));
}

TEST_CASE("MultiHeadSelfAttention: proj(attention(qkv(x))), gradients", "[links][transformer]") {
  MultiHeadSelfAttention attention(4, 2, true, f64_options(10));
  const Tensor x = uniform({2, 3, 4}, 11);
  const Variable y = attention(Variable(x));
  auto qkv = std::dynamic_pointer_cast<Linear>(attention.child("qkv"));
  auto proj = std::dynamic_pointer_cast<Linear>(attention.child("proj"));
  REQUIRE(qkv->W().shape() == Shape{12, 4});
  REQUIRE(proj->W().shape() == Shape{4, 4});
  const Variable rows = F::reshape(Variable(x), {6, 4});
  const Variable heads = F::multi_head_self_attention(F::reshape((*qkv)(rows), {2, 3, 12}), 2, true);
  const Variable want = F::reshape((*proj)(F::reshape(heads, {6, 4})), {2, 3, 4});
  CHECK(y.data().to_vector<double>() == want.data().to_vector<double>());
  const GradcheckResult result = link_gradcheck(attention, x);
  INFO(result.report);
  CHECK(result.ok);
  CHECK_THROWS_WITH(MultiHeadSelfAttention(6, 4), Catch::Contains("dim 6 must be a positive multiple of heads 4"));
}

TEST_CASE("TransformerBlock: the pre-norm residual form, causal, gradients", "[links][transformer]") {
  TransformerBlockOptions options;
  options.heads = 2;
  options.mlp_ratio = 2;
  options.linear = f64_options(20);
  TransformerBlock block(4, options);
  std::vector<std::string> names;
  for (const auto& [name, p] : block.namedparams()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"ln1/gamma", "ln1/beta", "attention/qkv/W", "attention/qkv/b",
                                          "attention/proj/W", "attention/proj/b", "ln2/gamma", "ln2/beta",
                                          "mlp/fc1/W", "mlp/fc1/b", "mlp/fc2/W", "mlp/fc2/b"});
  // The draw order: the same seeded initialiser given to the branches built alone, in the
  // order qkv, proj, fc1, fc2, gives the same weights.
  MultiHeadSelfAttention attention(4, 2, true, f64_options(20));
  TransformerMLP mlp(4, 8, options.linear);  // the copy of a fresh seeded(20): the stream starts again...
  const LinearOptions shared = f64_options(20);
  MultiHeadSelfAttention attention2(4, 2, true, shared);
  TransformerMLP mlp2(4, 8, shared);  // ...while these draw on after attention2's
  CHECK(block.get("attention")->namedparams()[0].second.data().to_vector<double>() ==
        attention2.namedparams()[0].second.data().to_vector<double>());
  CHECK(block.get("mlp")->namedparams()[0].second.data().to_vector<double>() ==
        mlp2.namedparams()[0].second.data().to_vector<double>());
  CHECK(block.get("mlp")->namedparams()[0].second.data().to_vector<double>() !=
        mlp.namedparams()[0].second.data().to_vector<double>());

  const Tensor x = uniform({2, 4, 4}, 21);
  const Variable y = block(Variable(x));
  // x + attention(ln1(x)), then h + mlp(ln2(h)), composed from the block's own children.
  const Variable vx(x);
  const Variable h = F::add(vx, block.get("attention")->forward(block.get("ln1")->forward(vx)));
  const Variable want = F::add(h, block.get("mlp")->forward(block.get("ln2")->forward(h)));
  CHECK(y.data().to_vector<double>() == want.data().to_vector<double>());

  // Causal: changing the last position leaves every earlier output as it was.
  std::vector<double> changed = x.to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 4; ++c) changed[(b * 4 + 3) * 4 + c] += 0.5;
  const std::vector<double> y2 = block(Variable(from_vector<double>(changed, {2, 4, 4}))).data().to_vector<double>(),
                            y1 = y.data().to_vector<double>();
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 4; ++t)
      for (int c = 0; c < 4; ++c) {
        const std::size_t i = static_cast<std::size_t>((b * 4 + t) * 4 + c);
        if (t < 3) CHECK(y2[i] == y1[i]);
      }
  CHECK(y2[3 * 4] != y1[3 * 4]);

  const GradcheckResult result = link_gradcheck(block, x);
  INFO(result.report);
  CHECK(result.ok);
  CHECK_THROWS_WITH(block(Variable(uniform({2, 4, 3}, 22))), Catch::Contains("TransformerBlock: input must be [B, T, 4]"));
  CHECK_THROWS_WITH(TransformerBlock(4, nullptr, std::make_shared<TransformerMLP>(4, 8)),
                    Catch::Contains("must be links, not null"));
}

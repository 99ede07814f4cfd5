// Converting a tensor-parallel model's parameters to the unsplit model's and back
// (comm/tensor_parallel/tensor_parallel_checkpoint.h), at 1 to 4 ranks: the split model gathered equals
// the unsplit model built from the same seed; unsplit values scattered into the split model and
// gathered again come back exactly; through a one-process npz file; and the errors.
#include <catch2/catch.hpp>

#include <cstdio>

#include "comm/multi_node_links/parallel_convolution_2d.h"
#include "comm/tensor_parallel/tensor_parallel_checkpoint.h"
#include "comm/tensor_parallel/tensor_parallel_linear.h"
#include "comm/tensor_parallel/vocab_parallel_embedding.h"
#include "core/random.h"
#include "layers/links/convolution_2d.h"
#include "layers/links/embed_id.h"
#include "layers/serializers/serializers.h"
#include "tests/core/test_util.h"

using namespace tandem;
using Catch::Matchers::Contains;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

LinearOptions f64_options() {
  LinearOptions options;
  options.dtype = DType::f64;
  options.initial_bias = initializers::normal(0.5);
  return options;
}

std::shared_ptr<ChainList> unsplit_model() {
  auto model = std::make_shared<ChainList>();
  model->append(std::make_shared<EmbedID>(11, 6, std::nullopt, nullptr, DType::f64));
  model->append(std::make_shared<Linear>(6, 9, f64_options()));
  model->append(std::make_shared<Linear>(9, 6, f64_options()));
  Convolution2DOptions conv = Convolution2DOptions::make(3, 1, 1);
  conv.dtype = DType::f64;
  model->append(std::make_shared<Convolution2D>(2, 5, conv));
  return model;
}

std::shared_ptr<ChainList> split_model(const CommunicatorPtr& comm) {
  auto model = std::make_shared<ChainList>();
  model->append(std::make_shared<VocabParallelEmbedding>(comm, 11, 6, std::nullopt, nullptr, DType::f64));
  model->append(std::make_shared<ColumnParallelLinear>(comm, 6, 9, false, f64_options()));
  model->append(std::make_shared<RowParallelLinear>(comm, 9, 6, true, f64_options()));
  Convolution2DOptions conv = Convolution2DOptions::make(3, 1, 1);
  conv.dtype = DType::f64;
  model->append(std::make_shared<ParallelConvolution2D>(comm, 2, 5, conv));
  return model;
}

void require_same(const NamedTensors& got, const std::vector<std::pair<std::string, Variable>>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    REQUIRE(got[i].first == want[i].first);
    REQUIRE(got[i].second.shape() == want[i].second.shape());
    REQUIRE(got[i].second.to_vector<double>() == want[i].second.data().to_vector<double>());
  }
}

// The split model's parameters gathered, as (name, variable) pairs for require_same.
std::vector<std::pair<std::string, Variable>> unsplit_reference(Link& split) {
  std::vector<std::pair<std::string, Variable>> out;
  for (auto& [name, value] : gather_tensor_parallel_params(split)) out.emplace_back(name, Variable(value));
  return out;
}

}  // namespace

TEST_CASE("tensor-parallel checkpoints: gathered, the split model is the unsplit one; scattered, back exactly") {
  const CommunicatorPtr comm = world();
  manual_seed(51);
  auto whole = unsplit_model();
  manual_seed(51);
  auto split = split_model(comm);
  require_same(gather_tensor_parallel_params(*split), whole->namedparams());

  // New unsplit values (as a one-process checkpoint would hold), scattered into the split model.
  Generator gen(52);
  for (auto& [name, param] : whole->namedparams()) param.set_data(randn(param.shape(), gen, 0, 1, DType::f64));
  NamedTensors values;
  for (auto& [name, param] : whole->namedparams()) values.emplace_back(name, param.data());
  scatter_tensor_parallel_params(*split, values);
  require_same(gather_tensor_parallel_params(*split), whole->namedparams());

  // Through a file written by one rank, as a one-process checkpoint.
  const std::string path = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                           "/tp_checkpoint_" + std::to_string(comm->size()) + ".npz";
  const NamedTensors gathered = gather_tensor_parallel_params(*split);  // collective: every rank
  if (comm->rank() == 0) write_npz(path, gathered);
  comm->barrier();
  manual_seed(53);
  auto fresh = split_model(comm);
  scatter_tensor_parallel_params(*fresh, read_npz(path));
  require_same(gather_tensor_parallel_params(*fresh), whole->namedparams());
  comm->barrier();
  if (comm->rank() == 0) std::remove(path.c_str());
}

TEST_CASE("tensor-parallel checkpoints: a missing or misshapen value is an error naming the parameter") {
  const CommunicatorPtr comm = world();
  auto split = split_model(comm);
  NamedTensors values = gather_tensor_parallel_params(*split);
  NamedTensors missing(values.begin() + 1, values.end());
  REQUIRE_THROWS_WITH(scatter_tensor_parallel_params(*split, missing),
                      Contains("no value for parameter '0/W'"));
  values[1].second = zeros({10, 6}, DType::f64);  // Linear(6, 9)'s W with a row too many
  REQUIRE_THROWS_WITH(scatter_tensor_parallel_params(*split, values),
                      Contains("'1/W' is f64[10, 6] unsplit") && Contains("does not fit the parameter"));
}

TEST_CASE("tensor-parallel checkpoints: written split (a file per rank) and read back split") {
  const CommunicatorPtr comm = world();
  manual_seed(61);
  auto split = split_model(comm);
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  const std::string path = dir + "/tp_split_" + std::to_string(comm->size()) + "_rank" + std::to_string(comm->rank()) + ".npz";
  save_npz(path, *split);
  manual_seed(62);
  auto fresh = split_model(comm);
  load_npz(path, *fresh);
  require_same(gather_tensor_parallel_params(*fresh), unsplit_reference(*split));
  std::remove(path.c_str());
}

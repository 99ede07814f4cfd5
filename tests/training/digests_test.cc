// Digests of every step (training/digests.h): identical runs give identical records, and a
// weight nudged by one ulp before step 2 is named exactly as the first difference.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include "autograd/functions.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/adam.h"
#include "training/digests.h"
#include "training/updater.h"
#include "tests/training/test_util.h"

using namespace tandem;
using test_util::fresh_dir;
using test_util::read_all;
using Catch::Matchers::Contains;

namespace {

class MLP : public Chain {
 public:
  MLP() {
    l1 = add_link("l1", std::make_shared<Linear>(5, 8));
    l2 = add_link("l2", std::make_shared<Linear>(8, 3));
  }
  Variable forward(const Variable& x) override { return (*l2)(F::relu((*l1)(x))); }
  std::shared_ptr<Linear> l1, l2;
};

// Three steps of a small classifier, recorded in `dir`; `nudge` runs before step 2.
void train_three_steps(const std::string& dir, const std::function<void(Link&)>& nudge = nullptr) {
  Generator gen(11);
  const Tensor x = randn({48, 5}, gen);
  const Tensor t = argmax(matmul(x, randn({5, 3}, gen)), 1).to(DType::i32);
  auto data = std::make_shared<TupleDataset>(std::vector<Tensor>{x, t});
  manual_seed(5);
  auto model = std::make_shared<Classifier>(std::make_shared<MLP>());
  auto optimizer = std::make_shared<Adam>(0.05);
  optimizer->setup(model);
  StandardUpdater updater(std::make_shared<SerialIterator>(data, 16, true, true, 3), optimizer);
  updater.record_digests(dir);
  for (int step = 1; step <= 3; ++step) {
    if (step == 2 && nudge) nudge(*model);
    updater.update();
  }
  updater.record_digests("");
}

}  // namespace

TEST_CASE("identical runs record identical digests of every parameter, activation and gradient", "[digests]") {
  const std::string a = fresh_dir("digests-a"), b = fresh_dir("digests-b");
  train_three_steps(a);
  train_three_steps(b);
  CHECK(compare_digest_records(a, b) == "");
  const std::string record = read_all(a + "/digests.rank0.tsv");
  CHECK_THAT(record, Contains("1\tparam\t0\tpredictor/l1/W\tf32[8,5]\t"));
  CHECK_THAT(record, Contains("output 0 (predictor/l1/W, predictor/l1/b)\tf32[16,8]\t"));
  CHECK_THAT(record, Contains("grad of input 1 (predictor/l2/W)\tf32[3,8]\t"));
  CHECK_THAT(record, Contains("3\tgrad\t"));
}

TEST_CASE("a weight nudged by one ulp before step 2 is named as the first difference", "[digests]") {
  const std::string a = fresh_dir("digests-plain"), b = fresh_dir("digests-nudged");
  train_three_steps(a);
  train_three_steps(b, [](Link& model) {
    for (auto& [name, param] : model.namedparams()) {
      if (name != "predictor/l2/W") continue;
      Tensor data = param.data();
      float* w = static_cast<float*>(data.raw_data());
      w[4] = std::nextafter(w[4], std::numeric_limits<float>::infinity());
    }
  });
  const std::string report = compare_digest_records(a, b);
  INFO(report);
  CHECK_THAT(report, Contains("first difference at step 2\n"));
  // Parameters come first in a step, in path order: l1/W, l1/b, l2/W.
  CHECK_THAT(report, Contains("rank 0: step 2 param #2 predictor/l2/W f32[3,8]: "));
}

TEST_CASE("records of runs that took different paths, or of other ranks, are told apart", "[digests]") {
  const std::string a = fresh_dir("digests-3"), b = fresh_dir("digests-2");
  train_three_steps(a);
  // B: the first 20 lines of A's record, as if its run had stopped there.
  REQUIRE(std::system(("mkdir -p " + b + " && head -n 20 " + a + "/digests.rank0.tsv > " + b +
                       "/digests.rank0.tsv").c_str()) == 0);
  CHECK_THAT(compare_digest_records(a, b), Contains("goes on where the other ends"));
  REQUIRE(std::system(("cp " + a + "/digests.rank0.tsv " + b + "/digests.rank1.tsv").c_str()) == 0);
  CHECK_THAT(compare_digest_records(a, b), Contains("rank 1 has a record in " + b + " only"));
  CHECK_THROWS_WITH(compare_digest_records(a, fresh_dir("digests-none")), Contains("no digests.rank<R>.tsv"));
}

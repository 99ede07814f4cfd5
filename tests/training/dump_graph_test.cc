// DumpGraph: Chainer's extension writes <out>/cg.dot (and its SVG) once, at the first iteration,
// with the model's parameter names; and dump_graph with a Link names parameters by their paths.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "autograd/functions.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "training/extensions/dump_graph.h"
#include "training/trainer.h"
#include "tests/training/test_util.h"

using namespace tandem;
using test_util::fresh_dir;
using test_util::read_all;

namespace {

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

class MLP : public Chain {
 public:
  MLP() : l1(add_link("l1", std::make_shared<Linear>(5, 4))), l2(add_link("l2", std::make_shared<Linear>(4, 3))) {}
  Variable forward(const Variable& x) override { return (*l2)(F::relu((*l1)(x))); }
  std::shared_ptr<Linear> l1, l2;
};

// Runs after DumpGraph at every iteration: records whether cg.dot is there, then removes it,
// so a second write would show.
class Probe : public Extension {
 public:
  explicit Probe(std::string path) : path_(std::move(path)) {}
  std::string name() const override { return "Probe"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  int priority() const override { return 0; }  // after DumpGraph (100)
  void operator()(Trainer& trainer) override {
    const bool there = exists(path_);
    seen.push_back(there);
    if (there) {
      first = read_all(path_);
      iteration = trainer.iteration();
      std::remove(path_.c_str());
    }
  }
  std::vector<bool> seen;
  std::string first;
  std::int64_t iteration = -1;

 private:
  std::string path_;
};

}  // namespace

TEST_CASE("DumpGraph writes cg.dot at the first iteration only, with the model's names") {
  const std::string out = fresh_dir("dump_graph");
  Generator gen(3);
  auto data = std::make_shared<TupleDataset>(
      std::vector<Tensor>{randn({20, 5}, gen), from_vector<std::int32_t>(std::vector<std::int32_t>(20, 2))});
  auto model = std::make_shared<Classifier>(std::make_shared<MLP>());
  auto optimizer = std::make_shared<SGD>();
  optimizer->setup(model);
  auto updater = std::make_shared<StandardUpdater>(std::make_shared<SerialIterator>(data, 5), optimizer);
  Trainer trainer(updater, Trigger::iterations(3), out, model);
  trainer.extend(std::make_shared<DumpGraph>("main/loss", "cg.dot"));
  auto probe = std::make_shared<Probe>(out + "/cg.dot");
  trainer.extend(probe);
  trainer.run();

  CHECK(probe->seen == std::vector<bool>{true, false, false});
  CHECK(probe->iteration == 1);
  const std::string& dot = probe->first;
  CHECK(dot.find("label=\"predictor/l1/W\\nf32[4, 5]\"") != std::string::npos);
  CHECK(dot.find("label=\"predictor/l2/b\\nf32[3]\"") != std::string::npos);
  CHECK(dot.find("label=\"softmax_cross_entropy\"") != std::string::npos);
  CHECK(dot.find("label=\"linear+relu\"") != std::string::npos);  // F::relu taken into l1
  CHECK(dot.find("label=\"f32[5, 5]\"") != std::string::npos);  // the batch
  // The SVG beside it, where Graphviz is installed.
  if (graphviz_dot().empty())
    std::printf("SKIPPED: the SVG check: Graphviz's dot was not found\n");
  else
    CHECK(read_all(out + "/cg.svg").find("<svg") != std::string::npos);
}

TEST_CASE("DumpGraph: the root is the updater's loss; other names are an error") {
  CHECK_THROWS_WITH(DumpGraph("main/accuracy"), Catch::Contains("DumpGraph: the root must be \"main/loss\""));
}

TEST_CASE("dump_graph with a Link names the parameters by their paths") {
  const std::string out = fresh_dir("dump_graph_link");
  REQUIRE(std::system(("mkdir -p " + out).c_str()) == 0);
  auto model = std::make_shared<Classifier>(std::make_shared<MLP>());
  Generator gen(1);
  Variable loss = model->forward(Variable(randn({2, 5}, gen)), Variable(from_vector<std::int32_t>({0, 1})));
  dump_graph({loss}, out + "/g.dot", *model);
  CHECK(read_all(out + "/g.dot").find("label=\"predictor/l2/W\\nf32[3, 4]\"") != std::string::npos);
}

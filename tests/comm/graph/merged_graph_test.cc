// The merged graph of a 2-rank job: every rank's graph in a cluster, each send joined to its
// recv (forward direction, matched per tag in order), collectives joined across ranks, only on
// the communicator given, and the multi-node DumpGraph. Checks run on rank 0 (the only rank with
// the DOT); every rank takes part in every collective.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "autograd/functions.h"
#include "comm/multi_node_data/empty_dataset.h"
#include "comm/functions.h"
#include "comm/graph/merged_graph.h"
#include "comm/graph/multi_node_dump_graph.h"
#include "comm/multi_node_links/multi_node_chain_list.h"
#include "core/ops.h"
#include "data/data.h"
#include "layers/links/classifier.h"
#include "layers/links/identity.h"
#include "layers/links/linear.h"
#include "layers/optimizers/sgd.h"
#include "training/trainer.h"

using namespace tandem;

namespace {

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

// What the checks read of a merged DOT: node labels by id, message edges, collective joins.
struct Merged {
  std::map<std::string, std::string> labels;
  std::vector<std::pair<std::string, std::string>> messages, joins;
  std::string text;
};

Merged parse(const std::string& dot) {
  Merged m;
  m.text = dot;
  const std::regex node(R"((\w+) \[label="([^"]*)\")"), message(R"((\w+) -> (\w+) \[color="#c03000")"),
      join(R"((\w+) -> (c\d+) \[dir=none)");
  for (auto it = std::sregex_iterator(dot.begin(), dot.end(), node); it != std::sregex_iterator(); ++it)
    m.labels[(*it)[1]] = (*it)[2];
  for (auto it = std::sregex_iterator(dot.begin(), dot.end(), message); it != std::sregex_iterator(); ++it)
    m.messages.emplace_back((*it)[1], (*it)[2]);
  for (auto it = std::sregex_iterator(dot.begin(), dot.end(), join); it != std::sregex_iterator(); ++it)
    m.joins.emplace_back((*it)[1], (*it)[2]);
  return m;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string temp_dir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ChainerMN's model-parallel MLP (examples/mnist/train_mnist_model_parallel): rank 0 holds
// Linear + ReLU and the loss, rank 1 Linear + ReLU -> Linear.
class First : public Chain {
 public:
  First() : l1(add_link("l1", std::make_shared<Linear>(3, 5))) {}
  Variable forward(const Variable& x) override { return F::relu((*l1)(x)); }
  std::shared_ptr<Linear> l1;
};
class Last : public Chain {
 public:
  Last() : l2(add_link("l2", std::make_shared<Linear>(5, 5))), l3(add_link("l3", std::make_shared<Linear>(5, 2))) {}
  Variable forward(const Variable& x) override { return (*l3)(F::relu((*l2)(x))); }
  std::shared_ptr<Linear> l2, l3;
};

std::shared_ptr<Link> model_parallel_mlp() {
  auto chain = std::make_shared<MultiNodeChainList>(world());
  if (world()->rank() == 1) {
    chain->add_link(std::make_shared<Last>(), 0, 0);
    return chain;
  }
  chain->add_link(std::make_shared<First>(), {}, 1);
  chain->add_link(std::make_shared<Identity>(), 1, {});  // the logits come back
  return std::make_shared<Classifier>(chain);
}

// The two message edges of the MLP: rank 0's send to rank 1's recv, rank 1's send back to rank
// 0's recv, in that direction, and nothing unmatched.
void check_mlp_messages(const Merged& m) {
  CHECK(m.text.find("subgraph cluster_rank0 {\n    label=\"rank 0\";") != std::string::npos);
  CHECK(m.text.find("subgraph cluster_rank1 {\n    label=\"rank 1\";") != std::string::npos);
  REQUIRE(m.messages.size() == 2);
  int forward = 0, back = 0;
  for (const auto& [from, to] : m.messages) {
    INFO(from << " -> " << to);
    if (starts_with(from, "r0_")) {
      CHECK(starts_with(to, "r1_"));
      CHECK(starts_with(m.labels.at(from), "send\\nto rank 1, tag 0\\nrank 0 of 2"));
      CHECK(starts_with(m.labels.at(to), "recv\\nfrom rank 0, tag 0\\nrank 1 of 2"));
      ++forward;
    } else {
      CHECK(starts_with(from, "r1_"));
      CHECK(starts_with(to, "r0_"));
      CHECK(starts_with(m.labels.at(from), "send\\nto rank 0, tag 0\\nrank 1 of 2"));
      CHECK(starts_with(m.labels.at(to), "recv\\nfrom rank 1, tag 0\\nrank 0 of 2"));
      ++back;
    }
  }
  CHECK(forward == 1);
  CHECK(back == 1);
  CHECK(m.joins.empty());
  CHECK(m.text.find("unmatched") == std::string::npos);
}

}  // namespace

TEST_CASE("merged graph: the model-parallel MLP, both ranks' clusters joined by their messages") {
  manual_seed(1 + world()->rank());
  std::shared_ptr<Link> model = model_parallel_mlp();
  Generator gen(5);
  Variable root = world()->rank() == 0
                      ? model->forward(Variable(randn({4, 3}, gen)), Variable(from_vector<std::int32_t>({0, 1, 1, 0})))
                      : model->forward();  // rank 1: the delegate
  root.backward();  // as the trainer's graph is when DumpGraph runs
  const std::string dot = merged_graph_dot(*world(), {root}, model->namedparams());
  if (world()->rank() != 0) {
    CHECK(dot.empty());
    return;
  }
  std::printf("%s", dot.c_str());
  const Merged m = parse(dot);
  check_mlp_messages(m);
  // Each rank's functions and its parameters by their names, in its own cluster. F::relu of a
  // layer's output is taken into the layer's function (autograd/functions/fused_activation.h).
  CHECK(m.labels.at("r0_f0") == "linear+relu");
  CHECK(m.labels.count("r0_f3") == 1);
  CHECK(m.labels.at("r0_f3") == "softmax_cross_entropy");
  CHECK(m.labels.count("r0_f4") == 0);
  CHECK(m.labels.at("r1_f1") == "linear+relu");
  CHECK(m.labels.at("r1_f2") == "linear");
  CHECK(m.text.find("label=\"predictor/0/l1/W\\nf32[5, 3]\"") != std::string::npos);
  CHECK(m.text.find("label=\"0/l2/W\\nf32[5, 5]\"") != std::string::npos);
  CHECK(m.text.find("label=\"0/l3/b\\nf32[2]\"") != std::string::npos);
}

TEST_CASE("merged graph: the n-th send on a tag meets the n-th recv on it") {
  const int rank = world()->rank();
  Variables outputs;
  if (rank == 0) {  // a and b on tag 0, then c on tag 1
    for (int tag : {0, 0, 1}) outputs.push_back(F::send(Variable(ones({2}), true), *world(), 1, tag));
  } else if (rank == 1) {  // received as a (tag 0), c (tag 1), b (tag 0)
    for (int tag : {0, 1, 0}) outputs.push_back(F::recv(*world(), 0, Variable(), tag));
  }
  const Merged m = parse(merged_graph_dot(*world(), outputs));
  if (rank != 0) return;
  using Edge = std::pair<std::string, std::string>;
  CHECK(m.messages == std::vector<Edge>{{"r0_f0", "r1_f0"}, {"r0_f1", "r1_f2"}, {"r0_f2", "r1_f1"}});
  CHECK(m.text.find("unmatched") == std::string::npos);
}

TEST_CASE("merged graph: a message whose other end is not in the graph is listed as unmatched") {
  const int rank = world()->rank();
  Variables outputs;
  if (rank == 0) outputs.push_back(F::send(Variable(ones({2}), true), *world(), 1, 5));
  if (rank == 1) {
    F::recv(*world(), 0, Variable(), 5);  // received, and dropped
    outputs.push_back(Variable(ones({1})));
  }
  const Merged m = parse(merged_graph_dot(*world(), outputs));
  if (rank != 0) return;
  CHECK(m.messages.empty());
  CHECK(m.text.find("// unmatched: r0_f0 (send from rank 0 to rank 1, tag 5)") != std::string::npos);
}

TEST_CASE("merged graph: each allreduce is one node joined to every rank's, in order") {
  Variable x(full({3}, 1.0 + world()->rank()), true);
  Variable y = F::allreduce(*world(), x);                // f0
  Variable z = F::allreduce(*world(), F::mul(y, y));     // f1 mul, f2 allreduce
  Variable root = F::sum(z);                             // f3
  // On a communicator of its own (split): not world's, so not joined by world's dump.
  auto other = world()->split(0, world()->rank());
  Variable elsewhere = F::allreduce(*other, x);
  const std::string dot = merged_graph_dot(*world(), {root, elsewhere});
  if (world()->rank() != 0) return;
  std::printf("%s", dot.c_str());
  const Merged m = parse(dot);
  using Edge = std::pair<std::string, std::string>;
  // The split allreduce ran first on the tape after z (f4), so world's are f0 and f2.
  CHECK(m.joins == std::vector<Edge>{{"r0_f0", "c0"}, {"r1_f0", "c0"}, {"r0_f2", "c1"}, {"r1_f2", "c1"}});
  CHECK(m.labels.at("c0") == "allreduce #0");
  CHECK(m.labels.at("c1") == "allreduce #1");
  CHECK(m.labels.at("r1_f2") == "allreduce\\nall ranks\\nrank 1 of 2");
  CHECK(m.labels.at("r0_f4") == "allreduce\\nall ranks\\nrank 0 of 2");  // shown, not joined
  CHECK(m.messages.empty());
  CHECK(m.text.find("unmatched") == std::string::npos);
}

TEST_CASE("merged graph: rank 0 writes the .dot and, with Graphviz, a valid SVG") {
  Variable x(full({3}, 1.0), true);
  const std::string path = temp_dir() + "/merged.dot", svg = temp_dir() + "/merged.svg";
  if (world()->rank() == 0) std::remove(svg.c_str());
  dump_merged_graph(*world(), {F::sum(F::allreduce(*world(), x))}, path);
  if (world()->rank() != 0) return;
  CHECK(read(path).find("subgraph cluster_rank1") != std::string::npos);
  if (graphviz_dot().empty()) {
    std::printf("SKIPPED: rendering the merged graph: Graphviz's dot was not found\n");
    return;
  }
  CHECK(read(svg).find("<svg") != std::string::npos);
}

TEST_CASE("multi-node DumpGraph: every rank runs it, rank 0 writes the merged graph of the job") {
  const int rank = world()->rank();
  const std::string out = temp_dir() + "/mn_dump" + (rank == 0 ? "" : "/rank1");
  manual_seed(1 + rank);
  std::shared_ptr<Link> model = model_parallel_mlp();
  Generator gen(5);
  DatasetPtr data = std::make_shared<TupleDataset>(
      std::vector<Tensor>{randn({20, 3}, gen), from_vector<std::int32_t>(std::vector<std::int32_t>(20, 1))});
  if (rank == 1) data = create_empty_dataset(data);
  auto optimizer = std::make_shared<SGD>();
  optimizer->setup(model);
  auto updater =
      std::make_shared<StandardUpdater>(std::make_shared<SerialIterator>(data, 5, true, false), optimizer);
  Trainer trainer(updater, Trigger::iterations(3), out, model);
  trainer.extend(create_multi_node_dump_graph(world()));
  trainer.run();
  if (rank != 0) {
    CHECK(::access((out + "/cg.dot").c_str(), F_OK) != 0);  // rank 0 writes the job's one file
    return;
  }
  const std::string dot = read(out + "/cg.dot");
  check_mlp_messages(parse(dot));
}

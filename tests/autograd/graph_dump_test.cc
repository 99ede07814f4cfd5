// Graph dumps: the DOT of a small MLP (function and variable nodes, parameter names, edges),
// the same text for the same graph, communication descriptions, and the .dot without Graphviz.
// Rendering with Graphviz is graph_dump_render_test.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "autograd/functions.h"
#include "autograd/graph_dump.h"
#include "core/ops.h"

using namespace tandem;

namespace {

// A two-layer MLP with its loss; names as a Link's namedparams() would give them.
struct Mlp {
  Generator gen{7};
  Variable x{randn({4, 3}, gen)};
  Variable w1{randn({5, 3}, gen), true}, b1{zeros({5}), true};
  Variable w2{randn({2, 5}, gen), true}, b2{zeros({2}), true};
  Variable t{from_vector<std::int64_t>({0, 1, 1, 0})};
  VariableNames names{{"l1/W", w1}, {"l1/b", b1}, {"l2/W", w2}, {"l2/b", b2}};
  Variable loss() const {
    const Variable h = F::linear(x, w1, b1);  // named, so that the ReLU is a function of its own
    return F::softmax_cross_entropy(F::linear(F::relu(h), w2, b2), t);
  }
};

// What the MLP's dump must be, node by node and edge by edge.
const char* const kMlpDot = R"(digraph graphname {
  v0 [label="f32[4, 3]", shape=ellipse];
  v1 [label="l1/W\nf32[5, 3]", shape=ellipse, style=filled, fillcolor="#e0e0e0"];
  v2 [label="l1/b\nf32[5]", shape=ellipse, style=filled, fillcolor="#e0e0e0"];
  f0 [label="linear", shape=box];
  v3 [label="f32[4, 5]", shape=ellipse];
  f1 [label="relu", shape=box];
  v4 [label="f32[4, 5]", shape=ellipse];
  v5 [label="l2/W\nf32[2, 5]", shape=ellipse, style=filled, fillcolor="#e0e0e0"];
  v6 [label="l2/b\nf32[2]", shape=ellipse, style=filled, fillcolor="#e0e0e0"];
  f2 [label="linear", shape=box];
  v7 [label="f32[4, 2]", shape=ellipse];
  v8 [label="i64[4]", shape=ellipse];
  f3 [label="softmax_cross_entropy", shape=box];
  v9 [label="f32[]", shape=ellipse];
  v0 -> f0;
  v1 -> f0;
  v2 -> f0;
  f0 -> v3;
  v3 -> f1;
  f1 -> v4;
  v4 -> f2;
  v5 -> f2;
  v6 -> f2;
  f2 -> v7;
  v7 -> f3;
  v8 -> f3;
  f3 -> v9;
}
)";

// Stands in for comm's send: an identity that describes itself as a message to rank 1.
class FakeSend : public FunctionNode {
 public:
  std::string name() const override { return "send"; }
  FunctionDescription describe() const override {
    FunctionDescription d;
    d.exchange = FunctionDescription::Exchange::send;
    d.peer = 1;
    d.tag = 3;
    d.rank = 0;
    d.size = 2;
    return d;
  }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {Tensor({0}, in[0].dtype())}; }
  std::vector<Tensor> backward(const std::vector<Tensor>&) override { return {Tensor()}; }
};

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_dir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

}  // namespace

TEST_CASE("graph_dump: a small MLP, node by node and edge by edge") {
  Mlp mlp;
  const ComputationalGraph graph = build_computational_graph({mlp.loss()}, mlp.names);
  CHECK(graph.dump() == kMlpDot);
  // The same graph through the structure: 4 functions, 10 variables (4 parameters), 13 edges.
  int functions = 0, parameters = 0;
  for (const auto& node : graph.nodes) {
    functions += node.kind == ComputationalGraph::Node::Kind::function;
    parameters += node.kind == ComputationalGraph::Node::Kind::parameter;
  }
  CHECK(functions == 4);
  CHECK(parameters == 4);
  CHECK(graph.nodes.size() == 14);
  CHECK(graph.edges.size() == 13);
}

TEST_CASE("graph_dump: the same graph gives the same text, whatever was built before") {
  Mlp mlp;
  const std::string first = build_computational_graph({mlp.loss()}, mlp.names).dump();
  for (int i = 0; i < 5; ++i) F::relu(mlp.w1 * 2.0);  // other graphs move the sequence numbers on
  Variable again = mlp.loss();
  again.backward();  // backward frees saved tensors, not the graph's structure
  CHECK(build_computational_graph({again}, mlp.names).dump() == first);
}

TEST_CASE("graph_dump: without names, a variable's own name; several outputs share their graph") {
  Mlp mlp;
  mlp.w1.set_name("W");
  const Variable pre = F::linear(mlp.x, mlp.w1, mlp.b1);
  Variable h = F::relu(pre);
  const std::string dot = build_computational_graph({F::sum(h), F::mean(h)}).dump();
  CHECK(dot.find("label=\"W\\nf32[5, 3]\"") != std::string::npos);
  CHECK(dot.find("label=\"relu\"") != std::string::npos);
  CHECK(dot.find("label=\"sum\"") != std::string::npos);
  CHECK(dot.find("label=\"mean\"") != std::string::npos);
  CHECK(dot.find("f4 ") == std::string::npos);  // linear, relu, sum, mean: each once
  // F::relu of a temporary is taken into the linear function: one node.
  const std::string fused = build_computational_graph({F::relu(F::linear(mlp.x, mlp.w1, mlp.b1))}).dump();
  CHECK(fused.find("f0 [label=\"linear+relu\", shape=box]") != std::string::npos);
  CHECK(fused.find("f1 ") == std::string::npos);
  // A leaf asked for by itself is one node, and no edge.
  CHECK(build_computational_graph({mlp.x}).dump() ==
        "digraph graphname {\n  v0 [label=\"f32[4, 3]\", shape=ellipse];\n}\n");
}

TEST_CASE("graph_dump: a communication function shows its peer, tag and rank; its delegate is marked") {
  Variable x(ones({2}), true);
  Variable phi = call<FakeSend>({x})[0];
  const std::string dot = build_computational_graph({phi}).dump();
  CHECK(dot.find("f0 [label=\"send\\nto rank 1, tag 3\\nrank 0 of 2\", shape=box, style=filled") != std::string::npos);
  CHECK(dot.find("v1 [label=\"f32[0] (delegate)\"") != std::string::npos);
}

TEST_CASE("graph_dump: quotes and backslashes in names are escaped") {
  Variable x(ones({2}), true, "a\"b\\c");
  CHECK(build_computational_graph({F::relu(x)}).dump().find("v0 [label=\"a\\\"b\\\\c\\nf32[2]\"") != std::string::npos);
}

TEST_CASE("dump_graph: without Graphviz, the .dot is written, no .svg, and one warning") {
  Mlp mlp;
  const std::string path = temp_dir() + "/nodot.dot", svg = temp_dir() + "/nodot.svg";
  std::remove(svg.c_str());
  ::setenv("TANDEM_DOT", "/nonexistent/dot", 1);
  // stderr into a file for the duration, to count the warnings.
  const std::string log = temp_dir() + "/nodot.log";
  std::fflush(stderr);
  const int saved = ::dup(2), file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(file, 2);
  dump_graph({mlp.loss()}, path, mlp.names);
  dump_graph({mlp.loss()}, path, mlp.names);
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(file);
  ::close(saved);
  ::unsetenv("TANDEM_DOT");
  CHECK(read(path) == kMlpDot);
  CHECK(::access(svg.c_str(), F_OK) != 0);
  const std::string warnings = read(log);
  INFO(warnings);
  CHECK(warnings.find("Graphviz's dot was not found (TANDEM_DOT is not an executable)") != std::string::npos);
  CHECK(warnings.find("warning") == warnings.rfind("warning"));  // once per process
}

TEST_CASE("dump_graph: a path that cannot be written is an error naming it") {
  Mlp mlp;
  CHECK_THROWS_WITH(dump_graph({mlp.loss()}, "/nonexistent/dir/cg.dot"),
                    Catch::Contains("dump_graph: cannot write '/nonexistent/dir/cg.dot'"));
}

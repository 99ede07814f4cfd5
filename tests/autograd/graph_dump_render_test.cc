// Graph dumps rendered by Graphviz: dump_graph's DOT is valid (dot -Tsvg exits 0 and writes an
// SVG beside it). Skipped, with the reason, where dot is missing (dot_main.cc).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "autograd/functions.h"
#include "autograd/graph_dump.h"
#include "core/ops.h"

using namespace tandem;

TEST_CASE("dump_graph: an MLP's graph renders to SVG") {
  Generator gen(3);
  Variable w1(randn({5, 3}, gen), true, "W\"1\\"), w2(randn({2, 5}, gen), true);  // a name to escape
  Variable x(randn({4, 3}, gen)), t(from_vector<std::int64_t>({0, 1, 1, 0}));
  Variable loss = F::softmax_cross_entropy(F::linear(F::relu(F::linear(x, w1)), w2), t);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string svg = dir + "/cg.svg";
  std::remove(svg.c_str());
  dump_graph({loss}, dir + "/cg.dot", {{"l2/W", w2}});
  std::ifstream in(svg);
  REQUIRE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("<svg") != std::string::npos);
  CHECK(text.str().find("l2/W") != std::string::npos);
  CHECK(text.str().find("softmax_cross_entropy") != std::string::npos);
  // render_dot says where it wrote; a file without the .dot suffix gets .svg appended.
  std::rename((dir + "/cg.dot").c_str(), (dir + "/graph").c_str());
  CHECK(render_dot(dir + "/graph") == dir + "/graph.svg");
}

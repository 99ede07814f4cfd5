// Graph dumps: the graph behind some output variables as Graphviz DOT, as Chainer's
// chainer.computational_graph.build_computational_graph(outputs).dump().
//
//   dump_graph({loss}, "cg.dot", model->namedparams());   // cg.dot, and cg.svg when dot is found
//   std::string dot = build_computational_graph({loss}).dump();
//
// One node per variable (an ellipse: its name, dtype and shape; parameters filled grey) and per
// function (a box: its name(), and for communication its FunctionDescription: peer or "all
// ranks", tag, "rank r of n"; filled orange); edges run forward, input -> function -> output, as
// Chainer's do. Only the graph reachable backward from the outputs is drawn, and of a function's
// outputs only those still alive. Ids and order follow the order the functions were created
// ("v0", "f0", ... in forward order), so the same program writes the same text on every run.
// Parameter names: a variable's own name() unless `names` (Link::namedparams(), or any list of
// (name, variable)) names it. A job's graphs, every rank's in one, are comm/graph/merged_graph.h.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "autograd/function_node.h"
#include "autograd/variable.h"

namespace tandem {

// (name, variable) pairs, as Link::namedparams() returns them.
using VariableNames = std::vector<std::pair<std::string, Variable>>;

struct ComputationalGraph {
  struct Node {
    enum class Kind { variable, parameter, function };
    Kind kind = Kind::variable;
    std::string id;     // "v3", "f2": unique within the graph
    std::string label;  // lines separated by '\n'
    FunctionDescription description;  // functions only
  };
  std::vector<Node> nodes;                               // in forward order
  std::vector<std::pair<std::size_t, std::size_t>> edges;  // (from, to) indices into nodes, forward

  // The whole graph as a DOT digraph.
  std::string dump() const;
  // Its node and edge statements alone, each id prefixed (a merged dump puts each rank's graph
  // in a cluster of its own).
  std::string dot_statements(const std::string& id_prefix, const std::string& indent) const;
};

ComputationalGraph build_computational_graph(const Variables& outputs, const VariableNames& names = {});

// Writes build_computational_graph(outputs, names).dump() to `path`, then renders it with
// render_dot (path's .svg). Errors: a file that cannot be written.
void dump_graph(const Variables& outputs, const std::string& path, const VariableNames& names = {});

// Renders the DOT file at dot_path to SVG beside it (x.dot -> x.svg) with Graphviz's dot:
// $TANDEM_DOT when set, else `dot` on PATH. Returns the SVG's path, or "" when dot is missing
// (one warning per process on stderr) or fails (a warning): the .dot stays either way.
std::string render_dot(const std::string& dot_path);
// The dot program render_dot runs, or "" when there is none.
std::string graphviz_dot();

// A DOT double-quoted string's contents: quotes and backslashes escaped, '\n' as a line break.
std::string dot_escape(const std::string& text);

}  // namespace tandem

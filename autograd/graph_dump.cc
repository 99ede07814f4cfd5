#include "autograd/graph_dump.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

extern char** environ;

namespace tandem {

namespace {

using Kind = ComputationalGraph::Node::Kind;
using Exchange = FunctionDescription::Exchange;

std::string function_label(const FunctionNode& function, const FunctionDescription& d) {
  std::string label = function.name();
  switch (d.exchange) {
    case Exchange::none: break;
    case Exchange::send: label += detail::concat("\nto rank ", d.peer, ", tag ", d.tag); break;
    case Exchange::recv: label += detail::concat("\nfrom rank ", d.peer, ", tag ", d.tag); break;
    case Exchange::collective: label += d.peer >= 0 ? detail::concat("\nroot rank ", d.peer) : "\nall ranks"; break;
  }
  if (d.exchange != Exchange::none) label += detail::concat("\nrank ", d.rank, " of ", d.size);
  if (!d.detail.empty()) label += "\n" + d.detail;
  return label;
}

std::string variable_label(const VariableNode& node, const std::string& name) {
  std::string label = name.empty() ? node.name : name;
  if (!label.empty()) label += "\n";
  label += detail::concat(dtype_name(node.dtype), shape_str(node.shape));
  // A size-0 output of a communication function is the delegate that carries its backward.
  if (node.creator && node.creator->describe().exchange != Exchange::none && node.shape == Shape{0})
    label += " (delegate)";
  return label;
}

}  // namespace

std::string graphviz_dot() {
  if (const char* given = std::getenv("TANDEM_DOT"); given != nullptr && *given != '\0')
    return ::access(given, X_OK) == 0 ? given : "";
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/bin:/bin";
  std::size_t begin = 0;
  while (begin <= dirs.size()) {
    std::size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > begin ? dirs.substr(begin, end - begin) : ".";
    const std::string candidate = dir + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return "";
}

ComputationalGraph build_computational_graph(const Variables& outputs, const VariableNames& names) {
  std::unordered_map<const VariableNode*, std::string> name_of;
  for (const auto& [name, variable] : names)
    if (variable.defined()) name_of.emplace(variable.node().get(), name);

  // Every function reachable backward from the outputs; iterative, as graphs can be deep.
  std::vector<FunctionNode*> functions, stack;
  std::unordered_set<const FunctionNode*> seen;
  auto reach = [&](const std::shared_ptr<FunctionNode>& creator) {
    if (creator && seen.insert(creator.get()).second) stack.push_back(creator.get());
  };
  for (const Variable& output : outputs) {
    TANDEM_CHECK(output.defined(), "build_computational_graph: an output is an undefined variable");
    reach(output.creator());
  }
  while (!stack.empty()) {
    FunctionNode* function = stack.back();
    stack.pop_back();
    functions.push_back(function);
    for (const auto& input : function->inputs()) reach(input->creator);
  }
  // Creation order, which is forward order: the same program numbers its nodes alike every run
  // (pointers and the global sequence numbers themselves differ from run to run).
  std::sort(functions.begin(), functions.end(),
            [](const FunctionNode* a, const FunctionNode* b) { return a->sequence_number() < b->sequence_number(); });

  ComputationalGraph graph;
  std::unordered_map<const VariableNode*, std::size_t> index_of;
  int variables = 0;
  auto variable = [&](const VariableNode& node) {
    auto [it, inserted] = index_of.try_emplace(&node, graph.nodes.size());
    if (inserted) {
      const auto name = name_of.find(&node);
      const bool parameter = node.creator == nullptr && node.requires_grad;
      graph.nodes.push_back({parameter ? Kind::parameter : Kind::variable, detail::concat("v", variables++),
                             variable_label(node, name == name_of.end() ? "" : name->second), {}});
    }
    return it->second;
  };
  for (std::size_t f = 0; f < functions.size(); ++f) {
    const FunctionNode& function = *functions[f];
    std::vector<std::size_t> inputs;
    for (const auto& input : function.inputs()) inputs.push_back(variable(*input));
    const FunctionDescription description = function.describe();
    const std::size_t self = graph.nodes.size();
    graph.nodes.push_back({Kind::function, detail::concat("f", f), function_label(function, description), description});
    for (std::size_t input : inputs) graph.edges.emplace_back(input, self);
    for (const auto& output : function.outputs())
      if (output) graph.edges.emplace_back(self, variable(*output));
  }
  for (const Variable& output : outputs) variable(*output.node());  // leaves asked for by name
  return graph;
}

std::string ComputationalGraph::dot_statements(const std::string& id_prefix, const std::string& indent) const {
  std::string out;
  for (const Node& node : nodes) {
    out += indent + id_prefix + node.id + " [label=\"" + dot_escape(node.label) + "\"";
    if (node.kind == Node::Kind::function) {
      out += ", shape=box";
      if (node.description.exchange != Exchange::none) out += ", style=filled, fillcolor=\"#ffcc80\"";
    } else {
      out += ", shape=ellipse";
      if (node.kind == Node::Kind::parameter) out += ", style=filled, fillcolor=\"#e0e0e0\"";
    }
    out += "];\n";
  }
  for (const auto& [from, to] : edges)
    out += indent + id_prefix + nodes[from].id + " -> " + id_prefix + nodes[to].id + ";\n";
  return out;
}

std::string ComputationalGraph::dump() const { return "digraph graphname {\n" + dot_statements("", "  ") + "}\n"; }

std::string dot_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\n') {
      out += "\\n";
    } else {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    }
  }
  return out;
}

void dump_graph(const Variables& outputs, const std::string& path, const VariableNames& names) {
  const std::string dot = build_computational_graph(outputs, names).dump();
  {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << dot;
    file.flush();
    TANDEM_CHECK(file.good(), "dump_graph: cannot write '", path, "'");
  }
  render_dot(path);
}

std::string render_dot(const std::string& dot_path) {
  const std::string dot = graphviz_dot();
  if (dot.empty()) {
    // Once per process: a job that dumps several graphs says it once.
    static std::atomic<bool> warned{false};
    const char* given = std::getenv("TANDEM_DOT");
    if (!warned.exchange(true))
      std::fprintf(stderr, "tandem: warning: Graphviz's dot was not found (%s); wrote %s without an SVG\n",
                   given != nullptr && *given != '\0' ? "TANDEM_DOT is not an executable" : "not on PATH",
                   dot_path.c_str());
    return "";
  }
  const bool dot_suffix = dot_path.size() >= 4 && dot_path.compare(dot_path.size() - 4, 4, ".dot") == 0;
  const std::string svg = (dot_suffix ? dot_path.substr(0, dot_path.size() - 4) : dot_path) + ".svg";
  // posix_spawn, not system(): no shell to quote paths for, and no fork of a large process.
  std::vector<std::string> args{dot, "-Tsvg", "-o", svg, dot_path};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  int status = 0;
  const int spawned = ::posix_spawn(&pid, dot.c_str(), nullptr, nullptr, argv.data(), environ);
  if (spawned == 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) return svg;
  std::fprintf(stderr, "tandem: warning: %s -Tsvg failed on %s (%s); the .dot is written\n", dot.c_str(),
               dot_path.c_str(), spawned != 0 ? "could not start it" : "non-zero exit");
  return "";
}

}  // namespace tandem

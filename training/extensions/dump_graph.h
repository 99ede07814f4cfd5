// DumpGraph: Chainer's DumpGraph('main/loss', out_name='cg.dot'). Once, at the first iteration
// of the run, writes the graph behind the loss to <trainer.out()>/<out_name> as Graphviz DOT,
// and renders it to SVG beside it when Graphviz's dot is found (autograd/graph_dump.h).
// Parameters are named by the trainer's model (namedparams: "predictor/l1/W").
//
//   trainer.extend(std::make_shared<DumpGraph>("main/loss"));   // result/cg.dot, result/cg.svg
//
// The root is "main/loss": the updater's output of the step (StandardUpdater::last_loss), on a
// rank of a model-parallel model without the loss its delegate variable. Every rank's graph in
// one file is create_multi_node_dump_graph (comm/graph/multi_node_dump_graph.h).
#pragma once

#include <string>

#include "autograd/graph_dump.h"
#include "training/trainer.h"

namespace tandem {

class DumpGraph : public Extension {
 public:
  explicit DumpGraph(std::string root_name = "main/loss", std::string out_name = "cg.dot");
  std::string name() const override { return "DumpGraph"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void operator()(Trainer& trainer) override;

 protected:
  // Writes the graph behind root to path; the multi-node form merges every rank's.
  virtual void write(const Variable& root, const std::string& path, const VariableNames& names);

 private:
  std::string out_name_;
  bool done_ = false;
};

// dump_graph with the parameters named as `model` names them.
void dump_graph(const Variables& outputs, const std::string& path, const Link& model);

}  // namespace tandem

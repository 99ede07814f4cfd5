#include "training/extensions/dump_graph.h"

namespace tandem {

DumpGraph::DumpGraph(std::string root_name, std::string out_name) : out_name_(std::move(out_name)) {
  // Observations are numbers here; the one variable a step keeps is the updater's loss.
  TANDEM_CHECK(root_name == "main/loss", "DumpGraph: the root must be \"main/loss\" (the updater's loss), not \"",
               root_name, "\"");
  TANDEM_CHECK(!out_name_.empty(), "DumpGraph: out_name is empty");
}

void DumpGraph::operator()(Trainer& trainer) {
  // Runs on every iteration's trigger but dumps once: the first step's graph is the model's.
  if (done_) return;
  done_ = true;
  const Variable& root = trainer.updater().last_loss();
  TANDEM_CHECK(root.defined(), "DumpGraph: the updater has no loss yet (runs after a step)");
  write(root, trainer.out() + "/" + out_name_, trainer.model().namedparams());
}

void DumpGraph::write(const Variable& root, const std::string& path, const VariableNames& names) {
  dump_graph({root}, path, names);
}

void dump_graph(const Variables& outputs, const std::string& path, const Link& model) {
  dump_graph(outputs, path, model.namedparams());
}

}  // namespace tandem

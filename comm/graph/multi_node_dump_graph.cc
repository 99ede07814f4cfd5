#include "comm/graph/multi_node_dump_graph.h"

#include "comm/graph/merged_graph.h"

namespace tandem {

namespace {

class MultiNodeDumpGraph final : public DumpGraph {
 public:
  MultiNodeDumpGraph(CommunicatorPtr comm, std::string root_name, std::string out_name)
      : DumpGraph(std::move(root_name), std::move(out_name)), comm_(std::move(comm)) {
    TANDEM_CHECK(comm_ != nullptr, "create_multi_node_dump_graph: no communicator");
  }
  std::string name() const override { return "MultiNodeDumpGraph"; }

 protected:
  void write(const Variable& root, const std::string& path, const VariableNames& names) override {
    dump_merged_graph(*comm_, {root}, path, names);
  }

 private:
  CommunicatorPtr comm_;
};

}  // namespace

std::shared_ptr<DumpGraph> create_multi_node_dump_graph(CommunicatorPtr comm, std::string root_name,
                                                        std::string out_name) {
  return std::make_shared<MultiNodeDumpGraph>(std::move(comm), std::move(root_name), std::move(out_name));
}

}  // namespace tandem

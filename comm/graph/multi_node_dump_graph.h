// DumpGraph for a multi-rank run: every rank runs it (it is a collective, at the first
// iteration) and rank 0 writes the merged graph of the job, every rank's in a cluster with the
// messages between them (merged_graph.h), to <rank 0's trainer.out()>/<out_name> and its SVG.
//
//   trainer.extend(create_multi_node_dump_graph(comm));   // result/cg.dot, result/cg.svg
#pragma once

#include <memory>
#include <string>

#include "comm/transport/communicator.h"
#include "training/extensions/dump_graph.h"

namespace tandem {

std::shared_ptr<DumpGraph> create_multi_node_dump_graph(CommunicatorPtr comm, std::string root_name = "main/loss",
                                                        std::string out_name = "cg.dot");

}  // namespace tandem

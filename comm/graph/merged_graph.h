// Every rank's graph in one Graphviz DOT: the whole job's computation, with its messages.
//
//   dump_merged_graph(*comm, {loss_or_delegate}, "cg.dot", model->namedparams());   // every rank
//
// A collective over comm: each rank builds the graph behind its outputs (autograd/graph_dump.h)
// and sends it to rank 0 (gather_obj), which writes one DOT with a cluster per rank ("rank 0",
// "rank 1", ...; node ids "r<rank>_v3", "r<rank>_f2") and joins the ranks' graphs:
// - each send to its recv (a bold red edge, sender to receiver: the forward direction; the
//   gradient goes back along it): the n-th send from rank s to rank d on tag t is the n-th recv
//   on d from s on tag t, in graph (creation) order, as MPI delivers them;
// - each collective across its ranks: the n-th collective of every rank, in graph order, meets
//   in a shared node "<name> #n" (dashed blue edges), since every rank runs them in one order.
// Only communication on `comm` itself is joined (ranks of other communicators, such as split
// ones, are not ranks of comm); anything left unmatched is listed in a DOT comment.
// Rank 0 then renders it to SVG with render_dot (Graphviz's dot; without it, one warning).
#pragma once

#include <string>

#include "autograd/graph_dump.h"
#include "comm/transport/communicator.h"

namespace tandem {

// The merged DOT on rank 0; "" on the other ranks.
std::string merged_graph_dot(Communicator& comm, const Variables& outputs, const VariableNames& names = {});

// Writes merged_graph_dot to `path` on rank 0 and renders it (path's .svg); other ranks write
// nothing. Errors (rank 0): a file that cannot be written.
void dump_merged_graph(Communicator& comm, const Variables& outputs, const std::string& path,
                       const VariableNames& names = {});

}  // namespace tandem

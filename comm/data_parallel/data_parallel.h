// Data parallelism over a communicator (ChainerMN's comm.bcast_data and
// comm.multi_node_mean_grad): every rank holds the whole model and the ranks keep its
// parameters equal. Built on the transport's digest-checked collectives, so that ranks whose
// models differ get an error on every rank instead of mixing parameters up.
#pragma once

#include <optional>

#include "comm/transport/communicator.h"
#include "layers/link.h"

namespace tandem {

// Rank 0's parameters to every rank (the link must have the same parameters everywhere;
// parameters not initialised yet are skipped, consistently on every rank). One packed bcast per
// dtype.
void bcast_data(Communicator& comm, Link& link);

// Parameters by path, as Link::namedparams() lists them.
using NamedParams = std::vector<std::pair<std::string, Variable>>;

// bcast_data of some parameters only (a parameter group: every rank passes the same list).
void bcast_data(Communicator& comm, const NamedParams& params);

// Whether every rank's copy of these parameters equals every other's (a digest of their bytes,
// one small allgather).
bool replicas_equal(Communicator& comm, const NamedParams& params);

namespace dp_detail {
// "rank 1", "ranks 1 and 2", "ranks 0, 2-5 and 7" (runs of three or more as ranges).
std::string ranks_str(const std::vector<int>& ranks);
}  // namespace dp_detail

// Averages every parameter's gradient over ranks with one packed allreduce per dtype, after
// one small collective in which the ranks agree on who has which gradient (and that their
// parameter lists match). As in ChainerMN, a parameter with a gradient on no rank is skipped
// (it stays without one), or gets zeros when zero_fill. One with a gradient on some ranks only
// counts as zeros where missing when zero_fill; otherwise it is an error on every rank, the same
// text naming the parameter and the ranks with and without its gradient. Under check_finite
// (autograd/check_finite.h) a NaN/Inf gradient is an error on every rank, naming the rank(s)
// and parameter. Errors come before any gradient changes.
// allreduce_grad_dtype (ChainerMN's): the gradients travel and are averaged in that dtype, and
// are cast back to their parameters' (bf16 or f16 halve the bytes of f32 gradients; each partial
// sum is rounded to 16 bits). Not in deterministic mode.
void multi_node_mean_grad(Communicator& comm, Link& link, bool zero_fill = false,
                          std::optional<DType> allreduce_grad_dtype = std::nullopt);

// multi_node_mean_grad of some parameters only (a parameter group), the mean multiplied by scale.
void multi_node_mean_grad(Communicator& comm, const NamedParams& params, bool zero_fill, double scale = 1.0,
                          std::optional<DType> allreduce_grad_dtype = std::nullopt);

}  // namespace tandem

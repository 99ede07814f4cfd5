#include "comm/multi_node_links/multi_node_chain_list.h"

#include "comm/functions.h"
#include "core/error.h"

namespace tandem {

namespace F = functions;

namespace {

// Joins the delegates of sends not yet attached to anything into one (pseudo_connect keeps
// every one of them reachable), or returns an undefined variable when there are none.
Variable take_delegate(std::vector<Variable>& pending) {
  Variable joined;
  for (const Variable& delegate : pending) joined = joined.defined() ? F::pseudo_connect(joined, delegate) : delegate;
  pending.clear();
  return joined;
}

}  // namespace

MultiNodeChainList::MultiNodeChainList(CommunicatorPtr comm) : comm_(std::move(comm)) {
  TANDEM_CHECK(comm_ != nullptr, "MultiNodeChainList: no communicator");
}

void MultiNodeChainList::check_component(const Ranks& rank_in, const Ranks& rank_out) const {
  for (const Ranks* ranks : {&rank_in, &rank_out}) {
    for (int rank : ranks->list()) {
      TANDEM_CHECK(rank >= 0 && rank < comm_->size(), "MultiNodeChainList::add_link: component ", components_.size(),
                   " on rank ", comm_->rank(), " names rank ", rank, ", but the communicator has ", comm_->size(),
                   " ranks");
    }
  }
  if (rank_out.none()) {
    for (std::size_t i = 0; i < components_.size(); ++i) {
      TANDEM_CHECK(!components_[i].rank_out.none(), "MultiNodeChainList::add_link: component ", components_.size(),
                   " on rank ", comm_->rank(), " has no rank_out, like component ", i,
                   "; only one component per rank can give the output");
    }
  }
}

Variable MultiNodeChainList::forward(const Variable& x) {
  Variables ys = forward_many(x.defined() ? Variables{x} : Variables{});
  TANDEM_CHECK(ys.size() == 1, "MultiNodeChainList on rank ", comm_->rank(), ": the output is ", ys.size(),
               " variables; use forward_many");
  return ys[0];
}

Variables MultiNodeChainList::forward_many(const Variables& inputs) {
  const int me = comm_->rank();
  std::vector<Variable> pending;     // delegates of sends, until attached
  std::deque<Variables> to_myself;   // values this rank sent to itself, oldest first
  Variables output;
  bool have_output = false;
  for (std::size_t i = 0; i < components_.size(); ++i) {
    const Component& component = components_[i];
    Variables xs;
    if (component.rank_in.none()) {
      xs = inputs;
    } else {
      for (int source : component.rank_in.list()) {
        if (source == me) {
          TANDEM_CHECK(!to_myself.empty(), "MultiNodeChainList on rank ", me, ": component ", i,
                       " takes an input from this rank, but no earlier component sent one to it");
          Variables own = std::move(to_myself.front());
          to_myself.pop_front();
          Variable delegate = take_delegate(pending);
          if (delegate.defined()) own = F::pseudo_connect(delegate, own);
          xs.insert(xs.end(), own.begin(), own.end());
        } else {
          // On this list's device (where add_link put every component), as ChainerMN's recv(device=).
          Variables received = F::recv_list(*comm_, source, take_delegate(pending), 0, device());
          xs.insert(xs.end(), received.begin(), received.end());
        }
      }
    }
    Variables ys = (*this)[i]->forward_many(xs);
    if (component.rank_out.none()) {
      output = std::move(ys);
      have_output = true;
      continue;
    }
    for (int dest : component.rank_out.list()) {
      if (dest == me) {
        to_myself.push_back(ys);
      } else {
        pending.push_back(F::send(ys, *comm_, dest));
      }
    }
  }
  TANDEM_CHECK(to_myself.empty(), "MultiNodeChainList on rank ", me, ": ", to_myself.size(),
               " value(s) sent to this rank were never taken by a later component (add one with rank_in = ", me, ")");
  Variable delegate = take_delegate(pending);
  if (have_output) return delegate.defined() ? F::pseudo_connect(delegate, output) : output;
  TANDEM_CHECK(delegate.defined(), "MultiNodeChainList on rank ", me,
               ": no component gives an output and none sends anything; nothing to return");
  return {delegate};
}

}  // namespace tandem

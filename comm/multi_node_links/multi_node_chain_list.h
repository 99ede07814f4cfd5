// MultiNodeChainList: a model split over ranks, written as a list of components.
//
// Each rank builds its own list: add_link(link, rank_in, rank_out) says where the component's
// input comes from (none: the input of forward; a rank; several ranks, whose variables are
// passed together to the link's forward_many) and where its output goes (none: it is the
// output of forward; one or several ranks). This rank's own rank may appear on either side:
// such values pass through an in-process queue, in the order they were produced, not MPI.
//
//   // rank 0                                  // rank 1
//   model.add_link(l1, {}, 1);                 model.add_link(l2, 0, 0);
//   model.add_link(l3, 1, {});
//
// forward(x) runs the components in order, receiving and sending as declared, and joins every
// send's delegate variable to the next receive (or, at the end, to the output with
// pseudo_connect), so backward from the output runs every communication of this rank. A rank
// without an output gets a delegate variable: call backward() on it. A rank without an input
// (every component receives from a rank) calls forward() with no argument:
//
//   Variable y = model.forward(x);      // rank 0: y = l3(...), the loss follows
//   model.forward().backward();         // rank 1: the delegate
//
// Received variables land on this list's device (Link::to), as ChainerMN's recv(device=).
#pragma once

#include <deque>
#include <initializer_list>
#include <vector>

#include "comm/transport/communicator.h"
#include "layers/link.h"

namespace tandem {

// None ({}), one rank (3) or several ({0, 2}).
class Ranks {
 public:
  Ranks() = default;
  Ranks(int rank) : ranks_{rank} {}  // NOLINT: implicit, as ChainerMN's rank_in=1
  Ranks(std::initializer_list<int> ranks) : ranks_(ranks) {}
  explicit Ranks(std::vector<int> ranks) : ranks_(std::move(ranks)) {}
  bool none() const { return ranks_.empty(); }
  const std::vector<int>& list() const { return ranks_; }

 private:
  std::vector<int> ranks_;
};

class MultiNodeChainList : public ChainList {
 public:
  explicit MultiNodeChainList(CommunicatorPtr comm);
  std::string type_name() const override { return "MultiNodeChainList"; }

  template <typename T>
  std::shared_ptr<T> add_link(std::shared_ptr<T> link, Ranks rank_in = {}, Ranks rank_out = {}) {
    check_component(rank_in, rank_out);
    append(link);
    components_.push_back({rank_in, rank_out});
    return link;
  }

  // The output of the component without rank_out, or a delegate variable on a rank that has
  // none. Errors: a second component without rank_out, an input from this rank that no
  // earlier component produced, a value sent to this rank that nothing consumed.
  Variable forward(const Variable& x) override;
  // forward(): on a rank without an input (its components with rank_in {}, if any, are given
  // none), as Link::forward() for every link; forward(Variable()) is the same.
  using Link::forward;
  // xs go to every component with rank_in {}; several outputs come back as a list.
  Variables forward_many(const Variables& xs) override;

  Communicator& communicator() const { return *comm_; }

 private:
  struct Component {
    Ranks rank_in, rank_out;
  };
  void check_component(const Ranks& rank_in, const Ranks& rank_out) const;

  CommunicatorPtr comm_;
  std::vector<Component> components_;
};

}  // namespace tandem

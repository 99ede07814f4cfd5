// The order of sends to one peer, on 2 ranks: F::send_each sends in the order written and gives
// the one-process gradients; the send-order check (TANDEM_CHECK_SEND_ORDER) reports delegates
// joined against the order of their sends, exactly when the peer received them swapped, and
// stays quiet on the ordered forms.
#include <catch2/catch.hpp>

#include "autograd/functions.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;
using test_util::require_values;
using test_util::uniform;
using test_util::values;

namespace {

Communicator& world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

// Turns the send-order check on (or off) for one test case.
class SendOrderCheck {
 public:
  explicit SendOrderCheck(bool on) : previous_(F::check_send_order_enabled()) { F::set_check_send_order(on); }
  ~SendOrderCheck() { F::set_check_send_order(previous_); }

 private:
  bool previous_;
};

// Equal shapes, so that only the values tell a from b.
const Shape kShape{2, 3};
Tensor a_data() { return uniform(kShape, 1, -1, 1, DType::f64); }
Tensor b_data() { return uniform(kShape, 2, -1, 1, DType::f64); }
Tensor w1_data() { return uniform(kShape, 3, 0.5, 2.0, DType::f64); }
Tensor w2_data() { return uniform(kShape, 4, 0.5, 2.0, DType::f64); }

// Rank 1's function of what it receives: asymmetric in a and b, so a swap changes every gradient.
Variable loss_of(const Variable& a, const Variable& b, const Variable& w1, const Variable& w2) {
  return F::add(F::sum(F::mul(a, w1)), F::mul(F::sum(F::mul(F::tanh(b), w2)), 3.0));
}

// The same function on one process: the gradients every rank must match. Built from (b, a)
// instead, it gives what a program that swapped them computes.
struct Reference {
  Variable a, b, w1{w1_data(), true}, w2{w2_data(), true};
  double loss;
  explicit Reference(const Tensor& first = a_data(), const Tensor& second = b_data())
      : a(first, true), b(second, true) {
    Variable l = loss_of(a, b, w1, w2);
    l.backward();
    loss = l.data().item();
  }
};

// Rank 1: receives the two variables with one recv each (the first is meant to be a), computes
// the loss and backpropagates; checks its own values and gradients against the reference.
void receive_and_check(Communicator& comm) {
  Reference ref;
  Variable w1(w1_data(), true), w2(w2_data(), true);
  Variable a = F::recv(comm, 0);
  Variable b = F::recv(comm, 0);
  require_values(a.data(), values(a_data()));
  require_values(b.data(), values(b_data()));
  Variable loss = loss_of(a, b, w1, w2);
  loss.backward();
  REQUIRE(loss.data().item() == Approx(ref.loss).epsilon(1e-12));
  require_values(w1.grad(), values(ref.w1.grad()), 1e-12);
  require_values(w2.grad(), values(ref.w2.grad()), 1e-12);
}

// Rank 0: the gradients that came back.
void check_sender_grads(const Variable& a, const Variable& b) {
  Reference ref;
  require_values(a.grad(), values(ref.a.grad()), 1e-12);
  require_values(b.grad(), values(ref.b.grad()), 1e-12);
}

}  // namespace

TEST_CASE("send_each sends in list order, received by one recv each, with the one-process gradients") {
  Communicator& comm = world();
  SendOrderCheck check(true);  // send_each joins its delegates in order: the check is quiet
  if (comm.rank() == 0) {
    Variable a(a_data(), true, "a"), b(b_data(), true, "b");
    Variable phi = F::send_each({a, b}, comm, 1);
    REQUIRE(phi.numel() == 0);
    phi.backward();
    check_sender_grads(a, b);
  } else if (comm.rank() == 1) {
    receive_and_check(comm);
  }
}

TEST_CASE("send_each: the README snippet, with the delegate joined to a value") {
  Communicator& comm = world();
  SendOrderCheck check(true);
  if (comm.rank() == 0) {
    Variable a(a_data(), true), b(b_data(), true);
    Variable h(uniform({4}, 9, -1, 1, DType::f64), true);
    // As in docs/communication.md: both go to rank 1 in the order written, and backward from y runs both.
    Variable phi = F::send_each({a, b}, comm, 1);
    Variable y = F::pseudo_connect(phi, F::mul(h, 2.0));
    F::sum(y).backward();
    check_sender_grads(a, b);
    require_values(h.grad(), {2, 2, 2, 2});
  } else if (comm.rank() == 1) {
    receive_and_check(comm);
  }
}

TEST_CASE("send_each of one variable, and of nothing") {
  Communicator& comm = world();
  if (comm.rank() == 0) {
    Variable a(a_data(), true);
    F::send_each({a}, comm, 1).backward();
    require_values(a.grad(), values(w1_data()), 1e-12);
    REQUIRE_THROWS_WITH(F::send_each({}, comm, 1), Contains("send_each") && Contains("nothing to send"));
  } else if (comm.rank() == 1) {
    Variable w1(w1_data());
    F::sum(F::mul(F::recv(comm, 0), w1)).backward();
  }
}

TEST_CASE("separate statements joined in the order they ran give the one-process gradients") {
  Communicator& comm = world();
  SendOrderCheck check(true);
  if (comm.rank() == 0) {
    Variable a(a_data(), true), b(b_data(), true);
    Variable phi_a = F::send(a, comm, 1);
    Variable phi_b = F::send(b, comm, 1);
    F::pseudo_connect(phi_a, phi_b).backward();
    check_sender_grads(a, b);
  } else if (comm.rank() == 1) {
    receive_and_check(comm);
  }
}

// What GCC makes of F::pseudo_connect(F::send(a), F::send(b)): b is sent first. Written as two
// statements, so that the test does not depend on the compiler.
TEST_CASE("the send-order check names both sends when delegates are joined against the order of their sends") {
  Communicator& comm = world();
  SendOrderCheck check(true);
  if (comm.rank() == 0) {
    Variable a(a_data(), true, "a"), b(b_data(), true, "b");
    Variable phi_b = F::send(b, comm, 1);
    Variable phi_a = F::send(a, comm, 1);
    REQUIRE_THROWS_WITH(F::pseudo_connect(phi_a, phi_b),
                        Contains("send of f64[2, 3] 'a' to rank 1 (tag 0) behind its first argument ran after the "
                                 "send of f64[2, 3] 'b' to rank 1 (tag 0) behind its second argument") &&
                            Contains("rank 1 receives them in the opposite order") && Contains("send_each"));
    // Joined in the order they ran, the same delegates are accepted; rank 1 received b first.
    F::pseudo_connect(phi_b, phi_a).backward();
    const Reference swapped(b_data(), a_data());  // rank 1 took b for a
    require_values(b.grad(), values(swapped.a.grad()), 1e-12);
    require_values(a.grad(), values(swapped.b.grad()), 1e-12);
  } else if (comm.rank() == 1) {
    Variable w1(w1_data()), w2(w2_data());
    Variable first = F::recv(comm, 0);
    Variable second = F::recv(comm, 0);
    require_values(first.data(), values(b_data()));
    loss_of(first, second, w1, w2).backward();
  }
}

TEST_CASE("the send-order check follows joined delegates and ignores other tags and peers' order") {
  Communicator& comm = world();
  SendOrderCheck check(true);
  if (comm.rank() == 0) {
    Variable a(a_data(), true), b(b_data(), true), c(w1_data(), true);
    Variable phi_c = F::send(c, comm, 1, /*tag=*/5);  // another tag: its order is free
    Variable phi_b = F::send(b, comm, 1);
    Variable phi_a = F::send(a, comm, 1);
    Variable joined = F::pseudo_connect(phi_c, phi_b);  // c before b, and on another tag anyway
    REQUIRE_THROWS_WITH(F::pseudo_connect(phi_a, joined),
                        Contains("send of f64[2, 3] to rank 1 (tag 0) behind its first argument ran after the send "
                                 "of f64[2, 3] to rank 1 (tag 0) behind its second argument"));
    F::pseudo_connect(joined, phi_a).backward();
  } else if (comm.rank() == 1) {
    Variable c = F::recv(comm, 0, Variable(), 5);
    Variable first = F::recv(comm, 0);
    Variable second = F::recv(comm, 0);
    F::add(F::add(F::sum(c), F::sum(first)), F::sum(second)).backward();
  }
}

TEST_CASE("the send-order check is off by default: sending b first on purpose is a valid program") {
  Communicator& comm = world();
  SendOrderCheck check(false);
  if (comm.rank() == 0) {
    Variable a(a_data(), true), b(b_data(), true);
    Variable phi_b = F::send(b, comm, 1);
    Variable phi_a = F::send(a, comm, 1);
    F::pseudo_connect(phi_a, phi_b).backward();
    const Reference swapped(b_data(), a_data());  // rank 1's first recv gets b, as sent
    require_values(b.grad(), values(swapped.a.grad()), 1e-12);
    require_values(a.grad(), values(swapped.b.grad()), 1e-12);
  } else if (comm.rank() == 1) {
    Variable w1(w1_data()), w2(w2_data());
    Variable first = F::recv(comm, 0);
    Variable second = F::recv(comm, 0);
    loss_of(first, second, w1, w2).backward();
  }
}

// The hazard as written: the check fires exactly when the peer got b first, whatever order
// this compiler evaluates the arguments in.
TEST_CASE("F::pseudo_connect(F::send(a), F::send(b)): the check fires exactly when b was sent first") {
  Communicator& comm = world();
  SendOrderCheck check(true);
  const int kReport = 7;
  if (comm.rank() == 0) {
    Variable a(a_data(), true, "a"), b(b_data(), true, "b");
    bool threw = false;
    try {
      F::pseudo_connect(F::send(a, comm, 1), F::send(b, comm, 1));
    } catch (const Error& e) {
      threw = true;
      REQUIRE_THAT(std::string(e.what()), Contains("'a'") && Contains("'b'"));
    }
    // Neither rank runs backward: the delegates are gone, and rank 1 drops what it received.
    const bool b_first = comm.recv(1, kReport).item() != 0;
    INFO("this compiler evaluated " << (b_first ? "the second argument first" : "the first argument first"));
    REQUIRE(threw == b_first);
  } else if (comm.rank() == 1) {
    Variable first = F::recv(comm, 0);
    Variable second = F::recv(comm, 0);
    const bool b_first = values(first.data()) == values(b_data());
    comm.send(full({1}, b_first ? 1.0 : 0.0), 0, kReport);
  }
}

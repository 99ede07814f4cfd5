// Differentiable point-to-point communication: send and recv, whose backward is the mirror
// message (the receiver sends the gradient back to the sender).
//
//   rank 0:  Variable phi = F::send(h, *comm, 1);        // h goes to rank 1; phi is a delegate
//            Variable y = F::recv(*comm, 1, phi);         // keeps rank 0's graph connected
//   rank 1:  Variable h = F::recv(*comm, 0);
//            F::send(model(h), *comm, 0).backward();      // backward on the delegate
//
// send returns a *delegate variable*: a size-0 variable whose creator is the send. Calling
// backward() on it (or reaching it through recv's delegate argument or pseudo_connect) runs
// the send's backward, which receives the gradient of x from the peer. Every send and recv
// runs its backward whenever it is reached, gradient or not (zeros are sent when none
// arrived), so the peer is never left waiting; gradients are exchanged only for floating
// dtypes. Both ranks must record the graph alike (both under NoGradGuard or neither): a
// mismatch is an error.
//
// Order: the peer receives the messages to it (on one tag) in the order the sends *ran*, and
// C++ leaves the order in which a call's arguments are evaluated unspecified (GCC evaluates the
// last first). So
//   F::pseudo_connect(F::send(a, *comm, 1), F::send(b, *comm, 1));   // wrong: b may go first
// can hand b to the peer's first recv: with equal shapes nothing notices, and the gradients of a
// and b come back swapped. Send several variables to one peer with one call, which sends them in
// list order and returns one delegate, or with one send per statement:
//   Variable phi = F::send_each({a, b}, *comm, 1);   // the peer: recv gives a, the next recv b
//   Variable phi = F::send(Variables{a, b}, *comm, 1);   // the peer: recv_list gives {a, b}
// TANDEM_CHECK_SEND_ORDER=1 turns the pseudo_connect above into an error (pseudo_connect.h).
//
// Devices: the delegate lives on the device of the (first) sent variable, and the gradient
// that comes back lands on the device of the variable it belongs to. A received variable lands
// on recv's `device` when given (ChainerMN's recv(..., device); bcast, scatter and gather take
// the same last argument, collectives.h), else on the delegate's device when one is passed, else
// where the communicator puts it (communicator.h: on the CPU when the sender's tensor was,
// otherwise on comm.device()). The dtype and shape always come with the message.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "autograd/variable.h"
#include "comm/transport/communicator.h"

namespace tandem {
class FunctionNode;
}

namespace tandem::functions {

// Sends x (or the list xs, received as a list) to `rank`; returns the delegate variable.
Variable send(const Variable& x, Communicator& comm, int rank, int tag = 0, CallSite site = CallSite::current());
Variable send(const Variables& xs, Communicator& comm, int rank, int tag = 0, CallSite site = CallSite::current());

// Sends each of xs to `rank` as a message of its own, in list order, so that the peer receives
// them with one recv each (xs[0] first); returns one delegate for all of them. The same traffic
// as one F::send per variable in separate statements, joined with pseudo_connect in that order.
Variable send_each(const Variables& xs, Communicator& comm, int rank, int tag = 0, CallSite site = CallSite::current());

// Receives one variable from `rank`: its dtype and shape come with the message. delegate (the
// result of an earlier send on this rank, if any) becomes an input, so that backward from
// the received variable reaches that send. device: where the variable lands (see above). A list
// sent as such is an error here: use recv_list (ChainerMN's force_tuple).
Variable recv(Communicator& comm, int rank, const Variable& delegate = Variable(), int tag = 0,
              std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());
Variables recv_list(Communicator& comm, int rank, const Variable& delegate = Variable(), int tag = 0,
                    std::optional<Device> device = std::nullopt, CallSite site = CallSite::current());

}  // namespace tandem::functions

namespace tandem::comm_detail {

// What pseudo_connect's order check (pseudo_connect.h) needs to know of a send.
struct SendRecord {
  const Communicator* comm;
  int peer, tag;
  std::int64_t sequence;  // the send node's place on the tape: the order the sends ran
  std::string what;       // "send of f32[4] 'a' to rank 1 (tag 0)"
};

// The record of `node` when it is a send, else nullopt.
std::optional<SendRecord> send_record(const FunctionNode& node);

}  // namespace tandem::comm_detail

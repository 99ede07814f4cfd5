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
// Devices: the delegate lives on the device of the (first) sent variable, and the gradient
// that comes back lands on the device of the variable it belongs to. A received variable lands
// on recv's `device` when given (ChainerMN's recv(..., device)), else on the delegate's device
// when one is passed, else where the communicator puts it (communicator.h: on the CPU when the
// sender's tensor was, otherwise on comm.device()).
#pragma once

#include <optional>

#include "autograd/variable.h"
#include "comm/communicator.h"

namespace tandem::functions {

// Sends x (or the list xs, received as a list) to `rank`; returns the delegate variable.
Variable send(const Variable& x, Communicator& comm, int rank, int tag = 0);
Variable send(const Variables& xs, Communicator& comm, int rank, int tag = 0);

// Receives one variable from `rank`: its dtype and shape come with the message. delegate (the
// result of an earlier send on this rank, if any) becomes an input, so that backward from
// the received variable reaches that send. A list sent as such is an error here: use
// recv_list (ChainerMN's force_tuple).
Variable recv(Communicator& comm, int rank, const Variable& delegate = Variable(), int tag = 0,
              std::optional<Device> device = std::nullopt);
Variables recv_list(Communicator& comm, int rank, const Variable& delegate = Variable(), int tag = 0,
                    std::optional<Device> device = std::nullopt);

}  // namespace tandem::functions

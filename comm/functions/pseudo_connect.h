// pseudo_connect: attaches a delegate variable to actual variables, so that backward from the
// actual ones also runs the communication behind the delegate.
//
//   Variable phi = F::send(x, *comm, 1);
//   Variable y = F::pseudo_connect(phi, h);   // y is h; backward from y also runs the send
//
// The forward returns the actual variables unchanged; the backward passes their gradients
// through and gives the delegate a zero gradient, so the delegate's creator always runs. Two
// delegates can be joined the same way (pseudo_connect(phi1, phi2)): backward on the result
// runs both sends.
//
// Order: pseudo_connect runs no communication itself, but its arguments may, and C++ evaluates
// them in an unspecified order (GCC: the last first). pseudo_connect(F::send(a, *comm, 1),
// F::send(b, *comm, 1)) may send b before a, and the peer's first recv then gets b (with equal
// shapes unnoticed: the gradients come back swapped). Send in separate statements, or with
// F::send_each({a, b}, *comm, 1), which sends in list order and returns one delegate
// (point_to_point.h).
//
// The send-order check: with it on (TANDEM_CHECK_SEND_ORDER=1 at the first use, or
// set_check_send_order(true)), joining delegates is an error when a send behind the first
// argument ran after a send behind the second to the same peer on the same tag: that is what
// evaluating the arguments right to left does. The error names both sends. A delegate here is
// a send's result or a pseudo_connect of delegates only; variables with data are not followed.
// Off by default, because a program may send b first on purpose; with it on, join delegates in
// the order their sends ran (pseudo_connect(phi_b, phi_a)), as send_each and MultiNodeChainList
// do.
#pragma once

#include "autograd/variable.h"

namespace tandem::functions {

Variable pseudo_connect(const Variable& delegate, const Variable& actual);
Variables pseudo_connect(const Variable& delegate, const Variables& actual);

bool check_send_order_enabled();
void set_check_send_order(bool on);

}  // namespace tandem::functions

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
#pragma once

#include "autograd/variable.h"

namespace tandem::functions {

Variable pseudo_connect(const Variable& delegate, const Variable& actual);
Variables pseudo_connect(const Variable& delegate, const Variables& actual);

}  // namespace tandem::functions

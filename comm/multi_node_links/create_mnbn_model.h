// create_mnbn_model (chainermn.links.create_mnbn_model): makes a model's BatchNormalization
// layers normalise with the statistics of the global batch, all ranks' examples together, by
// putting a MultiNodeBatchNormalization in the place of each.
//
//   auto model = create_mnbn_model(std::make_shared<MyNet>(), comm);
//
// Every BatchNormalization in the tree (children(), at any depth; subclasses too, but not one that
// is already a MultiNodeBatchNormalization) is replaced by a MultiNodeBatchNormalization of the
// same size, decay, eps and dtype, on the same device and in the same train mode, which holds
// the very same parameter Variables (gamma, beta) and persistent buffers (avg_mean, avg_var, N),
// under the same names: an optimizer set up before or after the conversion updates them, and a
// snapshot of either model loads into the other.
//
// Unlike ChainerMN, which returns a deep copy, the model is converted in place and returned (C++
// links cannot be copied generically). A chain may call its BatchNormalization through a pointer
// of its own (`bn_ = add_link("bn", ...)`, then `(*bn_)(h)`) that no converter can reach, so each
// replaced BatchNormalization forwards to its replacement (BatchNormalization::forward_to): both
// ways of calling it run the multi-node layer. A model that is itself a BatchNormalization gives
// its replacement (the same forwarding holds). `comm` must be the communicator of the ranks that
// share a batch (every rank that runs the model in training calls the collective).
//
// Errors: a BatchNormalization subclass with parameters or buffers other than
// BatchNormalization's (its path and what differs): the replacement could not hold them.
#pragma once

#include <memory>

#include "comm/transport/communicator.h"
#include "core/error.h"
#include "layers/link.h"

namespace tandem {

LinkPtr create_mnbn_model(const LinkPtr& link, CommunicatorPtr comm);

// The same, keeping the model's type (the model itself, or a BatchNormalization's replacement).
template <typename T>
std::shared_ptr<T> create_mnbn_model(const std::shared_ptr<T>& link, CommunicatorPtr comm) {
  LinkPtr converted = create_mnbn_model(LinkPtr(link), std::move(comm));
  auto typed = std::dynamic_pointer_cast<T>(converted);
  TANDEM_CHECK(typed != nullptr, "create_mnbn_model: the converted model is a ", converted->type_name(),
               ", which is not the type asked for");
  return typed;
}

}  // namespace tandem

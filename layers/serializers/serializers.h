// save_npz / load_npz for links and optimizers, with Chainer's key names ("predictor/l1/W",
// persistent buffers likewise; optimizer state as "<param>/<state>" plus "t" and "epoch").
// Loading checks every name, shape and dtype and says exactly what does not match. Values are
// copied into the existing parameters, so optimizers and graphs holding them see the new
// values. Parameters whose shape is still unknown (Linear(-1, n) before its first forward)
// are created from the file, with its shape and dtype, on the link's device, as Chainer's
// serializers do: a fresh lazy model loads without a forward pass (Link::initialize_param_from).
#pragma once

#include <string>

#include "layers/link.h"
#include "layers/optimizers/optimizer.h"
#include "layers/serializers/npz.h"

namespace tandem {

// Parameters then persistent buffers of `link` and its descendants.
NamedTensors link_state(Link& link);
// Loads from named tensors; with strict, an entry the link does not have is an error too.
void load_link_state(Link& link, const NamedTensors& entries, bool strict = true, const std::string& source = "state");

void save_npz(const std::string& path, Link& link);
void load_npz(const std::string& path, Link& link, bool strict = true);
void save_npz(const std::string& path, const Optimizer& optimizer);
void load_npz(const std::string& path, Optimizer& optimizer);

// The entries whose names start with prefix + "/", with the prefix removed.
NamedTensors with_prefix_removed(const NamedTensors& entries, const std::string& prefix);
// The entries with prefix + "/" prepended to every name.
NamedTensors with_prefix(const NamedTensors& entries, const std::string& prefix);

}  // namespace tandem

// allreduce_persistent: the packing follows bcast_data's (comm/data_parallel): one buffer per
// dtype, on the device of the buffers, so that a model costs one collective per dtype.
#include "comm/multi_node_training/allreduce_persistent.h"

#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "core/ops.h"

namespace tandem {

namespace {

struct Buffer {
  std::string name;
  Tensor* tensor;
};

// The digest of the whole list (every dtype), carried by every allreduce: ranks whose models
// differ fail at the first collective, before a group that one of them lacks could leave the
// others waiting.
std::uint64_t buffers_digest(const std::vector<Buffer>& buffers) {
  Fnv1a64 h;
  for (const Buffer& b : buffers) {
    h.bytes(b.name);
    h.mix(static_cast<std::uint64_t>(b.tensor->dtype()) + 256);
    for (std::int64_t extent : b.tensor->shape()) h.mix(static_cast<std::uint64_t>(extent));
    h.mix(0xffff);
  }
  return h.digest();
}

// "'bn/avg_mean' f64[4], 'bn/avg_var' f64[4]" (the first four, then how many more).
std::string buffers_str(const std::vector<Buffer>& buffers) {
  constexpr std::size_t kNamed = 4;
  std::string out;
  for (std::size_t i = 0; i < buffers.size() && i < kNamed; ++i)
    out += detail::concat(i ? ", '" : "'", buffers[i].name, "' ", dtype_name(buffers[i].tensor->dtype()),
                          shape_str(buffers[i].tensor->shape()));
  if (buffers.size() > kNamed) out += detail::concat(" and ", buffers.size() - kNamed, " more");
  return buffers.empty() ? "none" : out;
}

Tensor allreduce_mean(Communicator& comm, const Tensor& flat, std::uint64_t digest, const std::vector<Buffer>& all) {
  try {
    return comm.allreduce_checked(flat, AllreduceOp::mean, digest, "allreduce_persistent");
  } catch (const Error& e) {
    TANDEM_FAIL("allreduce_persistent on rank ", comm.rank(), ": the ranks' models differ in their floating-point "
                "persistent buffers (names, shapes or dtypes; this rank has ", buffers_str(all), "); ", e.what());
  }
}

}  // namespace

void allreduce_persistent(Communicator& comm, Link& link) {
  std::vector<Buffer> all;
  std::map<DType, std::vector<Buffer>> groups;
  for (auto& [name, tensor] : link.namedpersistents()) {
    if (!tensor->defined() || !is_floating(tensor->dtype())) continue;
    all.push_back({name, tensor});
    groups[tensor->dtype()].push_back(all.back());
  }
  const std::uint64_t digest = buffers_digest(all);
  if (groups.empty()) {
    allreduce_mean(comm, zeros({0}, DType::f64), digest, all);
    return;
  }
  for (auto& [dtype, buffers] : groups) {
    const Device device = buffers.front().tensor->device();
    std::int64_t total = 0;
    for (const Buffer& b : buffers) total += b.tensor->numel();
    Tensor flat({total}, dtype, device);
    std::int64_t begin = 0;
    for (const Buffer& b : buffers) {
      Tensor slot = flat.slice_flat(begin, b.tensor->shape());
      slot.copy_(b.tensor->to(device));
      begin += b.tensor->numel();
    }
    const Tensor mean = allreduce_mean(comm, flat, digest, all);
    begin = 0;
    for (const Buffer& b : buffers) {
      const Tensor slot = mean.slice_flat(begin, b.tensor->shape());
      b.tensor->copy_(slot.to(b.tensor->device()));  // in place: views of the buffer see it
      begin += b.tensor->numel();
    }
  }
}

AllreducePersistent::AllreducePersistent(std::shared_ptr<Link> model, CommunicatorPtr comm)
    : model_(std::move(model)), comm_(std::move(comm)) {
  TANDEM_CHECK(model_ && comm_, "AllreducePersistent: a model and a communicator are required");
}

void AllreducePersistent::operator()(Trainer&) { allreduce_persistent(*comm_, *model_); }

}  // namespace tandem

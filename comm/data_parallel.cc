// The data-parallel members of Communicator: broadcasting parameters and averaging gradients,
// one packed buffer per dtype so that a model costs one collective, not one per parameter.
#include <map>

#include "autograd/check_finite.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "core/ops.h"
#include "layers/link.h"

namespace tandem {

namespace {

struct Entry {
  std::string name;
  Variable param;
};

// Every rank must pass the same list: a digest of names, dtypes and shapes goes into the
// collective's header, so a rank with a different model is an error on every rank.
std::uint64_t params_digest(const std::vector<Entry>& entries) {
  std::uint64_t h = 1469598103934665603ull;
  auto mix = [&](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ull;
  };
  for (const Entry& e : entries) {
    for (char c : e.name) mix(static_cast<unsigned char>(c));
    mix(static_cast<std::uint64_t>(e.param.dtype()) + 256);
    for (std::int64_t extent : e.param.shape()) mix(static_cast<std::uint64_t>(extent));
    mix(0xffff);
  }
  return h;
}

// Parameters grouped by dtype, in the link's order within each group.
std::map<DType, std::vector<Entry>> by_dtype(Link& link) {
  std::map<DType, std::vector<Entry>> groups;
  for (auto& [name, param] : link.namedparams()) groups[param.dtype()].push_back({name, param});
  return groups;
}

std::int64_t total_numel(const std::vector<Entry>& entries) {
  std::int64_t n = 0;
  for (const Entry& e : entries) n += e.param.numel();
  return n;
}

// The packed buffer lives where the link's parameters do (those of the first entry): packing and
// unpacking are then copies on that device, and only the packed buffer crosses to the host (when
// the communicator stages it there) or travels on the device.
Device group_device(const std::vector<Entry>& entries) { return entries.front().param.data().device(); }

// Entry i's place in a packed buffer: a view of `flat`.
std::vector<Tensor> slots(const Tensor& flat, const std::vector<Entry>& entries) {
  std::vector<Tensor> views;
  std::int64_t begin = 0;
  for (const Entry& e : entries) {
    views.push_back(flat.slice_rows(begin, begin + e.param.numel()).reshape(e.param.shape()));
    begin += e.param.numel();
  }
  return views;
}

}  // namespace

void Communicator::bcast_data(Link& link) {
  for (auto& [dtype, entries] : by_dtype(link)) {
    const Device device = group_device(entries);
    Tensor flat;
    if (rank_ == 0) {
      flat = Tensor({total_numel(entries)}, dtype, device);
      std::vector<Tensor> views = slots(flat, entries);
      for (std::size_t i = 0; i < entries.size(); ++i) views[i].copy_(entries[i].param.data());
    }
    try {
      flat = bcast_checked(flat, 0, params_digest(entries), "bcast_data");
    } catch (const Error& e) {
      TANDEM_FAIL("bcast_data on rank ", rank_, ": the ranks' models differ (names, shapes or dtypes of the ",
                  dtype_name(dtype), " parameters); ", e.what());
    }
    if (rank_ == 0) continue;
    const std::vector<Tensor> views = slots(flat.to(device), entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Tensor data = entries[i].param.data();
      data.copy_(views[i]);
    }
  }
}

void Communicator::multi_node_mean_grad(Link& link, bool zero_fill) {
  for (auto& [dtype, entries] : by_dtype(link)) {
    const Device device = group_device(entries);
    Tensor flat({total_numel(entries)}, dtype, device);
    std::vector<Tensor> views = slots(flat, entries);
    std::string missing, nonfinite;
    const bool check_finite = check_finite_enabled();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const Tensor& grad = e.param.grad();
      if (grad.defined()) {
        views[i].copy_(grad);
        if (check_finite && nonfinite.empty()) {
          const std::string bad = first_nonfinite(grad);
          if (!bad.empty()) nonfinite = "'" + e.name + "' holds " + bad;
        }
      } else {
        if (!zero_fill && missing.empty()) missing = "'" + e.name + "' (" + e.param.data().description() + ")";
        views[i].copy_(zeros(e.param.shape(), dtype, device));
      }
    }
    // A missing gradient must stop every rank, not just this one (the others would wait in
    // the allreduce): the digest then differs, so the collective fails everywhere.
    // So must a NaN/Inf under check_finite, before the mean spreads it to every rank.
    const std::string why =
        !missing.empty()
            ? detail::concat("multi_node_mean_grad: parameter ", missing, " has no gradient on rank ", rank_,
                             "; pass zero_fill = true to count a missing gradient as zeros")
            : detail::concat("check_finite: multi_node_mean_grad: on rank ", rank_, " the gradient of parameter ",
                             nonfinite, " before the allreduce");
    const bool fault = !missing.empty() || !nonfinite.empty();
    Tensor mean;
    try {
      mean = allreduce_checked(flat, AllreduceOp::mean, params_digest(entries) + (fault ? 1 : 0),
                               "multi_node_mean_grad");
    } catch (const Error& e) {
      if (fault) TANDEM_FAIL(why);
      TANDEM_FAIL("multi_node_mean_grad on rank ", rank_, ": the ranks' models differ, or another rank lacks a "
                  "gradient (without zero_fill) or has a NaN/Inf gradient (with check_finite); ", e.what());
    }
    TANDEM_CHECK(!fault, why);
    // Each parameter's gradient is a view of the mean, on the parameter's device.
    const std::vector<Tensor> means = slots(mean, entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      e.param.set_grad(means[i].to(e.param.data().device()));
    }
  }
}

}  // namespace tandem

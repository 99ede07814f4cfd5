// Data parallelism over a communicator: broadcasting parameters and averaging gradients,
// one packed buffer per dtype so that a model costs one collective, not one per parameter
// (averaging adds one small collective first, in which the ranks agree on who has which gradient).
#include <map>

#include "autograd/check_finite.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/data_parallel/order_free_allreduce.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/hash.h"
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
  Fnv1a64 h;
  for (const Entry& e : entries) {
    h.bytes(e.name);
    h.mix(static_cast<std::uint64_t>(e.param.dtype()) + 256);
    for (std::int64_t extent : e.param.shape()) h.mix(static_cast<std::uint64_t>(extent));
    h.mix(0xffff);
  }
  return h.digest();
}

// Parameters grouped by dtype, in the given order within each group.
std::map<DType, std::vector<Entry>> by_dtype(const NamedParams& params) {
  std::map<DType, std::vector<Entry>> groups;
  for (const auto& [name, param] : params) groups[param.dtype()].push_back({name, param});
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
    views.push_back(flat.slice_flat(begin, e.param.shape()));
    begin += e.param.numel();
  }
  return views;
}

// Who has a gradient, as every rank learns it before any gradient moves (see
// multi_node_mean_grad): one row per rank of 64-bit words, word 0 the index + 1 of the rank's
// first parameter with a NaN/Inf gradient under check_finite (0: none), then one bit per
// parameter, set where the rank has its gradient.
class GradientCensus {
 public:
  GradientCensus(int size, std::size_t params)
      : words_(1 + static_cast<std::int64_t>((params + 63) / 64)), rows_(zeros({size, words_}, DType::i64)) {}

  // This rank's row.
  void set_present(int rank, std::size_t param) {
    word(rank, 1 + static_cast<std::int64_t>(param / 64)) |= std::uint64_t(1) << (param % 64);
  }
  void set_nonfinite(int rank, std::size_t param) { word(rank, 0) = param + 1; }

  const Tensor& rows() const { return rows_; }
  void set_rows(const Tensor& rows) { rows_ = rows; }

  bool present(int rank, std::size_t param) const {
    return (word(rank, 1 + static_cast<std::int64_t>(param / 64)) >> (param % 64)) & 1;
  }
  // The index of the rank's first parameter with a NaN/Inf gradient, or -1.
  std::int64_t nonfinite(int rank) const { return static_cast<std::int64_t>(word(rank, 0)) - 1; }

 private:
  std::uint64_t& word(int rank, std::int64_t i) {
    return reinterpret_cast<std::uint64_t*>(rows_.data<std::int64_t>())[rank * words_ + i];
  }
  std::uint64_t word(int rank, std::int64_t i) const {
    return static_cast<std::uint64_t>(rows_.data<std::int64_t>()[rank * words_ + i]);
  }

  std::int64_t words_;
  Tensor rows_;
};

// A parameter as every rank can name it: "'l2/W' (f64[2, 4])" (no device: ranks' devices differ).
std::string param_str(const Entry& e) {
  return detail::concat("'", e.name, "' (", dtype_name(e.param.dtype()), shape_str(e.param.shape()), ")");
}

}  // namespace

using dp_detail::ranks_str;

// "rank 1", "ranks 1 and 2", "ranks 0, 2-5 and 7" (runs of three or more as ranges).
std::string dp_detail::ranks_str(const std::vector<int>& ranks) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j - i >= 2) {
      parts.push_back(detail::concat(ranks[i], "-", ranks[j]));
    } else {
      for (std::size_t k = i; k <= j; ++k) parts.push_back(std::to_string(ranks[k]));
    }
    i = j + 1;
  }
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += i + 1 == parts.size() ? " and " : ", ";
    out += parts[i];
  }
  return out;
}

// FNV-1a over every parameter's bytes: equal on two ranks when their replicas are equal.
static std::uint64_t values_digest(const NamedParams& params) {
  Fnv1a64 h;
  for (const auto& [name, param] : params) {
    const Tensor host = param.data().to(Device::cpu());
    h.bytes(host.raw_data(), static_cast<std::size_t>(host.numel()) * dtype_size(host.dtype()));
  }
  return h.digest();
}

bool replicas_equal(Communicator& comm, const NamedParams& params) {
  const std::vector<Tensor> digests =
      comm.allgather(from_vector(std::vector<std::int64_t>{static_cast<std::int64_t>(values_digest(params))}));
  for (const Tensor& d : digests)
    if (d.to_vector<std::int64_t>() != digests[0].to_vector<std::int64_t>()) return false;
  return true;
}

void bcast_data(Communicator& comm, Link& link) { bcast_data(comm, link.namedparams()); }

void bcast_data(Communicator& comm, const NamedParams& params) {
  for (auto& [dtype, entries] : by_dtype(params)) {
    const Device device = group_device(entries);
    Tensor flat;
    if (comm.rank() == 0) {
      flat = Tensor({total_numel(entries)}, dtype, device);
      std::vector<Tensor> views = slots(flat, entries);
      for (std::size_t i = 0; i < entries.size(); ++i) views[i].copy_(entries[i].param.data());
    }
    try {
      flat = comm.bcast_checked(flat, 0, params_digest(entries), "bcast_data");
    } catch (const Error& e) {
      TANDEM_FAIL("bcast_data on rank ", comm.rank(), ": the ranks' models differ (names, shapes or dtypes of the ",
                  dtype_name(dtype), " parameters); ", e.what());
    }
    if (comm.rank() == 0) continue;
    const std::vector<Tensor> views = slots(flat.to(device), entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Tensor data = entries[i].param.data();
      data.copy_(views[i]);
    }
  }
}

void multi_node_mean_grad(Communicator& comm, Link& link, bool zero_fill, std::optional<DType> allreduce_grad_dtype) {
  multi_node_mean_grad(comm, link.namedparams(), zero_fill, 1.0, allreduce_grad_dtype);
}

void multi_node_mean_grad(Communicator& comm, const NamedParams& params, bool zero_fill, double scale,
                          std::optional<DType> allreduce_grad_dtype) {
  TANDEM_CHECK(!allreduce_grad_dtype || is_floating(*allreduce_grad_dtype),
               "multi_node_mean_grad: allreduce_grad_dtype must be floating (bf16, f16, f32, f64), got ",
               dtype_name(*allreduce_grad_dtype));
  std::vector<Entry> all;
  for (const auto& [name, param] : params) all.push_back({name, param});

  // 1. Agreement, one small collective before any gradient moves: every rank contributes its row
  // of the census (which gradients it has, and its first NaN/Inf under check_finite) and the sum
  // gives every rank every row. Its digest covers the whole parameter list, so ranks whose
  // models differ fail here, on every rank. Every rank then takes the same decisions below: an
  // error is an error everywhere, and no rank waits in an allreduce the others skipped.
  GradientCensus census(comm.size(), all.size());
  const bool check_finite = check_finite_enabled();
  std::string nonfinite_here;  // what check_finite found on this rank
  for (std::size_t i = 0; i < all.size(); ++i) {
    const Tensor& grad = all[i].param.grad();
    if (!grad.defined()) continue;
    census.set_present(comm.rank(), i);
    if (check_finite && nonfinite_here.empty()) {
      nonfinite_here = first_nonfinite(grad);
      if (!nonfinite_here.empty()) census.set_nonfinite(comm.rank(), i);
    }
  }
  try {
    census.set_rows(comm.allreduce_checked(census.rows(), AllreduceOp::sum, params_digest(all), "multi_node_mean_grad"));
  } catch (const Error& e) {
    TANDEM_FAIL("multi_node_mean_grad on rank ", comm.rank(), ": the ranks cannot agree on the parameter list (their "
                "models differ in names, shapes or dtypes, or not every rank is here); ", e.what());
  }

  // 2. The verdict. A parameter with a gradient on no rank is skipped (ChainerMN's behaviour: it
  // stays without one), or zeros with zero_fill; one with a gradient on some ranks only is an
  // error without zero_fill (the same text on every rank, naming the ranks), zeros where missing
  // with it.
  std::vector<std::vector<int>> without(all.size()), with(all.size());
  std::vector<std::size_t> disputed;
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (int r = 0; r < comm.size(); ++r) (census.present(r, i) ? with : without)[i].push_back(r);
    if (!with[i].empty() && !without[i].empty()) disputed.push_back(i);
  }
  if (!zero_fill && !disputed.empty()) {
    constexpr std::size_t kNamed = 3;
    std::string list;
    for (std::size_t k = 0; k < disputed.size() && k < kNamed; ++k) {
      const std::size_t i = disputed[k];
      list += detail::concat(k ? "; " : "", param_str(all[i]), " has none on ", ranks_str(without[i]),
                             " but one on ", ranks_str(with[i]));
    }
    if (disputed.size() > kNamed)
      list += detail::concat("; and ", disputed.size() - kNamed, " more (", disputed.size(), " parameters in all)");
    TANDEM_FAIL("multi_node_mean_grad: the ranks disagree on which parameters have a gradient: ", list,
                ". Pass zero_fill = true to count a missing gradient as zeros (a parameter with a gradient on "
                "no rank is skipped); no gradient was averaged");
  }
  // A NaN/Inf under check_finite stops every rank before the mean spreads it to all of them.
  std::vector<std::string> nonfinite;
  for (int r = 0; r < comm.size(); ++r) {
    const std::int64_t i = census.nonfinite(r);
    if (i < 0) continue;
    const Entry& e = all[static_cast<std::size_t>(i)];
    nonfinite.push_back(r == comm.rank() ? detail::concat("on rank ", r, " the gradient of parameter '", e.name,
                                                    "' holds ", nonfinite_here)
                                   : detail::concat("rank ", r, " has a NaN/Inf gradient in parameter ",
                                                    param_str(e)));
  }
  if (!nonfinite.empty()) {
    std::string list;
    for (std::size_t k = 0; k < nonfinite.size(); ++k) list += (k ? "; " : "") + nonfinite[k];
    TANDEM_FAIL("check_finite: multi_node_mean_grad: ", list, " before the allreduce; no gradient was averaged");
  }

  // 3. Deterministic mode: the order-free sum over the ranks, divided by the batch's number of
  // gradient groups (`scale` turns the mean over these ranks into the mean over the batch: these
  // ranks see that share of its groups). A parameter that no rank gave a gradient stays without
  // one even with zero_fill, as in one process: the update must not depend on the layout.
  if (deterministic()) {
    TANDEM_CHECK(!allreduce_grad_dtype, "multi_node_mean_grad: allreduce_grad_dtype (",
                 dtype_name(*allreduce_grad_dtype), ") does not run in deterministic mode, whose sums are exact");
    std::vector<Variable> present;
    for (std::size_t i = 0; i < all.size(); ++i)
      if (!with[i].empty()) present.push_back(all[i].param);
    const std::uint64_t digest = params_digest(all);
    const std::int64_t groups = gradient_groups_over(comm, scale, digest, "multi_node_mean_grad");
    order_free_allreduce_grads(comm, present, 1.0 / static_cast<double>(groups), digest, "multi_node_mean_grad");
    return;
  }

  // 3. One packed allreduce per dtype of the gradients that some rank has (missing ones as zeros),
  // in allreduce_grad_dtype where one is given (ChainerMN's: cast, averaged, cast back).
  std::map<DType, std::vector<Entry>> groups;
  for (std::size_t i = 0; i < all.size(); ++i) {
    Entry& e = all[i];
    if (!with[i].empty()) {
      groups[allreduce_grad_dtype.value_or(e.param.dtype())].push_back(e);
    } else if (zero_fill) {
      e.param.set_grad(zeros(e.param.shape(), e.param.dtype(), e.param.data().device()));
    }
  }
  for (auto& [dtype, entries] : groups) {
    const Device device = group_device(entries);
    Tensor flat({total_numel(entries)}, dtype, device);
    std::vector<Tensor> views = slots(flat, entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Tensor& grad = entries[i].param.grad();
      if (grad.defined()) {
        views[i].copy_(grad.to(dtype));
      } else {
        views[i].copy_(zeros(entries[i].param.shape(), dtype, device));
      }
    }
    // The census agreed on these lists; the digest checks it again for free.
    Tensor mean = comm.allreduce_checked(flat, AllreduceOp::mean, params_digest(entries), "multi_node_mean_grad");
    if (scale != 1.0) mean = mul(mean, scale);
    // Each parameter's gradient is a view of the mean, on the parameter's device.
    const std::vector<Tensor> means = slots(mean, entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      Entry& e = entries[i];
      e.param.set_grad(means[i].to(e.param.dtype()).to(e.param.data().device()));
    }
  }
}

}  // namespace tandem

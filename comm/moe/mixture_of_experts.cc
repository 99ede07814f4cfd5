#include "comm/moe/mixture_of_experts.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "autograd/functions.h"
#include "comm/functions/collectives.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace F = functions;

namespace {

// Where this rank's tokens go: the kept (token, expert) assignments sorted by expert (so by
// destination rank, then by the destination's local expert), each with its place among the
// token's k choices.
struct Routing {
  std::vector<std::int64_t> tokens;       // per kept assignment: the token (row of x)
  std::vector<std::int64_t> slots;        // per kept assignment: token * k + choice
  std::vector<std::int64_t> per_expert;   // kept assignments per expert [E]
  std::vector<std::int64_t> gate_ids;     // per assignment slot (all N k): token * E + expert
  std::vector<double> first_choice_share; // [E]: fraction of tokens whose first choice is e
  std::int64_t dropped = 0;
};

Routing route(const std::vector<double>& probs, std::int64_t tokens, std::int64_t experts, int k,
              double capacity_factor) {
  Routing routing;
  std::vector<std::int64_t> choice(static_cast<std::size_t>(tokens * k));
  routing.first_choice_share.assign(static_cast<std::size_t>(experts), 0.0);
  for (std::int64_t i = 0; i < tokens; ++i) {
    const double* p = probs.data() + i * experts;
    std::int64_t best = 0;
    for (std::int64_t e = 1; e < experts; ++e)
      if (p[e] > p[best]) best = e;  // ties: the lower index
    choice[static_cast<std::size_t>(i * k)] = best;
    routing.first_choice_share[static_cast<std::size_t>(best)] += 1.0 / static_cast<double>(tokens);
    if (k == 2) {
      std::int64_t second = best == 0 ? 1 : 0;
      for (std::int64_t e = 0; e < experts; ++e)
        if (e != best && p[e] > p[second]) second = e;
      choice[static_cast<std::size_t>(i * k + 1)] = second;
    }
  }
  routing.gate_ids.resize(choice.size());
  for (std::size_t slot = 0; slot < choice.size(); ++slot)
    routing.gate_ids[slot] = static_cast<std::int64_t>(slot) / k * experts + choice[slot];
  // Capacity: first choices of all tokens before second choices, each in token order.
  std::vector<bool> kept(choice.size(), true);
  if (capacity_factor > 0) {
    const auto capacity = static_cast<std::int64_t>(
        std::ceil(capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts)));
    std::vector<std::int64_t> load(static_cast<std::size_t>(experts), 0);
    for (int j = 0; j < k; ++j) {
      for (std::int64_t i = 0; i < tokens; ++i) {
        const std::size_t slot = static_cast<std::size_t>(i * k + j);
        std::int64_t& taken = load[static_cast<std::size_t>(choice[slot])];
        if (taken < capacity) {
          ++taken;
        } else {
          kept[slot] = false;
          ++routing.dropped;
        }
      }
    }
  }
  // Counting sort by expert, stable in slot order.
  routing.per_expert.assign(static_cast<std::size_t>(experts), 0);
  for (std::size_t slot = 0; slot < choice.size(); ++slot)
    if (kept[slot]) ++routing.per_expert[static_cast<std::size_t>(choice[slot])];
  std::vector<std::int64_t> next(static_cast<std::size_t>(experts), 0);
  for (std::int64_t e = 1; e < experts; ++e)
    next[static_cast<std::size_t>(e)] = next[static_cast<std::size_t>(e - 1)] + routing.per_expert[static_cast<std::size_t>(e - 1)];
  const std::int64_t total = choice.size() - static_cast<std::size_t>(routing.dropped);
  routing.tokens.resize(static_cast<std::size_t>(total));
  routing.slots.resize(static_cast<std::size_t>(total));
  for (std::size_t slot = 0; slot < choice.size(); ++slot) {
    if (!kept[slot]) continue;
    const std::size_t at = static_cast<std::size_t>(next[static_cast<std::size_t>(choice[slot])]++);
    routing.slots[at] = static_cast<std::int64_t>(slot);
    routing.tokens[at] = static_cast<std::int64_t>(slot) / k;
  }
  return routing;
}

Tensor ids_tensor(const std::vector<std::int64_t>& ids, const Device& device) {
  Tensor t = from_vector(ids);
  return device == Device::cpu() ? t : t.to(device);
}

std::string describe(const Variable& x) { return x.defined() ? x.description() : std::string("undefined"); }

}  // namespace

MixtureOfExperts::MixtureOfExperts(CommunicatorPtr comm, std::int64_t dim, MoEOptions options,
                                   const ExpertFactory& make_expert)
    : comm_(std::move(comm)), dim_(dim), options_(std::move(options)) {
  const MoEOptions& o = options_;
  TANDEM_CHECK(dim > 0, "MixtureOfExperts: dim must be positive, got ", dim);
  TANDEM_CHECK(o.experts >= 1, "MixtureOfExperts: experts must be at least 1, got ", o.experts);
  TANDEM_CHECK(o.top_k == 1 || o.top_k == 2, "MixtureOfExperts: top_k must be 1 or 2, got ", o.top_k);
  TANDEM_CHECK(o.top_k <= o.experts, "MixtureOfExperts: top_k ", o.top_k, " exceeds the ", o.experts, " experts");
  TANDEM_CHECK(o.capacity_factor >= 0 && std::isfinite(o.capacity_factor),
               "MixtureOfExperts: capacity_factor must be 0 (dropless) or positive, got ", o.capacity_factor);
  TANDEM_CHECK(o.load_balance_coef >= 0 && o.z_loss_coef >= 0,
               "MixtureOfExperts: the auxiliary loss weights must be at least 0, got load_balance_coef ",
               o.load_balance_coef, " and z_loss_coef ", o.z_loss_coef);
  TANDEM_CHECK(make_expert != nullptr, "MixtureOfExperts: make_expert is required");
  const int ranks = comm_ ? comm_->size() : 1;
  const int rank = comm_ ? comm_->rank() : 0;
  if (ranks > 1) {
    // The ranks must route alike: compare what decides routing (one small allgather).
    const std::vector<double> mine = {static_cast<double>(o.experts), static_cast<double>(o.top_k),
                                      o.capacity_factor, static_cast<double>(dim), o.renormalize ? 1.0 : 0.0};
    const std::vector<Tensor> all = comm_->allgather(from_vector(mine));
    bool agree = true;
    for (const Tensor& t : all) agree = agree && t.to_vector<double>() == mine;
    if (!agree) {
      std::ostringstream text;
      text << "MixtureOfExperts: the ranks of the expert-parallel group disagree on the layer:";
      for (int r = 0; r < ranks; ++r) {
        const std::vector<double> v = all[static_cast<std::size_t>(r)].to_vector<double>();
        text << (r ? ";" : "") << " rank " << r << " has experts " << v[0] << ", top_k " << v[1]
             << ", capacity_factor " << v[2] << ", dim " << v[3] << ", renormalize " << (v[4] != 0 ? "on" : "off");
      }
      TANDEM_FAIL(text.str());
    }
  }
  TANDEM_CHECK(o.experts % ranks == 0, "MixtureOfExperts: ", o.experts, " experts do not split evenly over the ",
               ranks, " ranks of the expert-parallel group (each rank holds experts / ranks of them: use a multiple of ",
               ranks, ")");
  local_experts_ = o.experts / ranks;
  first_local_ = rank * local_experts_;
  if (o.router_link) {
    router_ = add_link("router", o.router_link);
  } else {
    LinearOptions router = o.router;
    router.nobias = true;
    router_ = add_link("router", std::make_shared<Linear>(dim, o.experts, router));
  }
  auto holder = add_link("experts", std::make_shared<Chain>());
  for (std::int64_t e = first_local_; e < first_local_ + local_experts_; ++e) {
    LinkPtr expert = make_expert(e);
    TANDEM_CHECK(expert != nullptr, "MixtureOfExperts: make_expert(", e, ") returned no link");
    experts_.push_back(holder->add_link(std::to_string(e), expert));
  }
}

Variable MixtureOfExperts::forward(const Variable& x) {
  const std::int64_t E = options_.experts;
  const int k = options_.top_k;
  const int ranks = comm_ ? comm_->size() : 1;
  const std::int64_t L = local_experts_;

  // A bad input or router output is known here before anything is sent; such a rank still
  // joins the count exchange below with a failure flag, so that every rank fails together
  // instead of waiting for rows that will not come.
  std::string failure;
  Variable x2, logits;
  if (!x.defined() || x.dim() < 1 || x.shape().back() != dim_) {
    failure = detail::concat("MixtureOfExperts: input must be [..., ", dim_, "], got ", describe(x));
  } else {
    x2 = F::reshape(x, {-1, dim_});
    logits = router_->forward(x2);
    if (!logits.defined() || logits.shape() != Shape{x2.shape()[0], E})
      failure = detail::concat("MixtureOfExperts: the router must map [tokens, dim] to logits [tokens, experts] = [",
                               x2.shape()[0], ", ", E, "], got ", describe(logits), " from ", x2.description());
  }
  const std::int64_t N = failure.empty() ? x2.shape()[0] : 0;
  Routing routing;
  Variable probs;
  if (failure.empty()) {
    probs = F::softmax(logits, 1);
    routing = route(probs.data().to(Device::cpu()).to_vector<double>(), N, E, k, options_.capacity_factor);
  } else {
    routing.per_expert.assign(static_cast<std::size_t>(E), 0);
  }

  // The counts per (destination rank, its local expert), with a failure flag in front: what each
  // rank receives tells it how many rows of each of its experts come from every rank.
  std::vector<std::vector<std::int64_t>> arriving(static_cast<std::size_t>(ranks));  // [from][local expert]
  if (ranks > 1) {
    std::vector<Tensor> counts;
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::int64_t> piece = {failure.empty() ? 0 : 1};
      for (std::int64_t l = 0; l < L; ++l) piece.push_back(routing.per_expert[static_cast<std::size_t>(r * L + l)]);
      counts.push_back(from_vector(piece));
    }
    const std::vector<Tensor> got = comm_->alltoall(counts);
    std::vector<int> failed;
    for (int r = 0; r < ranks; ++r) {
      std::vector<std::int64_t> piece = got[static_cast<std::size_t>(r)].to_vector<std::int64_t>();
      if (piece[0] != 0) failed.push_back(r);
      arriving[static_cast<std::size_t>(r)].assign(piece.begin() + 1, piece.end());
    }
    if (!failure.empty()) TANDEM_FAIL(failure, " (on rank ", comm_->rank(), "; every rank of the group stops here)");
    if (!failed.empty()) {
      std::string list;
      for (std::size_t i = 0; i < failed.size(); ++i) list += (i ? ", " : "") + std::to_string(failed[i]);
      TANDEM_FAIL("MixtureOfExperts: rank(s) ", list, " of the expert-parallel group failed before dispatch (a bad "
                  "input or router output; their own error says which); no tokens were sent");
    }
  } else {
    TANDEM_CHECK(failure.empty(), failure);
    arriving[0] = routing.per_expert;
  }

  // The gates: each kept assignment's router probability (for k = 2 divided by the token's two).
  const Device device = x2.device();
  Variable gates = F::select_rows(F::reshape(probs, {N * E, 1}), ids_tensor(routing.gate_ids, device));
  if (k == 2 && options_.renormalize) {
    const Variable pairs = F::reshape(gates, {N, 2});
    gates = F::reshape(F::div(pairs, F::sum(pairs, {1}, true)), {N * 2, 1});
  }
  const Tensor token_ids = ids_tensor(routing.tokens, device);
  const Variable kept_gates = F::select_rows(gates, ids_tensor(routing.slots, device));

  // Dispatch: this rank's rows, sorted by expert, to the experts' ranks.
  const Variable outgoing = F::select_rows(x2, token_ids);
  Variable incoming = outgoing;
  std::vector<std::int64_t> send_counts(static_cast<std::size_t>(ranks), 0), recv_counts;
  if (ranks > 1) {
    for (std::int64_t e = 0; e < E; ++e) send_counts[static_cast<std::size_t>(e / L)] += routing.per_expert[static_cast<std::size_t>(e)];
    incoming = F::alltoallv(*comm_, outgoing, send_counts, &recv_counts);
  } else {
    recv_counts = {outgoing.shape()[0]};
  }
  const std::int64_t M = incoming.shape()[0];

  // The local experts. incoming is ordered by source rank, then by local expert; each expert
  // takes its rows from every source, and the outputs go back to the same places.
  // Deterministic mode (core/deterministic.h) runs each expert on each source's rows apart: a
  // source's rows are one gradient group's, and an expert's weight gradient is then a term per
  // group, whichever rank holds the expert and however many sources there are.
  const bool per_source = deterministic();
  std::vector<std::vector<std::int64_t>> rows(static_cast<std::size_t>(per_source ? L * ranks : L));
  std::int64_t at = 0;
  for (int from = 0; from < ranks; ++from)
    for (std::int64_t l = 0; l < L; ++l)
      for (std::int64_t c = 0; c < arriving[static_cast<std::size_t>(from)][static_cast<std::size_t>(l)]; ++c)
        rows[static_cast<std::size_t>(per_source ? l * ranks + from : l)].push_back(at++);
  TANDEM_CHECK(at == M, "MixtureOfExperts: rank ", comm_ ? comm_->rank() : 0, " received ", M,
               " rows but the counts announced ", at);
  Variable processed = incoming;  // no rows: the (empty) rows themselves keep the graph connected
  if (M > 0) {
    Variables outputs;
    std::vector<std::int64_t> order;
    for (std::size_t block = 0; block < rows.size(); ++block) {
      const std::int64_t l = per_source ? static_cast<std::int64_t>(block) / ranks : static_cast<std::int64_t>(block);
      const std::vector<std::int64_t>& mine = rows[block];
      if (mine.empty()) continue;
      const bool all_rows = static_cast<std::int64_t>(mine.size()) == M;  // in order, then
      const Variable in = all_rows ? incoming : F::select_rows(incoming, ids_tensor(mine, device));
      Variable out = experts_[static_cast<std::size_t>(l)]->forward(in);
      TANDEM_CHECK(out.defined() && out.shape() == in.shape(), "MixtureOfExperts: expert ", first_local_ + l,
                   " must map [rows, ", dim_, "] to the same shape, got ", describe(out), " from ", in.description());
      outputs.push_back(out);
      order.insert(order.end(), mine.begin(), mine.end());
    }
    processed = outputs.size() == 1 && static_cast<std::int64_t>(order.size()) == M && order.front() == 0
                    ? outputs[0]
                    : F::scatter_add_rows(F::concat(outputs, 0), ids_tensor(order, device), M);
  }

  // Combine: the rows come back along the same routes, in the order they left.
  const Variable returned = ranks > 1 ? F::alltoallv(*comm_, processed, recv_counts) : processed;
  const Variable y = F::scatter_add_rows(F::mul(returned, kept_gates), token_ids, N);

  // Auxiliary losses and what the log shows.
  observation_.clear();
  observation_["moe/dropped"] = static_cast<double>(routing.dropped);
  const std::int64_t kept = static_cast<std::int64_t>(routing.tokens.size());
  const std::int64_t busiest = *std::max_element(routing.per_expert.begin(), routing.per_expert.end());
  observation_["moe/max_load"] = kept > 0 ? static_cast<double>(busiest) * E / static_cast<double>(kept) : 0.0;
  aux_loss_ = Variable();
  if (N > 0 && options_.load_balance_coef > 0) {
    const Variable mean_probs = F::mean(probs, {0});
    const Tensor share = from_vector(routing.first_choice_share).to(probs.dtype()).to(device);
    const Variable balance = F::mul(F::sum(F::mul(mean_probs, Variable(share))), static_cast<double>(E));
    observation_["moe/load_balance"] = balance.data().to(Device::cpu()).to_vector<double>()[0];
    aux_loss_ = F::mul(balance, options_.load_balance_coef);
  }
  if (N > 0 && options_.z_loss_coef > 0) {
    // logsumexp(logits) = logits - log_softmax(logits), the same in every column.
    const Variable lse = F::mean(F::sub(logits, F::log_softmax(logits, 1)), {1});
    const Variable z = F::mean(F::square(lse));
    observation_["moe/z_loss"] = z.data().to(Device::cpu()).to_vector<double>()[0];
    const Variable weighted = F::mul(z, options_.z_loss_coef);
    aux_loss_ = aux_loss_.defined() ? F::add(aux_loss_, weighted) : weighted;
  }
  return F::reshape(y, x.shape());
}

namespace {

// Calls fn with every MixtureOfExperts inside link (itself included) and its path prefix
// ("blocks/0/mlp/"), as parameter paths spell it.
void visit_moe(const Link& link, const std::function<void(const MixtureOfExperts&, const std::string&)>& fn,
               const std::string& prefix = "") {
  if (const auto* moe = dynamic_cast<const MixtureOfExperts*>(&link)) fn(*moe, prefix);
  for (const auto& [name, child] : link.children()) visit_moe(*child, fn, prefix + name + "/");
}

}  // namespace

Variable moe_aux_loss(const Link& model) {
  Variable total;
  visit_moe(model, [&](const MixtureOfExperts& moe, const std::string&) {
    const Variable aux = moe.aux_loss();
    if (aux.defined()) total = total.defined() ? F::add(total, aux) : aux;
  });
  return total;
}

std::map<std::string, double> moe_observation(const Link& model) {
  std::map<std::string, double> sums;
  visit_moe(model, [&](const MixtureOfExperts& moe, const std::string&) {
    for (const auto& [key, value] : moe.observation()) sums[key] += value;
  });
  return sums;
}

}  // namespace tandem

namespace tandem {

ExpertLayout make_expert_layout(const CommunicatorPtr& world, int expert_parallel) {
  TANDEM_CHECK(world != nullptr, "make_expert_layout: a communicator is required");
  TANDEM_CHECK(expert_parallel >= 1 && world->size() % expert_parallel == 0, "make_expert_layout: ", expert_parallel,
               " ranks per expert-parallel group do not divide the ", world->size(), " ranks");
  const int rank = world->rank();
  ExpertLayout layout;
  layout.expert_parallel = world->split(rank / expert_parallel, rank);
  layout.expert_data_parallel = world->split(rank % expert_parallel, rank);
  return layout;
}

std::vector<ParameterGroup> moe_parameter_groups(const Link& model, const CommunicatorPtr& world,
                                                 const ExpertLayout& layout) {
  TANDEM_CHECK(world && layout.expert_parallel && layout.expert_data_parallel,
               "moe_parameter_groups: the world and both communicators of the layout are required");
  auto prefixes = std::make_shared<std::vector<std::string>>();
  visit_moe(model, [&](const MixtureOfExperts&, const std::string& prefix) { prefixes->push_back(prefix + "experts/"); });
  auto is_expert = [prefixes](const std::string& path) {
    for (const std::string& prefix : *prefixes)
      if (path.rfind(prefix, 0) == 0) return true;
    return false;
  };
  ParameterGroup shared{"shared", world, [is_expert](const std::string& path) { return !is_expert(path); }};
  ParameterGroup experts{"experts", layout.expert_data_parallel, is_expert};
  experts.grad_scale = 1.0 / static_cast<double>(layout.expert_parallel->size());
  experts.zero_fill = true;
  return {shared, experts};
}

}  // namespace tandem

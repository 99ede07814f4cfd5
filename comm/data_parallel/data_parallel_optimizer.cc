#include "comm/data_parallel/data_parallel_optimizer.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "autograd/backward_observer.h"
#include "autograd/check_finite.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/data_parallel/gradient_buckets.h"
#include "comm/transport/background_progress.h"
#include "core/cpu/block_cache.h"
#include "core/deterministic.h"
#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

constexpr const char* kOperation = "data-parallel gradients";
constexpr const char* kGatherOperation = "zero = 3 parameter gather";
// zero >= 2: buckets whose collectives may travel at once (see launch).
constexpr std::size_t kInFlight = 2;

// One bucket's collective in this step.
struct Flight {
  std::unique_ptr<PendingCollective> pending;
  Tensor result;  // once complete: the sum, whole (allreduce) or this rank's stripe (reduce-scatter)
};

class DataParallelSync final : public GradientSync, public BackwardObserver {
 public:
  DataParallelSync(std::weak_ptr<Optimizer> optimizer, CommunicatorPtr comm, const DataParallelOptions& options)
      : optimizer_(std::move(optimizer)),
        // The buckets' collectives run on a communicator of their own: they are in flight while
        // the model's own communication (a pipeline's, a multi-node batch norm's) goes on.
        comm_(comm->split(0, comm->rank())),
        // zero = 3's gathers on another: their order and the buckets' are each the same on every
        // rank, but not their interleaving.
        gather_comm_(options.zero == 3 ? comm->split(0, comm->rank()) : comm_),
        options_(options) {
    TANDEM_CHECK(options.zero >= 0 && options.zero <= 3, "create_multi_node_optimizer: zero = ", options.zero,
                 " (0 none, 1 the optimizer state sharded, 2 also the gradients, 3 also the parameters)");
    TANDEM_CHECK(!options.double_buffering || options.zero == 0,
                 "create_multi_node_optimizer: double_buffering needs zero = 0 (got zero = ", options.zero, ")");
    TANDEM_CHECK(options.bucket_mb >= 0, "create_multi_node_optimizer: bucket_mb = ", options.bucket_mb,
                 " (>= 0; 0: one bucket per dtype)");
    overlap_ = options.overlap && !options.double_buffering;
    registration_ = add_backward_observer(this);
  }

  ~DataParallelSync() override {
    registration_.reset();
    // Collectives still in flight complete here: their headers would otherwise stay queued in
    // MPI, for whichever communicator reuses this one's context next.
    try {
      if (prefetch_) prefetch_->wait();
      for (std::vector<Flight>* flights : {&flights_, &previous_})
        for (Flight& f : *flights)
          if (f.pending && !f.result.defined()) f.pending->wait();
      for (std::vector<Flight>& round : earlier_)
        for (Flight& f : round)
          if (f.pending && !f.result.defined()) f.pending->wait();
    } catch (const std::exception&) {
      // Already failing (the error that stops the job has been raised elsewhere).
    }
  }

  // --- during backward ----------------------------------------------------------------------
  void backward_started() override {
    if (options_.zero == 3 && plan_) switch_pass(/*backward=*/true);
    ran_backward_ = true;
    in_backward_ = overlap_ && !NoGradientSync::active();
    touched_ = false;
    if (!in_backward_) return;
    // An earlier backward of this step already started the buckets: their sums miss what this
    // one adds. Sharded, the local gradients went into those buckets, so this backward's travel
    // in a second round, added at the update; unsharded, the first round is dropped and the
    // accumulated gradients travel again. Decided at every syncing backward, gradient or not,
    // so that every rank runs the same rounds.
    if (next_launch_ > 0) {
      if (options_.zero == 0) {
        drop_flights();
      } else {
        launch_rest();
        earlier_.push_back(std::move(flights_));
        flights_.clear();
        next_launch_ = 0;
      }
    }
    ensure_plan();
    if (plan_) ready_.assign(plan_->buckets().size(), 0);
    if (plan_ && reorders() && ready_seen_.size() != plan_->params().size()) {
      ready_seen_.assign(plan_->params().size(), false);
      ready_order_.clear();
    }
  }

  void leaf_final(const VariableNode& leaf) override {
    if (!in_backward_ || !plan_) return;
    auto it = node_index_.find(&leaf);
    if (it == node_index_.end()) return;
    touched_ = true;
    if (reorders() && !ready_seen_[it->second]) {
      ready_seen_[it->second] = true;
      ready_order_.push_back(it->second);
    }
    const std::size_t b = plan_->bucket_of(it->second);
    if (++ready_[b] == plan_->buckets()[b].params.size()) {
      while (next_launch_ < plan_->buckets().size() && ready_[next_launch_] == plan_->buckets()[next_launch_].params.size())
        launch(next_launch_++);
    }
  }

  void function_done() override {
    // MPI moves a non-blocking collective on only inside MPI calls.
    if (prefetch_) prefetch_->test();
    for (std::vector<Flight>* flights : {&flights_, &previous_})
      for (Flight& f : *flights)
        if (f.pending && !f.result.defined()) {
          f.pending->test();
          return;
        }
  }

  void backward_finished() override {
    if (in_backward_ && touched_) launch_rest();
    in_backward_ = false;
    progress_window_.close();
    if (options_.zero == 3 && plan_) switch_pass(/*backward=*/false);
  }

  void leaf_needed(const VariableNode& leaf) override {
    if (options_.zero != 3 || !plan_) return;
    auto it = node_index_.find(&leaf);
    if (it != node_index_.end()) demand(plan_->bucket_of(it->second));
  }

  // --- zero = 3: the parameters live as this rank's stripes; a link's are gathered whole just
  // before a function reads them and freed soon after ------------------------------------------
  void attach(Link& target) override {
    if (options_.zero != 3) return;
    const NamedParams now = target.namedparams(true);
    for (const auto& [name, p] : now)
      TANDEM_CHECK(p.defined(), "create_multi_node_optimizer: zero = 3 shards the parameters at setup, but '", name,
                   "' is not initialised yet (a lazily sized link, e.g. Linear(-1, n)): give its input size, or run "
                   "one forward before setup");
    if (!local_.empty()) return;  // attached already (setup after set_gradient_sync)
    ensure_plan();
    if (!plan_) return;
    // The replicas must agree before each rank keeps its stripes only. As at the other stages,
    // the first update after a broadcast is skipped, so that every stage trains alike.
    if (!replicas_equal(*comm_, target.namedparams())) {
      bcast_data(*comm_, target.namedparams());
      skip_first_update_ = true;
    }
    verified_ = true;
    local_.clear();
    for (std::size_t b = 0; b < plan_->buckets().size(); ++b) local_.push_back(take_stripe(b));
    for (std::size_t b = 0; b < plan_->buckets().size(); ++b) release_bucket(b);
    reset_passes();
  }

  std::shared_ptr<void> gather_parameters(Link& target) override {
    (void)target;
    if (options_.zero != 3 || !plan_) return nullptr;
    for (std::size_t b = 0; b < plan_->buckets().size(); ++b) fill_bucket(b);
    // Afterwards: the stripes from the values then (a snapshot may have loaded new ones).
    return std::shared_ptr<void>(nullptr, [this](void*) {
      // Replicas loaded from one snapshot agree: a resumed run loses no step to the broadcast.
      if (skip_first_update_ && replicas_equal(*comm_, plan_->params())) skip_first_update_ = false;
      for (std::size_t b = 0; b < plan_->buckets().size(); ++b) local_[b] = take_stripe(b);
      for (std::size_t b = 0; b < plan_->buckets().size(); ++b) release_bucket(b);
      reset_passes();
    });
  }

  // --- the update ---------------------------------------------------------------------------
  bool before_update(Link& target) override {
    TANDEM_CHECK(!deterministic(), "data-parallel optimizer: deterministic mode was turned on after "
                 "create_multi_node_optimizer made this optimizer (its buckets are not order-free); turn it on first");
    ensure_plan();
    if (!plan_) return true;
    // zero = 3: whatever is gathered now is stale after the update; every rank starts a new pass.
    if (options_.zero == 3) {
      for (std::size_t b : materialized_) release_bucket(b);
      reset_passes();
      if (skip_first_update_) {
        skip_first_update_ = false;
        drop_flights();
        end_step();
        return false;
      }
    }
    if (!verified_) {
      verified_ = true;
      // Replicas that already agree (the same seed, or resumed from the same snapshot) need no
      // broadcast, and their gradients are valid: go on to update, so a resumed run loses no step.
      if (!replicas_equal(*comm_, target.namedparams())) {
        drop_flights();
        previous_.clear();
        bcast_data(*comm_, target.namedparams());
        end_step();
        return false;
      }
    }
    launch_rest();
    std::vector<std::vector<Flight>> rounds = std::move(earlier_);
    earlier_.clear();
    std::vector<Flight> done;
    if (options_.double_buffering) {
      // This step's sums travel behind the next step's computation; the last step's are applied.
      done = std::move(previous_);
      previous_ = std::move(flights_);
    } else {
      done = std::move(flights_);
    }
    flights_.clear();
    end_step();
    if (done.empty()) return false;  // double buffering's first update: nothing averaged yet
    rounds.push_back(std::move(done));
    for (std::vector<Flight>& round : rounds)
      for (Flight& f : round)
        if (!f.result.defined()) f.result = f.pending->wait();
    const bool updated = apply(rounds);
    fix_bucket_order();
    return updated;
  }

  std::vector<std::vector<std::string>> bucket_names() {
    ensure_plan();
    std::vector<std::vector<std::string>> out;
    if (!plan_) return out;
    for (const GradientBucket& bucket : plan_->buckets()) {
      out.emplace_back();
      for (std::size_t i : bucket.params) out.back().push_back(plan_->params()[i].first);
    }
    return out;
  }

  std::vector<std::pair<std::string, Variable>> update_params(Link& target) override {
    if (options_.zero == 0) return target.namedparams();
    ensure_plan();
    if (shards_.empty() && plan_) make_shards();
    return shards_;
  }

  std::vector<Slice> slices_of(Link& target, const std::string& param) override {
    (void)target;
    if (options_.zero == 0) return {};
    ensure_plan();
    std::vector<Slice> out;
    if (!plan_) return out;
    for (const GradientBucket& bucket : plan_->buckets())
      for (const StripePiece& p : plan_->stripe_pieces(bucket, comm_->rank()))
        if (plan_->params()[p.param].first == param) out.push_back({shard_name(p), p.begin, p.end});
    return out;
  }

  void after_update(Link& target) override {
    (void)target;
    // The slices' averaged gradients have served: their memory goes before the next backward.
    for (auto& [name, shard] : shards_) shard.cleargrad();
    if (options_.zero == 0 || options_.zero == 3 || !plan_) return;
    // Each rank updated its stripes of every bucket; every rank gets all of them.
    const int me = comm_->rank();
    for (const GradientBucket& bucket : plan_->buckets()) {
      const Device device = plan_->params()[bucket.params.front()].second.data().device();
      Tensor mine = zeros({bucket.stripe_data}, bucket.dtype, device);
      for (const StripePiece& p : plan_->stripe_pieces(bucket, me))
        mine.slice_rows(p.at, p.at + p.end - p.begin).copy_(param_flat(p.param).slice_rows(p.begin, p.end));
      const std::vector<Tensor> all = comm_->allgather(mine);
      for (int s = 0; s < comm_->size(); ++s) {
        if (s == me) continue;
        const Tensor theirs = all[s].to(device);
        for (const StripePiece& p : plan_->stripe_pieces(bucket, s)) {
          Tensor into = param_flat(p.param).slice_rows(p.begin, p.end);
          into.copy_(theirs.slice_rows(p.at, p.at + p.end - p.begin));
        }
      }
    }
  }

  double total_over_shards(double local) override {
    if (options_.zero == 0) return local;
    return comm_->allreduce(full({1}, local, DType::f64)).to_vector<double>()[0];
  }

 private:
  // The plan for the target's parameters as they are now (rebuilt when they change: a lazily
  // sized layer appeared).
  void ensure_plan() {
    std::shared_ptr<Optimizer> optimizer = optimizer_.lock();
    if (!optimizer || !optimizer->has_target()) return;
    const NamedParams now = optimizer->target()->namedparams();
    if (plan_ && plan_->matches(now)) return;
    TANDEM_CHECK(!(options_.zero == 3 && plan_), "create_multi_node_optimizer: zero = 3: the model's parameters "
                 "changed after setup (a link added, or a lazily sized one initialised); they are sharded at setup");
    drop_flights();
    previous_.clear();
    NamedParams reversed(now.rbegin(), now.rend());
    plan_ = now.empty()
                ? nullptr
                : std::make_unique<GradientPlan>(std::move(reversed), options_.bucket_mb, options_.zero > 0,
                                                 comm_->size(), options_.zero == 3, options_.allreduce_grad_dtype);
    node_index_.clear();
    shards_.clear();
    order_fixed_ = false;
    ready_seen_.clear();
    ready_order_.clear();
    // Sharded gradients or parameters exist to save memory; the CPU block cache (which keeps
    // freed blocks resident) is capped at about the working set of a step: two links gathered
    // and a third arriving (zero = 3), two buckets travelling (kInFlight) and one being packed.
    // With four, zero = 3 re-mapped buckets every step; six trade a little peak memory for a
    // faster step (docs/performance.md, "Data parallelism per ZeRO stage"; bench id
    // dp.big.train.zero3).
    if (plan_ && options_.zero >= 2) {
      std::size_t largest = 0;
      for (const GradientBucket& bucket : plan_->buckets())
        largest = std::max(largest, static_cast<std::size_t>(bucket.flat_size()) * dtype_size(bucket.wire));
      cpu::BlockCache::instance().cap_limit(6 * largest);
    }
    if (plan_)
      for (std::size_t i = 0; i < plan_->params().size(); ++i) node_index_[plan_->params()[i].second.node().get()] = i;
    verified_ = false;
  }

  // Whether the bucket order is still to be fixed from the order gradients become ready (see
  // data_parallel_optimizer.h): unsharded, overlapped, once per plan.
  bool reorders() const { return options_.zero == 0 && overlap_ && !order_fixed_; }

  // At the first update that averaged gradients: the plan again, its parameters in the order
  // rank 0's syncing backward passes finished them (those never finished last, in the old
  // order). Rank 0's order, broadcast, is every rank's: the ranks may have run different
  // branches, and the buckets' digests must agree.
  void fix_bucket_order() {
    if (!plan_ || !reorders() || ready_seen_.size() != plan_->params().size()) return;
    order_fixed_ = true;
    std::vector<double> order;
    for (std::size_t i : ready_order_) order.push_back(double(i));
    for (std::size_t i = 0; i < ready_seen_.size(); ++i)
      if (!ready_seen_[i]) order.push_back(double(i));
    ready_order_.clear();
    ready_seen_.clear();
    const std::vector<double> agreed = comm_->bcast(from_vector(order), 0).to_vector<double>();
    NamedParams ordered;
    for (double i : agreed) ordered.push_back(plan_->params()[static_cast<std::size_t>(i)]);
    plan_ = std::make_unique<GradientPlan>(std::move(ordered), options_.bucket_mb, /*sharded=*/false, comm_->size(),
                                           /*by_link=*/false, options_.allreduce_grad_dtype);
    node_index_.clear();
    for (std::size_t i = 0; i < plan_->params().size(); ++i) node_index_[plan_->params()[i].second.node().get()] = i;
  }

  Tensor param_flat(std::size_t i) const { return plan_->params()[i].second.data().reshape({-1}); }

  // Packs bucket b's local gradients and its census row, and starts its collective.
  void launch(std::size_t b) {
    const GradientBucket& bucket = plan_->buckets()[b];
    const int me = comm_->rank(), ranks = comm_->size();
    const Device device = plan_->params()[bucket.params.front()].second.data().device();
    // Written whole below: each piece, the padding and the tail.
    // In the wire's dtype: allreduce_grad_dtype's gradients are cast as they are copied in.
    Tensor flat({bucket.flat_size()}, bucket.wire, device);
    std::vector<double> tail(static_cast<std::size_t>(bucket.tail), 0.0);
    const std::size_t k = bucket.params.size();
    const bool check = check_finite_enabled();
    for (std::size_t j = 0; j < k; ++j) {
      const Tensor& grad = plan_->params()[bucket.params[j]].second.grad();
      if (!grad.defined()) continue;
      tail[j] = 1;
      if (check && tail[k + ranks + me] == 0 && !first_nonfinite(grad).empty()) tail[k + ranks + me] = double(j + 1);
    }
    tail[k + me] = ran_backward_ ? double(1 + step_ % census_step_modulus(bucket.wire)) : 0.0;
    const Tensor tail_tensor = from_vector(tail).to(bucket.wire).to(device);
    const auto zero = [&](std::int64_t from, std::int64_t to) {
      if (to > from) flat.slice_rows(from, to).copy_(zeros({to - from}, bucket.wire, device));
    };
    for (std::int64_t s = 0; s < bucket.stripes; ++s) {
      const std::int64_t base = s * bucket.stripe_size();
      std::int64_t filled = 0;
      for (const StripePiece& p : plan_->stripe_pieces(bucket, s)) {
        const Tensor& grad = plan_->params()[p.param].second.grad();
        Tensor into = flat.slice_rows(base + p.at, base + p.at + p.end - p.begin);
        const Tensor piece = grad.defined() ? grad.reshape({-1}).slice_rows(p.begin, p.end).to(bucket.wire) : grad;
        if (!grad.defined()) zero(base + p.at, base + p.at + p.end - p.begin);
        else if (divides_before_sum()) div_into_(into, piece, double(ranks));
        else into.copy_(piece);
        filled = p.at + p.end - p.begin;
      }
      zero(base + filled, base + bucket.stripe_data);  // the last stripe's padding
      flat.slice_rows(base + bucket.stripe_data, base + bucket.stripe_size()).copy_(tail_tensor);
    }
    // Sharded: the local gradients live on in the bucket only, so that averaged slices replace
    // them rather than join them (and their memory goes).
    if (options_.zero > 0)
      for (std::size_t i : bucket.params) Variable(plan_->params()[i].second).cleargrad();
    // Sharded gradients exist to save memory: at most kInFlight buckets' full-size buffers
    // travel at once (MPI moves a started collective on only inside MPI calls, so without a
    // bound a fast backward piles them up).
    if (options_.zero >= 2) {
      std::size_t travelling = 0;
      for (Flight& f : flights_)
        if (f.pending && !f.result.defined() && !f.pending->test()) ++travelling;
      for (Flight& f : flights_) {
        if (travelling < kInFlight) break;
        if (f.pending && !f.result.defined() && !f.pending->test()) {
          f.pending->wait();
          --travelling;
        }
      }
    }
    if (flights_.size() <= b) flights_.resize(b + 1);
    Flight& f = flights_[b];
    f.result = Tensor();
    // The allreduce sums in place: the bucket is this sync's own.
    f.pending = options_.zero >= 2 ? comm_->start_reduce_scatter_sum(flat, bucket.digest, kOperation)
                                   : comm_->start_allreduce_sum(flat, bucket.digest, kOperation, /*in_place=*/true);
    // Backward goes on computing: a helper moves the buckets meanwhile (background_progress.h),
    // until backward ends and the update's waits move them.
    if (in_backward_ && options_.background_progress && !progress_window_.open())
      progress_window_ = open_background_progress();
  }

  void launch_rest() {
    if (!plan_) return;
    while (next_launch_ < plan_->buckets().size()) launch(next_launch_++);
  }

  // Completes the collectives started this step and forgets their results.
  void drop_flights() {
    for (std::vector<Flight>* flights : {&flights_})
      for (Flight& f : *flights)
        if (f.pending && !f.result.defined()) f.pending->wait();
    for (std::vector<Flight>& round : earlier_)
      for (Flight& f : round)
        if (f.pending && !f.result.defined()) f.pending->wait();
    flights_.clear();
    earlier_.clear();
    next_launch_ = 0;
  }

  void end_step() {
    ++step_;
    ran_backward_ = false;
    next_launch_ = 0;
  }

  // Whether each rank divides its gradients by the number of ranks as it copies them into a bucket,
  // instead of dividing the sum afterwards: unsharded, with a power of two of ranks. Dividing by a
  // power of two only lowers the exponent, so the sum of the quotients is the quotient of the sum
  // bit for bit (in the normal range; it cannot overflow where the sum would), and the pass over
  // the whole sum goes (7.2 MB a step for the MNIST MLP: docs/performance.md, "The MLP on 2 ranks
  // against LibTorch + MPICH"; bench id dp.mlp.train.sgd).
  bool divides_before_sum() const {
    const int ranks = comm_->size();
    return options_.zero == 0 && ranks > 0 && (ranks & (ranks - 1)) == 0;
  }

  // The stripe of bucket b's result that this rank reads.
  Tensor my_stripe(const GradientBucket& bucket, const Tensor& result) const {
    if (options_.zero != 1) return result;  // unsharded: one stripe; reduce-scatter: this rank's
    const std::int64_t base = comm_->rank() * bucket.stripe_size();
    return result.slice_rows(base, base + bucket.stripe_size());
  }

  // Checks the census (the same verdict on every rank) and sets the averaged gradients. rounds:
  // every round of this step (one, unless a sharded step ran several syncing backward passes),
  // each with every bucket; their sums add up.
  bool apply(std::vector<std::vector<Flight>>& rounds) {
    const std::vector<GradientBucket>& buckets = plan_->buckets();
    // The census: the step and backward slots of the last round; presence over all rounds.
    std::vector<std::vector<double>> tails;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const auto tail_of = [&](const Flight& f) {
        return my_stripe(buckets[b], f.result).slice_rows(buckets[b].stripe_data, buckets[b].stripe_size())
            .to_vector<double>();
      };
      std::vector<double> tail = tail_of(rounds.back()[b]);
      for (std::size_t r = 0; r + 1 < rounds.size(); ++r) {
        const std::vector<double> earlier = tail_of(rounds[r][b]);
        for (std::size_t j = 0; j < buckets[b].params.size(); ++j) tail[j] += earlier[j];
      }
      tails.push_back(std::move(tail));
    }
    check_census(buckets, tails);
    const int ranks = comm_->size();
    shards_.clear();
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const GradientBucket& bucket = buckets[b];
      const std::size_t k = bucket.params.size();
      Tensor mean = my_stripe(bucket, rounds.back()[b].result).slice_rows(0, bucket.stripe_data);
      for (std::size_t r = 0; r + 1 < rounds.size(); ++r)
        mean = add(mean, my_stripe(bucket, rounds[r][b].result).slice_rows(0, bucket.stripe_data));
      if (options_.zero == 1 && rounds.size() == 1) {
        mean = div(mean, double(ranks));  // its stripe only: the other ranks' stripes of the result go
      } else if (!divides_before_sum()) {
        // The sum is this sync's own (the collective's result): divided in place, while the
        // collective's last copy still has it in cache; the gradients are views of it. A new
        // tensor cost a pass over cold memory (dp.mlp.train.sgd, 7.2 MB a step).
        div_into_(mean, mean, double(ranks));
      }
      // The results' memory goes bucket by bucket (only the means stay, as the gradients).
      for (std::vector<Flight>& round : rounds) round[b].result = Tensor();
      auto presence = [&](std::size_t param) {
        for (std::size_t j = 0; j < k; ++j)
          if (bucket.params[j] == param) return tails[b][j];
        return 0.0;
      };
      if (options_.zero == 0) {
        for (std::size_t j = 0; j < k; ++j) {
          Variable param = plan_->params()[bucket.params[j]].second;
          if (tails[b][j] > 0) {
            // allreduce_grad_dtype: cast back to the parameter's dtype.
            param.set_grad(mean.slice_flat(bucket.offsets[j], param.shape()).to(bucket.dtype));
          } else if (options_.zero_fill) {
            param.set_grad(zeros(param.shape(), param.dtype(), param.data().device()));
          } else {
            param.cleargrad();
          }
        }
        continue;
      }
      for (const StripePiece& p : plan_->stripe_pieces(bucket, comm_->rank())) {
        Variable piece = shard_variable(p);
        const double present = presence(p.param);
        if (present > 0) {
          piece.set_grad(mean.slice_rows(p.at, p.at + p.end - p.begin).to(bucket.dtype));
        } else if (options_.zero_fill) {
          piece.set_grad(zeros({p.end - p.begin}, bucket.dtype, piece.data().device()));
        }
        shards_.emplace_back(shard_name(p), piece);
      }
    }
    return true;
  }

  std::string shard_name(const StripePiece& p) const {
    return detail::concat(plan_->params()[p.param].first, "[", p.begin, ":", p.end, "]");
  }
  // This rank's slice of a parameter: a view of its memory, updated in place.
  Variable shard_variable(const StripePiece& p) const {
    if (options_.zero == 3) return Variable(local_[plan_->bucket_of(p.param)].slice_rows(p.at, p.at + p.end - p.begin));
    return Variable(param_flat(p.param).slice_rows(p.begin, p.end));
  }

  // zero = 3 -----------------------------------------------------------------------------------
  // This rank's stripe of bucket b, from the parameters' values.
  Tensor take_stripe(std::size_t b) const {
    const GradientBucket& bucket = plan_->buckets()[b];
    const Device device = plan_->params()[bucket.params.front()].second.data().device();
    Tensor mine = zeros({bucket.stripe_data}, bucket.dtype, device);
    for (const StripePiece& p : plan_->stripe_pieces(bucket, comm_->rank()))
      mine.slice_rows(p.at, p.at + p.end - p.begin).copy_(param_flat(p.param).slice_rows(p.begin, p.end));
    return mine;
  }
  void release_bucket(std::size_t b) {
    for (std::size_t i : plan_->buckets()[b].params) plan_->params()[i].second.data().storage()->release();
  }
  // Gives bucket b's parameters their memory back, filled from every rank's stripe (collective).
  void fill_bucket(std::size_t b) {
    const GradientBucket& bucket = plan_->buckets()[b];
    Tensor all;  // every rank's stripe, back to back
    if (prefetch_ && prefetch_bucket_ == b) {
      all = prefetch_->wait();
      prefetch_.reset();
    } else {
      all = gather_comm_->start_allgather(local_[b], bucket.digest, kGatherOperation)->wait();
    }
    for (std::size_t i : bucket.params) plan_->params()[i].second.data().storage()->restore();
    for (int s = 0; s < comm_->size(); ++s) {
      const Tensor theirs = all.slice_rows(s * bucket.stripe_data, (s + 1) * bucket.stripe_data).to(local_[b].device());
      for (const StripePiece& p : plan_->stripe_pieces(bucket, s))
        param_flat(p.param).slice_rows(p.begin, p.end).copy_(theirs.slice_rows(p.at, p.at + p.end - p.begin));
    }
  }

  // The gathers follow one order on every rank, whatever each rank's model reads: a pass (a
  // forward, or a backward) gathers the links in the order they run (forward: registration
  // order; backward: the reverse), each once. A function that reads link b gathers every link
  // from the pass's cursor up to b (those it skips still travel: another rank may read them),
  // and the pass's end gathers the rest. At most kKept links stay gathered (the last ones
  // gathered: the same set on every rank); one read again after it was freed starts a new pass.
  static constexpr std::size_t kKept = 2;

  std::size_t pass_position(std::size_t b) const {
    return backward_pass_ ? b : plan_->buckets().size() - 1 - b;
  }
  std::size_t pass_bucket(std::size_t position) const {
    return backward_pass_ ? position : plan_->buckets().size() - 1 - position;
  }
  bool is_materialized(std::size_t b) const {
    return std::find(materialized_.begin(), materialized_.end(), b) != materialized_.end();
  }

  void demand(std::size_t b) {
    if (gathered_in_pass_[b]) {
      if (is_materialized(b)) return;
      finish_pass();  // read again after it was freed: the rest of this pass, then a new one
    }
    const std::size_t target = pass_position(b);
    while (cursor_ <= target) gather_next();
  }

  void gather_next() {
    const std::size_t b = pass_bucket(cursor_++);
    gathered_in_pass_[b] = true;
    // Still gathered from before (the last links of a forward are the first of its backward):
    // the same on every rank, so no rank communicates for it.
    auto it = std::find(materialized_.begin(), materialized_.end(), b);
    if (it != materialized_.end()) {
      materialized_.erase(it);
    } else {
      fill_bucket(b);
    }
    materialized_.push_back(b);
    while (materialized_.size() > kKept) {
      release_bucket(materialized_.front());
      materialized_.pop_front();
    }
    // prefetch: the pass's next link starts travelling now, while this one computes, unless it
    // is still gathered (then its turn costs nothing). Every rank decides alike: the pass, the
    // cursor and the gathered links are the same on every rank.
    if (options_.prefetch && !prefetch_ && cursor_ < plan_->buckets().size()) {
      const std::size_t next = pass_bucket(cursor_);
      if (!is_materialized(next)) {
        prefetch_ = gather_comm_->start_allgather(local_[next], plan_->buckets()[next].digest, kGatherOperation);
        prefetch_bucket_ = next;
      }
    }
  }

  // A prefetch that will not be used (the pass was reset: an update, a snapshot) completes and
  // is dropped, on every rank alike; its values would be stale.
  void drop_prefetch() {
    if (!prefetch_) return;
    prefetch_->wait();
    prefetch_.reset();
  }

  void finish_pass() {
    while (cursor_ < plan_->buckets().size()) gather_next();
    cursor_ = 0;
    std::fill(gathered_in_pass_.begin(), gathered_in_pass_.end(), false);
  }

  void switch_pass(bool backward) {
    finish_pass();
    backward_pass_ = backward;
    if (!backward) {  // the end of a step's backward: nothing stays gathered
      for (std::size_t b : materialized_) release_bucket(b);
      materialized_.clear();
    }
  }

  void reset_passes() {
    drop_prefetch();
    materialized_.clear();
    cursor_ = 0;
    backward_pass_ = false;
    gathered_in_pass_.assign(plan_->buckets().size(), false);
  }
  void make_shards() {
    shards_.clear();
    for (const GradientBucket& bucket : plan_->buckets())
      for (const StripePiece& p : plan_->stripe_pieces(bucket, comm_->rank()))
        shards_.emplace_back(shard_name(p), shard_variable(p));
  }

  void check_census(const std::vector<GradientBucket>& buckets, const std::vector<std::vector<double>>& tails) const {
    const int ranks = comm_->size();
    const std::size_t k0 = buckets.front().params.size();
    std::vector<int> idle, busy;
    std::vector<double> slots;
    for (int r = 0; r < ranks; ++r) {
      const double slot = tails.front()[k0 + r];
      slots.push_back(slot);
      (slot == 0 ? idle : busy).push_back(r);
    }
    if (!idle.empty()) {
      const std::string at =
          busy.empty() ? std::string() : detail::concat(" #", static_cast<std::int64_t>(slots[busy.front()]) - 1);
      TANDEM_FAIL("create_multi_node_optimizer: at data-parallel update", at, " ", dp_detail::ranks_str(idle),
                  " ran no backward since the last update, while ",
                  busy.empty() ? std::string("no rank") : dp_detail::ranks_str(busy),
                  " did; every rank runs forward and backward before update in a data-parallel step (a rank "
                  "without data for a step still runs backward, e.g. of a zero loss); no gradient was averaged");
    }
    for (int r = 1; r < ranks; ++r) {
      if (slots[r] == slots[0]) continue;
      std::string list;
      for (int q = 0; q < ranks; ++q)
        list += detail::concat(q ? ", " : "", "rank ", q, " at #", static_cast<std::int64_t>(slots[q]) - 1);
      TANDEM_FAIL("create_multi_node_optimizer: the ranks are at different data-parallel updates (", list,
                  ", counted modulo ", census_step_modulus(buckets.front().dtype),
                  "): a rank skipped a step or ran an extra one; no gradient "
                  "was averaged");
    }
    std::string nonfinite;
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      const std::size_t k = buckets[b].params.size();
      for (int r = 0; r < ranks; ++r) {
        const double j = tails[b][k + ranks + r];
        if (j == 0) continue;
        const auto& [name, param] = plan_->params()[buckets[b].params[static_cast<std::size_t>(j) - 1]];
        nonfinite += detail::concat(nonfinite.empty() ? "" : "; ", "rank ", r, " has a NaN/Inf gradient in '", name,
                                    "' (", dtype_name(param.dtype()), shape_str(param.shape()), ")");
      }
    }
    TANDEM_CHECK(nonfinite.empty(), "check_finite: create_multi_node_optimizer: ", nonfinite,
                 "; no parameter was updated");
  }

  std::weak_ptr<Optimizer> optimizer_;
  CommunicatorPtr comm_;
  CommunicatorPtr gather_comm_;
  DataParallelOptions options_;
  bool overlap_ = true;
  BackgroundProgressWindow progress_window_;
  std::unique_ptr<GradientPlan> plan_;
  std::unordered_map<const VariableNode*, std::size_t> node_index_;
  bool verified_ = false;        // the replicas were found equal (or made so) for this plan
  bool skip_first_update_ = false;  // zero = 3 broadcast at setup: the first update is skipped
  std::int64_t step_ = 0;        // updates (or skipped updates) so far
  bool ran_backward_ = false;    // a backward ran since the last update
  bool in_backward_ = false;     // a backward that starts buckets is running
  bool touched_ = false;         // ... and has finished one of this plan's gradients
  std::vector<std::size_t> ready_;  // per bucket: its gradients finished in this backward
  std::size_t next_launch_ = 0;  // buckets start in order: the next one to start
  // The order the plan's gradients became ready in this step's syncing backward passes, until
  // fix_bucket_order has used it (reorders()).
  bool order_fixed_ = false;
  std::vector<std::size_t> ready_order_;
  std::vector<bool> ready_seen_;
  std::vector<Flight> flights_;  // this step's
  std::vector<std::vector<Flight>> earlier_;  // sharded: this step's earlier rounds (see backward_started)
  std::vector<Flight> previous_;  // double buffering: the last step's, still travelling
  NamedParams shards_;           // zero >= 1: this rank's slices, with their averaged gradients
  // zero = 3: this rank's stripe of each bucket (the parameters' only lasting copy), the buckets
  // gathered now (oldest first), and the pass.
  std::vector<Tensor> local_;
  std::deque<std::size_t> materialized_;
  std::vector<bool> gathered_in_pass_;
  std::size_t cursor_ = 0;
  bool backward_pass_ = false;
  // The next link's gather, started at the previous one's (gather_next), and its bucket.
  std::unique_ptr<PendingCollective> prefetch_;
  std::size_t prefetch_bucket_ = 0;
  std::shared_ptr<void> registration_;  // last: unregisters first
};

}  // namespace

std::shared_ptr<void> gather_parameters(Optimizer& optimizer) {
  if (!optimizer.gradient_sync() || !optimizer.has_target()) return nullptr;
  return optimizer.gradient_sync()->gather_parameters(*optimizer.target());
}

std::vector<std::vector<std::string>> data_parallel_buckets(Optimizer& optimizer) {
  auto* sync = dynamic_cast<DataParallelSync*>(optimizer.gradient_sync().get());
  return sync ? sync->bucket_names() : std::vector<std::vector<std::string>>{};
}

void install_data_parallel_sync(const std::shared_ptr<Optimizer>& optimizer, CommunicatorPtr comm,
                                const DataParallelOptions& options) {
  TANDEM_CHECK(optimizer && comm, "create_multi_node_optimizer: an optimizer and a communicator are required");
  TANDEM_CHECK(!optimizer->gradient_sync(), "create_multi_node_optimizer: this ", optimizer->type_name(),
               " already has a gradient sync (wrapped twice?)");
  optimizer->set_gradient_sync(std::make_shared<DataParallelSync>(optimizer, std::move(comm), options));
}

}  // namespace tandem

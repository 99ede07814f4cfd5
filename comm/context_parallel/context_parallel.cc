#include "comm/context_parallel/context_parallel.h"

#include <cmath>
#include <utility>

#include "autograd/functions/arithmetic.h"
#include "autograd/functions/array.h"
#include "autograd/functions/reduction.h"
#include "autograd/grad_mode.h"
#include "comm/context_parallel/ring_attention.h"
#include "comm/functions/collectives.h"
#include "comm/tensor_parallel/parallel_transformer.h"
#include "core/error.h"
#include "layers/links/multi_head_attention.h"

namespace tandem {

namespace {

// Heads [H j / n, H (j + 1) / n) for rank j of n: any H over any n (a rank may get none).
std::pair<std::int64_t, std::int64_t> head_share(std::int64_t heads, int j, int n) {
  return {heads * j / n, heads * (j + 1) / n};
}

// Heads [begin, end) of x [B, H, T, x] (axis 1).
Variable heads_of(const Variable& x, std::int64_t begin, std::int64_t end) {
  return functions::split_axis(x, std::vector<std::int64_t>{begin, end}, 1)[1];
}

}  // namespace

ContextParallel::ContextParallel(std::shared_ptr<Communicator> comm, SequenceLayout layout, int ulysses_ranks)
    : comm_(std::move(comm)), layout_(std::move(layout)), ring_layout_(layout_), ulysses_ranks_(ulysses_ranks) {
  TANDEM_CHECK(comm_ != nullptr, "ContextParallel: needs a communicator");
  const int R = comm_->size(), r = comm_->rank();
  TANDEM_CHECK(layout_.ranks() == R, "ContextParallel: the layout splits the sequence over ", layout_.ranks(),
               " ranks but the communicator has ", R);
  TANDEM_CHECK(ulysses_ranks_ >= 1 && R % ulysses_ranks_ == 0, "ContextParallel: all-to-all groups of ", ulysses_ranks_,
               " ranks must divide the ", R, " ranks");
  ulysses_comm_ = comm_->split(r / ulysses_ranks_, r);
  ring_comm_ = comm_->split(r % ulysses_ranks_, r);
  ring_layout_ = layout_.grouped(ulysses_ranks_);
}

Variable ContextParallel::shard(const Variable& x, std::int64_t axis) const {
  return layout_.shard(x, comm_->rank(), axis);
}

Variable ContextParallel::unshard(const Variable& local, std::int64_t axis) const {
  return layout_.unshard(functions::allgather(*comm_, local), axis);
}

Variable ContextParallel::attention(const Variable& q, const Variable& k, const Variable& v,
                                    const functions::AttentionOptions& options) const {
  const char* op = "ContextParallel::attention";
  TANDEM_CHECK(q.defined() && k.defined() && v.defined() && q.dim() == 4 && k.dim() == 4 && v.dim() == 4, op,
               ": q [B, Hq, T_r, d], k [B, Hkv, T_r, d] and v [B, Hkv, T_r, dv] must have 4 axes");
  const std::int64_t mine = layout_.local_length(comm_->rank());
  TANDEM_CHECK(q.shape()[2] == mine && k.shape()[2] == mine && v.shape()[2] == mine, op, ": rank ", comm_->rank(),
               " holds ", mine, " positions of the sequence, so q, k and v must be [B, H, ", mine, ", d], got q ",
               q.description(), ", k ", k.description(), ", v ", v.description());
  const AttentionMask& mask = options.mask;
  TANDEM_CHECK(mask.query_start == -1 && mask.key_start == 0, op,
               ": query_start and key_start come from the layout; leave them at their defaults");
  const std::int64_t B = q.shape()[0], Hq = q.shape()[1], Hkv = k.shape()[1], d = q.shape()[3];
  TANDEM_CHECK(Hkv > 0 && Hq % Hkv == 0, op, ": q's heads (q ", q.description(),
               ") must be a multiple of k's and v's (k ", k.description(), ")");
  if (mask.query_segments.defined() || mask.key_segments.defined())
    TANDEM_CHECK(mask.query_segments.defined() && mask.key_segments.defined() &&
                     mask.query_segments.shape() == Shape({B, layout_.length()}) &&
                     mask.key_segments.shape() == Shape({B, layout_.length()}),
                 op, ": segment ids must be given for the whole sequence, [B, T] = [", B, ", ", layout_.length(),
                 "], on every rank; got ",
                 mask.query_segments.defined() ? mask.query_segments.description() : std::string("none"), " and ",
                 mask.key_segments.defined() ? mask.key_segments.description() : std::string("none"));
  if (mask.query_segments.defined())
    for (const Tensor* ids : {&mask.query_segments, &mask.key_segments})
      TANDEM_CHECK(ids->dtype() == DType::i32 || ids->dtype() == DType::i64, op,
                   ": segment ids must be i32 or i64, got ", ids->description());
  // What the fused calls would refuse, refused here, before anything is sent.
  TANDEM_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype() && k.device() == q.device() &&
                   v.device() == q.device(),
               op, ": q, k and v must be floating, of one dtype, on one device; got q ", q.description(), ", k ",
               k.description(), ", v ", v.description());
  TANDEM_CHECK(k.shape()[3] == d && v.shape()[1] == Hkv && q.shape()[0] == k.shape()[0] && v.shape()[0] == B, op,
               ": q [B, Hq, T_r, d], k [B, Hkv, T_r, d] and v [B, Hkv, T_r, dv] disagree: q ", q.description(), ", k ",
               k.description(), ", v ", v.description());
  TANDEM_CHECK(mask.window >= 0, op, ": the window must be >= 0 (0: none), got ", mask.window);
  TANDEM_CHECK(options.scale >= 0 && options.dropout >= 0 && options.dropout < 1, op,
               ": the scale must be >= 0 (0: 1 / sqrt(d)) and the dropout ratio in [0, 1)");
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(static_cast<double>(d));
  AttentionDropout dropout;
  dropout.head_offset = options.head_offset;
  if (train_mode() && options.dropout > 0) {
    dropout.ratio = options.dropout;
    dropout.seed = (options.generator ? *options.generator : global_generator()).next();
  }
  const int U = ulysses_ranks_, u = ulysses_comm_->rank();
  if (U == 1) return functions::ring_attention(*ring_comm_, ring_layout_, q, k, v, mask, scale, dropout);

  // All-to-all: heads out, the group's positions in (rank order: the ring layout's runs).
  const std::int64_t group = Hq / Hkv;
  Variables qs, ks, vs;
  for (int j = 0; j < U; ++j) {
    const auto [h0, h1] = head_share(Hq, j, U);
    const std::int64_t k0 = h1 > h0 ? h0 / group : 0, k1 = h1 > h0 ? (h1 - 1) / group + 1 : 0;
    qs.push_back(heads_of(q, h0, h1));
    ks.push_back(heads_of(k, k0, k1));
    vs.push_back(heads_of(v, k0, k1));
  }
  const Variable qu = functions::concat(functions::alltoall(*ulysses_comm_, qs), 2);
  const Variable ku = functions::concat(functions::alltoall(*ulysses_comm_, ks), 2);
  const Variable vu = functions::concat(functions::alltoall(*ulysses_comm_, vs), 2);
  const auto [h0, h1] = head_share(Hq, u, U);
  Variable out;
  if (h1 > h0) {
    // This rank's query heads start at h0, its key/value heads at h0 / group: the local groups
    // line up when the share starts on a group boundary; otherwise pad nothing, re-index: query
    // head h reads key/value head h / group - h0 / group.
    AttentionMask local_mask = mask;
    AttentionDropout local_dropout = dropout;
    local_dropout.head_offset += h0;
    const std::int64_t first_kv = h0 / group;
    if (h0 % group == 0 && (h1 - h0) % group == 0) {
      out = functions::ring_attention(*ring_comm_, ring_layout_, qu, ku, vu, local_mask, scale, local_dropout);
    } else {
      // A share that cuts a group: one call per key/value head, with its query heads.
      Variables parts;
      for (std::int64_t h = h0; h < h1;) {
        const std::int64_t kv = h / group, end = std::min(h1, (kv + 1) * group);
        AttentionDropout part_dropout = local_dropout;
        part_dropout.head_offset = dropout.head_offset + h;
        parts.push_back(functions::ring_attention(
            *ring_comm_, ring_layout_, heads_of(qu, h - h0, end - h0), heads_of(ku, kv - first_kv, kv - first_kv + 1),
            heads_of(vu, kv - first_kv, kv - first_kv + 1), local_mask, scale, part_dropout));
        h = end;
      }
      out = parts.size() == 1 ? parts[0] : functions::concat(parts, 1);
    }
  } else {
    // No heads here: an empty output that still depends on qu, ku and vu, so that backward runs
    // their all-to-alls on this rank too (its peers wait for them).
    out = functions::add(vu, functions::add(functions::sum(qu), functions::sum(ku)));
  }
  // Back: each group rank's positions to it, every rank's heads here.
  std::vector<std::int64_t> cuts;
  std::int64_t at = 0;
  const int first = comm_->rank() - u;
  for (int j = 0; j + 1 < U; ++j) cuts.push_back(at += layout_.local_length(first + j));
  const Variables pieces = U > 1 ? functions::split_axis(out, cuts, 2) : Variables{out};
  return functions::concat(functions::alltoall(*ulysses_comm_, pieces), 1);
}

void attend_through(std::shared_ptr<ContextParallel> cp, const std::vector<LinkPtr>& blocks) {
  TANDEM_CHECK(cp != nullptr, "attend_through: needs a ContextParallel");
  const functions::AttentionFunction attend = [cp](const Variable& q, const Variable& k, const Variable& v,
                                                   const functions::AttentionOptions& options) {
    return cp->attention(q, k, v, options);
  };
  for (const LinkPtr& block : blocks) {
    const auto* chain = dynamic_cast<const Chain*>(block.get());
    const LinkPtr attention = chain ? chain->child("attention") : nullptr;
    if (auto single = std::dynamic_pointer_cast<MultiHeadSelfAttention>(attention)) single->set_attention(attend);
    else if (auto parallel = std::dynamic_pointer_cast<ParallelSelfAttention>(attention))
      parallel->set_attention(attend);
    else
      TANDEM_FAIL(
          "attend_through: context parallelism needs a block whose child \"attention\" is a "
          "MultiHeadSelfAttention or ParallelSelfAttention; got a ",
          attention ? attention->type_name() : block->type_name());
  }
}

}  // namespace tandem

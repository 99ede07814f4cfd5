// The CPU backend's fused attention (semantics: core/ops/attention.h): FlashAttention-2's
// algorithm on tiles of kTileQ queries by kTileK keys. Forward keeps per query a running maximum,
// sum and output, rescaled as each tile of keys arrives (the online softmax), and writes out and
// the log-sum-exp; backward recomputes each tile's weights from q, k and that log-sum-exp. The
// products are cpu::gemm calls on tiles, which stay in cache; no [Tq, Tk] matrix exists.
//
// Forward runs (batch, query head, query tile) tasks in parallel; backward runs (batch, key/value
// head) tasks, each owning its gradients of k and v (the query heads of a group add into them) and
// its query heads' gradients of q, so no two tasks write one element. Every element's sums run in
// one fixed order, whatever the thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "core/attention_dropout.h"
#include "core/cpu/cpu_backend.h"
#include "core/cpu/gemm.h"
#include "core/cpu/ieee_exp.h"
#include "core/cpu/parallel.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {

constexpr std::int64_t kTileQ = 64;
constexpr std::int64_t kTileK = 128;

template <typename T>
using ArrayMap = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using ConstArrayMap = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;

// The mask of one (batch row, ...) of a problem: which keys a query sees.
class Visibility {
 public:
  Visibility(const AttentionGeometry& g, std::int64_t batch)
      : g_(g),
        qseg_(g.query_segments ? g.query_segments->data<std::int64_t>() + batch * g.tq : nullptr),
        kseg_(g.key_segments ? g.key_segments->data<std::int64_t>() + batch * g.tk : nullptr) {}

  bool sees(std::int64_t i, std::int64_t j) const {
    const std::int64_t p = g_.query_start + i, s = g_.key_start + j;
    if (g_.causal && s > p) return false;
    if (g_.window > 0 && (p - s >= g_.window || (!g_.causal && s - p >= g_.window))) return false;
    return !qseg_ || qseg_[i] == kseg_[j];
  }

  // The keys [begin, end) that queries [i0, i1) may see by position (segments aside).
  void key_range(std::int64_t i0, std::int64_t i1, std::int64_t& begin, std::int64_t& end) const {
    const std::int64_t p0 = g_.query_start + i0, p1 = g_.query_start + i1 - 1;
    std::int64_t lo = 0, hi = g_.tk;  // key indices
    if (g_.causal) hi = std::min(hi, p1 - g_.key_start + 1);
    if (g_.window > 0) {
      lo = std::max(lo, p0 - g_.window + 1 - g_.key_start);
      if (!g_.causal) hi = std::min(hi, p1 + g_.window - g_.key_start);
    }
    begin = std::min(lo, g_.tk);
    end = std::max(begin, hi);
  }

  // Whether every query of [i0, i1) sees every key of [j0, j1): no mask to apply on the tile.
  bool sees_all(std::int64_t i0, std::int64_t i1, std::int64_t j0, std::int64_t j1) const {
    if (qseg_) return false;
    const std::int64_t p0 = g_.query_start + i0, p1 = g_.query_start + i1 - 1;
    const std::int64_t s0 = g_.key_start + j0, s1 = g_.key_start + j1 - 1;
    if (g_.causal && s1 > p0) return false;
    if (g_.window > 0 && (p1 - s0 >= g_.window || (!g_.causal && s1 - p0 >= g_.window))) return false;
    return true;
  }

 private:
  const AttentionGeometry& g_;
  const std::int64_t* qseg_;
  const std::int64_t* kseg_;
};

// exp over n values in place (IEEE's underflow: -inf gives exactly 0).
template <typename T>
void exp_in_place(T* x, std::int64_t n) {
  ArrayMap<T> out(x, n);
  cpu::exp_chunk(ConstArrayMap<T>(x, n), out, x, n);
}

// Dropout's factors for a tile [rows, cols] of weights: 1 / (1 - ratio) where a weight is kept, 0
// where it is dropped.
template <typename T>
void dropout_factors(const AttentionGeometry& g, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t j0,
                     std::int64_t rows, std::int64_t cols, T* factors) {
  const T keep_scale = T(1 / (1 - g.dropout));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      factors[r * cols + c] = attention_dropout_uniform(g.seed, b, g.head_offset + h, g.query_start + i0 + r,
                                                        g.key_start + j0 + c) >= g.dropout
                                  ? keep_scale
                                  : T(0);
}

// Scores of a tile, scaled and masked in place: -inf where a query does not see a key.
template <typename T>
void scale_and_mask(const Visibility& vis, std::int64_t i0, std::int64_t j0, std::int64_t rows, std::int64_t cols,
                    T scale, T* tile) {
  if (vis.sees_all(i0, i0 + rows, j0, j0 + cols)) {
    ArrayMap<T>(tile, rows * cols) *= scale;
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      tile[r * cols + c] = vis.sees(i0 + r, j0 + c) ? tile[r * cols + c] * scale : -std::numeric_limits<T>::infinity();
}

template <typename T>
void forward(const AttentionGeometry& g, const T* q, const T* k, const T* v, T* out, T* lse) {
  const std::int64_t group = g.query_heads / g.kv_heads, tiles = (g.tq + kTileQ - 1) / kTileQ;
  const std::int64_t tasks = g.batch * g.query_heads * tiles;
  const T scale = static_cast<T>(g.scale), inf = std::numeric_limits<T>::infinity();
  cpu::parallel_chunks(
      tasks, kTileQ * g.tk * (g.d + g.dv), cpu::kElementwiseGrain, [&](std::int64_t begin, std::int64_t end, int) {
        const cpu::SerialLibraryCalls serial;  // the same sums at any thread count
        std::vector<T> scores(kTileQ * kTileK), factors(g.dropout > 0 ? kTileQ * kTileK : 0), acc(kTileQ * g.dv),
            top(kTileQ), total(kTileQ), rescale(kTileQ);
        for (std::int64_t task = begin; task < end; ++task) {
          const std::int64_t tile = task % tiles, h = task / tiles % g.query_heads, b = task / tiles / g.query_heads;
          const std::int64_t i0 = tile * kTileQ, rows = std::min(kTileQ, g.tq - i0);
          const std::int64_t hk = h / group;
          const T* Q = q + ((b * g.query_heads + h) * g.tq + i0) * g.d;
          const T* K = k + (b * g.kv_heads + hk) * g.tk * g.d;
          const T* V = v + (b * g.kv_heads + hk) * g.tk * g.dv;
          const Visibility vis(g, b);
          std::fill(top.begin(), top.end(), -inf);
          std::fill(total.begin(), total.end(), T(0));
          std::fill(acc.begin(), acc.end(), T(0));
          std::int64_t key_begin = 0, key_end = 0;
          vis.key_range(i0, i0 + rows, key_begin, key_end);
          for (std::int64_t j0 = key_begin; j0 < key_end; j0 += kTileK) {
            const std::int64_t cols = std::min(kTileK, key_end - j0);
            T* S = scores.data();
            cpu::gemm(Q, K + j0 * g.d, S, rows, cols, g.d, false, true, false);
            scale_and_mask(vis, i0, j0, rows, cols, scale, S);
            for (std::int64_t r = 0; r < rows; ++r) {
              T* row = S + r * cols;
              const T m = std::max(top[r], ConstArrayMap<T>(row, cols).maxCoeff());
              if (m == -inf) {  // nothing visible yet: the row's weights are 0
                std::fill(row, row + cols, T(0));
                rescale[r] = T(1);
                continue;
              }
              rescale[r] = std::exp(top[r] - m);  // 0 while top is -inf
              top[r] = m;
              ArrayMap<T>(row, cols) -= m;
              exp_in_place(row, cols);
              total[r] = total[r] * rescale[r] + ConstArrayMap<T>(row, cols).sum();
            }
            for (std::int64_t r = 0; r < rows; ++r)
              if (rescale[r] != T(1)) ArrayMap<T>(acc.data() + r * g.dv, g.dv) *= rescale[r];
            if (g.dropout > 0) {
              dropout_factors(g, b, h, i0, j0, rows, cols, factors.data());
              ArrayMap<T>(S, rows * cols) *= ConstArrayMap<T>(factors.data(), rows * cols);
            }
            cpu::gemm(S, V + j0 * g.dv, acc.data(), rows, g.dv, cols, false, false, true);
          }
          T* O = out + ((b * g.query_heads + h) * g.tq + i0) * g.dv;
          T* L = lse + (b * g.query_heads + h) * g.tq + i0;
          for (std::int64_t r = 0; r < rows; ++r) {
            if (total[r] == T(0)) {
              std::fill(O + r * g.dv, O + (r + 1) * g.dv, T(0));
              L[r] = -inf;
              continue;
            }
            ArrayMap<T>(O + r * g.dv, g.dv) = ConstArrayMap<T>(acc.data() + r * g.dv, g.dv) / total[r];
            L[r] = top[r] + std::log(total[r]);
          }
        }
      });
}

template <typename T>
void backward(const AttentionGeometry& g, const T* q, const T* k, const T* v, const T* out, const T* lse, const T* gout,
              T* gq, T* gk, T* gv) {
  const std::int64_t group = g.query_heads / g.kv_heads, tasks = g.batch * g.kv_heads;
  const T scale = static_cast<T>(g.scale), inf = std::numeric_limits<T>::infinity();
  cpu::parallel_chunks(
      tasks, group * g.tq * g.tk * (g.d + g.dv), cpu::kElementwiseGrain,
      [&](std::int64_t begin, std::int64_t end, int) {
        const cpu::SerialLibraryCalls serial;  // the same sums at any thread count
        std::vector<T> weights(kTileQ * kTileK), dweights(kTileQ * kTileK), delta(kTileQ);
        std::vector<T> factors(g.dropout > 0 ? kTileQ * kTileK : 0), dropped(g.dropout > 0 ? kTileQ * kTileK : 0);
        for (std::int64_t task = begin; task < end; ++task) {
          const std::int64_t hk = task % g.kv_heads, b = task / g.kv_heads;
          const T* K = k + (b * g.kv_heads + hk) * g.tk * g.d;
          const T* V = v + (b * g.kv_heads + hk) * g.tk * g.dv;
          T* GK = gk + (b * g.kv_heads + hk) * g.tk * g.d;
          T* GV = gv + (b * g.kv_heads + hk) * g.tk * g.dv;
          std::fill(GK, GK + g.tk * g.d, T(0));
          std::fill(GV, GV + g.tk * g.dv, T(0));
          const Visibility vis(g, b);
          for (std::int64_t h = hk * group; h < (hk + 1) * group; ++h) {
            const std::int64_t head = (b * g.query_heads + h) * g.tq;
            std::fill(gq + head * g.d, gq + (head + g.tq) * g.d, T(0));
            for (std::int64_t i0 = 0; i0 < g.tq; i0 += kTileQ) {
              const std::int64_t rows = std::min(kTileQ, g.tq - i0);
              const T* Q = q + (head + i0) * g.d;
              const T* GO = gout + (head + i0) * g.dv;
              const T* L = lse + head + i0;
              T* GQ = gq + (head + i0) * g.d;
              // D = rowsum(gout * out): the softmax backward's row term (rowsum(P * dP) with dropout too).
              for (std::int64_t r = 0; r < rows; ++r)
                delta[r] =
                    (ConstArrayMap<T>(GO + r * g.dv, g.dv) * ConstArrayMap<T>(out + (head + i0 + r) * g.dv, g.dv))
                        .sum();
              std::int64_t key_begin = 0, key_end = 0;
              vis.key_range(i0, i0 + rows, key_begin, key_end);
              for (std::int64_t j0 = key_begin; j0 < key_end; j0 += kTileK) {
                const std::int64_t cols = std::min(kTileK, key_end - j0);
                T* P = weights.data();
                T* dP = dweights.data();
                cpu::gemm(Q, K + j0 * g.d, P, rows, cols, g.d, false, true, false);
                scale_and_mask(vis, i0, j0, rows, cols, scale, P);
                // P = exp(s - lse); masked entries are -inf and give 0, and a row that sees no key
                // has every entry masked.
                for (std::int64_t r = 0; r < rows; ++r) {
                  T* row = P + r * cols;
                  if (L[r] == -inf) {
                    std::fill(row, row + cols, T(0));
                    continue;
                  }
                  ArrayMap<T>(row, cols) -= L[r];
                  exp_in_place(row, cols);
                }
                // dP = gout v^T (the dropped weights' gradient), then through dropout.
                cpu::gemm(GO, V + j0 * g.dv, dP, rows, cols, g.dv, false, true, false);
                if (g.dropout > 0) {
                  // gv += (dropped P)^T gout; dP through dropout.
                  const std::int64_t n = rows * cols;
                  dropout_factors(g, b, h, i0, j0, rows, cols, factors.data());
                  ArrayMap<T>(dropped.data(), n) = ConstArrayMap<T>(P, n) * ConstArrayMap<T>(factors.data(), n);
                  cpu::gemm(dropped.data(), GO, GV + j0 * g.dv, cols, g.dv, rows, true, false, true);
                  ArrayMap<T>(dP, n) *= ConstArrayMap<T>(factors.data(), n);
                } else {
                  cpu::gemm(P, GO, GV + j0 * g.dv, cols, g.dv, rows, true, false, true);  // gv += P^T gout
                }
                // dS = P * (dP - D) * scale, into dP.
                for (std::int64_t r = 0; r < rows; ++r)
                  ArrayMap<T>(dP + r * cols, cols) =
                      ConstArrayMap<T>(P + r * cols, cols) * (ConstArrayMap<T>(dP + r * cols, cols) - delta[r]) * scale;
                cpu::gemm(dP, K + j0 * g.d, GQ, rows, g.d, cols, false, false, true);
                cpu::gemm(dP, Q, GK + j0 * g.d, cols, g.d, rows, true, false, true);
              }
            }
          }
        }
      });
}

}  // namespace

bool CpuBackend::runs_fused_attention(DType dtype) const { return dtype == DType::f32 || dtype == DType::f64; }

void CpuBackend::attention_forward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                   Tensor& out, Tensor& lse) {
  if (q.dtype() == DType::f64)
    forward(g, q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(), lse.data<double>());
  else if (q.dtype() == DType::f32)
    forward(g, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>());
  else Backend::attention_forward(g, q, k, v, out, lse);
}

void CpuBackend::attention_backward(const AttentionGeometry& g, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& gout, Tensor& gq, Tensor& gk,
                                    Tensor& gv) {
  if (q.dtype() == DType::f64)
    backward(g, q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(), lse.data<double>(),
             gout.data<double>(), gq.data<double>(), gk.data<double>(), gv.data<double>());
  else if (q.dtype() == DType::f32)
    backward(g, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(),
             gout.data<float>(), gq.data<float>(), gk.data<float>(), gv.data<float>());
  else Backend::attention_backward(g, q, k, v, out, lse, gout, gq, gk, gv);
}

}  // namespace tandem

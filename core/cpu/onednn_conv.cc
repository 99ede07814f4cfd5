#include "core/cpu/onednn_conv.h"

#include "core/error.h"

#ifdef TANDEM_HAS_DNNL
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cpu/onednn.h"
#include "core/hash.h"
#endif

namespace tandem {
namespace cpu {

#ifdef TANDEM_HAS_DNNL
namespace {

using dnnl::memory;
using tag = memory::format_tag;

// oneDNN's view of a geometry. Its right padding is implied by tandem's output size, which may
// drop trailing input (floor) or add a window (Chainer's cover_all).
struct ConvDims {
  memory::dims src, weights, bias, dst, strides, dilates, pad_l, pad_r;
  bool grouped;
  memory::data_type type;  // every operand's: f32, or bf16 (sums in f32, each result rounded once)
  bool ok = true;

  ConvDims(const Conv2DGeometry& g, std::int64_t O, std::int64_t G, DType dtype)
      : grouped(G > 1), type(dtype == DType::bf16 ? memory::data_type::bf16 : memory::data_type::f32) {
    src = {g.batch, g.channels, g.height, g.width};
    weights = grouped ? memory::dims{G, O / G, g.channels / G, g.kernel_h, g.kernel_w}
                      : memory::dims{O, g.channels, g.kernel_h, g.kernel_w};
    bias = {O};
    dst = {g.batch, O, g.out_h, g.out_w};
    strides = {g.stride_y, g.stride_x};
    dilates = {g.dilate_y - 1, g.dilate_x - 1};  // oneDNN counts the gaps: 0 is a dense window
    pad_l = {g.pad_y, g.pad_x};
    pad_r = {right_pad(g.height, g.kernel_h, g.stride_y, g.dilate_y, g.pad_y, g.out_h),
             right_pad(g.width, g.kernel_w, g.stride_x, g.dilate_x, g.pad_x, g.out_w)};
  }

  std::int64_t right_pad(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t d, std::int64_t pl,
                         std::int64_t out) {
    const std::int64_t extent = (k - 1) * d + 1;
    const std::int64_t pr = (out - 1) * s + extent - in - pl;
    if (pr >= 0) return pr;
    // The last window ends before the input does: no right padding gives the same output size.
    if ((in + pl - extent) / s + 1 != out) ok = false;
    return 0;
  }

  memory::desc any(const memory::dims& dims) const { return memory::desc(dims, type, tag::any); }
  memory::desc plain_src() const { return memory::desc(src, type, tag::nchw); }
  memory::desc plain_dst() const { return memory::desc(dst, type, tag::nchw); }
  memory::desc plain_weights() const { return memory::desc(weights, type, grouped ? tag::goihw : tag::oihw); }
  memory::desc plain_bias() const { return memory::desc(bias, type, tag::x); }
};

// Every primitive brings its own scratchpad (core/cpu/onednn.h).
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// The same, with ReLU applied to the output inside the primitive (max(y, 0): alpha = 0).
dnnl::primitive_attr user_scratchpad_relu() {
  dnnl::primitive_attr attr = user_scratchpad();
  dnnl::post_ops ops;
#if DNNL_VERSION_MAJOR >= 3
  ops.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
#else
  ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
#endif
  attr.set_post_ops(ops);
  return attr;
}

dnnl::convolution_forward::primitive_desc make_forward(const ConvDims& d, bool with_bias, bool relu = false) {
  const memory::desc bias = with_bias ? d.plain_bias() : memory::desc();
  const dnnl::primitive_attr attr = relu ? user_scratchpad_relu() : user_scratchpad();
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_forward::primitive_desc(onednn_engine(), dnnl::prop_kind::forward_training,
                                                   dnnl::algorithm::convolution_direct, d.any(d.src),
                                                   d.any(d.weights), bias, d.any(d.dst), d.strides, d.dilates,
                                                   d.pad_l, d.pad_r, attr);
#else
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             d.any(d.src), d.any(d.weights), bias, d.any(d.dst), d.strides,
                                             d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, attr, onednn_engine());
#endif
}

dnnl::convolution_backward_data::primitive_desc make_backward_data(const ConvDims& d) {
  const auto hint = make_forward(d, false);
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_backward_data::primitive_desc(onednn_engine(), dnnl::algorithm::convolution_direct,
                                                         d.any(d.src), d.any(d.weights), d.any(d.dst), d.strides,
                                                         d.dilates, d.pad_l, d.pad_r, hint, user_scratchpad());
#else
  const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.any(d.src),
                                                   d.any(d.weights), d.any(d.dst), d.strides, d.dilates, d.pad_l,
                                                   d.pad_r);
  return dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), onednn_engine(), hint);
#endif
}

dnnl::convolution_backward_weights::primitive_desc make_backward_weights(const ConvDims& d) {
  const auto hint = make_forward(d, false);
#if DNNL_VERSION_MAJOR >= 3
  return dnnl::convolution_backward_weights::primitive_desc(onednn_engine(), dnnl::algorithm::convolution_direct,
                                                            d.any(d.src), d.any(d.weights), d.any(d.dst), d.strides,
                                                            d.dilates, d.pad_l, d.pad_r, hint, user_scratchpad());
#else
  const dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, d.any(d.src),
                                                      d.any(d.weights), d.any(d.dst), d.strides, d.dilates,
                                                      d.pad_l, d.pad_r);
  return dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), onednn_engine(), hint);
#endif
}

// Primitives per (direction, geometry, bias, thread count), made at first use and kept; bounded
// like the matmul cache (core/cpu/gemm_kernels.cc).
struct ConvKey {
  std::vector<std::int64_t> values;
  bool operator==(const ConvKey& o) const { return values == o.values; }
};

struct ConvKeyHash {
  std::size_t operator()(const ConvKey& key) const {
    Fnv1a64 h;
    for (std::int64_t v : key.values) h.mix(static_cast<std::uint64_t>(v));
    return static_cast<std::size_t>(h.digest());
  }
};

ConvKey conv_key(int direction, const ConvDims& d, const Conv2DGeometry& g, std::int64_t O, std::int64_t G, bool bias,
                 bool relu = false) {
  return {{direction,
           g.batch,
           g.channels,
           g.height,
           g.width,
           g.kernel_h,
           g.kernel_w,
           g.stride_y,
           g.stride_x,
           g.pad_y,
           g.pad_x,
           g.dilate_y,
           g.dilate_x,
           g.out_h,
           g.out_w,
           O,
           G,
           bias ? 1 : 0,
           relu ? 1 : 0,
           onednn_threads(),
           static_cast<std::int64_t>(d.type)}};
}

// A primitive with the layouts it chose for its operands.
struct ConvPrimitive {
  dnnl::primitive primitive;
  memory::desc src, weights, dst;  // the forward's src/weights/dst, or the backward's diff_* ones
  memory::desc scratchpad;
};

constexpr std::size_t kMaxCachedConvs = 512;

template <typename Make>
ConvPrimitive cached(const ConvKey& key, const Make& make) {
  static std::mutex mutex;
  static std::unordered_map<ConvKey, ConvPrimitive, ConvKeyHash> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= kMaxCachedConvs) cache.clear();
    it = cache.emplace(key, make()).first;
  }
  return it->second;
}

// An operand in the layout the primitive wants: the tensor's own memory when the layouts agree,
// else a buffer (from tandem's allocator, recycled) that `reorder_in` fills or `reorder_out`
// copies back from.
struct Operand {
  memory plain, inner;
  Tensor buffer;
  bool reordered = false;

  // An input, read only.
  Operand(const memory::desc& plain_md, const memory::desc& wanted, const Tensor& t)
      : Operand(plain_md, wanted, t, const_cast<void*>(t.raw_data())) {}
  // An output: the mutable access gives its storage a new version (core/storage.h).
  Operand(const memory::desc& plain_md, const memory::desc& wanted, Tensor& t)
      : Operand(plain_md, wanted, t, t.raw_data()) {}

  Operand(const memory::desc& plain_md, const memory::desc& wanted, const Tensor& t, void* data) {
    auto& engine = onednn_engine();
    plain = memory(plain_md, engine, data);
    if (wanted == plain_md) {
      inner = plain;
    } else {
      reordered = true;
      // Raw bytes for the reordered copy, in f32 words whatever the operand's dtype.
      const auto floats = static_cast<std::int64_t>((wanted.get_size() + sizeof(float) - 1) / sizeof(float));
      buffer = Tensor({floats}, DType::f32, t.device());
      inner = memory(wanted, engine, buffer.raw_data());
    }
  }

  void reorder_in(dnnl::stream& s) {
    if (reordered) dnnl::reorder(plain, inner).execute(s, plain, inner);
  }
  void reorder_out(dnnl::stream& s) {
    if (reordered) dnnl::reorder(inner, plain).execute(s, inner, plain);
  }
};

}  // namespace

bool onednn_conv_supported(const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups, DType dtype) {
  const bool type_ok = dtype == DType::f32 || (dtype == DType::bf16 && onednn_native_bf16());
  if (!type_ok || groups < 1 || g.batch == 0 || g.out_h <= 0 || g.out_w <= 0) return false;
  return ConvDims(g, out_channels, groups, dtype).ok;
}

void onednn_conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, std::int64_t groups,
                   bool relu, Tensor& y) {
  const ConvDims d(g, W.size(0), groups, x.dtype());
  const bool with_bias = b.defined();
  const ConvPrimitive p = cached(conv_key(0, d, g, W.size(0), groups, with_bias, relu), [&] {
    const auto pd = make_forward(d, with_bias, relu);
    return ConvPrimitive{dnnl::convolution_forward(pd), pd.src_desc(), pd.weights_desc(), pd.dst_desc(),
                         pd.scratchpad_desc()};
  });
  auto& s = onednn_stream();
  Operand src(d.plain_src(), p.src, x), weights(d.plain_weights(), p.weights, W), dst(d.plain_dst(), p.dst, y);
  src.reorder_in(s);
  weights.reorder_in(s);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src.inner},
      {DNNL_ARG_WEIGHTS, weights.inner},
      {DNNL_ARG_DST, dst.inner},
      {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(p.scratchpad)}};
  if (with_bias) args[DNNL_ARG_BIAS] = memory(d.plain_bias(), onednn_engine(), const_cast<void*>(b.raw_data()));
  p.primitive.execute(s, args);
  dst.reorder_out(s);
  s.wait();
}

void onednn_conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, std::int64_t groups,
                              Tensor& gx) {
  const ConvDims d(g, W.size(0), groups, gy.dtype());
  const ConvPrimitive p = cached(conv_key(1, d, g, W.size(0), groups, false), [&] {
    const auto pd = make_backward_data(d);
    return ConvPrimitive{dnnl::convolution_backward_data(pd), pd.diff_src_desc(), pd.weights_desc(),
                         pd.diff_dst_desc(), pd.scratchpad_desc()};
  });
  auto& s = onednn_stream();
  Operand diff_dst(d.plain_dst(), p.dst, gy), weights(d.plain_weights(), p.weights, W),
      diff_src(d.plain_src(), p.src, gx);
  diff_dst.reorder_in(s);
  weights.reorder_in(s);
  p.primitive.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst.inner},
                          {DNNL_ARG_WEIGHTS, weights.inner},
                          {DNNL_ARG_DIFF_SRC, diff_src.inner},
                          {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(p.scratchpad)}});
  diff_src.reorder_out(s);
  s.wait();
}

void onednn_conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, std::int64_t groups,
                               Tensor& gW) {
  const ConvDims d(g, gW.size(0), groups, x.dtype());
  const ConvPrimitive p = cached(conv_key(2, d, g, gW.size(0), groups, false), [&] {
    const auto pd = make_backward_weights(d);
    return ConvPrimitive{dnnl::convolution_backward_weights(pd), pd.src_desc(), pd.diff_weights_desc(),
                         pd.diff_dst_desc(), pd.scratchpad_desc()};
  });
  auto& s = onednn_stream();
  Operand src(d.plain_src(), p.src, x), diff_dst(d.plain_dst(), p.dst, gy), diff_weights(d.plain_weights(), p.weights, gW);
  src.reorder_in(s);
  diff_dst.reorder_in(s);
  p.primitive.execute(s, {{DNNL_ARG_SRC, src.inner},
                          {DNNL_ARG_DIFF_DST, diff_dst.inner},
                          {DNNL_ARG_DIFF_WEIGHTS, diff_weights.inner},
                          {DNNL_ARG_SCRATCHPAD, onednn_scratchpad(p.scratchpad)}});
  diff_weights.reorder_out(s);
  s.wait();
}

#else  // no oneDNN in this build: im2col runs every convolution

bool onednn_conv_supported(const Conv2DGeometry&, std::int64_t, std::int64_t, DType) { return false; }

void onednn_conv2d(const Tensor&, const Tensor&, const Tensor&, const Conv2DGeometry&, std::int64_t, bool, Tensor&) {
  TANDEM_CHECK(false, "conv2d: this build has no oneDNN");
}
void onednn_conv2d_grad_input(const Tensor&, const Tensor&, const Conv2DGeometry&, std::int64_t, Tensor&) {
  TANDEM_CHECK(false, "conv2d_grad_input: this build has no oneDNN");
}
void onednn_conv2d_grad_weight(const Tensor&, const Tensor&, const Conv2DGeometry&, std::int64_t, Tensor&) {
  TANDEM_CHECK(false, "conv2d_grad_weight: this build has no oneDNN");
}

#endif

}  // namespace cpu
}  // namespace tandem

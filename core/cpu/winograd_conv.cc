// Winograd F(2x2, 3x3) convolution (see winograd_conv.h for what and why).
//
// With d a tile's 4x4 input patch, g a 3x3 kernel and
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1],  G = [1 0 0; 1/2 1/2 1/2; 1/2 -1/2 1/2; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1],
// the tile's 2x2 outputs are A^T [ sum over input channels (G g G^T) .* (B^T d B) ] A.
//
// The work goes block by block, a block being a few whole images (about kTilesPerBlock tiles),
// each thread on its own blocks with its own buffers:
//   1. every input channel's tiles transformed into V [16][in][tiles] (16 rows of 4x4 positions);
//   2. for each of the 16 positions, M[xi] [out, tiles] = U[xi] [out, in] @ V[xi] [in, tiles],
//      with U the kernels transformed once per call;
//   3. every output channel's tiles transformed back, with the bias (and the ReLU) as they are
//      written.
// A block's V and M (a few hundred KB for 64-128 channels) stay in the caches between the steps.
// The transforms run eight tiles at once over a whole plane's tiles: a plane's 4x4 patches are
// first gathered into 16 rows (one per place in the patch), so that consecutive tiles' values are
// contiguous.
#include "core/cpu/winograd_conv.h"

#include <algorithm>
#include <cstring>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/error.h"

namespace tandem {
namespace cpu {

namespace {

// About this many tiles a block: the products [out, in] x [in, tiles] large enough for the
// library's kernels, a position's V and M rows (tiles x channels each) within a core's L2.
constexpr std::int64_t kTilesPerBlock = 256;

// Eight floats at once (GCC's vector extension: AVX registers where the build targets them);
// through memcpy, loads and stores need no alignment.
typedef float Floats8 __attribute__((vector_size(32)));

struct Lanes8 {
  using V = Floats8;
  static constexpr int width = 8;
  static V load(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  static void store(float* p, const V& v) { std::memcpy(p, &v, sizeof v); }
};

struct Lanes1 {
  using V = float;
  static constexpr int width = 1;
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
};

// One convolution in the kernel's terms: `in` channels of in_h x in_w planes, padded by
// (pad_y, pad_x), into `out` channels of out_h x out_w, covered by tiles_h x tiles_w tiles (the
// last row / column of tiles half outside when out_h / out_w is odd).
struct Plan {
  std::int64_t batch, in, in_h, in_w, pad_y, pad_x, out, out_h, out_w;
  std::int64_t tiles_h, tiles_w, images_per_block;

  Plan(std::int64_t batch_, std::int64_t in_, std::int64_t in_h_, std::int64_t in_w_, std::int64_t pad_y_,
       std::int64_t pad_x_, std::int64_t out_, std::int64_t out_h_, std::int64_t out_w_)
      : batch(batch_), in(in_), in_h(in_h_), in_w(in_w_), pad_y(pad_y_), pad_x(pad_x_), out(out_), out_h(out_h_),
        out_w(out_w_), tiles_h((out_h_ + 1) / 2), tiles_w((out_w_ + 1) / 2) {
    const std::int64_t per_image = tiles_h * tiles_w;
    // At least one block per thread where the batch allows it.
    const std::int64_t per_thread = (batch + max_chunks() - 1) / max_chunks();
    images_per_block = std::clamp<std::int64_t>((kTilesPerBlock + per_image - 1) / per_image, 1, per_thread);
  }
  std::int64_t tiles_per_image() const { return tiles_h * tiles_w; }
  // A plane's patches are kept as 16 rows of tiles_per_image values, this far apart (a copy of
  // eight values may run past a row's end into the next).
  std::int64_t patch_stride() const { return tiles_per_image() + 8; }
  // Eight-value vectors of a padded row's even (or odd) columns: tiles_w + 1 of them used.
  std::int64_t split_vectors() const { return (tiles_w + 1 + 7) / 8; }
  // The padded plane's rows (2 tiles_h + 2, each read as 16 split_vectors + 10 values).
  std::int64_t padded_rows() const { return 2 * tiles_h + 2; }
  std::int64_t padded_stride() const { return 16 * split_vectors() + 16; }
  // Floats of one thread's buffers (BlockBuffers).
  std::int64_t work_floats() const {
    const std::int64_t tiles = images_per_block * tiles_per_image();
    return 16 * (in + out) * tiles + 16 * patch_stride() + padded_rows() * padded_stride() + 4 * tiles_per_image();
  }
};

// U[xi][o][c] = (G k G^T)[xi] for the kernel k of output o and input c: W[o][c] (W [out][in][3][3]),
// or for the input's gradient (`turned`) W[c][o] turned by 180 degrees (W [in][out][3][3]).
void transform_kernels(const float* w, std::int64_t out, std::int64_t in, bool turned, float* u) {
  parallel_for(out, in * 64, kElementwiseGrain, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t o = lo; o < hi; ++o) {
      for (std::int64_t c = 0; c < in; ++c) {
        const float* k = turned ? w + (c * out + o) * 9 : w + (o * in + c) * 9;
        float g[3][3];
        for (int a = 0; a < 3; ++a) {
          for (int b = 0; b < 3; ++b) g[a][b] = turned ? k[(2 - a) * 3 + (2 - b)] : k[a * 3 + b];
        }
        float t[4][3];  // G g
        for (int j = 0; j < 3; ++j) {
          t[0][j] = g[0][j];
          t[1][j] = 0.5f * (g[0][j] + g[1][j] + g[2][j]);
          t[2][j] = 0.5f * (g[0][j] - g[1][j] + g[2][j]);
          t[3][j] = g[2][j];
        }
        for (int i = 0; i < 4; ++i) {  // (G g) G^T, row i
          float* ui = u + (4 * i * out + o) * in + c;
          const std::int64_t step = out * in;  // from one position to the next
          ui[0] = t[i][0];
          ui[step] = 0.5f * (t[i][0] + t[i][1] + t[i][2]);
          ui[2 * step] = 0.5f * (t[i][0] - t[i][1] + t[i][2]);
          ui[3 * step] = t[i][2];
        }
      }
    }
  });
}

typedef int Ints8 __attribute__((vector_size(32)));

// The block's buffers in one thread's work area (Plan::work_floats).
struct BlockBuffers {
  float* v;        // [16][in][tiles]: the inputs' tiles transformed
  float* m;        // [16][out][tiles]: the products (the outputs' gradients transformed, for gW)
  float* d;        // [16][patch_stride]: one plane's patches
  float* padded;   // [padded_rows][padded_stride]: one input plane with its padding
  float* outs[4];  // [per_image] each: one plane's outputs by place in the tile (gy's, for gW)

  BlockBuffers(const Plan& p, std::int64_t images, float* work) {
    const std::int64_t per_image = p.tiles_per_image(), tiles = images * per_image;
    v = work;
    m = v + 16 * p.in * tiles;
    d = m + 16 * p.out * tiles;
    padded = d + 16 * p.patch_stride();
    for (int k = 0; k < 4; ++k) outs[k] = padded + p.padded_rows() * p.padded_stride() + k * per_image;
    // Only the input's values are written into the padded plane: the rest reads as zeros.
    std::fill(padded, outs[0], 0.f);
  }
};

// One plane's tile patches: d[4i + j][t] = P[2ty + i][2tx + j] for tile t = ty * tiles_w + tx,
// with P[r][k] = x[r - pad_y][k - pad_x] (0 outside x); so that the transforms run over a plane's
// tiles with contiguous loads. The plane is first copied into its padding (all of it before any
// is read back: a load right after the stores it reads would wait on them); then each row's
// columns 2tx + j of eight tiles come from sixteen values at offset j - j % 2, split into the
// even and odd ones.
void gather_patches(const float* x, const Plan& p, const BlockBuffers& buf) {
  const std::int64_t tw = p.tiles_w, stride = p.patch_stride(), vectors = p.split_vectors();
  const std::int64_t row_stride = p.padded_stride();
  for (std::int64_t sr = 0; sr < p.in_h; ++sr) {  // a loop, not memcpy: rows are a few dozen floats
    float* to = buf.padded + (sr + p.pad_y) * row_stride + p.pad_x;
    const float* from = x + sr * p.in_w;
    for (std::int64_t k = 0; k < p.in_w; ++k) to[k] = from[k];
  }
  const Ints8 evens = {0, 2, 4, 6, 8, 10, 12, 14}, odds = {1, 3, 5, 7, 9, 11, 13, 15};
  for (std::int64_t r = 0; r < p.padded_rows(); ++r) {
    const float* row = buf.padded + r * row_stride;
    // Row r is row i of the patches of tile row ty = (r - i) / 2, for the i of r's parity.
    float* dst[2][4];
    int targets = 0;
    for (std::int64_t i = r % 2; i < 4; i += 2) {
      const std::int64_t ty = (r - i) / 2;
      if (ty < 0 || ty >= p.tiles_h) continue;
      for (int j = 0; j < 4; ++j) dst[targets][j] = buf.d + (4 * i + j) * stride + ty * tw;
      ++targets;
    }
    // Eight tiles at a time: the last eight may run past the row of tiles, into the next one
    // (written after it) or the patch row's slack.
    for (std::int64_t k = 0; k < vectors && 8 * k < tw; ++k) {
      const float* at = row + 16 * k;
      const Floats8 a = Lanes8::load(at), b = Lanes8::load(at + 8);
      const Floats8 a2 = Lanes8::load(at + 2), b2 = Lanes8::load(at + 10);
      const Floats8 c0 = __builtin_shuffle(a, b, evens), c1 = __builtin_shuffle(a, b, odds),
                    c2 = __builtin_shuffle(a2, b2, evens), c3 = __builtin_shuffle(a2, b2, odds);
      for (int tgt = 0; tgt < targets; ++tgt) {
        Lanes8::store(dst[tgt][0] + 8 * k, c0);
        Lanes8::store(dst[tgt][1] + 8 * k, c1);
        Lanes8::store(dst[tgt][2] + 8 * k, c2);
        Lanes8::store(dst[tgt][3] + 8 * k, c3);
      }
    }
  }
}

// B^T d B for tiles t..t+width-1 (d[4i + j][t]: the patches, d_stride apart), written to
// v[xi * v_stride + t].
template <typename L>
inline void input_tiles(const float* d, std::int64_t d_stride, std::int64_t t, float* v, std::int64_t v_stride) {
  using V = typename L::V;
  V s[4][4];  // d B
  for (int i = 0; i < 4; ++i) {
    const float* di = d + 4 * i * d_stride + t;
    const V d0 = L::load(di), d1 = L::load(di + d_stride), d2 = L::load(di + 2 * d_stride),
            d3 = L::load(di + 3 * d_stride);
    s[i][0] = d0 - d2;
    s[i][1] = d1 + d2;
    s[i][2] = d2 - d1;
    s[i][3] = d1 - d3;
  }
  for (int j = 0; j < 4; ++j) {
    L::store(v + (0 + j) * v_stride + t, s[0][j] - s[2][j]);
    L::store(v + (4 + j) * v_stride + t, s[1][j] + s[2][j]);
    L::store(v + (8 + j) * v_stride + t, s[2][j] - s[1][j]);
    L::store(v + (12 + j) * v_stride + t, s[1][j] - s[3][j]);
  }
}

// A^T m A for tiles t..t+width-1 (m[xi * stride + t]): the outputs at (row, column) (0, 0),
// (0, 1), (1, 0), (1, 1) of each tile into y[0..3][t].
template <typename L>
inline void output_tiles(const float* m, std::int64_t stride, std::int64_t t, float* const* y) {
  using V = typename L::V;
  V q[4][2];  // m A
  for (int i = 0; i < 4; ++i) {
    const V m0 = L::load(m + (4 * i + 0) * stride + t), m1 = L::load(m + (4 * i + 1) * stride + t),
            m2 = L::load(m + (4 * i + 2) * stride + t), m3 = L::load(m + (4 * i + 3) * stride + t);
    q[i][0] = m0 + m1 + m2;
    q[i][1] = m1 - m2 - m3;
  }
  for (int j = 0; j < 2; ++j) {
    L::store(y[j] + t, q[0][j] + q[1][j] + q[2][j]);
    L::store(y[2 + j] + t, q[1][j] - q[2][j] - q[3][j]);
  }
}

// An output row from its tiles' even and odd columns, plus the bias, through the ReLU.
void write_row(const float* even, const float* odd, float bias, bool relu, float* dst, std::int64_t width) {
  const std::int64_t pairs = width / 2;
  if (relu) {
    for (std::int64_t t = 0; t < pairs; ++t) {
      dst[2 * t] = std::max(even[t] + bias, 0.f);
      dst[2 * t + 1] = std::max(odd[t] + bias, 0.f);
    }
    if (width & 1) dst[width - 1] = std::max(even[pairs] + bias, 0.f);
  } else {
    for (std::int64_t t = 0; t < pairs; ++t) {
      dst[2 * t] = even[t] + bias;
      dst[2 * t + 1] = odd[t] + bias;
    }
    if (width & 1) dst[width - 1] = even[pairs] + bias;
  }
}

// Step 1 for images first..first+images-1 of x: V [16][in][tiles].
void transform_inputs(const float* x, std::int64_t first, std::int64_t images, const Plan& p,
                      const BlockBuffers& buf) {
  const std::int64_t per_image = p.tiles_per_image(), tiles = images * per_image, v_stride = p.in * tiles;
  constexpr std::int64_t lanes = Lanes8::width;
  for (std::int64_t i = 0; i < images; ++i) {
    for (std::int64_t c = 0; c < p.in; ++c) {
      gather_patches(x + ((first + i) * p.in + c) * p.in_h * p.in_w, p, buf);
      float* vc = buf.v + c * tiles + i * per_image;
      std::int64_t t = 0;
      for (; t + lanes <= per_image; t += lanes) input_tiles<Lanes8>(buf.d, p.patch_stride(), t, vc, v_stride);
      for (; t < per_image; ++t) input_tiles<Lanes1>(buf.d, p.patch_stride(), t, vc, v_stride);
    }
  }
}

// Images first..first+images-1 of x into y (see the file's comment for the three steps).
void run_block(const float* x, std::int64_t first, std::int64_t images, const Plan& p, const float* u,
               const float* bias, bool relu, float* y, float* work) {
  const std::int64_t per_image = p.tiles_per_image(), tiles = images * per_image, tw = p.tiles_w;
  const BlockBuffers buf(p, images, work);
  float* const v = buf.v;
  float* const m = buf.m;
  float* const* out_rows = buf.outs;
  constexpr std::int64_t lanes = Lanes8::width;

  const std::int64_t v_stride = p.in * tiles;
  transform_inputs(x, first, images, p, buf);

  for (int xi = 0; xi < 16; ++xi) {
    gemm(u + xi * p.out * p.in, v + xi * v_stride, m + xi * p.out * tiles, p.out, tiles, p.in, false, false, false);
  }

  const std::int64_t m_stride = p.out * tiles;
  for (std::int64_t i = 0; i < images; ++i) {
    for (std::int64_t o = 0; o < p.out; ++o) {
      const float* mo = m + o * tiles + i * per_image;
      std::int64_t t = 0;
      for (; t + lanes <= per_image; t += lanes) output_tiles<Lanes8>(mo, m_stride, t, out_rows);
      for (; t < per_image; ++t) output_tiles<Lanes1>(mo, m_stride, t, out_rows);
      const float b = bias ? bias[o] : 0.f;
      float* plane = y + ((first + i) * p.out + o) * p.out_h * p.out_w;
      for (std::int64_t ty = 0; ty < p.tiles_h; ++ty) {
        float* dst = plane + 2 * ty * p.out_w;
        write_row(out_rows[0] + ty * tw, out_rows[1] + ty * tw, b, relu, dst, p.out_w);
        if (2 * ty + 1 < p.out_h) write_row(out_rows[2] + ty * tw, out_rows[3] + ty * tw, b, relu, dst + p.out_w, p.out_w);
      }
    }
  }
}

// A gy A^T for tiles t..t+width-1 (g[2a + b][t]: the tiles' outputs' gradients, g_stride apart),
// written to m[xi * m_stride + t]: the gradient with respect to the products M of the forward.
template <typename L>
inline void output_grad_tiles(const float* g, std::int64_t g_stride, std::int64_t t, float* m, std::int64_t m_stride) {
  using V = typename L::V;
  V r[2][4];  // gy A^T
  for (int a = 0; a < 2; ++a) {
    const V g0 = L::load(g + 2 * a * g_stride + t), g1 = L::load(g + (2 * a + 1) * g_stride + t);
    r[a][0] = g0;
    r[a][1] = g0 + g1;
    r[a][2] = g0 - g1;
    r[a][3] = -g1;
  }
  for (int j = 0; j < 4; ++j) {
    L::store(m + (0 + j) * m_stride + t, r[0][j]);
    L::store(m + (4 + j) * m_stride + t, r[0][j] + r[1][j]);
    L::store(m + (8 + j) * m_stride + t, r[0][j] - r[1][j]);
    L::store(m + (12 + j) * m_stride + t, -r[1][j]);
  }
}

// One plane of gy by place in the tile: g[2a + b][ty * tiles_w + tx] = gy[2ty + a][2tx + b], 0
// where the last tiles reach past out_h / out_w.
void gather_output_grads(const float* gy, const Plan& p, float* const* g) {
  const std::int64_t tw = p.tiles_w, pairs = p.out_w / 2;
  for (std::int64_t ty = 0; ty < p.tiles_h; ++ty) {
    for (int a = 0; a < 2; ++a) {
      float* even = g[2 * a] + ty * tw;
      float* odd = g[2 * a + 1] + ty * tw;
      const std::int64_t r = 2 * ty + a;
      if (r >= p.out_h) {
        std::fill(even, even + tw, 0.f);
        std::fill(odd, odd + tw, 0.f);
        continue;
      }
      const float* src = gy + r * p.out_w;
      for (std::int64_t tx = 0; tx < pairs; ++tx) {
        even[tx] = src[2 * tx];
        odd[tx] = src[2 * tx + 1];
      }
      if (p.out_w & 1) {
        even[pairs] = src[p.out_w - 1];
        odd[pairs] = 0.f;
      }
    }
  }
}

// The weights' gradient of images first..first+images-1, added to q [16][out][in] (the gradient
// with respect to U): q[xi] += (A gy A^T)[xi] [out, tiles] @ V[xi]^T [tiles, in].
void grad_weight_block(const float* x, const float* gy, std::int64_t first, std::int64_t images, const Plan& p,
                       float* q, float* work) {
  const std::int64_t per_image = p.tiles_per_image(), tiles = images * per_image;
  const BlockBuffers buf(p, images, work);
  constexpr std::int64_t lanes = Lanes8::width;
  transform_inputs(x, first, images, p, buf);
  const std::int64_t m_stride = p.out * tiles;
  for (std::int64_t i = 0; i < images; ++i) {
    for (std::int64_t o = 0; o < p.out; ++o) {
      gather_output_grads(gy + ((first + i) * p.out + o) * p.out_h * p.out_w, p, buf.outs);
      float* mo = buf.m + o * tiles + i * per_image;
      std::int64_t t = 0;
      for (; t + lanes <= per_image; t += lanes) output_grad_tiles<Lanes8>(buf.outs[0], per_image, t, mo, m_stride);
      for (; t < per_image; ++t) output_grad_tiles<Lanes1>(buf.outs[0], per_image, t, mo, m_stride);
    }
  }
  for (int xi = 0; xi < 16; ++xi) {
    gemm(buf.m + xi * m_stride, buf.v + xi * p.in * tiles, q + xi * p.out * p.in, p.out, p.in, tiles, false, true,
         true);
  }
}

// gW[o][c] = G^T Q[o][c] G, Q [16][out][in] the gradient with respect to U.
void transform_kernel_grads(const float* q, std::int64_t out, std::int64_t in, float* gw) {
  parallel_for(out, in * 64, kElementwiseGrain, [&](std::int64_t lo, std::int64_t hi) {
    const std::int64_t step = out * in;
    for (std::int64_t o = lo; o < hi; ++o) {
      for (std::int64_t c = 0; c < in; ++c) {
        const float* qc = q + o * in + c;
        float t[4][3];  // Q G
        for (int i = 0; i < 4; ++i) {
          const float q0 = qc[(4 * i) * step], q1 = qc[(4 * i + 1) * step], q2 = qc[(4 * i + 2) * step],
                      q3 = qc[(4 * i + 3) * step];
          t[i][0] = q0 + 0.5f * (q1 + q2);
          t[i][1] = 0.5f * (q1 - q2);
          t[i][2] = 0.5f * (q1 + q2) + q3;
        }
        float* k = gw + (o * in + c) * 9;
        for (int b = 0; b < 3; ++b) {  // G^T (Q G)
          k[b] = t[0][b] + 0.5f * (t[1][b] + t[2][b]);
          k[3 + b] = 0.5f * (t[1][b] - t[2][b]);
          k[6 + b] = 0.5f * (t[1][b] + t[2][b]) + t[3][b];
        }
      }
    }
  });
}

// The whole batch, blocks spread over the threads.
void run(const float* x, const Plan& p, const float* u, const float* bias, bool relu, float* y) {
  const std::int64_t blocks = (p.batch + p.images_per_block - 1) / p.images_per_block;
  const std::int64_t per_chunk = p.work_floats();
  Tensor work({max_chunks(), per_chunk}, DType::f32, Device::cpu());
  float* pw = work.data<float>();
  const std::int64_t block_cost = 32 * p.in * p.out * p.images_per_block * p.tiles_per_image();
  parallel_chunks(blocks, block_cost, 1, [&](std::int64_t lo, std::int64_t hi, int chunk) {
    for (std::int64_t blk = lo; blk < hi; ++blk) {
      const std::int64_t first = blk * p.images_per_block;
      run_block(x, first, std::min(p.images_per_block, p.batch - first), p, u, bias, relu, y, pw + chunk * per_chunk);
    }
  });
}

}  // namespace

bool winograd_conv_supported(const Conv2DGeometry& g, std::int64_t out_channels, std::int64_t groups, DType dtype) {
  return dtype == DType::f32 && groups == 1 && g.kernel_h == 3 && g.kernel_w == 3 && g.stride_y == 1 &&
         g.stride_x == 1 && g.dilate_y == 1 && g.dilate_x == 1 && g.pad_y >= 0 && g.pad_y <= 2 && g.pad_x >= 0 &&
         g.pad_x <= 2 && g.out_h == g.height + 2 * g.pad_y - 2 && g.out_w == g.width + 2 * g.pad_x - 2 &&
         g.out_h > 0 && g.out_w > 0 && out_channels > 0 && g.channels > 0;
}

void winograd_conv2d(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g, bool relu,
                     Tensor& y) {
  const std::int64_t out = W.size(0);
  TANDEM_CHECK(winograd_conv_supported(g, out, 1, x.dtype()), "winograd_conv2d: not a 3x3 stride-1 f32 convolution");
  const Plan p(g.batch, g.channels, g.height, g.width, g.pad_y, g.pad_x, out, g.out_h, g.out_w);
  Tensor u({16, out, g.channels}, DType::f32, Device::cpu());
  transform_kernels(W.data<float>(), out, g.channels, false, u.data<float>());
  run(x.data<float>(), p, u.data<float>(), b.defined() ? b.data<float>() : nullptr, relu, y.data<float>());
}

void winograd_conv2d_grad_input(const Tensor& gy, const Tensor& W, const Conv2DGeometry& g, Tensor& gx) {
  const std::int64_t out = W.size(0);
  TANDEM_CHECK(winograd_conv_supported(g, out, 1, gy.dtype()),
               "winograd_conv2d_grad_input: not a 3x3 stride-1 f32 convolution");
  // gx = gy padded by 2 - pad, convolved with the turned kernels: from `out` channels to
  // g.channels, out_h + 2 (2 - pad_y) - 2 = height rows.
  const Plan p(g.batch, out, g.out_h, g.out_w, 2 - g.pad_y, 2 - g.pad_x, g.channels, g.height, g.width);
  Tensor u({16, g.channels, out}, DType::f32, Device::cpu());
  transform_kernels(W.data<float>(), g.channels, out, true, u.data<float>());
  run(gy.data<float>(), p, u.data<float>(), nullptr, false, gx.data<float>());
}

void winograd_conv2d_grad_weight(const Tensor& x, const Tensor& gy, const Conv2DGeometry& g, Tensor& gW) {
  const std::int64_t out = gW.size(0);
  TANDEM_CHECK(winograd_conv_supported(g, out, 1, x.dtype()),
               "winograd_conv2d_grad_weight: not a 3x3 stride-1 f32 convolution");
  const Plan p(g.batch, g.channels, g.height, g.width, g.pad_y, g.pad_x, out, g.out_h, g.out_w);
  const std::int64_t blocks = (p.batch + p.images_per_block - 1) / p.images_per_block;
  const std::int64_t per_chunk = p.work_floats(), q_floats = 16 * out * g.channels;
  const int chunks = max_chunks();
  // Each thread adds its blocks into its own Q; the Qs are summed at the end.
  Tensor work({chunks, per_chunk}, DType::f32, Device::cpu());
  Tensor q({chunks, q_floats}, DType::f32, Device::cpu());
  float* pq = q.data<float>();
  std::fill(pq, pq + chunks * q_floats, 0.f);
  const float *px = x.data<float>(), *pgy = gy.data<float>();
  float* pw = work.data<float>();
  const std::int64_t block_cost = 32 * p.in * p.out * p.images_per_block * p.tiles_per_image();
  parallel_chunks(blocks, block_cost, 1, [&](std::int64_t lo, std::int64_t hi, int chunk) {
    for (std::int64_t blk = lo; blk < hi; ++blk) {
      const std::int64_t first = blk * p.images_per_block;
      grad_weight_block(px, pgy, first, std::min(p.images_per_block, p.batch - first), p, pq + chunk * q_floats,
                        pw + chunk * per_chunk);
    }
  });
  for (int t = 1; t < chunks; ++t) {  // a chunk no block went to is still zero
    const float* src = pq + t * q_floats;
    for (std::int64_t i = 0; i < q_floats; ++i) pq[i] += src[i];
  }
  transform_kernel_grads(pq, out, g.channels, gW.data<float>());
}

}  // namespace cpu
}  // namespace tandem

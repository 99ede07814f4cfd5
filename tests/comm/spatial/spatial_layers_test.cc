// Spatially parallel layers (comm/spatial) at 1 to 4 ranks against the same layer on the whole
// batch in one process, in f64 (1e-10 relative + absolute).
// Every rank builds the same whole input x [N, C, H, W], parameters and loss weights L from fixed
// seeds and computes the reference locally: y = layer(x) and the gradients of sum(y * L). The
// spatial side starts from this rank's tile of x, runs the spatial layer and backward of
// sum(y_tile * L_tile); its output tile must be the reference's rows and columns of that tile,
// its input gradient the reference's gradient at the tile, and the parameters' gradients summed
// over the ranks the reference's. Layouts: bands, uneven bands with tiles thinner than every
// halo (1 row) and empty tiles, columns, and 2 x 2 grids even and uneven. Layers: convolution
// (kernels 1, 3, 5, 7, stride 2, dilation 2, non-square, groups, no bias, unpadded), max and
// average pooling (padding, cover_all), deconvolution (stride 1, 2, 3, padding, dilation),
// batch normalisation over every tile, and the changes of layout.
// Within a case every rank makes all its collective calls before checking anything, so that a
// failed check on one rank cannot leave the others waiting.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/spatial/halo_exchange.h"
#include "comm/spatial/spatial_convolution.h"
#include "comm/spatial/spatial_links.h"
#include "comm/spatial/spatial_pooling.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

constexpr std::int64_t kN = 2, kH = 13, kW = 11;
constexpr double kTol = 1e-10;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

struct NamedLayout {
  std::string name;
  SpatialLayout layout;
};

// The layouts of an H x W map over R ranks.
std::vector<NamedLayout> layouts(int R, std::int64_t H = kH, std::int64_t W = kW) {
  std::vector<NamedLayout> out{{"bands", SpatialLayout::bands(H, W, R)}};
  if (R == 1) return out;
  out.push_back({"columns", SpatialLayout::grid(H, W, 1, R)});
  if (R == 2) {
    out.push_back({"uneven bands 1|12", SpatialLayout({0, 1, H}, {0, W})});
    out.push_back({"one empty band", SpatialLayout({0, H, H}, {0, W})});
  }
  if (R == 3) {
    out.push_back({"thin bands 1|1|11", SpatialLayout({0, 1, 2, H}, {0, W})});
    out.push_back({"an empty middle band", SpatialLayout({0, 6, 6, H}, {0, W})});
  }
  if (R == 4) {
    out.push_back({"2 x 2 grid", SpatialLayout::grid(H, W, 2, 2)});
    out.push_back({"uneven 2 x 2 grid", SpatialLayout({0, 2, H}, {0, 8, W})});
    out.push_back({"thin bands 1|1|1|10", SpatialLayout({0, 1, 2, 3, H}, {0, W})});
  }
  return out;
}

IndexList rect_of(const Rect& r) {
  return {Index::all(), Index::all(), Index::range(r.y0, r.y1), Index::range(r.x0, r.x1)};
}

using SpatialFn = std::function<SpatialMap(const SpatialMap&, const Variables&)>;
using WholeFn = std::function<Variable(const Variable&, const Variables&)>;

struct Case {
  std::string name;
  std::int64_t channels = 3;
  std::vector<Shape> params;
  SpatialFn spatial;
  WholeFn whole;
};

void require_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": got " << got.description() << ", want " << want.description());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = test_util::values(got), w = test_util::values(want);
  const std::int64_t bad = test_util::first_mismatch(g, w, kTol, kTol);
  INFO(test_util::mismatch_message(g, w, bad));
  REQUIRE(bad == -1);
}

// Runs `c` on `layout` at this rank against the whole batch.
void check_case(const Case& c, const NamedLayout& nl, std::uint64_t seed) {
  const CommunicatorPtr comm = world();
  const std::string what =
      c.name + " on " + nl.name + " (" + nl.layout.describe() + ") at rank " + std::to_string(comm->rank());
  const Tensor X = test_util::uniform({kN, c.channels, kH, kW}, seed, -1, 1, DType::f64);
  std::vector<Tensor> P;
  for (std::size_t i = 0; i < c.params.size(); ++i)
    P.push_back(test_util::uniform(c.params[i], seed + 1 + i, -0.5, 0.5, DType::f64));

  Variable xr(X, true);
  Variables pr;
  for (const Tensor& p : P) pr.emplace_back(p.clone(), true);
  const Variable yr = c.whole(xr, pr);
  const Tensor L = test_util::uniform(yr.shape(), seed + 100, -1, 1, DType::f64);
  F::sum(F::mul(yr, Variable(L))).backward();

  const Rect tile = nl.layout.tile(comm->rank());
  Variable xs(index(X, rect_of(tile)), true);
  Variables ps;
  for (const Tensor& p : P) ps.emplace_back(p.clone(), true);
  const SpatialMap y = c.spatial({xs, nl.layout, comm}, ps);
  const Rect out = y.tile();
  F::sum(F::mul(y.local, Variable(index(L, rect_of(out))))).backward();
  std::vector<Tensor> grads;
  for (const Variable& p : ps) grads.push_back(comm->allreduce(p.grad().defined() ? p.grad() : zeros_like(p.data())));

  INFO(what);
  REQUIRE(y.layout.height() == yr.shape()[2]);
  REQUIRE(y.layout.width() == yr.shape()[3]);
  require_close(y.local.data(), index(yr.data(), rect_of(out)), "output");
  require_close(xs.grad(), index(xr.grad(), rect_of(tile)), "input gradient");
  for (std::size_t i = 0; i < ps.size(); ++i)
    require_close(grads[i], pr[i].grad(), "gradient of parameter " + std::to_string(i));
}

void run_cases(const std::vector<Case>& cases) {
  const int R = world()->size();
  std::uint64_t seed = 1;
  for (const Case& c : cases)
    for (const NamedLayout& nl : layouts(R)) check_case(c, nl, seed += 10);
}

Case conv_case(const std::string& name, std::int64_t kh, std::int64_t kw, const Conv2DParams& p, bool bias = true,
               std::int64_t channels = 3, std::int64_t out = 4) {
  Case c{name, channels, {{out, channels / p.groups, kh, kw}}, nullptr, nullptr};
  if (bias) c.params.push_back({out});
  c.spatial = [p, bias](const SpatialMap& x, const Variables& ps) {
    return F::spatial_convolution_2d(x, ps[0], bias ? ps[1] : Variable(), p);
  };
  c.whole = [p, bias](const Variable& x, const Variables& ps) {
    return F::convolution_2d(x, ps[0], bias ? ps[1] : Variable(), p);
  };
  return c;
}

Case deconv_case(const std::string& name, std::int64_t k, const Conv2DParams& p) {
  Case c{name, 3, {{3, 2, k, k}, {2}}, nullptr, nullptr};
  c.spatial = [p](const SpatialMap& x, const Variables& ps) { return F::spatial_deconvolution_2d(x, ps[0], ps[1], p); };
  c.whole = [p](const Variable& x, const Variables& ps) { return F::deconvolution_2d(x, ps[0], ps[1], p); };
  return c;
}

Case pool_case(const std::string& name, bool max, std::int64_t k, std::int64_t s, std::int64_t pad, bool cover_all) {
  Case c{name, 3, {}, nullptr, nullptr};
  c.spatial = [=](const SpatialMap& x, const Variables&) {
    return max ? F::spatial_max_pooling_2d(x, k, s, pad, cover_all) : F::spatial_average_pooling_2d(x, k, s, pad);
  };
  c.whole = [=](const Variable& x, const Variables&) {
    return max ? F::max_pooling_2d(x, k, s, pad, cover_all) : F::average_pooling_2d(x, k, s, pad);
  };
  return c;
}

}  // namespace

TEST_CASE("spatial convolution equals one process: kernels, strides, dilation, groups") {
  std::vector<Case> cases{
      conv_case("1x1", 1, 1, Conv2DParams::make(1, 0)),
      conv_case("3x3 pad 1", 3, 3, Conv2DParams::make(1, 1)),
      conv_case("5x5 pad 2", 5, 5, Conv2DParams::make(1, 2)),
      conv_case("7x7 pad 3", 7, 7, Conv2DParams::make(1, 3)),
      conv_case("7x7 unpadded", 7, 7, Conv2DParams::make(1, 0)),
      conv_case("3x3 stride 2 pad 1", 3, 3, Conv2DParams::make(2, 1)),
      conv_case("3x3 dilation 2 pad 2", 3, 3, Conv2DParams::make(1, 2, 2)),
      conv_case("5x5 stride 2 dilation 2 pad 1", 5, 5, Conv2DParams::make(2, 1, 2)),
      conv_case("3x5 stride 2x1 pad 1x2", 3, 5, Conv2DParams().stride(2, 1).pad(1, 2)),
      conv_case("3x3 groups 2 no bias", 3, 3, Conv2DParams::make(1, 1, 1, 2), false, 4, 4),
  };
  run_cases(cases);
}

TEST_CASE("spatial pooling equals one process") {
  run_cases({
      pool_case("max 2x2 stride 2", true, 2, 2, 0, true),
      pool_case("max 3x3 stride 2 pad 1", true, 3, 2, 1, true),
      pool_case("max 3x3 stride 1 pad 1 without cover_all", true, 3, 1, 1, false),
      pool_case("average 2x2 stride 2", false, 2, 2, 0, false),
      pool_case("average 3x3 stride 1 pad 1", false, 3, 1, 1, false),
      pool_case("average 3x3 stride 2 pad 1", false, 3, 2, 1, false),
  });
}

TEST_CASE("spatial deconvolution equals one process") {
  run_cases({
      deconv_case("2x2 stride 2", 2, Conv2DParams::make(2, 0)),
      deconv_case("4x4 stride 2 pad 1", 4, Conv2DParams::make(2, 1)),
      deconv_case("3x3 stride 1 pad 1", 3, Conv2DParams::make(1, 1)),
      deconv_case("3x3 stride 3", 3, Conv2DParams::make(3, 0)),
      deconv_case("3x3 stride 2 dilation 2 pad 1", 3, Conv2DParams::make(2, 1, 2)),
  });
}

TEST_CASE("spatial convolution without overlap equals one process") {
  set_spatial_overlap(false);
  run_cases({conv_case("3x3 pad 1", 3, 3, Conv2DParams::make(1, 1)),
             conv_case("5x5 stride 2 pad 2", 5, 5, Conv2DParams::make(2, 2))});
  set_spatial_overlap(true);
}

TEST_CASE("spatial batch normalisation takes its statistics over every tile") {
  const CommunicatorPtr comm = world();
  std::uint64_t seed = 500;
  for (const NamedLayout& nl : layouts(comm->size())) {
    BatchNormalization reference(3, 0.9, 2e-5, DType::f64);
    SpatialBatchNormalization spatial(3, 0.9, 2e-5, DType::f64);
    const Tensor gamma = test_util::uniform({3}, seed + 1, 0.5, 1.5, DType::f64);
    reference.gamma().set_data(gamma);
    spatial.gamma().set_data(gamma);
    Case c{"batch normalisation", 3, {}, nullptr, nullptr};
    c.whole = [&](const Variable& x, const Variables&) { return reference(x); };
    c.spatial = [&](const SpatialMap& x, const Variables&) { return spatial(x); };
    check_case(c, nl, seed += 10);
    const Tensor gg = comm->allreduce(spatial.gamma().grad()), gb = comm->allreduce(spatial.beta().grad());
    INFO(nl.name);
    require_close(gg, reference.gamma().grad(), "gamma's gradient");
    require_close(gb, reference.beta().grad(), "beta's gradient");
    require_close(spatial.persistent("avg_mean"), reference.persistent("avg_mean"), "running mean");
    require_close(spatial.persistent("avg_var"), reference.persistent("avg_var"), "running variance");
  }
}

TEST_CASE("changes of layout are exact and differentiable") {
  const CommunicatorPtr comm = world();
  const int R = comm->size();
  std::vector<Case> cases;
  for (const NamedLayout& to : layouts(R)) {
    Case c{"relayout to " + to.name, 3, {}, nullptr, nullptr};
    c.spatial = [to](const SpatialMap& x, const Variables&) { return F::relayout(x, to.layout); };
    c.whole = [](const Variable& x, const Variables&) { return x; };
    cases.push_back(c);
  }
  Case round_trip{"to_samples and back", 3, {}, nullptr, nullptr};
  round_trip.spatial = [](const SpatialMap& x, const Variables&) {
    const Variable samples = F::to_samples(x);
    return F::from_samples(x.comm, F::mul(samples, 2.0), kN, x.layout);
  };
  round_trip.whole = [](const Variable& x, const Variables&) { return F::mul(x, 2.0); };
  cases.push_back(round_trip);
  Case through_root{"gather_image and scatter_image", 3, {}, nullptr, nullptr};
  through_root.spatial = [R](const SpatialMap& x, const Variables&) {
    const int root = R - 1;
    const Variable whole = F::gather_image(x, root);
    return F::scatter_image(x.comm, F::mul(whole, 3.0), x.layout, root);
  };
  through_root.whole = [](const Variable& x, const Variables&) { return F::mul(x, 3.0); };
  cases.push_back(through_root);
  run_cases(cases);
}

TEST_CASE("scatter_image from a root that alone passes an image") {
  const CommunicatorPtr comm = world();
  const int me = comm->rank(), root = comm->size() - 1;
  const Tensor X = test_util::uniform({kN, 3, kH, kW}, 11, -1, 1, DType::f64);
  const Tensor L = test_util::uniform({kN, 3, kH, kW}, 12, -1, 1, DType::f64);
  for (const NamedLayout& nl : layouts(comm->size())) {
    Variable x = me == root ? Variable(X, true) : Variable();
    const SpatialMap y = F::scatter_image(comm, x, nl.layout, root);
    const Rect t = nl.layout.tile(me);
    F::sum(F::mul(y.local, Variable(index(L, rect_of(t))))).backward();
    INFO(nl.name);
    require_close(y.local.data(), index(X, rect_of(t)), "this rank's tile");
    // d sum(scatter(x) * L) / dx = L, gathered back from every tile.
    if (me == root) require_close(x.grad(), L, "the root's gradient");
  }
}

TEST_CASE("what the changes of layout hold") {
  const CommunicatorPtr comm = world();
  const int R = comm->size(), me = comm->rank();
  const Tensor X = test_util::uniform({5, 2, kH, kW}, 7, -1, 1, DType::f64);
  const SpatialLayout layout = SpatialLayout::bands(kH, kW, R);
  const SpatialMap x{Variable(index(X, rect_of(layout.tile(me)))), layout, comm};
  const Variable whole = F::gather_image(x, 0);
  const Variable samples = F::to_samples(x);
  const std::int64_t n0 = 5 * me / R, n1 = 5 * (me + 1) / R;
  if (me == 0) require_close(whole.data(), X, "the gathered image");
  else REQUIRE(whole.shape() == Shape{5, 2, 0, kW});
  require_close(samples.data(), index(X, {Index::range(n0, n1)}), "this rank's samples");
}

TEST_CASE("spatial layers reject what does not fit, on every rank") {
  const CommunicatorPtr comm = world();
  const int R = comm->size(), me = comm->rank();
  const SpatialLayout layout = SpatialLayout::bands(kH, kW, R);
  const Rect t = layout.tile(me);
  // A tile of the wrong height.
  const SpatialMap wrong{Variable(zeros({1, 3, t.rows() + 1, t.cols()}, DType::f64)), layout, comm};
  const Variable W(zeros({4, 3, 3, 3}, DType::f64));
  REQUIRE_THROWS_WITH(F::spatial_convolution_2d(wrong, W, Variable(), Conv2DParams::make(1, 1)),
                      Contains("spatial_convolution_2d: rank " + std::to_string(me) + " holds rows [") &&
                          Contains("so its tile must be [N, C, " + std::to_string(t.rows())));
  // Maps of two layouts.
  const SpatialMap a{Variable(zeros({1, 3, t.rows(), t.cols()}, DType::f64)), layout, comm};
  const SpatialLayout columns = SpatialLayout::grid(kH, kW, 1, R);
  const Rect tc = columns.tile(me);
  const SpatialMap b{Variable(zeros({1, 3, tc.rows(), tc.cols()}, DType::f64)), columns, comm};
  if (R > 1) REQUIRE_THROWS_WITH(F::spatial_concat({a, b}), Contains("spatial_concat: the maps must share one layout"));
  // A layout of another group size.
  const SpatialLayout other = SpatialLayout::bands(kH, kW, R + 1);
  REQUIRE_THROWS_WITH(F::relayout(a, other), Contains("has " + std::to_string(R + 1) + " tiles but the group"));
  // A channel count W does not take.
  REQUIRE_THROWS_WITH(F::spatial_convolution_2d(a, Variable(zeros({4, 2, 3, 3}, DType::f64))),
                      Contains("has 3 channels but W"));
  // Cuts that go backwards.
  REQUIRE_THROWS_WITH(SpatialLayout({0, 5, 3, kH}, {0, kW}), Contains("the row cuts must not decrease"));
}

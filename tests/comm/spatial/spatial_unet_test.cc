// A whole U-Net (examples/unet) trained spatially parallel at 1 to 4 ranks against the same
// model trained on the whole batch in one process, in f64: after 3 momentum-SGD steps of the
// per-pixel softmax cross-entropy, every parameter and batch-normalisation average equals the
// one-process model's within 1e-10, and so does each step's loss. Layouts: bands, bands whose
// cuts are not multiples of 2^depth (the upsampled maps move to the skip connections' layout),
// a 2 x 2 grid at 4 ranks.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/spatial/spatial_links.h"
#include "comm/spatial/spatial_map.h"
#include "core/random.h"
#include "examples/unet/unet.h"
#include "layers/optimizers/sgd.h"
#include "tests/core/test_util.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr std::int64_t kN = 2, kH = 16, kW = 12, kClasses = 3;
constexpr double kTol = 1e-10;

CommunicatorPtr world() {
  static CommunicatorPtr comm = create_communicator("naive");
  return comm;
}

std::shared_ptr<examples::UNet> make_model() {
  examples::UNetOptions options;
  options.classes = kClasses;
  options.width = 3;
  options.depth = 2;
  options.dtype = DType::f64;
  manual_seed(17);
  return std::make_shared<examples::UNet>(options);
}

IndexList rect_of(const Rect& r) { return {Index::all(), Index::range(r.y0, r.y1), Index::range(r.x0, r.x1)}; }

void train_and_compare(const std::string& name, const SpatialLayout& layout) {
  const CommunicatorPtr comm = world();
  INFO(name << " (" << layout.describe() << ") at rank " << comm->rank());
  auto reference = make_model(), spatial = make_model();
  auto reference_opt = std::make_shared<MomentumSGD>(0.1, 0.9);
  reference_opt->setup(reference);
  auto spatial_opt = create_spatial_optimizer(std::make_shared<MomentumSGD>(0.1, 0.9), comm);
  spatial_opt->setup(spatial);
  const Rect tile = layout.tile(comm->rank());
  std::vector<double> reference_losses, spatial_losses;
  for (int step = 0; step < 3; ++step) {
    // [N, 1, H, W] images and [N, H, W] labels.
    const Tensor X = test_util::uniform({kN, 1, kH, kW}, 100 + step, 0, 1, DType::f64);
    // Truncated to integers 0, 1, 2.
    const Tensor T = test_util::uniform({kN, kH, kW}, 200 + step, 0, kClasses, DType::f64).to(DType::i32);

    reference->cleargrads();
    const Variable loss = F::softmax_cross_entropy((*reference)(Variable(X)), Variable(T));
    loss.backward();
    reference_opt->update();
    reference_losses.push_back(loss.data().item());

    spatial->cleargrads();
    const SpatialMap x{Variable(index(X, {Index::all(), Index::all(), Index::range(tile.y0, tile.y1),
                                          Index::range(tile.x0, tile.x1)})),
                       layout, comm};
    const SpatialMap scores = spatial->forward(x);
    const Variable per_pixel =
        F::softmax_cross_entropy(scores.local, Variable(index(T, rect_of(tile))), -1, F::Reduce::none);
    const Variable share = F::spatial_mean(scores.with(per_pixel));
    share.backward();
    spatial_opt->update();
    spatial_losses.push_back(F::group_sum(*comm, share));
  }
  for (int step = 0; step < 3; ++step) CHECK(spatial_losses[step] == Approx(reference_losses[step]).epsilon(kTol));
  const auto want = reference->namedparams(), got = spatial->namedparams();
  REQUIRE(want.size() == got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO(want[i].first);
    REQUIRE(want[i].first == got[i].first);
    const std::vector<double> w = test_util::values(want[i].second.data()), g = test_util::values(got[i].second.data());
    const std::int64_t bad = test_util::first_mismatch(g, w, kTol, kTol);
    INFO(test_util::mismatch_message(g, w, bad));
    CHECK(bad == -1);
  }
  const auto want_avg = reference->namedpersistents(), got_avg = spatial->namedpersistents();
  REQUIRE(want_avg.size() == got_avg.size());
  for (std::size_t i = 0; i < want_avg.size(); ++i) {
    INFO(want_avg[i].first);
    const std::vector<double> w = test_util::values(*want_avg[i].second), g = test_util::values(*got_avg[i].second);
    CHECK(test_util::first_mismatch(g, w, kTol, kTol) == -1);
  }
}

}  // namespace

TEST_CASE("a U-Net trained over split images equals one process after 3 steps") {
  const int R = world()->size();
  train_and_compare("bands", SpatialLayout::bands(kH, kW, R));
  if (R > 1) {
    // Cuts at 6, 11, 16: not multiples of 4, and the last band of 4 ranks is empty.
    std::vector<std::int64_t> cuts{0};
    for (int r = 1; r < R; ++r) cuts.push_back(5 * r + 1);
    cuts.push_back(kH);
    train_and_compare("uneven bands", SpatialLayout(cuts, {0, kW}));
  }
  if (R == 4) train_and_compare("2 x 2 grid", SpatialLayout::grid(kH, kW, 2, 2));
}

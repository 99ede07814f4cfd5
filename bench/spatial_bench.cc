// One training step (forward, backward, Adam) of the U-Net of examples/unet on a canvas of
// Fashion-MNIST items, each image split over the ranks (comm/spatial), or whole in one process:
//   bazel build -c opt //bench:spatial_bench && B=bazel-out/k8-opt/bin/bench/spatial_bench
//   OMP_NUM_THREADS=1 SPATIAL_MODE=whole $B                    one process, plain layers
//   OMP_NUM_THREADS=1 /usr/bin/mpiexec.mpich -n 2 $B            bands over 2 ranks
//   SPATIAL_SIZE=4096 SPATIAL_LAYOUT=grid ... -n 4 $B           a 2 x 2 grid at 4096 x 4096
// Lines (../shared/bench's format): name=tandem.spatial.unet.s<size>.<whole|r<R>[.grid]>, the
// median step over the timed steps (each the slowest rank's), then the same steps with the
// halo exchange not overlapped (TANDEM_SPATIAL_OVERLAP off: convolutions wait for their halos
// first), and per step: halo_wait_ms (time spent waiting for halos, the slowest rank's) with and
// without overlap, hidden (1 - the first over the second: the share of the exchange that the
// interior's compute hid), halo_mb sent per rank, and peak_rss_mb (the kernel's peak resident set
// of the slowest rank, over the whole run) with peak_live_mb (tensors).
// SPATIAL_DEPTH (3), SPATIAL_UNIT (8), SPATIAL_BATCH (1), SPATIAL_ITERS (3 timed, 1 warm-up).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "bench/mpi_timing.h"
#include "comm/spatial/halo_exchange.h"
#include "comm/spatial/spatial_convolution.h"
#include "comm/spatial/spatial_links.h"
#include "core/memory_stats.h"
#include "core/random.h"
#include "core/threads.h"
#include "data/fashion_mnist_canvas.h"
#include "examples/unet/unet.h"
#include "layers/optimizers/adam.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

long env_int(const char* name, long fallback) {
  const char* e = std::getenv(name);
  return e && *e ? std::atol(e) : fallback;
}
std::string env_string(const char* name, const char* fallback) {
  const char* e = std::getenv(name);
  return e && *e ? e : fallback;
}

double max_over_ranks(double v) {
  double out = 0;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

}  // namespace

int main() {
  auto comm = create_communicator("naive");
  const int R = comm->size(), rank = comm->rank();
  const std::int64_t size = env_int("SPATIAL_SIZE", 1024), batch = env_int("SPATIAL_BATCH", 1);
  const int iters = bench::scaled(static_cast<int>(env_int("SPATIAL_ITERS", 3)));
  const bool whole = env_string("SPATIAL_MODE", "spatial") == "whole";
  const bool grid = env_string("SPATIAL_LAYOUT", "bands") == "grid";
  TANDEM_CHECK(!whole || R == 1, "spatial_bench: SPATIAL_MODE=whole runs on one rank, not ", R);
  int gy = R, gx = 1;
  if (grid)
    for (int d = 1; d * d <= R; ++d)
      if (R % d == 0) gx = d, gy = R / d;
  const SpatialLayout layout = SpatialLayout::grid(size, size, gy, gx);
  const Rect tile = layout.tile(rank);

  CanvasOptions canvas;
  canvas.height = canvas.width = size;
  std::vector<Tensor> images, targets;
  for (std::int64_t i = 0; i < batch; ++i) {
    Example e = canvas_tile(canvas, i, tile.y0, tile.y1, tile.x0, tile.x1);
    images.push_back(e[0]);
    targets.push_back(e[1]);
  }
  const Variable x(stack(images, 0)), t(stack(targets, 0));

  examples::UNetOptions options;
  options.depth = static_cast<int>(env_int("SPATIAL_DEPTH", 3));
  options.width = env_int("SPATIAL_UNIT", 8);
  options.classes = kCanvasNumClasses;
  manual_seed(0);
  auto model = std::make_shared<examples::UNet>(options);
  auto adam = std::make_shared<Adam>();
  std::shared_ptr<Optimizer> optimizer =
      whole ? std::shared_ptr<Optimizer>(adam) : create_spatial_optimizer(adam, comm);
  optimizer->setup(model);

  auto step = [&] {
    model->cleargrads();
    const SpatialMap scores =
        whole ? SpatialMap{model->forward(x), layout, comm} : model->forward(SpatialMap{x, layout, comm});
    const Variable per_pixel = F::softmax_cross_entropy(scores.local, t, -1, F::Reduce::none);
    F::spatial_mean(scores.with(per_pixel)).backward();
    optimizer->update();
  };
  // Timed steps with the overlap on and off, and the halo waits of each.
  auto run = [&](bool overlap, double& wait_ms, double& halo_mb) {
    set_spatial_overlap(overlap);
    reset_halo_stats();
    const bench::Stats s = bench::timed_steps(1, iters, step);
    const HaloStats h = halo_stats();
    wait_ms = max_over_ranks(h.wait_seconds * 1e3 / (iters + 1));
    halo_mb = max_over_ranks(static_cast<double>(h.bytes_sent) / 1e6 / (iters + 1));
    return s;
  };
  double wait_on = 0, wait_off = 0, mb = 0, mb_off = 0;
  const bench::Stats on = run(true, wait_on, mb);
  const bench::Stats off = whole ? on : run(false, wait_off, mb_off);
  const HostMemoryStats memory = host_memory_stats();
  const double peak_rss = max_over_ranks(static_cast<double>(memory.peak_rss) / 1e6);
  const double peak_live = max_over_ranks(static_cast<double>(memory.peak_live_tensors) / 1e6);
  if (rank == 0) {
    const std::string id = "spatial.unet.s" + std::to_string(size) + "." +
                           (whole ? std::string("whole") : "r" + std::to_string(R) + (grid ? ".grid" : ""));
    const std::string tags = "ranks=" + std::to_string(R) +
                             " layout=" + bench::kv(whole ? "whole" : layout.describe()) +
                             " depth=" + std::to_string(options.depth) + " unit=" + std::to_string(options.width) +
                             " batch=" + std::to_string(batch) + " " + bench::threads_tag(max_threads());
    bench::print_stats(id, tags, on);
    std::printf(
        " no_overlap_ms=%.1f halo_wait_ms=%.2f halo_wait_no_overlap_ms=%.2f hidden=%.3f halo_mb=%.2f "
        "peak_rss_mb=%.0f peak_live_mb=%.0f\n",
        off.median_ms, wait_on, wait_off, wait_off > 0 ? 1.0 - wait_on / wait_off : 0.0, mb, peak_rss, peak_live);
  }
  return 0;
}

// A U-Net segmenting canvases of Fashion-MNIST items (data/fashion_mnist_canvas.h: 11 classes,
// background and the ten item classes) on images too large for one process, each image split
// over the ranks (comm/spatial): every rank builds, holds and computes only its band (or tile)
// of every image and of every feature map, exchanging halos with its neighbours. With one rank,
// or --mode whole (the plain layers on the whole image, in one process), it is the ordinary
// U-Net with the same initial weights, so the runs can be compared step for step:
//
//   /usr/bin/mpiexec.mpich -n 2 bazel-bin/examples/unet/train_unet --size 1024 --iterations 200
//   bazel-bin/examples/unet/train_unet --size 1024 --iterations 200 --mode whole
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "autograd/grad_mode.h"
#include "comm/multi_node_training/multi_node_snapshot.h"
#include "comm/spatial/spatial_links.h"
#include "core/ops.h"
#include "core/random.h"
#include "data/data.h"
#include "examples/common/flags.h"
#include "examples/mnist/multi_rank.h"
#include "examples/unet/unet.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/evaluator.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

using namespace tandem;
namespace F = tandem::functions;

namespace {

constexpr const char* kProgram = "train_unet";

// One rectangle of every canvas of a canvas dataset: {image [1, rows, cols], target [rows, cols]}.
class CanvasTiles : public Dataset {
 public:
  CanvasTiles(const CanvasOptions& options, std::int64_t length, const Rect& rect)
      : canvases_(options, length), rect_(rect) {}
  std::int64_t size() const override { return canvases_.size(); }
  Example get(std::int64_t i) const override { return canvases_.tile(i, rect_.y0, rect_.y1, rect_.x0, rect_.x1); }

 private:
  FashionMnistCanvasDataset canvases_;
  Rect rect_;
};

// Pixel counts for accuracy and intersection over union: [correct, pixels, then per class the
// intersection, the predicted and the true pixels].
Tensor segmentation_counts(const Tensor& scores, const Tensor& target, std::int64_t classes) {
  std::vector<double> counts(2 + 3 * classes, 0.0);
  if (target.numel() > 0) {
    const std::vector<std::int64_t> predicted = argmax(scores, 1).to(DType::i64).to_vector<std::int64_t>();
    const std::vector<std::int64_t> truth = target.to(DType::i64).to_vector<std::int64_t>();
    for (std::size_t i = 0; i < truth.size(); ++i) {
      const std::int64_t p = predicted[i], t = truth[i];
      counts[0] += p == t;
      counts[2 + 3 * t] += p == t;
      counts[3 + 3 * p] += 1;
      counts[4 + 3 * t] += 1;
    }
    counts[1] = static_cast<double>(truth.size());
  }
  return from_vector(counts);
}

// Accuracy and the mean IoU over the classes that occur (predicted or true).
Observation segmentation_metrics(const Tensor& summed, std::int64_t classes) {
  const std::vector<double> c = summed.to_vector<double>();
  double iou = 0;
  int present = 0;
  for (std::int64_t k = 0; k < classes; ++k) {
    const double inter = c[2 + 3 * k], uni = c[3 + 3 * k] + c[4 + 3 * k] - inter;
    if (uni > 0) {
      iou += inter / uni;
      ++present;
    }
  }
  return {{"accuracy", c[1] > 0 ? c[0] / c[1] : 0.0}, {"miou", present ? iou / present : 0.0}};
}

// The nearly square grid of `ranks` tiles (grid_y >= grid_x).
std::pair<int, int> square_grid(int ranks) {
  int gx = static_cast<int>(std::sqrt(static_cast<double>(ranks)));
  while (ranks % gx != 0) --gx;
  return {ranks / gx, gx};
}

}  // namespace

int main(int argc, char** argv) {
  examples::Flags flags(kProgram,
                        "A U-Net segmenting large canvases of Fashion-MNIST items, each image split over N ranks.\n"
                        "Run with: /usr/bin/mpiexec.mpich -n N train_unet [flags] (N = 1 or --mode whole: one "
                        "process)");
  flags.add_int("size", 512, "canvas height and width (a multiple of 2^depth)");
  flags.add_int("items", 0, "items per canvas (0: about one per 48 x 48 pixels)");
  flags.add_int("depth", 3, "levels of the U-Net");
  flags.add_int("unit", 8, "channels of the first level (then twice as many per level)");
  flags.add_int("batchsize", 1, "canvases per minibatch (every rank holds its part of each)");
  flags.add_int("iterations", 100, "training steps");
  flags.add_int("train-size", 256, "canvases in the training set");
  flags.add_int("test-size", 4, "canvases in the test set (from the test split's items)");
  flags.add_int("eval-interval", 50, "evaluate, log and snapshot every this many steps");
  flags.add_double("lr", 0.002, "Adam's step size");
  flags.add_string("layout", "bands", "how an image is split: bands (of rows) or grid (nearly square tiles)");
  flags.add_string("mode", "spatial", "spatial, or whole: the plain layers on whole images (one rank only)");
  flags.add_int("seed", 0, "seed of the weights, the canvases and the order of the examples");
  flags.add_string("out", "result", "directory for the log and snapshots (rank R > 0 writes to <out>/rank<R>)");
  flags.add_string("resume", "", "'latest': continue from the newest snapshot that every rank completed");
  flags.add_int("gpu", -1, "GPU of the ranks' models (each rank the GPU of its index on its host); -1: the CPU");
  flags.add_string("data-dir", "", "the Fashion-MNIST files (empty: the installed dataset-fashion-mnist)");
  const int status = examples::parse_command_line(
      flags, argc, argv, kProgram,
      {"size", "unit", "batchsize", "iterations", "train-size", "test-size", "eval-interval"});
  if (status >= 0) return status;

  auto comm = create_communicator("naive");
  const int rank = comm->rank(), ranks = comm->size();
  const std::string mode = flags.get_string("mode"), layout_name = flags.get_string("layout");
  TANDEM_CHECK(mode == "spatial" || mode == "whole", kProgram, ": --mode must be spatial or whole, got '", mode, "'");
  TANDEM_CHECK(mode == "spatial" || ranks == 1, kProgram, ": --mode whole runs in one process, not on ", ranks,
               " ranks");
  TANDEM_CHECK(layout_name == "bands" || layout_name == "grid", kProgram, ": --layout must be bands or grid, got '",
               layout_name, "'");
  const bool spatial = mode == "spatial";
  const std::int64_t size = flags.get_int("size");
  const auto seed = static_cast<std::uint64_t>(flags.get_int("seed"));
  const auto [grid_y, grid_x] = layout_name == "grid" ? square_grid(ranks) : std::pair{ranks, 1};
  const SpatialLayout layout = SpatialLayout::grid(size, size, grid_y, grid_x);
  const Rect tile = layout.tile(rank);

  examples::UNetOptions model_options;
  model_options.depth = static_cast<int>(flags.get_int("depth"));
  model_options.width = flags.get_int("unit");
  model_options.classes = kCanvasNumClasses;
  CanvasOptions canvas;
  canvas.height = canvas.width = size;
  canvas.items = flags.get_int("items");
  canvas.seed = seed;
  canvas.dir = flags.get_string("data-dir");
  CanvasOptions test_canvas = canvas;
  test_canvas.train = false;
  test_canvas.seed = seed + 1;
  auto train = std::make_shared<CanvasTiles>(canvas, flags.get_int("train-size"), tile);
  auto test = std::make_shared<CanvasTiles>(test_canvas, flags.get_int("test-size"), tile);
  // The same order on every rank: each draws its part of the same canvases.
  auto train_iter = std::make_shared<SerialIterator>(train, flags.get_int("batchsize"), true, true, seed);
  auto test_iter = std::make_shared<SerialIterator>(test, flags.get_int("batchsize"), false, false);
  if (rank == 0)
    std::printf("%s: %s on %d rank(s) (%s); %lld x %lld canvases, %lld train / %lld test; depth %d, unit %lld\n",
                kProgram, mode.c_str(), ranks, layout.describe().c_str(), static_cast<long long>(size),
                static_cast<long long>(size), static_cast<long long>(train->size()),
                static_cast<long long>(test->size()), model_options.depth, static_cast<long long>(model_options.width));

  manual_seed(seed);
  auto model = std::make_shared<examples::UNet>(model_options);
  const Device device = examples::training_device(flags, kProgram, comm->intra_rank());
  comm->set_device(device);
  model->to(device);
  auto adam = std::make_shared<Adam>(flags.get_double("lr"));
  std::shared_ptr<Optimizer> optimizer = spatial ? create_spatial_optimizer(adam, comm) : adam;
  optimizer->setup(model);

  // The scores of a batch on this rank's tile, and this rank's share of the mean loss.
  auto run = [&](const Example& batch) {
    const Variable x(batch[0].to(device)), t(batch[1].to(device));
    const SpatialMap scores = spatial ? model->forward(SpatialMap{x, layout, comm})
                                      : SpatialMap{model->forward(x), SpatialLayout::bands(size, size, 1), comm};
    const Variable per_pixel = F::softmax_cross_entropy(scores.local, t, -1, F::Reduce::none);
    return std::pair{scores, F::spatial_mean(scores.with(per_pixel))};
  };
  auto observe = [&](const SpatialMap& scores, const Variable& share, const Tensor& target) {
    Tensor counts = segmentation_counts(scores.local.data(), target, model_options.classes);
    if (spatial) counts = comm->allreduce(counts);
    Observation o = segmentation_metrics(counts, model_options.classes);
    o["loss"] = spatial ? F::group_sum(*comm, share) : share.data().item();
    return o;
  };
  auto loss = [&](const Example& batch) {
    auto [scores, share] = run(batch);
    share.backward();
    LossResult result;
    result.observation = observe(scores, share, batch[1]);
    // The global loss, reported as main/loss; backward has run on this rank's share.
    result.loss = Variable(full({}, result.observation.at("loss"), DType::f32));
    result.observation.erase("loss");
    result.backward_done = true;
    return result;
  };
  auto evaluate = [&](const Example& batch) {
    const NoGradGuard no_grad;
    const TrainModeGuard test_mode(false);
    auto [scores, share] = run(batch);
    return observe(scores, share, batch[1]);
  };

  const std::int64_t every = flags.get_int("eval-interval");
  auto updater = std::make_shared<StandardUpdater>(train_iter, optimizer, loss);
  Trainer trainer(updater, Trigger::iterations(flags.get_int("iterations")), examples::rank_out(flags, rank), model);
  auto evaluator = std::make_shared<Evaluator>(test_iter, evaluate);
  trainer.extend(evaluator, Trigger::iterations(every));
  if (rank == 0) {
    auto log = std::make_shared<LogReport>(Trigger::iterations(every));
    trainer.extend(log);
    trainer.extend(std::make_shared<PrintReport>(
        log, std::vector<std::string>{"iteration", "main/loss", "main/accuracy", "main/miou", "validation/main/loss",
                                      "validation/main/accuracy", "validation/main/miou", "elapsed_time"}));
    trainer.extend(std::make_shared<ProgressBar>(10));
  }
  trainer.extend(create_multi_node_snapshot_writer(comm), Trigger::iterations(every));
  examples::resume(trainer, *comm, flags, kProgram);

  const std::int64_t first = updater->iteration();
  const auto start = std::chrono::steady_clock::now();
  trainer.run();
  const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
  const Observation final_metrics = evaluator->evaluate();
  if (rank == 0)
    std::printf("final test accuracy: %.4f  mIoU: %.4f  loss: %.4f  (%.3f s per step on %d rank(s))\n",
                final_metrics.at("accuracy"), final_metrics.at("miou"), final_metrics.at("loss"),
                seconds.count() / static_cast<double>(std::max<std::int64_t>(updater->iteration() - first, 1)), ranks);
  return 0;
}

#include "training/updater.h"

#include <cstdlib>
#include <optional>

#include "autograd/backward_observer.h"
#include "core/deterministic.h"
#include "core/kernel_choices.h"
#include "core/process_label.h"

namespace tandem {

Variable forward_batch(Link& model, const Example& batch) {
  Variables inputs;
  for (const Tensor& field : batch) inputs.emplace_back(field.to(model.device()));
  const Variables outputs = model.forward_many(inputs);
  TANDEM_CHECK(outputs.size() == 1, model.type_name(), ": a model run on a batch of ", batch.size(),
               " field(s) must give one output (the loss, or a delegate variable), got ", outputs.size());
  return outputs[0];
}

StandardUpdater::StandardUpdater(std::shared_ptr<Iterator> iterator, std::shared_ptr<Optimizer> optimizer)
    : StandardUpdater(iterator, optimizer, [optimizer](const Example& batch) {
        Link& model = *optimizer->target();  // read at each step: setup() may come after
        LossResult result;
        result.loss = forward_batch(model, batch);
        result.observation = model.observation();
        return result;
      }) {}

StandardUpdater::StandardUpdater(std::shared_ptr<Iterator> iterator, std::shared_ptr<Optimizer> optimizer,
                                 LossFunction loss)
    : iterator_(std::move(iterator)), optimizer_(std::move(optimizer)), loss_(std::move(loss)) {
  TANDEM_CHECK(iterator_ && optimizer_ && loss_, "StandardUpdater: iterator, optimizer and loss function are required");
  if (const char* dir = std::getenv("TANDEM_DIGESTS"); dir != nullptr && *dir != 0) record_digests(dir);
}

void StandardUpdater::record_digests(const std::string& dir) {
  digests_ = dir.empty() ? nullptr : std::make_shared<DigestRecorder>(dir, launcher_rank());
}

void StandardUpdater::set_accumulation(int k) {
  TANDEM_CHECK(k >= 1, "StandardUpdater::set_accumulation: k = ", k, " (1 or more batches per update)");
  accumulation_ = k;
}

namespace {

// Deterministic mode: the batch in groups of deterministic_group_size() examples (views of its
// rows), or whole when that is 0.
std::vector<Example> deterministic_groups(const Example& batch, std::int64_t examples) {
  const std::int64_t size = deterministic_group_size();
  if (size == 0 || size == examples) return {batch};
  TANDEM_CHECK(size > 0 && examples % size == 0, "StandardUpdater (deterministic mode): a batch of ", examples,
               " examples does not split into groups of TANDEM_DETERMINISTIC_GROUP=", size,
               " examples; the group size must divide every rank's batch");
  std::vector<Example> groups;
  for (std::int64_t begin = 0; begin < examples; begin += size) {
    Example group;
    for (const Tensor& field : batch) {
      TANDEM_CHECK(field.dim() >= 1 && field.shape()[0] == examples, "StandardUpdater (deterministic mode): field ",
                   field.description(), " of a batch of ", examples, " examples cannot be split into groups");
      group.push_back(field.slice_rows(begin, begin + size));
    }
    groups.push_back(std::move(group));
  }
  return groups;
}

}  // namespace

Observation StandardUpdater::update() {
  // Optimizer::update(lossfun), with the backward left out when the loss function ran it.
  optimizer_->target()->cleargrads();
  reset_gradient_groups();
  last_loss_ = Variable();  // the last step's graph goes before this step's is built
  // Each step's kernels start from nothing they kept (packed copies of weights and the counts that
  // decide them, core/kernel_choices.h): a step rounds alike whatever ran before it (an
  // evaluation, a snapshot, a resume), so a resumed run equals the one it continues.
  forget_kernel_history();
  if (digests_) digests_->begin_step(iteration_ + 1, *optimizer_->target());
  Observation reported;
  double loss_sum = 0;
  bool scalar_loss = false;
  last_batch_size_ = 0;
  bool new_epoch = false;
  const bool order_free = deterministic();
  // Deterministic mode: every group's backward starts from its own mean loss's gradient; the
  // optimizer divides the order-free sum by the number of groups (core/deterministic.h).
  int groups_run = 0;
  const double loss_scale = optimizer_->loss_scaler() ? optimizer_->loss_scaler()->scale() : 1.0;
  for (int k = 0; k < accumulation_; ++k) {
    const Example batch = iterator_->next();
    new_epoch = new_epoch || iterator_->is_new_epoch();
    const std::int64_t examples = batch.empty() ? 0 : batch[0].shape().empty() ? 1 : batch[0].shape()[0];
    last_batch_size_ += examples;
    const std::vector<Example> groups = order_free ? deterministic_groups(batch, examples) : std::vector<Example>{batch};
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const bool last_backward = k + 1 == accumulation_ && g + 1 == groups.size();
      std::optional<NoGradientSync> accumulating;
      if (!last_backward) accumulating.emplace();
      const LossResult result = loss_(groups[g]);
      TANDEM_CHECK(result.loss.defined(), "StandardUpdater: the loss function returned no loss");
      if (!result.backward_done) {
        // The loss divided by k (the gradient of the mean over the k batches; deterministic mode
        // divides later), times the loss scale where the optimizer has a scaler.
        const double seed_value = loss_scale / (order_free ? 1 : accumulation_);
        // A model-parallel rank without a loss of its own (a delegate variable of size 0) has
        // nothing to seed: its gradients come from the ranks that have one.
        if (seed_value == 1.0 || result.loss.numel() == 0) {
          result.loss.backward();
        } else {
          TANDEM_CHECK(result.loss.numel() == 1, "StandardUpdater: gradient accumulation and loss scaling need a ",
                       "scalar loss, got ", result.loss.description());
          result.loss.backward(full(result.loss.shape(), seed_value, result.loss.dtype(), result.loss.device()));
        }
        if (order_free) record_gradient_group();
      }
      if (last_backward) last_loss_ = result.loss;
      // The mean over the groups (deterministic mode divides once below).
      for (const auto& [name, value] : result.observation)
        reported["main/" + name] += order_free ? value : value / accumulation_;
      // A model-parallel rank without a loss of its own returns a delegate variable (size 0).
      if (result.loss.numel() == 1) {
        loss_sum += result.loss.data().item();
        scalar_loss = true;
      }
      ++groups_run;
    }
  }
  if (order_free)
    for (auto& [name, value] : reported) value /= groups_run;
  Observation observation = reported;
  if (scalar_loss) observation["main/loss"] = loss_sum / groups_run;
  if (digests_) digests_->end_step(*optimizer_->target());
  optimizer_->update();
  // With a loss scaler: the scale this step's loss was multiplied by, and the steps skipped so far.
  if (const std::shared_ptr<LossScaler>& scaler = optimizer_->loss_scaler()) {
    observation["main/loss_scale"] = loss_scale;
    observation["main/skipped_steps"] = static_cast<double>(scaler->skipped());
  }
  if (new_epoch) optimizer_->new_epoch();
  last_step_new_epoch_ = new_epoch;
  ++iteration_;
  return observation;
}

}  // namespace tandem

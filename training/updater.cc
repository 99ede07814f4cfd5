#include "training/updater.h"

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
}

Observation StandardUpdater::update() {
  const Example batch = iterator_->next();
  last_batch_size_ = batch.empty() ? 0 : batch[0].shape().empty() ? 1 : batch[0].shape()[0];
  // Optimizer::update(lossfun), with the backward left out when the loss function ran it.
  optimizer_->target()->cleargrads();
  const LossResult result = loss_(batch);
  TANDEM_CHECK(result.loss.defined(), "StandardUpdater: the loss function returned no loss");
  if (!result.backward_done) result.loss.backward();
  optimizer_->update();
  if (iterator_->is_new_epoch()) optimizer_->new_epoch();
  ++iteration_;
  Observation observation;
  for (const auto& [name, value] : result.observation) observation["main/" + name] = value;
  // A model-parallel rank without a loss of its own returns a delegate variable (size 0).
  if (result.loss.numel() == 1) observation["main/loss"] = result.loss.data().item();
  return observation;
}

}  // namespace tandem

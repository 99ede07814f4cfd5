#include "comm/checkpoint/checkpoint_writer.h"

#include <chrono>

namespace tandem {

CheckpointWriter::CheckpointWriter(CommunicatorPtr comm, CheckpointWriterOptions options)
    : comm_(std::move(comm)), options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "CheckpointWriter: a communicator is required");
  TANDEM_CHECK(!options_.root.empty(), "CheckpointWriter: a directory (root) is required");
  TANDEM_CHECK(options_.keep >= 0, "CheckpointWriter: keep must be >= 0 (0 keeps every checkpoint), got ",
               options_.keep);
}

CheckpointWriter::~CheckpointWriter() {
  // A write still running when the trainer is torn down by an error: let it end, uncommitted.
  if (writer_.joinable()) writer_.join();
}

void CheckpointWriter::finish_pending() {
  if (!pending_) return;
  if (writer_.joinable()) writer_.join();
  last_bytes_ = pending_->bytes_written();
  const std::unique_ptr<SavingCheckpoint> saving = std::move(pending_);
  last_committed_ = saving->commit(*comm_);
}

void CheckpointWriter::operator()(Trainer& trainer) {
  const auto start = std::chrono::steady_clock::now();
  finish_pending();
  std::map<std::string, std::string> info = options_.info;
  info["world"] = std::to_string(comm_->size());
  CheckpointSaveOptions save;
  save.keep = options_.keep;
  if (options_.async) save.staging = &staging_;
  {
    const TrainingState state = training_state(*comm_, trainer);
    pending_ =
        std::make_unique<SavingCheckpoint>(*comm_, options_.root, trainer.iteration(), state.entries, info, save);
    // Synchronous: written from the tensors themselves, while a ZeRO-3 run's are whole.
    if (!options_.async) pending_->write();
  }  // a ZeRO-3 run's parameters are sharded again here
  if (options_.async) {
    writer_ = std::thread([saving = pending_.get()] { saving->write(); });
  } else {
    inject_fault_if_requested("snapshot", trainer.iteration());  // a rank lost before the commit
    finish_pending();
  }
  last_step_ = trainer.iteration();
  stalls_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void CheckpointWriter::finalize(Trainer& trainer) {
  if (options_.at_end && last_step_ != trainer.iteration()) (*this)(trainer);
  finish_pending();
}

}  // namespace tandem

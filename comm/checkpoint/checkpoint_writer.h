// The trainer extension that saves sharded checkpoints (training_checkpoint.h) on its trigger,
// synchronously or while training goes on.
//
// Asynchronous (options.async): at the trigger the ranks agree on the plan and every rank copies
// its pieces to host memory (the stall), then a thread writes them while training continues;
// the next save (or the end of training) first waits for that thread and commits the checkpoint
// (collective: every rank must have written its file). So a checkpoint becomes the newest one
// at the next save rather than at its own step, and a crash before then falls back to the one
// before it. Synchronous: plan, copy-free write and commit at the trigger.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/checkpoint/training_checkpoint.h"

namespace tandem {

struct CheckpointWriterOptions {
  std::string root;  // checkpoints go to <root>/step_<N>; every rank must pass the same
  int keep = 0;      // complete checkpoints kept (0: all)
  bool async = false;
  bool at_end = true;  // also save the state at the end of training (unless saved at that iteration)
  std::map<std::string, std::string> info;  // the manifest's info ("layout": ...)
};

class CheckpointWriter final : public Extension {
 public:
  CheckpointWriter(CommunicatorPtr comm, CheckpointWriterOptions options);
  ~CheckpointWriter() override;
  std::string name() const override { return "CheckpointWriter"; }
  int priority() const override { return -100; }  // after the log, like the snapshots
  void operator()(Trainer& trainer) override;
  void finalize(Trainer& trainer) override;

  // The training time each save took from the loop (for async: planning and the copy to host
  // memory, plus any wait for the previous write), its total, and the saves so far.
  // The first async save also allocates the host copies (their pages are touched for the first
  // time); later ones reuse the freed memory.
  const std::vector<double>& stall_seconds() const { return stalls_; }
  int saves() const { return static_cast<int>(stalls_.size()); }
  std::int64_t last_bytes() const { return last_bytes_; }  // this rank's file of the last save
  const CheckpointWriterOptions& options() const { return options_; }
  // The newest committed checkpoint ("" before the first commit).
  const std::string& last_committed() const { return last_committed_; }

 private:
  void finish_pending();

  CommunicatorPtr comm_;
  CheckpointWriterOptions options_;
  StagingBuffer staging_;  // async: this rank's file, copied at the save, reused by the next
  std::unique_ptr<SavingCheckpoint> pending_;
  std::thread writer_;
  std::vector<double> stalls_;
  std::int64_t last_bytes_ = 0, last_step_ = -1;
  std::string last_committed_;
};

}  // namespace tandem

// The training loop (chainer.training.Trainer): runs the updater until the stop trigger
// fires, and calls its extensions (evaluation, logging, progress, snapshots) on their own
// triggers. Everything an extension reports joins the current observation.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "layers/link.h"
#include "layers/serializers/npz.h"
#include "training/updater.h"

namespace tandem {

// Fires every `period` epochs or iterations.
struct Trigger {
  enum class Unit { epoch, iteration };
  std::int64_t period = 1;
  Unit unit = Unit::epoch;
  static Trigger epochs(std::int64_t n) { return Trigger{n, Unit::epoch}; }
  static Trigger iterations(std::int64_t n) { return Trigger{n, Unit::iteration}; }
};

class Trainer;

class Extension {
 public:
  virtual ~Extension() = default;
  virtual std::string name() const = 0;
  virtual Trigger default_trigger() const { return Trigger::epochs(1); }
  // Extensions due at the same iteration run in decreasing priority: those that add values
  // (Evaluator, 300) before those that collect them (LogReport, 200), before readers (100),
  // with snapshots last (-100), so a snapshot includes the log entry of its own iteration.
  virtual int priority() const { return 100; }
  // Runs every iteration before the trigger is checked (to accumulate observations).
  virtual void observe(Trainer&, const Observation&) {}
  virtual void operator()(Trainer& trainer) = 0;
  virtual void finalize(Trainer&) {}
  // State that a snapshot must carry for an exact resume (named tensors).
  virtual NamedTensors state() const { return {}; }
  virtual void restore(const NamedTensors&) {}
};

class Trainer {
 public:
  // Stops after `stop` (e.g. Trigger::epochs(10)); files go to out_dir (created if missing).
  Trainer(std::shared_ptr<StandardUpdater> updater, Trigger stop, std::string out_dir, std::shared_ptr<Link> model);

  void extend(std::shared_ptr<Extension> extension);
  void extend(std::shared_ptr<Extension> extension, Trigger trigger);
  void run();

  StandardUpdater& updater() { return *updater_; }
  Link& model() { return *model_; }
  const std::string& out() const { return out_; }
  const Trigger& stop_trigger() const { return stop_; }
  std::int64_t iteration() const { return updater_->iteration(); }
  double elapsed_seconds() const;
  // The observation of the current iteration; extensions add to it (e.g. "validation/main/loss").
  Observation& observation() { return observation_; }

  // Everything needed to continue exactly: model, optimizer, iterator, trainer and extension
  // state. Written atomically (write_npz: a temporary file in the same directory, fsync, then
  // rename), so a crash never leaves a truncated snapshot. Load it before run() to resume.
  void save_snapshot(const std::string& path) const;
  void load_snapshot(const std::string& path);
  // While the handle lives, the optimizer's sharded parameters (zero = 3) are whole.
  std::shared_ptr<void> gather_parameters() const;

  // Whether a trigger fires at the current iteration.
  bool fires(const Trigger& trigger) const;

  // The extensions, in the order they run, and the time counted before a resume (for
  // checkpoints other than save_snapshot's: comm/checkpoint/training_checkpoint.h).
  std::vector<std::shared_ptr<Extension>> extensions() const;
  void set_elapsed_before(double seconds) { elapsed_before_ = seconds; }

 private:
  struct Entry {
    std::shared_ptr<Extension> extension;
    Trigger trigger;
  };
  bool done() const;

  std::shared_ptr<StandardUpdater> updater_;
  Trigger stop_;
  std::string out_;
  std::shared_ptr<Link> model_;
  std::vector<Entry> extensions_;
  Observation observation_;
  std::chrono::steady_clock::time_point start_;
  double elapsed_before_ = 0;  // from a resumed snapshot
};

// A testing aid: makes one process fail on purpose, to test what the others do (a crash, or an
// exception, mid-training). Read once from the environment:
//   TANDEM_FAULT_INJECT="rank=R,iteration=N[,point=update|snapshot][,action=throw|kill]"
// The process whose MPI world rank is R (the launcher's PMI_RANK or OMPI_COMM_WORLD_RANK; 0
// without a launcher) fails when it reaches `point` at iteration N:
//   point=update (default): in Trainer::run, after iteration N's update, before its extensions;
//   point=snapshot: in MultiNodeSnapshotWriter (and a synchronous CheckpointWriter), after this
//     rank's snapshot of iteration N is on disk and before the ranks agree that it is complete.
//   action=throw (default): throws tandem::Error("injected fault (TANDEM_FAULT_INJECT) ...");
//   action=kill: the process sends itself SIGKILL (a crash: no message, no cleanup).
// Unset or empty: nothing happens. A malformed value is an error at the first check.
void inject_fault_if_requested(const std::string& point, std::int64_t iteration);

}  // namespace tandem

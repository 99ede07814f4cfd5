// Reporting extensions: LogReport (per-interval means, also written as a JSON log file),
// PrintReport (a table row per log entry) and ProgressBar (iteration, epoch, items/s, ETA).
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "training/trainer.h"

namespace tandem {

class LogReport : public Extension {
 public:
  explicit LogReport(Trigger trigger = Trigger::epochs(1), std::string filename = "log");
  std::string name() const override { return "LogReport"; }
  int priority() const override { return 200; }
  Trigger default_trigger() const override { return trigger_; }
  void observe(Trainer& trainer, const Observation& observation) override;
  void operator()(Trainer& trainer) override;
  NamedTensors state() const override;
  void restore(const NamedTensors& state) override;

  // The entries written so far (epoch, iteration, elapsed_time and the means), newest last.
  const std::vector<Observation>& log() const { return log_; }

 private:
  void write(const Trainer& trainer) const;

  Trigger trigger_;
  std::string filename_;
  std::map<std::string, double> sums_;
  std::map<std::string, std::int64_t> counts_;
  std::vector<Observation> log_;
  std::vector<std::string> log_json_;  // one JSON object per entry, including resumed ones
};

class PrintReport : public Extension {
 public:
  PrintReport(std::shared_ptr<LogReport> log, std::vector<std::string> entries, std::FILE* out = stdout);
  std::string name() const override { return "PrintReport"; }
  void operator()(Trainer& trainer) override;

 private:
  std::shared_ptr<LogReport> log_;
  std::vector<std::string> entries_;
  std::FILE* out_;
  std::size_t printed_ = 0;
  bool header_printed_ = false;
};

class ProgressBar : public Extension {
 public:
  explicit ProgressBar(std::int64_t update_interval = 100, std::FILE* out = stdout);
  std::string name() const override { return "ProgressBar"; }
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  void operator()(Trainer& trainer) override;
  void finalize(Trainer& trainer) override;

 private:
  std::int64_t interval_;
  std::FILE* out_;
  bool terminal_;
  double last_time_ = -1;
  std::int64_t last_bucket_ = 0;  // twentieths of the run already printed (log files)
  std::int64_t examples_since_ = 0;
};

// Writes Trainer::save_snapshot to out/<prefix><iteration>.npz on its trigger.
class SnapshotWriter : public Extension {
 public:
  explicit SnapshotWriter(std::string prefix = "snapshot_iter_");
  std::string name() const override { return "SnapshotWriter"; }
  int priority() const override { return -100; }
  void operator()(Trainer& trainer) override;

 private:
  std::string prefix_;
};

// The newest snapshot (highest iteration) written by SnapshotWriter into `dir`, or "".
std::string latest_snapshot(const std::string& dir, const std::string& prefix = "snapshot_iter_");

}  // namespace tandem

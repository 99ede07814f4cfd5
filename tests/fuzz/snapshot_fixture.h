// The small trainer whose snapshots the snapshot fuzzer loads, shared with the seed-corpus
// generator so that the seeds are real snapshots of exactly this trainer: a Classifier over
// Linear(2, 3) with Adam, a shuffling SerialIterator over 6 examples in batches of 4, and a
// LogReport every iteration (the extension that carries state in snapshots).
#pragma once

#include <memory>
#include <string>

#include "layers/links/classifier.h"
#include "layers/optimizers/adam.h"
#include "training/extensions/reporting.h"
#include "training/trainer.h"

namespace tandem::fuzz {

struct SnapshotFixture {
  std::shared_ptr<Classifier> model;
  std::shared_ptr<Adam> optimizer;
  std::shared_ptr<LogReport> log;
  std::unique_ptr<Trainer> trainer;
};

// A fresh trainer (same initial weights every time) that stops after `iterations` and writes
// its files to out_dir.
SnapshotFixture make_snapshot_fixture(const std::string& out_dir, std::int64_t iterations);

}  // namespace tandem::fuzz

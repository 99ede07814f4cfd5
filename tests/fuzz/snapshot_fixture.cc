#include "tests/fuzz/snapshot_fixture.h"

#include <vector>

#include "core/random.h"
#include "data/data.h"
#include "layers/links/linear.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem::fuzz {

namespace {

DatasetPtr toy_dataset() {
  static const DatasetPtr dataset = [] {
    const Tensor x = from_vector(std::vector<float>{0, 1, 1, 0, 1, 1, -1, 0, 0, -1, 2, 1}, {6, 2});
    const Tensor t = from_vector(std::vector<std::int32_t>{0, 1, 2, 0, 1, 2}, {6});
    return std::make_shared<TupleDataset>(std::vector<Tensor>{x, t});
  }();
  return dataset;
}

}  // namespace

SnapshotFixture make_snapshot_fixture(const std::string& out_dir, std::int64_t iterations) {
  FUZZ_REQUIRE(iterations > 0, "make_snapshot_fixture: the trainer needs at least one iteration");
  SnapshotFixture s;
  manual_seed(5);
  s.model = std::make_shared<Classifier>(std::make_shared<Linear>(2, 3));
  s.optimizer = std::make_shared<Adam>(0.05);
  s.optimizer->setup(s.model);
  auto iterator = std::make_shared<SerialIterator>(toy_dataset(), 4, true, true, 3);
  auto updater = std::make_shared<StandardUpdater>(iterator, s.optimizer, classifier_loss(s.model));
  s.trainer = std::make_unique<Trainer>(updater, Trigger::iterations(iterations), out_dir, s.model);
  s.log = std::make_shared<LogReport>(Trigger::iterations(1));
  s.trainer->extend(s.log);
  return s;
}

}  // namespace tandem::fuzz

// Fuzz target: the trainer's snapshot reader, training/trainer.h (Trainer::load_snapshot).
//
// The input is a snapshot file (an .npz). Its CRCs are recomputed first
// (fuzz::with_zip_crcs_fixed): the zip layer has its own fuzzer (npz_fuzzer), and this one is
// about what comes after it, turning the arrays into model parameters, optimizer state,
// iterator position and order, RNG state, counters and the LogReport's log. A fresh trainer
// (tests/fuzz/snapshot_fixture.h) loads it; when that succeeds, the loaded state is used: one
// training step, then a snapshot of the result that must load again. The only acceptable
// outcomes are a loaded trainer or a tandem::Error.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "tests/fuzz/fuzz_util.h"
#include "tests/fuzz/snapshot_fixture.h"

using namespace tandem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::init();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes = fuzz::with_zip_crcs_fixed(std::string(reinterpret_cast<const char*>(data), size));
  const std::string dir = fuzz::temp_dir();
  const std::string path = dir + "/snapshot.npz";
  fuzz::write_file(path, bytes.data(), bytes.size());

  fuzz::SnapshotFixture s = fuzz::make_snapshot_fixture(dir + "/out", 1);
  try {
    s.trainer->load_snapshot(path);
  } catch (const Error&) {
    return 0;
  }
  // A state that loads must be usable: train one step and save it; the result must load.
  try {
    s.trainer->updater().update();
  } catch (const Error&) {
    return 0;  // a clear error, but the state may be half-updated: nothing more to check
  }
  const std::string resaved = dir + "/resaved.npz";
  s.trainer->save_snapshot(resaved);
  fuzz::SnapshotFixture again = fuzz::make_snapshot_fixture(dir + "/out", 1);
  again.trainer->load_snapshot(resaved);
  FUZZ_REQUIRE(again.trainer->iteration() == s.trainer->iteration(),
               "snapshot_fuzzer: a resaved snapshot reloads at another iteration");
  return 0;
}

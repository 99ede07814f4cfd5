// ObservationAggregator (chainermn.extensions.ObservationAggregator): a value that every rank
// reports for its own batch ("main/loss") becomes one value for the whole job. Each iteration the
// extension keeps this rank's value of original_key; at every comm_trigger the ranks exchange what
// they kept since the last time, and the aggregate (by default the mean of all the values of all
// the ranks) goes into the iteration's observation as aggregated_key, the same on every rank.
//
//   // main/loss in the log is the mean over the ranks, not rank 0's own
//   trainer.extend(std::make_shared<ObservationAggregator>(comm, "main/loss"));
//   trainer.extend(std::make_shared<LogReport>());
//
// When it runs: in observe(), in the observation phase that follows each update, before
// LogReport's observe() (priority 250 > 200). So LogReport averages the aggregated values over
// its interval, as Chainer's LogReport does after ChainerMN's aggregator edits the observation.
// It sees what the updater reported and what higher-priority extensions added in their own
// observe(); values that extensions add when they fire (the evaluators' "validation/...") come
// after it (MultiNodeEvaluator averages those already). The trigger passed to Trainer::extend is
// not used: comm_trigger decides when the ranks communicate.
//
// Every rank must report original_key at the same iterations: the exchange tells every rank how
// many values every rank kept, and a difference (a rank that never reports it, say) is an error
// on every rank at the comm_trigger, naming the ranks and their counts. No value on any rank is
// no error: nothing is written. The exchange happens at every comm_trigger on every rank (the
// trigger depends only on the iteration and epoch, the same everywhere), so no rank waits alone.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/transport/communicator.h"
#include "training/trainer.h"

namespace tandem {

// The values each rank kept since the last exchange, one list per rank in rank order, each in
// the order of the iterations.
using ObservationHistories = std::vector<std::vector<double>>;

struct ObservationAggregatorOptions {
  // When the ranks exchange their values (ChainerMN's comm_trigger, (1, 'iteration')).
  Trigger comm_trigger = Trigger::iterations(1);
  // The aggregate of the histories (every list has the same length, at least 1). Null: the mean
  // of all the values, summed in rank order, then iteration order. It runs on every rank with the
  // same argument, so it must depend on nothing else (ChainerMN computes it on rank 0 and
  // broadcasts it; a pure function gives the same result with one collective fewer).
  std::function<double(const ObservationHistories&)> aggregator;
};

class ObservationAggregator final : public Extension {
 public:
  // aggregated_key "": the value is replaced in place, under original_key (ChainerMN's default).
  ObservationAggregator(CommunicatorPtr comm, std::string original_key, std::string aggregated_key = "",
                        ObservationAggregatorOptions options = {});
  // Unique per aggregated key, so that two aggregators keep apart in a snapshot.
  std::string name() const override { return "ObservationAggregator/" + aggregated_key_; }
  // ChainerMN's trigger, (1, 'iteration'); operator() does nothing (see the top of this file).
  Trigger default_trigger() const override { return Trigger::iterations(1); }
  int priority() const override { return 250; }
  void observe(Trainer& trainer, const Observation& observation) override;
  void operator()(Trainer&) override {}
  // The values kept since the last exchange (a comm_trigger longer than the snapshot interval).
  NamedTensors state() const override;
  void restore(const NamedTensors& state) override;

 private:
  // The exchange; writes the aggregate into the trainer's observation.
  void aggregate(Trainer& trainer);

  CommunicatorPtr comm_;
  std::string original_key_, aggregated_key_;
  ObservationAggregatorOptions options_;
  std::vector<double> history_;
};

}  // namespace tandem

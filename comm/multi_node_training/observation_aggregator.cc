#include "comm/multi_node_training/observation_aggregator.h"

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/ops.h"

namespace tandem {

namespace {

// ChainerMN's _average_2d: every value of every rank counts once.
double mean_of_all(const ObservationHistories& histories) {
  double sum = 0;
  std::size_t count = 0;
  for (const auto& values : histories) {
    for (double v : values) sum += v;
    count += values.size();
  }
  return sum / static_cast<double>(count);
}

// "rank 1", "ranks 0, 2 and 3" (the first eight, then how many more).
std::string ranks_str(const std::vector<int>& ranks) {
  constexpr std::size_t kNamed = 8;
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  const std::size_t named = std::min(ranks.size(), kNamed);
  for (std::size_t i = 0; i < named; ++i) {
    if (i > 0) out += i + 1 == named && named == ranks.size() ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  if (named < ranks.size()) out += detail::concat(" and ", ranks.size() - named, " more");
  return out;
}

}  // namespace

ObservationAggregator::ObservationAggregator(CommunicatorPtr comm, std::string original_key,
                                             std::string aggregated_key, ObservationAggregatorOptions options)
    : comm_(std::move(comm)),
      original_key_(std::move(original_key)),
      aggregated_key_(aggregated_key.empty() ? original_key_ : std::move(aggregated_key)),
      options_(std::move(options)) {
  TANDEM_CHECK(comm_ != nullptr, "ObservationAggregator: no communicator");
  TANDEM_CHECK(!original_key_.empty(), "ObservationAggregator: the key to aggregate is empty");
  TANDEM_CHECK(options_.comm_trigger.period > 0, "ObservationAggregator('", original_key_,
               "'): comm_trigger's period must be positive, got ", options_.comm_trigger.period);
  if (!options_.aggregator) options_.aggregator = mean_of_all;
}

void ObservationAggregator::observe(Trainer& trainer, const Observation& observation) {
  const auto found = observation.find(original_key_);
  if (found != observation.end()) history_.push_back(found->second);
  if (trainer.fires(options_.comm_trigger)) aggregate(trainer);
}

void ObservationAggregator::aggregate(Trainer& trainer) {
  // One allgather of every rank's values: the lengths say who reported how often, and every
  // rank computes the same aggregate from the same lists.
  const std::vector<Tensor> gathered =
      comm_->allgather(from_vector(history_, {static_cast<std::int64_t>(history_.size())}));
  history_.clear();
  ObservationHistories histories;
  std::map<std::size_t, std::vector<int>> ranks_by_count;
  for (int r = 0; r < comm_->size(); ++r) {
    histories.push_back(gathered[r].to_vector<double>());
    ranks_by_count[histories.back().size()].push_back(r);
  }
  if (ranks_by_count.size() > 1) {
    std::string counts;
    for (const auto& [count, ranks] : ranks_by_count)
      counts += detail::concat(counts.empty() ? "" : "; ", ranks_str(ranks), ": ", count,
                               count == 1 ? " time" : " times");
    TANDEM_FAIL("ObservationAggregator at iteration ", trainer.iteration(), ": the ranks reported '", original_key_,
                "' a different number of times since the last aggregation (", counts,
                "); every rank must report it at the same iterations");
  }
  if (histories.front().empty()) return;  // no rank reported it: nothing to aggregate
  trainer.observation()[aggregated_key_] = options_.aggregator(histories);
}

NamedTensors ObservationAggregator::state() const {
  return {{"history", from_vector(history_, {static_cast<std::int64_t>(history_.size())})}};
}

void ObservationAggregator::restore(const NamedTensors& state) {
  for (const auto& [key, tensor] : state) {
    if (key != "history") continue;
    TANDEM_CHECK(tensor.dtype() == DType::f64 && tensor.dim() == 1, "ObservationAggregator('", original_key_,
                 "'): the saved history must be f64 [n], got ", tensor.description());
    history_ = tensor.to_vector<double>();
  }
}

}  // namespace tandem

#include "training/extensions/reporting.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/ops.h"
#include "layers/serializers/npz.h"

namespace tandem {

namespace {

// A log entry's number. Integral values (epoch, iteration) print as integers; others to 9
// significant digits, the precision of the float32 values averaged, printed by nlohmann as the
// shortest text that reads back as that. NaN and +-Infinity are not JSON, and nlohmann would
// write them as null: they are written as Python's json module writes them, so that a diverged
// run's log still loads, with its values.
std::string json_number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == std::floor(v) && std::abs(v) < 1e15) return nlohmann::json(static_cast<long long>(v)).dump();
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return nlohmann::json(std::strtod(buffer, nullptr)).dump();
}

// One entry of the log: one line, {"key": value, ...} in key order, with Python's json.dumps
// separators (nlohmann's dump has no one-line layout with them). Keys are escaped by nlohmann;
// bytes that are not UTF-8 become U+FFFD rather than an invalid file.
std::string json_entry(const Observation& entry) {
  std::string line = "{";
  for (const auto& [key, value] : entry) {
    if (line.size() > 1) line += ", ";
    line += nlohmann::json(key).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + ": " +
            json_number(value);
  }
  return line + "}";
}

std::string format_duration(double seconds) {
  if (!(seconds >= 0) || seconds > 1e8) return "--:--:--";
  const auto s = static_cast<long long>(seconds);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return buffer;
}

}  // namespace

// ---- LogReport ----

LogReport::LogReport(Trigger trigger, std::string filename) : trigger_(trigger), filename_(std::move(filename)) {}

void LogReport::observe(Trainer&, const Observation& observation) {
  for (const auto& [key, value] : observation) {
    sums_[key] += value;
    ++counts_[key];
  }
}

void LogReport::operator()(Trainer& trainer) {
  Observation entry;
  for (const auto& [key, sum] : sums_) entry[key] = sum / static_cast<double>(counts_[key]);
  // Values other extensions reported at this iteration (validation results) are taken as is.
  for (const auto& [key, value] : trainer.observation())
    if (!sums_.count(key)) entry[key] = value;
  entry["epoch"] = static_cast<double>(trainer.updater().epoch());
  entry["iteration"] = static_cast<double>(trainer.iteration());
  entry["elapsed_time"] = trainer.elapsed_seconds();
  sums_.clear();
  counts_.clear();
  log_json_.push_back("  " + json_entry(entry));
  log_.push_back(std::move(entry));
  write(trainer);
}

void LogReport::write(const Trainer& trainer) const {
  std::string text = "[\n";
  for (std::size_t i = 0; i < log_json_.size(); ++i) text += log_json_[i] + (i + 1 < log_json_.size() ? ",\n" : "\n");
  write_file_atomically(trainer.out() + "/" + filename_, text + "]\n");
}

NamedTensors LogReport::state() const {
  std::string joined;
  for (const auto& line : log_json_) joined += line + "\n";
  // The entry in progress (a snapshot mid-interval): its sums and counts so far, exactly.
  std::string keys;
  std::vector<double> sums;
  std::vector<std::int64_t> counts;
  for (const auto& [key, sum] : sums_) {
    keys += key + "\n";
    sums.push_back(sum);
    counts.push_back(counts_.at(key));
  }
  const auto n = static_cast<std::int64_t>(sums.size());
  return {{"log_json", string_to_tensor(joined)},
          {"pending_keys", string_to_tensor(keys)},
          {"pending_sums", from_vector(sums, {n})},
          {"pending_counts", from_vector(counts, {n})}};
}

void LogReport::restore(const NamedTensors& state) {
  std::vector<std::string> pending_keys;
  std::vector<double> pending_sums;
  std::vector<std::int64_t> pending_counts;
  for (const auto& [key, tensor] : state) {
    if (key == "log_json") {
      log_json_.clear();
      std::istringstream lines(tensor_to_string(tensor));
      for (std::string line; std::getline(lines, line);)
        if (!line.empty()) log_json_.push_back(line);
    } else if (key == "pending_keys") {
      std::istringstream lines(tensor_to_string(tensor));
      for (std::string line; std::getline(lines, line);) pending_keys.push_back(line);
    } else if (key == "pending_sums") {
      pending_sums = tensor.to(DType::f64).to_vector<double>();
    } else if (key == "pending_counts") {
      pending_counts = tensor.to(DType::i64).to_vector<std::int64_t>();
    }
  }
  // Snapshots written before the entry in progress was kept restore none (as they did).
  TANDEM_CHECK(pending_keys.size() == pending_sums.size() && pending_keys.size() == pending_counts.size(),
               "LogReport: the snapshot's entry in progress has ", pending_keys.size(), " keys, ",
               pending_sums.size(), " sums and ", pending_counts.size(), " counts");
  sums_.clear();
  counts_.clear();
  for (std::size_t i = 0; i < pending_keys.size(); ++i) {
    sums_[pending_keys[i]] = pending_sums[i];
    counts_[pending_keys[i]] = pending_counts[i];
  }
}

// ---- PrintReport ----

PrintReport::PrintReport(std::shared_ptr<LogReport> log, std::vector<std::string> entries, std::FILE* out)
    : log_(std::move(log)), entries_(std::move(entries)), out_(out) {
  TANDEM_CHECK(log_ != nullptr, "PrintReport: needs the LogReport it prints");
}

void PrintReport::operator()(Trainer&) {
  if (!header_printed_) {
    for (const auto& e : entries_) std::fprintf(out_, "%-*s", static_cast<int>(std::max<std::size_t>(e.size() + 2, 12)), e.c_str());
    std::fprintf(out_, "\n");
    header_printed_ = true;
  }
  const auto& log = log_->log();
  for (; printed_ < log.size(); ++printed_) {
    for (const auto& e : entries_) {
      const int width = static_cast<int>(std::max<std::size_t>(e.size() + 2, 12));
      auto it = log[printed_].find(e);
      if (it == log[printed_].end()) std::fprintf(out_, "%-*s", width, "");
      else if (e == "epoch" || e == "iteration") std::fprintf(out_, "%-*lld", width, static_cast<long long>(it->second));
      else std::fprintf(out_, "%-*.6g", width, it->second);
    }
    std::fprintf(out_, "\n");
  }
  std::fflush(out_);
}

// ---- ProgressBar ----

ProgressBar::ProgressBar(std::int64_t update_interval, std::FILE* out)
    : interval_(update_interval), out_(out), terminal_(::isatty(::fileno(out)) != 0) {
  TANDEM_CHECK(update_interval > 0, "ProgressBar: update_interval must be positive");
}

void ProgressBar::operator()(Trainer& trainer) {
  examples_since_ += trainer.updater().last_batch_size();
  // On a terminal the bar is redrawn in place; in a log file it is printed 20 times a run.
  const std::int64_t it = trainer.iteration();
  const Trigger& stop = trainer.stop_trigger();
  const double fraction = stop.unit == Trigger::Unit::epoch
                              ? trainer.updater().epoch_detail() / static_cast<double>(stop.period)
                              : static_cast<double>(it) / static_cast<double>(stop.period);
  const auto bucket = static_cast<std::int64_t>(fraction * 20);
  const bool due = terminal_ ? it % interval_ == 0 : bucket != last_bucket_;
  if (!due) return;
  last_bucket_ = bucket;
  const double now = trainer.elapsed_seconds();
  const double speed = last_time_ >= 0 && now > last_time_ ? static_cast<double>(examples_since_) / (now - last_time_) : 0;
  const double eta = fraction > 0 ? now / std::min(fraction, 1.0) - now : -1;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(std::min(fraction, 1.0) * kWidth);
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::fprintf(out_, "%s[%s] %5.1f%%  iter %lld  epoch %lld  %.0f items/s  ETA %s%s", terminal_ ? "\r" : "",
               bar.c_str(), 100 * std::min(fraction, 1.0), static_cast<long long>(it),
               static_cast<long long>(trainer.updater().epoch()), speed, format_duration(eta).c_str(),
               terminal_ ? "   " : "\n");
  std::fflush(out_);
  last_time_ = now;
  examples_since_ = 0;
}

void ProgressBar::finalize(Trainer&) {
  if (terminal_) std::fprintf(out_, "\n");
}

// ---- snapshots ----

SnapshotWriter::SnapshotWriter(std::string prefix) : prefix_(std::move(prefix)) {}

void SnapshotWriter::operator()(Trainer& trainer) {
  trainer.save_snapshot(trainer.out() + "/" + prefix_ + std::to_string(trainer.iteration()) + ".npz");
}

std::string latest_snapshot(const std::string& dir, const std::string& prefix) {
  DIR* handle = ::opendir(dir.c_str());
  if (!handle) return "";
  std::string best;
  long long best_iteration = -1;
  while (dirent* e = ::readdir(handle)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0 || name.size() < prefix.size() + 5) continue;
    if (name.compare(name.size() - 4, 4, ".npz") != 0) continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15) continue;
    const long long iteration = std::stoll(digits);
    if (iteration > best_iteration) {
      best_iteration = iteration;
      best = dir + "/" + name;
    }
  }
  ::closedir(handle);
  return best;
}

}  // namespace tandem

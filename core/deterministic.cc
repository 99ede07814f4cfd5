#include "core/deterministic.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace tandem {

namespace {

std::int64_t env_int(const char* name, std::int64_t fallback, std::int64_t lowest) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  TANDEM_CHECK(*end == 0 && value >= lowest, name, "='", text, "': expected an integer >= ", lowest);
  return value;
}

// TANDEM_DETERMINISTIC=1 (or "true", "on"); 0, "false", "off" or unset: off. The CUDA backend
// reads the same variable (cuda/cuda.h): its convolutions are deterministic unless it says 0.
bool env_on(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == 0) return false;
  const std::string v = text;
  if (v == "1" || v == "true" || v == "on") return true;
  TANDEM_CHECK(v == "0" || v == "false" || v == "off", name, "='", text, "': expected 1, true, on, 0, false or off");
  return false;
}

std::atomic<int>& mode() {
  static std::atomic<int> on{env_on("TANDEM_DETERMINISTIC") ? 1 : 0};
  return on;
}

std::atomic<std::int64_t>& group_size() {
  static std::atomic<std::int64_t> examples{env_int("TANDEM_DETERMINISTIC_GROUP", 0, 0)};
  return examples;
}

std::atomic<std::int64_t> groups{0};

}  // namespace

bool deterministic() { return mode().load(std::memory_order_relaxed) != 0; }
void set_deterministic(bool on) { mode() = on ? 1 : 0; }

std::int64_t deterministic_group_size() { return group_size().load(); }
void set_deterministic_group_size(std::int64_t examples) {
  TANDEM_CHECK(examples >= 0, "set_deterministic_group_size: ", examples, " examples; 0 (batches unsplit) or more");
  group_size() = examples;
}

void record_gradient_group() { ++groups; }
std::int64_t gradient_groups() { return groups.load(); }
void reset_gradient_groups() { groups = 0; }

}  // namespace tandem

#include "training/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "core/kernel_choices.h"
#include "core/ops.h"
#include "core/process_label.h"
#include "core/random.h"
#include "core/timeline.h"
#include "layers/serializers/serializers.h"

namespace tandem {

namespace {

void make_directories(const std::string& path) {
  std::string partial;
  for (std::size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && ::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
        TANDEM_FAIL("Trainer: cannot create the output directory '", path, "': ", std::strerror(errno));
    }
    if (i < path.size()) partial.push_back(path[i]);
  }
}

Tensor scalar_i64(std::int64_t v) { return full({}, static_cast<double>(v), DType::i64); }

bool has_entry(const NamedTensors& entries, const std::string& name) {
  return std::any_of(entries.begin(), entries.end(), [&](const auto& e) { return e.first == name; });
}

const Tensor& entry(const NamedTensors& entries, const std::string& name, const std::string& path) {
  for (const auto& e : entries)
    if (e.first == name) return e.second;
  TANDEM_FAIL("load_snapshot: ", path, " has no entry '", name, "' (not a tandem trainer snapshot?)");
}

// Counters and indices are read as integers: a float entry (NaN, 1e300) does not convert to one.
std::vector<std::int64_t> integers(const NamedTensors& entries, const std::string& name, const std::string& path) {
  const Tensor& tensor = entry(entries, name, path);
  TANDEM_CHECK(tensor.dtype() == DType::i64 || tensor.dtype() == DType::i32, "load_snapshot: ", path, ": '", name,
               "' must hold integers, got ", tensor.description());
  return tensor.to_vector<std::int64_t>();
}

// A counter is below 2^53: it is reported as a double, and the next step must not overflow it.
std::int64_t counter(const NamedTensors& entries, const std::string& name, const std::string& path) {
  const std::vector<std::int64_t> values = integers(entries, name, path);
  TANDEM_CHECK(values.size() == 1 && values[0] >= 0 && values[0] < (std::int64_t(1) << 53), "load_snapshot: ", path,
               ": '", name, "' must be one count in [0, 2^53), got ", entry(entries, name, path));
  return values[0];
}

}  // namespace

std::shared_ptr<void> Trainer::gather_parameters() const {
  Optimizer& optimizer = updater_->optimizer();
  if (!optimizer.gradient_sync() || !optimizer.has_target()) return nullptr;
  return optimizer.gradient_sync()->gather_parameters(*optimizer.target());
}

Trainer::Trainer(std::shared_ptr<StandardUpdater> updater, Trigger stop, std::string out_dir, std::shared_ptr<Link> model)
    : updater_(std::move(updater)), stop_(stop), out_(std::move(out_dir)), model_(std::move(model)) {
  TANDEM_CHECK(updater_ && model_, "Trainer: updater and model are required");
  TANDEM_CHECK(stop_.period > 0, "Trainer: the stop trigger must be positive, got ", stop_.period);
  make_directories(out_);
}

void Trainer::extend(std::shared_ptr<Extension> extension) {
  const Trigger trigger = extension->default_trigger();
  extend(std::move(extension), trigger);
}

void Trainer::extend(std::shared_ptr<Extension> extension, Trigger trigger) {
  TANDEM_CHECK(extension != nullptr, "Trainer::extend: null extension");
  TANDEM_CHECK(trigger.period > 0, "Trainer::extend: ", extension->name(), ": trigger period must be positive");
  extensions_.push_back({std::move(extension), trigger});
  std::stable_sort(extensions_.begin(), extensions_.end(), [](const Entry& a, const Entry& b) {
    return a.extension->priority() > b.extension->priority();
  });
}

std::vector<std::shared_ptr<Extension>> Trainer::extensions() const {
  std::vector<std::shared_ptr<Extension>> out;
  for (const Entry& e : extensions_) out.push_back(e.extension);
  return out;
}

bool Trainer::fires(const Trigger& trigger) const {
  if (trigger.unit == Trigger::Unit::iteration) return updater_->iteration() % trigger.period == 0;
  return updater_->is_new_epoch() && updater_->epoch() % trigger.period == 0;
}

bool Trainer::done() const {
  if (stop_.unit == Trigger::Unit::iteration) return updater_->iteration() >= stop_.period;
  return updater_->epoch() >= stop_.period;
}

double Trainer::elapsed_seconds() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void Trainer::run() {
  start_ = std::chrono::steady_clock::now();
  while (!done()) {
    {
      // The timeline's spans of this update carry its number (the iteration it makes).
      timeline::set_iteration(updater_->iteration() + 1);
      const timeline::SpanScope span(
          "train", timeline::enabled() ? "iteration " + std::to_string(updater_->iteration() + 1) : std::string());
      observation_ = updater_->update();
    }
    inject_fault_if_requested("update", updater_->iteration());
    for (auto& e : extensions_) e.extension->observe(*this, observation_);
    for (auto& e : extensions_)
      if (fires(e.trigger)) (*e.extension)(*this);
  }
  for (auto& e : extensions_) e.extension->finalize(*this);
}

void Trainer::save_snapshot(const std::string& path) const {
  // Parameters sharded over ranks (zero = 3) are gathered whole for the snapshot.
  const std::shared_ptr<void> whole = gather_parameters();
  NamedTensors entries = with_prefix(link_state(*model_), "model");
  for (auto& e : with_prefix(updater_->optimizer().state_dict(), "optimizer")) entries.push_back(e);
  const IteratorState it = updater_->iterator().state();
  entries.emplace_back("iterator/epoch", scalar_i64(it.epoch));
  entries.emplace_back("iterator/position", scalar_i64(it.position));
  entries.emplace_back("iterator/is_new_epoch", scalar_i64(it.is_new_epoch));
  entries.emplace_back("iterator/previous_epoch_detail", full({}, it.previous_epoch_detail, DType::f64));
  entries.emplace_back("iterator/order", from_vector(it.order, {static_cast<std::int64_t>(it.order.size())}));
  entries.emplace_back("iterator/rng", string_to_tensor(it.rng));
  entries.emplace_back("trainer/iteration", scalar_i64(updater_->iteration()));
  entries.emplace_back("trainer/elapsed_time", full({}, elapsed_seconds(), DType::f64));
  // The default random stream (dropout, initialisers of layers built later), and the kernels
  // this run computed with (core/kernel_choices.h): a resumed run draws and rounds alike.
  entries.emplace_back("trainer/random_state", string_to_tensor(global_generator().state()));
  entries.emplace_back("trainer/kernel_choices", string_to_tensor(kernel_choices_text()));
  for (const auto& e : extensions_)
    for (auto& s : with_prefix(e.extension->state(), "extensions/" + e.extension->name())) entries.push_back(s);
  write_npz(path, entries);
}

void Trainer::load_snapshot(const std::string& path) {
  const NamedTensors entries = read_npz(path);
  // Sharded parameters (zero = 3) are loaded whole, then sharded again from what was loaded.
  const std::shared_ptr<void> whole = gather_parameters();
  load_link_state(*model_, with_prefix_removed(entries, "model"), true, path);
  updater_->optimizer().load_state_dict(with_prefix_removed(entries, "optimizer"));
  IteratorState it;
  it.epoch = counter(entries, "iterator/epoch", path);
  it.position = counter(entries, "iterator/position", path);
  it.is_new_epoch = entry(entries, "iterator/is_new_epoch", path).item() != 0;
  it.previous_epoch_detail = entry(entries, "iterator/previous_epoch_detail", path).item();
  it.order = integers(entries, "iterator/order", path);
  it.rng = tensor_to_string(entry(entries, "iterator/rng", path));
  updater_->iterator().restore(it);
  updater_->set_iteration(counter(entries, "trainer/iteration", path));
  elapsed_before_ = entry(entries, "trainer/elapsed_time", path).item();
  // Snapshots written before these entries existed resume without them.
  if (has_entry(entries, "trainer/random_state"))
    global_generator().set_state(tensor_to_string(entry(entries, "trainer/random_state", path)));
  if (has_entry(entries, "trainer/kernel_choices"))
    pin_kernel_choices(tensor_to_string(entry(entries, "trainer/kernel_choices", path)));
  for (auto& e : extensions_) e.extension->restore(with_prefix_removed(entries, "extensions/" + e.extension->name()));
}

namespace {

struct FaultPlan {
  bool armed = false;
  int rank = -1;
  std::int64_t iteration = -1;
  std::string point = "update";
  std::string action = "throw";
};

FaultPlan parse_fault_plan(const std::string& text) {
  FaultPlan plan;
  const auto bad = [&text](const std::string& why) {
    TANDEM_FAIL("TANDEM_FAULT_INJECT='", text, "': ", why,
                " (expected rank=R,iteration=N[,point=update|snapshot][,action=throw|kill])");
  };
  std::istringstream fields(text);
  std::string field;
  while (std::getline(fields, field, ',')) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) bad("'" + field + "' is not key=value");
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    const auto number = [&]() -> std::int64_t {
      if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 15)
        bad(key + " must be a non-negative integer");
      return std::stoll(value);
    };
    if (key == "rank") {
      plan.rank = static_cast<int>(number());
    } else if (key == "iteration") {
      plan.iteration = number();
    } else if (key == "point") {
      if (value != "update" && value != "snapshot") bad("point is update or snapshot");
      plan.point = value;
    } else if (key == "action") {
      if (value != "throw" && value != "kill") bad("action is throw or kill");
      plan.action = value;
    } else {
      bad("unknown key '" + key + "'");
    }
  }
  if (plan.rank < 0 || plan.iteration < 0) bad("rank and iteration are required");
  plan.armed = true;
  return plan;
}

}  // namespace

void inject_fault_if_requested(const std::string& point, std::int64_t iteration) {
  static const FaultPlan plan = [] {
    const char* text = std::getenv("TANDEM_FAULT_INJECT");
    return text && *text ? parse_fault_plan(text) : FaultPlan{};
  }();
  if (!plan.armed || plan.iteration != iteration || plan.point != point) return;
  static const int rank = launcher_rank();
  if (plan.rank != rank) return;
  if (plan.action == "kill") {
    std::fflush(nullptr);
    ::kill(::getpid(), SIGKILL);
  }
  TANDEM_FAIL("injected fault (TANDEM_FAULT_INJECT) on rank ", rank, " at iteration ", iteration, " (", point, ")");
}

}  // namespace tandem

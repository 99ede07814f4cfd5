#include "examples/common/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "cuda/cuda.h"

namespace tandem {
namespace examples {

namespace {

// Under mpiexec every rank parses the same command line; only the first one prints the help.
// MPICH's launcher sets PMI_RANK, Open MPI's OMPI_COMM_WORLD_RANK; outside MPI neither is set.
bool first_process() {
  for (const char* variable : {"PMI_RANK", "OMPI_COMM_WORLD_RANK"}) {
    const char* rank = std::getenv(variable);
    if (rank && std::string(rank) != "0") return false;
  }
  return true;
}

}  // namespace

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), app_(std::make_unique<CLI::App>(std::move(description), program_)) {
  // What CLI11 does not recognise is left in remaining(), for parse() to name.
  app_->allow_extras();
}

Flags::~Flags() = default;

void Flags::add(const std::string& name, Kind kind, std::string value, const std::string& help) {
  TANDEM_CHECK(!flags_.count(name), program_, ": flag --", name, " is defined twice");
  Flag& f = flags_[name];
  f = {kind, std::move(value)};
  app_->add_option("--" + name, f.value, help)
      ->capture_default_str()  // --help shows it
      ->type_name(kind == Kind::integer ? "INT"
                  : kind == Kind::real  ? "FLOAT"
                                        : "TEXT")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  order_.push_back(name);
}

void Flags::add_int(const std::string& name, long long value, const std::string& help) {
  add(name, Kind::integer, std::to_string(value), help);
}

void Flags::add_double(const std::string& name, double value, const std::string& help) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  add(name, Kind::real, buffer, help);
}

void Flags::add_string(const std::string& name, const std::string& value, const std::string& help) {
  add(name, Kind::text, value, help);
}

bool Flags::parse(int argc, char** argv) {
  try {
    app_->parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    if (first_process()) std::printf("%s", app_->help().c_str());
    return false;
  } catch (const CLI::ArgumentMismatch& e) {  // "--epoch: 1 required INT missing"
    const std::string what = e.what();
    TANDEM_FAIL(program_, ": flag ", what.substr(0, what.find(':')), " needs a value (see --help)");
  } catch (const CLI::ParseError& e) { TANDEM_FAIL(program_, ": ", e.what(), " (see --help)"); }
  const std::vector<std::string> extra = app_->remaining();
  if (!extra.empty()) {
    const std::string& arg = extra.front();
    TANDEM_CHECK(arg.rfind("--", 0) != 0, program_, ": unknown flag ", arg.substr(0, arg.find('=')), " (see --help)");
    TANDEM_FAIL(program_, ": unexpected argument '", arg, "' (see --help)");
  }
  // CLI11 only stores the text: numbers are read here, as decimal and in range (CLI11's own
  // conversion would take "010" as octal and let an overflow through).
  for (const auto& name : order_) {
    const Flag& f = flags_.at(name);
    if (f.kind == Kind::text) continue;
    errno = 0;
    char* end = nullptr;
    if (f.kind == Kind::integer) (void)std::strtoll(f.value.c_str(), &end, 10);
    else (void)std::strtod(f.value.c_str(), &end);
    TANDEM_CHECK(!f.value.empty() && *end == '\0' && errno == 0, program_, ": flag --", name, " needs ",
                 f.kind == Kind::integer ? "an integer" : "a number", ", got '", f.value, "'");
  }
  return true;
}

const Flags::Flag& Flags::flag(const std::string& name, Kind kind) const {
  auto it = flags_.find(name);
  TANDEM_CHECK(it != flags_.end() && it->second.kind == kind, program_, ": no flag --", name, " of that type");
  return it->second;
}

long long Flags::get_int(const std::string& name) const {
  return std::strtoll(flag(name, Kind::integer).value.c_str(), nullptr, 10);
}

double Flags::get_double(const std::string& name) const {
  return std::strtod(flag(name, Kind::real).value.c_str(), nullptr);
}

const std::string& Flags::get_string(const std::string& name) const { return flag(name, Kind::text).value; }

bool Flags::given(const std::string& name) const {
  TANDEM_CHECK(flags_.count(name), program_, ": no flag --", name);
  return app_->count("--" + name) > 0;
}

long long pipeline_stages_per_rank(const Flags& flags) {
  if (flags.given("stages-per-rank")) return flags.get_int("stages-per-rank");
  return flags.get_string("schedule") == "zbv" ? 2 : 1;
}

int parse_command_line(Flags& flags, int argc, char** argv, const std::string& program,
                       std::initializer_list<const char*> positive) {
  try {
    if (!flags.parse(argc, argv)) return 0;
    for (const char* name : positive)
      TANDEM_CHECK(flags.get_int(name) > 0, program, ": --", name, " must be positive, got ", flags.get_int(name));
    training_device(flags, program);
    return -1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}

Device training_device(const Flags& flags, const std::string& program) {
  const long long gpu = flags.get_int("gpu");
  if (gpu == -1) return Device::cpu();
  TANDEM_CHECK(gpu >= 0 && gpu < (1 << 16), program, ": --gpu must be -1 (the CPU) or a device index, got ", gpu);
  const std::string what = program + " --gpu " + std::to_string(gpu);
  cuda::require_device(static_cast<int>(gpu), what.c_str());
  return Device::cuda(static_cast<int>(gpu));
}

Device training_device(const Flags& flags, const std::string& program, int intra_rank) {
  if (flags.get_int("gpu") == -1) return Device::cpu();
  training_device(flags, program);  // validates the flag and that there is a GPU at all
  return Device::cuda(intra_rank % cuda::device_count());
}

void add_communicator_flag(Flags& flags) {
  flags.add_string("communicator", "naive",
                   "naive (MPI; GPU tensors through host memory), hierarchical (naive, allreduce summed within each "
                   "host first) or pure_nccl (NCCL between GPUs, one per rank)");
}

void add_dtype_flag(Flags& flags) {
  flags.add_string("dtype", "f32",
                   "training precision: f32, mixed_bf16 (f32 parameters, products in bf16), mixed_f16 (the same "
                   "in f16, with dynamic loss scaling), bf16 or f16 (the parameters too in 16 bits, f32 master "
                   "copies in the optimizer)");
}

}  // namespace examples
}  // namespace tandem

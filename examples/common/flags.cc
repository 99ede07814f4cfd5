#include "examples/common/flags.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "cuda/cuda.h"

namespace tandem {
namespace examples {

Flags::Flags(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void Flags::check_new(const std::string& name) const {
  TANDEM_CHECK(!flags_.count(name), program_, ": flag --", name, " is defined twice");
}

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

void Flags::add_int(const std::string& name, long long value, const std::string& help) {
  check_new(name);
  flags_[name] = {Kind::integer, std::to_string(value), help};
  order_.push_back(name);
}

void Flags::add_double(const std::string& name, double value, const std::string& help) {
  check_new(name);
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  flags_[name] = {Kind::real, buffer, help};
  order_.push_back(name);
}

void Flags::add_string(const std::string& name, const std::string& value, const std::string& help) {
  check_new(name);
  flags_[name] = {Kind::text, value, help};
  order_.push_back(name);
}

bool Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      if (!first_process()) return false;
      std::printf("usage: %s [flags]\n%s\n\n", program_.c_str(), description_.c_str());
      for (const auto& name : order_) {
        const Flag& f = flags_.at(name);
        std::printf("  --%-14s %s (default: %s)\n", name.c_str(), f.help.c_str(),
                    f.value.empty() ? "none" : f.value.c_str());
      }
      return false;
    }
    TANDEM_CHECK(arg.rfind("--", 0) == 0, program_, ": unexpected argument '", arg, "' (see --help)");
    std::string name = arg.substr(2), value;
    const auto equals = name.find('=');
    if (equals != std::string::npos) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    } else {
      TANDEM_CHECK(i + 1 < argc, program_, ": flag --", name, " needs a value (see --help)");
      value = argv[++i];
    }
    auto it = flags_.find(name);
    TANDEM_CHECK(it != flags_.end(), program_, ": unknown flag --", name, " (see --help)");
    if (it->second.kind != Kind::text) {
      errno = 0;
      char* end = nullptr;
      if (it->second.kind == Kind::integer) (void)std::strtoll(value.c_str(), &end, 10);
      else (void)std::strtod(value.c_str(), &end);
      TANDEM_CHECK(!value.empty() && *end == '\0' && errno == 0, program_, ": flag --", name, " needs ",
                   it->second.kind == Kind::integer ? "an integer" : "a number", ", got '", value, "'");
    }
    it->second.value = value;
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
                   "naive (MPI; GPU tensors through host memory) or pure_nccl (NCCL between GPUs, one per rank)");
}

}  // namespace examples
}  // namespace tandem

// The examples' command-line flags, in the style of Chainer's argparse flags: `--epoch 10` or
// `--epoch=10`, `--out result`, parsed by CLI11 (kept out of this header). Unknown flags and bad
// values are errors with a one-line message; a flag given twice takes its last value.
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace CLI {
class App;
}  // namespace CLI

namespace tandem {
namespace examples {

class Flags {
 public:
  explicit Flags(std::string program, std::string description);
  ~Flags();

  // Declares a flag with its default (shown in --help).
  void add_int(const std::string& name, long long default_value, const std::string& help);
  void add_double(const std::string& name, double default_value, const std::string& help);
  void add_string(const std::string& name, const std::string& default_value, const std::string& help);

  // Parses argv. Returns false after --help (or -h), which prints the flags with their defaults
  // (only on the first process under mpiexec); throws tandem::Error on a bad flag.
  bool parse(int argc, char** argv);

  long long get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  // Whether the command line gave the flag (rather than leaving its default).
  bool given(const std::string& name) const;

 private:
  enum class Kind { integer, real, text };
  struct Flag {
    Kind kind;
    std::string value;  // CLI11 writes the given value here (std::map keeps its address)
  };
  void add(const std::string& name, Kind kind, std::string value, const std::string& help);
  const Flag& flag(const std::string& name, Kind kind) const;

  std::string program_;
  std::unique_ptr<CLI::App> app_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;  // numbers are checked in this order
};

// Parses a trainer's command line before MPI starts, so that a bad one ends every process with
// one plain line: each flag named in `positive` must be > 0, and --gpu must name a device this
// build has (training_device). Returns -1 to go on, or the status for main to return: 0 after
// --help, 1 after an error (printed to stderr).
int parse_command_line(Flags& flags, int argc, char** argv, const std::string& program,
                       std::initializer_list<const char*> positive = {});

// The pipeline trainers' --stages-per-rank for their --schedule: the flag when the command line
// gives it, else the stages per rank the schedule holds (zbv 2, in its V; every other schedule
// 1). A given value the schedule does not take is left for pipeline::schedule_by_name to report
// ("pipeline schedule 'zbv' holds 2 stages per rank, got 1 stages per rank").
long long pipeline_stages_per_rank(const Flags& flags);

// The device that the trainers' --gpu flag (an int, -1 for the CPU) selects: cuda:<gpu>. A GPU
// that this build (no --config=cuda) or this machine does not have is an error naming the
// program and the reason.
Device training_device(const Flags& flags, const std::string& program);
// The same for a process of a multi-rank trainer: with --gpu >= 0 every rank takes the GPU of
// its index among the ranks on its host (ChainerMN's `device = comm.intra_rank`), modulo the
// number of GPUs, so that ranks share GPUs when there are fewer GPUs than ranks ("naive" allows
// that; "pure_nccl" refuses it with an error).
Device training_device(const Flags& flags, const std::string& program, int intra_rank);

// --dtype: the training precision, f32 (the default), mixed_bf16 or mixed_f16
// (training/mixed_precision.h reads the name).
void add_dtype_flag(Flags& flags);

// --communicator for the multi-rank trainers: "naive" (MPI; GPU tensors through host memory,
// the default), "hierarchical" (naive whose allreduce sums within each host first: data
// parallelism over several hosts) or "pure_nccl" (NCCL between GPUs; needs --gpu and a GPU per
// rank).
void add_communicator_flag(Flags& flags);

}  // namespace examples
}  // namespace tandem

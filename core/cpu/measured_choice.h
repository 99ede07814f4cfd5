// Choosing among kernels on the machine the program runs on: the GEMM library per shape class
// (gemm_choice.h), oneDNN's convolution, Winograd or im2col per geometry (conv.cc), the packing
// break-even (packed_weights.h), the parallel grain (parallel.h).
//
// A choice has a key (what it is for, e.g. "gemm.f32.t2.NT.m6.n9.k9"), named candidates and a
// fixed default. How it is answered follows core/kernel_choices.h: a choice pinned by a resumed
// snapshot first; then, under TANDEM_KERNEL_TUNING=fixed (the default), the line of
// TANDEM_KERNEL_CHOICES=<file> or the fixed default, never a timing; under =measure, the
// machine's file, else the candidates are timed and the fastest is written down with every
// candidate's figure. One file per machine (processor, instruction sets, library versions,
// OpenBLAS's kernel family and build flags), shared by every process: ranks on one machine take
// turns (a file lock) and agree. A measurement during which other processes kept the cores busy
// (more than a quarter of the machine, from /proc/stat) serves this process only: it is not
// written down, so a busy moment does not decide for good.
//
//   TANDEM_CACHE_DIR=dir   where the measured file is kept (default $XDG_CACHE_HOME/tandem, else
//                          $HOME/.cache/tandem, else $TEST_TMPDIR/tandem-cache under Bazel's
//                          tests, else /tmp/tandem-cache-<uid>; with none writable, a warning,
//                          and the choices last for the process)
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tandem {
namespace cpu {

// The index of the chosen candidate among `names`. `measure` returns each candidate's seconds
// (in names' order); `flops` (the work of one run, or 0) lets the file show GFLOP/s instead of
// microseconds; `detail` is written at the line's end (e.g. the timed shape).
// `fixed` is the candidate taken without timing (TANDEM_KERNEL_TUNING=fixed).
// `recorded` (when given) says whether the answer is the kept one: false for the fixed candidate
// given to a worker of a parallel region while another thread measures (ask again later).
std::size_t measured_choice(const std::string& key, const std::vector<std::string>& names,
                            const std::function<std::vector<double>()>& measure, double flops,
                            const std::string& detail, bool* recorded = nullptr, std::size_t fixed = 0);

// A measured setting rather than a choice among named candidates (e.g. how many products a
// packed copy of a weight must serve to pay for its packing, core/cpu/packed_weights.h): kept in
// the same file, under the same locks. `measure` returns the word to keep (no spaces) and the
// figures to write beside it; a kept word that `accept` refuses is measured again. `fixed` is the
// word without timing (TANDEM_KERNEL_TUNING=fixed). "" only for a worker of a parallel region
// while another thread measures (the caller takes its default for that one call).
std::string measured_word(const std::string& key, const std::function<bool(const std::string&)>& accept,
                          const std::function<std::pair<std::string, std::string>()>& measure,
                          const std::string& fixed);

// Whether a measurement taken while other processes kept the cores busy is kept all the same
// (false by default; TANDEM_KERNEL_TIMING_UNDER_LOAD=keep sets it): the tests that read the
// file's lines run beside other tests.
void keep_measurements_under_load(bool keep);

// The machine's file ("" when no cache folder could be made).
std::string measured_choice_file();

// The seconds of each candidate's fastest round: `rounds` rounds, each running every candidate
// `repeats` times in turn (interleaved, so that a burst of noise hits them alike), after one
// warm-up run each.
std::vector<double> time_interleaved(std::size_t candidates, const std::function<void(std::size_t)>& run, int rounds,
                                     int repeats);

}  // namespace cpu
}  // namespace tandem

// Choosing among kernels by measurement on the machine the program runs on: the GEMM library
// per shape class (gemm_choice.h), oneDNN's convolution, Winograd or im2col per geometry (conv.cc).
//
// A choice has a key (what it is for, e.g. "gemm.f32.t2.NT.m6.n9.k9") and named candidates. At
// the key's first use in a process it is looked up in the machine's file; when missing, the
// candidates are timed and the fastest is written down with every candidate's figure. One file
// per machine (processor, instruction sets, library versions, OpenBLAS's kernel family and build
// flags), shared by every process: ranks on one machine take turns (a file lock) and agree, and
// a rerun or a resumed run computes with the same kernels, hence the same rounding.
//
//   TANDEM_CACHE_DIR=dir   where the file is kept (default $XDG_CACHE_HOME/tandem, else
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
// `recorded` (when given) says whether the answer is the kept one: false for candidate 0 given
// to a worker of a parallel region while another thread measures (ask again later).
std::size_t measured_choice(const std::string& key, const std::vector<std::string>& names,
                            const std::function<std::vector<double>()>& measure, double flops,
                            const std::string& detail, bool* recorded = nullptr);

// A measured setting rather than a choice among named candidates (e.g. how many products a
// packed copy of a weight must serve to pay for its packing, core/cpu/packed_weights.h): kept in
// the same file, under the same locks. `measure` returns the word to keep (no spaces) and the
// figures to write beside it; a kept word that `accept` refuses is measured again.
std::string measured_word(const std::string& key, const std::function<bool(const std::string&)>& accept,
                          const std::function<std::pair<std::string, std::string>()>& measure);

// The machine's file ("" when no cache folder could be made).
std::string measured_choice_file();

// The seconds of each candidate's fastest round: `rounds` rounds, each running every candidate
// `repeats` times in turn (interleaved, so that a burst of noise hits them alike), after one
// warm-up run each.
std::vector<double> time_interleaved(std::size_t candidates, const std::function<void(std::size_t)>& run, int rounds,
                                     int repeats);

}  // namespace cpu
}  // namespace tandem

// How the CPU kernels are chosen, and what they remember between products: everything outside a
// product's operands that can change how its result rounds. A run's results must never depend
// on timing, on the machine's load or on what ran before (a resumed run computes as the run it
// continues), so none of it is left to chance:
//
//   TANDEM_KERNEL_TUNING=fixed (the default)
//       No kernel is timed during a run. Each choice (the GEMM library per shape class, a product
//       split by tandem or left to the library, a convolution's kernel, how many products pay for
//       a packed copy of a weight, the parallel grain) takes its fixed default, or the line for
//       its key in TANDEM_KERNEL_CHOICES=<file> when that names one (a choices file that a
//       measured run wrote, read only). Same program, seed, machine and layout: same bits, busy
//       machine or not.
//   TANDEM_KERNEL_TUNING=measure
//       As cuDNN's benchmark mode: a choice is timed at its first use on this machine and kept in
//       the machine's choices file (core/cpu/measured_choice.h), shared by every process on it, so
//       that later runs compute alike. Faster kernels, but which ones depends on the timings: a
//       run that measures may round differently from one that found the file. A measurement
//       taken while other processes kept the cores busy serves this process only and is not kept
//       (the other ranks of a job on the same machine count as load too: tune with one process;
//       TANDEM_KERNEL_TIMING_UNDER_LOAD=keep keeps them all the same).
//
// A snapshot keeps the choices its run made and a resumed run computes with them
// (training/trainer.cc), whatever mode or file it runs with.
#pragma once

#include <string>

namespace tandem {

enum class KernelTuning { kFixed, kMeasure };

// TANDEM_KERNEL_TUNING unless set_kernel_tuning was called.
KernelTuning kernel_tuning();
void set_kernel_tuning(KernelTuning tuning);

// The choices this process has made, one "key word" line each in key order.
std::string kernel_choices_text();

// Makes the choices of `text` (kernel_choices_text's lines) this process's answers for their keys,
// ahead of any mode or file, also where a key was answered otherwise before. A malformed line is
// an error naming it.
void pin_kernel_choices(const std::string& text);

// A number that changes whenever pin_kernel_choices may have changed an answer: the per-thread
// memos in front of the choices start again when it moves.
unsigned kernel_choices_generation();

// Drops what the kernels keep from product to product (packed copies of weights and the counts
// that decide them), so that what follows computes as in a fresh process: StandardUpdater calls it
// at the start of every step, so that a step rounds alike whatever ran before it (an evaluation,
// a snapshot, a resume at any iteration). Copies still pay within a step (a pipeline's
// microbatches, an LSTM's time steps) and within an evaluation.
void forget_kernel_history();

}  // namespace tandem

// Helpers shared by the fuzz targets (tests/fuzz/*_fuzzer.cc). Not part of the library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace tandem::fuzz {

// Once per process, before any tensor is allocated: turns the CPU block cache off, so that a
// read past a tensor's end lands past its allocation (where AddressSanitizer sees it) instead
// of inside a larger cached block.
void init();

// A private directory for this process, created on first use and removed at exit.
const std::string& temp_dir();

// Writes [data, data + size) to path (replacing it).
void write_file(const std::string& path, const void* data, std::size_t size);

// Reads every element of the tensor (as a parser's caller would), so that invalid values
// (e.g. a bool that is neither 0 nor 1) reach the sanitizers.
void consume(const Tensor& tensor);

// Fails the process (abort, naming file:line and the condition) unless `condition` holds: a
// broken invariant is a bug even when no sanitizer notices it. `what` is evaluated on failure.
#define FUZZ_REQUIRE(condition, what)                                                      \
  do {                                                                                     \
    if (!(condition)) ::tandem::fuzz::fail(__FILE__, __LINE__, #condition, std::string(what)); \
  } while (0)
[[noreturn]] void fail(const char* file, int line, const char* condition, const std::string& what);

// The zip archive with the CRC-32 of every entry that can be located recomputed (best effort,
// bounds-checked), so that mutations of an entry's data reach the .npy decoder instead of
// stopping at the CRC check. Bytes that are not a zip come back unchanged.
std::string with_zip_crcs_fixed(const std::string& bytes);

}  // namespace tandem::fuzz

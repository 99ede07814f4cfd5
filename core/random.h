// Seeded random number generation. Each Generator is an independent, reproducible stream;
// `global_generator()` is the default one used by initialisers and dropout.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace tandem {

class Generator {
 public:
  explicit Generator(std::uint64_t seed = 0) : engine_(seed) {}
  void seed(std::uint64_t seed) { engine_.seed(seed); }
  std::mt19937_64& engine() { return engine_; }

  double normal(double mean, double stddev) { return std::normal_distribution<double>(mean, stddev)(engine_); }
  double uniform(double low, double high) { return std::uniform_real_distribution<double>(low, high)(engine_); }
  std::uint64_t next() { return engine_(); }

  // The stream's whole state as text (the engine's standard form), and back: a snapshot keeps it
  // so that a resumed run draws what the uninterrupted one would have drawn. A text that is not
  // such a state is an error.
  std::string state() const;
  void set_state(const std::string& text);

 private:
  std::mt19937_64 engine_;
};

// The process-wide default generator (seed 0 until `manual_seed`). Not thread-safe: draw from
// it on one thread, or give each thread its own Generator.
Generator& global_generator();
void manual_seed(std::uint64_t seed);

}  // namespace tandem

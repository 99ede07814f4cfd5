// Prints the library chosen for a fixed list of product shapes, one line each, for
// gemm_choice_processes_test.sh: processes started together on one machine must agree.
#include <cstdio>

#include "core/cpu/gemm_choice.h"

int main() {
  using namespace tandem::cpu;
  struct Shape {
    long m, n, k;
    bool ta, tb;
  };
  const Shape shapes[] = {{96, 80, 72, false, true},  {64, 300, 128, false, false}, {200, 40, 100, true, false},
                          {50, 600, 48, false, false}, {128, 128, 128, true, true}, {33, 1000, 64, false, true}};
  for (const Shape& s : shapes) {
    std::printf("%ldx%ldx%ld %d%d %s\n", s.m, s.n, s.k, s.ta, s.tb,
                gemm_backend_name(gemm_backend_for<float>(s.m, s.n, s.k, s.ta, s.tb)));
  }
  return 0;
}

// Guards against a wrong-code bug of GCC 12.2 at -O2/-O3 -march=native on this machine's CPU:
// the SLP vectoriser copied a defaulted by-value aggregate wrongly (pad_y arrived as 1). The
// project builds with -fno-tree-slp-vectorize (.bazelrc); if that flag is lost, this fails.
#include <catch2/catch.hpp>

#include <cstdint>

namespace {

struct Options {
  std::int64_t stride_y = 1, stride_x = 1, pad_y = 0, pad_x = 0, dilate_y = 1, dilate_x = 1, groups = 1;
};

__attribute__((noinline)) std::int64_t probe(const void*, const void*, const void*, Options o = {}) {
  return o.stride_y * 1000000 + o.stride_x * 100000 + o.pad_y * 10000 + o.pad_x * 1000 + o.dilate_y * 100 +
         o.dilate_x * 10 + o.groups;
}

}  // namespace

TEST_CASE("defaulted by-value aggregates arrive intact", "[build]") {
  int a = 0, b = 0, c = 0;
  REQUIRE(probe(&a, &b, &c) == 1100111);
  Options custom;
  custom.pad_y = 3;
  REQUIRE(probe(&a, &b, &c, custom) == 1130111);
}

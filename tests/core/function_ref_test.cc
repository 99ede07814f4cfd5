// FunctionRef (core/function_ref.h): calls what it refers to, with the arguments and result
// passed through, and sees the callable's state as it is at each call (a reference, not a copy).
#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "core/function_ref.h"

using namespace tandem;

namespace {

int call_twice(FunctionRef<int(int)> f, int x) { return f(f(x)); }

std::string joined(FunctionRef<std::string(const std::string&, int)> f) { return f("a", 2) + f("b", 3); }

int plus_one(int x) { return x + 1; }

}  // namespace

TEST_CASE("FunctionRef calls lambdas, functions and callable objects with their arguments", "[function_ref]") {
  CHECK(call_twice([](int x) { return 3 * x; }, 2) == 18);
  CHECK(call_twice(plus_one, 5) == 7);
  // A lambda that captures more than std::function keeps in place (five references), as the
  // collectives' header makers do.
  int a = 1, b = 2, c = 3, d = 4, e = 5;
  CHECK(call_twice([&](int x) { return x + a + b + c + d + e; }, 0) == 30);
  CHECK(joined([](const std::string& s, int n) {
          std::string out;
          for (int i = 0; i < n; ++i) out += s;
          return out;
        }) == "aabbb");
}

TEST_CASE("FunctionRef refers to the callable, so calls see and change its state", "[function_ref]") {
  int calls = 0;
  auto counting = [&calls](int x) {
    ++calls;
    return x;
  };
  FunctionRef<int(int)> ref(counting);
  CHECK(ref(4) == 4);
  CHECK(ref(5) == 5);
  CHECK(calls == 2);
  struct Accumulator {
    int total = 0;
    int operator()(int x) { return total += x; }
  } accumulate;
  CHECK(call_twice(accumulate, 3) == 6);  // 3, then 3 + 3
  CHECK(accumulate.total == 6);
  // Move-only arguments pass through.
  FunctionRef<int(std::unique_ptr<int>)> take([](std::unique_ptr<int> p) { return *p; });
  CHECK(take(std::make_unique<int>(7)) == 7);
}

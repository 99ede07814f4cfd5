// Shape (core/shape.h): the vector interface shapes use, in place up to six extents and on the
// heap beyond, checked element by element against std::vector<int64_t> doing the same.
#include <catch2/catch.hpp>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/shape.h"

using namespace tandem;

namespace {

std::vector<std::int64_t> as_vector(const Shape& s) { return std::vector<std::int64_t>(s.begin(), s.end()); }

}  // namespace

TEST_CASE("Shape builds, grows and shrinks as std::vector does, in place and on the heap", "[shape]") {
  for (int n : {0, 1, 5, 6, 7, 13}) {
    Shape s;
    std::vector<std::int64_t> v;
    for (int i = 0; i < n; ++i) {
      s.push_back(3 * i + 1);
      v.push_back(3 * i + 1);
    }
    CHECK(as_vector(s) == v);
    CHECK(s.size() == v.size());
    CHECK(s.empty() == v.empty());
    CHECK(s.capacity() >= s.size());
    // insert at the front, the middle and the end
    s.insert(s.begin(), 100);
    v.insert(v.begin(), 100);
    s.insert(s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), {7, 8});
    v.insert(v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), {7, 8});
    s.insert(s.end(), 2, -1);
    v.insert(v.end(), 2, -1);
    CHECK(as_vector(s) == v);
    // a range of itself, inserted into itself
    s.insert(s.begin() + 1, s.begin(), s.begin() + 3);
    const std::vector<std::int64_t> first3(v.begin(), v.begin() + 3);
    v.insert(v.begin() + 1, first3.begin(), first3.end());
    CHECK(as_vector(s) == v);
    s.erase(s.begin() + 1);
    v.erase(v.begin() + 1);
    s.erase(s.begin(), s.begin() + 2);
    v.erase(v.begin(), v.begin() + 2);
    CHECK(as_vector(s) == v);
    s.resize(s.size() + 4, 9);
    v.resize(v.size() + 4, 9);
    CHECK(as_vector(s) == v);
    s.resize(2);
    v.resize(2);
    CHECK(as_vector(s) == v);
    s.pop_back();
    v.pop_back();
    CHECK(as_vector(s) == v);
    CHECK(s.front() == v.front());
    CHECK(s.back() == v.back());
  }
}

TEST_CASE("Shape copies and moves keep their extents and leave the source valid", "[shape]") {
  for (const Shape& original : {Shape{}, Shape{2, 3}, Shape{1, 2, 3, 4, 5, 6}, Shape{1, 2, 3, 4, 5, 6, 7, 8}}) {
    Shape copy(original);
    CHECK(copy == original);
    Shape moved(std::move(copy));
    CHECK(moved == original);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from shape is empty
    copy.push_back(4);    // and usable
    CHECK(copy == Shape{4});
    Shape assigned{9, 9, 9, 9, 9, 9, 9};
    assigned = original;
    CHECK(assigned == original);
    Shape move_assigned{1};
    move_assigned = std::move(assigned);
    CHECK(move_assigned == original);
    Shape a = original, b{5};
    swap(a, b);
    CHECK(a == Shape{5});
    CHECK(b == original);
    a = a;  // NOLINT: self-assignment keeps the extents
    CHECK(a == Shape{5});
  }
}

TEST_CASE("Shape converts to and from std::vector and compares as a vector of extents", "[shape]") {
  const std::vector<std::int64_t> v{4, 0, 2, 7, 1, 1, 3};
  const Shape s = v;
  CHECK(s.size() == 7);
  const std::vector<std::int64_t> back = s;
  CHECK(back == v);
  CHECK(s == v);  // (the vector converts)
  CHECK(Shape(s.begin() + 1, s.end()) == Shape{0, 2, 7, 1, 1, 3});
  CHECK(Shape(3) == Shape{0, 0, 0});
  CHECK(Shape(2, 5) == Shape{5, 5});
  CHECK(Shape{1, 2} < Shape{1, 3});
  CHECK(Shape{1, 2} < Shape{1, 2, 0});
  CHECK_FALSE(Shape{2} < Shape{1, 9});
  CHECK(Shape{1, 2} != Shape{1, 2, 0});
  CHECK(shape_str(s) == "[4, 0, 2, 7, 1, 1, 3]");
  CHECK(shape_numel(Shape{2, 3, 4}) == 24);
  CHECK(shape_numel(Shape{}) == 1);
  CHECK_THROWS_WITH(s.at(7), Catch::Matchers::Contains("axis 7 of a shape of 7 dimensions"));
}

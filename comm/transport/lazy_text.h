// A text that is built only when someone reads it. What a wait is waiting in ("bcast (collective
// #12)", a header's description) is read only when the wait is diagnosed, times out or fails, yet
// every call made it, and an ostringstream per call was a large share of a small collective
// (docs/performance.md, "What a small message costs").
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <utility>

namespace tandem::comm_detail {

class LazyText {
 public:
  LazyText(std::string text) : text_(std::move(text)) {}  // NOLINT: a plain text converts
  LazyText(const char* text) : text_(text) {}             // NOLINT
  // make() builds the text at the first read; what it refers to must outlive this object's use.
  template <typename Make, typename = decltype(std::string(std::declval<const Make&>()()))>
  explicit LazyText(Make make) : make_(std::move(make)) {}

  const std::string& str() const {
    if (make_) {
      text_ = make_();
      make_ = nullptr;
    }
    return text_;
  }

 private:
  mutable std::string text_;
  mutable std::function<std::string()> make_;
};

inline std::ostream& operator<<(std::ostream& out, const LazyText& text) { return out << text.str(); }

}  // namespace tandem::comm_detail

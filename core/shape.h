// Shapes are vectors of extents; tensors are row-major, so strides follow from shapes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <ostream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace tandem {

// A vector of extents (the std::vector<std::int64_t> interface that shapes use, and conversions
// both ways) holding up to six in place: a tensor's shape was a heap block, so copying a tensor
// handle, making a variable or recording a function each allocated, and a small op spent much of
// its time in malloc and free (docs/performance.md, "Costs outside the products").
class Shape {
 public:
  using value_type = std::int64_t;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = std::int64_t&;
  using const_reference = const std::int64_t&;
  using pointer = std::int64_t*;
  using const_pointer = const std::int64_t*;
  using iterator = std::int64_t*;
  using const_iterator = const std::int64_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> extents) { assign(extents.begin(), extents.end()); }
  explicit Shape(size_type n, std::int64_t value = 0) { assign(n, value); }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  Shape(It first, It last) {
    assign(first, last);
  }
  Shape(const std::vector<std::int64_t>& extents) { assign(extents.begin(), extents.end()); }  // NOLINT
  Shape(const Shape& other) { assign(other.begin(), other.end()); }
  Shape(Shape&& other) noexcept { take(other); }
  ~Shape() { delete[] heap_; }

  Shape& operator=(const Shape& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      delete[] heap_;
      heap_ = nullptr;
      take(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<std::int64_t> extents) {
    assign(extents.begin(), extents.end());
    return *this;
  }
  Shape& operator=(const std::vector<std::int64_t>& extents) {
    assign(extents.begin(), extents.end());
    return *this;
  }
  operator std::vector<std::int64_t>() const { return std::vector<std::int64_t>(begin(), end()); }  // NOLINT

  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  void assign(It first, It last) {
    const auto n = static_cast<size_type>(std::distance(first, last));
    size_ = 0;
    reserve(n);
    std::copy(first, last, data());
    size_ = static_cast<std::uint32_t>(n);
  }
  void assign(size_type n, std::int64_t value) {
    size_ = 0;
    reserve(n);
    std::fill_n(data(), n, value);
    size_ = static_cast<std::uint32_t>(n);
  }
  void assign(std::initializer_list<std::int64_t> extents) { assign(extents.begin(), extents.end()); }

  size_type size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_type capacity() const { return heap_ ? capacity_ : kInline; }
  std::int64_t* data() { return heap_ ? heap_ : inline_; }
  const std::int64_t* data() const { return heap_ ? heap_ : inline_; }

  std::int64_t& operator[](size_type i) { return data()[i]; }
  const std::int64_t& operator[](size_type i) const { return data()[i]; }
  std::int64_t& at(size_type i) {
    TANDEM_CHECK(i < size_, "Shape::at: axis ", i, " of a shape of ", size_, " dimensions");
    return data()[i];
  }
  const std::int64_t& at(size_type i) const {
    TANDEM_CHECK(i < size_, "Shape::at: axis ", i, " of a shape of ", size_, " dimensions");
    return data()[i];
  }
  std::int64_t& front() { return data()[0]; }
  const std::int64_t& front() const { return data()[0]; }
  std::int64_t& back() { return data()[size_ - 1]; }
  const std::int64_t& back() const { return data()[size_ - 1]; }

  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  reverse_iterator rbegin() { return reverse_iterator(end()); }
  reverse_iterator rend() { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const { return const_reverse_iterator(begin()); }

  void reserve(size_type n) {
    if (n <= capacity()) return;
    auto* grown = new std::int64_t[n];
    std::copy(begin(), end(), grown);
    delete[] heap_;
    heap_ = grown;
    capacity_ = static_cast<std::uint32_t>(n);
  }
  void clear() { size_ = 0; }
  void resize(size_type n, std::int64_t value = 0) {
    if (n > size_) {
      reserve(std::max<size_type>(n, 2 * size_));
      std::fill(data() + size_, data() + n, value);
    }
    size_ = static_cast<std::uint32_t>(n);
  }
  void push_back(std::int64_t value) {
    if (size_ == capacity()) reserve(2 * capacity());
    data()[size_++] = value;
  }
  void emplace_back(std::int64_t value) { push_back(value); }
  void pop_back() { --size_; }
  iterator insert(const_iterator at, std::int64_t value) { return insert(at, &value, &value + 1); }
  iterator insert(const_iterator at, size_type n, std::int64_t value) {
    const auto i = static_cast<size_type>(at - begin());
    open_gap(i, n);
    std::fill_n(data() + i, n, value);
    return data() + i;
  }
  template <typename It, typename = std::enable_if_t<!std::is_integral_v<It>>>
  iterator insert(const_iterator at, It first, It last) {
    const auto i = static_cast<size_type>(at - begin());
    const Shape values(first, last);  // (first may point into this shape)
    open_gap(i, values.size());
    std::copy(values.begin(), values.end(), data() + i);
    return data() + i;
  }
  iterator insert(const_iterator at, std::initializer_list<std::int64_t> values) {
    return insert(at, values.begin(), values.end());
  }
  iterator erase(const_iterator at) { return erase(at, at + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    const auto i = static_cast<size_type>(first - begin()), j = static_cast<size_type>(last - begin());
    std::copy(data() + j, data() + size_, data() + i);
    size_ -= static_cast<std::uint32_t>(j - i);
    return data() + i;
  }
  void swap(Shape& other) noexcept {
    Shape t(std::move(other));
    other = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }
  friend bool operator<(const Shape& a, const Shape& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  static constexpr size_type kInline = 6;

  void take(Shape& other) noexcept {
    size_ = other.size_;
    if (other.heap_) {
      heap_ = other.heap_;
      capacity_ = other.capacity_;
      other.heap_ = nullptr;
    } else {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
    }
    other.size_ = 0;
  }
  void open_gap(size_type at, size_type n) {
    reserve(std::max<size_type>(size_ + n, 2 * size_));
    std::copy_backward(data() + at, data() + size_, data() + size_ + n);
    size_ += static_cast<std::uint32_t>(n);
  }

  std::int64_t* heap_ = nullptr;  // the extents when more than kInline, else null
  std::uint32_t size_ = 0, capacity_ = 0;
  std::int64_t inline_[kInline];
};

inline void swap(Shape& a, Shape& b) noexcept { a.swap(b); }
std::ostream& operator<<(std::ostream& out, const Shape& shape);

std::int64_t shape_numel(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3]"
Shape contiguous_strides(const Shape& shape);  // in elements

// NumPy broadcasting of two shapes; OP names the operation in the error.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Maps a possibly negative axis into [0, ndim); OP names the operation in the error.
int normalize_axis(std::int64_t axis, std::size_t ndim, const char* op);

}  // namespace tandem


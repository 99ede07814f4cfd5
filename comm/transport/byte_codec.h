// Byte strings for the control messages between ranks (traffic reports, deadlock probes):
// fixed-width integers, length-prefixed strings and message headers. The reader validates
// every length against what is left, since the bytes come from another process.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "comm/transport/message.h"
#include "core/error.h"

namespace tandem::comm_detail {

class ByteWriter {
 public:
  void i64(std::int64_t v) { raw(&v, sizeof(v)); }
  void text(const std::string& s) {
    i64(static_cast<std::int64_t>(s.size()));
    raw(s.data(), s.size());
  }
  void header(const MessageHeader& h) {
    std::vector<char> bytes;
    encode_header(h, bytes);
    i64(static_cast<std::int64_t>(bytes.size()));
    raw(bytes.data(), bytes.size());
  }
  std::vector<char> take() { return std::move(out_); }

 private:
  void raw(const void* p, std::size_t n) {
    out_.insert(out_.end(), static_cast<const char*>(p), static_cast<const char*>(p) + n);
  }
  std::vector<char> out_;
};

class ByteReader {
 public:
  // what: the kind of message, for errors ("traffic report"); source: the sender's rank.
  ByteReader(const char* data, std::size_t size, const char* what, int source)
      : data_(data), size_(size), what_(what), source_(source) {}
  std::int64_t i64() {
    std::int64_t v;
    take(&v, sizeof(v));
    return v;
  }
  int i32() {
    const std::int64_t v = i64();
    TANDEM_CHECK(v >= INT32_MIN && v <= INT32_MAX, "comm: malformed ", what_, " from rank ", source_, ": ", v,
                 " is not an int");
    return static_cast<int>(v);
  }
  // A count of items of at least `unit` bytes each, bounded by what is left to read.
  std::size_t length(std::size_t unit) {
    const std::int64_t n = i64();
    TANDEM_CHECK(n >= 0 && static_cast<std::size_t>(n) <= (size_ - at_) / unit, "comm: malformed ", what_,
                 " from rank ", source_, ": a length of ", n, " with ", size_ - at_, " bytes left");
    return static_cast<std::size_t>(n);
  }
  std::string text() {
    std::string s(length(1), '\0');
    take(s.data(), s.size());
    return s;
  }
  MessageHeader header() {
    const std::size_t n = length(1);
    const MessageHeader h = decode_header(data_ + at_, n, source_).header;
    at_ += n;
    return h;
  }
  void expect_end() const {
    TANDEM_CHECK(at_ == size_, "comm: malformed ", what_, " from rank ", source_, ": ", size_ - at_,
                 " stray bytes at the end");
  }

 private:
  void take(void* p, std::size_t n) {
    TANDEM_CHECK(n <= size_ - at_, "comm: malformed ", what_, " from rank ", source_, ": cut short");
    std::memcpy(p, data_ + at_, n);
    at_ += n;
  }
  const char* data_;
  std::size_t size_, at_ = 0;
  const char* what_;
  int source_;
};

}  // namespace tandem::comm_detail

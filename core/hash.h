// FNV-1a, 64 bits (Fowler, Noll, Vo): the one hash behind tandem's digests, those the ranks
// compare (parameter lists and values, tensor shapes, datasets) and those written beside files
// (the snapshot manifest's). Not cryptographic: it tells apart inputs that differ by accident.
//
//   std::uint64_t d = Fnv1a64().bytes(text).digest();
//   Fnv1a64 h;  for (std::int64_t e : shape) h.mix(e);  ...  h.digest();
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

class Fnv1a64 {
 public:
  static constexpr std::uint64_t kOffsetBasis = 14695981039346656037ull;
  static constexpr std::uint64_t kPrime = 1099511628211ull;

  // One FNV-1a step on a whole word, h = (h ^ v) * prime: cheaper than eight byte steps, and as
  // good for digests that only ever meet digests made the same way (lists of names and extents).
  Fnv1a64& mix(std::uint64_t v) {
    hash_ = (hash_ ^ v) * kPrime;
    return *this;
  }

  // FNV-1a proper: one step per byte.
  Fnv1a64& bytes(const void* data, std::size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) mix(p[i]);
    return *this;
  }
  Fnv1a64& bytes(std::string_view text) { return bytes(text.data(), text.size()); }

  // The eight bytes of v, least significant first, whatever the machine's byte order.
  Fnv1a64& value(std::uint64_t v) {
    for (int byte = 0; byte < 8; ++byte) mix((v >> (8 * byte)) & 0xff);
    return *this;
  }

  std::uint64_t digest() const { return hash_; }

 private:
  std::uint64_t hash_ = kOffsetBasis;
};

}  // namespace tandem

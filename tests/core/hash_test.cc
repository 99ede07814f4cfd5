// The one FNV-1a hash (core/hash.h) against the published 64-bit test vectors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "core/hash.h"

using namespace tandem;

TEST_CASE("Fnv1a64 gives the published FNV-1a 64 digests", "[hash]") {
  CHECK(Fnv1a64().digest() == 0xcbf29ce484222325ull);  // the offset basis, 14695981039346656037
  CHECK(Fnv1a64::kOffsetBasis == 14695981039346656037ull);
  CHECK(Fnv1a64().bytes("a").digest() == 0xaf63dc4c8601ec8cull);
  CHECK(Fnv1a64().bytes("foobar").digest() == 0x85944171f73967e8ull);
  const std::string text = "foobar";
  CHECK(Fnv1a64().bytes(text.data(), 3).bytes(text.data() + 3, 3).digest() == 0x85944171f73967e8ull);
}

TEST_CASE("Fnv1a64::value is the eight bytes least significant first, mix one word step", "[hash]") {
  const unsigned char le[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  CHECK(Fnv1a64().value(0x0102030405060708ull).digest() == Fnv1a64().bytes(le, 8).digest());
  CHECK(Fnv1a64().mix(0x61).digest() == Fnv1a64().bytes("a").digest());
  CHECK(Fnv1a64().mix(1).mix(2).digest() != Fnv1a64().mix(2).mix(1).digest());
  const unsigned char ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  CHECK(Fnv1a64().value(static_cast<std::uint64_t>(-1)).digest() == Fnv1a64().bytes(ones, 8).digest());
}

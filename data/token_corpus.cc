#include "data/token_corpus.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string_view>
#include <system_error>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/hash.h"
#include "data/tokenizer/gpt2_tokenizer.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

// ---- the King James Bible ----

constexpr const char* kKjvRange = "Gen1:1-Rev22:21";
// How bible-kjv 4.38's text starts and ends: a cut anywhere else would still split into books,
// so read_kjv_text checks both ends.
constexpr std::string_view kKjvStart = "\nGenesis 1\n\n  1 In the beginning God created the heaven and the earth.\n";
constexpr std::string_view kKjvEnd = "\n  21 The grace of our Lord Jesus Christ be with you all. Amen.\n";
constexpr const char* kKjvInstall = "apt-get install bible-kjv bible-kjv-text";
// sh's search path when $PATH is unset (POSIX leaves it to the implementation; this is dash's).
constexpr const char* kDefaultSearchPath = "/usr/local/bin:/usr/bin:/bin";

// The executable `name` in a folder of `search_path`, or "" when there is none.
std::string find_program(const std::string& name, const std::string& search_path) {
  std::size_t begin = 0;
  while (begin <= search_path.size()) {
    std::size_t end = search_path.find(':', begin);
    if (end == std::string::npos) end = search_path.size();
    const std::string folder = end > begin ? search_path.substr(begin, end - begin) : ".";
    const std::string candidate = folder + "/" + name;
    std::error_code error;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate, error)) return candidate;
    begin = end + 1;
  }
  return "";
}

// `text` as one word for sh.
std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string describe_exit_status(int status) {
  if (status == -1) return std::string("pclose failed: ") + std::strerror(errno);
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

// `text` in quotes for an error message, cut at 60 characters, a "\n" shown as \n.
std::string in_quotes(std::string_view text) {
  constexpr std::size_t kShown = 60;
  std::string shown = "\"";
  for (char c : text.substr(0, kShown)) shown += c == '\n' ? std::string("\\n") : std::string(1, c);
  return shown + (text.size() > kShown ? "...\"" : "\"");
}

// The last line of `text` that is not empty.
std::string_view last_line(std::string_view text) {
  while (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  const std::size_t newline = text.rfind('\n');
  return newline == std::string_view::npos ? text : text.substr(newline + 1);
}

// ---- bible's format ----

struct Line {
  std::size_t begin, end;  // [begin, end) in the text, without the '\n'
};

// The lines of `text`; a "\n" ends a line (the text after the last "\n", when there is any, is a
// line too), so "" has no line and "\n" one empty one.
std::vector<Line> lines_of(const std::string& text) {
  std::vector<Line> lines;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back({begin, end});
    begin = end + 1;
  }
  return lines;
}

bool is_blank(std::string_view line) {
  for (char c : line)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

bool is_digit(char c) { return '0' <= c && c <= '9'; }

// The number written in `digits` (1 to 4 decimal digits, no leading zero), or -1.
int parse_number(std::string_view digits) {
  if (digits.empty() || digits.size() > 4 || digits[0] == '0') return -1;
  int number = 0;
  for (char c : digits) {
    if (!is_digit(c)) return -1;
    number = number * 10 + (c - '0');
  }
  return number;
}

// Whether `line` reads "<name> <number>" (see split_kjv_books); sets name and chapter when so.
bool parse_header(std::string_view line, std::string& name, int& chapter) {
  const std::size_t space = line.rfind(' ');
  if (space == std::string_view::npos || space == 0) return false;
  const int number = parse_number(line.substr(space + 1));
  const std::string_view words = line.substr(0, space);
  if (number < 0 || is_blank(words.substr(0, 1)) || is_blank(words.substr(words.size() - 1))) return false;
  name = std::string(words);
  chapter = number;
  return true;
}

// The number of the verse `line` starts ("  <number> <text>"), or -1.
int parse_verse(std::string_view line) {
  if (line.size() < 4 || line[0] != ' ' || line[1] != ' ') return -1;
  const std::size_t space = line.find(' ', 2);
  if (space == std::string_view::npos) return -1;
  return parse_number(line.substr(2, space - 2));
}

// ---- token corpus ----

constexpr const char* kCacheMagic = "tandem-token-corpus 1";
constexpr const char* kCacheIdsLine = "ids int32le";
constexpr const char* kKjvCacheFileName = "kjv-gpt2-tokens.bin";

bool is_validation(std::size_t i, int validation_every) {
  return static_cast<int>(i % static_cast<std::size_t>(validation_every)) == validation_every - 1;
}

void check_corpus_arguments(const char* op, const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                            int validation_every) {
  TANDEM_CHECK(validation_every >= 2, op, ": validation_every must be at least 2 (every validation_every-th ",
               "document is held out, and 1 would leave nothing to train on), got ", validation_every);
  TANDEM_CHECK(!documents.empty(), op, ": no documents");
  TANDEM_CHECK(tokenizer.end_of_text() >= 0, op, ": the tokenizer has no \"<|endoftext|>\" token (of ",
               tokenizer.vocabulary_size(), "), and each document is preceded by one: use GPT-2's encoder.json");
}

// A corpus with everything but the ids: the documents' names in their splits, end_of_text and
// the vocabulary size.
TokenCorpus corpus_without_ids(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                               int validation_every) {
  TokenCorpus corpus;
  corpus.end_of_text = tokenizer.end_of_text();
  corpus.vocabulary_size = tokenizer.vocabulary_size();
  for (std::size_t i = 0; i < documents.size(); ++i)
    (is_validation(i, validation_every) ? corpus.validation_documents : corpus.train_documents)
        .push_back(documents[i].name);
  return corpus;
}

// Everything the ids depend on (see load_or_make_token_corpus). Every string is preceded by its
// length, so that moving bytes from one document, name or token to the next changes the key.
std::uint64_t cache_key(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                        int validation_every) {
  Fnv1a64 hash;
  hash.bytes(kCacheMagic).value(static_cast<std::uint64_t>(validation_every));
  hash.value(static_cast<std::uint64_t>(tokenizer.vocabulary_size()))
      .value(static_cast<std::uint64_t>(tokenizer.end_of_text()))
      .value(static_cast<std::uint64_t>(tokenizer.merge_count()));
  for (std::int64_t id = 0; id < tokenizer.vocabulary_size(); ++id) {
    const std::string& bytes = tokenizer.token_bytes(static_cast<std::int32_t>(id));
    hash.value(bytes.size()).bytes(bytes);
  }
  hash.value(documents.size());
  for (const TextDocument& document : documents)
    hash.value(document.name.size()).bytes(document.name).value(document.text.size()).bytes(document.text);
  return hash.digest();
}

std::string hex64(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

void append_ids(std::string& bytes, const std::vector<std::int32_t>& ids) {
  for (std::int32_t id : ids) {
    const auto v = static_cast<std::uint32_t>(id);
    const char le[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
                        static_cast<char>((v >> 16) & 0xff), static_cast<char>(v >> 24)};
    bytes.append(le, 4);
  }
}

// The cache file's bytes (the format is in the header).
std::string encode_cache(std::uint64_t key, const TokenCorpus& corpus) {
  std::string bytes = std::string(kCacheMagic) + "\n";
  bytes += "key " + hex64(key) + "\n";
  bytes += "vocabulary_size " + std::to_string(corpus.vocabulary_size) + "\n";
  bytes += "end_of_text " + std::to_string(corpus.end_of_text) + "\n";
  bytes += "train_documents " + std::to_string(corpus.train_documents.size()) + "\n";
  bytes += "validation_documents " + std::to_string(corpus.validation_documents.size()) + "\n";
  bytes += "train_tokens " + std::to_string(corpus.train.size()) + "\n";
  bytes += "validation_tokens " + std::to_string(corpus.validation.size()) + "\n";
  bytes += std::string(kCacheIdsLine) + "\n";
  bytes.reserve(bytes.size() + 4 * (corpus.train.size() + corpus.validation.size()));
  append_ids(bytes, corpus.train);
  append_ids(bytes, corpus.validation);
  return bytes;
}

// Reads the cache at `path` into corpus.train and corpus.validation (the rest of `corpus` is
// what the file must agree with) when it exists and was written for `key`; false when it does
// not exist or has another key. Anything else wrong with it is an error.
bool read_cache(const std::string& path, std::uint64_t key, TokenCorpus& corpus) {
  std::error_code error;
  if (!fs::exists(path, error)) return false;
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.is_open(), "load_or_make_token_corpus: cannot open the token cache ", path, ": ",
               std::strerror(errno));
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_CHECK(!in.bad(), "load_or_make_token_corpus: error reading the token cache ", path);

  auto corrupt = [&](const std::string& what) {
    TANDEM_FAIL("load_or_make_token_corpus: the token cache ", path, " is corrupt: ", what,
                "; delete it (the next call tokenises again and writes it anew)");
  };
  std::size_t offset = 0, line_number = 0;
  auto next_line = [&]() {
    ++line_number;
    const std::size_t newline = content.find('\n', offset);
    if (newline == std::string::npos || newline - offset > 200)
      corrupt("header line " + std::to_string(line_number) + " does not end within 200 bytes (a truncated file?)");
    const std::string line = content.substr(offset, newline - offset);
    offset = newline + 1;
    return line;
  };
  // A header line "<field> <non-negative integer>".
  auto field = [&](const std::string& name) {
    const std::string line = next_line();
    const std::string prefix = name + " ";
    const std::string digits = line.compare(0, prefix.size(), prefix) == 0 ? line.substr(prefix.size()) : "";
    bool valid = !digits.empty() && digits.size() <= 18;
    for (char c : digits) valid = valid && is_digit(c);
    if (!valid)
      corrupt("header line " + std::to_string(line_number) + " is " + in_quotes(line) + ", expected \"" + name +
              " <number>\"");
    return static_cast<std::int64_t>(std::stoll(digits));
  };
  auto agree = [&](const char* name, std::int64_t in_file, std::int64_t expected) {
    if (in_file != expected)
      corrupt(std::string(name) + " is " + std::to_string(in_file) + " in the file but " + std::to_string(expected) +
              " for the documents and tokenizer of its key");
  };

  const std::string magic = next_line();
  if (magic != kCacheMagic)
    corrupt("its first line is " + in_quotes(magic) + ", expected \"" + kCacheMagic +
            "\" (not a token cache, or one of another version)");
  const std::string key_line = next_line();
  const bool key_valid = key_line.size() == 4 + 16 && key_line.compare(0, 4, "key ") == 0 &&
                         key_line.find_first_not_of("0123456789abcdef", 4) == std::string::npos;
  if (!key_valid) corrupt("its second line is " + in_quotes(key_line) + ", expected \"key <16 hex digits>\"");
  if (key_line.substr(4) != hex64(key)) return false;

  agree("vocabulary_size", field("vocabulary_size"), corpus.vocabulary_size);
  agree("end_of_text", field("end_of_text"), corpus.end_of_text);
  agree("train_documents", field("train_documents"), static_cast<std::int64_t>(corpus.train_documents.size()));
  agree("validation_documents", field("validation_documents"),
        static_cast<std::int64_t>(corpus.validation_documents.size()));
  const std::int64_t train_tokens = field("train_tokens");
  const std::int64_t validation_tokens = field("validation_tokens");
  const std::string ids_line = next_line();
  if (ids_line != kCacheIdsLine)
    corrupt("header line " + std::to_string(line_number) + " is " + in_quotes(ids_line) + ", expected \"" +
            kCacheIdsLine + "\"");
  // Both counts have at most 18 digits, so 4 * (train + validation) cannot overflow 64 bits.
  const auto expected_bytes =
      4 * (static_cast<std::uint64_t>(train_tokens) + static_cast<std::uint64_t>(validation_tokens));
  const std::uint64_t id_bytes = content.size() - offset;
  if (id_bytes != expected_bytes)
    corrupt(std::to_string(id_bytes) + " bytes of ids follow the header, expected " + std::to_string(expected_bytes) +
            " (4 for each of its " + std::to_string(train_tokens) + " + " + std::to_string(validation_tokens) +
            " tokens): the file is truncated or has bytes added");

  auto read_ids = [&](std::int64_t count, const char* split) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < ids.size(); ++i, offset += 4) {
      const auto* b = reinterpret_cast<const unsigned char*>(content.data() + offset);
      const std::uint32_t v = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<std::uint32_t>(b[3]) << 24);
      ids[i] = static_cast<std::int32_t>(v);
      if (ids[i] < 0 || ids[i] >= corpus.vocabulary_size)
        corrupt(std::string(split) + " id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                " is outside the vocabulary [0, " + std::to_string(corpus.vocabulary_size) + ")");
    }
    return ids;
  };
  corpus.train = read_ids(train_tokens, "train");
  corpus.validation = read_ids(validation_tokens, "validation");
  return true;
}

// Writes the cache whole or not at all, even with other ranks writing it (write_file_atomically),
// making its folder first.
void write_cache(const std::string& path, const std::string& bytes) {
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty()) {
    std::error_code error;
    fs::create_directories(folder, error);  // an error also when another process made it first: check instead
    std::error_code exists_error;
    TANDEM_CHECK(fs::is_directory(folder, exists_error), "cannot make the folder ", folder.string(), ": ",
                 error.message());
  }
  write_file_atomically(path, bytes);
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

}  // namespace

// ---- the King James Bible ----

std::string read_kjv_text() {
  const std::string search_path = std::getenv("PATH") ? environment("PATH") : kDefaultSearchPath;
  const std::string bible = find_program("bible", search_path);
  TANDEM_CHECK(!bible.empty(), "read_kjv_text: the program `bible` is not on $PATH (", search_path,
               "): the King James Bible comes from Debian's bible-kjv (", kKjvInstall, ")");
  const std::string shown = "`" + bible + " \"" + kKjvRange + "\" </dev/null`";
  // COLUMNS sets bible's line width: unset, every environment gets the same text (and ids).
  const std::string command = "unset COLUMNS; exec " + shell_quote(bible) + " '" + kKjvRange + "' </dev/null";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  TANDEM_CHECK(pipe != nullptr, "read_kjv_text: cannot run ", shown, ": ", std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, n);
  const bool read_failed = std::ferror(pipe) != 0;
  const int status = ::pclose(pipe);
  TANDEM_CHECK(!read_failed, "read_kjv_text: error reading the output of ", shown);
  TANDEM_CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "read_kjv_text: ", shown, " failed (",
               describe_exit_status(status), "; bible's own message, if it printed one, is on stderr): is the text ",
               "installed? (", kKjvInstall, ")");
  TANDEM_CHECK(std::string_view(text).substr(0, kKjvStart.size()) == kKjvStart, "read_kjv_text: the output of ", shown,
               " (", text.size(), " bytes) does not start with a blank line, \"Genesis 1\", a blank line and ",
               "Genesis 1:1 (it starts ", in_quotes(text), "): not the text of bible-kjv 4.38 (", kKjvInstall, ")");
  TANDEM_CHECK(
      text.size() >= kKjvEnd.size() && text.compare(text.size() - kKjvEnd.size(), kKjvEnd.size(), kKjvEnd) == 0,
      "read_kjv_text: the output of ", shown, " (", text.size(), " bytes) does not end with Revelation 22:21 (",
      in_quotes(kKjvEnd.substr(1, kKjvEnd.size() - 2)), " and a \"\\n\"); its last line is ",
      in_quotes(last_line(text)), ": the text is incomplete (apt-get install --reinstall bible-kjv-text)");
  return text;
}

std::vector<TextDocument> split_kjv_books(const std::string& text) {
  const std::vector<Line> lines = lines_of(text);
  // A line without its '\n', and without a '\r' before it.
  auto line_at = [&](std::size_t l) {
    std::string_view line(text.data() + lines[l].begin, lines[l].end - lines[l].begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  };
  std::vector<TextDocument> books;
  std::vector<std::size_t> starts;                  // the byte offset of each book's first header
  std::map<std::string, std::size_t> first_header;  // book name -> the line number of its first header
  int chapter = 0, verse = 0;                       // the last header's chapter, and its last verse
  std::size_t chapter_line = 0;                     // the last header's line number
  auto check_chapter_has_verses = [&]() {
    TANDEM_CHECK(books.empty() || verse > 0, "split_kjv_books: line ", chapter_line, ": chapter ", books.back().name,
                 " ", chapter, " has no verses (a header is followed by a blank line and verses \"  1 ...\", ",
                 "\"  2 ...\")");
  };
  for (std::size_t l = 0; l < lines.size(); ++l) {
    const std::size_t number = l + 1;
    const std::string_view line = line_at(l);
    std::string name;
    int header_chapter = 0;
    const bool header = (l == 0 || is_blank(line_at(l - 1))) && l + 1 < lines.size() && is_blank(line_at(l + 1)) &&
                        parse_header(line, name, header_chapter);
    if (header) {
      check_chapter_has_verses();
      if (books.empty() || name != books.back().name) {
        const auto [earlier, first] = first_header.emplace(name, number);
        TANDEM_CHECK(first, "split_kjv_books: line ", number, ": ", in_quotes(line), " starts the book ", name,
                     " again, after ", books.empty() ? std::string() : books.back().name, " (it began at line ",
                     earlier->second, "): books are out of order or repeated");
        TANDEM_CHECK(header_chapter == 1, "split_kjv_books: line ", number, ": the book ", name, " starts at chapter ",
                     header_chapter, ", expected 1 (is the text cut?)");
        books.push_back({name, ""});
        starts.push_back(lines[l].begin);
      } else {
        TANDEM_CHECK(header_chapter == chapter + 1, "split_kjv_books: line ", number, ": ", in_quotes(line),
                     " follows chapter ", chapter, " of ", name, " (line ", chapter_line, "), expected \"", name, " ",
                     chapter + 1, "\" (is the text cut or out of order?)");
      }
      chapter = header_chapter;
      verse = 0;
      chapter_line = number;
      continue;
    }
    if (is_blank(line)) continue;
    TANDEM_CHECK(!books.empty(), "split_kjv_books: line ", number, " (", in_quotes(line), ") comes before the first ",
                 "chapter header (a line such as \"Genesis 1\" with a blank line before and after it): is this the ",
                 "text `bible` prints?");
    if (line[0] == ' ' || line[0] == '\t') {
      const int v = parse_verse(line);
      TANDEM_CHECK(v > 0, "split_kjv_books: line ", number, ": ", in_quotes(line), " in ", books.back().name, " ",
                   chapter, " is indented but is not a verse (\"  <number> <text>\")");
      TANDEM_CHECK(v == verse + 1, "split_kjv_books: line ", number, ": verse ", v, " of ", books.back().name, " ",
                   chapter, " follows verse ", verse, ", expected verse ", verse + 1, " (is the text cut?)");
      verse = v;
    } else {
      TANDEM_CHECK(verse > 0, "split_kjv_books: line ", number, ": ", in_quotes(line), " comes between the header of ",
                   books.back().name, " ", chapter, " (line ", chapter_line, ") and its first verse (a line that ",
                   "is not indented continues the verse before it)");
    }
  }
  TANDEM_CHECK(!books.empty(), "split_kjv_books: no chapter header (a line such as \"Genesis 1\" with a blank line ",
               "before and after it) in the text (", lines.size(), " lines, ", text.size(),
               " bytes): is this the text `bible` prints?");
  check_chapter_has_verses();
  for (std::size_t b = 0; b < books.size(); ++b) {
    const std::size_t end = b + 1 < books.size() ? starts[b + 1] : text.size();
    books[b].text = text.substr(starts[b], end - starts[b]);
  }
  return books;
}

// ---- token corpus ----

TokenCorpus make_token_corpus(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                              int validation_every) {
  check_corpus_arguments("make_token_corpus", documents, tokenizer, validation_every);
  TokenCorpus corpus = corpus_without_ids(documents, tokenizer, validation_every);
  for (std::size_t i = 0; i < documents.size(); ++i) {
    std::vector<std::int32_t>& ids = is_validation(i, validation_every) ? corpus.validation : corpus.train;
    ids.push_back(corpus.end_of_text);
    std::vector<std::int32_t> encoded;
    try {
      encoded = tokenizer.encode(documents[i].text);
    } catch (const Error& e) {
      TANDEM_FAIL("make_token_corpus: document ", i, " (", in_quotes(documents[i].name), "): ", e.what());
    }
    ids.insert(ids.end(), encoded.begin(), encoded.end());
  }
  return corpus;
}

TokenCorpus load_or_make_token_corpus(const std::vector<TextDocument>& documents, const Gpt2Tokenizer& tokenizer,
                                      int validation_every, const std::string& cache_path) {
  check_corpus_arguments("load_or_make_token_corpus", documents, tokenizer, validation_every);
  TANDEM_CHECK(!cache_path.empty(), "load_or_make_token_corpus: cache_path is empty (default_kjv_cache_path() ",
               "gives one)");
  const std::uint64_t key = cache_key(documents, tokenizer, validation_every);
  TokenCorpus cached = corpus_without_ids(documents, tokenizer, validation_every);
  if (read_cache(cache_path, key, cached)) return cached;
  TokenCorpus corpus = make_token_corpus(documents, tokenizer, validation_every);
  try {
    write_cache(cache_path, encode_cache(key, corpus));
  } catch (const std::exception& e) {
    std::cerr << "tandem: warning: load_or_make_token_corpus: the token cache " << cache_path
              << " was not written: " << e.what() << " (the tokens are used all the same; the next call tokenises "
              << "again)\n";
  }
  return corpus;
}

std::string default_kjv_cache_path() {
  std::string folder;
  if (!environment("TANDEM_CACHE_DIR").empty()) {
    folder = environment("TANDEM_CACHE_DIR");
  } else if (!environment("XDG_CACHE_HOME").empty()) {
    folder = environment("XDG_CACHE_HOME") + "/tandem";
  } else if (!environment("HOME").empty()) {
    folder = environment("HOME") + "/.cache/tandem";
  } else if (!environment("TEST_TMPDIR").empty()) {
    folder = environment("TEST_TMPDIR") + "/tandem-cache";
  } else {
    const std::string tmp = environment("TMPDIR").empty() ? "/tmp" : environment("TMPDIR");
    folder = tmp + "/tandem-cache-" + std::to_string(::getuid());
  }
  return folder + "/" + kKjvCacheFileName;
}

}  // namespace tandem

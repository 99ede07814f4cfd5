// Chainer's seq2seq (examples/seq2seq) as two links, so that the encoder and the decoder can
// live on different ranks: the Encoder reads the source and hands its final LSTM state to the
// Decoder, which writes the target. Built without a communicator they form the ordinary
// one-process model (decoder.loss(encoder.forward(xs).hy, .cy, ys)); with one, the encoder
// sends its state to the decoder's rank through a multi-node NStepLSTM
// (create_multi_node_n_step_rnn) and the decoder receives it there. Parameter names are the
// same either way ("embed/W", "lstm/0/w0", "out/W"), so copyparams works between the two.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/multi_node_links/multi_node_n_step_rnn.h"
#include "layers/links/embed_id.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"

namespace tandem::examples {

// Token ids, one sequence per example of a batch (no padding, no <eos>).
using TokenSequences = std::vector<std::vector<std::int32_t>>;

struct Seq2seqOptions {
  std::int64_t layers = 1, units = 256, source_vocab = 0, target_vocab = 0;
  double dropout = 0;  // between stacked LSTM layers, in training only
};

class Encoder : public Chain {
 public:
  // comm: null for one process; otherwise the final state is sent to decoder_rank.
  explicit Encoder(const Seq2seqOptions& options, CommunicatorPtr comm = nullptr, int decoder_rank = -1);
  std::string type_name() const override { return "Encoder"; }
  // Reads the sources (reversed, as Chainer's example does: the first source tokens are then
  // the freshest in the state that starts the decoder). Returns hy, cy [layers, B, units]; with
  // a communicator `delegate` is the send's delegate variable: backward() on it receives the
  // state's gradient from the decoder.
  MultiNodeNStepRNNResult forward(const TokenSequences& sources);
  using Chain::forward;

 private:
  std::shared_ptr<EmbedID> embed_;
  std::shared_ptr<NStepLSTM> lstm_;
  std::shared_ptr<MultiNodeNStepRNN> multi_node_;  // wraps lstm_ (not a child: same names)
};

struct DecoderLoss {
  Variable loss;    // mean softmax cross-entropy per target token (<eos> included)
  double accuracy;  // fraction of target tokens predicted right (teacher forcing)
};

class Decoder : public Chain {
 public:
  // comm: null for one process; otherwise the initial state comes from encoder_rank, and the
  // hx, cx passed below are ignored.
  explicit Decoder(const Seq2seqOptions& options, CommunicatorPtr comm = nullptr, int encoder_rank = -1);
  std::string type_name() const override { return "Decoder"; }

  // Teacher forcing: from the state (hx, cx), reads [<eos>] + target and predicts
  // target + [<eos>].
  DecoderLoss loss(const Variable& hx, const Variable& cx, const TokenSequences& targets);
  // Greedy decoding of `batch` sequences from (hx, cx): feeds back its own most likely token
  // until every sequence has written <eos> or max_length tokens. Returns them without <eos>.
  TokenSequences translate(const Variable& hx, const Variable& cx, std::int64_t batch, std::int64_t max_length);

 private:
  // The LSTM over xs; the first call of a batch receives the state when multi-node.
  functions::NStepLSTMResult run_lstm(const Variable& hx, const Variable& cx, const Variables& xs, bool first);

  std::shared_ptr<EmbedID> embed_;
  std::shared_ptr<NStepLSTM> lstm_;
  std::shared_ptr<Linear> out_;
  std::shared_ptr<MultiNodeNStepRNN> multi_node_;
};

}  // namespace tandem::examples

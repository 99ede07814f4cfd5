// create_multi_node_n_step_rnn (chainermn.links.create_multi_node_n_step_rnn): an NStepLSTM
// whose initial state comes from another rank and whose final state goes to another, as in a
// model-parallel seq2seq (the encoder on one rank hands (hy, cy) to the decoder on another).
//
//   // rank 0: encoder                              // rank 1: decoder
//   auto enc = create_multi_node_n_step_rnn(         auto dec = create_multi_node_n_step_rnn(
//       lstm, comm, /*rank_in=*/-1, /*rank_out=*/1);     lstm, comm, /*rank_in=*/0, /*rank_out=*/-1);
//   auto r = enc->forward(xs);                       auto r = dec->forward(ys_in);
//   r.delegate.backward();                           // hx, cx come from rank 0
//
// With rank_in, the initial state arrives from rank_in (on this link's device), and forward
// takes the sequences alone (as ChainerMN's, whose caller passes no state there); passing hx or
// cx as well is an error. Without rank_in, forward(xs) starts from zeros, as NStepLSTM does for
// undefined hx and cx. With rank_out, (hy, cy) are sent there as one list and `delegate` is the
// send's delegate variable (else it is undefined). The LSTM's parameters stay with the wrapped
// link.
#pragma once

#include "comm/transport/communicator.h"
#include "layers/links/n_step_lstm.h"

namespace tandem {

struct MultiNodeNStepRNNResult {
  Variable hy, cy;
  Variables ys;
  Variable delegate;  // undefined without rank_out
};

class MultiNodeNStepRNN : public Chain {
 public:
  // rank_in / rank_out: a rank, or -1 for none.
  MultiNodeNStepRNN(std::shared_ptr<NStepLSTM> lstm, CommunicatorPtr comm, int rank_in, int rank_out);
  std::string type_name() const override { return "MultiNodeNStepRNN"; }
  MultiNodeNStepRNNResult forward(const Variables& xs);
  // Without rank_in only: hx, cx the initial state (undefined: zeros).
  MultiNodeNStepRNNResult forward(const Variable& hx, const Variable& cx, const Variables& xs);
  using Chain::forward;
  NStepLSTM& lstm() { return *lstm_; }

 private:
  std::shared_ptr<NStepLSTM> lstm_;
  CommunicatorPtr comm_;
  int rank_in_, rank_out_;
};

std::shared_ptr<MultiNodeNStepRNN> create_multi_node_n_step_rnn(std::shared_ptr<NStepLSTM> lstm, CommunicatorPtr comm,
                                                                int rank_in, int rank_out);

}  // namespace tandem

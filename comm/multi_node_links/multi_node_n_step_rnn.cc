#include "comm/multi_node_links/multi_node_n_step_rnn.h"

#include "comm/functions.h"
#include "core/error.h"

namespace tandem {

namespace F = functions;

MultiNodeNStepRNN::MultiNodeNStepRNN(std::shared_ptr<NStepLSTM> lstm, CommunicatorPtr comm, int rank_in, int rank_out)
    : lstm_(std::move(lstm)), comm_(std::move(comm)), rank_in_(rank_in), rank_out_(rank_out) {
  TANDEM_CHECK(lstm_ && comm_, "create_multi_node_n_step_rnn: an NStepLSTM and a communicator are required");
  for (int rank : {rank_in_, rank_out_}) {
    TANDEM_CHECK(rank >= -1 && rank < comm_->size() && rank != comm_->rank(), "create_multi_node_n_step_rnn: rank ",
                 rank, " on rank ", comm_->rank(), " is not another rank of the communicator (size ", comm_->size(),
                 ") or -1");
  }
  Link::to(lstm_->device());  // wrapping an LSTM leaves it where it is (add_link would move it here)
  add_link("rnn", lstm_);
}

MultiNodeNStepRNNResult MultiNodeNStepRNN::forward(const Variables& xs) { return forward(Variable(), Variable(), xs); }

MultiNodeNStepRNNResult MultiNodeNStepRNN::forward(const Variable& hx, const Variable& cx, const Variables& xs) {
  Variable h = hx, c = cx;
  if (rank_in_ >= 0) {
    TANDEM_CHECK(!hx.defined() && !cx.defined(), "MultiNodeNStepRNN on rank ", comm_->rank(),
                 ": the initial state comes from rank ", rank_in_, "; call forward(xs) without hx and cx");
    // On the LSTM's own device: an owner that keeps this link unregistered (the seq2seq
    // example's Decoder) moves only the LSTM with to().
    Variables state = F::recv_list(*comm_, rank_in_, Variable(), 0, lstm_->device());
    TANDEM_CHECK(state.size() == 2, "MultiNodeNStepRNN on rank ", comm_->rank(), ": rank ", rank_in_, " sent ",
                 state.size(), " variables, not the pair (hy, cy)");
    h = state[0];
    c = state[1];
  }
  functions::NStepLSTMResult out = lstm_->forward(h, c, xs);
  MultiNodeNStepRNNResult result{out.hy, out.cy, out.ys, Variable()};
  if (rank_out_ >= 0) result.delegate = F::send(Variables{out.hy, out.cy}, *comm_, rank_out_);
  return result;
}

std::shared_ptr<MultiNodeNStepRNN> create_multi_node_n_step_rnn(std::shared_ptr<NStepLSTM> lstm, CommunicatorPtr comm,
                                                                int rank_in, int rank_out) {
  return std::make_shared<MultiNodeNStepRNN>(std::move(lstm), std::move(comm), rank_in, rank_out);
}

}  // namespace tandem

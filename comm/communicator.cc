#include "comm/communicator.h"

namespace tandem {

namespace {
thread_local bool g_in_backward = false;
}

CommBackwardScope::CommBackwardScope() : previous_(g_in_backward) { g_in_backward = true; }
CommBackwardScope::~CommBackwardScope() { g_in_backward = previous_; }
bool CommBackwardScope::active() { return g_in_backward; }

Tensor Communicator::recv(int source, int tag) {
  MessageExpectation expect;
  expect.kind = comm_detail::OpKind::tensor_send;
  expect.operation = "recv";
  return recv_message(source, tag, expect).tensor;
}

}  // namespace tandem

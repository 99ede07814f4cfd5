#include "comm/transport/differentiable_messages.h"

#include "core/error.h"

namespace tandem::comm_detail {

void send_activations(Communicator& comm, const std::vector<Tensor>& xs, int dest, int tag, bool records_graph) {
  const auto n = static_cast<std::uint32_t>(xs.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    MessageOptions options;
    options.kind = OpKind::fn_send;
    options.flags = (records_graph ? kFlagRecordsGraph : 0) | (n > 1 ? kFlagList : 0);
    options.list_index = i;
    options.list_size = n;
    comm.send_message(xs[i], dest, tag, options);
  }
}

Activations recv_activations(Communicator& comm, int source, int tag) {
  MessageExpectation expect;
  expect.kind = OpKind::fn_send;
  expect.operation = "recv";
  expect.check_list = true;
  expect.list_index = 0;
  ReceivedMessage first = comm.recv_message(source, tag, expect);
  Activations got;
  got.records_graph = first.header.has_flag(kFlagRecordsGraph);
  got.list = first.header.has_flag(kFlagList);
  const std::uint32_t n = first.header.list_size;
  got.tensors.push_back(std::move(first.tensor));
  for (std::uint32_t i = 1; i < n; ++i) {
    expect.list_index = i;
    got.tensors.push_back(comm.recv_message(source, tag, expect).tensor);
  }
  return got;
}

void send_gradient(Communicator& comm, const Tensor& grad, int dest, int tag, std::uint32_t index, std::uint32_t count,
                   bool list) {
  MessageOptions options;
  options.kind = OpKind::fn_recv_grad;
  options.flags = kFlagBackward | (list ? kFlagList : 0);
  options.list_index = index;
  options.list_size = count;
  comm.send_message(grad, dest, tag, options);
}

Tensor recv_gradient(Communicator& comm, int source, int tag, std::uint32_t index, std::uint32_t count, DType dtype,
                     const Shape& shape) {
  MessageExpectation expect;
  expect.kind = OpKind::fn_recv_grad;
  expect.operation = detail::concat("send backward (the gradient of ", dtype_name(dtype), shape_str(shape),
                                    count > 1 ? detail::concat(", tensor ", index + 1, " of ", count) : std::string(),
                                    ")");
  expect.check_tensor = true;
  expect.dtype = dtype;
  expect.shape = shape;
  expect.check_list = true;
  expect.list_index = index;
  return comm.recv_message(source, tag, expect).tensor;
}

}  // namespace tandem::comm_detail

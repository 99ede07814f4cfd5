#include "core/backend.h"

#include "core/error.h"
#include "core/tensor.h"

namespace tandem {

namespace {
Backend* cuda_backend = nullptr;
}

void Backend::concat(const std::vector<Tensor>& xs, int axis, Tensor& out) {
  const Shape out_strides = contiguous_strides(out.shape());
  std::int64_t position = 0;
  for (const Tensor& x : xs) {
    copy_strided(x, StridedView{0, contiguous_strides(x.shape())}, out,
                 StridedView{position * out_strides[axis], out_strides}, x.shape());
    position += x.shape()[axis];
  }
}

void Backend::conv2d_relu(const Tensor& x, const Tensor& W, const Tensor& b, const Conv2DGeometry& g,
                          std::int64_t groups, Tensor& y) {
  conv2d(x, W, b, g, groups, y);
  unary(UnaryOp::relu, y, y, 0, 0);
}

bool Backend::lstm_recurrence_forward(const std::vector<std::int64_t>&, Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, Tensor&, Tensor&) {
  return false;  // the caller runs the recurrence cell by cell
}

bool Backend::lstm_recurrence_backward(const std::vector<std::int64_t>&, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&) {
  return false;
}

bool Backend::lstm_sequence_forward(const LstmSequenceShape&, const Tensor&, const Tensor&, const Tensor&,
                                    const std::vector<Tensor>&, bool, Tensor&, Tensor&, Tensor&, Tensor&, Tensor&) {
  return false;  // no fused LSTM: n_step_lstm runs cell by cell
}

void Backend::lstm_sequence_backward(const LstmSequenceShape&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, const Tensor&, bool, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, bool, Tensor&, Tensor&, Tensor&, std::vector<Tensor>&) {
  TANDEM_FAIL("lstm_sequence_backward: the ", type() == DeviceType::cpu ? "CPU" : "CUDA",
              " backend has no fused LSTM (its forward returned false)");
}

Backend& backend_for(const Device& device, const char* op) {
  if (device.is_cpu()) return builtin_cpu_backend();
  TANDEM_CHECK(cuda_backend != nullptr, op, ": tensor on ", device.str(),
               " but this build has no CUDA backend (build with --config=cuda)");
  return *cuda_backend;
}

void register_backend(DeviceType type, Backend* backend) {
  TANDEM_CHECK(type == DeviceType::cuda, "register_backend: only the CUDA backend can be registered");
  cuda_backend = backend;
}

}  // namespace tandem

// The fused multi-layer LSTM of n_step_lstm on cuDNN's RNN API (cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), as PyTorch's nn.LSTM runs on a GPU.
// Cell by cell, a [64, 256] LSTM step is a small GEMM, cuBLAS's split-K reduction and the fused
// cell, forward and backward: hundreds of launches per batch, each a few microseconds of work
// (docs/performance.md, GPU). cuDNN runs the same recurrence in a handful of calls.
//
// Semantics are n_step_lstm's: cuDNN's LSTM has the same gate order (i, f, a, o for the linear
// layers 0-3 on the input and 4-7 on the hidden state) and two biases per gate
// (CUDNN_RNN_DOUBLE_BIAS: bs[l][j] goes with ws[l][j]). The batch is SEQ_MAJOR_PACKED, which is
// n_step_lstm's packed time-major layout (sequences sorted by decreasing length). f32 runs with
// FMA math unless TF32 is allowed (CUDNN_DEFAULT_MATH may use TF32 tensor cores), f64 with
// cuDNN's default.
//
// The weights live in one buffer laid out by cuDNN (cudnnGetRNNWeightParams says where each
// matrix and bias goes); each forward packs the user's tensors into a fresh one with one concat
// launch per contiguous run of it (usually one), and their gradients come back as views of one
// gradient buffer. Dropout between layers and empty sequences stay on the cell-by-cell path
// (autograd/functions/n_step_lstm.cc): cuDNN's dropout draws its own masks, which would differ
// from tandem's generator and from the CPU.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "cuda/cuda.h"
#include "cuda/cuda_backend.h"
#include "cuda/cudnn_util.cuh"
#include "cuda/kernel_util.cuh"

namespace tandem {
namespace cuda {

namespace {

std::atomic<std::int64_t> fused_forwards{0};

// TANDEM_CUDNN_RNN=0 (or "false", "off") starts with the fused LSTM off.
std::atomic<bool> fused_lstm{[] {
  const char* value = std::getenv("TANDEM_CUDNN_RNN");
  if (value == nullptr) return true;
  const std::string v(value);
  return !(v == "0" || v == "false" || v == "off");
}()};

// ---- owning wrappers of the RNN descriptors ----

struct DropoutDescriptor {
  cudnnDropoutDescriptor_t desc = nullptr;
  DropoutDescriptor() { TANDEM_CUDNN_CHECK(cudnnCreateDropoutDescriptor(&desc)); }
  ~DropoutDescriptor() { (void)cudnnDestroyDropoutDescriptor(desc); }
  DropoutDescriptor(const DropoutDescriptor&) = delete;
  DropoutDescriptor& operator=(const DropoutDescriptor&) = delete;
};

struct RnnDescriptor {
  cudnnRNNDescriptor_t desc = nullptr;
  RnnDescriptor() { TANDEM_CUDNN_CHECK(cudnnCreateRNNDescriptor(&desc)); }
  ~RnnDescriptor() { (void)cudnnDestroyRNNDescriptor(desc); }
  RnnDescriptor(const RnnDescriptor&) = delete;
  RnnDescriptor& operator=(const RnnDescriptor&) = delete;
};

struct RnnDataDescriptor {
  cudnnRNNDataDescriptor_t desc = nullptr;
  // A packed, sequence-major batch of vectors of `width` (lengths decreasing).
  RnnDataDescriptor(cudnnDataType_t type, const std::vector<int>& lengths, std::int64_t width, const char* op) {
    TANDEM_CUDNN_CHECK(cudnnCreateRNNDataDescriptor(&desc));
    TANDEM_CUDNN_CHECK(cudnnSetRNNDataDescriptor(desc, type, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED, lengths[0],
                                                 static_cast<int>(lengths.size()), cudnn_int(width, op, "width"),
                                                 lengths.data(), nullptr));
  }
  ~RnnDataDescriptor() { (void)cudnnDestroyRNNDataDescriptor(desc); }
  RnnDataDescriptor(const RnnDataDescriptor&) = delete;
  RnnDataDescriptor& operator=(const RnnDataDescriptor&) = delete;
};

// [L, B, H], contiguous: the states.
void set_state_descriptor(CudnnTensorDescriptor& d, cudnnDataType_t type, const LstmSequenceShape& shape,
                          const char* op) {
  const int dims[3] = {cudnn_int(shape.layers, op, "layers"),
                       cudnn_int(static_cast<std::int64_t>(shape.lengths.size()), op, "batch"),
                       cudnn_int(shape.hidden, op, "hidden")};
  const int strides[3] = {dims[1] * dims[2], dims[2], 1};
  TANDEM_CUDNN_CHECK(cudnnSetTensorNdDescriptor(d.get(), type, 3, dims, strides));
}

// ---- the plan of one LSTM configuration: its descriptor and its weight layout ----

struct WeightSlot {
  std::size_t offset = 0;  // in elements, from the start of the weight buffer
  std::int64_t numel = 0;
};

struct LstmPlan {
  DropoutDescriptor dropout;
  RnnDescriptor rnn;
  std::size_t weight_bytes = 0;
  std::vector<WeightSlot> slots;  // per tensor of `weights` (16 per layer)
  // The slots in buffer order, cut where two are not adjacent: each run is packed by one concat.
  std::vector<std::vector<int>> runs;
  bool gaps = false;  // bytes of the buffer that no slot covers (zeroed before packing)
};

using PlanKey = std::array<std::int64_t, 6>;  // device, dtype, fma only, input size, hidden, layers

std::mutex& plan_mutex() {
  static std::mutex mutex;
  return mutex;
}

// Per key, the plan, or null when cuDNN does not support the configuration.
std::map<PlanKey, std::unique_ptr<LstmPlan>>& plans() {
  static auto* cache = new std::map<PlanKey, std::unique_ptr<LstmPlan>>();
  return *cache;
}

bool unsupported(cudnnStatus_t status) {
  const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

std::int64_t elements_of(const CudnnTensorDescriptor& d) {
  cudnnDataType_t type;
  int nb = 0, dims[8] = {0}, strides[8] = {0};
  TANDEM_CUDNN_CHECK(cudnnGetTensorNdDescriptor(d.get(), 8, &type, &nb, dims, strides));
  std::int64_t n = 1;
  for (int i = 0; i < nb; ++i) n *= dims[i];
  return n;
}

std::unique_ptr<LstmPlan> make_plan(const DeviceContext& ctx, cudnnDataType_t type, bool fma_only,
                                    const LstmSequenceShape& shape, std::size_t element, const char* op) {
  auto plan = std::make_unique<LstmPlan>();
  // No dropout: n_step_lstm applies its own between layers on the cell-by-cell path.
  TANDEM_CUDNN_CHECK(cudnnSetDropoutDescriptor(plan->dropout.desc, ctx.cudnn, 0.0f, nullptr, 0, 0));
  const int H = cudnn_int(shape.hidden, op, "hidden");
  const cudnnStatus_t status = cudnnSetRNNDescriptor_v8(
      plan->rnn.desc, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
      CUDNN_LINEAR_INPUT, type, type, fma_only ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH,
      cudnn_int(shape.input_size, op, "input size"), H, H, cudnn_int(shape.layers, op, "layers"),
      plan->dropout.desc, CUDNN_RNN_PADDED_IO_DISABLED);
  if (unsupported(status)) return nullptr;
  TANDEM_CUDNN_CHECK(status);
  TANDEM_CUDNN_CHECK(cudnnGetRNNWeightSpaceSize(ctx.cudnn, plan->rnn.desc, &plan->weight_bytes));
  TANDEM_CHECK(plan->weight_bytes % element == 0, op, ": cuDNN's weight space of ", plan->weight_bytes,
               " bytes is not a whole number of elements");
  // Where each matrix and bias goes, read off a scratch buffer of the right size.
  DeviceBuffer probe(plan->weight_bytes, ctx.index);
  const char* base = static_cast<const char*>(probe.data());
  CudnnTensorDescriptor matrix, bias;
  plan->slots.resize(static_cast<std::size_t>(16 * shape.layers));
  for (std::int64_t l = 0; l < shape.layers; ++l)
    for (int j = 0; j < 8; ++j) {
      void* m = nullptr;
      void* b = nullptr;
      TANDEM_CUDNN_CHECK(cudnnGetRNNWeightParams(ctx.cudnn, plan->rnn.desc, static_cast<int>(l), plan->weight_bytes,
                                                 probe.data(), j, matrix.get(), &m, bias.get(), &b));
      const std::int64_t cols = j < 4 && l == 0 ? shape.input_size : shape.hidden;
      const std::int64_t matrix_elements = elements_of(matrix), bias_elements = elements_of(bias);
      TANDEM_CHECK(m != nullptr && b != nullptr && matrix_elements == shape.hidden * cols &&
                       bias_elements == shape.hidden,
                   op, ": cuDNN's layout of layer ", l, " linear layer ", j, " (", matrix_elements, " + ",
                   bias_elements, " elements) is not the expected [", shape.hidden, ", ", cols, "] + [",
                   shape.hidden, "]");
      plan->slots[16 * l + j] = {static_cast<std::size_t>(static_cast<const char*>(m) - base) / element,
                                 matrix_elements};
      plan->slots[16 * l + 8 + j] = {static_cast<std::size_t>(static_cast<const char*>(b) - base) / element,
                                     bias_elements};
    }
  std::vector<int> order(plan->slots.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = static_cast<int>(k);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return plan->slots[a].offset < plan->slots[b].offset; });
  std::size_t covered = 0, end = 0;
  for (int k : order) {
    const WeightSlot& s = plan->slots[k];
    TANDEM_CHECK(s.offset >= end || plan->runs.empty(), op, ": cuDNN's weight slots overlap");
    if (plan->runs.empty() || s.offset != end) plan->runs.emplace_back();
    plan->runs.back().push_back(k);
    end = s.offset + static_cast<std::size_t>(s.numel);
    covered += static_cast<std::size_t>(s.numel);
  }
  TANDEM_CHECK(end * element <= plan->weight_bytes, op, ": cuDNN's weight slots end past its weight space");
  plan->gaps = covered * element != plan->weight_bytes;
  return plan;
}

// The plan for this configuration on `ctx`'s device, made on first use; null when cuDNN does not
// support it (the caller falls back to the cell-by-cell path).
const LstmPlan* plan_for(const DeviceContext& ctx, cudnnDataType_t type, bool fma_only, const LstmSequenceShape& shape,
                         std::size_t element, const char* op) {
  const PlanKey key{ctx.index, static_cast<std::int64_t>(type), fma_only ? 1 : 0, shape.input_size, shape.hidden,
                    shape.layers};
  std::lock_guard<std::mutex> lock(plan_mutex());
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(ctx, type, fma_only, shape, element, op)).first;
  return it->second.get();
}

// Everything one call needs: the plan, the data and state descriptors, the sequence lengths on
// the device (cuDNN reads them from kernels, after the call returns) and the temporary sizes.
struct LstmCall {
  const LstmPlan* plan = nullptr;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int> lengths;
  std::unique_ptr<RnnDataDescriptor> x, y;
  CudnnTensorDescriptor state;
  Tensor device_lengths;
  std::size_t work_bytes = 0, reserve_bytes = 0;
};

// False when cuDNN has no fused LSTM for this configuration.
bool prepare(const DeviceContext& ctx, const LstmSequenceShape& shape, const Tensor& x, cudnnForwardMode_t mode,
             const char* op, LstmCall& call) {
  call.type = cudnn_data_type(x.dtype(), op);
  const bool fma_only = x.dtype() == DType::f32 && !allow_tf32();
  call.plan = plan_for(ctx, call.type, fma_only, shape, dtype_size(x.dtype()), op);
  if (call.plan == nullptr) return false;
  for (std::int64_t length : shape.lengths) call.lengths.push_back(cudnn_int(length, op, "sequence length"));
  call.x = std::make_unique<RnnDataDescriptor>(call.type, call.lengths, shape.input_size, op);
  call.y = std::make_unique<RnnDataDescriptor>(call.type, call.lengths, shape.hidden, op);
  set_state_descriptor(call.state, call.type, shape, op);
  const cudnnStatus_t status = cudnnGetRNNTempSpaceSizes(ctx.cudnn, call.plan->rnn.desc, mode, call.x->desc,
                                                         &call.work_bytes, &call.reserve_bytes);
  if (unsupported(status)) return false;
  TANDEM_CUDNN_CHECK(status);
  std::vector<std::int32_t> lengths32(call.lengths.begin(), call.lengths.end());
  call.device_lengths = from_vector<std::int32_t>(lengths32, {static_cast<std::int64_t>(lengths32.size())}).to(x.device());
  return true;
}

// `weights` copied into a fresh buffer in cuDNN's layout.
Tensor pack_weights(CudaBackend& backend, const DeviceContext& ctx, const LstmPlan& plan,
                    const std::vector<Tensor>& weights, DType dtype, Device device) {
  const std::int64_t elements = static_cast<std::int64_t>(plan.weight_bytes / dtype_size(dtype));
  Tensor packed({elements}, dtype, device);
  if (plan.gaps) TANDEM_CUDA_CHECK(cudaMemsetAsync(packed.raw_data(), 0, plan.weight_bytes, ctx.stream));
  for (const std::vector<int>& run : plan.runs) {
    std::vector<Tensor> flat;
    for (int k : run) flat.push_back(weights[k].flatten());
    const WeightSlot& first = plan.slots[run.front()];
    const WeightSlot& last = plan.slots[run.back()];
    Tensor view = packed.slice_rows(static_cast<std::int64_t>(first.offset),
                                    static_cast<std::int64_t>(last.offset) + last.numel);
    backend.concat(flat, 0, view);
  }
  return packed;
}

}  // namespace

void set_cudnn_rnn(bool on) { fused_lstm.store(on); }
bool cudnn_rnn() { return fused_lstm.load(); }
std::int64_t cudnn_rnn_forwards() { return fused_forwards.load(); }

bool CudaBackend::lstm_sequence_forward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                        const Tensor& cx, const std::vector<Tensor>& weights, bool training,
                                        Tensor& y, Tensor& hy, Tensor& cy, Tensor& packed_weights, Tensor& reserve) {
  const char* op = "n_step_lstm (cuDNN)";
  if (!fused_lstm.load()) return false;
  const DeviceContext& ctx = context_of(x, op);
  const cudnnForwardMode_t mode = training ? CUDNN_FWD_MODE_TRAINING : CUDNN_FWD_MODE_INFERENCE;
  LstmCall call;
  if (!prepare(ctx, shape, x, mode, op, call)) return false;
  const std::int64_t B = static_cast<std::int64_t>(shape.lengths.size());
  const Shape state{shape.layers, B, shape.hidden};
  Tensor packed = pack_weights(*this, ctx, *call.plan, weights, x.dtype(), x.device());
  Tensor out_y({x.size(0), shape.hidden}, x.dtype(), x.device());
  Tensor out_hy(state, x.dtype(), x.device()), out_cy(state, x.dtype(), x.device());
  Tensor out_reserve;
  // i64 elements: 8-byte aligned, and at least one so that a training forward always has one.
  if (training)
    out_reserve = Tensor({static_cast<std::int64_t>(call.reserve_bytes / 8 + 1)}, DType::i64, x.device());
  DeviceBuffer work(call.work_bytes, ctx.index);
  TANDEM_CUDNN_CHECK(cudnnRNNForward(
      ctx.cudnn, call.plan->rnn.desc, mode, call.device_lengths.data<std::int32_t>(), call.x->desc, x.raw_data(),
      call.y->desc, out_y.raw_data(), call.state.get(), hx.raw_data(), out_hy.raw_data(), call.state.get(),
      cx.raw_data(), out_cy.raw_data(), call.plan->weight_bytes, packed.raw_data(), call.work_bytes, work.data(),
      training ? call.reserve_bytes : 0, training ? out_reserve.raw_data() : nullptr));
  fused_forwards.fetch_add(1);
  y = out_y;
  hy = out_hy;
  cy = out_cy;
  packed_weights = packed;
  reserve = out_reserve;
  return true;
}

void CudaBackend::lstm_sequence_backward(const LstmSequenceShape& shape, const Tensor& x, const Tensor& hx,
                                         const Tensor& cx, const Tensor& packed_weights, const Tensor& reserve,
                                         bool keep_reserve, const Tensor& y, const Tensor& gy, const Tensor& ghy,
                                         const Tensor& gcy, bool weight_grads, Tensor& gx, Tensor& ghx, Tensor& gcx,
                                         std::vector<Tensor>& gweights) {
  const char* op = "n_step_lstm backward (cuDNN)";
  const DeviceContext& ctx = context_of(x, op);
  LstmCall call;
  TANDEM_CHECK(prepare(ctx, shape, x, CUDNN_FWD_MODE_TRAINING, op, call), op,
               ": cuDNN no longer supports the configuration its forward ran");
  TANDEM_CHECK(reserve.nbytes() >= call.reserve_bytes && packed_weights.nbytes() == call.plan->weight_bytes, op,
               ": the forward's reserve (", reserve.nbytes(), " bytes) or weights (", packed_weights.nbytes(),
               " bytes) do not fit this configuration (", call.reserve_bytes, ", ", call.plan->weight_bytes, ")");
  // The backward of the data writes into the reserve: a second backward over the same graph
  // (retain_graph) must start from the forward's.
  Tensor scratch_reserve = keep_reserve ? reserve.clone() : reserve;
  const std::int64_t B = static_cast<std::int64_t>(shape.lengths.size());
  const Shape state{shape.layers, B, shape.hidden};
  Tensor out_gx(x.shape(), x.dtype(), x.device());
  Tensor out_ghx(state, x.dtype(), x.device()), out_gcx(state, x.dtype(), x.device());
  DeviceBuffer work(call.work_bytes, ctx.index);
  TANDEM_CUDNN_CHECK(cudnnRNNBackwardData_v8(
      ctx.cudnn, call.plan->rnn.desc, call.device_lengths.data<std::int32_t>(), call.y->desc, y.raw_data(),
      gy.raw_data(), call.x->desc, out_gx.raw_data(), call.state.get(), hx.raw_data(), ghy.raw_data(),
      out_ghx.raw_data(), call.state.get(), cx.raw_data(), gcy.raw_data(), out_gcx.raw_data(),
      call.plan->weight_bytes, packed_weights.raw_data(), call.work_bytes, work.data(), call.reserve_bytes,
      scratch_reserve.raw_data()));
  gweights.clear();
  if (weight_grads) {
    // cuDNN only adds into the weight gradients (CUDNN_WGRAD_MODE_ADD).
    Tensor dw({packed_weights.numel()}, x.dtype(), x.device());
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dw.raw_data(), 0, dw.nbytes(), ctx.stream));
    TANDEM_CUDNN_CHECK(cudnnRNNBackwardWeights_v8(
        ctx.cudnn, call.plan->rnn.desc, CUDNN_WGRAD_MODE_ADD, call.device_lengths.data<std::int32_t>(),
        call.x->desc, x.raw_data(), call.state.get(), hx.raw_data(), call.y->desc, y.raw_data(),
        call.plan->weight_bytes, dw.raw_data(), call.work_bytes, work.data(), call.reserve_bytes,
        scratch_reserve.raw_data()));
    // One tensor per weight, as every other backward returns (views of dw would share memory, and
    // the engine copies a shared gradient before handing it to the optimizer): split by runs.
    for (std::size_t k = 0; k < call.plan->slots.size(); ++k) {
      const std::int64_t l = static_cast<std::int64_t>(k) / 16, j = static_cast<std::int64_t>(k) % 16;
      gweights.emplace_back(j >= 8 ? Shape{shape.hidden}
                                   : Shape{shape.hidden, j < 4 && l == 0 ? shape.input_size : shape.hidden},
                            x.dtype(), x.device());
    }
    for (const std::vector<int>& run : call.plan->runs) {
      std::vector<Tensor> pieces;
      for (int k : run) pieces.push_back(gweights[k]);
      const WeightSlot& first = call.plan->slots[run.front()];
      const WeightSlot& last = call.plan->slots[run.back()];
      split_flat(ctx, dw.slice_rows(static_cast<std::int64_t>(first.offset),
                                    static_cast<std::int64_t>(last.offset) + last.numel),
                 pieces);
    }
  }
  gx = out_gx;
  ghx = out_ghx;
  gcx = out_gcx;
}

}  // namespace cuda
}  // namespace tandem

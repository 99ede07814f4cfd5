// The communicators on CUDA tensors (issue 6): "naive" (staging through host memory) and
// "pure_nccl" (NCCL), run by `bazel test --config=cuda` on 1 and 2 ranks (tests/comm/BUILD.bazel;
// without a GPU every case is reported skipped). Each check runs the same computation twice, on
// CPU tensors through "naive" (the reference) and on GPU tensors through the communicator under
// test, and compares values, gradients and the devices where results land.
//
// NCCL needs a GPU per rank: where the ranks of a host outnumber its GPUs (2 ranks on a machine
// with one GPU), creating "pure_nccl" must fail on every rank with a clear error, and only
// "naive" is tested on GPU tensors. Point-to-point tests need 2 ranks.
//
// Built with TANDEM_FAKE_DEVICE (gpu_fake_device_test, every build without CUDA), the same cases
// run on a stand-in CUDA device in host memory, with a stand-in for pure_nccl that moves the
// bytes with MPI where pure_nccl calls NCCL (gpu_fake_device.h): everything but the NCCL calls
// and the CUDA kernels runs, point to point on 2 ranks included.
//
// As in communicator_test.cc, checks use CHECK (not REQUIRE) around communication, so that a
// failed check never skips a rank's remaining communication.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "comm/data_parallel/data_parallel.h"
#include "comm/transport/communicator.h"
#include "comm/functions.h"
#include "comm/multi_node_links/multi_node_n_step_rnn.h"
#include "comm/pipeline/pipeline.h"
#include "core/ops.h"
#include "cuda/cuda.h"
#include "layers/links/linear.h"
#include "layers/links/n_step_lstm.h"
#if TANDEM_FAKE_DEVICE
#include "tests/comm/transport/gpu_fake_device.h"
#endif

using namespace tandem;
namespace F = tandem::functions;
using Catch::Matchers::Contains;

namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64, DType::boolean};
const DType kSumDTypes[] = {DType::f32, DType::f64, DType::i32, DType::i64};

// ---- the communicators (created collectively by the first test case, which every rank runs first) ----

// The reference: CPU tensors through MPI.
Communicator& naive() {
  static CommunicatorPtr comm = create_communicator("naive");
  return *comm;
}

struct NcclAttempt {
  CommunicatorPtr comm;  // null when creation failed
  std::string error;
};

#if TANDEM_FAKE_DEVICE
const bool kStandInInstalled = fake_device::install();

// The stand-in has a "GPU" for every rank.
int gpu_count() { return naive().intra_size(); }
CommunicatorPtr create_device_communicator() {
  naive();  // MPI is up
  return fake_device::FakeDeviceCommunicator::create(MPI_COMM_WORLD);
}
#else
int gpu_count() { return cuda::device_count(); }
CommunicatorPtr create_device_communicator() { return create_communicator("pure_nccl"); }
#endif

const NcclAttempt& nccl_attempt() {
  static const NcclAttempt attempt = [] {
    NcclAttempt a;
    try {
      a.comm = create_device_communicator();
    } catch (const Error& e) {
      a.error = e.what();
    }
    return a;
  }();
  return attempt;
}

// Whether NCCL can run here: one GPU per rank on this host.
bool nccl_expected() { return naive().intra_size() <= gpu_count(); }

// This rank's GPU, as pure_nccl chooses it.
Device my_gpu() { return Device::cuda(naive().intra_rank() % gpu_count()); }

// The communicators whose GPU path is tested: "naive" (landing on the CPU by default, and a
// second one landing on this rank's GPU), and "pure_nccl" where it exists.
struct UnderTest {
  Communicator* comm;
  std::string label;
};

std::vector<UnderTest> under_test() {
  static CommunicatorPtr naive_gpu = [] {
    CommunicatorPtr c = create_communicator("naive");
    c->set_device(my_gpu());
    return c;
  }();
  std::vector<UnderTest> list{{&naive(), "naive"}, {naive_gpu.get(), "naive (device cuda)"}};
  if (nccl_attempt().comm) list.push_back({nccl_attempt().comm.get(), "pure_nccl"});
  return list;
}

// ---- data ----

// Values exactly representable in every dtype, depending on the seed.
Tensor make(const Shape& shape, DType dtype, std::int64_t seed) {
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto k = static_cast<std::int64_t>(i);
    switch (dtype) {
      case DType::f32:
      case DType::f64: v[i] = seed * 100 + k * 0.25 - 2.5; break;
      case DType::i32: v[i] = static_cast<double>(seed * 1000 + k - 7); break;
      case DType::i64: v[i] = static_cast<double>(seed * 1000 + k - 7 + (std::int64_t(1) << 40)); break;
      case DType::boolean: v[i] = (k * 7 + seed) % 3 == 0 ? 1 : 0; break;
    }
  }
  return from_vector<double>(v, shape).to(dtype);
}

// Seeded floats in [low, high).
Tensor uniform(const Shape& shape, std::uint64_t seed, double low = -1, double high = 1, DType dtype = DType::f64) {
  Generator gen(seed);
  return rand_uniform(shape, gen, low, high, dtype);
}

// Checks that got matches want (shape, dtype, values within rel_tol) and lies on `device`.
void check_same(const Tensor& got, const Tensor& want, const Device& device, double rel_tol = 0) {
  REQUIRE(got.defined() == want.defined());
  if (!got.defined()) return;
  INFO("got " << got.description() << ", want " << want.description() << " on " << device.str());
  CHECK(got.device() == device);
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return;
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  std::int64_t bad = -1;
  for (std::size_t i = 0; i < g.size() && bad < 0; ++i)
    if (!(std::abs(g[i] - w[i]) <= rel_tol * (1 + std::abs(w[i])))) bad = static_cast<std::int64_t>(i);
  std::ostringstream where;
  where.precision(17);
  if (bad >= 0) where << "first mismatch at flat index " << bad << ": got " << g[bad] << ", want " << w[bad];
  INFO(where.str());
  CHECK(bad == -1);
}

void check_all(const std::vector<Tensor>& got, const std::vector<Tensor>& want, const Device& device,
               double rel_tol = 0) {
  CHECK(got.size() == want.size());
  for (std::size_t i = 0; i < got.size() && i < want.size(); ++i) check_same(got[i], want[i], device, rel_tol);
}

std::vector<Tensor> to_device(const std::vector<Tensor>& xs, const Device& device) {
  std::vector<Tensor> out;
  for (const Tensor& x : xs) out.push_back(x.to(device));
  return out;
}

// The message of the tandem::Error that f throws, or "(no error)".
template <typename Fn>
std::string error_of(Fn&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- differentiable functions: values and gradients ----

struct Run {
  std::vector<Tensor> outputs, grads;
};

// Makes variables of `inputs` on `device`, applies fn, runs backward from a weighted sum of
// every output (delegates included, so that the communication behind them runs) and returns
// the outputs and the inputs' gradients.
Run run(const std::function<Variables(const Variables&)>& fn, const std::vector<Tensor>& inputs, const Device& device,
        std::uint64_t seed) {
  Variables xs;
  for (const Tensor& x : inputs) xs.emplace_back(x.to(device), is_floating(x.dtype()));
  const Variables ys = fn(xs);
  Variable loss;
  for (std::size_t i = 0; i < ys.size(); ++i) {
    const Tensor weights = uniform(ys[i].shape(), seed + i, 0.5, 2.0, ys[i].dtype()).to(ys[i].data().device());
    const Variable term = F::sum(F::mul(ys[i], Variable(weights)));
    loss = loss.defined() ? F::add(loss, term) : term;
  }
  if (loss.defined()) loss.backward();
  Run result;
  for (const Variable& y : ys) result.outputs.push_back(y.data());
  for (const Variable& x : xs) result.grads.push_back(x.grad());
  return result;
}

// The function under test: the communicator, the inputs, and the device they are on.
using CommFunction = std::function<Variables(Communicator&, const Variables&, const Device&)>;

// fn on CPU inputs through naive, and on GPU inputs through the communicator under test: the
// outputs must land on the GPU, and the gradients on their inputs'.
void check_function(const CommFunction& fn, const std::vector<Tensor>& inputs, double rel_tol = 1e-12) {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    const Run want =
        run([&](const Variables& xs) { return fn(naive(), xs, Device::cpu()); }, inputs, Device::cpu(), 7);
    const Run got = run([&](const Variables& xs) { return fn(*test.comm, xs, my_gpu()); }, inputs, my_gpu(), 7);
    check_all(got.outputs, want.outputs, my_gpu(), rel_tol);
    check_all(got.grads, want.grads, my_gpu(), rel_tol);
  }
}

}  // namespace

// ============================================================================================
// 1. Creation
// ============================================================================================

TEST_CASE("gpu: pure_nccl is created on one GPU per rank, or refused on every rank") {
  const NcclAttempt& attempt = nccl_attempt();
  if (nccl_expected()) {
    INFO(attempt.error);
    REQUIRE(attempt.comm);
    CHECK_THAT(attempt.comm->name(), Contains("pure_nccl"));
    CHECK(attempt.comm->rank() == naive().rank());
    CHECK(attempt.comm->size() == naive().size());
    CHECK(attempt.comm->device() == my_gpu());
  } else {
    CHECK(!attempt.comm);
    CHECK_THAT(attempt.error, Contains("\"pure_nccl\"") && Contains("would share cuda:") && Contains("\"naive\""));
  }
  CHECK(naive().device() == Device::cpu());
  naive().barrier();  // every rank got here: nobody hangs in NCCL's initialisation
}

TEST_CASE("gpu: pure_nccl splits keep each rank's GPU") {
  if (!nccl_attempt().comm) return;
  Communicator& comm = *nccl_attempt().comm;
  CommunicatorPtr part = comm.split(comm.rank() % 2, comm.rank());
  CHECK(part->name() == comm.name());
  CHECK(part->device() == comm.device());
  const Tensor x = make({3}, DType::f32, comm.rank()).to(my_gpu());
  Tensor want = zeros({3});
  for (int r = comm.rank() % 2; r < comm.size(); r += 2) want = add(want, make({3}, DType::f32, r));
  check_same(part->allreduce(x), want, my_gpu());
}

// ============================================================================================
// 2. Point to point (2 ranks or more)
// ============================================================================================

TEST_CASE("gpu: send/recv of GPU tensors, every dtype, small, large and empty; where they land") {
  if (naive().size() < 2) return;
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int rank = comm.rank();
    // A GPU tensor lands on the receiver's device(); a CPU one on the CPU.
    const Device gpu_landing = comm.device();
    std::int64_t seed = 1;
    for (DType dtype : kAllDTypes) {
      // Inline, separate and (from 64 KiB on) device payloads.
      for (const Shape& shape : {Shape{}, Shape{0}, Shape{3, 4}, Shape{5000}, Shape{20000}}) {
        ++seed;
        const Tensor x = make(shape, dtype, seed);
        if (rank == 0) {
          comm.send(x.to(my_gpu()), 1, 3);
          comm.send(x, 1, 3);  // a CPU tensor to the same rank
          check_same(comm.recv(1, 4), x, gpu_landing);
        } else if (rank == 1) {
          check_same(comm.recv(0, 3), x, gpu_landing);
          check_same(comm.recv(0, 3), x, Device::cpu());
          comm.send(x.to(my_gpu()), 0, 4);
        }
      }
    }
    comm.barrier();
  }
}

TEST_CASE("gpu: a mismatched receive of a GPU tensor is an error that consumes the message") {
  if (naive().size() < 2) return;
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const Tensor x = make({20000}, DType::f32, 5);
    if (comm.rank() == 0) {
      comm.send(x.to(my_gpu()), 1);
      comm.send(x.to(my_gpu()), 1);
    } else if (comm.rank() == 1) {
      CHECK_THAT(error_of([&] { comm.recv_obj(0); }), Contains("send f32[20000] (CUDA)"));
      check_same(comm.recv(0), x, comm.device());  // the channel is still in step
    }
    comm.barrier();
  }
}

// ============================================================================================
// 3. Collectives: GPU tensors against the same collective on CPU tensors
// ============================================================================================

TEST_CASE("gpu: bcast from every root, every dtype, empty and large") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    for (int root = 0; root < comm.size(); ++root) {
      for (DType dtype : kAllDTypes) {
        for (const Shape& shape : {Shape{0}, Shape{2, 3}, Shape{70000}}) {
          const Tensor x = make(shape, dtype, root + 3);
          const bool is_root = comm.rank() == root;
          const Tensor want = naive().bcast(is_root ? x : Tensor(), root);
          const Tensor got = comm.bcast(is_root ? x.to(my_gpu()) : Tensor(), root);
          check_same(got, want, is_root ? my_gpu() : comm.device());
        }
      }
    }
  }
}

TEST_CASE("gpu: gather and scatter of per-rank shapes (one empty), at every root") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int n = comm.size(), r = comm.rank();
    for (int root = 0; root < n; ++root) {
      for (DType dtype : kAllDTypes) {
        const Tensor x = make({r == 1 ? 0 : r + 2, 3}, dtype, 10 + r);
        check_all(comm.gather(x.to(my_gpu()), root), naive().gather(x, root), my_gpu());

        std::vector<Tensor> pieces;
        if (r == root)
          for (int q = 0; q < n; ++q) pieces.push_back(make({q == 1 ? 0 : q + 1}, dtype, 20 + q));
        const Tensor want = naive().scatter(pieces, root);
        const Tensor got = comm.scatter(to_device(pieces, my_gpu()), root);
        check_same(got, want, r == root ? my_gpu() : comm.device());
      }
    }
  }
}

TEST_CASE("gpu: allgather of equal and unequal shapes") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (const Shape& shape : {Shape{4, 2}, Shape{r + 1}, Shape{r == 0 ? 0 : 3}}) {
        const Tensor x = make(shape, dtype, 30 + r);
        check_all(comm.allgather(x.to(my_gpu())), naive().allgather(x), my_gpu());
      }
    }
  }
}

TEST_CASE("gpu: alltoall of equal and per-pair shapes") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kAllDTypes) {
      for (bool equal : {true, false}) {
        std::vector<Tensor> xs;
        for (int j = 0; j < n; ++j) xs.push_back(make({equal ? 3 : (r + j) % 3}, dtype, 40 + 10 * r + j));
        check_all(comm.alltoall(to_device(xs, my_gpu())), naive().alltoall(xs), my_gpu());
      }
    }
  }
}

TEST_CASE("gpu: allreduce (sum and mean), reduce and reduce_scatter") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int n = comm.size(), r = comm.rank();
    for (DType dtype : kSumDTypes) {
      for (const Shape& shape : {Shape{0}, Shape{3, 5}, Shape{40000}}) {
        const Tensor x = make(shape, dtype, 50 + r);
        check_same(comm.allreduce(x.to(my_gpu())), naive().allreduce(x), my_gpu());
        if (is_floating(dtype))
          check_same(comm.allreduce(x.to(my_gpu()), AllreduceOp::mean), naive().allreduce(x, AllreduceOp::mean),
                     my_gpu(), 1e-6);
        for (int root = 0; root < n; ++root)
          check_same(comm.reduce(x.to(my_gpu()), root), naive().reduce(x, root), my_gpu());
      }
      for (bool equal : {true, false}) {
        std::vector<Tensor> xs;
        for (int i = 0; i < n; ++i) xs.push_back(make({equal ? 4 : i + (i == 1 ? -1 : 2)}, dtype, 60 + 10 * r + i));
        check_same(comm.reduce_scatter(to_device(xs, my_gpu())), naive().reduce_scatter(xs), my_gpu());
        // Pieces that are views of one buffer, as allgather's backward passes them.
        const Tensor flat = concat(xs, 0).to(my_gpu());
        std::vector<Tensor> views;
        std::int64_t begin = 0;
        for (const Tensor& x : xs) {
          views.push_back(flat.slice_rows(begin, begin + x.numel()));
          begin += x.numel();
        }
        check_same(comm.reduce_scatter(views), naive().reduce_scatter(xs), my_gpu());
      }
    }
  }
}

TEST_CASE("gpu: pure_nccl moves CPU tensors with MPI, and a CPU/CUDA mix is an error on every rank") {
  if (!nccl_attempt().comm) return;
  Communicator& comm = *nccl_attempt().comm;
  const int r = comm.rank();
  const Tensor x = make({5}, DType::f64, 70 + r);
  check_same(comm.allreduce(x), naive().allreduce(x), Device::cpu());
  check_all(comm.allgather(x), naive().allgather(x), Device::cpu());
  check_same(comm.bcast(r == 0 ? x : Tensor(), 0), naive().bcast(r == 0 ? x : Tensor(), 0), Device::cpu());

  std::vector<Tensor> mixed{x.to(my_gpu())};
  for (int j = 1; j < comm.size(); ++j) mixed.push_back(x);
  if (comm.size() > 1) CHECK_THAT(error_of([&] { comm.alltoall(mixed); }), Contains("mix CPU and CUDA"));
  if (comm.size() < 2) return;
  // Rank 0 passes a CUDA tensor, the others CPU tensors.
  CHECK_THAT(error_of([&] { comm.allreduce(r == 0 ? x.to(my_gpu()) : x); }),
             Contains("some pass CUDA tensors and others CPU tensors"));
  // The communicator goes on.
  check_same(comm.allreduce(x.to(my_gpu())), naive().allreduce(x), my_gpu());
}

#if TANDEM_FAKE_DEVICE
// A failure on one rank before it commits to a collective (here the allocation of its output,
// out of memory) is that rank's alone: the peers wait for its header, and its next call of the
// same collective completes on every rank. (Made after the header exchange, the allocation would
// fail with the peers' device halves queued, which never complete: see run_device_phase in
// comm/transport/mpi_collectives.cc.) Stand-in only, which fails an allocation on demand.
TEST_CASE("gpu: an allocation that fails before a collective commits leaves the communicator usable") {
  if (!nccl_attempt().comm) return;
  Communicator& comm = *nccl_attempt().comm;
  const Tensor x = make({1000}, DType::f64, 80 + comm.rank());
  const Tensor want = naive().allreduce(x);
  const Tensor on_gpu = x.to(my_gpu());
  if (comm.rank() == comm.size() - 1) {
    fake_device::fail_next_allocation_of(on_gpu.nbytes());  // allreduce's output: the same size
    CHECK_THAT(error_of([&] { comm.allreduce(on_gpu); }), Contains("out of memory"));
  }
  check_same(comm.allreduce(on_gpu), want, my_gpu());
}
#endif

// ============================================================================================
// 4. Data parallelism: a model on the GPU
// ============================================================================================

TEST_CASE("gpu: bcast_data and multi_node_mean_grad on a model on the GPU") {
  for (const UnderTest& test : under_test()) {
    INFO("communicator: " << test.label);
    Communicator& comm = *test.comm;
    const int r = comm.rank();
    auto model = [&](const Device& device) {
      Generator gen(100 + r);  // every rank starts different
      auto link = std::make_shared<Linear>(4, 3);
      Tensor W = link->W().data();
      W.copy_(randn({3, 4}, gen));
      Tensor b = link->b().data();
      b.copy_(randn({3}, gen));
      link->to(device);
      return link;
    };
    auto cpu_model = model(Device::cpu());
    auto gpu_model = model(my_gpu());
    bcast_data(naive(), *cpu_model);
    bcast_data(comm, *gpu_model);
    const auto cpu_params = cpu_model->namedparams(), gpu_params = gpu_model->namedparams();
    REQUIRE(cpu_params.size() == gpu_params.size());
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      INFO(cpu_params[i].first);
      check_same(gpu_params[i].second.data(), cpu_params[i].second.data(), my_gpu());
    }
    auto step = [&](Linear& link, Communicator& c, const Device& device) {
      link.cleargrads();
      const Tensor x = uniform({2, 4}, 200 + r, -1, 1, DType::f32).to(device);
      F::sum(F::square(link.forward(Variable(x)))).backward();
      multi_node_mean_grad(c, link);
    };
    step(*cpu_model, naive(), Device::cpu());
    step(*gpu_model, comm, my_gpu());
    for (std::size_t i = 0; i < cpu_params.size(); ++i) {
      INFO(cpu_params[i].first);
      check_same(gpu_params[i].second.grad(), cpu_params[i].second.grad(), my_gpu(), 1e-5);
    }
  }
}

// Stages moved to the GPU before the Pipeline is built stay there (a new Link is on the CPU, and
// add_child moves a child to its parent's device: the character LM trained on the CPU with
// --gpu 0 until the pipeline took its stages' device). One step's gradients equal the CPU's.
TEST_CASE("gpu pipeline: stages placed on the GPU before the pipeline stay there, and a step trains them there") {
  Communicator& comm = naive();
  const int ranks = comm.size(), r = comm.rank();
  auto stage = [&](const Device& device) {
    const bool last = r == ranks - 1;
    auto link = std::make_shared<Linear>(4, last ? 3 : 4);
    Generator gen(300 + r);
    link->W().set_data(randn(link->W().shape(), gen, 0, 0.5, DType::f32));
    link->b().set_data(randn(link->b().shape(), gen, 0, 0.2, DType::f32));
    link->to(device);
    struct Stage : Chain {
      Stage(std::shared_ptr<Linear> l, bool last) : last_(last), l_(add_link("l", std::move(l))) {}
      Variables forward_many(const Variables& xs) override {
        if (!last_) return {F::tanh((*l_)(xs.at(0)))};
        return {F::softmax_cross_entropy((*l_)(xs.at(0)), xs.at(1))};
      }
      bool last_;
      std::shared_ptr<Linear> l_;
    };
    LinkPtr chain = std::make_shared<Stage>(link, last);
    chain->to(device);
    return chain;
  };
  Generator gen(7);
  const Tensor x = randn({6, 4}, gen, 0, 1, DType::f32);
  Tensor t({6}, DType::i32);
  for (std::int64_t i = 0; i < 6; ++i) t.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % 3);
  auto run = [&](const Device& device) {
    auto pipe = std::make_shared<pipeline::Pipeline>(comm.shared_from_this(), pipeline::one_f_one_b(ranks, 2),
                                                     std::vector<LinkPtr>{stage(device)});
    for (const auto& [name, param] : pipe->namedparams()) {
      INFO(name);
      CHECK(param.data().device() == device);
    }
    pipe->cleargrads();
    const pipeline::StepResult result = pipe->step(std::vector<Tensor>{x, t});
    return std::make_pair(pipe, result.loss);
  };
  auto [cpu_pipe, cpu_loss] = run(Device::cpu());
  auto [gpu_pipe, gpu_loss] = run(my_gpu());
  CHECK(std::abs(gpu_loss - cpu_loss) <= 1e-5 * (1 + std::abs(cpu_loss)));
  const auto cpu_params = cpu_pipe->namedparams(), gpu_params = gpu_pipe->namedparams();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (std::size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    check_same(gpu_params[i].second.grad(), cpu_params[i].second.grad(), my_gpu(), 1e-5);
  }
}

// ============================================================================================
// 5. The differentiable functions: values and gradients on the GPU
// ============================================================================================

TEST_CASE("gpu functions: send and recv in a ring, with delegates") {
  if (naive().size() < 2) return;
  const int n = naive().size(), r = naive().rank();
  check_function(
      [&](Communicator& comm, const Variables& xs, const Device&) -> Variables {
        Variable phi = F::send(F::tanh(xs[0]), comm, (r + 1) % n);
        Variable got = F::recv(comm, (r + n - 1) % n, phi);  // lands on the delegate's device
        return {F::mul(got, xs[1])};
      },
      {uniform({2, 3}, 90 + r), uniform({2, 3}, 95 + r)});
}

TEST_CASE("gpu functions: a round trip ending at a delegate, and recv's device argument") {
  if (naive().size() < 2) return;
  const int r = naive().rank();
  check_function(
      [&](Communicator& comm, const Variables& xs, const Device& device) -> Variables {
        if (r == 0) {
          Variable phi = F::send(F::mul(xs[0], 3.0), comm, 1);
          return {F::recv(comm, 1, phi)};
        }
        if (r == 1) {
          // No delegate here: recv's device says where the variable lands.
          Variable h = F::recv(comm, 0, Variable(), 0, device);
          return {F::send(F::mul(F::sigmoid(h), xs[0]), comm, 0)};  // the delegate joins the loss
        }
        return {F::mul(xs[0], 1.0)};
      },
      {uniform({4}, 110 + r)});
}

TEST_CASE("gpu functions: bcast and gather chained through the delegate") {
  const int n = naive().size(), r = naive().rank();
  for (int root : {0, n - 1}) {
    check_function(
        [&](Communicator& comm, const Variables& xs, const Device&) -> Variables {
          Variables gathered = F::gather(comm, F::tanh(xs[0]), root);
          Variable z;
          if (r == root) {
            z = gathered[0];
            for (int q = 1; q < n; ++q) z = F::add(z, F::mul(gathered[q], q + 1.0));
          } else {
            z = gathered[0];  // the delegate
          }
          return {F::bcast(comm, z, root)};
        },
        {uniform({3}, 120 + r)});
  }
}

TEST_CASE("gpu functions: scatter with an empty piece") {
  const int n = naive().size(), r = naive().rank();
  for (int root : {0, n - 1}) {
    std::vector<Tensor> pieces;
    if (r == root)
      for (int q = 0; q < n; ++q) pieces.push_back(uniform({q == 1 ? 0 : q + 2}, 130 + q));
    check_function(
        [&](Communicator& comm, const Variables& xs, const Device& device) -> Variables {
          // Away from the root, a delegate says where the piece lands.
          const Variables inputs = r == root ? xs : Variables{Variable(Tensor({0}, DType::f32, device))};
          return {F::tanh(F::scatter(comm, inputs, root))};
        },
        pieces);
  }
}

TEST_CASE("gpu functions: allgather, alltoall and allreduce") {
  const int n = naive().size(), r = naive().rank();
  check_function([&](Communicator& comm, const Variables& xs, const Device&) { return F::allgather(comm, F::tanh(xs[0])); },
                 {uniform({r == 1 ? 0 : r + 1, 2}, 140 + r)});
  check_function([&](Communicator& comm, const Variables& xs, const Device&) { return F::allgather(comm, F::tanh(xs[0])); },
                 {uniform({2, 2}, 145 + r)});
  std::vector<Tensor> pieces;
  for (int j = 0; j < n; ++j) pieces.push_back(uniform({(r + j) % 3 + 1}, 150 + 10 * r + j));
  check_function(
      [&](Communicator& comm, const Variables& xs, const Device&) {
        Variables ys = F::alltoall(comm, xs);
        for (Variable& y : ys) y = F::tanh(y);
        return ys;
      },
      pieces);
  for (AllreduceOp op : {AllreduceOp::sum, AllreduceOp::mean}) {
    check_function(
        [&](Communicator& comm, const Variables& xs, const Device&) -> Variables {
          return {F::tanh(F::allreduce(comm, F::mul(xs[0], xs[0]), op))};
        },
        {uniform({2, 3}, 160 + r)}, 1e-12);
  }
}

TEST_CASE("gpu functions: multi-node batch normalization and the parallel regions") {
  const int r = naive().rank();
  check_function(
      [&](Communicator& comm, const Variables& xs, const Device&) -> Variables {
        return {F::multi_node_batch_normalization(comm, xs[0], xs[1], xs[2])};
      },
      {uniform({3 + r, 2}, 170 + r), uniform({2}, 175, 0.5, 1.5), uniform({2}, 176)}, 1e-9);
  check_function(
      [&](Communicator& comm, const Variables& xs, const Device&) -> Variables {
        const Variable shared = F::copy_to_parallel_region(comm, xs[0]);
        return {F::gather_from_parallel_region(comm, F::mul(shared, comm.rank() + 1.0), 1)};
      },
      {uniform({2, 3}, 180)});
}

TEST_CASE("gpu links: a multi-node NStepLSTM receives its state on its LSTM's device, registered or not") {
  // The seq2seq example's Decoder keeps its MultiNodeNStepRNN unregistered and moves only the
  // LSTM with to(): the state from the encoder must land where the LSTM is. It landed on the CPU,
  // and the example's first run on a GPU failed ("n_step_lstm: hx is on cpu but ws[0][0] on cuda:0").
  CommunicatorPtr comm = create_communicator("naive");  // every rank, in test-case order
  if (comm->size() < 2 || comm->rank() > 1) return;
  const int r = comm->rank();
  manual_seed(40 + r);
  // Wrapping an LSTM on the GPU leaves it there.
  auto on_gpu = std::make_shared<NStepLSTM>(1, 3, 4, 0.0, DType::f64);
  on_gpu->to(my_gpu());
  REQUIRE(create_multi_node_n_step_rnn(on_gpu, comm, -1, -1)->device() == my_gpu());
  REQUIRE(on_gpu->device() == my_gpu());
  // As the example: wrapped on the CPU, then only the LSTM moves.
  auto lstm = std::make_shared<NStepLSTM>(1, 3, 4, 0.0, DType::f64);
  auto rnn = create_multi_node_n_step_rnn(lstm, comm, /*rank_in=*/r == 0 ? -1 : 0, /*rank_out=*/r == 0 ? 1 : -1);
  lstm->to(my_gpu());
  const Variables xs{Variable(uniform({2, 3}, 200 + r).to(my_gpu())), Variable(uniform({3, 3}, 202 + r).to(my_gpu()))};
  const MultiNodeNStepRNNResult out = rnn->forward(xs);
  REQUIRE(out.hy.device() == my_gpu());
  REQUIRE(out.cy.device() == my_gpu());
  if (r == 0) {
    out.delegate.backward();  // receives the gradient of the state sent
  } else {
    F::sum(F::add(out.hy, out.cy)).backward();
  }
  for (const auto& [name, param] : lstm->namedparams()) {
    INFO("rank " << r << ": gradient of " << name);
    REQUIRE(param.grad().defined());
    CHECK(param.grad().device() == my_gpu());
  }
}

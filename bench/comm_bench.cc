// Communication benchmarks: tandem's communicator and differentiable send/recv against raw MPI
// on the same buffers in the same run (the workloads of ../shared/bench/README.md):
//   mpi.pingpong.<4B|4KB|64KB|1MB|16MB|64MB>   raw MPI_Send/MPI_Recv, exactly as ../shared/bench/mpi_p2p.cpp
//   mpi.pingpong.<size>.2buf                   the same, each rank receiving into a second buffer (and rank 1
//                                              echoing from it): tandem's memory pattern, without allocating
//   tandem.mpi.pingpong.<size>                 Communicator::send / Communicator::recv (recv allocates)
//   tandem.fn.pingpong.<size>                  F::send / F::recv, forward only, graph recording on
//   mpi.<allreduce|allgather|bcast|alltoall>.<1MB|16MB>   raw MPI, as ../shared/bench/mpi_collectives.cpp
//   tandem.mpi.<op>.<size>                     the communicator's collective (results allocated per call)
// Methodology of the reference programs: a ping-pong sample is R round trips (R = 16 MiB / size,
// clamped to [1, 1000]), one-way time = sample / 2R, 2 warm-up samples, median of 20 samples (10
// from 16 MB on); a collective iteration follows a barrier, its time is the max over ranks, 3
// warm-up and timed iterations, median (mpi_collectives.cpp times 40 at 1 MB and 15 at 16 MB; here
// 200 and 30 for both sides: a median of 40 samples of a 30 us bcast moved by up to 30% between
// runs on a noisy 2-core machine, 200 samples by a few percent). Raw and tandem samples alternate
// (the order reversing every sample), so the machine's noise falls on both alike. Tandem lines
// add ratio= (tandem median / raw median of this run; ratio_2buf= against .2buf), overhead_us=
// (tandem - raw, one way) and the minor page faults per round trip / per op (max over ranks).
//
//   bazel build //bench:comm_bench && OMP_WAIT_POLICY=PASSIVE /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/comm_bench
//   BENCH_ONLY=p2p (or coll): a subset.  BENCH_SCALE=2: twice the timed samples (never below 3).
//   Through ../shared/bench's runq (build it from runq.cpp) every line gets noise=.
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/functions.h"
#include "bench/bench_util.h"
#include "comm/transport/communicator.h"
#include "comm/functions/point_to_point.h"
#include "core/tensor.h"

using namespace tandem;

namespace {

bool selected(const char* family) {
  const char* only = std::getenv("BENCH_ONLY");
  return only == nullptr || std::strstr(only, family) != nullptr;
}

// Minor page faults of this process so far (fresh memory touched for the first time).
long minor_faults() {
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The largest per-rank count at rank 0.
long max_over_ranks(long value) {
  long out = 0;
  MPI_Reduce(&value, &out, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD);
  return out;
}

struct Context {
  int rank = 0, np = 1;
  std::string lib;      // the MPI library, as the reference lines
  std::string tandem;   // the tags of tandem lines
  CommunicatorPtr comm;
};

void check_value(const Tensor& y, std::int64_t numel, float expected, const char* what) {
  TANDEM_CHECK(y.dtype() == DType::f32 && y.numel() == numel, what, ": received ", y.description(), ", expected ",
               numel, " f32 elements");
  const float* p = y.data<float>();
  TANDEM_CHECK(numel == 0 || (p[0] == expected && p[numel - 1] == expected), what, ": received the wrong data");
}

// --- point to point --------------------------------------------------------------------------

void pingpong(const Context& c) {
  const std::size_t sizes[] = {4, 4096, 65536, std::size_t(1) << 20, std::size_t(16) << 20, std::size_t(64) << 20};
  const char* labels[] = {"4B", "4KB", "64KB", "1MB", "16MB", "64MB"};
  const std::int64_t max_count = std::int64_t((std::size_t(64) << 20) / sizeof(float));
  // mpi_p2p.cpp's buffer: raw MPI sends from and receives into it, tandem sends views of it.
  Tensor buffer = full({max_count}, 1.0, DType::f32);
  // The .2buf baseline receives into a second buffer and echoes from there, the memory pattern
  // of tandem's ping-pong less the allocation (receiving into the buffer just sent from, as the
  // reference does, is slower on this machine from 64 KB on).
  Tensor echo = full({max_count}, 1.0, DType::f32);
  Communicator& comm = *c.comm;
  const int me = c.rank;

  for (int si = 0; si < 6; ++si) {
    const std::size_t bytes = sizes[si];
    const int count = static_cast<int>(bytes / sizeof(float));
    const int R = static_cast<int>(std::clamp<std::size_t>((std::size_t(16) << 20) / bytes, 1, 1000));
    const int samples = bench::scaled(bytes >= (std::size_t(16) << 20) ? 10 : 20);
    const int warm = 2;
    float* raw = buffer.data<float>();
    float* raw2 = echo.data<float>();
    const Tensor x = buffer.slice_rows(0, count);
    const Variable xv(x, /*requires_grad=*/true);

    // Correctness, untimed: one round trip through each tandem path.
    if (me == 0) {
      comm.send(x, 1);
      check_value(comm.recv(1), count, 1.0f, "tandem.mpi.pingpong");
      Variable d = F::send(xv, comm, 1);
      check_value(F::recv(comm, 1, d).data(), count, 1.0f, "tandem.fn.pingpong");
    } else if (me == 1) {
      comm.send(comm.recv(0), 0);
      Variable y = F::recv(comm, 0);
      Variable d = F::send(y, comm, 0);
    }

    enum { kRaw, kRaw2, kComm, kFn, kVariants };
    const std::function<void()> variants[kVariants] = {
        [&] {  // raw MPI, exactly as mpi_p2p.cpp
          for (int r = 0; r < R; ++r) {
            if (me == 0) {
              MPI_Send(raw, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
              MPI_Recv(raw, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (me == 1) {
              MPI_Recv(raw, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
              MPI_Send(raw, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
            }
          }
        },
        [&] {  // raw MPI, receiving into a second buffer (rank 1 echoes it)
          for (int r = 0; r < R; ++r) {
            if (me == 0) {
              MPI_Send(raw, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD);
              MPI_Recv(raw2, count, MPI_FLOAT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (me == 1) {
              MPI_Recv(raw2, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
              MPI_Send(raw2, count, MPI_FLOAT, 0, 0, MPI_COMM_WORLD);
            }
          }
        },
        [&] {  // the communicator: recv allocates the tensor it returns
          for (int r = 0; r < R; ++r) {
            if (me == 0) {
              comm.send(x, 1);
              Tensor y = comm.recv(1);
            } else if (me == 1) {
              Tensor y = comm.recv(0);
              comm.send(y, 0);
            }
          }
        },
        [&] {  // the differentiable functions, forward with the graph recorded
          for (int r = 0; r < R; ++r) {
            if (me == 0) {
              Variable d = F::send(xv, comm, 1);
              Variable y = F::recv(comm, 1, d);
            } else if (me == 1) {
              Variable y = F::recv(comm, 0);
              Variable d = F::send(y, comm, 0);
            }
          }
        },
    };
    std::vector<double> t[kVariants];
    long faults[kVariants] = {};  // minor page faults in the timed samples (counted outside the timing)
    MPI_Barrier(MPI_COMM_WORLD);
    for (int s = 0; s < warm + samples; ++s) {
      for (int k = 0; k < kVariants; ++k) {
        const int v = s % 2 ? kVariants - 1 - k : k;  // raw first, then tandem first, alternately
        const long f0 = minor_faults();
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        variants[v]();
        const double dt = MPI_Wtime() - t0;
        if (s >= warm) {
          t[v].push_back(dt / (2.0 * R) * 1e3);  // one-way, ms
          faults[v] += minor_faults() - f0;
        }
      }
    }
    for (long& f : faults) f = max_over_ranks(f);
    if (me == 0) {
      bench::Stats st[kVariants];
      for (int v = 0; v < kVariants; ++v) st[v] = bench::summarize(t[v]);
      const double per_roundtrip = 1.0 / (double(samples) * R);
      for (int v : {kRaw, kRaw2}) {
        std::printf(
            "name=mpi.pingpong.%s%s lib=%s ranks=%d bytes=%zu roundtrips_per_sample=%d samples=%d "
            "median_us=%.3f min_us=%.3f max_us=%.3f bw_GBps=%.3f bw_best_GBps=%.3f",
            labels[si], v == kRaw2 ? ".2buf" : "", c.lib.c_str(), c.np, bytes, R, st[v].iters, st[v].median_ms * 1e3,
            st[v].min_ms * 1e3, st[v].max_ms * 1e3, bytes / (st[v].median_ms * 1e-3) / 1e9,
            bytes / (st[v].min_ms * 1e-3) / 1e9);
        if (v == kRaw2) std::printf(" minflt_per_roundtrip=%.1f", faults[v] * per_roundtrip);
        std::printf("\n");
      }
      for (int v : {kComm, kFn}) {
        std::printf(
            "name=tandem.%s.pingpong.%s %s bytes=%zu roundtrips_per_sample=%d samples=%d "
            "median_us=%.3f min_us=%.3f max_us=%.3f bw_GBps=%.3f bw_best_GBps=%.3f ratio=%.3f overhead_us=%.3f "
            "ratio_2buf=%.3f minflt_per_roundtrip=%.1f\n",
            v == kComm ? "mpi" : "fn", labels[si], c.tandem.c_str(), bytes, R, st[v].iters, st[v].median_ms * 1e3,
            st[v].min_ms * 1e3, st[v].max_ms * 1e3, bytes / (st[v].median_ms * 1e-3) / 1e9,
            bytes / (st[v].min_ms * 1e-3) / 1e9, st[v].median_ms / st[kRaw].median_ms,
            (st[v].median_ms - st[kRaw].median_ms) * 1e3, st[v].median_ms / st[kRaw2].median_ms,
            faults[v] * per_roundtrip);
      }
      std::fflush(stdout);
    }
  }
}

// --- collectives -----------------------------------------------------------------------------

void collectives(const Context& c) {
  const std::size_t sizes[] = {std::size_t(1) << 20, std::size_t(16) << 20};
  const char* labels[] = {"1MB", "16MB"};
  const std::size_t maxb = std::size_t(16) << 20;
  const int np = c.np;
  Communicator& comm = *c.comm;
  // The reference's buffers, as tensors: raw MPI works on their memory, tandem on views of them.
  Tensor sbt = full({std::int64_t(maxb * np / sizeof(float))}, 1.0, DType::f32);
  Tensor rbt = zeros({std::int64_t(maxb * np / sizeof(float))}, DType::f32);
  float* sb = sbt.data<float>();
  float* rb = rbt.data<float>();

  struct Op {
    const char* name;
    double bus;  // busbw factor, as mpi_collectives.cpp (nccl-tests)
    std::function<void(int count)> raw;
    std::function<void(const Tensor& x, const std::vector<Tensor>& pieces)> tandem;
  };
  const std::vector<Op> ops = {
      {"allreduce", 2.0 * (np - 1) / np,
       [&](int n) { MPI_Allreduce(sb, rb, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { Tensor y = comm.allreduce(x, AllreduceOp::sum); }},
      {"allgather", double(np - 1),
       [&](int n) { MPI_Allgather(sb, n, MPI_FLOAT, rb, n, MPI_FLOAT, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { std::vector<Tensor> ys = comm.allgather(x); }},
      {"bcast", 1.0, [&](int n) { MPI_Bcast(sb, n, MPI_FLOAT, 0, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { Tensor y = comm.bcast(x, 0); }},
      {"alltoall", double(np - 1) / np,
       [&](int n) { MPI_Alltoall(sb, n / np, MPI_FLOAT, rb, n / np, MPI_FLOAT, MPI_COMM_WORLD); },
       [&](const Tensor&, const std::vector<Tensor>& pieces) { std::vector<Tensor> ys = comm.alltoall(pieces); }},
  };

  for (const Op& op : ops) {
    for (int si = 0; si < 2; ++si) {
      const std::size_t bytes = sizes[si];
      const int count = static_cast<int>(bytes / sizeof(float));
      const int warm = 3, iters = bench::scaled(si == 0 ? 200 : 30);
      const Tensor x = sbt.slice_rows(0, count);
      std::vector<Tensor> pieces;  // alltoall: count / np elements to each peer
      const std::int64_t piece = count / np;
      for (int r = 0; r < np; ++r) pieces.push_back(sbt.slice_rows(r * piece, (r + 1) * piece));

      std::vector<double> t[2], tmax[2];
      long faults[2] = {0, 0};
      for (int i = 0; i < warm + iters; ++i) {
        for (int k = 0; k < 2; ++k) {
          const int v = i % 2 ? 1 - k : k;  // raw first, then tandem first
          const long f0 = minor_faults();
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = MPI_Wtime();
          if (v == 0) op.raw(count);
          else op.tandem(x, pieces);
          const double dt = (MPI_Wtime() - t0) * 1e3;
          if (i >= warm) {
            t[v].push_back(dt);
            faults[v] += minor_faults() - f0;
          }
        }
      }
      for (long& f : faults) f = max_over_ranks(f);
      for (int v = 0; v < 2; ++v) {
        tmax[v].resize(iters);
        MPI_Reduce(t[v].data(), tmax[v].data(), iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      }
      if (c.rank == 0) {
        const bench::Stats raw = bench::summarize(tmax[0]), tan = bench::summarize(tmax[1]);
        const double algbw_raw = bytes / (raw.median_ms * 1e-3) / 1e9, algbw_tan = bytes / (tan.median_ms * 1e-3) / 1e9;
        std::printf(
            "name=mpi.%s.%s lib=%s ranks=%d bytes_per_rank=%zu iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
            "algbw_GBps=%.3f busbw_GBps=%.3f\n",
            op.name, labels[si], c.lib.c_str(), np, bytes, raw.iters, raw.median_ms, raw.min_ms, raw.max_ms, algbw_raw,
            algbw_raw * op.bus);
        std::printf(
            "name=tandem.mpi.%s.%s %s bytes_per_rank=%zu iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
            "algbw_GBps=%.3f busbw_GBps=%.3f ratio=%.3f minflt_per_op=%.1f raw_minflt_per_op=%.1f\n",
            op.name, labels[si], c.tandem.c_str(), bytes, tan.iters, tan.median_ms, tan.min_ms, tan.max_ms, algbw_tan,
            algbw_tan * op.bus, tan.median_ms / raw.median_ms, double(faults[1]) / iters, double(faults[0]) / iters);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main() {
  Context c;
  c.comm = create_communicator("naive");  // initialises MPI (finalised at exit)
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.np);
  if (c.np < 2) {
    std::fprintf(stderr, "comm_bench needs 2 ranks: /usr/bin/mpiexec.mpich -n 2 bazel-bin/bench/comm_bench\n");
    return 1;
  }
  char ver[MPI_MAX_LIBRARY_VERSION_STRING];
  int verlen = 0;
  MPI_Get_library_version(ver, &verlen);
  c.lib = bench::kv(std::string(ver).substr(0, std::string(ver).find('\n')));
  c.tandem = "lib=tandem mpi=" + c.lib + " comm=" + c.comm->name() + " ranks=" + std::to_string(c.np) + " " +
             bench::threads_tag(1);
  bench::set_threads(1);

  MPI_Barrier(MPI_COMM_WORLD);
  if (c.rank == 0) {
    // Start-up is over: ../shared/bench/runq restarts its noise window here.
    std::printf("# start\n");
    std::fflush(stdout);
  }
  if (selected("p2p")) pingpong(c);
  if (selected("coll")) collectives(c);
  MPI_Barrier(MPI_COMM_WORLD);
  return 0;
}

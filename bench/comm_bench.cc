// Communication benchmarks: tandem's communicator and differentiable send/recv against raw MPI
// on the same buffers in the same run (the workloads of ../shared/bench/README.md):
//   mpi.pingpong.<4B|4KB|64KB|1MB|16MB|64MB>   raw MPI_Send/MPI_Recv, exactly as ../shared/bench/mpi_p2p.cpp
//   mpi.pingpong.<size>.2buf                   the same, each rank receiving into a second buffer (and rank 1
//                                              echoing from it): tandem's memory pattern, without allocating
//   tandem.mpi.pingpong.<size>                 Communicator::send / Communicator::recv (recv allocates)
//   tandem.fn.pingpong.<size>                  F::send / F::recv, forward only, graph recording on
//   mpi.<allreduce|allgather|bcast|alltoall>.<4B|4KB|1MB|16MB>   raw MPI, as ../shared/bench/mpi_collectives.cpp
//                                              (which times 1 MB and 16 MB; 4 B and 4 KB here for the small
//                                              collectives' overhead; alltoall at 4 B moves one element to
//                                              each rank)
//   tandem.mpi.<op>.<size>                     the communicator's collective (results allocated per call)
//   mpi.bcast_protocol.<size>                  raw MPI doing what tandem's bcast does on up to 3 ranks with a
//                                              tensor of more than 4 KB sent in MPI messages (across hosts,
//                                              under 64 KB, or with TANDEM_DIRECT_READ=0; the
//                                              root's payload and every rank's header sent at once, headers
//                                              probed and received, the payload received into a new tensor
//                                              once it shows): what the checked protocol itself costs, apart
//                                              from tandem's bookkeeping; ratio= against mpi.bcast
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
//   BENCH_P2P_SIZES=4B,4KB: only these ping-pong sizes (labels as in the ids).
//   BENCH_COLL_SIZES=4096,65536,1048576: the collectives at these sizes in bytes (default 4 B, 4 KB,
//   1 MB and 16 MB; up to 16 MB); BENCH_COLL_OPS=bcast,alltoall: only these collectives.
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

  const char* only_sizes = std::getenv("BENCH_P2P_SIZES");  // e.g. "4B,4KB": only these labels
  for (int si = 0; si < 6; ++si) {
    if (only_sizes && !std::strstr(("," + std::string(only_sizes) + ",").c_str(), (std::string(",") + labels[si] + ",").c_str()))
      continue;
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

// "4KB", "1MB", or the byte count.
std::string size_label(std::size_t bytes) {
  if (bytes >= (std::size_t(1) << 20) && bytes % (std::size_t(1) << 20) == 0)
    return std::to_string(bytes >> 20) + "MB";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "KB";
  return std::to_string(bytes) + "B";
}

// BENCH_COLL_SIZES, else 4 B, 4 KB, 1 MB and 16 MB.
std::vector<std::size_t> collective_sizes(std::size_t max_bytes) {
  std::vector<std::size_t> sizes;
  if (const char* text = std::getenv("BENCH_COLL_SIZES")) {
    std::string list = text;
    for (std::size_t at = 0; at < list.size();) {
      const std::size_t comma = std::min(list.find(',', at), list.size());
      const std::size_t bytes = std::stoul(list.substr(at, comma - at));
      if (bytes < sizeof(float) || bytes > max_bytes) {
        std::fprintf(stderr, "BENCH_COLL_SIZES: %zu bytes is outside [4, %zu]\n", bytes, max_bytes);
        std::exit(2);
      }
      sizes.push_back(bytes);
      at = comma + 1;
    }
    return sizes;
  }
  return {4, 4096, std::size_t(1) << 20, std::size_t(16) << 20};
}

// tandem's bcast protocol for up to 3 ranks (MpiCommunicator::bcast_checked), in raw MPI and
// without tandem's bookkeeping: the root sends the payload to every peer with its header, every
// rank sends its header to every peer, takes every peer's (MPI_Improbe + MPI_Mrecv), and a
// receiver receives the payload into a new tensor (sized by the message) once it shows.
// Checks nothing: it measures what the messages cost.
void bcast_protocol_in_raw_mpi(const float* sb, int count, int rank, int np, MPI_Comm comm) {
  constexpr int kHeaderTag = 5, kPayloadTag = 6;
  char header_out[64] = {0}, header_in[64];
  std::vector<MPI_Request> sends;
  if (rank == 0) {
    for (int peer = 1; peer < np; ++peer) {
      sends.emplace_back();
      MPI_Isend(sb, count * int(sizeof(float)), MPI_BYTE, peer, kPayloadTag, comm, &sends.back());
    }
  }
  Tensor y;
  MPI_Request payload = MPI_REQUEST_NULL;
  auto look_for_payload = [&] {
    int found = 0;
    MPI_Message message;
    MPI_Status status;
    MPI_Improbe(0, kPayloadTag, comm, &found, &message, &status);
    if (!found) return false;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    y = Tensor({std::int64_t(bytes / sizeof(float))}, DType::f32);
    MPI_Imrecv(y.raw_data(), bytes, MPI_BYTE, &message, &payload);
    return true;
  };
  bool have_payload = rank == 0 || look_for_payload();
  for (int peer = 0; peer < np; ++peer) {
    if (peer == rank) continue;
    sends.emplace_back();
    MPI_Isend(header_out, sizeof header_out, MPI_BYTE, peer, kHeaderTag, comm, &sends.back());
  }
  for (int peer = 0; peer < np; ++peer) {
    if (peer == rank) continue;
    for (int found = 0; !found;) {
      MPI_Message message;
      MPI_Improbe(peer, kHeaderTag, comm, &found, &message, MPI_STATUS_IGNORE);
      if (found) MPI_Mrecv(header_in, sizeof header_in, MPI_BYTE, &message, MPI_STATUS_IGNORE);
      else if (!have_payload) have_payload = look_for_payload();
    }
  }
  while (!have_payload) have_payload = look_for_payload();
  MPI_Waitall(int(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
  MPI_Wait(&payload, MPI_STATUS_IGNORE);
}

void collectives(const Context& c) {
  const std::size_t maxb = std::size_t(16) << 20;
  const std::vector<std::size_t> sizes = collective_sizes(maxb);
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
    std::function<void(int count)> protocol;  // tandem's protocol in raw MPI (where written)
  };
  const std::vector<Op> ops = {
      {"allreduce", 2.0 * (np - 1) / np,
       [&](int n) { MPI_Allreduce(sb, rb, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { Tensor y = comm.allreduce(x, AllreduceOp::sum); }},
      {"allgather", double(np - 1),
       [&](int n) { MPI_Allgather(sb, n, MPI_FLOAT, rb, n, MPI_FLOAT, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { std::vector<Tensor> ys = comm.allgather(x); }},
      {"bcast", 1.0, [&](int n) { MPI_Bcast(sb, n, MPI_FLOAT, 0, MPI_COMM_WORLD); },
       [&](const Tensor& x, const std::vector<Tensor>&) { Tensor y = comm.bcast(x, 0); },
       [&](int n) {
         if (np <= 3) bcast_protocol_in_raw_mpi(sb, n, c.rank, np, MPI_COMM_WORLD);
       }},
      {"alltoall", double(np - 1) / np,
       [&](int n) { MPI_Alltoall(sb, n / np, MPI_FLOAT, rb, n / np, MPI_FLOAT, MPI_COMM_WORLD); },
       [&](const Tensor&, const std::vector<Tensor>& pieces) { std::vector<Tensor> ys = comm.alltoall(pieces); }},
  };

  const char* only_ops = std::getenv("BENCH_COLL_OPS");
  for (const Op& op : ops) {
    if (only_ops && !std::strstr(only_ops, op.name)) continue;
    const int variants = op.protocol && np <= 3 ? 3 : 2;  // raw, tandem, protocol
    for (const std::size_t bytes : sizes) {
      const std::string label = size_label(bytes);
      // alltoall: at least one element to each rank.
      const int count = std::max<int>(static_cast<int>(bytes / sizeof(float)), std::string(op.name) == "alltoall" ? np : 1);
      const std::size_t moved = std::size_t(count) * sizeof(float);  // bytes_per_rank
      const int warm = 3, iters = bench::scaled(bytes <= (std::size_t(1) << 20) ? 200 : 30);
      const Tensor x = sbt.slice_rows(0, count);
      std::vector<Tensor> pieces;  // alltoall: count / np elements to each peer
      const std::int64_t piece = count / np;
      for (int r = 0; r < np; ++r) pieces.push_back(sbt.slice_rows(r * piece, (r + 1) * piece));

      std::vector<double> t[3], tmax[3];
      long faults[3] = {0, 0, 0};
      for (int i = 0; i < warm + iters; ++i) {
        for (int k = 0; k < variants; ++k) {
          // Each variant goes first, in the middle and last in turn (with two: raw first, then tandem).
          const int v = variants == 2 ? (i % 2 ? 1 - k : k) : (i + k) % variants;
          const long f0 = minor_faults();
          MPI_Barrier(MPI_COMM_WORLD);
          const double t0 = MPI_Wtime();
          if (v == 0) op.raw(count);
          else if (v == 1) op.tandem(x, pieces);
          else op.protocol(count);
          const double dt = (MPI_Wtime() - t0) * 1e3;
          if (i >= warm) {
            t[v].push_back(dt);
            faults[v] += minor_faults() - f0;
          }
        }
      }
      for (long& f : faults) f = max_over_ranks(f);
      for (int v = 0; v < variants; ++v) {
        tmax[v].resize(iters);
        MPI_Reduce(t[v].data(), tmax[v].data(), iters, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
      }
      if (c.rank == 0) {
        const bench::Stats raw = bench::summarize(tmax[0]), tan = bench::summarize(tmax[1]);
        const double algbw_raw = moved / (raw.median_ms * 1e-3) / 1e9, algbw_tan = moved / (tan.median_ms * 1e-3) / 1e9;
        std::printf(
            "name=mpi.%s.%s lib=%s ranks=%d bytes_per_rank=%zu iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
            "algbw_GBps=%.3f busbw_GBps=%.3f\n",
            op.name, label.c_str(), c.lib.c_str(), np, moved, raw.iters, raw.median_ms, raw.min_ms, raw.max_ms, algbw_raw,
            algbw_raw * op.bus);
        std::printf(
            "name=tandem.mpi.%s.%s %s bytes_per_rank=%zu iters=%d median_ms=%.4f min_ms=%.4f max_ms=%.4f "
            "algbw_GBps=%.3f busbw_GBps=%.3f ratio=%.3f minflt_per_op=%.1f raw_minflt_per_op=%.1f\n",
            op.name, label.c_str(), c.tandem.c_str(), moved, tan.iters, tan.median_ms, tan.min_ms, tan.max_ms, algbw_tan,
            algbw_tan * op.bus, tan.median_ms / raw.median_ms, double(faults[1]) / iters, double(faults[0]) / iters);
        if (variants == 3) {
          const bench::Stats pro = bench::summarize(tmax[2]);
          std::printf(
              "name=mpi.%s_protocol.%s lib=%s ranks=%d bytes_per_rank=%zu iters=%d median_ms=%.4f min_ms=%.4f "
              "max_ms=%.4f ratio=%.3f tandem_over_protocol=%.3f\n",
              op.name, label.c_str(), c.lib.c_str(), np, moved, pro.iters, pro.median_ms, pro.min_ms, pro.max_ms,
              pro.median_ms / raw.median_ms, tan.median_ms / pro.median_ms);
        }
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

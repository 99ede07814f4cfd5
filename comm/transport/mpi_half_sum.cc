// MPI has no bf16 or f16 types: they travel as 16-bit words, and sums of them go through a
// user-defined operation that widens both operands to f32, adds, and rounds the sum once (each
// partial sum of a reduction is rounded to 16 bits, as NCCL's 16-bit sums are).
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <mutex>

#include "comm/transport/mpi_collective_util.h"
#include "comm/transport/mpi_world.h"
#include "core/half_types.h"

namespace tandem::comm_detail::collective_util {

namespace {

template <typename Half>
void half_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  const char* from = static_cast<const char*>(in);
  char* into = static_cast<char*>(inout);
  for (int i = 0; i < *length; ++i) {
    Half a, b;
    std::memcpy(&a, into + i * sizeof(Half), sizeof(Half));
    std::memcpy(&b, from + i * sizeof(Half), sizeof(Half));
    const Half sum(static_cast<float>(a) + static_cast<float>(b));
    std::memcpy(into + i * sizeof(Half), &sum, sizeof(Half));
  }
}

}  // namespace

MPI_Op mpi_sum(DType dtype) {
  if (!is_half(dtype)) return MPI_SUM;
  // Created once, after MPI_Init (the first 16-bit sum comes inside a collective); MPI frees user
  // operations at MPI_Finalize.
  static MPI_Op bf16_sum = MPI_OP_NULL, f16_sum = MPI_OP_NULL;
  static std::once_flag created;
  std::call_once(created, [] {
    comm_detail::check_mpi(MPI_Op_create(&half_sum<Eigen::bfloat16>, /*commute=*/1, &bf16_sum), "MPI_Op_create");
    comm_detail::check_mpi(MPI_Op_create(&half_sum<Eigen::half>, /*commute=*/1, &f16_sum), "MPI_Op_create");
  });
  return dtype == DType::bf16 ? bf16_sum : f16_sum;
}

}  // namespace tandem::comm_detail::collective_util

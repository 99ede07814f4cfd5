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
void add_halves(char* into, const char* from, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    Half a, b;
    std::memcpy(&a, into + i * sizeof(Half), sizeof(Half));
    std::memcpy(&b, from + i * sizeof(Half), sizeof(Half));
    const Half sum(static_cast<float>(a) + static_cast<float>(b));
    std::memcpy(into + i * sizeof(Half), &sum, sizeof(Half));
  }
}

// MPI's user function: inout[i] += in[i].
template <typename Half>
void half_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  add_halves<Half>(static_cast<char*>(inout), static_cast<const char*>(in), *length);
}

template <typename Half>
void scale_halves(Half* p, std::int64_t n, float scale) {
  for (std::int64_t i = 0; i < n; ++i) p[i] = Half(static_cast<float>(p[i]) * scale);
}

}  // namespace

void add_half_into(char* into, const char* from, std::int64_t n, DType dtype) {
  if (dtype == DType::bf16) add_halves<Eigen::bfloat16>(into, from, n);
  else add_halves<Eigen::half>(into, from, n);
}

void divide_half(Tensor& y, int size) {
  const float scale = 1.0f / static_cast<float>(size);
  if (y.dtype() == DType::bf16) scale_halves(static_cast<Eigen::bfloat16*>(y.raw_data()), y.numel(), scale);
  else scale_halves(static_cast<Eigen::half*>(y.raw_data()), y.numel(), scale);
}

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

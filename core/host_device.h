// TANDEM_HOST_DEVICE marks a function that is compiled for both the host and the GPU: the code
// that the CPU backend and the CUDA kernels share (core/philox.h, core/pool_window.h, cuda/'s
// index headers) is written once with it and checked on machines without a GPU. nvcc sees
// __host__ __device__; a host compiler sees nothing, so these headers stay plain C++.
#pragma once

#ifdef __CUDACC__
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

// Device helpers shared by the foxhunt kernels: warp/block reductions and precision-matched math.
#pragma once

#include <cuda_runtime.h>

namespace foxhunt {
namespace detail {

constexpr unsigned kFullMask = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

template <typename T>
__device__ __forceinline__ T warp_max(T x) {
  for (int offset = 16; offset > 0; offset >>= 1) x = fmax(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}

// Sum over the block, valid in thread 0. blockDim.x must be a multiple of 32; `scratch` holds 32 T.
// A fixed tree, so the result is the same run to run (no atomics).
template <typename T>
__device__ __forceinline__ T block_sum(T x, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  T total = T(0);
  if (warp == 0) {
    total = lane < warps ? scratch[lane] : T(0);
    total = warp_sum(total);
  }
  return total;
}

__device__ __forceinline__ float exp_t(float x) { return expf(x); }
__device__ __forceinline__ double exp_t(double x) { return exp(x); }

template <typename T>
__device__ __forceinline__ T huber(T u, T kappa) {
  const T abs_u = fabs(u);
  return abs_u <= kappa ? T(0.5) * u * u : kappa * (abs_u - T(0.5) * kappa);
}

template <typename T>
__device__ __forceinline__ T clamp_abs(T u, T kappa) {
  return fmin(fmax(u, -kappa), kappa);
}

inline int ceil_div(long long a, long long b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace detail
}  // namespace foxhunt

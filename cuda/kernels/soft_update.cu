// Polyak soft update of every target parameter in one launch over the flat buffer the Learner keeps.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

#include <type_traits>

namespace foxhunt {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 132 * 8;  // a few waves on an H100/H200; the grid-stride loop covers the rest

// Vector loads of 16 bytes where both buffers allow it (the caching allocator aligns to 512 bytes), a
// scalar tail. Reads 2 and writes 1 value per parameter: a pure bandwidth kernel.
template <typename T, typename V, int kWidth>
__global__ void soft_update_kernel(T* __restrict__ target, const T* __restrict__ online, T tau, long long n) {
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const long long first = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long vectors = n / kWidth;
  V* target_v = reinterpret_cast<V*>(target);
  const V* online_v = reinterpret_cast<const V*>(online);
  for (long long i = first; i < vectors; i += stride) {
    V t = target_v[i];
    const V o = online_v[i];
    T* tp = reinterpret_cast<T*>(&t);
    const T* op = reinterpret_cast<const T*>(&o);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) tp[k] += tau * (op[k] - tp[k]);
    target_v[i] = t;
  }
  for (long long i = vectors * kWidth + first; i < n; i += stride) target[i] += tau * (online[i] - target[i]);
}

}  // namespace

template <typename T>
void launch_soft_update(T* target, const T* online, T tau, std::int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(target) % 16 == 0) &&
                       (reinterpret_cast<std::uintptr_t>(online) % 16 == 0);
  constexpr int kWidth = 16 / sizeof(T);
  const long long work = aligned ? (n + kWidth - 1) / kWidth : n;
  long long blocks = (work + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  if (aligned) {
    using V = typename std::conditional<sizeof(T) == 4, float4, double2>::type;
    soft_update_kernel<T, V, kWidth><<<static_cast<int>(blocks), kThreads, 0, stream>>>(target, online, tau, n);
  } else {
    soft_update_kernel<T, T, 1><<<static_cast<int>(blocks), kThreads, 0, stream>>>(target, online, tau, n);
  }
}

template void launch_soft_update<float>(float*, const float*, float, std::int64_t, cudaStream_t);
template void launch_soft_update<double>(double*, const double*, double, std::int64_t, cudaStream_t);

}  // namespace foxhunt

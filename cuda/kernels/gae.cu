// Generalised advantage estimation: one thread per env column walking time backwards.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

// Grid: ceil(B/128) blocks of 128. At each step t a warp reads 32 consecutive columns of row t
// (coalesced); the recursion is sequential in t by nature. Reads 3 values and 2 flags, writes 2, per (t, b).
template <typename T>
__global__ void gae_kernel(const T* __restrict__ rewards, const T* __restrict__ values,
                           const T* __restrict__ next_values, const bool* __restrict__ terminated,
                           const bool* __restrict__ episode_end, T gamma, T lam, T* __restrict__ advantages,
                           T* __restrict__ returns, int steps, int columns) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= columns) return;
  const T gamma_lam = gamma * lam;
  T running = T(0);
  for (int t = steps - 1; t >= 0; --t) {
    const size_t i = static_cast<size_t>(t) * columns + col;
    const T value = values[i];
    const T bootstrap = terminated[i] ? T(0) : gamma * next_values[i];
    const T delta = rewards[i] + bootstrap - value;
    running = delta + (episode_end[i] ? T(0) : gamma_lam * running);
    advantages[i] = running;
    returns[i] = running + value;
  }
}

}  // namespace

template <typename T>
void launch_gae(const T* rewards, const T* values, const T* next_values, const bool* terminated,
                const bool* episode_end, T gamma, T lam, T* advantages, T* returns, int steps, int columns,
                cudaStream_t stream) {
  if (columns == 0 || steps == 0) return;
  gae_kernel<T><<<detail::ceil_div(columns, 128), 128, 0, stream>>>(rewards, values, next_values, terminated,
                                                                     episode_end, gamma, lam, advantages, returns,
                                                                     steps, columns);
}

template void launch_gae<float>(const float*, const float*, const float*, const bool*, const bool*, float, float,
                                float*, float*, int, int, cudaStream_t);
template void launch_gae<double>(const double*, const double*, const double*, const bool*, const bool*, double,
                                 double, double*, double*, int, int, cudaStream_t);

}  // namespace foxhunt

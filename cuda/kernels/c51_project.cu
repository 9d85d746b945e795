// C51 target projection: r + discount·z onto the fixed support, as a gather (no atomics, deterministic).
//
// Atom j's mass lands on target atom i with weight max(0, 1 − |b_j − i|), b_j = (clamp(Tz_j) − v_min)/Δz.
// That is exactly the classic split m_l += p(u − b), m_u += p(b − l), including the l == u case where b
// sits on an atom and gets all of p, without scattering: each thread owns one target atom and reads the
// row's Z positions from shared memory (Z² multiply-adds a row; Z = 51 makes that 2.6k, nothing).
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

// Grid: B blocks, one per row; block: Z threads rounded up to a warp (at most 1024; larger Z loops).
template <typename T>
__global__ void c51_project_kernel(const T* __restrict__ next_probs, const T* __restrict__ reward,
                                   const T* __restrict__ discount, T v_min, T v_max, T* __restrict__ target,
                                   int n_atoms) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* prob = reinterpret_cast<T*>(shared_raw);  // [Z]
  T* pos = prob + n_atoms;                      // [Z]
  const int row = blockIdx.x;
  const T r = reward[row], d = discount[row];
  const T delta_z = (v_max - v_min) / T(n_atoms - 1);
  const T last = T(n_atoms - 1);
  for (int j = threadIdx.x; j < n_atoms; j += blockDim.x) {
    const T z = v_min + T(j) * delta_z;
    const T tz = fmin(fmax(r + d * z, v_min), v_max);
    pos[j] = fmin(fmax((tz - v_min) / delta_z, T(0)), last);
    prob[j] = next_probs[static_cast<size_t>(row) * n_atoms + j];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_atoms; i += blockDim.x) {
    T mass = T(0);
    for (int j = 0; j < n_atoms; ++j) {
      const T weight = T(1) - fabs(pos[j] - T(i));
      if (weight > T(0)) mass += prob[j] * weight;
    }
    target[static_cast<size_t>(row) * n_atoms + i] = mass;
  }
}

}  // namespace

template <typename T>
void launch_c51_project(const T* next_probs, const T* reward, const T* discount, T v_min, T v_max,
                        T* target, int rows, int n_atoms, cudaStream_t stream) {
  if (rows == 0) return;
  int threads = ((n_atoms + 31) / 32) * 32;
  if (threads > 1024) threads = 1024;
  const size_t shared = 2 * static_cast<size_t>(n_atoms) * sizeof(T);
  c51_project_kernel<T><<<rows, threads, shared, stream>>>(next_probs, reward, discount, v_min, v_max, target,
                                                          n_atoms);
}

template void launch_c51_project<float>(const float*, const float*, const float*, float, float, float*, int, int,
                                        cudaStream_t);
template void launch_c51_project<double>(const double*, const double*, const double*, double, double, double*,
                                         int, int, cudaStream_t);

}  // namespace foxhunt

// IQN quantile Huber loss and its gradient w.r.t. θ in one pass over the T×T' pairs of each row.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::block_sum;

// Grid: B blocks, one per row; block: T threads rounded up to a warp (≤ 256; more quantiles loop).
// The row's T' targets sit in shared memory; thread i walks them for its θ_i, accumulating the weighted
// Huber term and its derivative together. Reads 2T + T' values a row, writes T + 1.
template <typename T>
__global__ void iqn_rows_kernel(const T* __restrict__ theta, const T* __restrict__ tau,
                                const T* __restrict__ target, T kappa, T* __restrict__ grad_theta,
                                T* __restrict__ row_loss, int rows, int n_quantiles, int n_targets) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  T* targets = reinterpret_cast<T*>(shared_raw);  // [T']
  T* scratch = targets + n_targets;                 // [32]
  const int row = blockIdx.x;
  for (int j = threadIdx.x; j < n_targets; j += blockDim.x)
    targets[j] = target[static_cast<size_t>(row) * n_targets + j];
  __syncthreads();
  const T inv_targets = T(1) / T(n_targets);
  const T grad_scale = -inv_targets / (kappa * T(rows));
  T local = T(0);
  for (int i = threadIdx.x; i < n_quantiles; i += blockDim.x) {
    const size_t idx = static_cast<size_t>(row) * n_quantiles + i;
    const T th = theta[idx], ta = tau[idx];
    T loss_i = T(0), grad_i = T(0);
    for (int j = 0; j < n_targets; ++j) {
      const T u = targets[j] - th;
      const T weight = fabs(ta - (u < T(0) ? T(1) : T(0)));
      loss_i += weight * detail::huber(u, kappa);
      grad_i += weight * detail::clamp_abs(u, kappa);
    }
    local += loss_i;
    grad_theta[idx] = grad_i * grad_scale;
  }
  const T total = block_sum(local, scratch);
  if (threadIdx.x == 0) row_loss[row] = total * inv_targets / kappa;
}

// One block: the mean of the per-row losses, in a fixed order.
template <typename T>
__global__ void mean_kernel(const T* __restrict__ values, int n, T* __restrict__ out) {
  __shared__ T scratch[32];
  T local = T(0);
  for (int i = threadIdx.x; i < n; i += blockDim.x) local += values[i];
  const T total = block_sum(local, scratch);
  if (threadIdx.x == 0) out[0] = total / T(n);
}

}  // namespace

template <typename T>
void launch_iqn_quantile_huber_loss(const T* theta, const T* tau, const T* target, T kappa, T* loss,
                                    T* grad_theta, T* row_loss, int rows, int n_quantiles, int n_targets,
                                    cudaStream_t stream) {
  if (rows > 0) {
    int threads = ((n_quantiles + 31) / 32) * 32;
    if (threads > 256) threads = 256;
    const size_t shared = (static_cast<size_t>(n_targets) + 32) * sizeof(T);
    iqn_rows_kernel<T><<<rows, threads, shared, stream>>>(theta, tau, target, kappa, grad_theta, row_loss, rows,
                                                         n_quantiles, n_targets);
  }
  mean_kernel<T><<<1, 512, 0, stream>>>(row_loss, rows, loss);
}

template void launch_iqn_quantile_huber_loss<float>(const float*, const float*, const float*, float, float*,
                                                    float*, float*, int, int, int, cudaStream_t);
template void launch_iqn_quantile_huber_loss<double>(const double*, const double*, const double*, double, double*,
                                                     double*, double*, int, int, int, cudaStream_t);

}  // namespace foxhunt

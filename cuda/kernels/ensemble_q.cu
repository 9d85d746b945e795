// Ensemble Q: w·E_C51[Q] + (1−w)·mean_τ IQN (both uncentred, Plan A v2), and its backward.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::exp_t;
using detail::warp_max;
using detail::warp_sum;

constexpr int kWarps = 8;  // one warp per (row, action)

// Softmax statistics of one atom row, held by every lane: max, Σ e^(x−max), Σ e^(x−max)·z.
template <typename T>
__device__ __forceinline__ void softmax_moments(const T* __restrict__ logit_row, const T* __restrict__ support,
                                                int n_atoms, int lane, T& mx, T& denom, T& numer) {
  T m = -INFINITY;
  for (int z = lane; z < n_atoms; z += 32) m = fmax(m, logit_row[z]);
  mx = warp_max(m);
  T d = T(0), n = T(0);
  for (int z = lane; z < n_atoms; z += 32) {
    const T e = exp_t(logit_row[z] - mx);
    d += e;
    n += e * support[z];
  }
  denom = warp_sum(d);
  numer = warp_sum(n);
}

// Grid: ceil(B·N/8) blocks of 256. Reads Z logits and T quantiles per (b, a); writes one value.
template <typename T>
__global__ void ensemble_q_kernel(const T* __restrict__ logits, const T* __restrict__ support,
                                  const T* __restrict__ quantiles, T w, T* __restrict__ q_ens, int rows,
                                  int n_actions, int n_atoms, int n_quantiles) {
  const int lane = threadIdx.x & 31;
  const long long pair = static_cast<long long>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (pair >= static_cast<long long>(rows) * n_actions) return;
  const long long row = pair / n_actions;
  const int action = static_cast<int>(pair - row * n_actions);
  T mx, denom, numer;
  softmax_moments(logits + pair * n_atoms, support, n_atoms, lane, mx, denom, numer);
  T qsum = T(0);
  for (int t = lane; t < n_quantiles; t += 32) qsum += quantiles[(row * n_quantiles + t) * n_actions + action];
  qsum = warp_sum(qsum);
  if (lane == 0) q_ens[pair] = w * (numer / denom) + (T(1) - w) * qsum / T(n_quantiles);
}

// Same grid. grad_logits = w·g·p_z·(z − E[z]) (softmax Jacobian), grad_quantiles = (1−w)·g/T.
template <typename T>
__global__ void ensemble_q_backward_kernel(const T* __restrict__ grad, const T* __restrict__ logits,
                                           const T* __restrict__ support, T w, T* __restrict__ grad_logits,
                                           T* __restrict__ grad_quantiles, int rows, int n_actions, int n_atoms,
                                           int n_quantiles) {
  const int lane = threadIdx.x & 31;
  const long long pair = static_cast<long long>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (pair >= static_cast<long long>(rows) * n_actions) return;
  const long long row = pair / n_actions;
  const int action = static_cast<int>(pair - row * n_actions);
  const T* logit_row = logits + pair * n_atoms;
  T mx, denom, numer;
  softmax_moments(logit_row, support, n_atoms, lane, mx, denom, numer);
  const T g = grad[pair];
  const T expected = numer / denom;
  const T scale = w * g / denom;
  for (int z = lane; z < n_atoms; z += 32)
    grad_logits[pair * n_atoms + z] = scale * exp_t(logit_row[z] - mx) * (support[z] - expected);
  const T gq = (T(1) - w) * g / T(n_quantiles);
  for (int t = lane; t < n_quantiles; t += 32) grad_quantiles[(row * n_quantiles + t) * n_actions + action] = gq;
}

}  // namespace

template <typename T>
void launch_ensemble_q(const T* logits, const T* support, const T* quantiles, T w, T* q_ens, int rows,
                       int n_actions, int n_atoms, int n_quantiles, cudaStream_t stream) {
  const long long pairs = static_cast<long long>(rows) * n_actions;
  if (pairs == 0) return;
  ensemble_q_kernel<T><<<detail::ceil_div(pairs, kWarps), kWarps * 32, 0, stream>>>(
      logits, support, quantiles, w, q_ens, rows, n_actions, n_atoms, n_quantiles);
}

template <typename T>
void launch_ensemble_q_backward(const T* grad, const T* logits, const T* support, T w, T* grad_logits,
                                T* grad_quantiles, int rows, int n_actions, int n_atoms, int n_quantiles,
                                cudaStream_t stream) {
  const long long pairs = static_cast<long long>(rows) * n_actions;
  if (pairs == 0) return;
  ensemble_q_backward_kernel<T><<<detail::ceil_div(pairs, kWarps), kWarps * 32, 0, stream>>>(
      grad, logits, support, w, grad_logits, grad_quantiles, rows, n_actions, n_atoms, n_quantiles);
}

template void launch_ensemble_q<float>(const float*, const float*, const float*, float, float*, int, int, int, int,
                                       cudaStream_t);
template void launch_ensemble_q<double>(const double*, const double*, const double*, double, double*, int, int,
                                        int, int, cudaStream_t);
template void launch_ensemble_q_backward<float>(const float*, const float*, const float*, float, float*, float*,
                                                int, int, int, int, cudaStream_t);
template void launch_ensemble_q_backward<double>(const double*, const double*, const double*, double, double*,
                                                 double*, int, int, int, int, cudaStream_t);

}  // namespace foxhunt

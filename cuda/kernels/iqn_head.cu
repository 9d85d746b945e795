// The IQN head after its tau embedding: q[B,T,N] = (h[B,1,H] * relu(pre[B,T,H])) W_out^T + b_out, and its backward.
//
// The [B,T,H] product h * relu(pre) is never written: with the replay batch at 1024 and 32 taus it is 16.8M
// floats (64 MB) per call, and the unfused head reads or writes tensors of that size about fourteen times
// per update (relu, product, output GEMM, and their backward). Here the forward reads pre once; the backward
// reads pre once and writes grad_pre once.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::warp_sum;

constexpr int kWarps = 8;
constexpr int kRowsPerBlock = 64;  // backward: rows of B per block (8 per warp)

// relu that keeps NaN (as torch.relu does), so the learner's non-finite guard still sees it.
template <typename T>
__device__ __forceinline__ T relu_nan(T p) {
  return (p > T(0) || p != p) ? p : T(0);
}

// Grid: B blocks of 256 threads; warp w handles taus t = w, w + 8, ...; lanes stride over H and reduce.
template <typename T>
__global__ void iqn_head_forward_kernel(const T* __restrict__ h, const T* __restrict__ pre,
                                        const T* __restrict__ w_out, const T* __restrict__ b_out, T* __restrict__ q,
                                        int n_tau, int hidden, int n_actions) {
  const long long b = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* h_row = h + b * hidden;
  for (int t = warp; t < n_tau; t += kWarps) {
    const T* p = pre + (b * n_tau + t) * hidden;
    T acc[kIqnHeadMaxActions];
#pragma unroll
    for (int a = 0; a < kIqnHeadMaxActions; ++a) acc[a] = T(0);
    for (int k = lane; k < hidden; k += 32) {
      const T x = h_row[k] * relu_nan(p[k]);
#pragma unroll
      for (int a = 0; a < kIqnHeadMaxActions; ++a)
        if (a < n_actions) acc[a] += x * w_out[static_cast<long long>(a) * hidden + k];
    }
    T* q_row = q + (b * n_tau + t) * n_actions;
#pragma unroll
    for (int a = 0; a < kIqnHeadMaxActions; ++a) {
      if (a < n_actions) {
        const T s = warp_sum(acc[a]);
        if (lane == 0) q_row[a] = s + b_out[a];
      }
    }
  }
}

// Grid: (ceil(B/64), ceil(H/32)) blocks of 256 threads. Lane l owns hidden unit k = 32*blockIdx.y + l; warp w
// takes rows b0 + w, b0 + w + 8, ... of its block's 64. Per (b, t): dx = g[b,t,:]·W_out[:,k];
// grad_pre = dx·h (where pre > 0); grad_h[b,k] = Σ_t dx·relu(pre); the block's partial sums of
// grad_W_out[a,k] = Σ g·h·relu(pre) and grad_b_out[a] = Σ g go to `partial` row blockIdx.x, summed over the
// row chunks by iqn_head_reduce_kernel in a fixed order (deterministic: no atomics).
template <typename T>
__global__ void iqn_head_backward_kernel(const T* __restrict__ grad, const T* __restrict__ h,
                                         const T* __restrict__ pre, const T* __restrict__ w_out,
                                         T* __restrict__ grad_h, T* __restrict__ grad_pre, T* __restrict__ partial,
                                         int rows, int n_tau, int hidden, int n_actions) {
  __shared__ T scratch[kWarps][kIqnHeadMaxActions][33];  // per-warp partials, padded against bank conflicts
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k = blockIdx.y * 32 + lane;
  const bool live = k < hidden;
  const long long row_end = min(static_cast<long long>(rows), static_cast<long long>(blockIdx.x + 1) * kRowsPerBlock);
  T w[kIqnHeadMaxActions], dw[kIqnHeadMaxActions], db[kIqnHeadMaxActions];
#pragma unroll
  for (int a = 0; a < kIqnHeadMaxActions; ++a) {
    w[a] = (live && a < n_actions) ? w_out[static_cast<long long>(a) * hidden + k] : T(0);
    dw[a] = T(0);
    db[a] = T(0);
  }
  for (long long b = static_cast<long long>(blockIdx.x) * kRowsPerBlock + warp; b < row_end; b += kWarps) {
    const T hk = live ? h[b * hidden + k] : T(0);
    T dh = T(0);
    for (int t = 0; t < n_tau; ++t) {
      const T* g = grad + (b * n_tau + t) * n_actions;
      T dx = T(0);
#pragma unroll
      for (int a = 0; a < kIqnHeadMaxActions; ++a) {
        if (a < n_actions) {
          const T ga = g[a];  // the same address in every lane: one broadcast load
          dx += ga * w[a];
          db[a] += ga;
        }
      }
      if (live) {
        const long long at = (b * n_tau + t) * hidden + k;
        const T p = pre[at];
        const T r = relu_nan(p);
        grad_pre[at] = p <= T(0) ? T(0) : dx * hk;  // torch's threshold_backward: NaN passes the gradient
        dh += dx * r;
        const T x = hk * r;
#pragma unroll
        for (int a = 0; a < kIqnHeadMaxActions; ++a)
          if (a < n_actions) dw[a] += g[a] * x;
      }
    }
    if (live) grad_h[b * hidden + k] = dh;
  }
  // Sum the 8 warps' partials in a fixed order; warp 0 writes this block's row of `partial`.
#pragma unroll
  for (int a = 0; a < kIqnHeadMaxActions; ++a) scratch[warp][a][lane] = dw[a];
  __syncthreads();
  const long long width = static_cast<long long>(n_actions) * hidden + n_actions;
  T* out = partial + blockIdx.x * width;
  if (warp == 0 && live) {
    for (int a = 0; a < n_actions; ++a) {
      T s = T(0);
      for (int v = 0; v < kWarps; ++v) s += scratch[v][a][lane];
      out[static_cast<long long>(a) * hidden + k] = s;
    }
  }
  if (blockIdx.y != 0) return;  // grad_b_out: once per row chunk (every lane of a warp summed the same g)
  __syncthreads();
#pragma unroll
  for (int a = 0; a < kIqnHeadMaxActions; ++a) scratch[warp][a][lane] = db[a];
  __syncthreads();
  if (warp == 0 && lane < n_actions) {
    T s = T(0);
    for (int v = 0; v < kWarps; ++v) s += scratch[v][lane][0];
    out[static_cast<long long>(n_actions) * hidden + lane] = s;
  }
}

// Column sums of partial[chunks, width] in chunk order: grad_w_out (first N*H columns) and grad_b_out (last N).
template <typename T>
__global__ void iqn_head_reduce_kernel(const T* __restrict__ partial, T* __restrict__ grad_w_out,
                                       T* __restrict__ grad_b_out, int chunks, int hidden, int n_actions) {
  const long long width = static_cast<long long>(n_actions) * hidden + n_actions;
  const long long col = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= width) return;
  T s = T(0);
  for (int c = 0; c < chunks; ++c) s += partial[c * width + col];
  const long long n_w = static_cast<long long>(n_actions) * hidden;
  if (col < n_w) {
    grad_w_out[col] = s;
  } else {
    grad_b_out[col - n_w] = s;
  }
}

}  // namespace

int iqn_head_backward_chunks(int rows) { return rows == 0 ? 0 : detail::ceil_div(rows, kRowsPerBlock); }

template <typename T>
void launch_iqn_head_forward(const T* h, const T* pre, const T* w_out, const T* b_out, T* q, int rows, int n_tau,
                             int hidden, int n_actions, cudaStream_t stream) {
  if (rows == 0 || n_tau == 0) return;
  iqn_head_forward_kernel<T><<<rows, kWarps * 32, 0, stream>>>(h, pre, w_out, b_out, q, n_tau, hidden, n_actions);
}

template <typename T>
void launch_iqn_head_backward(const T* grad, const T* h, const T* pre, const T* w_out, T* grad_h, T* grad_pre,
                              T* grad_w_out, T* grad_b_out, T* partial, int rows, int n_tau, int hidden,
                              int n_actions, cudaStream_t stream) {
  const int chunks = iqn_head_backward_chunks(rows);
  const long long width = static_cast<long long>(n_actions) * hidden + n_actions;
  if (chunks == 0) {  // no rows: the weight gradients are zero
    cudaMemsetAsync(grad_w_out, 0, sizeof(T) * n_actions * static_cast<size_t>(hidden), stream);
    cudaMemsetAsync(grad_b_out, 0, sizeof(T) * n_actions, stream);
    return;
  }
  const dim3 grid(chunks, detail::ceil_div(hidden, 32));
  iqn_head_backward_kernel<T><<<grid, kWarps * 32, 0, stream>>>(grad, h, pre, w_out, grad_h, grad_pre, partial,
                                                                 rows, n_tau, hidden, n_actions);
  iqn_head_reduce_kernel<T><<<detail::ceil_div(width, 256), 256, 0, stream>>>(partial, grad_w_out, grad_b_out,
                                                                               chunks, hidden, n_actions);
}

template void launch_iqn_head_forward<float>(const float*, const float*, const float*, const float*, float*, int,
                                             int, int, int, cudaStream_t);
template void launch_iqn_head_forward<double>(const double*, const double*, const double*, const double*, double*,
                                              int, int, int, int, cudaStream_t);
template void launch_iqn_head_backward<float>(const float*, const float*, const float*, const float*, float*, float*,
                                              float*, float*, float*, int, int, int, int, cudaStream_t);
template void launch_iqn_head_backward<double>(const double*, const double*, const double*, const double*, double*,
                                               double*, double*, double*, double*, int, int, int, int, cudaStream_t);

}  // namespace foxhunt

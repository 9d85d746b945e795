// DuelingQHead kernels: fused forward, decompose-and-backward to weight gradients, double-DQN Bellman
// target, Huber loss with its gradient. h is detached by the learner, but grad_h is still produced so the
// op is a complete differentiable function.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::block_sum;
using detail::ceil_div;
using detail::warp_sum;

constexpr int kForwardWarps = 8;  // one warp per batch row

// Grid: ceil(B/8) blocks of 256 threads. Each warp computes the N+1 dot products of its row of h (V's
// column and A's N columns), keeps them in shared memory, then composes Q with the row's mean advantage.
// Reads h once per column from L1, the weights (H·(N+1) values) from L1/L2; writes 1 + 2N values a row.
template <typename T>
__global__ void dueling_forward_kernel(const T* __restrict__ h, const T* __restrict__ w_v,
                                       const T* __restrict__ b_v, const T* __restrict__ w_a,
                                       const T* __restrict__ b_a, T* __restrict__ v, T* __restrict__ a,
                                       T* __restrict__ q, int rows, int hidden, int n_actions) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T* out = reinterpret_cast<T*>(shared_raw) + warp * (n_actions + 1);
  const int row = blockIdx.x * kForwardWarps + warp;
  if (row >= rows) return;  // whole warp leaves together; only __syncwarp follows
  const T* h_row = h + static_cast<size_t>(row) * hidden;

  T acc = T(0);
  for (int k = lane; k < hidden; k += 32) acc += h_row[k] * w_v[k];
  acc = warp_sum(acc);
  if (lane == 0) out[n_actions] = acc + b_v[0];
  for (int c = 0; c < n_actions; ++c) {
    acc = T(0);
    for (int k = lane; k < hidden; k += 32) acc += h_row[k] * w_a[static_cast<size_t>(k) * n_actions + c];
    acc = warp_sum(acc);
    if (lane == 0) out[c] = acc + b_a[c];
  }
  __syncwarp();

  T sum_a = T(0);
  for (int c = lane; c < n_actions; c += 32) sum_a += out[c];
  const T mean_a = warp_sum(sum_a) / T(n_actions);
  const T value = out[n_actions];
  if (lane == 0) v[row] = value;
  for (int c = lane; c < n_actions; c += 32) {
    const T adv = out[c];
    a[static_cast<size_t>(row) * n_actions + c] = adv;
    q[static_cast<size_t>(row) * n_actions + c] = value + adv - mean_a;
  }
}

constexpr int kOnePassWarps = 4;   // forward, one pass: warps (rows) per block
constexpr int kOnePassColumns = 16;  // forward, one pass: A's columns kept in registers (n_actions <= 16)

// The same forward in one pass over h's row: each lane keeps all N columns of A and V's in registers, reads each
// h[k] once and its row of W_a once, and the N + 1 warp sums are independent of one another (the loop above makes
// N + 1 passes, each ending in a dependent warp sum). Each lane sums the same products in the same order as the
// kernel above, and the warp sums are the same butterflies (both kernels are checked against the float64
// reference by learner/ops/checks.py). NA >= n_actions.
template <typename T, int NA>
__global__ void __launch_bounds__(kOnePassWarps * 32)
    dueling_forward_onepass_kernel(const T* __restrict__ h, const T* __restrict__ w_v, const T* __restrict__ b_v,
                                   const T* __restrict__ w_a, const T* __restrict__ b_a, T* __restrict__ v,
                                   T* __restrict__ a, T* __restrict__ q, int rows, int hidden, int n_actions) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kOnePassWarps + (threadIdx.x >> 5);
  if (row >= rows) return;  // whole warps only; no barrier follows
  const T* h_row = h + static_cast<size_t>(row) * hidden;
  T acc_v = T(0);
  T acc[NA];
#pragma unroll
  for (int c = 0; c < NA; ++c) acc[c] = T(0);
  for (int k = lane; k < hidden; k += 32) {
    const T x = h_row[k];
    acc_v += x * w_v[k];
    const T* w_row = w_a + static_cast<size_t>(k) * n_actions;
#pragma unroll
    for (int c = 0; c < NA; ++c)
      if (c < n_actions) acc[c] += x * __ldg(w_row + c);
  }
  const T value = warp_sum(acc_v) + b_v[0];
  T mine = T(0);  // lane c keeps A[row, c], as the kernel above keeps it in shared memory
#pragma unroll
  for (int c = 0; c < NA; ++c) {
    if (c < n_actions) {
      const T adv = warp_sum(acc[c]) + b_a[c];
      if (lane == c) mine = adv;
    }
  }
  const T mean_a = warp_sum(mine) / T(n_actions);
  if (lane == 0) v[row] = value;
  if (lane < n_actions) {
    a[static_cast<size_t>(row) * n_actions + lane] = mine;
    q[static_cast<size_t>(row) * n_actions + lane] = value + mine - mean_a;
  }
}

constexpr int kBackwardThreads = 256;
constexpr int kHiddenTile = 32;
constexpr size_t kSharedBudget = 40 * 1024;

// Rows per block so that G[rows][N+1], W[32][N+1] and h[rows][33] fit the shared-memory budget.
int backward_row_chunk(int n_actions, size_t elem_size) {
  const size_t cols = static_cast<size_t>(n_actions) + 1;
  const size_t fixed = kHiddenTile * cols * elem_size;
  const size_t per_row = (cols + kHiddenTile + 1) * elem_size;
  long long chunk = fixed >= kSharedBudget ? 1 : static_cast<long long>((kSharedBudget - fixed) / per_row);
  if (chunk > 64) chunk = 64;
  if (chunk < 1) chunk = 1;
  return static_cast<int>(chunk);
}

// Grid: (ceil(H/32) hidden tiles, ceil(B/chunk) row chunks), 256 threads. Each block
//  1. forms G = [grad_A_total | grad_V_total] for its rows through the dueling Jacobian
//     (grad_V = grad_v + Σ_a grad_q; grad_A = grad_a + grad_q − mean_a grad_q),
//  2. writes its tile of grad_h = G·[W_a | w_v]ᵀ,
//  3. writes its chunk's partial Σ_b h[b,k]·G[b,c] for its hidden tile (and, in the first tile, Σ_b G[b,c]
//     for the biases) into the workspace; dueling_backward_finish sums the chunks in a fixed order.
template <typename T>
__global__ void dueling_backward_partial_kernel(const T* __restrict__ grad_v, const T* __restrict__ grad_a,
                                                const T* __restrict__ grad_q, const T* __restrict__ h,
                                                const T* __restrict__ w_v, const T* __restrict__ w_a,
                                                T* __restrict__ grad_h, T* __restrict__ partial,
                                                T* __restrict__ bias_partial, int rows, int hidden,
                                                int n_actions, int chunk) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int cols = n_actions + 1;
  T* g = reinterpret_cast<T*>(shared_raw);  // [chunk][cols]
  T* w = g + chunk * cols;                   // [32][cols]
  T* h_tile = w + kHiddenTile * cols;        // [chunk][33]
  const int b0 = blockIdx.y * chunk, k0 = blockIdx.x * kHiddenTile;
  const int nb = min(chunk, rows - b0), nk = min(kHiddenTile, hidden - k0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;

  for (int r = warp; r < nb; r += warps) {
    const size_t base = static_cast<size_t>(b0 + r) * n_actions;
    T sum_q = T(0);
    if (grad_q != nullptr)
      for (int c = lane; c < n_actions; c += 32) sum_q += grad_q[base + c];
    sum_q = warp_sum(sum_q);
    const T mean_q = sum_q / T(n_actions);
    for (int c = lane; c < n_actions; c += 32) {
      T ga = grad_a != nullptr ? grad_a[base + c] : T(0);
      if (grad_q != nullptr) ga += grad_q[base + c] - mean_q;
      g[r * cols + c] = ga;
    }
    if (lane == 0) g[r * cols + n_actions] = (grad_v != nullptr ? grad_v[b0 + r] : T(0)) + sum_q;
  }
  for (int i = threadIdx.x; i < nk * cols; i += blockDim.x) {
    const int kk = i / cols, c = i - kk * cols;
    w[i] = c < n_actions ? w_a[static_cast<size_t>(k0 + kk) * n_actions + c] : w_v[k0 + kk];
  }
  for (int i = threadIdx.x; i < nb * kHiddenTile; i += blockDim.x) {
    const int r = i / kHiddenTile, kk = i - r * kHiddenTile;
    if (kk < nk) h_tile[r * (kHiddenTile + 1) + kk] = h[static_cast<size_t>(b0 + r) * hidden + k0 + kk];
  }
  __syncthreads();

  for (int i = threadIdx.x; i < nb * nk; i += blockDim.x) {
    const int r = i / nk, kk = i - r * nk;
    T acc = T(0);
    for (int c = 0; c < cols; ++c) acc += g[r * cols + c] * w[kk * cols + c];
    grad_h[static_cast<size_t>(b0 + r) * hidden + k0 + kk] = acc;
  }
  T* my_partial = partial + static_cast<size_t>(blockIdx.y) * hidden * cols;
  for (int i = threadIdx.x; i < nk * cols; i += blockDim.x) {
    const int c = i / nk, kk = i - c * nk;
    T acc = T(0);
    for (int r = 0; r < nb; ++r) acc += h_tile[r * (kHiddenTile + 1) + kk] * g[r * cols + c];
    my_partial[static_cast<size_t>(k0 + kk) * cols + c] = acc;
  }
  if (blockIdx.x == 0) {
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      T acc = T(0);
      for (int r = 0; r < nb; ++r) acc += g[r * cols + c];
      bias_partial[static_cast<size_t>(blockIdx.y) * cols + c] = acc;
    }
  }
}

// One thread per weight/bias gradient element: the sum over row chunks, in chunk order (deterministic).
template <typename T>
__global__ void dueling_backward_finish_kernel(const T* __restrict__ partial, const T* __restrict__ bias_partial,
                                               T* __restrict__ grad_w_v, T* __restrict__ grad_b_v,
                                               T* __restrict__ grad_w_a, T* __restrict__ grad_b_a, int hidden,
                                               int n_actions, int chunks) {
  const int cols = n_actions + 1;
  const long long weights = static_cast<long long>(hidden) * cols;
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < weights) {
    T acc = T(0);
    for (int s = 0; s < chunks; ++s) acc += partial[s * weights + i];
    const long long k = i / cols;
    const int c = static_cast<int>(i - k * cols);
    if (c < n_actions)
      grad_w_a[k * n_actions + c] = acc;
    else
      grad_w_v[k] = acc;
  } else if (i < weights + cols) {
    const int c = static_cast<int>(i - weights);
    T acc = T(0);
    for (int s = 0; s < chunks; ++s) acc += bias_partial[s * cols + c];
    if (c < n_actions)
      grad_b_a[c] = acc;
    else
      grad_b_v[0] = acc;
  }
}

// One thread per row: first-max argmax of the online Q (NaN counts as the max, as torch.argmax), then
// the scalar target. Reads 2N + 2 values a row (the target row only at a*).
template <typename T>
__global__ void dueling_bellman_target_kernel(const T* __restrict__ q_online_next,
                                              const T* __restrict__ q_target_next, const T* __restrict__ reward,
                                              const T* __restrict__ discount, T* __restrict__ y, int rows,
                                              int n_actions) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  const T* q_row = q_online_next + static_cast<size_t>(row) * n_actions;
  T best = q_row[0];
  int best_action = 0;
  for (int c = 1; c < n_actions; ++c) {
    const T x = q_row[c];
    if (x > best || (x != x && best == best)) {
      best = x;
      best_action = c;
    }
  }
  y[row] = reward[row] + discount[row] * q_target_next[static_cast<size_t>(row) * n_actions + best_action];
}

constexpr int kHuberThreads = 512;

// One block: each thread takes rows b ≡ tid (mod 512), writes their whole grad_q rows (zero except at
// the taken action) and adds their Huber terms; a fixed-order block sum gives the mean.
template <typename T>
__global__ void dueling_huber_loss_kernel(const T* __restrict__ q, const int64_t* __restrict__ action,
                                          const T* __restrict__ y, T kappa, T* __restrict__ loss,
                                          T* __restrict__ grad_q, int rows, int n_actions) {
  __shared__ T scratch[32];
  const T inv_rows = T(1) / T(rows);
  T local = T(0);
  int bad = 0;
  for (int row = threadIdx.x; row < rows; row += blockDim.x) {
    const int64_t act = action[row];
    const bool valid = act >= 0 && act < n_actions;
    T grad = T(0);
    if (valid) {
      const T diff = q[static_cast<size_t>(row) * n_actions + act] - y[row];
      local += detail::huber(diff, kappa);
      grad = detail::clamp_abs(diff, kappa) * inv_rows;
    } else {
      bad = 1;
    }
    for (int c = 0; c < n_actions; ++c) grad_q[static_cast<size_t>(row) * n_actions + c] = c == act ? grad : T(0);
  }
  const int any_bad = __syncthreads_or(bad);
  const T total = block_sum(local, scratch);
  if (threadIdx.x == 0) loss[0] = any_bad ? T(NAN) : total * inv_rows;
}

}  // namespace

template <typename T>
void launch_dueling_forward(const T* h, const T* w_v, const T* b_v, const T* w_a, const T* b_a, T* v, T* a,
                            T* q, int rows, int hidden, int n_actions, cudaStream_t stream) {
  if (rows == 0) return;
  const int blocks = ceil_div(rows, kOnePassWarps), threads = kOnePassWarps * 32;
  if (n_actions <= 8) {
    dueling_forward_onepass_kernel<T, 8><<<blocks, threads, 0, stream>>>(h, w_v, b_v, w_a, b_a, v, a, q, rows,
                                                                          hidden, n_actions);
  } else if (n_actions <= kOnePassColumns) {
    dueling_forward_onepass_kernel<T, kOnePassColumns><<<blocks, threads, 0, stream>>>(h, w_v, b_v, w_a, b_a, v, a,
                                                                                         q, rows, hidden, n_actions);
  } else {  // wide action sets: one pass per column, the columns in shared memory
    const size_t shared = static_cast<size_t>(kForwardWarps) * (n_actions + 1) * sizeof(T);
    dueling_forward_kernel<T><<<ceil_div(rows, kForwardWarps), kForwardWarps * 32, shared, stream>>>(
        h, w_v, b_v, w_a, b_a, v, a, q, rows, hidden, n_actions);
  }
}

std::size_t dueling_backward_workspace_elems(int rows, int hidden, int n_actions, std::size_t elem_size) {
  const int chunk = backward_row_chunk(n_actions, elem_size);
  const std::size_t chunks = static_cast<std::size_t>(ceil_div(rows > 0 ? rows : 1, chunk));
  const std::size_t cols = static_cast<std::size_t>(n_actions) + 1;
  return chunks * (static_cast<std::size_t>(hidden) * cols + cols);
}

template <typename T>
void launch_dueling_backward(const T* grad_v, const T* grad_a, const T* grad_q, const T* h, const T* w_v,
                             const T* w_a, T* grad_h, T* grad_w_v, T* grad_b_v, T* grad_w_a, T* grad_b_a,
                             T* workspace, int rows, int hidden, int n_actions, cudaStream_t stream) {
  const int chunk = backward_row_chunk(n_actions, sizeof(T));
  const int chunks = ceil_div(rows > 0 ? rows : 1, chunk);
  const int cols = n_actions + 1;
  T* partial = workspace;
  T* bias_partial = workspace + static_cast<size_t>(chunks) * hidden * cols;
  if (rows > 0) {
    const size_t shared = (static_cast<size_t>(chunk) * cols + static_cast<size_t>(kHiddenTile) * cols +
                           static_cast<size_t>(chunk) * (kHiddenTile + 1)) *
                          sizeof(T);
    const dim3 grid(ceil_div(hidden, kHiddenTile), chunks);
    dueling_backward_partial_kernel<T><<<grid, kBackwardThreads, shared, stream>>>(
        grad_v, grad_a, grad_q, h, w_v, w_a, grad_h, partial, bias_partial, rows, hidden, n_actions, chunk);
  } else {
    cudaMemsetAsync(workspace, 0, dueling_backward_workspace_elems(1, hidden, n_actions, sizeof(T)) * sizeof(T),
                    stream);
  }
  const long long outputs = static_cast<long long>(hidden) * cols + cols;
  dueling_backward_finish_kernel<T><<<ceil_div(outputs, 256), 256, 0, stream>>>(
      partial, bias_partial, grad_w_v, grad_b_v, grad_w_a, grad_b_a, hidden, n_actions, chunks);
}

template <typename T>
void launch_dueling_bellman_target(const T* q_online_next, const T* q_target_next, const T* reward,
                                   const T* discount, T* y, int rows, int n_actions, cudaStream_t stream) {
  if (rows == 0) return;
  dueling_bellman_target_kernel<T><<<ceil_div(rows, 128), 128, 0, stream>>>(q_online_next, q_target_next, reward,
                                                                             discount, y, rows, n_actions);
}

template <typename T>
void launch_dueling_huber_loss(const T* q, const int64_t* action, const T* y, T kappa, T* loss, T* grad_q,
                               int rows, int n_actions, cudaStream_t stream) {
  dueling_huber_loss_kernel<T><<<1, kHuberThreads, 0, stream>>>(q, action, y, kappa, loss, grad_q, rows, n_actions);
}

#define FOXHUNT_INSTANTIATE(T)                                                                                   \
  template void launch_dueling_forward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int, int, \
                                          int, cudaStream_t);                                                   \
  template void launch_dueling_backward<T>(const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, \
                                           T*, T*, T*, int, int, int, cudaStream_t);                             \
  template void launch_dueling_bellman_target<T>(const T*, const T*, const T*, const T*, T*, int, int,           \
                                                 cudaStream_t);                                                 \
  template void launch_dueling_huber_loss<T>(const T*, const int64_t*, const T*, T, T*, T*, int, int, cudaStream_t);

FOXHUNT_INSTANTIATE(float)
FOXHUNT_INSTANTIATE(double)
#undef FOXHUNT_INSTANTIATE

}  // namespace foxhunt

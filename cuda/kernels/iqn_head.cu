// The IQN head after its tau embedding: q[B,T,N] = (h[B,1,H] * relu(pre[B,T,H])) W_out^T + b_out, and its backward.
//
// The [B,T,H] product h * relu(pre) is never written: with the replay batch at 1024 and 32 taus it is 16.8M
// floats (64 MB) per call, and the unfused head reads or writes tensors of that size about fourteen times
// per update (relu, product, output GEMM, and their backward). Here the forward reads pre once; the backward
// reads pre once and writes grad_pre once, so both are bound by memory bandwidth: every thread moves packs of
// consecutive hidden units (up to 16 bytes, float4 or double2, narrower as N grows so that nothing spills) when H
// and the pointers allow it, reads W_out once per block (the forward, from shared memory) or per thread (the
// backward, in registers) for several rows, and keeps several rows' loads in flight.
#include <cstdint>
#include <initializer_list>

#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::warp_sum;

constexpr int kFwdWarps = 16;         // forward: warps per block, one task (one b, kFwdTaus taus) per warp
constexpr int kFwdTaus = 2;           // forward: taus per warp (W_out's packs read once per 2 rows)
constexpr int kFwdSharedBytes = 48 * 1024;  // forward: W_out staged in shared memory up to this size
constexpr int kBwdWarps = 4;          // backward: warps per block
constexpr int kRowsPerBlock = 8;      // backward: rows of B per block (2 per warp)
constexpr int kBwdTaus = 8;           // backward: taus whose pre packs are loaded together
constexpr int kReduceSlices = 8;      // reduce: partial rows summed per column by 8 threads, then in order
constexpr int kPackBytes = 16;

// V consecutive elements loaded or stored as one 16-byte (or, for V = 1, one scalar) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// One pack through the read-only path: a single 16-byte load when the pack is 16 bytes.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load(const T* base, long long pack) {
  const Pack<T, V>* p = reinterpret_cast<const Pack<T, V>*>(base) + pack;
  Pack<T, V> out;
  if constexpr (sizeof(Pack<T, V>) == 16 && sizeof(T) == 4) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(p));
    out.v[0] = x.x;
    out.v[1] = x.y;
    out.v[2] = x.z;
    out.v[3] = x.w;
  } else if constexpr (sizeof(Pack<T, V>) == 16 && sizeof(T) == 8) {
    const double2 x = __ldg(reinterpret_cast<const double2*>(p));
    out.v[0] = x.x;
    out.v[1] = x.y;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) out.v[i] = __ldg(&p->v[i]);
  }
  return out;
}

// relu that keeps NaN (as torch.relu does), so the learner's non-finite guard still sees it.
template <typename T>
__device__ __forceinline__ T relu_nan(T p) {
  return (p > T(0) || p != p) ? p : T(0);
}

// Forward. Warp `task` = blockIdx.x * kFwdWarps + warp takes row b = task / groups and taus t0, t0 + 1
// (t0 = 2 * (task % groups), groups = ceil(T / 2)); lane l takes the packs l, l + 32, ... of H, two at a time.
// STAGED: the block first copies W_out[n_actions, H] into shared memory (W_out is a view into the learner's flat
// parameter buffer, on no particular boundary; shared memory reads it back as packs). NA >= n_actions
// accumulators per tau; each q is one warp sum, so the result is the same run to run.
template <typename T, int V, int NA, bool STAGED>
__global__ void __launch_bounds__(kFwdWarps * 32, (sizeof(T) == 8 || NA > 8) ? 1 : 2)
    iqn_head_forward_kernel(const T* __restrict__ h, const T* __restrict__ pre, const T* __restrict__ w_out,
                            const T* __restrict__ b_out, T* __restrict__ q, long long tasks, int n_tau, int hidden,
                            int n_actions) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int lane = threadIdx.x & 31;
  const int packs = hidden / V;
  const T* w_src = w_out;
  if constexpr (STAGED) {
    T* w_shared = reinterpret_cast<T*>(shared_raw);
    const int n_w = n_actions * hidden;
    for (int i = threadIdx.x; i < n_w; i += blockDim.x) w_shared[i] = w_out[i];
    __syncthreads();
    w_src = w_shared;
  }
  const long long task = static_cast<long long>(blockIdx.x) * kFwdWarps + (threadIdx.x >> 5);
  if (task >= tasks) return;  // whole warps only; no block barrier follows
  const int groups = (n_tau + kFwdTaus - 1) / kFwdTaus;
  const long long b = task / groups;
  const int t0 = static_cast<int>(task % groups) * kFwdTaus;
  const long long row0 = (b * n_tau + t0) * packs;  // pre's first pack of row (b, t0)
  T acc[kFwdTaus][NA];
#pragma unroll
  for (int r = 0; r < kFwdTaus; ++r)
#pragma unroll
    for (int a = 0; a < NA; ++a) acc[r][a] = T(0);
#pragma unroll 2
  for (int k = lane; k < packs; k += 32) {
    const Pack<T, V> hk = load<T, V>(h, b * packs + k);
    Pack<T, V> x[kFwdTaus];
#pragma unroll
    for (int r = 0; r < kFwdTaus; ++r) {
      if (t0 + r < n_tau) {
        x[r] = load<T, V>(pre, row0 + static_cast<long long>(r) * packs + k);
      } else {
#pragma unroll
        for (int i = 0; i < V; ++i) x[r].v[i] = T(0);
      }
#pragma unroll
      for (int i = 0; i < V; ++i) x[r].v[i] = hk.v[i] * relu_nan(x[r].v[i]);
    }
#pragma unroll
    for (int a = 0; a < NA; ++a) {
      if (a < n_actions) {
        Pack<T, V> w;
        if constexpr (STAGED) {
          w = reinterpret_cast<const Pack<T, V>*>(w_src)[static_cast<long long>(a) * packs + k];
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) w.v[i] = __ldg(w_src + (static_cast<long long>(a) * packs + k) * V + i);
        }
#pragma unroll
        for (int r = 0; r < kFwdTaus; ++r)
#pragma unroll
          for (int i = 0; i < V; ++i) acc[r][a] += x[r].v[i] * w.v[i];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kFwdTaus; ++r) {
    if (t0 + r >= n_tau) break;  // uniform across the warp
    T* q_row = q + (b * n_tau + t0 + r) * n_actions;
#pragma unroll
    for (int a = 0; a < NA; ++a) {
      if (a < n_actions) {
        const T s = warp_sum(acc[r][a]);
        if (lane == 0) q_row[a] = s + b_out[a];
      }
    }
  }
}

// Backward. Grid (ceil(B/8), ceil(H/V/32)) blocks of 128 threads. Lane l owns the pack of hidden units
// k = 32*blockIdx.y + l; warp w takes rows b0 + w and b0 + w + 4 of its block's 8. Per (b, t):
// dx = g[b,t,:]·W_out[:,k]; grad_pre = dx·h (where pre > 0 or NaN); grad_h[b,k] = Σ_t dx·relu(pre); the
// block's partial sums of grad_W_out[a,k] = Σ g·h·relu(pre) and grad_b_out[a] = Σ g go to `partial` row
// blockIdx.x (the warps summed in a fixed order), then iqn_head_reduce_kernel sums the row chunks in a fixed
// order (deterministic: no atomics).
template <typename T, int V, int NA>
__global__ void __launch_bounds__(kBwdWarps * 32, (sizeof(T) == 8 && NA > 8) ? 2 : NA > 8 ? 3 : 4)
    iqn_head_backward_kernel(const T* __restrict__ grad, const T* __restrict__ h, const T* __restrict__ pre,
                             const T* __restrict__ w_out, T* __restrict__ grad_h, T* __restrict__ grad_pre,
                             T* __restrict__ partial, int rows, int n_tau, int hidden, int n_actions) {
  __shared__ Pack<T, V> scratch[kBwdWarps][32];
  __shared__ T scratch_db[kBwdWarps][NA];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int packs = hidden / V;
  const int k = blockIdx.y * 32 + lane;
  const bool live = k < packs;
  const long long row_end = min(static_cast<long long>(rows), static_cast<long long>(blockIdx.x + 1) * kRowsPerBlock);
  Pack<T, V> w[NA], dw[NA];
  T db[NA];
#pragma unroll
  for (int a = 0; a < NA; ++a) {
#pragma unroll
    for (int i = 0; i < V; ++i)  // W_out may sit on no pack boundary (a view into the flat parameters)
      w[a].v[i] = (live && a < n_actions) ? __ldg(w_out + static_cast<long long>(a) * hidden + k * V + i) : T(0);
#pragma unroll
    for (int i = 0; i < V; ++i) dw[a].v[i] = T(0);
    db[a] = T(0);
  }
  Pack<T, V>* grad_pre_packs = reinterpret_cast<Pack<T, V>*>(grad_pre);
  for (long long b = static_cast<long long>(blockIdx.x) * kRowsPerBlock + warp; b < row_end; b += kBwdWarps) {
    Pack<T, V> hk, dh;
#pragma unroll
    for (int i = 0; i < V; ++i) dh.v[i] = T(0);
    if (live) {
      hk = load<T, V>(h, b * packs + k);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) hk.v[i] = T(0);
    }
    const T* g_row = grad + b * n_tau * n_actions;
    const long long pre_row = b * n_tau * packs + k;
    for (int t0 = 0; t0 < n_tau; t0 += kBwdTaus) {
      // pre's packs of kBwdTaus taus loaded together, so that their loads are in flight at once
      Pack<T, V> p[kBwdTaus];
#pragma unroll
      for (int u = 0; u < kBwdTaus; ++u) {
        if (live && t0 + u < n_tau) {
          p[u] = load<T, V>(pre, pre_row + static_cast<long long>(t0 + u) * packs);
        } else {
#pragma unroll
          for (int i = 0; i < V; ++i) p[u].v[i] = T(0);
        }
      }
#pragma unroll
      for (int u = 0; u < kBwdTaus; ++u) {
        const int t = t0 + u;
        if (t >= n_tau) break;  // uniform across the warp
        T g[NA];
        T dx[V];
#pragma unroll
        for (int i = 0; i < V; ++i) dx[i] = T(0);
#pragma unroll
        for (int a = 0; a < NA; ++a) {
          g[a] = a < n_actions ? __ldg(g_row + t * n_actions + a) : T(0);  // one broadcast load per warp
          db[a] += g[a];
#pragma unroll
          for (int i = 0; i < V; ++i) dx[i] += g[a] * w[a].v[i];
        }
        if (live) {
          Pack<T, V> gp, x;
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const T r = relu_nan(p[u].v[i]);
            gp.v[i] = p[u].v[i] <= T(0) ? T(0) : dx[i] * hk.v[i];  // torch's threshold_backward: NaN passes it
            dh.v[i] += dx[i] * r;
            x.v[i] = hk.v[i] * r;
          }
          grad_pre_packs[pre_row + static_cast<long long>(t) * packs] = gp;
#pragma unroll
          for (int a = 0; a < NA; ++a)
#pragma unroll
            for (int i = 0; i < V; ++i) dw[a].v[i] += g[a] * x.v[i];
        }
      }
    }
    if (live) reinterpret_cast<Pack<T, V>*>(grad_h)[b * packs + k] = dh;
  }
  // This block's row of `partial`: grad_w_out's packs summed over the warps in a fixed order, one action at a
  // time through shared memory, then grad_b_out (every lane of a warp summed the same g).
  const long long width = static_cast<long long>(n_actions) * hidden + n_actions;
  T* out = partial + blockIdx.x * width;
#pragma unroll
  for (int a = 0; a < NA; ++a) {
    if (a >= n_actions) break;  // uniform across the block
    scratch[warp][lane] = dw[a];
    __syncthreads();
    if (warp == 0 && live) {
      Pack<T, V> s = scratch[0][lane];
      for (int v = 1; v < kBwdWarps; ++v)
#pragma unroll
        for (int i = 0; i < V; ++i) s.v[i] += scratch[v][lane].v[i];
#pragma unroll
      for (int i = 0; i < V; ++i) out[static_cast<long long>(a) * hidden + static_cast<long long>(k) * V + i] = s.v[i];
    }
    __syncthreads();
  }
  if (blockIdx.y != 0) return;  // grad_b_out: once per row chunk
  if (lane == 0) {
#pragma unroll
    for (int a = 0; a < NA; ++a) scratch_db[warp][a] = db[a];
  }
  __syncthreads();
  if (warp == 0 && lane < n_actions) {
    T s = T(0);
    for (int v = 0; v < kBwdWarps; ++v) s += scratch_db[v][lane];
    out[static_cast<long long>(n_actions) * hidden + lane] = s;
  }
}

// Column sums of partial[chunks, width] in chunk order: grad_w_out (first N*H columns) and grad_b_out (last N).
// Block (32, 8): threadIdx.x picks the column, threadIdx.y sums chunks y, y + 8, ...; the 8 slices are then added
// in order, so the sum is the same run to run.
template <typename T>
__global__ void iqn_head_reduce_kernel(const T* __restrict__ partial, T* __restrict__ grad_w_out,
                                       T* __restrict__ grad_b_out, int chunks, int hidden, int n_actions) {
  __shared__ T slices[kReduceSlices][33];
  const long long width = static_cast<long long>(n_actions) * hidden + n_actions;
  const long long col = static_cast<long long>(blockIdx.x) * 32 + threadIdx.x;
  T s = T(0);
  if (col < width) {
#pragma unroll 4
    for (int c = threadIdx.y; c < chunks; c += kReduceSlices) s += partial[c * width + col];
  }
  slices[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= width) return;
  T total = slices[0][threadIdx.x];
  for (int y = 1; y < kReduceSlices; ++y) total += slices[y][threadIdx.x];
  const long long n_w = static_cast<long long>(n_actions) * hidden;
  if (col < n_w) {
    grad_w_out[col] = total;
  } else {
    grad_b_out[col - n_w] = total;
  }
}

// Elements per pack: 16 bytes in the forward; in the backward, which holds 2 * NA packs (W_out's and its
// gradient's) per thread, the packs narrow as NA grows so that no instance spills registers.
template <typename T>
constexpr int forward_pack() {
  return kPackBytes / static_cast<int>(sizeof(T));
}
template <typename T, int NA>
constexpr int backward_pack() {
  constexpr int bytes = NA <= 4 ? 16 : NA <= 8 ? 8 : 4;
  return bytes > static_cast<int>(sizeof(T)) ? bytes / static_cast<int>(sizeof(T)) : 1;
}

// A pack of V elements fits when H is a multiple of V and every base pointer is on a V-element boundary.
template <typename T>
bool packable(int v, int hidden, std::initializer_list<const void*> ptrs) {
  if (hidden % v != 0) return false;
  for (const void* p : ptrs)
    if (reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * v) != 0) return false;
  return true;
}

// Calls f.template run<NA>() with the smallest accumulator count (4, 8, 16) that holds n_actions.
template <typename F>
void dispatch(int n_actions, const F& f) {
  if (n_actions <= 4) return f.template run<4>();
  if (n_actions <= 8) return f.template run<8>();
  return f.template run<kIqnHeadMaxActions>();
}

template <typename T>
struct ForwardLaunch {
  const T *h, *pre, *w_out, *b_out;
  T* q;
  long long tasks;
  int blocks, n_tau, hidden, n_actions;
  cudaStream_t stream;
  template <int NA>
  void run() const {
    constexpr int P = forward_pack<T>();
    const size_t staged = sizeof(T) * static_cast<size_t>(n_actions) * hidden;
    if (staged <= kFwdSharedBytes && packable<T>(P, hidden, {h, pre})) {
      iqn_head_forward_kernel<T, P, NA, true><<<blocks, kFwdWarps * 32, staged, stream>>>(
          h, pre, w_out, b_out, q, tasks, n_tau, hidden, n_actions);
    } else {
      iqn_head_forward_kernel<T, 1, NA, false>
          <<<blocks, kFwdWarps * 32, 0, stream>>>(h, pre, w_out, b_out, q, tasks, n_tau, hidden, n_actions);
    }
  }
};

template <typename T>
struct BackwardLaunch {
  const T *grad, *h, *pre, *w_out;
  T *grad_h, *grad_pre, *partial;
  int chunks, rows, n_tau, hidden, n_actions;
  cudaStream_t stream;
  template <int V, int NA>
  void launch() const {
    const int packs = hidden / V;
    const dim3 grid(chunks, packs > 0 ? detail::ceil_div(packs, 32) : 1);
    iqn_head_backward_kernel<T, V, NA><<<grid, kBwdWarps * 32, 0, stream>>>(grad, h, pre, w_out, grad_h, grad_pre,
                                                                            partial, rows, n_tau, hidden, n_actions);
  }
  template <int NA>
  void run() const {
    constexpr int P = backward_pack<T, NA>();
    if (packable<T>(P, hidden, {h, pre, grad_h, grad_pre})) return launch<P, NA>();
    launch<1, NA>();
  }
};

}  // namespace

int iqn_head_backward_chunks(int rows) { return rows == 0 ? 0 : detail::ceil_div(rows, kRowsPerBlock); }

template <typename T>
void launch_iqn_head_forward(const T* h, const T* pre, const T* w_out, const T* b_out, T* q, int rows, int n_tau,
                             int hidden, int n_actions, cudaStream_t stream) {
  if (rows == 0 || n_tau == 0) return;
  const long long tasks = static_cast<long long>(rows) * ((n_tau + kFwdTaus - 1) / kFwdTaus);
  const int blocks = detail::ceil_div(tasks, kFwdWarps);
  const ForwardLaunch<T> launch{h, pre, w_out, b_out, q, tasks, blocks, n_tau, hidden, n_actions, stream};
  dispatch(n_actions, launch);
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
  const BackwardLaunch<T> launch{grad, h, pre, w_out, grad_h, grad_pre, partial, chunks, rows, n_tau, hidden,
                                 n_actions, stream};
  dispatch(n_actions, launch);
  const dim3 reduce_block(32, kReduceSlices);
  iqn_head_reduce_kernel<T><<<detail::ceil_div(width, 32), reduce_block, 0, stream>>>(
      partial, grad_w_out, grad_b_out, chunks, hidden, n_actions);
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

// The learner's device-guarded optimizer step over its flat parameter buffers (learner.ops.guarded_adam_; the
// semantics are learner.ops.reference.guarded_adam_): the gradient norms the diag records, gradient clipping on each
// network's own norm, Adam, the Polyak soft update of the target, and the guard: nothing is written unless the
// losses, every network's gradients and every network's new parameters are finite. Three launches a network, no
// snapshot and no undo: the second kernel computes the new parameters and only counts the non-finite ones, the third
// computes them again (the same code on the same inputs: the same bits) and writes them where the whole step is
// healthy. No atomics: every sum is a fixed tree or a fixed-order loop.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 264;  // two a streaming multiprocessor on an H100/H200; the grid-stride loops cover the rest

using detail::block_sum;

template <typename T>
__device__ __forceinline__ T not_finite(T x) {
  return isfinite(x) ? T(0) : T(1);
}

// b^e for Adam's bias corrections: powf inlines; double's pow() is a called function (__internal_accurate_pow), so
// exp(e·log b) instead: the bias correction 1 − b^e within 1e-14 of it at any step count.
__device__ __forceinline__ float pow_t(float b, float e) { return powf(b, e); }
__device__ __forceinline__ double pow_t(double b, double e) { return exp(e * log(b)); }

template <typename T>
__device__ __forceinline__ T lr_value(GuardLr lr) {
  return lr.f64 != nullptr ? static_cast<T>(*lr.f64) : static_cast<T>(*lr.f32);
}

// Block b's sums of squares of grad over each group [start_g, end_g) (G of them, part 0 only), over the whole
// buffer, and its count of non-finite values: partial[b * (G + 2) + c].
template <typename T>
__global__ void grad_sums_kernel(const T* __restrict__ grad, long long n, GuardGroups groups, T* __restrict__ partial) {
  __shared__ T scratch[32];
  T acc[kGuardMaxGroups];
#pragma unroll
  for (int g = 0; g < kGuardMaxGroups; ++g) acc[g] = T(0);
  T total = T(0), bad = T(0);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const T x = grad[i];
    const T sq = x * x;
    total += sq;
    bad += not_finite(x);
    long long start = 0;
#pragma unroll
    for (int g = 0; g < kGuardMaxGroups; ++g) {
      if (g < groups.count) {
        const long long end = groups.end[g];
        if (i >= start && i < end) acc[g] += sq;
        start = end;
      }
    }
  }
  const int columns = groups.count + 2;
  T* out = partial + static_cast<long long>(blockIdx.x) * columns;
#pragma unroll
  for (int g = 0; g < kGuardMaxGroups; ++g) {
    if (g < groups.count) {  // block-uniform: every thread takes the same branch
      const T s = block_sum(acc[g], scratch);
      if (threadIdx.x == 0) out[g] = s;
      __syncthreads();
    }
  }
  const T s = block_sum(total, scratch);
  if (threadIdx.x == 0) out[groups.count] = s;
  __syncthreads();
  const T b = block_sum(bad, scratch);
  if (threadIdx.x == 0) out[groups.count + 1] = b;
}

// Column c of grad_sums_kernel's partial rows summed in block order (every block of the next kernel gets the same
// bits): a strided sum per thread, then the block tree. Valid in thread 0.
template <typename T>
__device__ T column_sum(const T* partial, int rows, int columns, int c, T* scratch) {
  T s = T(0);
  for (int r = threadIdx.x; r < rows; r += blockDim.x) s += partial[static_cast<long long>(r) * columns + c];
  const T total = block_sum(s, scratch);
  __syncthreads();
  return total;
}

// What the probe and the commit kernels share: the clip coefficient from the total norm, the bias corrections from
// the step count, and one element's Adam step (torch's fused Adam: the step count is incremented first).
template <typename T>
struct AdamScalars {
  T coef, beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bias_correction2_sqrt, eps;

  __device__ AdamScalars(T total_norm, T max_norm, float step_next, T lr, T b1, T b2, T eps_)
      : beta1(b1), beta2(b2), one_minus_beta1(T(1) - b1), one_minus_beta2(T(1) - b2), eps(eps_) {
    // torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6), clamped to at most 1 (a NaN norm stays NaN)
    const T raw = max_norm / (total_norm + T(1e-6));
    coef = raw > T(1) ? T(1) : raw;
    const T step = static_cast<T>(step_next);
    const T bias_correction1 = T(1) - pow_t(b1, step);
    bias_correction2_sqrt = sqrt(T(1) - pow_t(b2, step));
    step_size = lr / bias_correction1;
  }

  // One parameter's clipped gradient, Adam moments and new value.
  __device__ __forceinline__ void step(T& param, T& grad, T& exp_avg, T& exp_avg_sq) const {
    grad = grad * coef;
    exp_avg = beta1 * exp_avg + one_minus_beta1 * grad;
    exp_avg_sq = beta2 * exp_avg_sq + one_minus_beta2 * grad * grad;
    const T denom = sqrt(exp_avg_sq) / bias_correction2_sqrt + eps;
    param = param - step_size * exp_avg / denom;
  }
};

// Every block: the norms from grad_sums_kernel's rows (block 0 writes them, the finite flag and step + 1 into
// stats), then this block's count of non-finite new parameters into probe[blockIdx.x].
// stats: [G norms, total norm, finite flag (the gradients and the checks), step + 1].
template <typename T>
__global__ void adam_probe_kernel(const T* __restrict__ param, const T* __restrict__ grad,
                                  const T* __restrict__ exp_avg, const T* __restrict__ exp_avg_sq,
                                  const float* __restrict__ step, GuardLr lr, long long n,
                                  const T* __restrict__ partial, int partial_rows, GuardGroups groups,
                                  GuardChecks<T> checks, T max_norm, T beta1, T beta2, T eps, T* __restrict__ stats,
                                  T* __restrict__ probe) {
  __shared__ T scratch[32];
  __shared__ T total_norm;
  const int columns = groups.count + 2;
  if (blockIdx.x == 0) {
    for (int g = 0; g < groups.count; ++g) {
      const T s = column_sum(partial, partial_rows, columns, g, scratch);
      if (threadIdx.x == 0) stats[g] = sqrt(s);
    }
    const T bad = column_sum(partial, partial_rows, columns, groups.count + 1, scratch);
    if (threadIdx.x == 0) {
      bool ok = bad == T(0);
#pragma unroll
      for (int k = 0; k < kGuardMaxChecks; ++k) ok = ok && (k >= checks.count || isfinite(*checks.value[k]));
      stats[groups.count + 1] = ok ? T(1) : T(0);
      stats[groups.count + 2] = static_cast<T>(*step + 1.0f);
    }
  }
  const T s = column_sum(partial, partial_rows, columns, groups.count, scratch);
  if (threadIdx.x == 0) {
    total_norm = sqrt(s);
    if (blockIdx.x == 0) stats[groups.count] = total_norm;
  }
  __syncthreads();
  const AdamScalars<T> adam(total_norm, max_norm, *step + 1.0f, lr_value<T>(lr), beta1, beta2, eps);
  T bad = T(0);
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    T p = param[i], g = grad[i], m = exp_avg[i], v = exp_avg_sq[i];
    adam.step(p, g, m, v);
    bad += not_finite(p);
  }
  const T b = block_sum(bad, scratch);
  if (threadIdx.x == 0) probe[blockIdx.x] = b;
}

// healthy = every network's finite flag (stats) and no non-finite new parameter in any network's probe rows. Where
// healthy: the new parameters, moments, step count and target; the clipped gradient always (as clip_grad_norm_
// leaves it). Block 0 also writes healthy and the step count (the others read step + 1 from stats, never `step`).
template <typename T>
__global__ void adam_commit_kernel(T* __restrict__ param, T* __restrict__ grad, T* __restrict__ exp_avg,
                                   T* __restrict__ exp_avg_sq, float* __restrict__ step, T* __restrict__ target,
                                   GuardLr lr, long long n, const T* __restrict__ stats,
                                   int groups, GuardHealth<T> health, T max_norm, T beta1, T beta2, T eps, T tau,
                                   bool* __restrict__ healthy_out) {
  __shared__ T scratch[32];
  __shared__ bool healthy;
  T bad = T(0);
#pragma unroll
  for (int k = 0; k < kGuardMaxNets; ++k) {
    if (k < health.count) {
      if (threadIdx.x == 0 && *health.flag[k] != T(1)) bad += T(1);
      for (int r = threadIdx.x; r < health.probe_rows[k]; r += blockDim.x) bad += health.probe[k][r];
    }
  }
  const T b = block_sum(bad, scratch);
  if (threadIdx.x == 0) healthy = b == T(0);
  __syncthreads();
  const T step_next = stats[groups + 2];  // stats: [G norms, total norm, finite flag, step + 1]
  const AdamScalars<T> adam(stats[groups], max_norm, static_cast<float>(step_next), lr_value<T>(lr), beta1, beta2,
                            eps);
  const bool ok = healthy;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    T p = param[i], g = grad[i], m = exp_avg[i], v = exp_avg_sq[i];
    adam.step(p, g, m, v);
    grad[i] = g;
    if (ok) {
      param[i] = p;
      exp_avg[i] = m;
      exp_avg_sq[i] = v;
      const T t = target[i];
      target[i] = t + tau * (p - t);
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    if (ok) *step = static_cast<float>(step_next);
    if (healthy_out != nullptr) *healthy_out = ok;
  }
}

int blocks_for(long long n) {
  const long long b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

}  // namespace

int guarded_adam_blocks(std::int64_t n) { return blocks_for(n); }

template <typename T>
void launch_guard_probe(const T* param, const T* grad, const T* exp_avg, const T* exp_avg_sq, const float* step,
                        GuardLr lr, std::int64_t n, GuardGroups groups, GuardChecks<T> checks, T max_norm,
                        T beta1, T beta2, T eps, T* partial, T* stats, T* probe, cudaStream_t stream) {
  const int blocks = blocks_for(n);
  grad_sums_kernel<T><<<blocks, kThreads, 0, stream>>>(grad, n, groups, partial);
  adam_probe_kernel<T><<<blocks, kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, step, lr, n, partial,
                                                        blocks, groups, checks, max_norm, beta1, beta2, eps, stats,
                                                        probe);
}

template <typename T>
void launch_guard_commit(T* param, T* grad, T* exp_avg, T* exp_avg_sq, float* step, T* target, GuardLr lr,
                         std::int64_t n, const T* stats, int groups, GuardHealth<T> health, T max_norm, T beta1,
                         T beta2, T eps, T tau, bool* healthy_out, cudaStream_t stream) {
  adam_commit_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(param, grad, exp_avg, exp_avg_sq, step, target, lr,
                                                                n, stats, groups, health, max_norm, beta1, beta2,
                                                                eps, tau, healthy_out);
}

#define FOXHUNT_GUARD_INSTANTIATE(T)                                                                              \
  template void launch_guard_probe<T>(const T*, const T*, const T*, const T*, const float*, GuardLr,              \
                                      std::int64_t, GuardGroups, GuardChecks<T>, T, T, T, T, T*, T*, T*,          \
                                      cudaStream_t);                                                              \
  template void launch_guard_commit<T>(T*, T*, T*, T*, float*, T*, GuardLr, std::int64_t, const T*, int,           \
                                       GuardHealth<T>, T, T, T, T, T, bool*, cudaStream_t);
FOXHUNT_GUARD_INSTANTIATE(float)
FOXHUNT_GUARD_INSTANTIATE(double)
#undef FOXHUNT_GUARD_INSTANTIATE

}  // namespace foxhunt

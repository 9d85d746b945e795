// The learner's on-policy losses in three launches: PPO's clipped surrogate, the entropy bonus, the Q->pi
// distillation KL and the value MSE over the valid rows of a rollout, their diagnostics, and each loss's gradient
// (learner.ops.reference.policy_losses is the semantics; the autograd formula combines the saved gradients).
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

using detail::block_sum;

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 256;
constexpr int kSums = 9;  // per valid row: surrogate, approx-KL term, clipped, entropy, distill KL, (v-ret)^2,
                          // qpa, v, sum_a q

__device__ __forceinline__ float log_t(float x) { return logf(x); }
__device__ __forceinline__ double log_t(double x) { return log(x); }
__device__ __forceinline__ float sqrt_t(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_t(double x) { return sqrt(x); }

// NaN stays NaN (fmin/fmax would drop it), as torch.clamp keeps it.
template <typename T>
__device__ __forceinline__ T clamp_nan(T x, T lo, T hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

// One block: the valid-row count, the raw advantages' mean, and the shift and divisor of their standardisation
// (mean and population std + 1e-8 over the valid rows when normalize and count > 1; else 0 and 1), two passes.
template <typename T>
__global__ void advantage_stats_kernel(const T* __restrict__ adv, const bool* __restrict__ valid, bool normalize,
                                       T* __restrict__ scal, int rows) {
  __shared__ T scratch[32];
  __shared__ T shared_n, shared_mean;
  T count = T(0), sum = T(0);
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    if (valid[i]) {
      count += T(1);
      sum += adv[i];
    }
  }
  count = block_sum(count, scratch);
  __syncthreads();
  sum = block_sum(sum, scratch);
  if (threadIdx.x == 0) {
    shared_n = count;
    shared_mean = sum / count;  // 0/0 = NaN with no valid row, as the reference's masked mean
  }
  __syncthreads();
  const T n = shared_n, mean = shared_mean;
  T dev = T(0);
  for (int i = threadIdx.x; i < rows; i += blockDim.x) {
    if (valid[i]) {
      const T d = adv[i] - mean;
      dev += d * d;
    }
  }
  dev = block_sum(dev, scratch);
  if (threadIdx.x == 0) {
    const bool standardise = normalize && n > T(1);
    scal[0] = n;
    scal[1] = mean;
    scal[2] = standardise ? mean : T(0);
    scal[3] = standardise ? sqrt_t(dev / n) + T(1e-8) : T(1);
  }
}

// Grid-stride over rows, one thread a row (the row's N logits and q values are read a few times: L1 hits).
// Writes every row's three logit gradients and its value gradient (zero on invalid rows), and per block the
// kSums sums over its valid rows, reduced in a fixed order.
template <typename T>
__global__ void policy_rows_kernel(const T* __restrict__ logits, const T* __restrict__ q_ens,
                                   const T* __restrict__ values, const T* __restrict__ returns,
                                   const T* __restrict__ adv, const int64_t* __restrict__ actions,
                                   const T* __restrict__ behaviour_logp, const bool* __restrict__ valid, T clip,
                                   T temperature, T distill_sign, const T* __restrict__ scal,
                                   T* __restrict__ grad_logits, T* __restrict__ grad_values,
                                   T* __restrict__ partial, int rows, int n_actions) {
  __shared__ T scratch[32];
  const T n = scal[0], shift = scal[2], divisor = scal[3];
  const T inv_n = T(1) / n;
  const T eps = T(1e-12);
  const size_t plane = static_cast<size_t>(rows) * n_actions;
  T acc[kSums];
#pragma unroll
  for (int s = 0; s < kSums; ++s) acc[s] = T(0);
  for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += gridDim.x * blockDim.x) {
    const T* x = logits + static_cast<size_t>(r) * n_actions;
    const T* q = q_ens + static_cast<size_t>(r) * n_actions;
    T* g_pi = grad_logits + static_cast<size_t>(r) * n_actions;
    T* g_ent = g_pi + plane;
    T* g_kl = g_ent + plane;
    if (!valid[r]) {
      for (int k = 0; k < n_actions; ++k) g_pi[k] = g_ent[k] = g_kl[k] = T(0);
      grad_values[r] = T(0);
      continue;
    }
    // log_softmax of the logits, and of the teacher's sign * q / T
    T mx = x[0], mz = distill_sign * q[0] / temperature;
    for (int k = 1; k < n_actions; ++k) {
      mx = fmax(mx, x[k]);
      mz = fmax(mz, distill_sign * q[k] / temperature);
    }
    T se = T(0), sz = T(0);
    for (int k = 0; k < n_actions; ++k) {
      se += detail::exp_t(x[k] - mx);
      sz += detail::exp_t(distill_sign * q[k] / temperature - mz);
    }
    const T lse = mx + log_t(se), lse_z = mz + log_t(sz);
    const int64_t a = actions[r];
    const bool in_set = a >= 0 && a < n_actions;
    const T logp_a = in_set ? x[in_set ? a : 0] - lse : T(NAN);
    // PPO's clipped surrogate, against the behaviour policy's log-prob
    const T A = (adv[r] - shift) / divisor;
    const T log_ratio = logp_a - behaviour_logp[r];
    const T ratio = detail::exp_t(log_ratio);
    const T s1 = ratio * A, s2 = clamp_nan(ratio, T(1) - clip, T(1) + clip) * A;
    const T surrogate = s1 < s2 ? s1 : s2;
    // torch.min's gradient: to the smaller; a tie (ratio inside the clip range) splits it, clamp passing its half
    const bool inside = ratio >= T(1) - clip && ratio <= T(1) + clip;
    const T coef_pi = -((inside || s1 < s2) ? A : T(0)) * ratio * inv_n;
    // entropy, distillation, qpa's moments
    T ent = T(0), kl = T(0), t_sum = T(0), q_sum = T(0), lp_sum = T(0), q_sq = T(0), lp_sq = T(0);
    for (int k = 0; k < n_actions; ++k) {
      const T lp = x[k] - lse;
      const T p = detail::exp_t(lp);
      const T lt = distill_sign * q[k] / temperature - lse_z;
      const T t = detail::exp_t(lt);
      ent -= p * lp;
      kl += t * (lt - lp);
      t_sum += t;
      q_sum += q[k];
      lp_sum += lp;
      q_sq += q[k] * q[k];
      lp_sq += lp * lp;
    }
    const T q_bar = q_sum / T(n_actions), lp_bar = lp_sum / T(n_actions);
    T sq = T(0), sp = T(0), cross = T(0);
    for (int k = 0; k < n_actions; ++k) {
      const T lp = x[k] - lse;
      const T p = detail::exp_t(lp);
      const T t = detail::exp_t(distill_sign * q[k] / temperature - lse_z);
      const T qc = q[k] - q_bar, pc = lp - lp_bar;
      sq += qc * qc;
      sp += pc * pc;
      cross += qc * pc;
      g_pi[k] = coef_pi * ((k == a ? T(1) : T(0)) - p);
      g_ent[k] = -p * (lp + ent) * inv_n;
      g_kl[k] = (p * t_sum - t) * inv_n;
    }
    const bool flat = sq <= eps * (T(1) + q_sq) || sp <= eps * (T(1) + lp_sq);
    const T corr = cross / sqrt_t(fmax(sq * sp, T(1e-30)));
    const T v_err = values[r] - returns[r];
    grad_values[r] = T(2) * v_err * inv_n;
    acc[0] += surrogate;
    acc[1] += (ratio - T(1)) - log_ratio;
    acc[2] += fabs(ratio - T(1)) > clip ? T(1) : T(0);
    acc[3] += ent;
    acc[4] += kl;
    acc[5] += v_err * v_err;
    acc[6] += flat ? T(0) : clamp_nan(corr, T(-1), T(1));
    acc[7] += values[r];
    acc[8] += q_sum;
  }
#pragma unroll
  for (int s = 0; s < kSums; ++s) {
    const T total = block_sum(acc[s], scratch);
    if (threadIdx.x == 0) partial[static_cast<size_t>(blockIdx.x) * kSums + s] = total;
    __syncthreads();
  }
}

// One block: the blocks' sums in a fixed order, divided by the valid-row count (q's mean also by N).
template <typename T>
__global__ void policy_stats_kernel(const T* __restrict__ partial, int blocks, const T* __restrict__ scal,
                                    int n_actions, T* __restrict__ stats) {
  __shared__ T scratch[32];
  __shared__ T sums[kSums];
  for (int s = 0; s < kSums; ++s) {
    T local = T(0);
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) local += partial[static_cast<size_t>(b) * kSums + s];
    const T total = block_sum(local, scratch);
    if (threadIdx.x == 0) sums[s] = total;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const T n = scal[0];
    stats[0] = -(sums[0] / n);             // l_pi
    stats[1] = sums[3] / n;                // entropy
    stats[2] = sums[4] / n;                // l_distill
    stats[3] = sums[5] / n;                // l_v
    stats[4] = sums[1] / n;                // approx_kl
    stats[5] = sums[2] / n;                // clip_frac
    stats[6] = sums[6] / n;                // qpa
    stats[7] = scal[1];                    // adv_mean
    stats[8] = sums[7] / n;                // v_mean
    stats[9] = sums[8] / (n * T(n_actions));  // q_mean
  }
}

}  // namespace

int policy_losses_blocks(int rows) {
  const int blocks = detail::ceil_div(rows, kThreads);
  return blocks < kMaxBlocks ? blocks : kMaxBlocks;
}

template <typename T>
void launch_policy_losses(const T* logits, const T* q_ens, const T* values, const T* returns, const T* adv,
                          const int64_t* actions, const T* behaviour_logp, const bool* valid, T clip, T temperature,
                          bool normalize, bool flip_distill, T* stats, T* grad_logits, T* grad_values, T* scal,
                          T* partial, int rows, int n_actions, cudaStream_t stream) {
  const int blocks = policy_losses_blocks(rows);
  advantage_stats_kernel<T><<<1, kThreads, 0, stream>>>(adv, valid, normalize, scal, rows);
  if (blocks > 0) {
    policy_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(
        logits, q_ens, values, returns, adv, actions, behaviour_logp, valid, clip, temperature,
        flip_distill ? T(-1) : T(1), scal, grad_logits, grad_values, partial, rows, n_actions);
  }
  policy_stats_kernel<T><<<1, kThreads, 0, stream>>>(partial, blocks, scal, n_actions, stats);
}

template void launch_policy_losses<float>(const float*, const float*, const float*, const float*, const float*,
                                          const int64_t*, const float*, const bool*, float, float, bool, bool,
                                          float*, float*, float*, float*, float*, int, int, cudaStream_t);
template void launch_policy_losses<double>(const double*, const double*, const double*, const double*,
                                           const double*, const int64_t*, const double*, const bool*, double, double,
                                           bool, bool, double*, double*, double*, double*, double*, int, int,
                                           cudaStream_t);

}  // namespace foxhunt

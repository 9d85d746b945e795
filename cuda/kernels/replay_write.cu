// The learner's host-side steps of a payload as two kernels: n-step returns of a [T,B] rollout, and the replay
// write of a minibatch's valid steps (gather from the rollout + write into the ring) in one launch. As torch ops
// they are dozens of small launches, and a step's host time would rival its captured update.
#include "foxhunt_common.cuh"
#include "foxhunt_kernels.h"

namespace foxhunt {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One thread per step (t, b): learner.replay.nstep_returns' loop over k < n, elementwise.
template <typename T>
__global__ void nstep_returns_kernel(const T* __restrict__ rewards, const bool* __restrict__ valid,
                                     const bool* __restrict__ terminated, const bool* __restrict__ truncated,
                                     double gamma, int n, T reward_scale, T* __restrict__ ret,
                                     T* __restrict__ discount, int64_t* __restrict__ next_row, int steps,
                                     int columns) {
  const long long at = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= static_cast<long long>(steps) * columns) return;
  const int t = static_cast<int>(at / columns), b = static_cast<int>(at - static_cast<long long>(t) * columns);
  const auto cell = [columns, b](int row) { return static_cast<long long>(row) * columns + b; };
  bool alive = valid[at];
  T acc = T(0);
  int taken = 0;
  double gamma_k = 1.0;  // gamma^k by products (no pow call; within an ulp of the reference's double pow)
  for (int k = 0; k < n; ++k, gamma_k *= gamma) {
    const int tk = t + k;
    const int tkc = min(tk, steps - 1);
    const bool take = alive && tk < steps;
    // (gamma^k, rounded to T) * r * scale, in that order: what the reference's tensor arithmetic does
    if (take) acc += static_cast<T>(gamma_k) * rewards[cell(tkc)] * reward_scale;
    taken += take;
    const bool next_valid = valid[cell(min(tkc + 1, steps - 1))] && tk + 1 < steps;
    const bool end = terminated[cell(tkc)] || truncated[cell(tkc)];
    alive = take && !end && next_valid;
  }
  const bool term_last = terminated[cell(max(t + taken - 1, 0))];
  ret[at] = acc;
  T power = T(1);  // gamma (rounded to T) to the power taken, as the reference's pow over T
  for (int k = 0; k < taken; ++k) power *= static_cast<T>(gamma);
  discount[at] = term_last ? T(0) : power;
  next_row[at] = static_cast<int64_t>(t + taken) * columns + b;
}

// One warp per transition i: row (cursor + i) % capacity of the ring gets step flat_idx[i] of the rollout, its
// observation and the one it bootstraps from (next_row), lanes over the observation's D floats. An index out of
// range (never made by the learner) writes NaN as the return, which the learner's non-finite guard reports.
template <typename T>
__global__ void replay_write_kernel(T* __restrict__ d_obs, int64_t* __restrict__ d_action, T* __restrict__ d_ret,
                                    T* __restrict__ d_discount, T* __restrict__ d_next_obs, const T* __restrict__ obs,
                                    const int64_t* __restrict__ actions, const T* __restrict__ ret,
                                    const T* __restrict__ discount, const int64_t* __restrict__ next_row,
                                    const int64_t* __restrict__ flat_idx, long long n, long long cursor,
                                    long long capacity, long long steps, long long obs_rows, int obs_dim) {
  const int lane = threadIdx.x & 31;
  const long long i = static_cast<long long>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (i >= n) return;
  const long long row = (cursor + i) % capacity;
  const long long f = flat_idx[i];
  const bool f_ok = f >= 0 && f < steps;
  const long long nr = f_ok ? next_row[f] : -1;
  const bool ok = f_ok && nr >= 0 && nr < obs_rows;
  for (int d = lane; d < obs_dim; d += 32) {
    d_obs[row * obs_dim + d] = ok ? obs[f * obs_dim + d] : T(0);
    d_next_obs[row * obs_dim + d] = ok ? obs[nr * obs_dim + d] : T(0);
  }
  if (lane == 0) {
    d_action[row] = ok ? actions[f] : 0;
    d_ret[row] = ok ? ret[f] : static_cast<T>(NAN);
    d_discount[row] = ok ? discount[f] : T(0);
  }
}

}  // namespace

template <typename T>
void launch_nstep_returns(const T* rewards, const bool* valid, const bool* terminated, const bool* truncated,
                          double gamma, int n, T reward_scale, T* ret, T* discount, int64_t* next_row, int steps,
                          int columns, cudaStream_t stream) {
  const long long cells = static_cast<long long>(steps) * columns;
  if (cells == 0) return;
  nstep_returns_kernel<T><<<detail::ceil_div(cells, kThreads), kThreads, 0, stream>>>(
      rewards, valid, terminated, truncated, gamma, n, reward_scale, ret, discount, next_row, steps, columns);
}

template <typename T>
void launch_replay_write(T* d_obs, int64_t* d_action, T* d_ret, T* d_discount, T* d_next_obs, const T* obs,
                         const int64_t* actions, const T* ret, const T* discount, const int64_t* next_row,
                         const int64_t* flat_idx, int64_t n, int64_t cursor, int64_t capacity, int64_t steps,
                         int64_t obs_rows, int obs_dim, cudaStream_t stream) {
  if (n == 0) return;
  replay_write_kernel<T><<<detail::ceil_div(n, kWarps), kThreads, 0, stream>>>(
      d_obs, d_action, d_ret, d_discount, d_next_obs, obs, actions, ret, discount, next_row, flat_idx, n, cursor,
      capacity, steps, obs_rows, obs_dim);
}

template void launch_nstep_returns<float>(const float*, const bool*, const bool*, const bool*, double, int, float,
                                          float*, float*, int64_t*, int, int, cudaStream_t);
template void launch_nstep_returns<double>(const double*, const bool*, const bool*, const bool*, double, int, double,
                                           double*, double*, int64_t*, int, int, cudaStream_t);
template void launch_replay_write<float>(float*, int64_t*, float*, float*, float*, const float*, const int64_t*,
                                         const float*, const float*, const int64_t*, const int64_t*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t, int, cudaStream_t);
template void launch_replay_write<double>(double*, int64_t*, double*, double*, double*, const double*,
                                          const int64_t*, const double*, const double*, const int64_t*,
                                          const int64_t*, int64_t, int64_t, int64_t, int64_t, int64_t, int,
                                          cudaStream_t);

}  // namespace foxhunt

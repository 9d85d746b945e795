// Launchers of the foxhunt CUDA kernels. Plain CUDA, no torch headers: any machine with nvcc compiles them.
//
// Every pointer is to a contiguous row-major device buffer of the shape given in the comment; each launcher
// enqueues its kernel(s) on `stream` and returns without synchronising (the caller checks the launch).
// T is float or double (explicitly instantiated in the .cu files).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace foxhunt {

// v[B] = h·w_v + b_v; a[B,N] = h·w_a + b_a; q = v + a − mean_a a.   h[B,H], w_v[H], b_v[1], w_a[H,N], b_a[N].
template <typename T>
void launch_dueling_forward(const T* h, const T* w_v, const T* b_v, const T* w_a, const T* b_a, T* v, T* a,
                            T* q, int rows, int hidden, int n_actions, cudaStream_t stream);

// Decompose-and-backward. grad_v[B], grad_a[B,N], grad_q[B,N] may each be null (= zero). Writes
// grad_h[B,H], grad_w_v[H], grad_b_v[1], grad_w_a[H,N], grad_b_a[N]. `workspace` holds
// dueling_backward_workspace_elems(...) elements of T.
std::size_t dueling_backward_workspace_elems(int rows, int hidden, int n_actions, std::size_t elem_size);
template <typename T>
void launch_dueling_backward(const T* grad_v, const T* grad_a, const T* grad_q, const T* h, const T* w_v,
                             const T* w_a, T* grad_h, T* grad_w_v, T* grad_b_v, T* grad_w_a, T* grad_b_a,
                             T* workspace, int rows, int hidden, int n_actions, cudaStream_t stream);

// y[B] = reward + discount·q_target_next[b, argmax_a q_online_next[b, a]] (first max on ties).
template <typename T>
void launch_dueling_bellman_target(const T* q_online_next, const T* q_target_next, const T* reward,
                                   const T* discount, T* y, int rows, int n_actions, cudaStream_t stream);

// loss[] = mean_b huber_κ(q[b, action_b] − y_b); grad_q[B,N] = d loss / d q. An action outside [0, N)
// makes the loss NaN.
template <typename T>
void launch_dueling_huber_loss(const T* q, const int64_t* action, const T* y, T kappa, T* loss, T* grad_q,
                               int rows, int n_actions, cudaStream_t stream);

// target[B,Z] = projection of reward + discount·z onto linspace(v_min, v_max, Z).
template <typename T>
void launch_c51_project(const T* next_probs, const T* reward, const T* discount, T v_min, T v_max,
                        T* target, int rows, int n_atoms, cudaStream_t stream);

// loss[] = mean_b Σ_i mean_j |τ_i − 1{u_ij<0}|·huber_κ(u_ij)/κ, u_ij = target_j − θ_i; grad_theta[B,T].
// `row_loss` is a [B] scratch buffer.
template <typename T>
void launch_iqn_quantile_huber_loss(const T* theta, const T* tau, const T* target, T kappa, T* loss,
                                    T* grad_theta, T* row_loss, int rows, int n_quantiles, int n_targets,
                                    cudaStream_t stream);

// q_ens[B,N] = w·Σ_z softmax_z(logits[B,N,Z])·support[z] + (1−w)·mean_t quantiles[B,T,N].
template <typename T>
void launch_ensemble_q(const T* logits, const T* support, const T* quantiles, T w, T* q_ens, int rows,
                       int n_actions, int n_atoms, int n_quantiles, cudaStream_t stream);

// grad_logits[B,N,Z] = w·g·p_z·(z − E[z]); grad_quantiles[B,T,N] = (1−w)·g/T.
template <typename T>
void launch_ensemble_q_backward(const T* grad, const T* logits, const T* support, T w, T* grad_logits,
                                T* grad_quantiles, int rows, int n_actions, int n_atoms, int n_quantiles,
                                cudaStream_t stream);

// IQN head after the tau embedding: q[B,T,N] = (h[B,1,H] * relu(pre[B,T,H])) W_out[N,H]^T + b_out[N], N <= 16.
constexpr int kIqnHeadMaxActions = 16;
template <typename T>
void launch_iqn_head_forward(const T* h, const T* pre, const T* w_out, const T* b_out, T* q, int rows, int n_tau,
                             int hidden, int n_actions, cudaStream_t stream);

// Its backward from grad[B,T,N]: grad_h[B,H], grad_pre[B,T,H], grad_w_out[N,H], grad_b_out[N]. `partial` holds
// iqn_head_backward_chunks(B) * (N*H + N) elements of T (per-chunk sums, reduced in a fixed order).
int iqn_head_backward_chunks(int rows);
template <typename T>
void launch_iqn_head_backward(const T* grad, const T* h, const T* pre, const T* w_out, T* grad_h, T* grad_pre,
                              T* grad_w_out, T* grad_b_out, T* partial, int rows, int n_tau, int hidden,
                              int n_actions, cudaStream_t stream);

// n-step returns of every step of a [T,B] rollout (learner.replay.nstep_returns): ret, discount [T,B] and
// next_row[T,B] (the flat row t' * B + b of obs[T+1,B] the step bootstraps from).
template <typename T>
void launch_nstep_returns(const T* rewards, const bool* valid, const bool* terminated, const bool* truncated,
                          double gamma, int n, T reward_scale, T* ret, T* discount, int64_t* next_row, int steps,
                          int columns, cudaStream_t stream);

// Replay ring rows (cursor + i) % capacity <- step flat_idx[i] of the rollout (obs[(T+1)B, D], actions, ret,
// discount, next_row over T*B = `steps`), i < n; the next observation is obs[next_row[flat_idx[i]]].
template <typename T>
void launch_replay_write(T* d_obs, int64_t* d_action, T* d_ret, T* d_discount, T* d_next_obs, const T* obs,
                         const int64_t* actions, const T* ret, const T* discount, const int64_t* next_row,
                         const int64_t* flat_idx, int64_t n, int64_t cursor, int64_t capacity, int64_t steps,
                         int64_t obs_rows, int obs_dim, cudaStream_t stream);

// GAE over [T,B], one thread per env column, backwards in time.
template <typename T>
void launch_gae(const T* rewards, const T* values, const T* next_values, const bool* terminated,
                const bool* episode_end, T gamma, T lam, T* advantages, T* returns, int steps, int columns,
                cudaStream_t stream);

// The learner's on-policy losses over `rows` rollout rows (learner.ops.reference.policy_losses): stats[10] in
// POLICY_LOSS_NAMES order, grad_logits[3, rows, N] (d l_pi, d entropy, d l_distill w.r.t. the logits) and
// grad_values[rows] (d l_v), zero on invalid rows. Scratch: scal[4] and partial[policy_losses_blocks(rows) * 9].
int policy_losses_blocks(int rows);
template <typename T>
void launch_policy_losses(const T* logits, const T* q_ens, const T* values, const T* returns, const T* adv,
                          const int64_t* actions, const T* behaviour_logp, const bool* valid, T clip, T temperature,
                          bool normalize, bool flip_distill, T* stats, T* grad_logits, T* grad_values, T* scal,
                          T* partial, int rows, int n_actions, cudaStream_t stream);

// The learner's device-guarded Adam step (learner.ops.reference.guarded_adam_), per network: launch_guard_probe
// (two launches) for every network first, then launch_guard_commit (one) for every network. The probe writes
// stats[G + 3] = [G group norms (network 0 only), total norm, finite flag (gradients and checks), step + 1] and
// probe[guarded_adam_blocks(n)] (non-finite new parameters a block); partial[guarded_adam_blocks(n) * (G + 2)] is
// its scratch. The commit writes where every network's flag is 1 and every probe row 0, and the healthy flag.
constexpr int kGuardMaxGroups = 8;
constexpr int kGuardMaxChecks = 4;
constexpr int kGuardMaxNets = 4;
struct GuardGroups {  // contiguous groups [end[g-1], end[g]) of network 0's buffer, end[-1] = 0
  long long end[kGuardMaxGroups];
  int count;
};
template <typename T>
struct GuardChecks {  // scalars (the losses) that must be finite
  const T* value[kGuardMaxChecks];
  int count;
};
template <typename T>
struct GuardHealth {  // every network's finite flag and probe rows
  const T* flag[kGuardMaxNets];
  const T* probe[kGuardMaxNets];
  int probe_rows[kGuardMaxNets];
  int count;
};
struct GuardLr {  // the learning rate, a float32 or a float64 scalar on the device (the other pointer null)
  const float* f32;
  const double* f64;
};
int guarded_adam_blocks(std::int64_t n);
template <typename T>
void launch_guard_probe(const T* param, const T* grad, const T* exp_avg, const T* exp_avg_sq, const float* step,
                        GuardLr lr, std::int64_t n, GuardGroups groups, GuardChecks<T> checks, T max_norm,
                        T beta1, T beta2, T eps, T* partial, T* stats, T* probe, cudaStream_t stream);
template <typename T>
void launch_guard_commit(T* param, T* grad, T* exp_avg, T* exp_avg_sq, float* step, T* target, GuardLr lr,
                         std::int64_t n, const T* stats, int groups, GuardHealth<T> health, T max_norm, T beta1,
                         T beta2, T eps, T tau, bool* healthy_out, cudaStream_t stream);

// target[i] += tau·(online[i] − target[i]) over the whole flat buffer, one launch.
template <typename T>
void launch_soft_update(T* target, const T* online, T tau, std::int64_t n, cudaStream_t stream);

}  // namespace foxhunt

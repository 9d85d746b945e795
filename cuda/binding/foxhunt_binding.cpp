// Thin torch binding: the CUDA implementations of the foxhunt:: ops whose schemas learner/ops/library.py
// defines. Each wrapper checks devices, dtypes and shapes with a message naming the tensor, allocates the
// outputs, launches the plain-CUDA kernel on the current stream and checks the launch. No host sync.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "foxhunt_kernels.h"

namespace {

using at::Tensor;

// Checks one input: CUDA, on `device`, dtype `dtype`, dims `shape` (-1 = any). Returns it contiguous.
Tensor checked(const char* op, const char* name, const Tensor& t, c10::Device device, at::ScalarType dtype,
               std::vector<int64_t> shape) {
  TORCH_CHECK(t.is_cuda(), "foxhunt::", op, ": ", name, " must be a CUDA tensor, got one on ", t.device());
  TORCH_CHECK(t.device() == device, "foxhunt::", op, ": ", name, " is on ", t.device(), " but the inputs are on ",
              device, "; move it");
  TORCH_CHECK(t.scalar_type() == dtype, "foxhunt::", op, ": ", name, " has dtype ", t.scalar_type(),
              ", expected ", dtype);
  bool ok = t.dim() == static_cast<int64_t>(shape.size());
  for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 || t.size(static_cast<int64_t>(i)) == shape[i];
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    want += (i ? ", " : "") + (shape[i] < 0 ? std::string("?") : std::to_string(shape[i]));
  TORCH_CHECK(ok, "foxhunt::", op, ": ", name, " has shape ", t.sizes(), ", expected ", want, "]");
  return t.contiguous();
}

at::ScalarType floating(const char* op, const Tensor& t) {
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "foxhunt::", op,
              ": inputs must be float32 or float64, got ", t.scalar_type());
  return t.scalar_type();
}

int as_int(const char* op, int64_t n) {
  TORCH_CHECK(n >= 0 && n <= INT32_MAX, "foxhunt::", op, ": dimension ", n, " is out of range");
  return static_cast<int>(n);
}

std::tuple<Tensor, Tensor, Tensor> dueling_forward(const Tensor& h_in, const Tensor& w_v_in, const Tensor& b_v_in,
                                                   const Tensor& w_a_in, const Tensor& b_a_in) {
  static constexpr const char* op = "dueling_forward";
  const auto dtype = floating(op, h_in);
  const auto dev = h_in.device();
  TORCH_CHECK(h_in.dim() == 2 && w_a_in.dim() == 2, "foxhunt::dueling_forward: h and w_a must be 2-D");
  const int64_t rows = h_in.size(0), hidden = h_in.size(1), n_actions = w_a_in.size(1);
  TORCH_CHECK(n_actions >= 1, "foxhunt::dueling_forward: w_a needs at least one action column");
  const Tensor h = checked(op, "h", h_in, dev, dtype, {rows, hidden});
  const Tensor w_v = checked(op, "w_v", w_v_in, dev, dtype, {hidden});
  const Tensor b_v = checked(op, "b_v", b_v_in, dev, dtype, {1});
  const Tensor w_a = checked(op, "w_a", w_a_in, dev, dtype, {hidden, n_actions});
  const Tensor b_a = checked(op, "b_a", b_a_in, dev, dtype, {n_actions});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor v = at::empty({rows}, h.options());
  Tensor a = at::empty({rows, n_actions}, h.options());
  Tensor q = at::empty({rows, n_actions}, h.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_dueling_forward<scalar_t>(h.data_ptr<scalar_t>(), w_v.data_ptr<scalar_t>(),
                                              b_v.data_ptr<scalar_t>(), w_a.data_ptr<scalar_t>(),
                                              b_a.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
                                              a.data_ptr<scalar_t>(), q.data_ptr<scalar_t>(), as_int(op, rows),
                                              as_int(op, hidden), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {v, a, q};
}

std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor> dueling_backward(
    const std::optional<Tensor>& grad_v_in, const std::optional<Tensor>& grad_a_in,
    const std::optional<Tensor>& grad_q_in, const Tensor& h_in, const Tensor& w_v_in, const Tensor& w_a_in) {
  static constexpr const char* op = "dueling_backward";
  const auto dtype = floating(op, h_in);
  const auto dev = h_in.device();
  TORCH_CHECK(h_in.dim() == 2 && w_a_in.dim() == 2, "foxhunt::dueling_backward: h and w_a must be 2-D");
  const int64_t rows = h_in.size(0), hidden = h_in.size(1), n_actions = w_a_in.size(1);
  const Tensor h = checked(op, "h", h_in, dev, dtype, {rows, hidden});
  const Tensor w_v = checked(op, "w_v", w_v_in, dev, dtype, {hidden});
  const Tensor w_a = checked(op, "w_a", w_a_in, dev, dtype, {hidden, n_actions});
  std::optional<Tensor> grad_v, grad_a, grad_q;
  if (grad_v_in.has_value()) grad_v = checked(op, "grad_v", *grad_v_in, dev, dtype, {rows});
  if (grad_a_in.has_value()) grad_a = checked(op, "grad_a", *grad_a_in, dev, dtype, {rows, n_actions});
  if (grad_q_in.has_value()) grad_q = checked(op, "grad_q", *grad_q_in, dev, dtype, {rows, n_actions});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor grad_h = at::empty({rows, hidden}, h.options());
  Tensor grad_w_v = at::empty({hidden}, h.options());
  Tensor grad_b_v = at::empty({1}, h.options());
  Tensor grad_w_a = at::empty({hidden, n_actions}, h.options());
  Tensor grad_b_a = at::empty({n_actions}, h.options());
  const auto elems = foxhunt::dueling_backward_workspace_elems(as_int(op, rows), as_int(op, hidden),
                                                               as_int(op, n_actions), h.element_size());
  Tensor workspace = at::empty({static_cast<int64_t>(elems)}, h.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    auto ptr = [](const std::optional<Tensor>& t) -> const scalar_t* {
      return t.has_value() ? t->data_ptr<scalar_t>() : nullptr;
    };
    foxhunt::launch_dueling_backward<scalar_t>(
        ptr(grad_v), ptr(grad_a), ptr(grad_q), h.data_ptr<scalar_t>(), w_v.data_ptr<scalar_t>(),
        w_a.data_ptr<scalar_t>(), grad_h.data_ptr<scalar_t>(), grad_w_v.data_ptr<scalar_t>(),
        grad_b_v.data_ptr<scalar_t>(), grad_w_a.data_ptr<scalar_t>(), grad_b_a.data_ptr<scalar_t>(),
        workspace.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, hidden), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {grad_h, grad_w_v, grad_b_v, grad_w_a, grad_b_a};
}

Tensor dueling_bellman_target(const Tensor& q_online_in, const Tensor& q_target_in, const Tensor& reward_in,
                              const Tensor& discount_in) {
  static constexpr const char* op = "dueling_bellman_target";
  const auto dtype = floating(op, q_online_in);
  const auto dev = q_online_in.device();
  TORCH_CHECK(q_online_in.dim() == 2, "foxhunt::dueling_bellman_target: q_online_next must be [B, N]");
  const int64_t rows = q_online_in.size(0), n_actions = q_online_in.size(1);
  TORCH_CHECK(n_actions >= 1, "foxhunt::dueling_bellman_target: needs at least one action");
  const Tensor q_online = checked(op, "q_online_next", q_online_in, dev, dtype, {rows, n_actions});
  const Tensor q_target = checked(op, "q_target_next", q_target_in, dev, dtype, {rows, n_actions});
  const Tensor reward = checked(op, "reward", reward_in, dev, dtype, {rows});
  const Tensor discount = checked(op, "discount", discount_in, dev, dtype, {rows});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor y = at::empty({rows}, q_online.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_dueling_bellman_target<scalar_t>(q_online.data_ptr<scalar_t>(), q_target.data_ptr<scalar_t>(),
                                                     reward.data_ptr<scalar_t>(), discount.data_ptr<scalar_t>(),
                                                     y.data_ptr<scalar_t>(), as_int(op, rows),
                                                     as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}

std::tuple<Tensor, Tensor> dueling_huber_loss(const Tensor& q_in, const Tensor& action_in, const Tensor& y_in,
                                              double kappa) {
  static constexpr const char* op = "dueling_huber_loss";
  const auto dtype = floating(op, q_in);
  const auto dev = q_in.device();
  TORCH_CHECK(q_in.dim() == 2, "foxhunt::dueling_huber_loss: q must be [B, N]");
  TORCH_CHECK(kappa > 0, "foxhunt::dueling_huber_loss: kappa=", kappa, " must be > 0");
  const int64_t rows = q_in.size(0), n_actions = q_in.size(1);
  const Tensor q = checked(op, "q", q_in, dev, dtype, {rows, n_actions});
  const Tensor action = checked(op, "action", action_in, dev, at::kLong, {rows});
  const Tensor y = checked(op, "y", y_in, dev, dtype, {rows});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor loss = at::empty({}, q.options());
  Tensor grad_q = at::empty({rows, n_actions}, q.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_dueling_huber_loss<scalar_t>(q.data_ptr<scalar_t>(), action.data_ptr<int64_t>(),
                                                 y.data_ptr<scalar_t>(), static_cast<scalar_t>(kappa),
                                                 loss.data_ptr<scalar_t>(), grad_q.data_ptr<scalar_t>(),
                                                 as_int(op, rows), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {loss, grad_q};
}

Tensor c51_project(const Tensor& probs_in, const Tensor& reward_in, const Tensor& discount_in, double v_min,
                   double v_max) {
  static constexpr const char* op = "c51_project";
  const auto dtype = floating(op, probs_in);
  const auto dev = probs_in.device();
  TORCH_CHECK(probs_in.dim() == 2 && probs_in.size(1) >= 2, "foxhunt::c51_project: next_probs must be [B, Z], Z>=2");
  TORCH_CHECK(v_min < v_max, "foxhunt::c51_project: v_min=", v_min, " must be < v_max=", v_max);
  const int64_t rows = probs_in.size(0), n_atoms = probs_in.size(1);
  const Tensor probs = checked(op, "next_probs", probs_in, dev, dtype, {rows, n_atoms});
  const Tensor reward = checked(op, "reward", reward_in, dev, dtype, {rows});
  const Tensor discount = checked(op, "discount", discount_in, dev, dtype, {rows});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor target = at::empty({rows, n_atoms}, probs.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_c51_project<scalar_t>(probs.data_ptr<scalar_t>(), reward.data_ptr<scalar_t>(),
                                          discount.data_ptr<scalar_t>(), static_cast<scalar_t>(v_min),
                                          static_cast<scalar_t>(v_max), target.data_ptr<scalar_t>(),
                                          as_int(op, rows), as_int(op, n_atoms), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return target;
}

std::tuple<Tensor, Tensor> iqn_quantile_huber_loss(const Tensor& theta_in, const Tensor& tau_in,
                                                   const Tensor& target_in, double kappa) {
  static constexpr const char* op = "iqn_quantile_huber_loss";
  const auto dtype = floating(op, theta_in);
  const auto dev = theta_in.device();
  TORCH_CHECK(theta_in.dim() == 2 && target_in.dim() == 2, "foxhunt::iqn_quantile_huber_loss: theta and target must be 2-D");
  TORCH_CHECK(kappa > 0, "foxhunt::iqn_quantile_huber_loss: kappa=", kappa, " must be > 0");
  const int64_t rows = theta_in.size(0), n_quantiles = theta_in.size(1), n_targets = target_in.size(1);
  TORCH_CHECK(n_targets >= 1, "foxhunt::iqn_quantile_huber_loss: target needs at least one quantile");
  const Tensor theta = checked(op, "theta", theta_in, dev, dtype, {rows, n_quantiles});
  const Tensor tau = checked(op, "tau", tau_in, dev, dtype, {rows, n_quantiles});
  const Tensor target = checked(op, "target", target_in, dev, dtype, {rows, n_targets});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor loss = at::empty({}, theta.options());
  Tensor grad_theta = at::empty({rows, n_quantiles}, theta.options());
  Tensor row_loss = at::empty({rows}, theta.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_iqn_quantile_huber_loss<scalar_t>(
        theta.data_ptr<scalar_t>(), tau.data_ptr<scalar_t>(), target.data_ptr<scalar_t>(),
        static_cast<scalar_t>(kappa), loss.data_ptr<scalar_t>(), grad_theta.data_ptr<scalar_t>(),
        row_loss.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, n_quantiles), as_int(op, n_targets), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {loss, grad_theta};
}

Tensor ensemble_q(const Tensor& logits_in, const Tensor& support_in, const Tensor& quantiles_in, double w) {
  static constexpr const char* op = "ensemble_q";
  const auto dtype = floating(op, logits_in);
  const auto dev = logits_in.device();
  TORCH_CHECK(logits_in.dim() == 3 && quantiles_in.dim() == 3, "foxhunt::ensemble_q: logits [B,N,Z] and quantiles [B,T,N]");
  const int64_t rows = logits_in.size(0), n_actions = logits_in.size(1), n_atoms = logits_in.size(2);
  const int64_t n_quantiles = quantiles_in.size(1);
  TORCH_CHECK(n_atoms >= 1 && n_quantiles >= 1, "foxhunt::ensemble_q: needs Z >= 1 atoms and T >= 1 quantiles");
  const Tensor logits = checked(op, "c51_logits", logits_in, dev, dtype, {rows, n_actions, n_atoms});
  const Tensor support = checked(op, "support", support_in, dev, dtype, {n_atoms});
  const Tensor quantiles = checked(op, "iqn_quantiles", quantiles_in, dev, dtype, {rows, n_quantiles, n_actions});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor q_ens = at::empty({rows, n_actions}, logits.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_ensemble_q<scalar_t>(logits.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(),
                                         quantiles.data_ptr<scalar_t>(), static_cast<scalar_t>(w),
                                         q_ens.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, n_actions),
                                         as_int(op, n_atoms), as_int(op, n_quantiles), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return q_ens;
}

std::tuple<Tensor, Tensor> ensemble_q_backward(const Tensor& grad_in, const Tensor& logits_in,
                                               const Tensor& support_in, int64_t n_quantiles, double w) {
  static constexpr const char* op = "ensemble_q_backward";
  const auto dtype = floating(op, logits_in);
  const auto dev = logits_in.device();
  TORCH_CHECK(logits_in.dim() == 3, "foxhunt::ensemble_q_backward: c51_logits must be [B, N, Z]");
  TORCH_CHECK(n_quantiles >= 1, "foxhunt::ensemble_q_backward: n_quantiles=", n_quantiles, " must be >= 1");
  const int64_t rows = logits_in.size(0), n_actions = logits_in.size(1), n_atoms = logits_in.size(2);
  const Tensor grad = checked(op, "grad", grad_in, dev, dtype, {rows, n_actions});
  const Tensor logits = checked(op, "c51_logits", logits_in, dev, dtype, {rows, n_actions, n_atoms});
  const Tensor support = checked(op, "support", support_in, dev, dtype, {n_atoms});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor grad_logits = at::empty({rows, n_actions, n_atoms}, logits.options());
  Tensor grad_quantiles = at::empty({rows, n_quantiles, n_actions}, logits.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_ensemble_q_backward<scalar_t>(
        grad.data_ptr<scalar_t>(), logits.data_ptr<scalar_t>(), support.data_ptr<scalar_t>(),
        static_cast<scalar_t>(w), grad_logits.data_ptr<scalar_t>(), grad_quantiles.data_ptr<scalar_t>(),
        as_int(op, rows), as_int(op, n_actions), as_int(op, n_atoms), as_int(op, n_quantiles), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {grad_logits, grad_quantiles};
}

std::tuple<Tensor, Tensor> gae(const Tensor& rewards_in, const Tensor& values_in, const Tensor& next_values_in,
                               const Tensor& terminated_in, const Tensor& episode_end_in, double gamma, double lam) {
  static constexpr const char* op = "gae";
  const auto dtype = floating(op, values_in);
  const auto dev = values_in.device();
  TORCH_CHECK(values_in.dim() == 2, "foxhunt::gae: values must be [T, B]");
  const int64_t steps = values_in.size(0), columns = values_in.size(1);
  const Tensor rewards = checked(op, "rewards", rewards_in, dev, dtype, {steps, columns});
  const Tensor values = checked(op, "values", values_in, dev, dtype, {steps, columns});
  const Tensor next_values = checked(op, "next_values", next_values_in, dev, dtype, {steps, columns});
  const Tensor terminated = checked(op, "terminated", terminated_in, dev, at::kBool, {steps, columns});
  const Tensor episode_end = checked(op, "episode_end", episode_end_in, dev, at::kBool, {steps, columns});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor advantages = at::empty({steps, columns}, values.options());
  Tensor returns = at::empty({steps, columns}, values.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_gae<scalar_t>(rewards.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
                                  next_values.data_ptr<scalar_t>(), terminated.data_ptr<bool>(),
                                  episode_end.data_ptr<bool>(), static_cast<scalar_t>(gamma),
                                  static_cast<scalar_t>(lam), advantages.data_ptr<scalar_t>(),
                                  returns.data_ptr<scalar_t>(), as_int(op, steps), as_int(op, columns), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {advantages, returns};
}

Tensor iqn_head(const Tensor& h_in, const Tensor& pre_in, const Tensor& w_out_in, const Tensor& b_out_in) {
  static constexpr const char* op = "iqn_head";
  const auto dtype = floating(op, h_in);
  const auto dev = h_in.device();
  TORCH_CHECK(h_in.dim() == 2 && pre_in.dim() == 3 && w_out_in.dim() == 2,
              "foxhunt::iqn_head: h [B, H], pre [B, T, H] and w_out [N, H] expected");
  const int64_t rows = h_in.size(0), hidden = h_in.size(1), n_tau = pre_in.size(1), n_actions = w_out_in.size(0);
  TORCH_CHECK(n_actions >= 1 && n_actions <= foxhunt::kIqnHeadMaxActions, "foxhunt::iqn_head: w_out has ",
              n_actions, " actions; the kernel takes 1..", foxhunt::kIqnHeadMaxActions,
              " (learner.ops.iqn_head uses the reference beyond that)");
  const Tensor h = checked(op, "h", h_in, dev, dtype, {rows, hidden});
  const Tensor pre = checked(op, "pre", pre_in, dev, dtype, {rows, n_tau, hidden});
  const Tensor w_out = checked(op, "w_out", w_out_in, dev, dtype, {n_actions, hidden});
  const Tensor b_out = checked(op, "b_out", b_out_in, dev, dtype, {n_actions});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor q = at::empty({rows, n_tau, n_actions}, h.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_iqn_head_forward<scalar_t>(h.data_ptr<scalar_t>(), pre.data_ptr<scalar_t>(),
                                               w_out.data_ptr<scalar_t>(), b_out.data_ptr<scalar_t>(),
                                               q.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, n_tau),
                                               as_int(op, hidden), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return q;
}

std::tuple<Tensor, Tensor, Tensor, Tensor> iqn_head_backward(const Tensor& grad_in, const Tensor& h_in,
                                                             const Tensor& pre_in, const Tensor& w_out_in) {
  static constexpr const char* op = "iqn_head_backward";
  const auto dtype = floating(op, h_in);
  const auto dev = h_in.device();
  TORCH_CHECK(h_in.dim() == 2 && pre_in.dim() == 3 && w_out_in.dim() == 2,
              "foxhunt::iqn_head_backward: h [B, H], pre [B, T, H] and w_out [N, H] expected");
  const int64_t rows = h_in.size(0), hidden = h_in.size(1), n_tau = pre_in.size(1), n_actions = w_out_in.size(0);
  TORCH_CHECK(n_actions >= 1 && n_actions <= foxhunt::kIqnHeadMaxActions, "foxhunt::iqn_head_backward: w_out has ",
              n_actions, " actions; the kernel takes 1..", foxhunt::kIqnHeadMaxActions);
  const Tensor grad = checked(op, "grad", grad_in, dev, dtype, {rows, n_tau, n_actions});
  const Tensor h = checked(op, "h", h_in, dev, dtype, {rows, hidden});
  const Tensor pre = checked(op, "pre", pre_in, dev, dtype, {rows, n_tau, hidden});
  const Tensor w_out = checked(op, "w_out", w_out_in, dev, dtype, {n_actions, hidden});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor grad_h = at::empty({rows, hidden}, h.options());
  Tensor grad_pre = at::empty({rows, n_tau, hidden}, h.options());
  Tensor grad_w_out = at::empty({n_actions, hidden}, h.options());
  Tensor grad_b_out = at::empty({n_actions}, h.options());
  const int chunks = foxhunt::iqn_head_backward_chunks(as_int(op, rows));
  Tensor partial = at::empty({std::max(chunks, 1), n_actions * hidden + n_actions}, h.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_iqn_head_backward<scalar_t>(
        grad.data_ptr<scalar_t>(), h.data_ptr<scalar_t>(), pre.data_ptr<scalar_t>(), w_out.data_ptr<scalar_t>(),
        grad_h.data_ptr<scalar_t>(), grad_pre.data_ptr<scalar_t>(), grad_w_out.data_ptr<scalar_t>(),
        grad_b_out.data_ptr<scalar_t>(), partial.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, n_tau),
        as_int(op, hidden), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {grad_h, grad_pre, grad_w_out, grad_b_out};
}

std::tuple<Tensor, Tensor, Tensor> nstep_returns(const Tensor& rewards_in, const Tensor& valid_in,
                                                 const Tensor& terminated_in, const Tensor& truncated_in,
                                                 double gamma, int64_t n, double reward_scale) {
  static constexpr const char* op = "nstep_returns";
  const auto dtype = floating(op, rewards_in);
  const auto dev = rewards_in.device();
  TORCH_CHECK(rewards_in.dim() == 2, "foxhunt::nstep_returns: rewards must be [T, B]");
  TORCH_CHECK(n >= 1 && n <= 1024, "foxhunt::nstep_returns: n=", n, " must be in [1, 1024]");
  const int64_t steps = rewards_in.size(0), columns = rewards_in.size(1);
  const Tensor rewards = checked(op, "rewards", rewards_in, dev, dtype, {steps, columns});
  const Tensor valid = checked(op, "valid", valid_in, dev, at::kBool, {steps, columns});
  const Tensor terminated = checked(op, "terminated", terminated_in, dev, at::kBool, {steps, columns});
  const Tensor truncated = checked(op, "truncated", truncated_in, dev, at::kBool, {steps, columns});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor ret = at::empty({steps, columns}, rewards.options());
  Tensor discount = at::empty({steps, columns}, rewards.options());
  Tensor next_row = at::empty({steps, columns}, rewards.options().dtype(at::kLong));
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_nstep_returns<scalar_t>(
        rewards.data_ptr<scalar_t>(), valid.data_ptr<bool>(), terminated.data_ptr<bool>(), truncated.data_ptr<bool>(),
        gamma, static_cast<int>(n), static_cast<scalar_t>(reward_scale), ret.data_ptr<scalar_t>(),
        discount.data_ptr<scalar_t>(), next_row.data_ptr<int64_t>(), as_int(op, steps), as_int(op, columns), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {ret, discount, next_row};
}

void replay_write_(const Tensor& d_obs, const Tensor& d_action, const Tensor& d_ret, const Tensor& d_discount,
                   const Tensor& d_next_obs, const Tensor& obs_in, const Tensor& actions_in, const Tensor& ret_in,
                   const Tensor& discount_in, const Tensor& next_row_in, const Tensor& flat_idx_in, int64_t cursor) {
  static constexpr const char* op = "replay_write_";
  const auto dtype = floating(op, d_obs);
  const auto dev = d_obs.device();
  TORCH_CHECK(d_obs.dim() == 2 && obs_in.dim() == 3 && actions_in.dim() == 2,
              "foxhunt::replay_write_: replay obs [C, D], rollout obs [T+1, B, D] and actions [T, B] expected");
  const int64_t capacity = d_obs.size(0), obs_dim = d_obs.size(1);
  const int64_t steps = actions_in.size(0), columns = actions_in.size(1), n = flat_idx_in.numel();
  TORCH_CHECK(capacity >= 1 && n <= capacity, "foxhunt::replay_write_: ", n, " transitions do not fit a ring of ",
              capacity, " (keep the newest capacity of them)");
  TORCH_CHECK(cursor >= 0 && cursor < capacity, "foxhunt::replay_write_: cursor=", cursor, " is outside [0, ",
              capacity, ")");
  for (const auto* t : {&d_obs, &d_action, &d_ret, &d_discount, &d_next_obs})
    TORCH_CHECK(t->is_contiguous() && t->device() == dev, "foxhunt::replay_write_: the replay's tensors must be ",
                "contiguous and on one device (they are written in place)");
  checked(op, "d_action", d_action, dev, at::kLong, {capacity});
  checked(op, "d_ret", d_ret, dev, dtype, {capacity});
  checked(op, "d_discount", d_discount, dev, dtype, {capacity});
  checked(op, "d_next_obs", d_next_obs, dev, dtype, {capacity, obs_dim});
  const Tensor obs = checked(op, "obs", obs_in, dev, dtype, {steps + 1, columns, obs_dim});
  const Tensor actions = checked(op, "actions", actions_in, dev, at::kLong, {steps, columns});
  const Tensor ret = checked(op, "ret", ret_in, dev, dtype, {steps, columns});
  const Tensor discount = checked(op, "discount", discount_in, dev, dtype, {steps, columns});
  const Tensor next_row = checked(op, "next_row", next_row_in, dev, at::kLong, {steps, columns});
  const Tensor flat_idx = checked(op, "flat_idx", flat_idx_in, dev, at::kLong, {n});
  const c10::cuda::CUDAGuard guard(dev);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_replay_write<scalar_t>(
        d_obs.data_ptr<scalar_t>(), d_action.data_ptr<int64_t>(), d_ret.data_ptr<scalar_t>(),
        d_discount.data_ptr<scalar_t>(), d_next_obs.data_ptr<scalar_t>(), obs.data_ptr<scalar_t>(),
        actions.data_ptr<int64_t>(), ret.data_ptr<scalar_t>(), discount.data_ptr<scalar_t>(),
        next_row.data_ptr<int64_t>(), flat_idx.data_ptr<int64_t>(), n, cursor, capacity, steps * columns,
        (steps + 1) * columns, as_int(op, obs_dim), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<Tensor, Tensor, Tensor> policy_losses(const Tensor& logits_in, const Tensor& q_ens_in,
                                                 const Tensor& values_in, const Tensor& returns_in,
                                                 const Tensor& adv_in, const Tensor& actions_in,
                                                 const Tensor& behaviour_logp_in, const Tensor& valid_in, double clip,
                                                 double temperature, bool normalize, bool flip_distill) {
  static constexpr const char* op = "policy_losses";
  const auto dtype = floating(op, logits_in);
  const auto dev = logits_in.device();
  TORCH_CHECK(logits_in.dim() == 2, "foxhunt::policy_losses: logits must be [R, N]");
  TORCH_CHECK(clip > 0 && temperature > 0, "foxhunt::policy_losses: clip=", clip, " and temperature=", temperature,
              " must both be > 0");
  const int64_t rows = logits_in.size(0), n_actions = logits_in.size(1);
  TORCH_CHECK(n_actions >= 1, "foxhunt::policy_losses: logits need at least one action column");
  const Tensor logits = checked(op, "logits", logits_in, dev, dtype, {rows, n_actions});
  const Tensor q_ens = checked(op, "q_ens", q_ens_in, dev, dtype, {rows, n_actions});
  const Tensor values = checked(op, "values", values_in, dev, dtype, {rows});
  const Tensor returns = checked(op, "returns", returns_in, dev, dtype, {rows});
  const Tensor adv = checked(op, "adv", adv_in, dev, dtype, {rows});
  const Tensor actions = checked(op, "actions", actions_in, dev, at::kLong, {rows});
  const Tensor behaviour_logp = checked(op, "behaviour_logp", behaviour_logp_in, dev, dtype, {rows});
  const Tensor valid = checked(op, "valid", valid_in, dev, at::kBool, {rows});
  const c10::cuda::CUDAGuard guard(dev);
  Tensor stats = at::empty({10}, logits.options());
  Tensor grad_logits = at::empty({3, rows, n_actions}, logits.options());
  Tensor grad_values = at::empty({rows}, logits.options());
  Tensor scal = at::empty({4}, logits.options());
  Tensor partial = at::empty({std::max<int64_t>(1, foxhunt::policy_losses_blocks(as_int(op, rows))) * 9},
                             logits.options());
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_policy_losses<scalar_t>(
        logits.data_ptr<scalar_t>(), q_ens.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
        returns.data_ptr<scalar_t>(), adv.data_ptr<scalar_t>(), actions.data_ptr<int64_t>(),
        behaviour_logp.data_ptr<scalar_t>(), valid.data_ptr<bool>(), static_cast<scalar_t>(clip),
        static_cast<scalar_t>(temperature), normalize, flip_distill, stats.data_ptr<scalar_t>(),
        grad_logits.data_ptr<scalar_t>(), grad_values.data_ptr<scalar_t>(), scal.data_ptr<scalar_t>(),
        partial.data_ptr<scalar_t>(), as_int(op, rows), as_int(op, n_actions), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {stats, grad_logits, grad_values};
}

void soft_update_(const Tensor& target, const Tensor& online_in, double tau) {
  static constexpr const char* op = "soft_update_";
  const auto dtype = floating(op, target);
  const auto dev = target.device();
  TORCH_CHECK(target.dim() == 1 && target.is_contiguous(),
              "foxhunt::soft_update_: target_flat must be a contiguous 1-D buffer (it is updated in place)");
  const Tensor online = checked(op, "online_flat", online_in, dev, dtype, {target.size(0)});
  checked(op, "target_flat", target, dev, dtype, {target.size(0)});
  const c10::cuda::CUDAGuard guard(dev);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::launch_soft_update<scalar_t>(target.data_ptr<scalar_t>(), online.data_ptr<scalar_t>(),
                                          static_cast<scalar_t>(tau), target.numel(), stream);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

foxhunt::GuardLr lr_of(const Tensor& lr) {
  return lr.scalar_type() == at::kDouble ? foxhunt::GuardLr{nullptr, lr.data_ptr<double>()}
                                         : foxhunt::GuardLr{lr.data_ptr<float>(), nullptr};
}

std::tuple<Tensor, Tensor> guarded_adam_(at::TensorList flats, at::TensorList grads, at::TensorList exp_avgs,
                                         at::TensorList exp_avg_sqs, at::TensorList steps, at::TensorList targets,
                                         at::TensorList lrs, at::TensorList checks, at::IntArrayRef group_ends,
                                         at::ArrayRef<double> max_norms, double beta1, double beta2, double eps,
                                         double tau) {
  static constexpr const char* op = "guarded_adam_";
  const size_t nets = flats.size();
  TORCH_CHECK(nets >= 1 && nets <= static_cast<size_t>(foxhunt::kGuardMaxNets), "foxhunt::guarded_adam_: 1 to ",
              foxhunt::kGuardMaxNets, " networks, got ", nets);
  TORCH_CHECK(grads.size() == nets && exp_avgs.size() == nets && exp_avg_sqs.size() == nets &&
                  steps.size() == nets && targets.size() == nets && lrs.size() == nets && max_norms.size() == nets,
              "foxhunt::guarded_adam_: flats, grads, exp_avgs, exp_avg_sqs, steps, targets, lrs and max_norms need "
              "one entry per network (", nets, ")");
  TORCH_CHECK(group_ends.size() <= static_cast<size_t>(foxhunt::kGuardMaxGroups), "foxhunt::guarded_adam_: at most ",
              foxhunt::kGuardMaxGroups, " groups, got ", group_ends.size());
  TORCH_CHECK(checks.size() <= static_cast<size_t>(foxhunt::kGuardMaxChecks), "foxhunt::guarded_adam_: at most ",
              foxhunt::kGuardMaxChecks, " checks, got ", checks.size());
  const auto dtype = floating(op, flats[0]);
  const auto dev = flats[0].device();
  for (size_t k = 0; k < nets; ++k) {
    const Tensor& flat = flats[k];
    TORCH_CHECK(flat.dim() == 1 && flat.is_contiguous(), "foxhunt::guarded_adam_: flats[", k,
                "] must be a contiguous 1-D buffer (it is updated in place)");
    const int64_t n = flat.size(0);
    for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"flats", &flat}, {"grads", &grads[k]},
                                  {"exp_avgs", &exp_avgs[k]}, {"exp_avg_sqs", &exp_avg_sqs[k]},
                                  {"targets", &targets[k]}}) {
      TORCH_CHECK(t->is_contiguous(), "foxhunt::guarded_adam_: ", name, "[", k, "] must be contiguous (in place)");
      checked(op, name, *t, dev, dtype, {n});
    }
    checked(op, "steps", steps[k], dev, at::kFloat, {});
    TORCH_CHECK(lrs[k].scalar_type() == at::kFloat || lrs[k].scalar_type() == at::kDouble, "foxhunt::guarded_adam_: ",
                "lrs[", k, "] must be a float32 or float64 scalar, got ", lrs[k].scalar_type());
    checked(op, "lrs", lrs[k], dev, lrs[k].scalar_type(), {});
    TORCH_CHECK(max_norms[k] > 0, "foxhunt::guarded_adam_: max_norms[", k, "]=", max_norms[k], " must be > 0");
  }
  foxhunt::GuardGroups groups{};
  groups.count = static_cast<int>(group_ends.size());
  for (size_t g = 0; g < group_ends.size(); ++g) {
    TORCH_CHECK(group_ends[g] >= (g ? group_ends[g - 1] : 0) && group_ends[g] <= flats[0].size(0),
                "foxhunt::guarded_adam_: group_ends must rise within flats[0]'s ", flats[0].size(0), " values, got ",
                group_ends);
    groups.end[g] = group_ends[g];
  }
  const foxhunt::GuardGroups no_groups{};
  const c10::cuda::CUDAGuard guard(dev);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const int64_t first = groups.count + 3;
  Tensor stats = at::empty({first + 3 * static_cast<int64_t>(nets - 1)}, flats[0].options());
  Tensor healthy = at::empty({}, flats[0].options().dtype(at::kBool));
  AT_DISPATCH_FLOATING_TYPES(dtype, op, [&] {
    foxhunt::GuardChecks<scalar_t> guard_checks{};
    guard_checks.count = static_cast<int>(checks.size());
    for (size_t c = 0; c < checks.size(); ++c)
      guard_checks.value[c] = checked(op, "checks", checks[c], dev, dtype, {}).data_ptr<scalar_t>();
    const foxhunt::GuardChecks<scalar_t> no_checks{};
    foxhunt::GuardHealth<scalar_t> health{};
    health.count = static_cast<int>(nets);
    std::vector<Tensor> scratch;
    for (size_t k = 0; k < nets; ++k) {
      const int64_t n = flats[k].size(0);
      const int blocks = foxhunt::guarded_adam_blocks(n);
      const auto& g = k == 0 ? groups : no_groups;
      Tensor partial = at::empty({static_cast<int64_t>(blocks) * (g.count + 2)}, stats.options());
      Tensor probe = at::empty({blocks}, stats.options());
      scalar_t* net_stats = stats.data_ptr<scalar_t>() + (k == 0 ? 0 : first + 3 * static_cast<int64_t>(k - 1));
      foxhunt::launch_guard_probe<scalar_t>(
          flats[k].data_ptr<scalar_t>(), grads[k].data_ptr<scalar_t>(), exp_avgs[k].data_ptr<scalar_t>(),
          exp_avg_sqs[k].data_ptr<scalar_t>(), steps[k].data_ptr<float>(), lr_of(lrs[k]), n, g,
          k == 0 ? guard_checks : no_checks, static_cast<scalar_t>(max_norms[k]), static_cast<scalar_t>(beta1),
          static_cast<scalar_t>(beta2), static_cast<scalar_t>(eps), partial.data_ptr<scalar_t>(), net_stats,
          probe.data_ptr<scalar_t>(), stream);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      health.flag[k] = net_stats + g.count + 1;
      health.probe[k] = probe.data_ptr<scalar_t>();
      health.probe_rows[k] = blocks;
      scratch.push_back(partial);
      scratch.push_back(probe);
    }
    for (size_t k = 0; k < nets; ++k) {
      const auto& g = k == 0 ? groups : no_groups;
      const scalar_t* net_stats = stats.data_ptr<scalar_t>() + (k == 0 ? 0 : first + 3 * static_cast<int64_t>(k - 1));
      foxhunt::launch_guard_commit<scalar_t>(
          flats[k].data_ptr<scalar_t>(), grads[k].data_ptr<scalar_t>(), exp_avgs[k].data_ptr<scalar_t>(),
          exp_avg_sqs[k].data_ptr<scalar_t>(), steps[k].data_ptr<float>(), targets[k].data_ptr<scalar_t>(),
          lr_of(lrs[k]), flats[k].size(0), net_stats, g.count, health,
          static_cast<scalar_t>(max_norms[k]), static_cast<scalar_t>(beta1), static_cast<scalar_t>(beta2),
          static_cast<scalar_t>(eps), static_cast<scalar_t>(tau), k == 0 ? healthy.data_ptr<bool>() : nullptr,
          stream);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    // The scratch tensors go back to the caching allocator on this stream: reused only by later work on it.
  });
  return {stats, healthy};
}

}  // namespace

TORCH_LIBRARY_IMPL(foxhunt, CUDA, m) {
  m.impl("dueling_forward", &dueling_forward);
  m.impl("dueling_backward", &dueling_backward);
  m.impl("dueling_bellman_target", &dueling_bellman_target);
  m.impl("dueling_huber_loss", &dueling_huber_loss);
  m.impl("c51_project", &c51_project);
  m.impl("iqn_quantile_huber_loss", &iqn_quantile_huber_loss);
  m.impl("ensemble_q", &ensemble_q);
  m.impl("ensemble_q_backward", &ensemble_q_backward);
  m.impl("gae", &gae);
  m.impl("iqn_head", &iqn_head);
  m.impl("iqn_head_backward", &iqn_head_backward);
  m.impl("nstep_returns", &nstep_returns);
  m.impl("replay_write_", &replay_write_);
  m.impl("soft_update_", &soft_update_);
  m.impl("policy_losses", &policy_losses);
  m.impl("guarded_adam_", &guarded_adam_);
}

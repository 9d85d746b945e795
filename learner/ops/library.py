"""The `foxhunt::` custom ops: schemas, CPU implementations (the reference), fake impls and autograd.

The CUDA implementations live in cuda/binding/foxhunt_binding.cpp (TORCH_LIBRARY_IMPL(foxhunt, CUDA)) and
are registered when `learner.ops` loads the extension; the schemas here are the single definition both
sides share. Losses whose kernel computes the gradient in the same pass return (loss, grad) and their
autograd formula just scales the saved grad, so backward launches nothing of its own.
"""

from __future__ import annotations

import torch

from learner.ops import reference

_lib = torch.library.Library("foxhunt", "DEF")

_SCHEMAS = {
    "dueling_forward": (
        "(Tensor h, Tensor w_v, Tensor b_v, Tensor w_a, Tensor b_a) -> (Tensor, Tensor, Tensor)"
    ),
    "dueling_backward": (
        "(Tensor? grad_v, Tensor? grad_a, Tensor? grad_q, Tensor h, Tensor w_v, Tensor w_a)"
        " -> (Tensor, Tensor, Tensor, Tensor, Tensor)"
    ),
    "dueling_bellman_target": (
        "(Tensor q_online_next, Tensor q_target_next, Tensor reward, Tensor discount) -> Tensor"
    ),
    "dueling_huber_loss": "(Tensor q, Tensor action, Tensor y, float kappa) -> (Tensor, Tensor)",
    "c51_project": "(Tensor next_probs, Tensor reward, Tensor discount, float v_min, float v_max) -> Tensor",
    "iqn_quantile_huber_loss": "(Tensor theta, Tensor tau, Tensor target, float kappa) -> (Tensor, Tensor)",
    "ensemble_q": "(Tensor c51_logits, Tensor support, Tensor iqn_quantiles, float w) -> Tensor",
    "ensemble_q_backward": (
        "(Tensor grad, Tensor c51_logits, Tensor support, SymInt n_quantiles, float w) -> (Tensor, Tensor)"
    ),
    "gae": (
        "(Tensor rewards, Tensor values, Tensor next_values, Tensor terminated, Tensor episode_end,"
        " float gamma, float lam) -> (Tensor, Tensor)"
    ),
    "iqn_head": "(Tensor h, Tensor pre, Tensor w_out, Tensor b_out) -> Tensor",
    "iqn_head_backward": "(Tensor grad, Tensor h, Tensor pre, Tensor w_out) -> (Tensor, Tensor, Tensor, Tensor)",
    "nstep_returns": (
        "(Tensor rewards, Tensor valid, Tensor terminated, Tensor truncated, float gamma, int n, float reward_scale)"
        " -> (Tensor, Tensor, Tensor)"
    ),
    "replay_write_": (
        "(Tensor(a!) d_obs, Tensor(b!) d_action, Tensor(c!) d_ret, Tensor(d!) d_discount, Tensor(e!) d_next_obs,"
        " Tensor obs, Tensor actions, Tensor ret, Tensor discount, Tensor next_row, Tensor flat_idx, int cursor) -> ()"
    ),
    "soft_update_": "(Tensor(a!) target_flat, Tensor online_flat, float tau) -> ()",
    "policy_losses": (
        "(Tensor logits, Tensor q_ens, Tensor values, Tensor returns, Tensor adv, Tensor actions,"
        " Tensor behaviour_logp, Tensor valid, float clip, float temperature, bool normalize, bool flip_distill)"
        " -> (Tensor, Tensor, Tensor)"
    ),
    "guarded_adam_": (
        "(Tensor(a!)[] flats, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs,"
        " Tensor(e!)[] steps, Tensor(f!)[] targets, Tensor[] lrs, Tensor[] checks, int[] group_ends,"
        " float[] max_norms, float beta1, float beta2, float eps, float tau) -> (Tensor, Tensor)"
    ),
}
for _name, _schema in _SCHEMAS.items():
    _lib.define(_name + _schema)

OP_NAMES = tuple(_SCHEMAS)


def _cpu(name):
    return torch.library.impl(f"foxhunt::{name}", "CPU", lib=_lib)


def _fake(name):
    return torch.library.register_fake(f"foxhunt::{name}", lib=_lib)


# ---- CPU implementations: the reference, with fresh (never aliased) outputs -------------------------------


@_cpu("dueling_forward")
def _dueling_forward_cpu(h, w_v, b_v, w_a, b_a):
    return tuple(t.contiguous().clone() for t in reference.dueling_forward(h, w_v, b_v, w_a, b_a))


@_cpu("dueling_backward")
def _dueling_backward_cpu(grad_v, grad_a, grad_q, h, w_v, w_a):
    return tuple(
        t.contiguous().clone() for t in reference.dueling_backward(grad_v, grad_a, grad_q, h, w_v, w_a)
    )


@_cpu("dueling_bellman_target")
def _bellman_cpu(q_online_next, q_target_next, reward, discount):
    return reference.dueling_bellman_target(q_online_next, q_target_next, reward, discount).clone()


@_cpu("dueling_huber_loss")
def _huber_cpu(q, action, y, kappa):
    return reference.dueling_huber_loss_and_grad(q, action, y, kappa)


@_cpu("c51_project")
def _c51_cpu(next_probs, reward, discount, v_min, v_max):
    return reference.c51_project(next_probs, reward, discount, v_min, v_max)


@_cpu("iqn_quantile_huber_loss")
def _iqn_cpu(theta, tau, target, kappa):
    return reference.iqn_quantile_huber_loss_and_grad(theta, tau, target, kappa)


@_cpu("ensemble_q")
def _ensemble_cpu(c51_logits, support, iqn_quantiles, w):
    return reference.ensemble_q(c51_logits, support, iqn_quantiles, w).contiguous()


@_cpu("ensemble_q_backward")
def _ensemble_backward_cpu(grad, c51_logits, support, n_quantiles, w):
    return reference.ensemble_q_backward(grad, c51_logits, support, n_quantiles, w)


@_cpu("gae")
def _gae_cpu(rewards, values, next_values, terminated, episode_end, gamma, lam):
    return reference.gae(rewards, values, next_values, terminated, episode_end, gamma, lam)


@_cpu("iqn_head")
def _iqn_head_cpu(h, pre, w_out, b_out):
    return reference.iqn_head(h, pre, w_out, b_out).contiguous()


@_cpu("iqn_head_backward")
def _iqn_head_backward_cpu(grad, h, pre, w_out):
    return tuple(t.contiguous() for t in reference.iqn_head_backward(grad, h, pre, w_out))


@_cpu("nstep_returns")
def _nstep_cpu(rewards, valid, terminated, truncated, gamma, n, reward_scale):
    return tuple(
        t.contiguous() for t in reference.nstep_returns(rewards, valid, terminated, truncated, gamma, n, reward_scale)
    )


@_cpu("replay_write_")
def _replay_write_cpu(d_obs, d_action, d_ret, d_discount, d_next_obs, obs, actions, ret, discount, next_row, flat_idx,
                      cursor):  # fmt: skip
    reference.replay_write_(
        d_obs, d_action, d_ret, d_discount, d_next_obs, obs, actions, ret, discount, next_row, flat_idx, cursor
    )


@_cpu("soft_update_")
def _soft_update_cpu(target_flat, online_flat, tau):
    reference.soft_update_(target_flat, online_flat, tau)


@_cpu("policy_losses")
def _policy_losses_cpu(logits, q_ens, values, returns, adv, actions, behaviour_logp, valid, clip, temperature,
                       normalize, flip_distill):  # fmt: skip
    return reference.policy_losses_grads(
        logits, q_ens, values, returns, adv, actions, behaviour_logp, valid, clip, temperature, normalize, flip_distill
    )


@_cpu("guarded_adam_")
def _guarded_adam_cpu(flats, grads, exp_avgs, exp_avg_sqs, steps, targets, lrs, checks, group_ends, max_norms,
                      beta1, beta2, eps, tau):  # fmt: skip
    return reference.guarded_adam_(
        flats, grads, exp_avgs, exp_avg_sqs, steps, targets, lrs, checks, group_ends, max_norms, beta1, beta2, eps, tau
    )


# ---- fake (meta) implementations: shapes and dtypes only ---------------------------------------------------


@_fake("dueling_forward")
def _dueling_forward_fake(h, w_v, b_v, w_a, b_a):
    rows, n_actions = h.shape[0], w_a.shape[1]
    return h.new_empty(rows), h.new_empty(rows, n_actions), h.new_empty(rows, n_actions)


@_fake("dueling_backward")
def _dueling_backward_fake(grad_v, grad_a, grad_q, h, w_v, w_a):
    return (
        h.new_empty(h.shape),
        w_v.new_empty(w_v.shape),
        w_v.new_empty(1),
        w_a.new_empty(w_a.shape),
        w_a.new_empty(w_a.shape[1]),
    )


@_fake("dueling_bellman_target")
def _bellman_fake(q_online_next, q_target_next, reward, discount):
    return reward.new_empty(q_online_next.shape[0])


@_fake("dueling_huber_loss")
def _huber_fake(q, action, y, kappa):
    return q.new_empty(()), q.new_empty(q.shape)


@_fake("c51_project")
def _c51_fake(next_probs, reward, discount, v_min, v_max):
    return next_probs.new_empty(next_probs.shape)


@_fake("iqn_quantile_huber_loss")
def _iqn_fake(theta, tau, target, kappa):
    return theta.new_empty(()), theta.new_empty(theta.shape)


@_fake("ensemble_q")
def _ensemble_fake(c51_logits, support, iqn_quantiles, w):
    return c51_logits.new_empty(c51_logits.shape[0], c51_logits.shape[1])


@_fake("ensemble_q_backward")
def _ensemble_backward_fake(grad, c51_logits, support, n_quantiles, w):
    rows, n_actions = c51_logits.shape[0], c51_logits.shape[1]
    return c51_logits.new_empty(c51_logits.shape), c51_logits.new_empty(rows, n_quantiles, n_actions)


@_fake("gae")
def _gae_fake(rewards, values, next_values, terminated, episode_end, gamma, lam):
    return values.new_empty(values.shape), values.new_empty(values.shape)


@_fake("iqn_head")
def _iqn_head_fake(h, pre, w_out, b_out):
    return h.new_empty(pre.shape[0], pre.shape[1], w_out.shape[0])


@_fake("iqn_head_backward")
def _iqn_head_backward_fake(grad, h, pre, w_out):
    return h.new_empty(h.shape), pre.new_empty(pre.shape), w_out.new_empty(w_out.shape), w_out.new_empty(w_out.shape[0])


@_fake("nstep_returns")
def _nstep_fake(rewards, valid, terminated, truncated, gamma, n, reward_scale):
    return rewards.new_empty(rewards.shape), rewards.new_empty(rewards.shape), rewards.new_empty(
        rewards.shape, dtype=torch.int64
    )


@_fake("replay_write_")
def _replay_write_fake(d_obs, d_action, d_ret, d_discount, d_next_obs, obs, actions, ret, discount, next_row, flat_idx,
                       cursor):  # fmt: skip
    return None


@_fake("soft_update_")
def _soft_update_fake(target_flat, online_flat, tau):
    return None


@_fake("policy_losses")
def _policy_losses_fake(logits, q_ens, values, returns, adv, actions, behaviour_logp, valid, clip, temperature,
                        normalize, flip_distill):  # fmt: skip
    return logits.new_empty(10), logits.new_empty(3, *logits.shape), values.new_empty(values.shape)


@_fake("guarded_adam_")
def _guarded_adam_fake(flats, grads, exp_avgs, exp_avg_sqs, steps, targets, lrs, checks, group_ends, max_norms,
                       beta1, beta2, eps, tau):  # fmt: skip
    return flats[0].new_empty(len(group_ends) + 3 * len(flats)), flats[0].new_empty((), dtype=torch.bool)


# ---- autograd ----------------------------------------------------------------------------------------


def _dueling_setup(ctx, inputs, output):
    h, w_v, _b_v, w_a, _b_a = inputs
    ctx.save_for_backward(h, w_v, w_a)
    # Unused outputs (V alone feeds the GAE baseline) arrive as None, not as materialised zeros.
    ctx.set_materialize_grads(False)


def _dueling_backward(ctx, grad_v, grad_a, grad_q):
    h, w_v, w_a = ctx.saved_tensors
    if grad_v is None and grad_a is None and grad_q is None:
        return None, None, None, None, None
    return torch.ops.foxhunt.dueling_backward(grad_v, grad_a, grad_q, h, w_v, w_a)


torch.library.register_autograd(
    "foxhunt::dueling_forward", _dueling_backward, setup_context=_dueling_setup, lib=_lib
)


def _save_grad_output(ctx, inputs, output):
    ctx.save_for_backward(output[1])


def _scale_saved_grad(ctx, grad_loss, _grad_of_grad):
    (grad,) = ctx.saved_tensors
    return grad * grad_loss, None, None, None


torch.library.register_autograd(
    "foxhunt::dueling_huber_loss", _scale_saved_grad, setup_context=_save_grad_output, lib=_lib
)
torch.library.register_autograd(
    "foxhunt::iqn_quantile_huber_loss", _scale_saved_grad, setup_context=_save_grad_output, lib=_lib
)


def _ensemble_setup(ctx, inputs, output):
    c51_logits, support, iqn_quantiles, w = inputs
    ctx.save_for_backward(c51_logits, support)
    ctx.n_quantiles = iqn_quantiles.shape[1]
    ctx.w = w


def _ensemble_backward(ctx, grad):
    c51_logits, support = ctx.saved_tensors
    grad_logits, grad_quantiles = torch.ops.foxhunt.ensemble_q_backward(
        grad, c51_logits, support, ctx.n_quantiles, ctx.w
    )
    return grad_logits, None, grad_quantiles, None


torch.library.register_autograd(
    "foxhunt::ensemble_q", _ensemble_backward, setup_context=_ensemble_setup, lib=_lib
)


def _iqn_head_setup(ctx, inputs, output):
    h, pre, w_out, _b_out = inputs
    ctx.save_for_backward(h, pre, w_out)


def _iqn_head_backward(ctx, grad):
    h, pre, w_out = ctx.saved_tensors
    return torch.ops.foxhunt.iqn_head_backward(grad.contiguous(), h, pre, w_out)


torch.library.register_autograd("foxhunt::iqn_head", _iqn_head_backward, setup_context=_iqn_head_setup, lib=_lib)


def _policy_losses_setup(ctx, inputs, output):
    ctx.save_for_backward(output[1], output[2])


def _policy_losses_backward(ctx, grad_stats, _grad_logits, _grad_values):
    """Only l_pi, entropy, l_distill (rows 0-2 of the saved logit gradients) and l_v (the value gradient) have one;
    the diagnostics in stats[4:] are constants."""
    g_logits, g_values = ctx.saved_tensors
    grad_logits = (grad_stats[:3].view(3, 1, 1) * g_logits).sum(0)
    return grad_logits, None, grad_stats[3] * g_values, *([None] * 9)


torch.library.register_autograd(
    "foxhunt::policy_losses", _policy_losses_backward, setup_context=_policy_losses_setup, lib=_lib
)

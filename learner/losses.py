"""The learner's losses, each a small pure function readable beside its equation (DESIGN.md, learner section).

The hot ones (C51 projection, IQN quantile Huber, dueling Bellman target and Huber, GAE) are custom ops in
learner.ops (CUDA kernels with pure-PyTorch references); the rest are a few lines of torch. The on-policy ones
take an optional bool row mask: the Learner computes them over all T*B rollout rows with the valid steps as
the mask, so every shape is fixed by (T, B) and one CUDA graph serves every rollout of that shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from learner import ops

__all__ = [
    "blend_alpha",
    "c51_cross_entropy",
    "c51_target",
    "distill_kl",
    "dueling_loss",
    "entropy",
    "gae",
    "iqn_loss",
    "masked_mean",
    "normalize_advantages",
    "ppo_clip_loss",
    "value_mse",
]


def c51_target(
    next_probs: torch.Tensor, reward: torch.Tensor, discount: torch.Tensor, v_min: float, v_max: float
) -> torch.Tensor:
    """Projection of r + discount*z onto the support, z ~ next_probs[B,Z] (target net at a*); no grad."""
    return ops.c51_project(next_probs.detach(), reward, discount, v_min, v_max)


def c51_cross_entropy(logits_taken: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """CE(target || softmax(logits)) = -sum_z m_z log p_z, mean over the batch. logits_taken: [B, Z].

    A scalar added to every atom's logit cancels in log_softmax, so it can never carry a state value V:
    the seed's Phase 2 no-op (tests/test_pearls.py proves it).
    """
    return -(target_probs * F.log_softmax(logits_taken, dim=-1)).sum(-1).mean()


def iqn_loss(theta: torch.Tensor, tau: torch.Tensor, target: torch.Tensor, kappa: float) -> torch.Tensor:
    """Quantile Huber: mean_b sum_i mean_j |tau_i - 1{u<0}| huber_k(u)/k, u_ij = target_j - theta_i."""
    return ops.iqn_quantile_huber_loss(theta, tau, target.detach(), kappa)


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of x over the rows where mask[R] (bool) is True, and over any trailing dims; the plain mean if None.

    torch.where, not x * weight: a weight of 0 on an inf or NaN row would still give NaN. Those rows get a
    zero gradient, but a backward through an op that went non-finite on them still multiplies 0 by inf: the
    inputs on masked-out rows must be finite and tame (the Learner neutralises its invalid rows). The row
    count stays a tensor, so no host sync and no data-dependent shape: a CUDA graph can capture it.
    """
    if mask is None:
        return x.mean()
    rows = mask.view(-1, *([1] * (x.ndim - 1)))
    per_row = x.numel() // mask.numel()
    n = mask.sum(dtype=x.dtype)  # exact: an integer count
    return torch.where(rows, x, 0.0).sum() / (n if per_row == 1 else n * per_row)


def normalize_advantages(adv: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(A - mean A) / (std A + 1e-8) over the rows in mask (population std); a single row is left as it is.

    One row has std 0: standardising it would zero its advantage, and with it the whole policy gradient.
    """
    mean = masked_mean(adv, mask)
    std = masked_mean((adv - mean).pow(2), mask).sqrt()
    count = mask.sum() if mask is not None else torch.full((), adv.numel(), device=adv.device)
    return torch.where(count > 1, (adv - mean) / (std + 1e-8), adv)


def ppo_clip_loss(
    logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate -mean(min(r A, clip(r, 1-eps, 1+eps) A)), r = pi/pi_behaviour.

    The ratio is against the behaviour log-prob the rollout actor recorded with its lagged policy copy.
    Returns (loss, approx_kl, clip_frac); the last two are diagnostics (no grad). Means over the rows in
    `mask` (every row if None); the other rows must still be finite (see masked_mean).
    """
    log_ratio = logp - behaviour_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)  # the k3 estimator: unbiased, always >= 0
        clip_frac = masked_mean(((ratio - 1.0).abs() > clip).to(ratio.dtype), mask)
    return -masked_mean(surrogate, mask), approx_kl, clip_frac


def entropy(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean entropy -sum_a p_a log p_a of softmax(logits[B, N]) over the rows in mask (every row if None)."""
    logp = F.log_softmax(logits, dim=-1)
    return -masked_mean((logp.exp() * logp).sum(-1), mask)


def distill_kl(
    q_ens: torch.Tensor, logits: torch.Tensor, temperature: float, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Q->pi distillation KL(softmax(q_ens/T) || pi), mean over the rows in mask; q_ens is detached here.

    Detaching keeps the policy from pulling the Q heads towards itself: Q teaches pi, never the reverse.
    """
    log_q = F.log_softmax(q_ens.detach() / temperature, dim=-1)
    log_pi = F.log_softmax(logits, dim=-1)
    return masked_mean((log_q.exp() * (log_q - log_pi)).sum(-1), mask)


def value_mse(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """V_scalar regression: mean (V(s) - R)^2 against the GAE returns, over the rows in mask."""
    return masked_mean((values - returns.detach()).pow(2), mask)


def dueling_loss(
    q: torch.Tensor,
    action: torch.Tensor,
    q_online_next: torch.Tensor,
    q_target_next: torch.Tensor,
    reward: torch.Tensor,
    discount: torch.Tensor,
    kappa: float,
) -> torch.Tensor:
    """Double-DQN Huber Bellman loss of the dueling head.

    y = r + discount * Q_tgt(s', argmax_a Q_online(s', a)); loss = mean huber_k(Q(s, a) - y).
    """
    y = ops.dueling_bellman_target(q_online_next.detach(), q_target_next.detach(), reward, discount)
    return ops.dueling_huber_loss(q, action, y, kappa)


def blend_alpha(step: int, start: int, end: int) -> float:
    """Phase 3.2c's alpha in V_used = alpha*V_scalar + (1-alpha)*V_IQN: 1 at steps <= start, 0 at steps >= end,
    linear between. With alpha = 1 the baseline is V_scalar exactly, yet the seed's 3.2c run still collapsed:
    the smoking gun that the breakage was Phase 3.1's, not the baseline's."""
    if step <= start:
        return 1.0
    if step >= end:
        return 0.0
    return (end - step) / (end - start)


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_end: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over a time-major [T, B] rollout: (advantages, returns = advantages + values); no grad.

    delta_t = r_t + gamma (1 - terminated_t) V(s_{t+1}) - V(s_t): truncation still bootstraps from the true
    next observation; A_t = delta_t + gamma lam (1 - episode_end_t) A_{t+1}.
    """
    return ops.gae(
        rewards.to(values.dtype),
        values.detach(),
        next_values.detach(),
        terminated.bool(),
        episode_end.bool(),
        gamma,
        lam,
    )

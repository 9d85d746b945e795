"""The learner's losses, each a small pure function readable beside its equation (DESIGN.md, learner section).

The hot ones (C51 projection, IQN quantile Huber, dueling Bellman target and Huber, GAE) are custom ops in
learner.ops (CUDA kernels with pure-PyTorch references); the rest are a few lines of torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from learner import ops

__all__ = [
    "c51_cross_entropy",
    "c51_target",
    "distill_kl",
    "dueling_loss",
    "entropy",
    "gae",
    "iqn_loss",
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


def ppo_clip_loss(
    logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor, clip: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """PPO clipped surrogate -mean(min(r A, clip(r, 1-eps, 1+eps) A)), r = pi/pi_behaviour.

    The ratio is against the behaviour log-prob the rollout actor recorded with its lagged policy copy.
    Returns (loss, approx_kl, clip_frac); the last two are diagnostics (no grad).
    """
    log_ratio = logp - behaviour_logp
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * advantages, ratio.clamp(1.0 - clip, 1.0 + clip) * advantages)
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()  # the k3 estimator: unbiased, always >= 0
        clip_frac = ((ratio - 1.0).abs() > clip).float().mean()
    return -surrogate.mean(), approx_kl, clip_frac


def entropy(logits: torch.Tensor) -> torch.Tensor:
    """Mean entropy of softmax(logits[B, N]) over the batch."""
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1).mean()


def distill_kl(q_ens: torch.Tensor, logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Q->pi distillation KL(softmax(q_ens/T) || pi), mean over the batch; q_ens is detached here.

    Detaching keeps the policy from pulling the Q heads towards itself: Q teaches pi, never the reverse.
    """
    log_q = F.log_softmax(q_ens.detach() / temperature, dim=-1)
    log_pi = F.log_softmax(logits, dim=-1)
    return (log_q.exp() * (log_q - log_pi)).sum(-1).mean()


def value_mse(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """V_scalar regression: mean (V(s) - R)^2 against the GAE returns."""
    return (values - returns.detach()).pow(2).mean()


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

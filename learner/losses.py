"""The learner's losses, each a small pure function readable beside its equation (docs/design.md, "The learner").

The hot ones (C51 projection, IQN quantile Huber, dueling Bellman target and Huber, GAE) are custom ops in
learner.ops (CUDA kernels with pure-PyTorch references); the rest are a few lines of torch. The on-policy losses
(masked_mean, normalize_advantages, ppo_clip_loss, entropy, distill_kl, value_mse) live in learner.ops.reference
beside policy_losses (learner.ops), which computes all of them from one call; both are re-exported here. The
on-policy ones take an optional bool row mask: the Learner computes them over all T*B rollout rows with the valid
steps as the mask, so every shape is fixed by (T, B) and one CUDA graph serves every rollout of that shape.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from learner import ops
from learner.ops import policy_losses  # the on-policy losses and their diagnostics from one call (PolicyLosses)
from learner.ops.reference import (
    distill_kl,
    entropy,
    masked_mean,
    normalize_advantages,
    ppo_clip_loss,
    value_mse,
)

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
    "policy_losses",
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

"""Diagnostic keys of Learner.update's dict, and qpa (q_pi_agree), the seed's most sensitive health signal.

Keys are flat strings (they become diag.jsonl fields and Ray gauge names as they are). Every value is a
finite float when the step is healthy; a skipped non-finite step reports NAN_ABORT_STEP = its step.
"""

from __future__ import annotations

import torch

STEP = "step"
L_C51 = "l_c51"
L_IQN = "l_iqn"
L_PI = "l_pi"
L_V = "l_v"
L_DISTILL = "l_distill"
L_DUELING = "l_dueling"
QPA = "qpa"
ENTROPY = "entropy"
APPROX_KL = "approx_kl"
CLIP_FRAC = "clip_frac"
V_DQ_MEAN = "v_dq_mean"
V_SCALAR_MEAN = "v_scalar_mean"
Q_ENS_MEAN = "q_ens_mean"
ADV_MEAN = "adv_mean"
NAN_ABORT_STEP = "nan_abort_step"
POLICY_LAG = "policy_lag"
REPLAY_SIZE = "replay_size"
TRANSITIONS = "transitions"
Q_TRAINED = "q_trained"
LR_SCALE = "lr_scale"
"""The factor on lr and dueling_lr at this step (1 unless learner.lr_decay_to < 1: Learner.set_progress)."""
GRAD_NORM_PREFIX = "grad_norm/"
"""grad_norm/<group> for encoder, c51, iqn, pi, v, dueling (before clipping), and grad_norm/total."""

LOSS_KEYS: tuple[str, ...] = (L_C51, L_IQN, L_PI, L_V, L_DISTILL, L_DUELING)


def grad_norm_key(group: str) -> str:
    return GRAD_NORM_PREFIX + group


def qpa(q: torch.Tensor, log_pi: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Batch mean of qpa_rows: see there."""
    return qpa_rows(q, log_pi, eps).mean()


def qpa_rows(q: torch.Tensor, log_pi: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Per state [B]: the Pearson correlation across actions of q(s, .) and log pi(. | s); q, log_pi: [B, N].

    A state whose q or log pi has no spread across actions has no defined correlation and counts 0, so a
    uniform policy reads as 'no agreement', never as NaN. Near -1 means pi ranks actions against Q: the
    collapse that killed every Phase 3 run.
    """
    if q.shape != log_pi.shape or q.ndim != 2:
        raise ValueError(
            f"qpa needs q and log_pi of one shape [B, N], got {tuple(q.shape)} and {tuple(log_pi.shape)}"
        )
    qc = q - q.mean(-1, keepdim=True)
    pc = log_pi - log_pi.mean(-1, keepdim=True)
    sq = qc.pow(2).sum(-1)
    sp = pc.pow(2).sum(-1)
    flat = (sq <= eps * (1 + q.pow(2).sum(-1))) | (sp <= eps * (1 + log_pi.pow(2).sum(-1)))
    r = (qc * pc).sum(-1) / (sq * sp).clamp_min(1e-30).sqrt()
    return torch.where(flat, torch.zeros_like(r), r.clamp(-1.0, 1.0))

"""Synthetic rollouts for timing and checking the learner: the input of benchmarks/gpu_check.py's learner and
update stages and of the CUDA learner tests (tests/test_learner_cuda.py)."""

from __future__ import annotations

import torch


def torch_rollout(t_len: int, b: int, obs_dim: int, n_actions: int, seed: int, autoreset: bool = False) -> dict:
    """A time-major rollout (learner.replay's format) of torch tensors from its own generator (CPU). With
    autoreset, about 5 % of the steps after the first are autoreset steps (not transitions)."""
    g = torch.Generator().manual_seed(seed)
    valid = torch.ones(t_len, b, dtype=torch.bool)
    if autoreset:
        valid[1:] = torch.rand(t_len - 1, b, generator=g) > 0.05
    return {
        "obs": torch.randn(t_len + 1, b, obs_dim, generator=g),
        "actions": torch.randint(0, n_actions, (t_len, b), generator=g),
        "rewards": torch.randn(t_len, b, generator=g),
        "terminated": torch.rand(t_len, b, generator=g) < 0.02,
        "truncated": torch.rand(t_len, b, generator=g) < 0.02,
        "behaviour_logp": -torch.rand(t_len, b, generator=g) * 2.2,
        "valid": valid,
        "policy_version": 0,
    }

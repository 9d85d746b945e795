"""Small random numpy rollouts and the smoke learner config shared by the learner's test files. The torch rollouts
of the CUDA learner tests are benchmarks/rollouts.py's, which benchmarks/gpu_check.py times the learner on."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from foxhunt_ray.presets import preset

OBS, N = 5, 7


def smoke_cfg(**kw):
    """The smoke preset with a replay that starts training at once."""
    return dataclasses.replace(preset("smoke"), **{"q_batch_size": 16, "replay_min_size": 16, **kw})


def random_rollout(rng, t_len=6, b=4, version=0, end_p=0.15, logp_noise=0.0, *, obs_dim=OBS, n_actions=N):
    """A time-major rollout (learner.replay's format) with episode ends at rate end_p and the NEXT_STEP
    autoreset steps after them marked invalid; behaviour log-probs around uniform (-log N), plus noise."""
    ends = rng.random((t_len, b)) < end_p
    valid = np.ones((t_len, b), bool)
    valid[1:] = ~ends[:-1]  # autoreset steps after an episode end are not transitions
    batch = {
        "obs": rng.standard_normal((t_len + 1, b, obs_dim)).astype(np.float32),
        "actions": rng.integers(0, n_actions, (t_len, b)),
        "rewards": rng.standard_normal((t_len, b)).astype(np.float32),
        "terminated": ends & valid,
        "truncated": np.zeros((t_len, b), bool),
        "behaviour_logp": np.full((t_len, b), -math.log(n_actions), np.float32),
        "valid": valid,
        "policy_version": version,
    }
    if logp_noise:
        batch["behaviour_logp"] += (logp_noise * rng.standard_normal((t_len, b))).astype(np.float32)
    return batch


"""The learner on a CUDA device (skipped without one): TF32 matmuls against full float32.

`learner.matmul_precision="high"` lets cuBLAS round matmul inputs to TF32 (10-bit mantissa). That is allowed only
where what the learner reports and what the monitor's kill rules read stay close to float32: the tolerances
below are the stated ones (LearnerConfig.matmul_precision, BENCHMARKS.md). Both learners start from the same seed
and see the same rollouts, so the first update compares the same parameters; later updates compare trajectories
that drift apart by rounding alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import numpy as np
import pytest
import torch

from foxhunt_ray.presets import preset
from learner import diag as D
from learner.learner import Learner

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

OBS, N_ACTIONS, T_LEN, B = 64, 9, 8, 256
UPDATES = 40
LOSSES = (D.L_C51, D.L_IQN, D.L_PI, D.L_V, D.L_DISTILL, D.L_DUELING)
FIRST_STEP_REL = 1e-2
"""First update (same parameters): every loss and grad norm within 1 % of float32's."""
TRAJECTORY_REL = 5e-2
"""Every update of the 40: every loss within 5 % of float32's (the parameters have drifted by rounding)."""
QPA_ABS = 0.02
"""qpa (the kill rule's input, in [-1, 1]) within 0.02 of float32's at every update."""


def _batches(n: int) -> list[dict]:
    rng = np.random.default_rng(7)
    out = []
    for version in range(n):
        ends = rng.random((T_LEN, B)) < 0.02
        valid = np.ones((T_LEN, B), bool)
        valid[1:] = ~ends[:-1]
        out.append(
            {
                "obs": rng.standard_normal((T_LEN + 1, B, OBS)).astype(np.float32),
                "actions": rng.integers(0, N_ACTIONS, (T_LEN, B)),
                "rewards": rng.standard_normal((T_LEN, B)).astype(np.float32),
                "terminated": ends & valid,
                "truncated": np.zeros((T_LEN, B), bool),
                "behaviour_logp": np.full((T_LEN, B), -math.log(N_ACTIONS), np.float32),
                "valid": valid,
                "policy_version": version,
            }
        )
    return out


def _run(precision: str, batches: list[dict]) -> list[dict[str, float]]:
    cfg = dataclasses.replace(preset("phase4_3"), matmul_precision=precision, replay_min_size=T_LEN * B // 2)
    lrn = Learner(cfg, obs_dim=OBS, n_actions=N_ACTIONS, device="cuda", seed=0)
    return [lrn.update(b) for b in batches]


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-6)


def test_tf32_matmuls_keep_losses_and_qpa_within_the_stated_tolerances():
    before = torch.get_float32_matmul_precision()
    batches = _batches(UPDATES)
    full = _run("highest", batches)
    tf32 = _run("high", batches)
    assert torch.get_float32_matmul_precision() == before, "the learner must put the process-wide flag back"
    assert all(d[D.Q_TRAINED] == 1.0 for d in full), "the Q losses must be on from the first update"
    grad_keys = [k for k in full[0] if k.startswith(D.grad_norm_key(""))]
    first = {k: _rel(tf32[0][k], full[0][k]) for k in (*LOSSES, *grad_keys) if full[0][k] != 0.0}
    worst = {k: max(_rel(t[k], f[k]) for t, f in zip(tf32, full, strict=True) if f[k] != 0.0) for k in LOSSES}
    qpa = max(abs(t[D.QPA] - f[D.QPA]) for t, f in zip(tf32, full, strict=True))
    report = {"first_step_rel": first, "trajectory_rel": worst, "qpa_abs": qpa}
    if os.environ.get("FOXHUNT_TF32_REPORT"):
        with open(os.environ["FOXHUNT_TF32_REPORT"], "w") as f:
            json.dump(report, f, indent=1)
    print(json.dumps(report, indent=1))
    assert all(math.isfinite(v) for d in tf32 for v in d.values())
    assert max(first.values()) <= FIRST_STEP_REL, first
    assert max(worst.values()) <= TRAJECTORY_REL, worst
    assert qpa <= QPA_ABS, qpa

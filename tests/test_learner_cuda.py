"""The learner on a CUDA device (skipped without one): the captured CUDA graph against the eager CUDA learner,
minibatch steps against one update each, and TF32 matmuls against full float32.

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

from benchmarks.rollouts import torch_rollout
from foxhunt_ray.presets import preset
from learner import diag as D
from learner.config import FaultInjection
from learner.learner import Learner
from tests.learner_batches import random_rollout

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

OBS, N_ACTIONS, T_LEN, B = 64, 9, 8, 256
UPDATES = 40
COMPARED_AT = (0, 19, 39)
"""Updates at which a TF32 learner loaded with the float32 learner's state makes the same update beside it."""
LOSSES = (D.L_C51, D.L_IQN, D.L_PI, D.L_V, D.L_DISTILL, D.L_DUELING)
LOSS_REL = 1e-2
"""Every loss of one update within 1 % of float32's (relative to max(|float32 value|, 0.01): l_pi of
standardised advantages sits near 0). Measured on the H200 (2026-12-03): at most 1.2e-3 (l_dueling)."""
GRAD_NORM_REL = 5e-2
"""Every grad norm (reported, not read by a kill rule) within 5 %. Measured: at most 1.35e-2 (the dueling head's,
after 40 updates)."""
QPA_ABS = 1e-2
"""qpa (the kill rule's input, in [-1, 1], killed below an EMA of -0.3) within 0.01 of float32's. Measured: at
most 1.9e-4."""


def _obs_stats(obs_dim: int) -> dict[str, np.ndarray]:
    """Observation statistics for the learners of the presets' `learn` settings (learner.obs_norm 'probe'): not the
    identity, so that the standardisation's op runs on real numbers in the captured graph and in eager."""
    return {"obs_mean": np.linspace(-0.5, 0.5, obs_dim), "obs_std": np.linspace(0.5, 2.0, obs_dim)}


def _batches(n: int) -> list[dict]:
    rng = np.random.default_rng(7)
    return [random_rollout(rng, T_LEN, B, v, end_p=0.02, obs_dim=OBS, n_actions=N_ACTIONS) for v in range(n)]


def _learner(precision: str) -> Learner:
    cfg = dataclasses.replace(preset("phase4_3"), matmul_precision=precision, replay_min_size=T_LEN * B // 2)
    return Learner(cfg, obs_dim=OBS, n_actions=N_ACTIONS, device="cuda", seed=0, **_obs_stats(OBS))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-2)


def test_tf32_matmuls_keep_losses_and_qpa_within_the_stated_tolerances():
    """One update from the same state (parameters, Adam, replay, RNG streams) in both precisions, at the start
    and after 20 and 40 float32 updates: the per-update error TF32 adds. (Trajectories are not compared: at
    lr 3e-3 two float32 runs that differ in one rounding drift apart just as far.)"""
    before = torch.get_float32_matmul_precision()
    full, tf32 = _learner("highest"), _learner("high")
    rows = []
    for i, batch in enumerate(_batches(UPDATES)):
        if i in COMPARED_AT:
            tf32.load_state_dict(full.state_dict())
            got = tf32.update(batch)
            want = full.update(batch)
            assert want[D.Q_TRAINED] == 1.0 and got[D.STEP] == want[D.STEP]
            keys = [*LOSSES, *(k for k in want if k.startswith(D.grad_norm_key("")))]
            rows.append(
                {
                    "update": i + 1,
                    "rel": {k: _rel(got[k], want[k]) for k in keys},
                    "qpa_abs": abs(got[D.QPA] - want[D.QPA]),
                    "qpa": want[D.QPA],
                }
            )
            assert all(math.isfinite(v) for v in got.values())
        else:
            full.update(batch)
    assert torch.get_float32_matmul_precision() == before, "the learner must put the process-wide flag back"
    if os.environ.get("FOXHUNT_TF32_REPORT"):
        with open(os.environ["FOXHUNT_TF32_REPORT"], "w") as f:
            json.dump(rows, f, indent=1)
    print(json.dumps(rows, indent=1))
    for row in rows:
        assert max(row["rel"][k] for k in LOSSES) <= LOSS_REL, row
        assert max(v for k, v in row["rel"].items() if k not in LOSSES) <= GRAD_NORM_REL, row
        assert row["qpa_abs"] <= QPA_ABS, row


# ------------------------------------------------------------------------------------ graph against eager

GRAPH_CASES = {
    # the two production paths, then the seed's ablations (their switches change what the graph captures);
    # phase3_2c blends over updates 2..6 so alpha moves inside the captured graph
    "phase4_3": ("phase4_3", None, {}),
    "plan_a_v2+nan@4": ("plan_a_v2", 4, {}),
    "phase2_v2": ("phase2_v2", None, {}),
    "phase3_1_fix": ("phase3_1_fix", None, {}),
    "phase3_2c": ("phase3_2c", None, {"alpha_start_step": 2, "alpha_end_step": 6}),
    # the learning rate falls from update to update: the captured Adam step reads it from a device tensor
    "phase4_3+lr_decay": ("phase4_3", None, {"lr_decay_to": 0.1}),
}
GRAPH_PARAM_REL = 1e-3
"""Parameters and targets of the graph learner within this of the eager one's, relative to the largest. Measured on
the H200: 0.0 to 1.2e-7 (BENCHMARKS.md, "The kernels against their references")."""
GRAPH_DIAG_REL = 2e-2
"""Every diag value within 2 % (relative to max(|eager|, 1e-3)): an occasional argmax tie flips qpa's vote."""


@pytest.mark.parametrize("name", list(GRAPH_CASES))
def test_the_captured_graph_learns_what_the_eager_cuda_learner_learns(name):
    """cuda_graph=True against cuda_graph=False, both on the CUDA kernels, same seed and rollouts (8 x 128): they
    draw the same replay indices and taus and differ only in the reduction order of the masked on-policy means.
    One capture serves every update, and an injected NaN step is skipped by both with the parameters kept."""
    preset_name, inject, extra = GRAPH_CASES[name]
    obs_dim, n_actions = 64, 9
    base = dataclasses.replace(preset(preset_name), q_batch_size=1024, replay_min_size=1024, **extra)
    faults = FaultInjection(inject_nan_at=inject)
    graph, eager = (
        Learner(
            dataclasses.replace(base, cuda_graph=g),
            obs_dim=obs_dim,
            n_actions=n_actions,
            device="cuda",
            faults=faults,
            **_obs_stats(obs_dim),
        )
        for g in (True, False)
    )
    worst: dict[str, float] = {}
    for s in range(8):
        batch = torch_rollout(8, 128, obs_dim, n_actions, seed=100 + s, autoreset=True)
        for lrn in (graph, eager):
            lrn.set_progress(s / 7)  # a no-op unless lr_decay_to < 1
        got, want = graph.update(batch), eager.update(batch)
        for k in want:
            if math.isnan(got[k]) and math.isnan(want[k]):  # both report the skipped step's NaN
                continue
            err = abs(got[k] - want[k]) / max(abs(want[k]), 1e-3)
            worst[k] = max(worst.get(k, 0.0), err if math.isfinite(err) else math.inf)
    assert graph.graph is not None and graph.graph.captures == 1
    assert graph.nan_abort_step == eager.nan_abort_step == (inject or 0)
    _assert_learned_alike(graph, eager, worst)


def _assert_learned_alike(got: Learner, want: Learner, worst: dict[str, float]) -> None:
    """Parameters and targets within GRAPH_PARAM_REL, every diag's worst relative error within GRAPH_DIAG_REL."""
    for part in ("main", "dueling"):
        a, b = getattr(got, part), getattr(want, part)
        if b is None:
            continue
        for what in ("flat", "target_flat"):
            x, y = getattr(a, what).detach(), getattr(b, what).detach()
            assert ((x - y).abs().max() / y.abs().max()).item() < GRAPH_PARAM_REL, (part, what)
    bad = {k: v for k, v in worst.items() if k != D.NAN_ABORT_STEP and not v < GRAPH_DIAG_REL}
    assert not bad, bad


@pytest.mark.parametrize("preset_name", ["phase4_3", "plan_a_v2"])
def test_the_guard_as_one_op_learns_what_the_guard_as_torch_ops_learns(preset_name):
    """The device guard as ops.guarded_adam_ (the default on the kernels) against its composition of torch ops
    (snapshot, clip_grad_norm_, torch's fused Adam, soft update, torch.where), eager, same seed and rollouts, an
    injected NaN at update 4: both skip it, and parameters, targets and every diag agree up to float32 rounding."""
    obs_dim, n_actions = 64, 9
    cfg = dataclasses.replace(preset(preset_name), q_batch_size=1024, replay_min_size=1024, cuda_graph=False)
    fused, composed = (
        Learner(
            dataclasses.replace(cfg, nan_guard=guard),
            obs_dim=obs_dim,
            n_actions=n_actions,
            device="cuda",
            faults=FaultInjection(inject_nan_at=4),
            **_obs_stats(obs_dim),
        )
        for guard in ("fused", "composed")
    )
    worst: dict[str, float] = {}
    for s in range(8):
        batch = torch_rollout(8, 128, obs_dim, n_actions, seed=200 + s, autoreset=True)
        got, want = fused.update(batch), composed.update(batch)
        for k in want:
            if math.isnan(got[k]) and math.isnan(want[k]):
                continue
            err = abs(got[k] - want[k]) / max(abs(want[k]), 1e-3)
            worst[k] = max(worst.get(k, 0.0), err if math.isfinite(err) else math.inf)
    assert fused.nan_abort_step == composed.nan_abort_step == 4
    for a, b in zip(fused.optim.parts, composed.optim.parts, strict=True):
        assert a.opt.state[a.flat]["step"].item() == b.opt.state[b.flat]["step"].item() == 7  # the NaN one not counted
    _assert_learned_alike(fused, composed, worst)


def test_minibatch_steps_in_one_call_match_one_update_per_minibatch():
    """Learner.updates with learner.minibatch_envs = 128 (the learner worker's path: one copy, the n-step returns of
    the whole rollout, the replay write on the GPU, one captured update per minibatch, one sync) against update()
    on each minibatch in turn, same seed, 4 rollouts of 16 x 512: every diag and every parameter equal up to
    float32 rounding. Measured on the H200: parameters 4.1e-6, diag 1.9e-5 (BENCHMARKS.md)."""
    m, t_len, b, payloads = 128, 16, 512, 4
    cfg = dataclasses.replace(preset("phase4_3"), minibatch_envs=m, replay_min_size=1024)
    stats = _obs_stats(32)
    split, one_by_one = (Learner(cfg, obs_dim=32, n_actions=7, device="cuda", seed=0, **stats) for _ in range(2))
    worst = 0.0
    for i in range(payloads):
        batch = torch_rollout(t_len, b, 32, 7, seed=i, autoreset=True)
        batch = {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in batch.items()}
        got = split.updates(batch)
        want = [
            one_by_one.update({k: (v[:, c : c + m] if isinstance(v, np.ndarray) else v) for k, v in batch.items()})
            for c in range(0, b, m)
        ]
        for x, y in zip(got, want, strict=True):
            worst = max([worst, *(abs(x[k] - y[k]) / max(1e-6, abs(y[k])) for k in y)])
    rel = ((split.main.flat - one_by_one.main.flat).norm() / one_by_one.main.flat.norm()).item()
    assert split.step == one_by_one.step == payloads * b // m
    assert rel < 1e-4 and worst < 1e-3, (rel, worst)


def test_the_learner_workers_pipelined_calls_return_what_waiting_calls_do():
    """LearnerWorker.train(wait=False), the Ray learner's call (each call returns the diags of all but its newest
    payload, read from pinned copies that the call waits for by event, never by a read queued behind the newest
    payload's steps), against train(wait=True) on twin workers fed the same payloads: the same steps in the same
    order, every diag of the updates within float32 rounding (call_payloads: the size of each call), the newest
    payload's diags from drain(), and the same parameters."""
    from actors.config import RolloutConfig
    from actors.learner_worker import LearnerWorker
    from actors.rollout import RolloutWorker
    from lobsim_env import MarketConfig

    cfg = dataclasses.replace(preset("phase4_3"), minibatch_envs=64, replay_min_size=512)
    roll = RolloutWorker(RolloutConfig(num_envs=256, steps_per_sample=8), MarketConfig(horizon=50), worker_index=0,
                         seed=0)
    stats = _obs_stats(roll.obs_dim)
    twins = [
        LearnerWorker(cfg, obs_dim=roll.obs_dim, n_actions=roll.n_actions, device="cuda", **stats) for _ in range(2)
    ]
    roll.set_weights(twins[0].policy_weights())
    payloads = [roll.sample() for _ in range(5)]
    roll.stop()
    waited = [d for p in payloads for d in twins[0].train([p], wait=True)]
    piped = twins[1].train(payloads[:1], wait=False)
    assert piped == []  # the newest payload's steps are left running: their diags come later
    piped += twins[1].train(payloads[1:3], wait=False)
    assert [d["step"] for d in piped] == list(range(1, 9))  # 3 payloads of 4 steps, the newest still out
    piped += twins[1].train(payloads[3:], wait=False) + twins[1].drain()
    assert [d["step"] for d in piped] == [d["step"] for d in waited] == list(range(1, 21))
    # call_payloads is the size of the call a step's payload came in, not a figure of the update: calls of 1, 2, 2
    assert [d["call_payloads"] for d in waited] == [1] * 20
    assert [d["call_payloads"] for d in piped] == [1] * 4 + [2] * 8 + [2] * 8
    for x, y in zip(piped, waited, strict=True):
        assert x.keys() == y.keys()
        bad = {k: (x[k], y[k]) for k in y if k != "call_payloads" and abs(x[k] - y[k]) > 1e-4 * max(1.0, abs(y[k]))}
        assert not bad, (y["step"], bad)
    a, b = (w.learner.main.flat for w in twins)
    assert ((a - b).norm() / b.norm()).item() < 1e-4

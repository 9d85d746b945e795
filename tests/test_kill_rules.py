"""The qpa rule's bound (issue 13, item 4): qpa_ema + qpa_noise_z x qpa_noise against the seed's -0.3.

The series imitate what BENCHMARKS.md, 'Other Gymnasium envs: CartPole-v1', measured: a learning CartPole run whose
qpa drifts to about -0.34 for a hundred updates with a per-update noise of ~0.15 (two actions: each state
counts +-1), and the market's collapses, deep (-0.6..-0.96) with a per-update noise of ~0.005.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from actors.kill_rules import RULE_QPA, KillConfig, KillRules


def healthy_two_action_series(seed: int, n: int = 1000) -> np.ndarray:
    """qpa of a learning two-action run: a slow drift that dips to -0.42 around update 550 (qpa_ema to
    -0.31..-0.37), plus AR(1) noise of sd ~0.2 (lag-1 correlation 0.5, as measured) around it."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    drift = -0.1 - 0.32 * np.exp(-(((t - 550) / 120.0) ** 2))
    drift[: min(n, 100)] = np.linspace(0.6, -0.1, 100)[:n]  # the initial weights' +-1 start, forgotten
    noise = np.zeros(n)
    for i in range(1, n):
        noise[i] = 0.5 * noise[i - 1] + 0.17 * rng.standard_normal()
    return np.clip(drift + noise, -1.0, 1.0)


def collapsing_series(seed: int, n: int = 1000, at: int = 500, noise: float = 0.01) -> np.ndarray:
    """A healthy +0.9 that collapses to the seed's -0.93 at update `at`."""
    rng = np.random.default_rng(seed)
    q = np.where(np.arange(n) < at, 0.9, -0.93) + noise * rng.standard_normal(n)
    return np.clip(q, -1.0, 1.0)


def first_kill(series, cfg: KillConfig | None = None):
    rules = KillRules(cfg or KillConfig())
    for step, q in enumerate(series, 1):
        if (d := rules.check({"step": step, "qpa": float(q)})) is not None:
            return d
    return None


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_healthy_series_near_the_line_is_not_killed(seed):
    q = healthy_two_action_series(seed)
    rules, lowest = KillRules(KillConfig()), math.inf
    for step, x in enumerate(q, 1):
        rules.check(rec := {"step": step, "qpa": float(x)})
        if step > 200:
            lowest = min(lowest, rec["qpa_ema"])
            assert rec["qpa_ema"] + 2 * rec["qpa_noise"] > -0.2  # the bound keeps a margin of 0.1
    assert lowest < -0.3  # the point estimate crosses the line ...
    assert first_kill(q, KillConfig(qpa_noise_z=0.0)) is not None  # ... so the seed's point-estimate rule kills
    assert first_kill(q) is None  # the bound does not


@pytest.mark.parametrize(("noise", "delay"), [(0.005, 3), (0.15, 60)])
def test_a_collapsing_series_is_killed(noise, delay):
    q = collapsing_series(0, noise=noise)
    d = first_kill(q)
    point = first_kill(q, KillConfig(qpa_noise_z=0.0))
    assert d is not None and d.rule == RULE_QPA and d.values["threshold"] == -0.3
    assert 500 < point.step <= d.step <= point.step + delay  # little later than the point estimate
    assert d.values["qpa_ema_bound"] == pytest.approx(d.values["qpa_ema"] + 2.0 * d.values["qpa_noise"])
    assert d.values["qpa_ema_bound"] < -0.3


def test_two_action_collapse_is_killed():
    # 256 states, each +1 when pi and Q agree on the better of two actions, else -1: 5 % agree
    rng = np.random.default_rng(1)
    q = [0.6] * 300 + [float(np.where(rng.random(256) < 0.05, 1.0, -1.0).mean()) for _ in range(700)]
    d = first_kill(q)
    assert d is not None and d.step < 300 + 150


def test_noise_is_the_mean_absolute_successive_difference_and_is_recorded():
    rules = KillRules(KillConfig(qpa_ema_decay=0.5))
    recs = [{"step": s, "qpa": q} for s, q in enumerate([0.2, 0.6, 0.2], 1)]
    for r in recs:
        rules.check(r)
    assert recs[0]["qpa_noise"] == 0.0
    k = math.sqrt(math.pi) / 2
    assert recs[1]["qpa_noise"] == pytest.approx(k * 0.5 * 0.4)  # (1 - d) * |0.6 - 0.2|
    assert recs[2]["qpa_noise"] == pytest.approx(k * (0.5 * 0.5 * 0.4 + 0.5 * 0.4))


def test_restore_continues_the_noise_exactly():
    q = healthy_two_action_series(3, n=60)
    whole, first = KillRules(KillConfig()), KillRules(KillConfig())
    recs = [{"step": s, "qpa": float(x)} for s, x in enumerate(q, 1)]
    for r in recs:
        whole.check(dict(r))
    done = [dict(r) for r in recs[:40]]
    for r in done:
        first.check(r)
    resumed = KillRules(KillConfig())
    resumed.restore(done)
    for r in recs[40:]:
        resumed.check(dict(r))
    assert resumed.qpa_ema == pytest.approx(whole.qpa_ema, abs=1e-12)
    assert resumed.qpa_noise == pytest.approx(whole.qpa_noise, abs=1e-12)


def test_noise_z_is_validated():
    assert KillConfig(qpa_noise_z=-1.0).errors() == ["kill.qpa_noise_z=-1.0 must be >= 0"]
    assert KillConfig(qpa_noise_z=math.inf).errors() == ["kill.qpa_noise_z=inf must be a finite number"]

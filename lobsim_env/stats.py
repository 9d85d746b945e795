"""Intervals and tests for PnL figures: the agent against a baseline on the same windows (docs/evaluation.md).

Every policy of an evaluation plays the same windows (book i seeded seed + i), so the agent's PnL and a baseline's
are paired window by window: the difference d_i = agent_i - baseline_i takes out the windows' common luck.

- `paired(agent, baseline)`: the mean of d, its 95 % percentile bootstrap interval (resampling windows, a seeded
  generator, 10,000 resamples) and the two-sided p-value of a sign-flip test of mean(d) = 0 (each d_i's sign
  flipped at random: the exact null for paired differences symmetric about 0), with 10,000 flips.
- `paired_seeds(agent[S, P, W], baseline[P, W])`: the same for a walk-forward fold (foxhunt_ray.walkforward): S seeds
  (runs) of the agent, P test periods (days, or blocks of one), W windows a period, the baseline's windows the
  same. The figure is the mean over periods of each period's mean over seeds and windows (PnL aggregated per day);
  its interval resamples both the seeds and each period's windows (a two-level bootstrap: the seed-to-seed spread
  is in it, not only the windows' luck). Its p-value comes from the same resamples, shifted to a zero mean: the
  share of them at least as far from the figure as the figure is from 0 (two-sided), so it agrees with the interval
  (p < 0.05 where the interval leaves out 0, up to the resampling's asymmetry). A sign-flip test of the windows'
  seed-mean differences would not: it holds the S trained runs fixed, and with hundreds of windows it called gaps
  of p 0.001 whose interval spanned 0 by 30 USD.
- `holm(p_values)`: Holm's step-down adjustment over several folds (a family-wise 5 % where each p is one fold's).
The windows of one held-out day are not independent days: an interval over them is that day's, not one over days
(the walk-forward protocol aggregates per day where there are several).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000


@dataclass(frozen=True, kw_only=True)
class Paired:
    """The agent minus a baseline on the same windows."""

    mean: float
    ci95: tuple[float, float]
    p_value: float
    windows: int

    def to_json(self) -> dict:
        return {"mean_usd": self.mean, "ci95_usd": list(self.ci95), "p_value": self.p_value, "windows": self.windows}


def paired(agent: np.ndarray, baseline: np.ndarray, *, seed: int = 0, resamples: int = RESAMPLES) -> Paired:
    """mean(agent - baseline), its 95 % bootstrap interval and a sign-flip test's two-sided p-value."""
    a, b = np.asarray(agent, np.float64), np.asarray(baseline, np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size < 2:
        raise ValueError(f"paired: two 1-D arrays of one length >= 2 (one value a window), got {a.shape} and {b.shape}")
    d = a - b
    rng = np.random.default_rng(seed)
    means = d[rng.integers(0, d.size, (resamples, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    flips = rng.choice((-1.0, 1.0), (resamples, d.size))
    null = np.abs((flips * d).mean(axis=1))
    p = (1 + int((null >= abs(d.mean()) - 1e-12).sum())) / (resamples + 1)
    return Paired(mean=float(d.mean()), ci95=(float(lo), float(hi)), p_value=p, windows=int(d.size))


def paired_seeds(
    agent: np.ndarray, baseline: np.ndarray, *, seed: int = 0, resamples: int = RESAMPLES, chunk: int = 500
) -> Paired:
    """The agent's S runs against a baseline on the same P x W windows (see the module's docstring); `windows` of
    the result is P * W."""
    a, b = np.asarray(agent, np.float64), np.asarray(baseline, np.float64)
    if a.ndim != 3 or b.shape != a.shape[1:] or a.shape[0] < 1 or a.shape[2] < 2:
        raise ValueError(
            f"paired_seeds: agent [seeds, periods, windows] and baseline [periods, windows] with windows >= 2, got "
            f"{a.shape} and {b.shape}"
        )
    S, P, W = a.shape
    d = a.mean(axis=0) - b  # [P, W]: each window's seed-mean difference
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    for lo in range(0, resamples, chunk):
        n = min(chunk, resamples - lo)
        weights = np.zeros((n, S))  # seeds drawn with replacement: each seed's share of the draw
        np.add.at(weights, (np.arange(n)[:, None], rng.integers(0, S, (n, S))), 1.0 / S)
        seed_mean = np.einsum("rs,spw->rpw", weights, a)  # [n, P, W]
        w = rng.integers(0, W, (n, P, W))  # each period's windows drawn with replacement
        gap = np.take_along_axis(seed_mean, w, axis=2) - np.take_along_axis(np.broadcast_to(b, (n, P, W)), w, axis=2)
        means[lo : lo + n] = gap.mean(axis=(1, 2))
    lo95, hi95 = np.quantile(means, [0.025, 0.975])
    mean = float(d.mean())
    p = (1 + int((np.abs(means - mean) >= abs(mean) - 1e-12).sum())) / (resamples + 1)
    return Paired(mean=mean, ci95=(float(lo95), float(hi95)), p_value=p, windows=P * W)


def holm(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (each at most 1, never below the one before it in rank)."""
    order = np.argsort(p_values)
    m, out, running = len(p_values), [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out

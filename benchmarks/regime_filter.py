"""How much of the oracle's PnL a policy that reads only the observations can reach on the synthetic market.

The oracle (lobsim_env.baselines.oracle) reads the hidden regime z in {-1, 0, +1} and holds position_limit * z.
A learned agent never sees z: it sees the observation, whose fast (decay 0.9) and slow (0.98) EMAs of the
signed market-order volume carry most of what the flow says about z. This script builds the best simple
observation-only policy we know for this market, a forward (HMM) filter over the regime, and scores it against
`imbalance` and the `oracle` on the same held-out episodes. Its fraction of the oracle is a measured lower bound
on what an observation-only agent can reach, not a ceiling: the filter reads the trade flow only, and the learned
agent (0.68-0.89 of the oracle on the GPU host, BENCHMARKS.md, "Learning on the synthetic market") already does
better, so the book's shape and the agent's own resting orders carry what the flow alone does not.

How the filter reads the observation, per book:
- the step's signed market-order volume is recovered exactly from the fast flow EMA (market.py:
  flow_t = d * flow_{t-1} + (1 - d) * signed_volume_t, observed / size_scale), so
  x_t = (f_t - d f_{t-1}) / ((1 - d) / size_scale), rounded to the integer it is;
- the agent's own market orders are part of signed_volume (book.take_liquidity adds them), so the filter
  subtracts its own fill, read as the change of the observed position (it never rests an order, so every
  position change is its own market order);
- the regime is a 3-state Markov chain that jumps to one of the other two states with regime_switch_prob;
  P(x | z) is a histogram fitted on simulated TRAINING episodes (seeds FIT_SEED + i, under the flat policy,
  the latent regime read only there, to label the fit), never on held-out seeds;
- the decision: target = position_limit * argmax posterior, changed only when that posterior exceeds a
  threshold (else the previous target is kept), or, the other family tried, +-position_limit by the sign of the
  posterior mean E[z] when it is beyond +-c (else kept); moved with market orders one contract a step as the
  oracle does. The rule and its threshold are chosen on training seeds (THRESHOLD_SEED + i), never on held-out
  ones; the best argmax rule is scored on the held-out episodes as well.

What it does not use: the limit-order lean (z tilts limit placement at half strength, visible only through
the book's shape and the imbalance, which also depend on the book's state); so the figure is a lower bound on
the observation-only optimum, though the trade flow carries most of the signal.

    python benchmarks/regime_filter.py --episodes 256 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

from lobsim_env.baselines import _position, _trade_towards, run_episodes
from lobsim_env.config import MarketConfig
from lobsim_env.env import LobVectorEnv
from lobsim_env.market import Action, obs_index
from lobsim_env.seeds import heldout_seed

FIT_SEED = 10_000
"""Training seeds of the emission fit: books FIT_SEED + i (far below heldout_seed(0) = 2**40)."""
THRESHOLD_SEED = 20_000
"""Training seeds of the threshold choice: books THRESHOLD_SEED + i."""
RULES = (
    *(("argmax", t) for t in (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98)),
    *(("mean", t) for t in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)),
)
"""Decision rules tried on the training seeds: ('argmax', t): target L * argmax posterior where that posterior
exceeds t (0: always), else keep the target; ('mean', c): target +L where the posterior mean E[z] > c, -L where
< -c, else keep the target (a hysteresis band, as the slow-flow rule of docs/market.md on a better estimate)."""
MAX_X = 16
"""|signed volume| per step is at most 2 * events_per_step; the histogram spans -MAX_X..MAX_X (clipped)."""


def recovered_flow(obs: np.ndarray, prev_obs: np.ndarray, cfg: MarketConfig) -> np.ndarray:
    """[B] int64 signed market-order volume of the step between prev_obs and obs (agent's own orders included)."""
    ix = obs_index(cfg)
    d = cfg.synthetic.flow_decay
    f, f0 = obs[:, ix["flow"]].astype(np.float64), prev_obs[:, ix["flow"]].astype(np.float64)
    return np.rint((f - d * f0) * cfg.size_scale / (1.0 - d)).astype(np.int64)


def transition_matrix(p: float) -> np.ndarray:
    """T[i, j] = P(z_t = j | z_{t-1} = i) for regimes (-1, 0, +1): stay 1 - p, each other state p / 2."""
    return np.full((3, 3), p / 2) + np.eye(3) * (1.0 - p - p / 2)


class RegimeFilter:
    """The policy `policy(obs, env, rng) -> actions`: a forward filter over the regime per book, trading like the
    oracle towards position_limit * (the most probable regime). Per-book state resets where a book starts an
    episode (observed time_left == 1). With `record=True` it also counts, for scoring only, the steps where the
    argmax posterior equals env.latent_regime() (the decision never reads it)."""

    def __init__(
        self,
        emission: np.ndarray,
        switch_prob: float,
        rule: tuple[str, float] = ("argmax", 0.0),
        *,
        record: bool = False,
    ):
        self.log_e = np.log(emission)  # [3, 2 * MAX_X + 1]
        self.T = transition_matrix(switch_prob)
        self.rule, self.threshold = rule
        self.record = record
        self.posterior: np.ndarray | None = None
        self.prev_obs: np.ndarray | None = None
        self.target: np.ndarray | None = None
        self.hits = 0
        self.steps = 0
        self.confusion = np.zeros((3, 3), np.int64)  # [true z + 1, argmax + 1]

    def __call__(self, obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        cfg = env.config
        ix = obs_index(cfg)
        B = obs.shape[0]
        if self.posterior is None or self.posterior.shape[0] != B:
            self.posterior = np.full((B, 3), 1 / 3)
            self.prev_obs = obs.copy()
            self.target = np.zeros(B, np.int64)
        new = obs[:, ix["time_left"]] >= 1.0 - 0.5 / cfg.horizon  # step 0 of an episode
        x = recovered_flow(obs, self.prev_obs, cfg)
        own = _position(obs, cfg) - _position(self.prev_obs, cfg)  # its own market orders (it never rests)
        x = np.clip(x - own, -MAX_X, MAX_X)
        log_post = np.log(self.posterior @ self.T) + self.log_e[:, x + MAX_X].T
        log_post -= log_post.max(axis=1, keepdims=True)
        post = np.exp(log_post)
        post /= post.sum(axis=1, keepdims=True)
        post[new] = 1 / 3
        self.posterior = post
        self.prev_obs = obs.copy()
        best = post.argmax(axis=1)
        if self.rule == "argmax":
            sure = post[np.arange(B), best] > self.threshold
            want = (best - 1) * cfg.position_limit
        else:  # "mean": the sign of E[z] beyond +-threshold
            mean = post[:, 2] - post[:, 0]
            sure = np.abs(mean) > self.threshold
            want = np.sign(mean).astype(np.int64) * cfg.position_limit
        self.target = np.where(new, 0, np.where(sure, want, self.target))
        if self.record:
            z = env.latent_regime()
            seen = ~new
            self.hits += int(((best - 1) == z)[seen].sum())
            self.steps += int(seen.sum())
            np.add.at(self.confusion, (z[seen] + 1, best[seen]), 1)
        return _trade_towards(_position(obs, cfg), self.target)

    @property
    def accuracy(self) -> float:
        return self.hits / self.steps if self.steps else float("nan")


def fit_emission(cfg: MarketConfig, episodes: int, seed: int = FIT_SEED) -> np.ndarray:
    """P(x | z) [3, 2 MAX_X + 1] from `episodes` training episodes under the flat policy, x recovered from the
    observation as the filter does, labelled with the latent regime (read here only, on training seeds).
    Add-one smoothing keeps every bin > 0."""
    counts = np.ones((3, 2 * MAX_X + 1))
    env = LobVectorEnv(episodes, cfg)
    obs, _ = env.reset(seed=seed)
    hold = np.full(episodes, Action.HOLD, np.int64)
    for _ in range(cfg.horizon):
        nxt, *_ = env.step(hold)
        x = np.clip(recovered_flow(nxt, obs, cfg), -MAX_X, MAX_X)
        np.add.at(counts, (env.latent_regime() + 1, x + MAX_X), 1)
        obs = nxt
    env.close()
    # The flow is mirror-symmetric: P(x | z) = P(-x | -z). Pooling the mirror images halves the noise.
    counts = 0.5 * (counts + counts[::-1, ::-1])
    return counts / counts.sum(axis=1, keepdims=True)


def choose_rule(cfg: MarketConfig, emission: np.ndarray, episodes: int, seed: int = THRESHOLD_SEED) -> dict:
    """Mean PnL of each of RULES on training episodes; returns {rule: pnl}, the best rule and the best argmax rule."""
    p = cfg.synthetic.regime_switch_prob
    pnl = {r: float(run_episodes(cfg, RegimeFilter(emission, p, r), episodes, seed).pnl_usd.mean()) for r in RULES}
    best_argmax = max((r for r in RULES if r[0] == "argmax"), key=pnl.get)
    return {"pnl_usd_by_rule": pnl, "best": max(pnl, key=pnl.get), "best_argmax": best_argmax}


def _row(name: str, m: dict[str, Any], oracle_mean: float) -> str:
    frac = m["pnl_usd_mean"] / oracle_mean
    return (
        f"{name:<10} {m['pnl_usd_mean']:>9.1f} +- {m['pnl_usd_sem']:>5.1f} {frac:>8.3f} "
        f"{m['fees_usd_mean']:>8.1f} {m['fills_mean']:>8.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    from foxhunt_ray.presets import run_preset
    from lobsim_env.baselines import imbalance, oracle

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=256, help="held-out episodes (books of heldout_seed(0) + i)")
    ap.add_argument("--fit-episodes", type=int, default=256, help="training episodes of the emission fit")
    ap.add_argument("--threshold-episodes", type=int, default=256, help="training episodes of the rule choice")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)

    t0 = time.time()
    cfg = run_preset("phase4_3").market
    p = cfg.synthetic.regime_switch_prob
    emission = fit_emission(cfg, args.fit_episodes)
    choice = choose_rule(cfg, emission, args.threshold_episodes)
    rule = choice["best"]
    print(f"emission fit: {args.fit_episodes} training episodes (seeds {FIT_SEED}+i, flat policy)")
    for z in (-1, 0, 1):
        mean = float((np.arange(-MAX_X, MAX_X + 1) * emission[z + 1]).sum())
        print(f"  z={z:+d}: mean x = {mean:+.4f} per step")
    print(f"decision rule choice: {args.threshold_episodes} training episodes (seeds {THRESHOLD_SEED}+i)")
    for r, v in choice["pnl_usd_by_rule"].items():
        tag = "  <- chosen" if r == rule else "  <- best argmax" if r == choice["best_argmax"] else ""
        print(f"  {r[0]:<6} {r[1]:.2f}: pnl {v:+.1f}{tag}")

    seed = heldout_seed(0)
    filt = RegimeFilter(emission, p, rule, record=True)
    runs = {"filter": run_episodes(cfg, filt, args.episodes, seed)}
    if choice["best_argmax"] != rule:
        runs["filter_argmax"] = run_episodes(cfg, RegimeFilter(emission, p, choice["best_argmax"]), args.episodes, seed)
    runs["imbalance"] = run_episodes(cfg, imbalance, args.episodes, seed)
    runs["oracle"] = run_episodes(cfg, oracle, args.episodes, seed)
    metrics = {k: r.metrics() for k, r in runs.items()}
    om = metrics["oracle"]["pnl_usd_mean"]

    print(f"\nheld-out: {args.episodes} episodes, seeds heldout_seed(0) + i = {seed} + i, preset phase4_3 market")
    print(f"{'policy':<10} {'pnl_usd':>9}    {'sem':>5} {'frac':>8} {'fees':>8} {'fills':>8}")
    for k, m in metrics.items():
        print(_row(k, m, om))
    paired = runs["filter"].pnl_usd - runs["oracle"].pnl_usd
    paired_mean, paired_sem = float(paired.mean()), float(paired.std() / np.sqrt(paired.size))
    print(f"filter - oracle, paired: {paired_mean:+.1f} +- {paired_sem:.1f}")
    print(f"regime tracking: argmax posterior == latent regime on {filt.accuracy:.4f} of steps")
    print("confusion (rows: true z -1/0/+1, cols: argmax -1/0/+1, fraction of each row):")
    conf = filt.confusion / np.maximum(filt.confusion.sum(axis=1, keepdims=True), 1)
    for z, row in zip((-1, 0, 1), conf, strict=True):
        print(f"  z={z:+d}: " + " ".join(f"{v:.3f}" for v in row))
    print(f"wall {time.time() - t0:.0f} s")
    fm = metrics["filter"]["pnl_usd_mean"]
    if args.json:
        out = {
            "episodes": args.episodes,
            "heldout_seed": seed,
            "preset": "phase4_3",
            "market": repr(cfg),
            "fit_seed": FIT_SEED,
            "fit_episodes": args.fit_episodes,
            "threshold_seed": THRESHOLD_SEED,
            "threshold_episodes": args.threshold_episodes,
            "rule_choice": {f"{k[0]} {k[1]}": v for k, v in choice["pnl_usd_by_rule"].items()},
            "rule": list(rule),
            "best_argmax_rule": list(choice["best_argmax"]),
            "emission": emission.tolist(),
            "tracking_accuracy": filt.accuracy,
            "confusion": filt.confusion.tolist(),
            "metrics": metrics,
            "fraction_of_oracle": {k: m["pnl_usd_mean"] / om for k, m in metrics.items()},
            "filter_minus_oracle_paired": {
                "mean": paired_mean,
                "sem": paired_sem,
            },
        }
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)
    print(f"filter_pnl_usd={fm:.1f} oracle_pnl_usd={om:.1f} fraction_of_oracle={fm / om:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

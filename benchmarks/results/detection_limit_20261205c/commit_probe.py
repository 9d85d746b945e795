# Session 16 probe (not a benchmark): a run's newest checkpoint greedy on pi, and the same with a commitment wrapper
# that turns a market order towards the other side into a run of them (to flat, or to the full opposite position;
# the run ends if pi orders the other way). 256 held-out episodes of fold 0 each.
#   .venv/bin/python benchmarks/results/detection_limit_20261205c/commit_probe.py RUN_DIR...
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import detection_limit as dl  # noqa: E402

from foxhunt_ray.presets import run_preset  # noqa: E402
from lobsim_env.baselines import _position, run_episodes  # noqa: E402
from lobsim_env.market import Action  # noqa: E402
from lobsim_env.seeds import heldout_seed  # noqa: E402

cfg = run_preset("phase4_3").market
NONE = np.iinfo(np.int64).min  # no run under way


class Commit:
    """Greedy pi; a market order that moves the position towards the other side starts a run of market orders in
    that direction until the position reaches -goal (from long) or +goal (from short)."""

    def __init__(self, policy, goal: int):
        self.policy, self.goal, self.target = policy, goal, None

    def __call__(self, obs, env, rng):
        a = np.asarray(self.policy(obs, env, rng)).astype(np.int64)
        pos = _position(obs, cfg)
        if self.target is None or self.target.shape[0] != obs.shape[0]:
            self.target = np.full(obs.shape[0], NONE)
        sell, buy = a == Action.MARKET_SELL, a == Action.MARKET_BUY
        self.target = np.where(sell & (pos > 0), -self.goal, np.where(buy & (pos < 0), self.goal, self.target))
        active = self.target != NONE
        done = active & (((self.target < pos) & buy) | ((self.target > pos) & sell) | (pos == self.target))
        self.target = np.where(done, NONE, self.target)
        active = self.target != NONE
        a = np.where(active & (self.target < pos), Action.MARKET_SELL, a)
        return np.where(active & (self.target > pos), Action.MARKET_BUY, a).astype(np.int64)


if __name__ == "__main__":
    seed = heldout_seed(0)
    oracle = run_episodes(cfg, dl.DelayedOracle(0), 256, seed).metrics()["pnl_usd_mean"]
    for run_dir in sys.argv[1:]:
        base = dl._agent(run_dir)
        for name, policy in (
            ("greedy pi", base),
            ("commit to flat", Commit(base, 0)),
            ("commit to full", Commit(base, cfg.position_limit)),
        ):
            rec = dl.Recorder(policy)
            m = run_episodes(cfg, rec, 256, seed).metrics()
            r = dl.position_lag(np.array(rec.z), np.array(rec.position))
            print(
                f"{run_dir} {name:15} {m['pnl_usd_mean'] / oracle:.3f} of the oracle  flat {r['flat']:.2f} "
                f"never {r['never']:.3f} 50-100 never {r['never_by_regime_length']['50-100']['never']:.2f}  "
                f"fees {m['fees_usd_mean']:.1f}",
                flush=True,
            )

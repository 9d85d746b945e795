# Session 16 probe (not a benchmark): the regime filter on the trade flow (benchmarks/regime_filter.py's, fitted on
# training seeds) run beside each box agent on the same observations, the agent's own market orders taken out
# (none past the position limit, which the market refuses). Per regime of 50-200 steps that the agent never follows,
# and per regime it does follow, before and after it does: the filter's probability of the true regime.
#   .venv/bin/python benchmarks/results/detection_limit_20261205c/shadow_filter_probe.py RUN_DIR...
# With no RUN_DIR, a self-check: the shadow filter beside random and resting-order policies (about 0.67 right).
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import detection_limit as dl  # noqa: E402
import regime_filter as rf  # noqa: E402

from foxhunt_ray.presets import run_preset  # noqa: E402
from lobsim_env.baselines import _position, run_episodes  # noqa: E402
from lobsim_env.baselines import random as random_policy  # noqa: E402
from lobsim_env.market import Action, obs_index  # noqa: E402
from lobsim_env.seeds import heldout_seed  # noqa: E402

cfg = run_preset("phase4_3").market
ix = obs_index(cfg)
log_e = np.log(rf.fit_emission(cfg, 256))
trans = rf.transition_matrix(cfg.synthetic.regime_switch_prob)


class Shadow:
    """The policy acts; a flow filter reads the same observations beside it and records its posterior."""

    def __init__(self, policy):
        self.policy, self.post, self.prev, self.last = policy, None, None, None
        self.z, self.pos, self.p = [], [], []

    def __call__(self, obs, env, rng):
        if self.post is None:
            self.post, self.prev = np.full((obs.shape[0], 3), 1 / 3), obs.copy()
            self.last = np.zeros(obs.shape[0], np.int64)
        new = obs[:, ix["time_left"]] >= 1.0 - 0.5 / cfg.horizon
        prev_pos, limit = _position(self.prev, cfg), cfg.position_limit
        buy = (self.last == Action.MARKET_BUY) & (prev_pos < limit)
        sell = (self.last == Action.MARKET_SELL) & (prev_pos > -limit)
        own = np.where(buy, 1, np.where(sell, -1, 0)) * cfg.order_size
        own = np.where(self.last == Action.FLATTEN, -prev_pos, own)
        x = np.clip(rf.recovered_flow(obs, self.prev, cfg) - own, -rf.MAX_X, rf.MAX_X)
        lp = np.log(self.post @ trans) + log_e[:, x + rf.MAX_X].T
        post = np.exp(lp - lp.max(1, keepdims=True))
        post /= post.sum(1, keepdims=True)
        post[new] = 1 / 3
        self.post, self.prev = post, obs.copy()
        self.z.append(env.latent_regime().copy())
        self.pos.append(_position(obs, cfg))
        self.p.append(post.copy())
        self.last = np.asarray(self.policy(obs, env, rng)).astype(np.int64)
        return self.last


def joins(obs, env, rng):
    return np.where(rng.random(obs.shape[0]) < 0.5, Action.JOIN_BID, Action.JOIN_ASK).astype(np.int64)


def report(name: str, sh: Shadow) -> None:
    z, pos, p = np.array(sh.z), np.array(sh.pos), np.array(sh.p)
    print(f"{name}: shadow flow filter right on {(p.argmax(-1) - 1 == z).mean():.3f} of steps")
    groups: dict[str, list] = {"missed": [], "followed, before": [], "followed, after": []}
    for b in range(z.shape[1]):
        for s, e in dl.regime_spans(z[:, b]):
            zz = z[s, b]
            if zz == 0 or not 50 <= e - s < 200:
                continue
            right = np.sign(pos[s:e, b]) == zz
            hit = np.flatnonzero([right[t : t + dl.HOLD].all() for t in range(right.size)])
            pt = p[s:e, b, zz + 1]
            if hit.size == 0:
                groups["missed"].append(pt)
            elif hit[0] > 0:
                groups["followed, before"].append(pt[: hit[0]])
                groups["followed, after"].append(pt[hit[0] :])
    for k, v in groups.items():
        if v:
            a = np.concatenate(v)
            print(
                f"   {k:18} regimes {len(v):4d} steps {a.size:6d}: P(true regime) mean {a.mean():.2f}, "
                f"> 0.8 on {np.mean(a > 0.8):.2f}, > 0.95 on {np.mean(a > 0.95):.2f}"
            )


if __name__ == "__main__":
    if sys.argv[1:]:
        for d in sys.argv[1:]:
            sh = Shadow(dl._agent(d))
            run_episodes(cfg, sh, 256, heldout_seed(0))
            report(d, sh)
    else:
        for name, policy in (("random", random_policy), ("joins", joins)):
            sh = Shadow(policy)
            run_episodes(cfg, sh, 128, heldout_seed(0))
            report(name, sh)

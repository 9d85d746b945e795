# Session 16 probe (not a benchmark): box agents greedy on pi, and the same with a commitment wrapper that turns a
# market order towards the other side into a run of them (to flat, or to the full opposite position).
#   .venv/bin/python benchmarks/results/detection_limit_20261205c/commit_probe.py RUN_DIR... (256 held-out episodes)
import sys, numpy as np
sys.path.insert(0, '/work/main'); sys.path.insert(0, '/work/main/benchmarks')
import detection_limit as dl
from foxhunt_ray.presets import run_preset
from lobsim_env.baselines import run_episodes, _position
from lobsim_env.market import Action
from lobsim_env.seeds import heldout_seed
cfg = run_preset("phase4_3").market
L = cfg.position_limit

class Commit:
    """greedy pi, but a market order that moves the position towards the other side starts a run of market orders
    in that direction until the position reaches `goal` (0: flat, L: the full opposite position); the run stops
    if pi orders the other way."""
    def __init__(self, pol, goal):
        self.pol, self.goal, self.target = pol, goal, None
    def __call__(self, obs, env, rng):
        a = np.asarray(self.pol(obs, env, rng)).copy()
        pos = _position(obs, cfg)
        if self.target is None or self.target.shape[0] != obs.shape[0]:
            self.target = np.full(obs.shape[0], np.iinfo(np.int64).min)
        new = self.target == np.iinfo(np.int64).min
        sell, buy = a == Action.MARKET_SELL, a == Action.MARKET_BUY
        start_down = sell & (pos > 0); start_up = buy & (pos < 0)
        self.target = np.where(start_down, -self.goal, np.where(start_up, self.goal, self.target))
        active = self.target != np.iinfo(np.int64).min
        # pi ordering the other way (or reaching) ends it
        done = active & (((self.target < pos) & buy) | ((self.target > pos) & sell) | (pos == self.target))
        self.target = np.where(done, np.iinfo(np.int64).min, self.target)
        active = self.target != np.iinfo(np.int64).min
        a = np.where(active & (self.target < pos), Action.MARKET_SELL, np.where(active & (self.target > pos), Action.MARKET_BUY, a))
        return a.astype(np.int64)

seed = heldout_seed(0)
oracle = run_episodes(cfg, dl.DelayedOracle(0), 256, seed).metrics()["pnl_usd_mean"]
for d in sys.argv[1:]:
    base = dl._agent(d)
    for name, pol in (("greedy pi", base), ("commit to flat", Commit(base, 0)), ("commit to full", Commit(base, L))):
        rec = dl.Recorder(pol)
        m = run_episodes(cfg, rec, 256, seed).metrics()
        r = dl.position_lag(np.array(rec.z), np.array(rec.position))
        print(f"{d[-60:-40]} {name:15} {m['pnl_usd_mean']/oracle:.3f} of the oracle  flat {r['flat']:.2f} never {r['never']:.3f} 50-100 never {r['never_by_regime_length']['50-100']['never']:.2f}  fees {m['fees_usd_mean']:.1f}", flush=True)

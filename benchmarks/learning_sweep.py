"""A hyper-parameter sweep of learning, one setting per process: a serial loop of RolloutWorker + LearnerWorker
(the roles of foxhunt_ray.loops.run_serial, without the monitor) that scores the greedy policy on the held-out
episodes every `eval_every` updates, printing one JSON line per score.

    python benchmarks/learning_sweep.py '{"name": "p43", "preset": "phase4_3", "sets": ["learner.lr=3e-3"],
                                          "steps": 10000, "eval_every": 1000, "seconds": 420}'

A spec may also give "settings", "sizing" and "episodes" (held-out episodes a score, 64 by default).

Run many at once, one core each (taskset), on a machine with cores to spare: that is how the presets' 'learn' settings
and 'cpu' sizing were chosen (BENCHMARKS.md, "Learning on the synthetic market"; the sweep's specs and raw lines are in
git history, commit e8c9d81). The learner uses a GPU when there is one. A spec's "sets" apply on top of
`run_preset(preset, settings=..., sizing=...)`, by default settings "seed" and sizing "gpu": the values the kept specs
were written against (the presets' own before issue 13), so they run as they ran.

Why not Ray Tune: each trial here is one process pinned to one core, with the learner sharing one GPU; the sweep
was a fixed grid of 11-14 settings with a fixed budget each, read by eye from held-out scores every 1,000 updates.
Tune would add its scheduler and trial actors (and the ray[tune] extra, not installed) to buy search algorithms
and early stopping, and early stopping on this metric would be wrong: the greedy policy's held-out PnL swings by
more than half the oracle's before ~5,000 updates (the table in BENCHMARKS.md), so a trial cut at its first dip
is often the one that learns. The results are kept the way Tune would keep them: a JSON line per score per trial.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.envs import probe_env
from actors.learner_worker import LearnerWorker
from actors.rollout import RolloutWorker
from foxhunt_ray.config import apply_overrides
from foxhunt_ray.presets import run_preset
from learner.network import policy_from_weights
from lobsim_env.baselines import run_episodes
from lobsim_env.seeds import heldout_seed


def main(spec: dict) -> None:
    torch.set_num_threads(1)
    base = run_preset(
        spec.get("preset", "phase4_3"), settings=spec.get("settings", "seed"), sizing=spec.get("sizing", "gpu")
    )
    cfg = apply_overrides(base, spec.get("sets", [])).validate()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    spaces = probe_env(cfg.env_id, market=cfg.market)  # what the driver sizes its learner by, statistics included
    learner = LearnerWorker(
        cfg.learner,
        obs_dim=spaces.obs_dim,
        n_actions=spaces.n_actions,
        seed=cfg.seed,
        device=device,
        obs_mean=spaces.obs_mean,
        obs_std=spaces.obs_std,
    )
    worker = RolloutWorker(cfg.rollout, cfg.market, worker_index=0, seed=cfg.seed, weights=learner.policy_weights())
    start, qpa_ema = time.time(), None
    deadline = start + spec.get("seconds", float("inf"))
    at = 0  # the learner step of the last score
    while learner.step < spec["steps"] and time.time() < deadline:
        for diag in learner.update(worker.sample()):  # one diag per learner step (learner.minibatch_envs)
            qpa_ema = diag["qpa"] if qpa_ema is None else 0.99 * qpa_ema + 0.01 * diag["qpa"]
        if learner.step % 4 == 0:
            worker.set_weights(learner.policy_weights())
        if learner.step // spec["eval_every"] > at // spec["eval_every"]:
            at = learner.step
            policy = policy_from_weights(learner.policy_weights())
            res = run_episodes(
                cfg.market,
                lambda obs, env, rng, p=policy: p.act(obs, greedy=True)[0],
                spec.get("episodes", 64),
                heldout_seed(0),
            )
            pnl = res.pnl_usd
            line = {"name": spec["name"], "step": learner.step, "t": round(time.time() - start)}
            line |= {"pnl": round(float(pnl.mean())), "sem": round(float(pnl.std() / len(pnl) ** 0.5))}
            line |= {"qpa_ema": round(qpa_ema, 3), "l_c51": round(diag["l_c51"], 3), "ent": round(diag["entropy"], 3)}
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

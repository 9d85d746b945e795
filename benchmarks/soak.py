"""Soak: a long smoke run in Ray mode with rollout actors and the learner actor killed at random moments.

    .venv/bin/python benchmarks/soak.py --steps 20000 --learner-kills 3 --worker-kills 4 --seed 0

At seeded random updates the driver's hook kills a rollout actor (Ray restarts it, `driver.max_worker_restarts`) or
the learner actor (the driver replaces it from its newest checkpoint, `driver.max_learner_restarts`), as `ray kill`
or an OOM would. The run must end done, with diag.jsonl holding every step once, in order (its reader refuses a
gap, a duplicate or a torn line), and a newest checkpoint that a fresh Learner loads. Last line:
`soak steps=<n> learner_kills=<k> worker_kills=<w> wall_s=<s> diag=complete checkpoint=loads`.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=20_000)
    p.add_argument("--learner-kills", type=int, default=3, help="at most driver.max_learner_restarts (3)")
    p.add_argument("--worker-kills", type=int, default=4)
    p.add_argument("--seed", type=int, default=0, help="where the kills fall")
    p.add_argument("--out", default="runs/soak")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)

    import ray

    from actors.checkpoints import list_checkpoints, read_checkpoint
    from actors.diag_file import read_diag, step_records
    from foxhunt_ray import driver
    from foxhunt_ray.loops import LEARNER_NAME
    from learner.config import LearnerConfig
    from learner.learner import Learner
    from learner.network import identity_obs_stats

    rng = random.Random(args.seed)
    total = args.learner_kills + args.worker_kills
    at = sorted(rng.sample(range(args.steps // 20, args.steps - args.steps // 20), total))
    kinds = ["learner"] * args.learner_kills + ["worker"] * args.worker_kills
    rng.shuffle(kinds)
    plan = list(zip(at, kinds, strict=True))
    done: list[dict] = []

    def hook(step: int, workers: list) -> None:
        while plan and step >= plan[0][0]:
            due, kind = plan.pop(0)
            if kind == "learner":
                (name,) = [n for n in ray.util.list_named_actors() if n.startswith(LEARNER_NAME)]
                ray.kill(ray.get_actor(name), no_restart=True)
            else:  # in turn, so no actor is killed more often than Ray restarts it
                ray.kill(workers[sum(k["kind"] == "worker" for k in done) % len(workers)], no_restart=False)
            done.append({"kind": kind, "due": due, "at": step, "t": time.time()})
            print(f"soak: killed the {kind} actor at update {step}", file=sys.stderr, flush=True)

    out = Path(args.out).resolve()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    t0 = time.time()
    try:
        argv = ["--preset", "smoke", "--steps", str(args.steps), "--rollout-workers", "2", "--quiet"]
        argv += ["--checkpoint-every", "500", "--checkpoint-interval-s", "0", "--out", str(out)]
        code = driver.main(argv, hook=hook)
    finally:
        ray.shutdown()
    wall = time.time() - t0
    (run_dir,) = sorted(out.glob("*/*/0"))[-1:]  # OUT/<code_sha>/<name>/<fold>
    steps = [int(r["step"]) for r in step_records(read_diag(run_dir / "diag.jsonl"))]
    complete = steps == list(range(1, args.steps + 1))
    summary = json.loads((run_dir / "summary.json").read_text())
    step, path = list_checkpoints(run_dir)[-1]
    sd = read_checkpoint(path)["learner"]
    learner = Learner(  # the checkpoint's own observation statistics replace these in the load
        LearnerConfig(**sd["config"]),
        obs_dim=sd["obs_dim"],
        n_actions=sd["n_actions"],
        **identity_obs_stats(sd["obs_dim"]),
    )
    learner.load_state_dict(sd)
    loads = learner.step == step == args.steps
    report = {
        "exit_code": code,
        "status": summary["status"],
        "steps": len(steps),
        "kills": done,
        "wall_s": wall,
        "diag_complete": complete,
        "checkpoint": str(path),
        "checkpoint_loads": loads,
        "run_dir": str(run_dir),
    }
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    learner_kills = sum(k["kind"] == "learner" for k in done)
    print(
        f"soak steps={len(steps)} learner_kills={learner_kills} worker_kills={len(done) - learner_kills} "
        f"wall_s={wall:.0f} diag={'complete' if complete else 'INCOMPLETE'} "
        f"checkpoint={'loads' if loads else 'DOES NOT LOAD'} exit={code} status={summary['status']}"
    )
    return 0 if code == 0 and complete and loads and summary["status"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())

"""python3 -m benchmarks.gpu_host STEP... : the GPU host's steps (this package's docstring says what each is)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from benchmarks.gpu_host.runner import Runner
from benchmarks.gpu_host.steps import STEPS, Plan, plan_steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m benchmarks.gpu_host",
        description="Run named steps on a GPU host; logs and JSON under --out, packed at the end.",
    )
    p.add_argument("steps", nargs="*", metavar="STEP", help=f"any of: {', '.join(STEPS)}")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of system, learn and rllib (0 1)")
    p.add_argument("--system-seconds", type=float, default=40.0, help="training time of each system run (40)")
    p.add_argument("--learn-seconds", type=float, default=150.0, help="training time of each learn run (150)")
    p.add_argument("--walk-seconds", type=float, default=90.0, help="training time of each walkforward run (90)")
    p.add_argument("--walk-folds", default="4,8,12", help="the walkforward step's folds (4,8,12)")
    p.add_argument("--walk-days", default="AMZN", help="the walkforward step's sample tickers (AMZN; e.g. AAPL,GOOG)")
    p.add_argument("--walk-train-on", default="real", metavar="MODES",
                   help="what the walkforward runs train on, comma-separated, a bench run each: real, synthetic, both "
                   "(real; e.g. real,synthetic,both for the sim-to-real comparison)")  # fmt: skip
    p.add_argument("--budget-s", type=float, default=None,
                   help="skip a step (or a seed) that could not end by its time limit inside this many seconds")
    p.add_argument("--out", default=None, help="output folder (default $OUT, else gpu_host_out/<UTC stamp>)")
    p.add_argument("--python", default=sys.executable, help="the Python that runs each step")
    p.add_argument("--list", action="store_true", help="print every step's commands and time limits, run nothing")
    p.add_argument("--dry-run", action="store_true", help="print what would run, run nothing")
    args = p.parse_args(argv)
    bad = [s for s in args.steps if s not in STEPS]
    if bad:
        p.error(f"unknown step(s) {', '.join(bad)}: choose from {', '.join(STEPS)}")
    modes = args.walk_train_on.split(",")
    if not modes or any(m not in ("real", "synthetic", "both") for m in modes) or len(set(modes)) < len(modes):
        p.error(f"--walk-train-on={args.walk_train_on}: comma-separated, each once, of real, synthetic, both")
    if not args.steps and not args.list:
        p.error("name at least one step (or --list)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = Plan(seeds=tuple(args.seeds), system_seconds=args.system_seconds, learn_seconds=args.learn_seconds,
                walk_seconds=args.walk_seconds, walk_folds=args.walk_folds,
                walk_days=args.walk_days, walk_train_on=args.walk_train_on, python=args.python)
    if args.list:
        for job in plan_steps(list(STEPS), plan):
            print(f"{job.step:9s} {job.label:16s} limit {job.timeout_s:4.0f} s  {' '.join(job.argv)}")
        return 0
    out = Path(args.out or os.environ.get("OUT") or f"gpu_host_out/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    runner = Runner(out=out, repo=Path.cwd(), python=args.python, budget_s=args.budget_s, dry_run=args.dry_run)
    return runner.run(plan_steps(args.steps, plan))


if __name__ == "__main__":
    sys.exit(main())

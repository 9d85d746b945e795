"""The walk-forward protocol over a day cache: every fold, several seeds, the agent beside the simple rules.

For each fold K (a test period with a validation period before it: K = 2 .. periods - 1, or those of --folds) and
each seed, one training run of foxhunt_ray (`python -m foxhunt_ray.local --serial --no-eval`: its roles in one process,
the learner on the GPU where there is one) on the fold's training periods for --train-s seconds, keeping every
checkpoint; the runs fan out as Ray tasks, --parallel at a time. Then each fold is scored by
`foxhunt_ray.walkforward.score_fold` (the checkpoint and the quoting rule's parameters picked on the validation
period, the test period played once, intervals over seeds and windows), the p-values Holm-adjusted over the folds.
--train-on (sim-to-real): real (the default) trains on the fold's training periods; synthetic on the synthetic flow
fitted to those periods alone (`walkforward.calibrate_fold`, before any run), both on --synthetic-share of the rollout
books that flow and the rest real; the checkpoint's choice and the test are the real days' in every mode.

Writes OUT/walkforward.json (every fold's record), OUT/walkforward.md (the table, naming the kind of fold) and
OUT/walkforward.png (each fold's test PnL, the agent's interval over seeds and windows), keeps the runs under
OUT/runs with their chosen checkpoints alone (--keep-all: every one; OUT/logs: each run's output) and prints the
table and a last line

    folds=<n> seeds=<s> agent_usd=<mean> flat_usd=<x> imbalance_usd=<y> quoting_usd=<z> beats_best_baseline=<k>/<n>
    train_on=<mode>

the means over folds of each policy's test PnL per window, and k the folds whose 95 % interval of agent minus the
best rule (the best of flat, imbalance and quoting on that fold's test) lies above zero. docs/evaluation.md,
"Walk-forward", says what each figure is.

    python -m lobsim_env.data ingest ../shared/data/lobster --out days
    python benchmarks/bench_walkforward.py --data days --days AMZN --blocks 13 --folds 4,8,12 --seeds 5 \\
        --train-s 60 --out walkforward
    python benchmarks/bench_walkforward.py ... --train-on synthetic --out walkforward_synthetic   # or both
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from actors.checkpoints import list_checkpoints  # noqa: E402
from foxhunt_ray import driver  # noqa: E402
from foxhunt_ray.evaluate import AGENT  # noqa: E402
from foxhunt_ray.walkforward import BASELINES, TRAIN_ON, calibrate_fold, holm_across, score_fold, table  # noqa: E402
from lobsim_env.calibrate import FITTED  # noqa: E402

LAST = "folds={n} seeds={s} agent_usd={agent:.2f} flat_usd={flat:.2f} imbalance_usd={imbalance:.2f} "
LAST += "quoting_usd={quoting:.2f} beats_best_baseline={k}/{n} train_on={train_on}"


def folds_of(args: argparse.Namespace) -> list[int]:
    """The folds to run: --folds, or every fold with a validation period (2 .. the last period)."""
    _, last = driver.data_sets(args.data, args.days, None, args.blocks, args.holdout)
    every = list(range(2, last + 1))
    if args.folds in (None, "all"):
        if not every:
            raise driver.UsageError(
                f"--data={args.data}: {last + 1} period(s): a fold needs a training, a validation and a test period "
                "(more dates, or --blocks N)"
            )
        return every
    try:
        picked = sorted({int(k) for k in args.folds.split(",")})
    except ValueError:
        raise driver.UsageError(f"--folds={args.folds!r} must be 'all' or comma-separated ints, e.g. 4,8,12") from None
    if not set(picked) <= set(every):
        raise driver.UsageError(f"--folds={args.folds}: the folds with a validation period here are {every}")
    return picked


def run_argv(
    args: argparse.Namespace, fold: int, seed: int, runs: Path, config: str | None = None
) -> list[str]:
    """The driver's command line of one fold and seed (config: the fold's calibrated --config file, if any)."""
    argv = [sys.executable, "-m", "foxhunt_ray.local", "--no-eval", "--serial", "--quiet", "--data", args.data]
    argv += ["--days", args.days] if args.days else []
    argv += ["--holdout", args.holdout] if args.holdout else []
    argv += ["--blocks", str(args.blocks), "--fold", str(fold), "--seed", str(seed), "--out", str(runs)]
    argv += ["--name", f"wf-s{seed}", "--keep-checkpoints", "0", "--checkpoint-every", str(args.checkpoint_every)]
    argv += ["--checkpoint-interval-s", str(args.checkpoint_interval_s), "--preset", args.preset]
    argv += ["--sizing", args.sizing] if args.sizing else []
    argv += ["--time-limit-s", str(args.train_s)] if args.train_s else []
    argv += ["--steps", str(args.steps)] if args.steps else []
    argv += ["--config", config] if config else []
    for kv in args.overrides:
        argv += ["--set", kv]
    return argv


def train(argv: list[str], log: str) -> int:
    """One run, its output in `log`; its exit code."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with open(log, "w") as f:
        return subprocess.run(argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env).returncode


def _run_dirs(runs: Path, fold: int, seeds: int) -> list[Path]:
    """The run folders the driver made for a fold, one a seed: runs/<code_sha>/wf-s<seed>/<fold>."""
    found = [list(runs.glob(f"*/wf-s{s}/{fold}")) for s in range(seeds)]
    if any(len(f) != 1 for f in found):
        raise RuntimeError(f"{runs}: not one run folder a seed for fold {fold} ({found}): use a new --out")
    return [f[0] for f in found]


def _failed(codes: dict[tuple[int, int], int], logs: Path) -> str:
    """The runs that did not end 0, by fold, seed, exit code and log; '' for none."""
    bad = [f"fold {k} seed {s} (exit {c}: {logs / f'fold{k}-seed{s}.log'})" for (k, s), c in codes.items() if c]
    return ", ".join(bad)


def plot(folds: list[dict[str, Any]], path: Path, kind: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(folds) + 2), 4))
    xs = range(len(folds))
    for j, name in enumerate((AGENT, *BASELINES)):
        ys = [f["policies"][name]["pnl_usd_mean"] for f in folds]
        ax.plot([x + 0.08 * (j - 2) for x in xs], ys, "o", label=name)
    for x, f in zip(xs, folds, strict=True):  # the agent's interval: the best rule's mean plus the gap's interval
        best = f["policies"][f["best_baseline"]]["pnl_usd_mean"]
        lo, hi = f["versus"][f["best_baseline"]]["ci95_usd"]
        ax.vlines(x - 0.16, best + lo, best + hi, color="C0")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(list(xs), [f"fold {f['fold']}" for f in folds])
    ax.set_ylabel("test PnL per window (USD)")
    ax.set_title(f"walk-forward, folds of {kind}\n(agent: 95 % interval over seeds and windows)", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, metavar="DIR", help="a day cache (python -m lobsim_env.data ingest)")
    p.add_argument("--days", default=None, metavar="NAMES", help="the days to draw from (comma-separated)")
    p.add_argument("--holdout", default=None, metavar="NAMES", help="cross-instrument folds: the test days")
    p.add_argument("--blocks", type=int, default=1, metavar="N", help="each day cut into N periods (e.g. 13)")
    p.add_argument("--folds", default=None, help="'all' (default: every fold with a validation period) or K,K,...")
    p.add_argument("--seeds", type=int, default=5, help="runs a fold, seeds 0..N-1 (default 5)")
    p.add_argument("--train-s", type=float, default=60.0, help="seconds of training a run (0: --steps alone)")
    p.add_argument("--steps", type=int, default=None, help="learner updates a run, at most")
    p.add_argument("--episodes", type=int, default=64, help="windows a validation and test period (default 64)")
    p.add_argument("--parallel", type=int, default=2, help="runs at once, Ray tasks (default 2; 1: no Ray)")
    p.add_argument("--gpus", type=float, default=0.0, help="GPUs on this machine to share among the runs at once")
    p.add_argument("--preset", default="phase4_3")
    p.add_argument("--sizing", default=None, help="the driver's --sizing (default auto)")
    p.add_argument("--checkpoint-every", type=int, default=50, help="updates between checkpoints (default 50)")
    p.add_argument("--checkpoint-interval-s", type=float, default=20.0, help="...and seconds at least (default 20)")
    p.add_argument("--keep-all", action="store_true", help="keep every checkpoint (default: the chosen ones alone)")
    p.add_argument("--train-on", choices=TRAIN_ON, default="real",
                   help="real (default): the fold's training windows; synthetic: the synthetic flow calibrated on "
                   "those periods alone (unlimited data); both: --synthetic-share of the rollout books synthetic, "
                   "the rest real. Validation and test are real days in every mode")  # fmt: skip
    p.add_argument("--synthetic-share", type=float, default=0.5, metavar="X",
                   help="with --train-on both: the share of the rollout books that are synthetic (default 0.5)")
    p.add_argument("--score-only", action="store_true",
                   help="train nothing: score the runs already under --out (e.g. after scoring failed)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="walkforward", help="the folder of the runs and the results")
    args = p.parse_args(argv)
    if args.seeds < 1 or args.parallel < 1 or args.episodes < 2 or args.gpus < 0:
        p.error("--seeds and --parallel must be >= 1, --episodes >= 2, --gpus >= 0")
    if not 0 < args.synthetic_share < 1:
        p.error(f"--synthetic-share={args.synthetic_share} must be in (0, 1), e.g. 0.5 (--train-on synthetic is 1)")
    if args.train_on != "both" and args.synthetic_share != 0.5:
        p.error(f"--synthetic-share={args.synthetic_share} goes with --train-on both, not --train-on {args.train_on}")
    try:
        folds = folds_of(args)
    except driver.UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out).resolve()
    runs, logs = out / "runs", out / "logs"
    logs.mkdir(parents=True, exist_ok=True)

    start = time.perf_counter()
    calibrated: dict[int, dict[str, Any]] = {}
    if args.train_on != "real" and args.score_only:  # the calibrations the runs trained on
        for k in folds:
            path = out / "calibrated" / f"fold{k}.json"
            if not path.is_file():
                print(f"error: --score-only: no {path}; the runs of --train-on {args.train_on} were not made here",
                      file=sys.stderr)  # fmt: skip
                return 2
            fitted = json.loads(path.with_suffix(".measured.json").read_text())
            m = json.loads(path.read_text())["market"]
            calibrated[k] = {"config": str(path), "days": fitted["days"], "tick_multiple": fitted["tick_multiple"],
                             "synthetic_share": m["synthetic_share"],
                             "fitted": {f: m["synthetic"][f] for f in FITTED}}  # fmt: skip
    elif args.train_on != "real":  # each fold's flow fitted on its training periods alone
        share = 1.0 if args.train_on == "synthetic" else args.synthetic_share
        steps = [kv.split("=", 1)[1] for kv in args.overrides if kv.startswith("market.events_per_step=")]
        for k in folds:
            calibrated[k] = calibrate_fold(args.data, args.days, k, args.blocks, args.holdout, out, share=share,
                                           events_per_step=int(steps[-1]) if steps else None)  # fmt: skip
            print(f"fold {k}: calibrated on {len(calibrated[k]['days'])} training period(s), one synthetic tick = "
                  f"{calibrated[k]['tick_multiple']} venue ticks: {calibrated[k]['config']}", flush=True)  # fmt: skip
    jobs = [(k, s) for k in folds for s in range(args.seeds)]
    argvs = {
        (k, s): (run_argv(args, k, s, runs, calibrated.get(k, {}).get("config")), str(logs / f"fold{k}-seed{s}.log"))
        for k, s in jobs
    }
    if args.score_only:
        failed, trained_s = "", None
        records = [score_fold(_run_dirs(runs, k, args.seeds), episodes=args.episodes) for k in folds]
    elif args.parallel == 1:  # one run at a time: no Ray
        codes = {key: train(*argvs[key]) for key in jobs}
        if not (failed := _failed(codes, logs)):
            trained_s = time.perf_counter() - start
            records = [score_fold(_run_dirs(runs, k, args.seeds), episodes=args.episodes) for k in folds]
    else:
        from foxhunt_ray.local import _ray_init

        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        _ray_init()
        import ray

        try:
            cpus = max(1.0, ray.available_resources().get("CPU", 1.0) // args.parallel)  # --parallel runs at once
            train_task = ray.remote(num_cpus=cpus, num_gpus=args.gpus / args.parallel)(train)
            score_task = ray.remote(num_cpus=cpus)(score_fold)
            codes = dict(zip(jobs, ray.get([train_task.remote(*argvs[key]) for key in jobs]), strict=True))
            if not (failed := _failed(codes, logs)):
                trained_s = time.perf_counter() - start
                scored = [score_task.remote(_run_dirs(runs, k, args.seeds), episodes=args.episodes) for k in folds]
                records = ray.get(scored)
        finally:
            ray.shutdown()
    if failed:
        print(f"error: runs failed: {failed}", file=sys.stderr)
        return 1
    if not args.keep_all:  # the figures are in the records: of each run, the chosen checkpoint stays (for export)
        for r in records:
            for c in r["checkpoints"]:
                for step, path in list_checkpoints(c["run_dir"]):
                    if step != c["step"]:
                        path.unlink()
    kind = " and ".join(sorted({r["kind"] for r in records}))
    for r in records:
        if r["train_on"] != args.train_on:  # the runs' own markets say what they trained on
            raise RuntimeError(f"fold {r['fold']}: its runs trained on {r['train_on']}, not --train-on {args.train_on}")
        r["calibration"] = calibrated.get(r["fold"])
    holm_across(records)
    text = table(records, kind)
    doc = {"kind": kind, "train_on": args.train_on, "folds": records, "trained_s": trained_s,
           "argv": sys.argv[1:] if argv is None else argv}  # fmt: skip
    (out / "walkforward.json").write_text(json.dumps(doc, indent=1))
    (out / "walkforward.md").write_text(text + "\n")
    plot(records, out / "walkforward.png", kind)
    mean = {n: sum(r["policies"][n]["pnl_usd_mean"] for r in records) / len(records) for n in (AGENT, *BASELINES)}
    print(text)
    made = "scored the runs already there" if trained_s is None else f"trained {len(jobs)} runs in {trained_s:.0f} s"
    print(f"{made}; {out}/walkforward.json, .md, .png")
    k = sum(r["beats_best_baseline"] for r in records)
    print(LAST.format(n=len(records), s=args.seeds, k=k, train_on=args.train_on, **mean))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does it learn? Train presets on the synthetic market within a wall-clock budget, then score them held out.

For each preset and seed: `python -m foxhunt_ray.local` (Ray in-process: the learner actor, rollout actors and
the monitor actor) with `--time-limit-s` and the CPU learning settings below, then `foxhunt_ray.evaluate` of the
newest checkpoint on the fold's held-out episodes beside flat, random, imbalance and the oracle. Prints one row
per run and writes OUT/learning.json; the run folders (diag.jsonl, evaluation.json) stay under OUT for
`python -m foxhunt_ray.report`.

    .venv/bin/python benchmarks/bench_learning.py                          # phase4_3, seeds 0 1 2, 30 min each
    .venv/bin/python benchmarks/bench_learning.py --presets plan_a_v2 phase4_2 phase4_3 --minutes 10 --seeds 0
    python3 benchmarks/bench_learning.py --serial --presets phase3_1 --seeds 1 --minutes 7   # no Ray: one core

Results with dates and machines: BENCHMARKS.md, "Learning quality".
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from foxhunt_ray.evaluate import evaluate_run  # noqa: E402

CPU_LEARNING_SETS = (
    # sizes a 2-core CPU trains at several updates a second (the presets' H = 512 is the GPU production size)
    "learner.hidden_dim=128",
    "learner.q_batch_size=256",
    "learner.iqn_taus=16",
    "learner.iqn_target_taus=16",
    # rewards are USD: 0.04 puts a holding's return (tens of USD over a regime) well inside the C51 support
    "learner.reward_scale=0.04",
    # found on the H200 host's CPU cores (14 settings in parallel, BENCHMARKS.md): 2.5e-4 needs ~3x the updates
    "learner.lr=3e-3",
    "learner.dueling_lr=3e-3",
    # 64 books x 16 steps: one update's rollout (1024 transitions) costs ~20 ms of a rollout core
    "rollout.num_envs=64",
    "rollout.steps_per_sample=16",
)
"""The overrides every run of this benchmark uses, on top of its preset (recorded in each run's config.json)."""


def train(
    preset: str,
    seed: int,
    minutes: float,
    out: Path,
    workers: int,
    serial: bool = False,
    steps: int = 1_000_000,
    sets: tuple[str, ...] = CPU_LEARNING_SETS,
) -> Path:
    runs = out / f"{preset}_s{seed}"
    cmd = [sys.executable, "-m", "foxhunt_ray.local", "--preset", preset, "--seed", str(seed), "--quiet"]
    cmd += ["--serial"] if serial else []
    cmd += ["--steps", str(steps), "--time-limit-s", str(minutes * 60), "--rollout-workers", str(workers)]
    cmd += ["--checkpoint-every", "1000", "--out", str(runs)]
    for s in sets:
        cmd += ["--set", s]
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, cwd=ROOT, check=False)
    found = sorted(runs.glob("*/0"))
    if done.returncode not in (0, 3) or not found:
        raise SystemExit(f"training {preset} seed {seed} failed (exit {done.returncode}); see its output above")
    return found[-1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--presets", nargs="+", default=["phase4_3"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--minutes", type=float, default=30.0, help="training budget per run (wall clock)")
    p.add_argument("--episodes", type=int, default=128, help="held-out episodes per policy")
    p.add_argument("--rollout-workers", type=int, default=1)
    p.add_argument("--out", default="runs/learning", help="where the run folders and learning.json go")
    p.add_argument("--serial", action="store_true", help="train without Ray: every role in one process, one core")
    p.add_argument("--steps", type=int, default=1_000_000, help="stop at this many updates (or at --minutes)")
    p.add_argument(
        "--preset-settings", action="store_true",
        help="train at the presets' own (GPU production) settings instead of CPU_LEARNING_SETS",
    )  # fmt: skip
    args = p.parse_args(argv)
    torch.set_num_threads(1)  # the evaluation here; training runs in its own processes
    out = Path(args.out).resolve()
    rows = []
    for preset in args.presets:
        for seed in args.seeds:
            start = time.monotonic()
            sets = () if args.preset_settings else CPU_LEARNING_SETS
            run_dir = train(preset, seed, args.minutes, out, args.rollout_workers, args.serial, args.steps, sets)
            wall = time.monotonic() - start
            summary = json.loads((run_dir / "summary.json").read_text())
            ev = evaluate_run(run_dir, episodes=args.episodes, progress=lambda line: print(line, flush=True))
            pol = ev["policies"]
            agent = pol["agent"]["pnl_usd_mean"]
            others = {k: v["pnl_usd_mean"] for k, v in pol.items() if k not in ("agent", "oracle")}
            row = {
                "preset": preset,
                "seed": seed,
                "run_dir": str(run_dir),
                "status": summary["status"],
                "rule": summary.get("rule"),
                "updates": summary["step"],
                "train_wall_s": round(wall, 1),
                "mode": "serial" if args.serial else "ray",
                "agent_pnl_usd": agent,
                "agent_pnl_sem": pol["agent"]["pnl_usd_sem"],
                "oracle_pnl_usd": pol["oracle"]["pnl_usd_mean"],
                "oracle_fraction": ev.get("oracle_fraction"),
                "baselines_pnl_usd": others,
                "beats_every_baseline": all(agent > v for v in others.values()),
                "qpa_ema_last": (summary.get("last") or {}).get("qpa_ema"),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    out.mkdir(parents=True, exist_ok=True)
    sets = [] if args.preset_settings else list(CPU_LEARNING_SETS)
    (out / "learning.json").write_text(json.dumps({"sets": sets, "runs": rows}, indent=2) + "\n")
    print(f"\n{'preset':<10} {'seed':>4} {'status':>7} {'updates':>7} {'agent $':>8} {'oracle $':>8} {'frac':>5} beats")
    for r in rows:
        print(
            f"{r['preset']:<10} {r['seed']:>4} {r['status']:>7} {r['updates']:>7} {r['agent_pnl_usd']:>8.0f} "
            f"{r['oracle_pnl_usd']:>8.0f} {r['oracle_fraction']:>5.2f} {r['beats_every_baseline']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Does it learn? Train presets on the synthetic market within a wall-clock budget, then score them held out.

For each preset and seed: `python -m foxhunt_ray.local` (Ray in-process: the learner actor, rollout actors and
the monitor actor) with `--time-limit-s` and the presets' own settings (foxhunt_ray/presets.py: settings 'learn',
sizing 'cpu' when torch sees no CUDA device, else 'gpu'; `--settings`, `--sizing` choose), then
`foxhunt_ray.evaluate` of the newest checkpoint on the fold's held-out episodes beside flat, random, imbalance and
the oracle. Prints one row per run and writes OUT/learning.json; the run folders (diag.jsonl, evaluation.json)
stay under OUT for `python -m foxhunt_ray.report`.

    .venv/bin/python benchmarks/bench_learning.py                          # phase4_3, seeds 0 1 2, 30 min each
    .venv/bin/python benchmarks/bench_learning.py --presets plan_a_v2 phase4_2 phase4_3 --minutes 10 --seeds 0
    python3 benchmarks/bench_learning.py --serial --presets phase3_1 --seeds 1 --minutes 7   # no Ray: one core
    .venv/bin/python benchmarks/bench_learning.py --settings seed --sizing gpu ...   # the seed's own values

Results with dates and machines: BENCHMARKS.md, "Learning on the synthetic market". Until 2026-12-03 the settings that
learn lived here as CPU_LEARNING_SETS (--set overrides); they are the presets' 'learn' settings and 'cpu' sizing now,
with the reward scale derived from the market (0.032) instead of the sweep's 0.04.
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
from foxhunt_ray.run_folder import read_config_doc  # noqa: E402


def train(
    preset: str,
    seed: int,
    minutes: float,
    out: Path,
    workers: int,
    serial: bool = False,
    steps: int = 1_000_000,
    choices: tuple[str, ...] = (),
) -> Path:
    runs = out / f"{preset}_s{seed}"
    cmd = [sys.executable, "-m", "foxhunt_ray.local", "--preset", preset, "--seed", str(seed), "--quiet"]
    cmd += ["--serial"] if serial else []
    cmd += ["--steps", str(steps), "--time-limit-s", str(minutes * 60), "--rollout-workers", str(workers)]
    cmd += ["--checkpoint-every", "1000", "--out", str(runs)]
    cmd += list(choices)
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, cwd=ROOT, check=False)
    found = sorted(runs.glob("*/*/0"))  # OUT/<code_sha>/<name>/<fold>
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
    p.add_argument("--settings", default=None, help="the presets' settings group (default: theirs, 'learn')")
    p.add_argument("--sizing", default=None, help="the presets' sizing (default: local's, cpu without CUDA)")
    args = p.parse_args(argv)
    choices = (*("--settings", args.settings) * bool(args.settings), *("--sizing", args.sizing) * bool(args.sizing))
    torch.set_num_threads(1)  # the evaluation here; training runs in its own processes
    out = Path(args.out).resolve()
    rows = []
    for preset in args.presets:
        for seed in args.seeds:
            start = time.monotonic()
            run_dir = train(preset, seed, args.minutes, out, args.rollout_workers, args.serial, args.steps, choices)
            wall = time.monotonic() - start
            summary = json.loads((run_dir / "summary.json").read_text())
            ran = read_config_doc(run_dir)["run"]
            ev = evaluate_run(run_dir, episodes=args.episodes, progress=lambda line: print(line, flush=True))
            pol = ev["policies"]
            agent = pol["agent"]["pnl_usd_mean"]
            others = {k: v["pnl_usd_mean"] for k, v in pol.items() if k not in ("agent", "oracle")}
            row = {
                "preset": preset,
                "seed": seed,
                "settings": ran.get("settings"),
                "sizing": ran.get("sizing"),
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
    (out / "learning.json").write_text(json.dumps({"choices": list(choices), "runs": rows}, indent=2) + "\n")
    print(f"\n{'preset':<10} {'seed':>4} {'status':>7} {'updates':>7} {'agent $':>8} {'oracle $':>8} {'frac':>5} beats")
    for r in rows:
        print(
            f"{r['preset']:<10} {r['seed']:>4} {r['status']:>7} {r['updates']:>7} {r['agent_pnl_usd']:>8.0f} "
            f"{r['oracle_pnl_usd']:>8.0f} {r['oracle_fraction']:>5.2f} {r['beats_every_baseline']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

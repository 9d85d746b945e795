"""The seed's experiments side by side: qpa, PnL and the kill rules of bench_learning runs against a baseline.

Reads the OUT/learning.json that `bench_learning.py` wrote and each run's diag.jsonl. Per run: the updates
reached, qpa_ema and pnl_cum_usd at fixed steps, the lowest qpa_ema after the warm-up, the held-out PnL, and
two kill verdicts:
  - live: what the monitor actor did during the run (summary.json: done, or the rule and step that killed it);
  - replayed: the run's step lines fed, in order, through the monitor's own `KillRules` with the baseline
    preset's run as the baseline (bench_learning trains without --baseline, so the pnl_deficit rule and the
    baseline l_c51 reference were not armed live). The first rule that fires, and its step, is what the
    monitor would have done had the run been started with `--baseline BASELINE_RUN`.

    .venv/bin/python benchmarks/ablation_table.py runs/learning/abl/learning.json --baseline plan_a_v2

Prints a markdown table (BENCHMARKS.md, "The seed's experiments as ablation presets"); --json writes the rows.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from actors.diag_file import DiagFileError, read_diag, step_records  # noqa: E402
from actors.kill_rules import KillConfig, KillRules  # noqa: E402
from foxhunt_ray.run_folder import read_config_doc  # noqa: E402

DEFAULT_STEPS = (250, 500, 750, 1000, 2000, 5000)


def _at(records: list[dict], step: int, key: str) -> float | None:
    """key of the last step line at or before `step`; None when the run never got that far."""
    if not records or records[-1]["step"] < step:
        return None
    best = None
    for r in records:
        if r["step"] > step:
            break
        best = r
    return None if best is None else best.get(key)


def replay(records: list[dict], kill: KillConfig, baseline: dict[int, dict] | None) -> dict | None:
    """The first kill decision of the monitor's rules over `records` (copies: qpa_ema is recomputed)."""
    rules = KillRules(kill, baseline)
    for r in records:
        decision = rules.check(dict(r))
        if decision is not None:
            return {"rule": decision.rule, "step": decision.step, "message": decision.message}
    return None


def summarize(run: dict, baseline: dict[int, dict] | None, steps: tuple[int, ...]) -> dict:
    """One table row from a learning.json run entry."""
    run_dir = Path(run["run_dir"])
    records = step_records(read_diag(run_dir / "diag.jsonl"))
    if not records:
        raise SystemExit(f"{run_dir}/diag.jsonl has no step lines: the run did not train; re-run bench_learning")
    config = read_config_doc(run_dir)
    kill = KillConfig(**config["run"]["kill"])
    after = [r for r in records if r["step"] > kill.qpa_warmup_steps and r.get("qpa_ema") is not None]
    low = min(after, key=lambda r: r["qpa_ema"]) if after else None
    return {
        "preset": run["preset"],
        "seed": run["seed"],
        "run_dir": str(run_dir),
        "updates": records[-1]["step"],
        "live": {"status": run["status"], "rule": run["rule"], "step": records[-1]["step"]},
        "replayed": replay(records, kill, baseline),
        "qpa_ema": {s: _at(records, s, "qpa_ema") for s in steps},
        "qpa_ema_min": None if low is None else {"value": low["qpa_ema"], "step": low["step"]},
        "qpa_ema_last": records[-1].get("qpa_ema"),
        "pnl_cum_usd": {s: _at(records, s, "pnl_cum_usd") for s in steps},
        "pnl_cum_usd_last": records[-1].get("pnl_cum_usd"),
        "heldout_pnl_usd": run["agent_pnl_usd"],
        "heldout_pnl_sem": run["agent_pnl_sem"],
        "oracle_fraction": run["oracle_fraction"],
        "beats_every_baseline": run["beats_every_baseline"],
    }


CURVE_KEYS = ("qpa", "qpa_ema", "pnl_cum_usd", "l_c51", "l_iqn")


def write_curves(rows: list[dict], path: Path, every: int) -> None:
    """One CSV line per run and `every` steps (the first step line of each bucket): the learning curves."""
    with path.open("w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["preset", "seed", "step", *CURVE_KEYS])
        for row in rows:
            last = -1
            for r in step_records(read_diag(Path(row["run_dir"]) / "diag.jsonl")):
                if r["step"] // every == last:
                    continue
                last = r["step"] // every
                out.writerow([row["preset"], row["seed"], r["step"], *(r.get(k) for k in CURVE_KEYS)])


def _f(v, fmt: str) -> str:
    return "—" if v is None else format(v, fmt)


def markdown(rows: list[dict], steps: tuple[int, ...]) -> str:
    head = ["preset", "seed", "updates", *[f"qpa_ema @{s}" for s in steps], "min qpa_ema (step)", "qpa_ema last"]
    head += ["pnl_cum @5000", "pnl_cum last", "held-out $ (sem)", "of oracle", "live", "replayed vs baseline"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        low = r["qpa_ema_min"]
        live = r["live"]["status"] if r["live"]["rule"] is None else f"killed: {r['live']['rule']} @{r['live']['step']}"
        rep = "no rule fires" if r["replayed"] is None else f"{r['replayed']['rule']} @{r['replayed']['step']}"
        cells = [r["preset"], str(r["seed"]), str(r["updates"]), *[_f(r["qpa_ema"][s], ".3f") for s in steps]]
        cells += ["—" if low is None else f"{low['value']:.3f} ({low['step']})", _f(r["qpa_ema_last"], ".3f")]
        cells += [_f(r["pnl_cum_usd"].get(5000), ",.0f"), _f(r["pnl_cum_usd_last"], ",.0f")]
        cells += [f"{r['heldout_pnl_usd']:,.0f} ({r['heldout_pnl_sem']:.0f})", f"{r['oracle_fraction']:.3f}", live, rep]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("learning_json", type=Path, nargs="+", help="OUT/learning.json files of bench_learning.py")
    parser.add_argument("--baseline", default="plan_a_v2", help="preset whose run (same seed) is the baseline")
    parser.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)), help="table steps, e.g. 500,1000")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--curves", type=Path, help="also write the learning curves here (CSV)")
    parser.add_argument("--every", type=int, default=100, help="curve resolution in updates (100)")
    args = parser.parse_args(argv)
    runs = []
    for path in args.learning_json:
        try:
            runs += json.loads(path.read_text())["runs"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise SystemExit(f"cannot read {path}: {err!r}; pass the learning.json that bench_learning wrote") from None
    try:
        steps = tuple(int(s) for s in args.steps.split(","))
    except ValueError:
        raise SystemExit(f"--steps {args.steps!r} must be comma-separated integers, e.g. 500,1000") from None
    runs.sort(key=lambda r: (r["seed"], r["preset"] != args.baseline))
    base_runs = {r["seed"]: r for r in runs if r["preset"] == args.baseline}
    rows = []
    try:
        for run in runs:
            base = base_runs.get(run["seed"])
            baseline = None
            if base is not None and run is not base:
                baseline = {r["step"]: r for r in step_records(read_diag(Path(base["run_dir"]) / "diag.jsonl"))}
            rows.append(summarize(run, baseline, steps))
    except (DiagFileError, OSError, KeyError) as err:
        raise SystemExit(f"a run folder is unreadable: {err!r}; re-run bench_learning for it") from None
    print(markdown(rows, steps))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.curves:
        write_curves(rows, args.curves, max(1, args.every))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The sim-to-real comparison: bench_walkforward's records of one cache and folds trained on real windows, on the
calibrated synthetic flow and on both (--train-on), side by side on the same held-out test periods.

    python benchmarks/sim_to_real_table.py WALKFORWARD.json [MORE.json ...]  [--out FILE.md]

For each mode and fold: the agent's test PnL per window, the best rule's (the strictest of flat, imbalance and the
tuned quoting rule on that fold's test), agent minus it with its 95 % interval (seeds and windows resampled), whether
the interval lies above 0, and the hindsight bound; then per mode the means over folds and the folds beaten, and
per fold each mode's agent minus real's (the same test windows: every mode plays the fold's test seed). A record
without `train_on` (made before --train-on) trained on real windows. Only the folds every file holds are compared
(the others are named below the tables). docs/evaluation.md, "Walk-forward".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ORDER = ("real", "synthetic", "both")


def load(paths: list[str]) -> dict[str, dict]:
    """mode -> {fold: record} on the folds every file holds; each file one mode (refused otherwise, or a mode given
    twice)."""
    modes: dict[str, dict] = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        found = {f.get("train_on", "real") for f in doc["folds"]}
        if len(found) != 1:
            raise SystemExit(f"error: {path} holds folds of several modes {sorted(found)}: one bench run a file")
        mode = found.pop()
        if mode in modes:
            raise SystemExit(f"error: {path}: a second file of --train-on {mode}; give one file a mode")
        modes[mode] = {f["fold"]: f for f in doc["folds"]}
    common = set.intersection(*(set(m) for m in modes.values()))
    if not common:
        raise SystemExit(f"error: no fold in every file ({[sorted(m) for m in modes.values()]}): nothing to compare")
    return {m: {k: f for k, f in modes[m].items() if k in common} for m in ORDER if m in modes}


def left_out(paths: list[str], kept: dict[str, dict]) -> list[str]:
    """The folds of a file that not every file holds (left out of the comparison), in words."""
    common = set(next(iter(kept.values())))
    out = []
    for path in paths:
        folds = {f["fold"] for f in json.loads(Path(path).read_text())["folds"]}
        if extra := sorted(folds - common):
            out.append(f"{path}: fold(s) {extra} left out (not in every file)")
    return out


def table(modes: dict[str, dict]) -> str:
    rows = ["| trained on | fold | test | seeds | agent | best rule | agent - best [95 % CI] | beaten | hindsight |",
            "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    summary = ["", "| trained on | folds | agent (mean over folds) | best rule (mean) | agent - best (mean) | beaten |",
               "|---|---|---|---|---|---|"]  # fmt: skip
    for mode, folds in modes.items():
        gaps, agents, bests, beaten = [], [], [], 0
        for k, f in sorted(folds.items()):
            p, best = f["policies"], f["best_baseline"]
            v = f["versus"][best]
            lo, hi = v["ci95_usd"]
            name = mode if mode != "both" else f"both ({f['synthetic_share']:.0%} synthetic)"
            rows.append(
                f"| {name} | {k} | {', '.join(d.rsplit('/', 1)[-1] for d in f['test_days'])} | {len(f['seeds'])} | "
                f"{p['agent']['pnl_usd_mean']:+.2f} | {best} {p[best]['pnl_usd_mean']:+.2f} | {v['mean_usd']:+.2f} "
                f"[{lo:+.2f}, {hi:+.2f}] | {'yes' if lo > 0 else 'no'} | {p['hindsight']['pnl_usd_mean']:+.2f} |"
            )
            gaps.append(v["mean_usd"])
            agents.append(p["agent"]["pnl_usd_mean"])
            bests.append(p[best]["pnl_usd_mean"])
            beaten += lo > 0
        n = len(folds)
        summary.append(f"| {mode} | {n} | {sum(agents) / n:+.2f} | {sum(bests) / n:+.2f} | {sum(gaps) / n:+.2f} | "
                       f"{beaten}/{n} |")  # fmt: skip
    out = rows + summary
    if "real" in modes and len(modes) > 1:
        out += ["", "| fold | " + " | ".join(f"{m} - real (agent)" for m in modes if m != "real") + " |",
                "|---|" + "---|" * (len(modes) - 1)]  # fmt: skip
        for k in sorted(modes["real"]):
            real = modes["real"][k]["policies"]["agent"]
            cells = []
            for m in modes:
                if m == "real":
                    continue
                a = modes[m][k]["policies"]["agent"]
                seeds = " ".join(f"{x:+.1f}" for x in a["per_seed_usd"])
                cells.append(f"{a['pnl_usd_mean'] - real['pnl_usd_mean']:+.2f} (seeds {seeds}; real "
                             f"{' '.join(f'{x:+.1f}' for x in real['per_seed_usd'])})")  # fmt: skip
            out.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("records", nargs="+", metavar="WALKFORWARD.json", help="bench_walkforward's record, one a mode")
    p.add_argument("--out", default=None, metavar="FILE.md", help="also write the tables here")
    args = p.parse_args(argv)
    kept = load(args.records)
    text = "\n".join([table(kept), *(f"\n{line}" for line in left_out(args.records, kept))])
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

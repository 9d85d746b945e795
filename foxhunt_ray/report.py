"""`python -m foxhunt_ray.report RUN_DIR [RUN_DIR ...]`: plots and a side-by-side table of runs.

Reads each run folder (OUT/<code_sha>/<name>/<fold>/, OUT/latest for the newest run, or a run's `--storage` URI,
copied into a temporary folder first: config.json, diag.jsonl, summary.json, and the evaluation records
`python -m foxhunt_ray.evaluate` keeps, evaluations/*.json, or an older run's evaluation.json) and writes, into
`--out` (default `reports/<timestamp>/`):

- one PNG per plot kind, the runs overlaid and labelled `<preset> seed <seed>`: pnl_cum_usd.png (the market),
  episode_return_mean.png (any other env: the mean return of the last 100 episodes), qpa.png (qpa thin, qpa_ema
  thick, the kill threshold and the warm-up step), losses.png (one panel per loss), values.png (V_dq against
  V_scalar), throughput.png (env steps/s and updates/s, each the growth of the count over a trailing window of wall
  time, and over the whole run in the legend); a killed run's kill is marked (a vertical line and the rule's name)
  at its step on every panel;
- report.md: the runs, the table and the plots. The table, one row per run, holds the status (a kill with its
  rule, step and value, like the seed's "❌ Cluster step 745: qpa=-0.93") and the values of qpa_ema, pnl_cum_usd
  (or episode_return_mean on another env), l_c51 and l_dueling at equal steps (25 %, 50 % and 100 % of the
  shortest run, or `--steps`), so runs are compared where all of them got to; plus the newest synthetic held-out
  evaluation when there is one. Then every evaluation, one row each, with its market (synthetic or LOBSTER), fold
  or day, checkpoint and episodes; a row of a real LOBSTER day says it has no oracle, is one day and lies outside
  the training distribution, and the notes under the table say so in full. Both are also printed.

A run folder is only read, never written. A key a run does not log (no dueling head: v_dq_mean and l_dueling are
0; a market without pnl) is left out of that run's plots, and a plot no run has data for is skipped with a note.
Long runs are binned to at most `--max-points` points per line for plotting; the table reads the exact lines.

Plain functions for tests and notebooks: `load_run(run_dir) -> Run`, `runs_table(runs, steps=None) -> str`,
`table_rows(runs, steps)`, `evaluations_table(runs) -> str`, `write_report(runs, out_dir) -> list[Path]`. Their
homes, one job each: reading run folders in foxhunt_ray/report_runs.py, the tables in report_table.py, the figures
in report_plots.py; this module writes the report and is the command, and re-exports them (`__all__`).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from actors.diag_file import DIAG_FILE
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.report_plots import (
    MAX_POINTS,
    PLOTS,
    downsample,
    overall_rate,
    plot_losses,
    plot_pnl,
    plot_qpa,
    plot_returns,
    plot_throughput,
    plot_values,
    rate_window_s,
    smooth,
    throughput,
)
from foxhunt_ray.report_runs import (
    RETURN_KEY,
    Log,
    ReportError,
    Run,
    label_runs,
    load_run,
    load_runs,
    short_sha,
    shows_return,
)
from foxhunt_ray.report_table import (
    DEFAULT_FRACTIONS,
    MISSING,
    SYNTHETIC_PNL,
    TABLE_KEYS,
    default_steps,
    evaluation_cells,
    evaluations_table,
    format_value,
    runs_table,
    status_cell,
    table_keys,
    table_rows,
)
from foxhunt_ray.run_folder import CONFIG_FILE

__all__ = [
    "DEFAULT_FRACTIONS",
    "MAX_POINTS",
    "MISSING",
    "PLOTS",
    "REPORT_FILE",
    "RETURN_KEY",
    "RUN_FILES",
    "SYNTHETIC_PNL",
    "TABLE_KEYS",
    "ReportError",
    "Run",
    "check_out_dir",
    "default_out_dir",
    "default_steps",
    "downsample",
    "evaluation_cells",
    "evaluations_table",
    "format_value",
    "label_runs",
    "load_run",
    "load_runs",
    "main",
    "overall_rate",
    "parse_steps",
    "plot_losses",
    "plot_pnl",
    "plot_qpa",
    "plot_returns",
    "plot_throughput",
    "plot_values",
    "rate_window_s",
    "report_markdown",
    "runs_table",
    "short_sha",
    "shows_return",
    "smooth",
    "status_cell",
    "table_keys",
    "table_rows",
    "throughput",
    "write_report",
]

REPORT_FILE = "report.md"
RUN_FILES = (DIAG_FILE, SUMMARY_FILE, CONFIG_FILE)
"""A folder holding any of these is a run folder: a report is never written into one."""


def check_out_dir(out_dir: Path, runs: Sequence[Run]) -> None:
    """Refuses an output folder that is a run folder (a report never writes beside a run's own files)."""
    resolved = out_dir.resolve()
    if any(resolved == r.path.resolve() for r in runs) or any((out_dir / f).exists() for f in RUN_FILES):
        raise ReportError(
            f"--out {out_dir} is a run folder: a report never writes into one; pass another --out (e.g. reports/…)"
        )


def default_out_dir(root: Path = Path("reports")) -> Path:
    """reports/<YYYYmmdd-HHMMSS>/ (with -2, -3, ... when that exists already)."""
    stem = root / time.strftime("%Y%m%d-%H%M%S")
    out, n = stem, 1
    while out.exists():
        n += 1
        out = stem.with_name(f"{stem.name}-{n}")
    return out


def report_markdown(runs: Sequence[Run], steps: Sequence[int], plots: Sequence[Path], table: str) -> str:
    shortest = min(runs, key=lambda r: r.last_step)
    lines = [
        "# foxhunt_ray report",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S')}: {len(runs)} run(s).",
        "",
    ]
    lines += [
        f"- **{r.label}**: `{r.path}` ({r.env_id + ', ' if r.env_id else ''}{len(r.steps):,} steps, {r.status})"
        for r in runs
    ]
    lines += [
        "",
        f"Values at steps {', '.join(map(str, steps))} (the shortest run, {shortest.label}, ends at "
        f"{shortest.last_step}); {MISSING}: the run has no line at that step.",
        "",
        table,
    ]
    evaluations = evaluations_table(runs)
    if evaluations:
        lines += [
            "## Evaluations",
            "",
            "Every evaluation record of the runs (`python -m foxhunt_ray.evaluate`), with the market it played.",
            "",
            evaluations,
        ]
    for p in plots:
        lines += [f"![{p.stem}]({p.name})", ""]
    return "\n".join(lines)


def write_report(
    runs: Sequence[Run],
    out_dir: str | Path,
    *,
    steps: Sequence[int] | None = None,
    max_points: int = MAX_POINTS,
    log: Log = print,
) -> list[Path]:
    """Writes the plots and report.md into out_dir (created); returns their paths, report.md last. Labels the runs
    when they are not labelled yet. One progress line per file written or plot skipped."""
    if not runs:
        raise ReportError("no runs to report on: pass at least one run folder")
    if any(not r.label for r in runs):
        label_runs(runs)
    out = Path(out_dir)
    check_out_dir(out, runs)
    out.mkdir(parents=True, exist_ok=True)
    steps = list(steps) if steps else default_steps(runs)
    written: list[Path] = []
    for name, (plot, why) in PLOTS.items():
        start = time.perf_counter()
        fig = plot(runs, max_points)
        if fig is None:
            log(f"skipped {name}: {why}")
            continue
        path = out / name
        fig.savefig(path, format="png")
        written.append(path)
        log(f"wrote {path} ({time.perf_counter() - start:.2f}s)")
    table = runs_table(runs, steps)
    report = out / REPORT_FILE
    report.write_text(report_markdown(runs, steps, written, table))
    log(f"wrote {report}")
    written.append(report)
    return written


def parse_steps(text: str) -> list[int]:
    """'500,1000' -> [500, 1000]; ReportError naming the bad value otherwise."""
    try:
        steps = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        steps = []
    if not steps or any(s < 1 for s in steps):
        raise ReportError(f"--steps {text!r} must be learner steps >= 1 separated by commas, e.g. --steps 500,1000")
    return sorted(set(steps))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m foxhunt_ray.report",
        description="Plots and a side-by-side markdown table of foxhunt_ray runs (their run folders).",
    )
    p.add_argument(
        "run_dirs",
        nargs="+",
        metavar="RUN_DIR",
        help="run folders OUT/<code_sha>/<name>/<fold>/, OUT/latest (the newest run), or runs' --storage URIs",
    )
    p.add_argument("--out", default=None, metavar="DIR", help="output folder (default reports/<timestamp>/)")
    p.add_argument("--steps", default=None, help="table steps, e.g. 500,1000 (default 25/50/100%% of the shortest)")
    p.add_argument("--max-points", type=int, default=MAX_POINTS, help=f"points per plotted line ({MAX_POINTS})")
    args = p.parse_args(argv)
    try:
        if args.max_points < 3:
            raise ReportError(f"--max-points {args.max_points} must be >= 3")
        steps = parse_steps(args.steps) if args.steps is not None else None
        runs = load_runs(args.run_dirs, log=lambda s: print(s, flush=True))
        out = Path(args.out) if args.out is not None else default_out_dir()
        check_out_dir(out, runs)
        steps = steps or default_steps(runs)
        write_report(runs, out, steps=steps, max_points=args.max_points, log=lambda s: print(s, flush=True))
    except (ReportError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print()
    print(runs_table(runs, steps), end="", flush=True)
    evaluations = evaluations_table(runs)
    if evaluations:
        print("\nevaluations:\n" + evaluations, end="", flush=True)
    print(f"\nreport {out / REPORT_FILE}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

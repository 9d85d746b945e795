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
`table_rows(runs, steps)`, `evaluations_table(runs) -> str`, `write_report(runs, out_dir) -> list[Path]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from actors.diag_file import DIAG_FILE, DiagFileError, read_diag
from actors.files import MAX_TEXT_BYTES, kind_of, read_bounded
from actors.kill_rules import RULE_DUELING, RULE_NON_FINITE, RULE_PNL, RULE_QPA, KillConfig
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.evaluations import (
    LOBSTER,
    SYNTHETIC,
    Evaluation,
    EvaluationRecordError,
    caveat,
    day_of,
    newest_synthetic,
    read_evaluations,
    short_caveat,
)
from foxhunt_ray.run_folder import CONFIG_FILE, LATEST, RunFolderError, read_config_doc, resolve_run_dir
from foxhunt_ray.storage import StorageError, fetch_to_temp, is_uri
from learner.diag import LOSS_KEYS
from lobsim_env.validation import InputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

REPORT_FILE = "report.md"
RUN_FILES = (DIAG_FILE, SUMMARY_FILE, CONFIG_FILE)
"""A folder holding any of these is a run folder: a report is never written into one."""
TABLE_KEYS: tuple[str, ...] = ("qpa_ema", "pnl_cum_usd", "l_c51", "l_dueling")
"""The diag keys the table shows at each of its steps for runs on the market (table_keys: other envs')."""
RETURN_KEY = "episode_return_mean"
"""What a run on an env without pnl (CartPole, ...) logs of its outcome: the mean return of its last 100 ended
episodes (actors.episode_stats). The market logs it too (its episode return is its pnl), and is shown by
pnl_cum_usd."""

DEFAULT_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 1.0)
"""Default table steps: these fractions of the shortest run's last step."""
MAX_POINTS = 2000
"""Points per plotted line; a longer run is binned (mean per bin) down to this."""
MISSING = "—"

Log = Callable[[str], None]


class ReportError(InputError):
    """A bad input to the report (a run folder, a file in it, a flag); the message names it and the fix."""


@dataclass(kw_only=True)
class Run:
    """One run folder, read: its identity, its end, and its diag lines as columns (one value per step line)."""

    path: Path
    label: str
    preset: str | None
    env_id: str | None
    """The Gymnasium env the run trained (None for a run of code that stamped none: the market)."""
    seed: int | None
    fold: int | None
    code_sha: str | None
    status: str
    """done / killed / stopped / error from summary.json; 'running' when there is none yet."""
    kill: dict | None
    """The kill record ({"event": "kill", "rule", "step", "message", "values"}), or None."""
    summary: dict | None
    kill_config: KillConfig
    steps: np.ndarray
    columns: dict[str, np.ndarray] = field(repr=False)
    """diag key -> float64 values per step line (NaN where the line has no such number; see `present`)."""
    present: dict[str, np.ndarray] = field(repr=False)
    """diag key -> bool per step line: the line carries a number under that key."""
    evaluation: dict | None = None
    """The newest synthetic evaluation record (the runs table's held-out columns), or None."""
    evaluations: list[Evaluation] = field(default_factory=list)
    """Every evaluation record of the run folder, of any market (the evaluations table)."""
    torn_tail: bool = False
    """The diag.jsonl ends in a partial line (a crash mid-write); read_diag skipped it."""

    @property
    def last_step(self) -> int:
        return int(self.steps[-1]) if len(self.steps) else 0

    def has(self, key: str) -> bool:
        """The run logs `key` with some value other than 0 (a head that is off logs 0 throughout)."""
        if key not in self.columns:
            return False
        values = self.columns[key][self.present[key]]
        return bool(len(values)) and bool(np.any(values != 0))

    def value(self, key: str, step: int) -> float | None:
        """The diag line's value of `key` at `step`, or None when there is no such line or key."""
        i = int(np.searchsorted(self.steps, step))
        if i >= len(self.steps) or self.steps[i] != step or key not in self.columns or not self.present[key][i]:
            return None
        return float(self.columns[key][i])

    @property
    def kill_step(self) -> int | None:
        return int(self.kill["step"]) if self.kill else None


# ---------------------------------------------------------------------------------------------------------- load


def _read_json(path: Path, what: str, fix: str) -> dict | None:
    if not os.path.lexists(path):
        return None
    try:  # a FIFO or /dev/zero is named, not read
        doc = json.loads(read_bounded(path, MAX_TEXT_BYTES))
    except (OSError, ValueError) as err:
        raise ReportError(f"{path}: {what} is not readable JSON ({err}); {fix}") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: {what} must be a JSON object, got {type(doc).__name__}; {fix}")
    return doc


def _runs_below(path: Path) -> list[Path]:
    """Run folders under `path` (OUT/<code_sha>/<name>/<fold>/ below a runs root, a code_sha or a name folder; the
    OUT/latest pointer left out: it names one of them)."""
    found = []
    for pattern in ("*", "*/*", "*/*/*"):
        diags = path.glob(f"{pattern}/{DIAG_FILE}")
        found += sorted(p.parent for p in diags if LATEST not in p.relative_to(path).parts)
    return found


def _columns(records: list[dict]) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    n = len(records)
    steps = np.array([r["step"] for r in records], dtype=np.int64)
    columns: dict[str, np.ndarray] = {}
    present: dict[str, np.ndarray] = {}
    for i, rec in enumerate(records):
        for key, v in rec.items():
            if isinstance(v, bool) or not isinstance(v, int | float):
                continue
            if key not in columns:
                columns[key] = np.full(n, np.nan)
                present[key] = np.zeros(n, dtype=bool)
            columns[key][i] = v
            present[key][i] = True
    if n and np.any(np.diff(steps) <= 0):  # the monitor never writes this; sort so lookups stay right anyway
        order = np.argsort(steps, kind="stable")
        steps = steps[order]
        columns = {k: v[order] for k, v in columns.items()}
        present = {k: v[order] for k, v in present.items()}
    return steps, columns, present


def _kill_config(config: dict | None, path: Path) -> KillConfig:
    kill = ((config or {}).get("run") or {}).get("kill") or {}
    known = {k: v for k, v in kill.items() if k in KillConfig.__dataclass_fields__}
    try:
        return KillConfig(**known)
    except TypeError as err:
        raise ReportError(
            f"{path / CONFIG_FILE}: run.kill unreadable ({err}); pass a run folder the driver wrote"
        ) from None


def _ends_torn(path: Path) -> bool:
    """The file's last byte is not a newline: a partial last line, which read_diag skips."""
    with open(path, "rb") as f:
        if f.seek(0, 2) == 0:
            return False
        f.seek(-1, 2)
        return f.read(1) != b"\n"


def load_run(run_dir: str | Path) -> Run:
    """Reads one run folder (or OUT/latest, or a run's storage URI); raises ReportError naming the path and the
    fix."""
    if is_uri(str(run_dir)):
        try:
            path, _ = fetch_to_temp(str(run_dir), checkpoints=False)  # a report reads no checkpoint
        except (StorageError, OSError) as err:
            raise ReportError(f"cannot read the run {run_dir}: {err}") from None
    else:
        path = resolve_run_dir(run_dir)
    if not path.is_dir():
        what = "does not exist" if kind_of(path) == "missing" else f"is {kind_of(path)}, not a folder"
        raise ReportError(
            f"run folder {path} {what}: pass a run folder OUT/<code_sha>/<name>/<fold>/ (e.g. runs/latest)"
        )
    diag_path = path / DIAG_FILE
    if not os.path.lexists(diag_path):  # anything else there (a FIFO, a link to /dev/zero): read_diag names it
        below = _runs_below(path)
        hint = (
            "it holds the run folders " + ", ".join(str(p) for p in below[:8]) + (" …" if len(below) > 8 else "")
            if below
            else "pass a run folder OUT/<code_sha>/<name>/<fold>/ that a run has written"
        )
        raise ReportError(f"{path} has no {DIAG_FILE}: {hint}")
    try:
        records = read_diag(diag_path)
    except DiagFileError as err:
        raise ReportError(f"{err} (report on a copy with the line removed, or drop this run)") from None
    torn = _ends_torn(diag_path)
    step_lines = [r for r in records if "event" not in r]
    if not step_lines:
        raise ReportError(f"{diag_path} has no step lines: the run never finished an update; drop it from the report")
    kills = [r for r in records if r.get("event") == "kill"]
    try:
        config = read_config_doc(path, missing_ok=True)
    except RunFolderError as err:
        raise ReportError(str(err)) from None
    summary = _read_json(path / SUMMARY_FILE, "summary.json", "re-run or resume the run, or delete the file")
    try:
        evaluations = read_evaluations(path)
    except EvaluationRecordError as err:
        raise ReportError(str(err)) from None
    synthetic = newest_synthetic(evaluations)
    run_cfg = (config or {}).get("run") or {}
    first = step_lines[0]
    kill = kills[-1] if kills else None
    if kill is None and summary and summary.get("status") == "killed":  # a summary without the diag line
        kill = {"event": "kill", **{k: summary.get(k) for k in ("rule", "step", "message", "values")}}
    status = str(summary["status"]) if summary and "status" in summary else ("killed" if kill else "running")
    fold = ((config or {}).get("driver") or {}).get("fold", first.get("fold"))
    steps, columns, present = _columns(step_lines)
    return Run(
        path=path,
        label="",
        preset=run_cfg.get("preset", first.get("preset")),
        env_id=run_cfg.get("env_id", first.get("env_id")),
        seed=run_cfg.get("seed"),
        fold=fold if isinstance(fold, int) else None,
        code_sha=(config or {}).get("code_sha", first.get("code_sha")),
        status=status,
        kill=kill,
        summary=summary,
        kill_config=_kill_config(config, path),
        steps=steps,
        columns=columns,
        present=present,
        evaluation=synthetic.record if synthetic is not None else None,
        evaluations=evaluations,
        torn_tail=bool(torn),
    )


def label_runs(runs: Sequence[Run]) -> None:
    """Sets each run's label: '<preset> seed <seed>' (the folder name when the run has no preset); runs that share
    a label get the first of fold, short code_sha, folder (relative to their common parent) that tells them apart."""

    def base(r: Run) -> str:
        if r.preset is None:
            return f"{r.path.parent.name}/{r.path.name}"
        return r.preset + (f" seed {r.seed}" if r.seed is not None else "")

    labels = [base(r) for r in runs]
    for lab in set(labels):
        group = [i for i, other in enumerate(labels) if other == lab]
        if len(group) < 2:
            continue
        common = Path(os.path.commonpath([runs[i].path.resolve() for i in group]))
        extras = (
            lambda r: f"fold {r.fold}",
            lambda r: short_sha(r.code_sha),
            lambda r, common=common: "/".join(
                part if len(part) <= 12 else part[:9] + "…" for part in r.path.resolve().relative_to(common).parts
            ),
        )
        for extra in extras:
            tags = [extra(runs[i]) for i in group]
            if len(set(tags)) == len(tags):
                for i, tag in zip(group, tags, strict=True):
                    labels[i] = f"{lab} {tag}"
                break
        else:  # the same folder twice: number them
            for n, i in enumerate(group, start=1):
                labels[i] = f"{lab} #{n}"
    for r, lab in zip(runs, labels, strict=True):
        r.label = lab


def load_runs(run_dirs: Sequence[str | Path], log: Log = print) -> list[Run]:
    """load_run for each folder (one progress line each), then label_runs."""
    runs = []
    for i, d in enumerate(run_dirs, start=1):
        start = time.perf_counter()
        run = load_run(d)
        runs.append(run)
        torn = "; a partial last line skipped" if run.torn_tail else ""
        env = f", trained on {run.env_id}" if run.env_id else ""
        log(
            f"loaded run {i}/{len(run_dirs)} {run.path}: {len(run.steps):,} steps to {run.last_step}, "
            f"{run.status}{torn}{env} ({time.perf_counter() - start:.2f}s)"
        )
    label_runs(runs)
    return runs


# --------------------------------------------------------------------------------------------------------- table


def short_sha(sha: str | None) -> str:
    if not sha:
        return "?"
    dirty = "-dirty" if sha.endswith("-dirty") else ""
    core = sha.removesuffix("-dirty")
    if core.startswith("content-"):
        return "content-" + core[8:16] + dirty
    return core[:9] + dirty


def default_steps(runs: Sequence[Run], fractions: Sequence[float] = DEFAULT_FRACTIONS) -> list[int]:
    """Steps every run reached: the fractions of the shortest run's last step (rounded, at least 1, unique)."""
    shortest = min(r.last_step for r in runs)
    return sorted({max(1, round(shortest * f)) for f in fractions})


def format_value(key: str, value: float | None) -> str:
    """A table cell: '—' for no value; qpa as +0.123, USD as $-1,234, losses with 4 significant digits."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return str(value)
    if key.startswith("qpa"):
        return f"{value:+.3f}"
    if key.endswith("_usd") or key.startswith("pnl"):
        return f"${value:,.0f}"
    return f"{value:.4g}"


def status_cell(run: Run) -> str:
    """'✅ done', or a kill in the seed's style: '❌ qpa_collapse step 745: qpa_ema=-0.930'."""
    if run.status == "killed" and run.kill:
        rule, step, values = run.kill.get("rule"), run.kill.get("step"), run.kill.get("values") or {}
        if rule == RULE_QPA:
            what = f"qpa_ema={format_value('qpa_ema', values.get('qpa_ema'))}"
            what += f" < {values['threshold']:g}" if isinstance(values.get("threshold"), int | float) else ""
        elif rule == RULE_NON_FINITE:
            bad = [k for k in values if k != "nan_abort_step"]
            what = f"{bad[0]}={values[bad[0]]}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "") if bad else ""
            what = what or f"nan_abort_step={values.get('nan_abort_step')}"
        elif rule == RULE_DUELING:
            what = f"l_dueling={format_value('l', values.get('l_dueling'))} > {values.get('ratio_max')} × ref"
        elif rule == RULE_PNL:
            what = f"pnl {format_value('pnl', values.get('pnl_cum_usd'))} vs baseline " + format_value(
                "pnl", values.get("baseline_pnl_cum_usd")
            )
        else:
            what = str(run.kill.get("message") or "")
        return f"❌ {rule} step {step}: {what}"
    step = (run.summary or {}).get("step", run.last_step)
    if run.status == "done":
        return "✅ done"
    if run.status == "stopped":
        return f"⏹ stopped step {step}"
    if run.status == "error":
        message = str((run.summary or {}).get("message") or "")[:80]
        return f"💥 error step {step}: {message}"
    return f"… {run.status} (no {SUMMARY_FILE}; last step {run.last_step})"


def _evaluation(run: Run) -> tuple[float | None, float | None, int | None]:
    """(held-out agent pnl_usd_mean, oracle_fraction, checkpoint_step) of the newest synthetic evaluation; None
    where absent."""
    ev = run.evaluation or {}

    def num(v) -> float | None:
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    agent = (ev.get("policies") or {}).get("agent") or {}
    step = ev.get("checkpoint_step")
    return num(agent.get("pnl_usd_mean")), num(ev.get("oracle_fraction")), step if isinstance(step, int) else None


def shows_return(run: Run) -> bool:
    """The run's outcome is its episode_return_mean: it logs that and no pnl_cum_usd (an env other than the market)."""
    return RETURN_KEY in run.columns and "pnl_cum_usd" not in run.columns


def table_keys(runs: Sequence[Run]) -> tuple[str, ...]:
    """TABLE_KEYS, with episode_return_mean after qpa_ema when a run's outcome is its return (shows_return), and
    pnl_cum_usd left out when no run logs it but some run shows its return."""
    has_return = any(shows_return(r) for r in runs)
    has_pnl = any("pnl_cum_usd" in r.columns for r in runs)
    keys = [k for k in TABLE_KEYS if k != "pnl_cum_usd" or has_pnl or not has_return]
    if has_return:
        keys.insert(keys.index("qpa_ema") + 1, RETURN_KEY)
    return tuple(keys)


def table_rows(runs: Sequence[Run], steps: Sequence[int]) -> list[dict]:
    """One dict per run: label, preset, code, status, last_step, values {(key, step): float | None} for the keys
    of table_keys(runs), and the newest synthetic evaluation (eval_pnl_usd, oracle_fraction, eval_step; None where
    there is none)."""
    keys = table_keys(runs)
    rows = []
    for r in runs:
        pnl, frac, ev_step = _evaluation(r)
        rows.append(
            {
                "label": r.label,
                "preset": r.preset,
                "code": short_sha(r.code_sha),
                "status": status_cell(r),
                "last_step": r.last_step,
                "values": {(k, s): r.value(k, s) for k in keys for s in steps},
                "eval_pnl_usd": pnl,
                "oracle_fraction": frac,
                "eval_step": ev_step,
            }
        )
    return rows


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def runs_table(runs: Sequence[Run], steps: Sequence[int] | None = None) -> str:
    """The markdown table, one row per run, values at `steps` (default_steps when None). Labels the runs when they
    are not labelled yet."""
    if any(not r.label for r in runs):
        label_runs(runs)
    steps = list(steps) if steps else default_steps(runs)
    rows = table_rows(runs, steps)
    keys = table_keys(runs)
    with_eval = any(r.evaluation is not None for r in runs)
    head = ["run", "preset", "code_sha", "status", "last step"] + [f"{k}@{s}" for k in keys for s in steps]
    if with_eval:
        head += [SYNTHETIC_PNL, "oracle fraction", "eval ckpt"]
    align = ["---"] * 4 + ["---:"] * (len(head) - 4)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(align) + "|"]
    for row in rows:
        cells = [row["label"], row["preset"] or MISSING, row["code"], row["status"], str(row["last_step"])]
        cells += [format_value(k, row["values"][(k, s)]) for k in keys for s in steps]
        if with_eval:
            cells += [
                format_value("pnl_usd", row["eval_pnl_usd"]),
                MISSING if row["oracle_fraction"] is None else f"{row['oracle_fraction']:.3f}",
                MISSING if row["eval_step"] is None else str(row["eval_step"]),
            ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


SYNTHETIC_PNL = "synthetic held-out agent PnL"
"""The runs table's column: the newest synthetic evaluation only (a LOBSTER day's figure is never put there)."""
EVALUATION_COLUMNS = (
    "run",
    "market",
    "fold / day",
    "ckpt",
    "episodes × steps",
    "agent PnL ± sem",
    "agent sharpe",
    "best baseline",
    "oracle PnL",
    "oracle fraction",
    "caveat",
)
NO_ORACLE = "no oracle"


def _pnl(value) -> str:
    return format_value("pnl_usd", float(value)) if isinstance(value, int | float) else MISSING


def evaluation_cells(run: Run, ev: Evaluation) -> dict[str, str]:
    """One row of the evaluations table: EVALUATION_COLUMNS -> cell text."""
    rec, market = ev.record, ev.market
    policies = rec.get("policies") or {}
    agent = policies.get("agent") or {}
    baselines = {n: m.get("pnl_usd_mean") for n, m in policies.items() if n not in ("agent", "oracle")}
    baselines = {n: v for n, v in baselines.items() if isinstance(v, int | float)}
    best = max(baselines, key=baselines.get) if baselines else None
    sharpe, frac = agent.get("sharpe"), rec.get("oracle_fraction")
    no_oracle = market == LOBSTER
    return {
        "run": run.label,
        "market": {SYNTHETIC: "synthetic", LOBSTER: "LOBSTER (real day)"}.get(market, "unknown"),
        "fold / day": day_of(rec),
        "ckpt": str(rec.get("checkpoint_step", MISSING)),
        "episodes × steps": f"{rec.get('episodes', '?')} × {rec.get('horizon', '?')}",
        "agent PnL ± sem": f"{_pnl(agent.get('pnl_usd_mean'))} ± {_pnl(agent.get('pnl_usd_sem')).lstrip('$')}",
        "agent sharpe": f"{sharpe:.3f}" if isinstance(sharpe, int | float) else MISSING,
        "best baseline": f"{best} {_pnl(baselines[best])}" if best else MISSING,
        "oracle PnL": NO_ORACLE if no_oracle else _pnl((policies.get("oracle") or {}).get("pnl_usd_mean")),
        "oracle fraction": NO_ORACLE if no_oracle else (f"{frac:.3f}" if isinstance(frac, int | float) else MISSING),
        "caveat": short_caveat(rec),
    }


def evaluations_table(runs: Sequence[Run]) -> str:
    """Every evaluation of every run, one row each with its market; '' when no run has one. Under the table, a
    note when synthetic and LOBSTER rows stand together, and each LOBSTER row's caveat in full."""
    if any(not r.label for r in runs):
        label_runs(runs)
    pairs = [(r, ev) for r in runs for ev in r.evaluations]
    if not pairs:
        return ""
    order = {SYNTHETIC: 0, LOBSTER: 1}
    pairs.sort(key=lambda p: (runs.index(p[0]), order.get(p[1].market, 2), str(p[1].record.get("created", ""))))
    lines = ["| " + " | ".join(EVALUATION_COLUMNS) + " |", "|" + "|".join(["---"] * 4 + ["---:"] * 6 + ["---"]) + "|"]
    for r, ev in pairs:
        cells = evaluation_cells(r, ev)
        lines.append("| " + " | ".join(_cell(cells[c]) for c in EVALUATION_COLUMNS) + " |")
    markets = {ev.market for _, ev in pairs}
    notes = []
    if SYNTHETIC in markets and len(markets) > 1:
        notes.append(
            "Rows of different markets are not comparable: a synthetic held-out PnL and a LOBSTER-day PnL are in "
            "different contracts and units; compare each row with its own baselines."
        )
    for r, ev in pairs:
        text = caveat(ev.record)
        if text:
            notes.append(f"{r.label}, `{ev.path.name}`: {text}")
        elif ev.market not in order:
            notes.append(f"{r.label}, `{ev.path}`: no market recorded; re-run python -m foxhunt_ray.evaluate {r.path}")
    return "\n".join(lines) + "\n" + "".join(f"\n- {n}" for n in notes) + ("\n" if notes else "")


# --------------------------------------------------------------------------------------------------------- plots


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most max_points points: equal-count bins, each the mean of its finite values (NaN when it has none);
    the first and last points are kept as they are, so a line still starts and ends where the run does."""
    n = len(x)
    if n <= max_points or max_points < 3:
        return x.astype(float), y.astype(float)
    edges = np.linspace(1, n - 1, max_points - 1).astype(np.int64)  # interior bins over x[1:-1]
    finite = np.isfinite(y)
    y0 = np.where(finite, y, 0.0)
    cy = np.concatenate([[0.0], np.cumsum(y0)])
    cc = np.concatenate([[0], np.cumsum(finite)])
    cx = np.concatenate([[0.0], np.cumsum(x.astype(float))])
    lo, hi = edges[:-1], edges[1:]
    count = cc[hi] - cc[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        yb = np.where(count > 0, (cy[hi] - cy[lo]) / np.maximum(count, 1), np.nan)
    xb = (cx[hi] - cx[lo]) / (hi - lo)
    return np.concatenate([[x[0]], xb, [x[-1]]]).astype(float), np.concatenate([[y[0]], yb, [y[-1]]])


def smooth(y: np.ndarray, window: int) -> np.ndarray:
    """Trailing mean over `window` lines of the finite values (NaN-aware); window 1 returns y."""
    if window <= 1:
        return y.astype(float)
    finite = np.isfinite(y)
    cy = np.concatenate([[0.0], np.cumsum(np.where(finite, y, 0.0))])
    cc = np.concatenate([[0], np.cumsum(finite)])
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    count = cc[idx] - cc[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, (cy[idx] - cy[lo]) / np.maximum(count, 1), np.nan)


def _series(run: Run, key: str, max_points: int, window: int = 1) -> tuple[np.ndarray, np.ndarray]:
    mask = run.present[key]
    return downsample(run.steps[mask], smooth(run.columns[key][mask], window), max_points)


def _figure(nrows: int = 1, ncols: int = 1, *, size: tuple[float, float] = (10, 5.5)):
    """A Figure on the Agg canvas, without pyplot: no display, no global figure state (headless, CI)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError:  # an extra: cluster nodes do not need it
        raise ReportError(
            "the report's plots need matplotlib, which foxhunt-ray installs only as an extra: "
            "pip install 'foxhunt-ray[report]' (or pip install matplotlib)"
        ) from None

    fig = Figure(figsize=size, dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, list(axes.flat)


def _colour(i: int) -> str:
    return f"C{i % 10}"


def _mark_kill(ax, run: Run, colour: str) -> None:
    if run.kill_step is None:
        return
    ax.axvline(run.kill_step, color=colour, linestyle=":", linewidth=1.5)
    ax.annotate(
        f"kill: {run.kill.get('rule')} @ {run.kill_step}",
        xy=(run.kill_step, 0.98),
        xycoords=("data", "axes fraction"),
        xytext=(-3, 0),
        textcoords="offset points",
        rotation=90,
        ha="right",
        va="top",
        fontsize=8,
        color=colour,
    )


def _finish(ax, title: str, ylabel: str) -> None:
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("learner update (step)", fontsize=9)
    ax.set_ylabel(ylabel, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=8)


def _no_data(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=9, color="0.4")


def plot_pnl(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if "pnl_cum_usd" in r.columns]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        ax.plot(*_series(r, "pnl_cum_usd", max_points), color=_colour(i), label=r.label, linewidth=1.6)
        _mark_kill(ax, r, _colour(i))
    ax.axhline(0, color="0.5", linewidth=0.8)
    ax.yaxis.set_major_formatter(lambda v, _: f"${v:,.0f}")
    _finish(ax, "pnl_cum_usd: cumulative final pnl of the ended episodes", "USD")
    ax.legend(fontsize=8)
    return fig


def plot_returns(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    """episode_return_mean of the runs on an env without pnl (CartPole, ...): how they learn, as pnl_cum_usd shows
    it for the market."""
    have = [(i, r) for i, r in enumerate(runs) if shows_return(r)]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        ax.plot(*_series(r, RETURN_KEY, max_points), color=_colour(i), label=r.label, linewidth=1.6)
        _mark_kill(ax, r, _colour(i))
    _finish(ax, f"{RETURN_KEY}: mean return of the last 100 ended episodes", "episode return")
    ax.legend(fontsize=8)
    return fig


def _groups(have: list[tuple[int, Run]], key: Callable[[Run], float]) -> list[tuple[float, list[tuple[int, Run]]]]:
    """(value, the (index, run) pairs that have it) for each distinct key(run), in increasing value."""
    return [(v, [(i, r) for i, r in have if key(r) == v]) for v in sorted({key(r) for _, r in have})]


def plot_qpa(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if "qpa" in r.columns or "qpa_ema" in r.columns]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        c = _colour(i)
        if "qpa" in r.columns:
            ax.plot(*_series(r, "qpa", max_points), color=c, linewidth=0.7, alpha=0.45)
        if "qpa_ema" in r.columns:
            ax.plot(*_series(r, "qpa_ema", max_points), color=c, linewidth=2.2, label=f"{r.label} qpa_ema")
        _mark_kill(ax, r, c)
    x_max = max(r.last_step for _, r in have)
    # One line per distinct threshold; one shared by every run is crimson / grey, else it takes its runs' colour
    # (the first of them) and names them.
    for threshold, who in _groups(have, lambda r: r.kill_config.qpa_ema_min):
        shared = len(who) == len(have)
        note = "" if shared else f" ({', '.join(r.label for _, r in who)})"
        colour = "crimson" if shared else _colour(who[0][0])
        ax.axhline(threshold, color=colour, linestyle="--", linewidth=1.2, label=f"kill: qpa_ema < {threshold:g}{note}")
    for warmup, who in _groups(have, lambda r: r.kill_config.qpa_warmup_steps):
        shared = len(who) == len(have)
        note = "" if shared else f" ({', '.join(r.label for _, r in who)})"
        if warmup <= x_max:
            colour = "0.3" if shared else _colour(who[0][0])
            label = f"qpa warm-up ends: step {warmup}{note}"
            ax.axvline(warmup, color=colour, linestyle="-.", linewidth=1.0, label=label)
        else:
            ax.plot([], [], " ", label=f"qpa warm-up: {warmup} steps, beyond the plot{note}")
    ax.set_ylim(-1.05, 1.05)
    _finish(ax, "qpa (thin) and qpa_ema (thick): corr(Q, log π) across actions", "qpa")
    ax.legend(fontsize=8, loc="lower left")
    return fig


def plot_losses(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    if not any(r.has(k) for r in runs for k in LOSS_KEYS):
        return None
    ncols = 3
    fig, axes = _figure(math.ceil(len(LOSS_KEYS) / ncols), ncols, size=(13, 7))
    for ax, key in zip(axes, LOSS_KEYS, strict=False):
        have = [(i, r) for i, r in enumerate(runs) if r.has(key)]
        finite_min = math.inf
        finite_span = 1.0
        for i, r in have:
            x, y = _series(r, key, max_points)
            ax.plot(x, y, color=_colour(i), linewidth=1.0, label=r.label)
            _mark_kill(ax, r, _colour(i))
            ok = y[np.isfinite(y)]
            if len(ok):
                finite_min = min(finite_min, float(ok.min()))
                finite_span = max(finite_span, float(ok.max()) / max(float(ok.min()), 1e-300))
        if not have:
            _no_data(ax, f"no run trains {key} (missing or 0 throughout)")
        elif finite_min > 0 and finite_span > 20:  # log only where all values are positive and span decades
            ax.set_yscale("log")
        _finish(ax, key, key)
    for ax in axes[len(LOSS_KEYS) :]:
        ax.set_visible(False)
    handles = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(lab, h)
    fig.legend(handles.values(), handles.keys(), loc="outside upper center", ncols=min(4, len(handles)), fontsize=8)
    return fig


def plot_values(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    have = [(i, r) for i, r in enumerate(runs) if r.has("v_dq_mean") or r.has("v_scalar_mean")]
    if not have:
        return None
    fig, (ax,) = _figure()
    for i, r in have:
        c = _colour(i)
        if r.has("v_dq_mean"):
            ax.plot(*_series(r, "v_dq_mean", max_points), color=c, linewidth=1.6, label=f"{r.label} V_dq")
        if r.has("v_scalar_mean"):
            no_dq = "" if r.has("v_dq_mean") else " (no dueling head)"
            ax.plot(
                *_series(r, "v_scalar_mean", max_points),
                color=c,
                linewidth=1.2,
                linestyle="--",
                label=f"{r.label} V_scalar{no_dq}",
            )
        _mark_kill(ax, r, c)
    _finish(ax, "V_dq (solid, dueling head) against V_scalar (dashed): batch means", "value")
    ax.legend(fontsize=8)
    return fig


THROUGHPUT_KEYS: dict[str, str] = {"env_steps_per_s": "env_steps", "updates_per_s": "step"}
"""A throughput panel -> the cumulative count of the step lines whose growth a second it shows."""
RESUME_GAP_S = 60.0
"""A gap between two step lines longer than this (and than the rate window) is a resume's downtime, not the run's."""


def _counts(run: Run, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, wall time, count) of the step lines that carry both the time and the count of THROUGHPUT_KEYS[key]."""
    count = THROUGHPUT_KEYS[key]
    if "time" not in run.columns or (count != "step" and count not in run.columns):
        return run.steps[:0], np.zeros(0), np.zeros(0)
    ok = run.present["time"] & (run.present[count] if count != "step" else True)
    c = run.steps.astype(float) if count == "step" else run.columns[count]
    return run.steps[ok], np.maximum.accumulate(run.columns["time"][ok]), c[ok]


def rate_window_s(run: Run) -> float:
    """The wall time a run's throughput is measured over: a 25th of the run's span, within [2 s, 60 s] (less for a
    run shorter than 8 s: a quarter of it)."""
    t = run.columns["time"][run.present["time"]] if "time" in run.columns else np.zeros(0)
    span = float(t.max() - t.min()) if len(t) else 0.0
    return min(60.0, max(span / 25, min(2.0, span / 4)))


def throughput(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, rate) for `key` of THROUGHPUT_KEYS at each step line: the count's growth over the trailing
    rate_window_s of wall time, divided by the time it took (NaN until the window is a quarter full, as after a
    resume's gap). Not the lines' own updates_per_s / env_steps_per_s: those are over the time since the line before,
    and the monitor writes the lines of one learner answer microseconds apart, so they spike to thousands a second
    and their mean ranks runs by how their lines bunch up, not by how fast they train."""
    steps, t, c = _counts(run, key)
    window = rate_window_s(run)
    if not len(t) or window <= 0:
        return steps, np.full(len(steps), np.nan)
    first = np.searchsorted(t, t - window, side="left")  # the oldest line within the window
    dt = t - t[first]
    with np.errstate(invalid="ignore", divide="ignore"):
        return steps, np.where(dt >= window / 4, (c - c[first]) / dt, np.nan)


def overall_rate(run: Run, key: str) -> float | None:
    """The count's growth a second over the run's wall time, a resume's downtime left out (gaps between lines longer
    than RESUME_GAP_S and the rate window); None without two timed lines."""
    _, t, c = _counts(run, key)
    if len(t) < 2:
        return None
    dt, dc = np.diff(t), np.diff(c)
    running = dt <= max(RESUME_GAP_S, rate_window_s(run))
    busy = float(dt[running].sum())
    return float(dc[running].sum()) / busy if busy > 0 else None


def plot_throughput(runs: Sequence[Run], max_points: int = MAX_POINTS) -> Figure | None:
    """env steps and updates a second, each run's over a trailing window of wall time, its rate over the whole run
    in the legend."""
    if not any(len(_counts(r, key)[1]) for r in runs for key in THROUGHPUT_KEYS):
        return None
    fig, axes = _figure(1, 2, size=(13, 5))
    for ax, key in zip(axes, THROUGHPUT_KEYS, strict=True):
        have = [(i, r) for i, r in enumerate(runs) if len(_counts(r, key)[1])]
        for i, r in have:
            overall = overall_rate(r, key)
            label = r.label + (f" ({overall:,.1f}/s over the run)" if overall is not None else "")
            ax.plot(*downsample(*throughput(r, key), max_points), color=_colour(i), linewidth=1.6, label=label)
            _mark_kill(ax, r, _colour(i))
        ax.set_ylim(bottom=0)
        if not have:
            _no_data(ax, f"no run logs the {THROUGHPUT_KEYS[key]} and time of its lines")
            _finish(ax, key, key)
            continue
        windows = sorted({rate_window_s(r) for _, r in have})
        over = f"{windows[0]:.3g} s" if len(windows) == 1 else f"{windows[0]:.3g}-{windows[-1]:.3g} s"
        _finish(ax, f"{key}: growth over the trailing {over} of wall time", key)
        ax.legend(fontsize=8)
    return fig


PLOTS: dict[str, tuple[Callable[..., Figure | None], str]] = {
    "pnl_cum_usd.png": (plot_pnl, "no run logs pnl_cum_usd (a market without pnl)"),
    "qpa.png": (plot_qpa, "no run logs qpa"),
    "losses.png": (plot_losses, "no run logs a nonzero loss"),
    "values.png": (plot_values, "no run logs v_dq_mean or v_scalar_mean"),
    "throughput.png": (plot_throughput, "no run logs the time of its lines"),
    "episode_return_mean.png": (plot_returns, "no run on an env other than the market (whose plot is pnl_cum_usd)"),
}
"""file name -> (figure builder, why the plot is skipped when it returns None)."""


# -------------------------------------------------------------------------------------------------------- report


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

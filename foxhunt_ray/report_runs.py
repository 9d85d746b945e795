"""Reading run folders for the report (foxhunt_ray.report): `load_run(run_dir) -> Run`, `load_runs`, `label_runs`.

A run folder (OUT/<code_sha>/<name>/<fold>/, OUT/latest for the newest run, or a run's `--storage` URI, copied into
a temporary folder first) is read, never written: config.json, diag.jsonl (actors.diag_file.read_diag: every
numeric key of the step lines becomes a column), summary.json, and the evaluation records
(foxhunt_ray.evaluations). A bad input raises ReportError naming the path and the fix.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from actors.diag_file import DIAG_FILE, DiagFileError, read_diag
from actors.files import MAX_TEXT_BYTES, kind_of, read_bounded
from actors.kill_rules import KillConfig
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.evaluations import Evaluation, EvaluationRecordError, newest_synthetic, read_evaluations
from foxhunt_ray.run_folder import CONFIG_FILE, LATEST, RunFolderError, read_config_doc, resolve_run_dir
from foxhunt_ray.storage import StorageError, fetch_to_temp, is_uri
from lobsim_env.validation import InputError

RETURN_KEY = "episode_return_mean"
"""What a run on an env without pnl (CartPole, ...) logs of its outcome: the mean return of its last 100 ended
episodes (actors.episode_stats). The market logs it too (its episode return is its pnl), and is shown by
pnl_cum_usd."""

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


def shows_return(run: Run) -> bool:
    """The run's outcome is its episode_return_mean: it logs that and no pnl_cum_usd (an env other than the market)."""
    return RETURN_KEY in run.columns and "pnl_cum_usd" not in run.columns


def short_sha(sha: str | None) -> str:
    if not sha:
        return "?"
    dirty = "-dirty" if sha.endswith("-dirty") else ""
    core = sha.removesuffix("-dirty")
    if core.startswith("content-"):
        return "content-" + core[8:16] + dirty
    return core[:9] + dirty


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

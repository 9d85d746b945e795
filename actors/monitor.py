"""The monitor role: appends diag.jsonl, applies the kill rules, writes summary.json, exports Ray gauges.

A plain class (no Ray import at module level). `record(diag)` takes one learner step's diag dict (the
Learner's keys plus what the driver adds: pnl_cum_usd, env_steps, ...), stamps it (step, time, the run's
constant fields such as code_sha and preset), computes qpa_ema and the rates, checks the rules
(actors.kill_rules) and appends ONE line. A line is written with a single os.write on an O_APPEND file
descriptor, so a crash leaves at worst one partial LAST line, never a torn line in the middle, and a write that
fails (a full disk) is cut back to the previous whole line; a Monitor opened on an existing diag.jsonl (a
resumed run) cuts such a tail off, restores qpa_ema, the l_q reference and the last step, and records only the
step after it, so the file has no duplicates and no gaps. The run folder's lock (foxhunt_ray.run_folder) keeps
a second writer out; readers (`read_diag`, a resume) refuse step lines that are not 1, 2, 3, ... in order.

JSON has no NaN: a non-finite float is written as the string "nan", "inf" or "-inf" (json.dumps with
allow_nan=False guarantees a valid line); `read_diag` turns those strings back into floats. The rules see the
raw values before serialisation.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from actors.files import MAX_DIAG_BYTES, open_run_file, read_bounded, write_atomic
from actors.kill_rules import EXIT_ERROR, EXIT_KILLED, EXIT_OK, KillConfig, KillDecision, KillRules
from actors.tensorboard import EventWriter
from lobsim_env.validation import InputError

DIAG_FILE = "diag.jsonl"
SUMMARY_FILE = "summary.json"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_log = logging.getLogger(__name__)

GAUGES: dict[str, str] = {
    "qpa": "q_pi_agree: mean Pearson corr of q_ens and log pi across actions",
    "qpa_ema": "EMA of qpa (the qpa kill rule reads qpa_ema + kill.qpa_noise_z x qpa_noise)",
    "pnl_cum_usd": "cumulative final pnl of the ended episodes, USD",
    "l_c51": "C51 cross-entropy",
    "l_iqn": "IQN quantile Huber loss",
    "l_pi": "PPO clipped surrogate loss",
    "l_v": "V_scalar MSE",
    "l_distill": "Q->pi distillation KL",
    "l_dueling": "DuelingQHead Huber Bellman loss",
    "env_steps_per_s": "env steps per second over the last update",
    "updates_per_s": "learner updates per second over the last update",
}
"""diag key -> description; Ray gauge names are 'foxhunt_' + key."""
GAUGE_NAMES: tuple[str, ...] = tuple("foxhunt_" + k for k in GAUGES)


TENSORBOARD_SKIP = frozenset({"step", "time", "fold", "worker_index"})
"""Step-line numbers that are not series worth a plot (the step is the x axis)."""


class DiagFileError(InputError):
    """A diag.jsonl that cannot be read; the message names the file and line."""


def to_json_value(value, key: str = ""):
    """A JSON-safe copy: numpy scalars to Python, non-finite floats to "nan"/"inf"/"-inf"."""
    if isinstance(value, dict):
        return {str(k): to_json_value(v, f"{key}.{k}" if key else str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v, key) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return value if math.isfinite(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, bool | int | str):
        return value
    raise ValueError(f"diag[{key!r}]={value!r} of type {type(value).__name__} is not JSON: send numbers or strings")


def _from_json(value):
    if isinstance(value, dict):
        return {k: _from_json(v) for k, v in value.items()}
    if isinstance(value, str) and value in _NON_FINITE:
        return _NON_FINITE[value]
    return value


def _damaged(path: Path, lineno: int, what: str) -> DiagFileError:
    """The error for a diag.jsonl whose lines from `lineno` on are not one run's single sequence of steps."""
    return DiagFileError(
        f"{path}:{lineno}: {what}: the file is damaged (two processes wrote this run folder at once, or it was "
        f"edited); lines 1..{lineno - 1} are whole: keep them (head -n {lineno - 1} {path} > kept && mv kept "
        f"{path}) and resume the run, or drop this run (docs/faults.md)"
    )


def _parse_lines(path: Path, data: bytes) -> tuple[list[dict], int]:
    """(records, end of the last complete line). A complete line that is not a JSON object raises, and so do
    step lines that are not 1, 2, 3, ... in order (a duplicated, out-of-order or missing step): what two writers
    of one file, or an edit, leave behind."""
    end = data.rfind(b"\n") + 1
    records = []
    last = 0
    for lineno, line in enumerate(data[:end].split(b"\n")[:-1], start=1):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as err:  # RecursionError: arrays nested thousands deep
            raise _damaged(path, lineno, f"not valid JSON ({err}); fix or delete that line") from None
        if not isinstance(rec, dict):
            raise DiagFileError(f"{path}:{lineno}: a diag line must be a JSON object, got {type(rec).__name__}")
        if "event" not in rec:
            step = rec.get("step")
            if isinstance(step, bool) or not isinstance(step, int):
                raise DiagFileError(f"{path}:{lineno}: step line without an integer 'step': {line[:80]!r}")
            if step <= last:
                raise _damaged(path, lineno, f"step {step} after step {last} (a duplicated or out-of-order step)")
            if step != last + 1:
                gap = f"step {last + 1}" if step == last + 2 else f"steps {last + 1}..{step - 1}"
                raise _damaged(path, lineno, f"step {step} after step {last}: {gap} missing")
            last = step
        records.append(_from_json(rec))
    return records, end


def _line_end(data: bytes, n: int) -> int:
    """Byte offset just after the first n lines of data."""
    pos = 0
    for _ in range(n):
        pos = data.index(b"\n", pos) + 1
    return pos


def read_diag(path: str | Path) -> list[dict]:
    """Every record of a diag.jsonl, non-finite strings back to floats. A partial last line (a crashed run) is
    skipped with a warning; any other bad line raises DiagFileError naming file and line."""
    path = Path(path)
    try:  # a regular file of at most MAX_DIAG_BYTES: a FIFO or /dev/zero is named, not read forever
        data = read_bounded(path, MAX_DIAG_BYTES, what="diag file", fix="pass a run's diag.jsonl", error=DiagFileError)
    except OSError as err:
        raise DiagFileError(f"cannot read diag file {path}: {err}; pass a run's diag.jsonl") from None
    records, end = _parse_lines(path, data)
    if end < len(data):
        _log.warning("%s: ignoring a partial last line of %d bytes (the run crashed mid-write)", path, len(data) - end)
    return records


def step_records(records: list[dict]) -> list[dict]:
    """The per-step lines (kill records carry an 'event' key)."""
    return [r for r in records if "event" not in r]


def load_baseline(path: str | Path) -> dict[int, dict]:
    """A baseline run's step lines by step: a run dir or its diag.jsonl."""
    path = Path(path)
    if path.is_dir():
        path = path / DIAG_FILE
    records = step_records(read_diag(path))
    if not records:
        raise DiagFileError(f"baseline {path} has no step lines: point --baseline at a run that trained")
    return {r["step"]: r for r in records}


def run_tag(run_dir: str | Path) -> str:
    """The gauges' `run` tag: the run folder's last three parts, <code_sha>/<name>/<fold>."""
    return "/".join(Path(run_dir).absolute().parts[-3:])


class RayGauges:
    """Ray metrics for the dashboard, created lazily once and only when Ray is initialised in this process."""

    def __init__(self, run: str):
        self.run = run
        self._gauges: dict | None = None

    @staticmethod
    def active() -> bool:
        ray = sys.modules.get("ray")  # never import Ray just to find out: a plain run must not pay for it
        return ray is not None and ray.is_initialized()

    def set(self, record: dict) -> None:
        if not self.active():
            return
        if self._gauges is None:
            from ray.util.metrics import Gauge

            self._gauges = {k: Gauge("foxhunt_" + k, description=d, tag_keys=("run",)) for k, d in GAUGES.items()}
        for key, gauge in self._gauges.items():
            value = record.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
                gauge.set(float(value), tags={"run": self.run})


class Monitor:
    """Owns run_dir/diag.jsonl and run_dir/summary.json for one run (fold); methods: record, finish, close."""

    def __init__(
        self,
        run_dir: str | Path,
        kill: KillConfig,
        baseline_diag: str | Path | None = None,
        *,
        stamp: dict | None = None,
        resume_at: int | None = None,
    ):
        """stamp: constant fields written into every line (code_sha, preset, fold). resume_at: the step of the
        checkpoint a resumed run restarts from; diag lines after it are dropped (the run records them again)."""
        if resume_at is not None and (isinstance(resume_at, bool) or not isinstance(resume_at, int) or resume_at < 0):
            raise ValueError(f"resume_at={resume_at!r} must be an int >= 0 (the checkpoint's learner step)")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.diag_path = self.run_dir / DIAG_FILE
        self.summary_path = self.run_dir / SUMMARY_FILE
        self.stamp = to_json_value(dict(stamp or {}), "stamp")
        baseline = load_baseline(baseline_diag) if baseline_diag is not None else None
        self.rules = KillRules(kill, baseline)
        # the run, not only the fold: two runs of fold 0 must not overwrite each other's gauges
        self.gauges = RayGauges(run_tag(self.run_dir))
        self.tensorboard: EventWriter | None = None  # opened at the first record (beside diag.jsonl)
        self._tensorboard_restart = resume_at
        self.last: dict | None = None
        self.decision: KillDecision | None = None
        self.exit_code: int | None = None
        self.repaired_bytes = 0
        self.dropped_lines = 0
        self._resume(resume_at)
        self._fd = open_run_file(self.diag_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # no link

    @property
    def last_step(self) -> int:
        return self.last["step"] if self.last else 0

    def last_record(self) -> dict | None:
        """The newest step line recorded (None before the first): what the driver asks the monitor actor for when
        a call failed part-way, after writing some of its lines (a full disk at the checkpoint that follows them)."""
        return self.last

    def _resume(self, resume_at: int | None) -> None:
        if not self.diag_path.exists():
            if resume_at:
                raise DiagFileError(
                    f"{self.diag_path} does not exist but the run resumes at step {resume_at}: "
                    "point --resume at the run folder that holds the checkpoint's diag.jsonl"
                )
            return
        fix = f"remove it (rm {self.diag_path}) or put the run's own diag.jsonl there; nothing was written"
        data = read_bounded(self.diag_path, MAX_DIAG_BYTES, follow=False, fix=fix, error=DiagFileError)
        records, end = _parse_lines(self.diag_path, data)
        cut = end
        if end < len(data):  # a crash mid-write: keep every complete line, drop the torn tail
            self.repaired_bytes = len(data) - end
            _log.warning(
                "%s: cutting off a partial last line of %d bytes left by a crash", self.diag_path, self.repaired_bytes
            )
        if resume_at is not None:  # lines written after the checkpoint would be recorded again: drop them
            keep = next((i for i, r in enumerate(records) if r.get("step", 0) > resume_at), len(records))
            if keep < len(records):
                cut = _line_end(data, keep)
                self.dropped_lines = len(records) - keep
                _log.warning(
                    "%s: dropping %d lines after the checkpoint's step %d",
                    self.diag_path,
                    self.dropped_lines,
                    resume_at,
                )
                records = records[:keep]
        if cut < len(data):  # through no link: a link would cut the file it points at
            fd = open_run_file(self.diag_path, os.O_WRONLY)
            try:
                os.ftruncate(fd, cut)
            finally:
                os.close(fd)
        steps = step_records(records)
        if resume_at is not None and (steps[-1]["step"] if steps else 0) < resume_at:
            raise DiagFileError(
                f"{self.diag_path} ends at step {steps[-1]['step'] if steps else 0}, before the checkpoint's step "
                f"{resume_at}: the diag lines in between are lost; resume from an earlier checkpoint"
            )
        self.rules.restore(steps)
        self.last = steps[-1] if steps else None

    def record(self, diag: dict) -> KillDecision | None:
        """Appends one step line; returns the KillDecision when a rule fired (then the run is over)."""
        if self.exit_code is not None:
            raise RuntimeError(f"Monitor.record after the run ended ({self.summary_path} written)")
        if not isinstance(diag, dict):
            raise ValueError(f"diag must be a dict of the learner step's values, got {type(diag).__name__}")
        step = diag.get("step")
        if isinstance(step, bool) or not isinstance(step, int | float) or step != int(step) or step < 1:
            raise ValueError(f"diag['step']={step!r} must be a whole number >= 1 (Learner.update's step)")
        step = int(step)
        if step != self.last_step + 1:
            raise ValueError(
                f"diag step {step} does not follow the last recorded step {self.last_step} of {self.diag_path}: "
                "a run records every step once, in order; a resumed run continues from its checkpoint's step + 1"
            )
        rec = {"step": step, "time": time.time(), **self.stamp}
        rec.update({k: (v.item() if isinstance(v, np.generic) else v) for k, v in diag.items() if k != "step"})
        to_json_value(rec)  # refuse a value JSON cannot hold before the rules' state moves
        self._add_rates(rec)
        decision = self.rules.check(rec)
        self._write(rec)
        self.last = rec
        self.gauges.set(rec)
        self._tensorboard_scalars(rec)
        if decision is not None:
            self._write({**decision.to_record(), "time": time.time()})
            self.decision = decision
            self._summary("killed", EXIT_KILLED)
        return decision

    def _tensorboard_scalars(self, rec: dict) -> None:
        """The step line's numbers as TensorBoard scalars, under the names diag.jsonl uses (`tensorboard --logdir
        runs`); a resumed run's first file tells TensorBoard to drop what older files hold after its checkpoint."""
        if self.tensorboard is None:
            self.tensorboard = EventWriter(self.run_dir, restart_at=self._tensorboard_restart or None)
        values = {
            k: v
            for k, v in rec.items()
            if k not in TENSORBOARD_SKIP and isinstance(v, int | float) and not isinstance(v, bool)
        }
        self.tensorboard.scalars(rec["step"], values, wall_time=rec["time"])

    def _add_rates(self, rec: dict) -> None:
        prev = self.last
        if prev is None:
            return
        dt = rec["time"] - prev.get("time", rec["time"])
        if dt > 0:
            rec.setdefault("updates_per_s", (rec["step"] - prev["step"]) / dt)
            if isinstance(rec.get("env_steps"), int | float) and isinstance(prev.get("env_steps"), int | float):
                rec.setdefault("env_steps_per_s", (rec["env_steps"] - prev["env_steps"]) / dt)

    def _write(self, rec: dict) -> None:
        """Appends one whole line, or nothing: a write that fails part-way (a full disk writes what fits, then
        raises) is cut back to the end of the previous line before the error goes on."""
        line = (json.dumps(to_json_value(rec), allow_nan=False, separators=(",", ":")) + "\n").encode()
        view = memoryview(line)
        size = os.fstat(self._fd).st_size  # this process is the file's one writer (the run folder's lock)
        try:
            while view:  # os.write on a regular file writes it all at once; loop for the short write of a full disk
                view = view[os.write(self._fd, view) :]
        except BaseException:
            os.ftruncate(self._fd, size)
            raise

    def finish(self, status: str = "done", message: str | None = None) -> int:
        """Writes summary.json for an end without a kill ('done', 'stopped' or 'error'); returns the exit code.
        After a kill the kill's summary stands and EXIT_KILLED is returned."""
        if self.exit_code is not None:
            return self.exit_code
        codes = {"done": EXIT_OK, "stopped": EXIT_OK, "error": EXIT_ERROR}
        if status not in codes:
            raise ValueError(f"finish(status={status!r}) must be one of {sorted(codes)}")
        self._summary(status, codes[status], message)
        return codes[status]

    def _summary(self, status: str, code: int, message: str | None = None) -> None:
        d = self.decision
        summary = {
            "status": status,
            "exit_code": code,
            "rule": d.rule if d else None,
            "step": d.step if d else self.last_step,
            "message": d.message if d else message,
            "values": d.values if d else {},
            "time": time.time(),
            **self.stamp,
            "last": self.last,
        }
        # atomic: a reader never sees half a summary, and a full disk leaves the previous one (or none), no .tmp
        write_atomic(self.summary_path, json.dumps(to_json_value(summary), allow_nan=False, indent=2) + "\n")
        self.exit_code = code

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if getattr(self, "tensorboard", None) is not None:
            self.tensorboard.close()

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

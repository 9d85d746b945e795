"""diag.jsonl, one JSON line per learner step: its name, its line format, its one reader and its one writer.

The monitor role (actors.monitor) writes it through `DiagWriter`; every reader (a resume, a --baseline, the
report, evaluate, the benchmarks) reads it through `read_diag`. A line is written with a single os.write on an
O_APPEND file descriptor, so a crash leaves at worst one partial LAST line, never a torn line in the middle, and a
write that fails (a full disk) is cut back to the previous whole line; a writer opened on an existing diag.jsonl
(a resumed run) cuts such a tail off and the lines after the checkpoint it resumes from. The run folder's lock
(foxhunt_ray.run_folder) keeps a second writer out; readers refuse step lines that are not 1, 2, 3, ... in order.

JSON has no NaN: a non-finite float is written as the string "nan", "inf" or "-inf" (json.dumps with
allow_nan=False guarantees a valid line); `read_diag` turns those strings back into floats.
"""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

import numpy as np

from actors.files import MAX_DIAG_BYTES, open_run_file, read_bounded
from lobsim_env.validation import InputError

DIAG_FILE = "diag.jsonl"
_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
_log = logging.getLogger(__name__)


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


class DiagWriter:
    """The one writer of a run's diag.jsonl: opens it (a resumed run's file repaired first), appends whole lines.

    `records` holds the lines kept from an existing file (step and event lines, non-finite strings back to
    floats); `repaired_bytes` the partial last line cut off, `dropped_lines` the lines after `resume_at` cut off.
    """

    def __init__(self, path: str | Path, *, resume_at: int | None = None):
        """resume_at: the step of the checkpoint a resumed run restarts from; lines after it are dropped (the run
        records them again). DiagFileError when the file cannot be read or ends before that step."""
        self.path = Path(path)
        self.repaired_bytes = 0
        self.dropped_lines = 0
        self._fd = -1
        self.records = self._repair(resume_at)
        self._fd = open_run_file(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)  # no link

    def _repair(self, resume_at: int | None) -> list[dict]:
        if not self.path.exists():
            if resume_at:
                raise DiagFileError(
                    f"{self.path} does not exist but the run resumes at step {resume_at}: "
                    "point --resume at the run folder that holds the checkpoint's diag.jsonl"
                )
            return []
        fix = f"remove it (rm {self.path}) or put the run's own diag.jsonl there; nothing was written"
        data = read_bounded(self.path, MAX_DIAG_BYTES, follow=False, fix=fix, error=DiagFileError)
        records, end = _parse_lines(self.path, data)
        cut = end
        if end < len(data):  # a crash mid-write: keep every complete line, drop the torn tail
            self.repaired_bytes = len(data) - end
            _log.warning(
                "%s: cutting off a partial last line of %d bytes left by a crash", self.path, self.repaired_bytes
            )
        if resume_at is not None:  # lines written after the checkpoint would be recorded again: drop them
            keep = next((i for i, r in enumerate(records) if r.get("step", 0) > resume_at), len(records))
            if keep < len(records):
                cut = _line_end(data, keep)
                self.dropped_lines = len(records) - keep
                _log.warning(
                    "%s: dropping %d lines after the checkpoint's step %d", self.path, self.dropped_lines, resume_at
                )
                records = records[:keep]
        if cut < len(data):  # through no link: a link would cut the file it points at
            fd = open_run_file(self.path, os.O_WRONLY)
            try:
                os.ftruncate(fd, cut)
            finally:
                os.close(fd)
        steps = step_records(records)
        if resume_at is not None and (steps[-1]["step"] if steps else 0) < resume_at:
            raise DiagFileError(
                f"{self.path} ends at step {steps[-1]['step'] if steps else 0}, before the checkpoint's step "
                f"{resume_at}: the diag lines in between are lost; resume from an earlier checkpoint"
            )
        return records

    def append(self, rec: dict) -> None:
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

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:
            self.close()

"""The monitor role: appends diag.jsonl, applies the kill rules, writes summary.json, exports Ray gauges.

A plain class (no Ray import at module level). `record(diag)` takes one learner step's diag dict (the
Learner's keys plus what the driver adds: pnl_cum_usd, env_steps, ...), stamps it (step, time, the run's
constant fields such as code_sha and preset), computes qpa_ema and the rates, checks the rules
(actors.kill_rules) and appends ONE line through actors.diag_file.DiagWriter, the file's one writer (whole lines
only; a failed write cut back to the previous line). A Monitor opened on an existing diag.jsonl (a resumed run)
has the writer cut off a torn tail and the lines after the checkpoint, restores qpa_ema, the l_q reference and the
last step, and records only the step after it, so the file has no duplicates and no gaps. Readers use
actors.diag_file.read_diag. The rules see the raw values before serialisation.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from actors.diag_file import DIAG_FILE, DiagWriter, load_baseline, step_records, to_json_value
from actors.files import write_atomic
from actors.kill_rules import EXIT_ERROR, EXIT_KILLED, EXIT_OK, KillConfig, KillDecision, KillRules
from actors.tensorboard import EventWriter

SUMMARY_FILE = "summary.json"

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
        self.diag_file = DiagWriter(self.diag_path, resume_at=resume_at)  # a resumed run's file repaired, then opened
        steps = step_records(self.diag_file.records)
        self.rules.restore(steps)
        self.last = steps[-1] if steps else None

    @property
    def last_step(self) -> int:
        return self.last["step"] if self.last else 0

    def last_record(self) -> dict | None:
        """The newest step line recorded (None before the first): what the driver asks the monitor actor for when
        a call failed part-way, after writing some of its lines (a full disk at the checkpoint that follows them)."""
        return self.last

    @property
    def repaired_bytes(self) -> int:
        """The partial last line (bytes) cut off an existing diag.jsonl: a crash mid-write."""
        return self.diag_file.repaired_bytes

    @property
    def dropped_lines(self) -> int:
        """The lines after the checkpoint's step cut off a resumed run's diag.jsonl."""
        return self.diag_file.dropped_lines

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
        self.diag_file.append(rec)
        self.last = rec
        self.gauges.set(rec)
        self._tensorboard_scalars(rec)
        if decision is not None:
            self.diag_file.append({**decision.to_record(), "time": time.time()})
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
        if getattr(self, "diag_file", None) is not None:
            self.diag_file.close()
        if getattr(self, "tensorboard", None) is not None:
            self.tensorboard.close()

    def __del__(self) -> None:
        if getattr(self, "diag_file", None) is not None and not self.diag_file.closed:
            self.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

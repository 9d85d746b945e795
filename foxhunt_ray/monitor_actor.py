"""The monitor actor's class (foxhunt_ray.remote wraps it in `ray.remote` and gives the driver MonitorHandle).

It lives apart from foxhunt_ray.remote, which imports the learner and rollout roles, so that the monitor's
process imports no torch: it records diags and writes checkpoints that arrive as bytes, and torch would cost it
a second of CPU at every start and a few hundred MB it never uses (tests/test_driver.py's test_ray_smoke_run
checks that it is not loaded).
"""

from __future__ import annotations

import os
import time

from actors.checkpoints import KEEP_CHECKPOINTS, Checkpoint
from actors.monitor import Monitor
from foxhunt_ray.storage import RunStorage, keep_checkpoints


class MonitorDied(RuntimeError):
    """The monitor actor's process ended mid-run (kill -9, the OOM killer, a crash): the driver takes the run folder
    over as it does for a silent monitor (foxhunt_ray.ray_loop, _Drive.monitor_silent), so the run ends whole."""

    def __init__(self, err: BaseException):
        super().__init__(
            "the monitor actor (it writes diag.jsonl, summary.json and the checkpoints) died "
            f"({type(err).__name__}: its process was killed, ran out of memory or crashed)"
        )


class RayMonitor(Monitor):
    """Monitor inside its own actor, on the driver's node: also the writer of the learner's checkpoints there."""

    def __init__(self, *args, storage: str = "", keep: int = KEEP_CHECKPOINTS, **kwargs):
        """storage: the run's storage root ('' for none): the run folder is copied there after each checkpoint.
        keep: the checkpoints the run folder keeps, the newest (0: all; DriverConfig.keep_checkpoints)."""
        super().__init__(*args, **kwargs)
        self.storage = RunStorage.of_run(storage, self.run_dir) if storage else None
        self.keep = keep
        self._seconds = {"record_s": 0.0, "checkpoint_write_s": 0.0, "checkpoint_bytes": 0.0, "checkpoints": 0.0}

    def record_update(self, answer: dict) -> dict:
        """record() for each diag of a learner answer (RayLearnerWorker.update_from), in order, up to a kill, then
        the answer's checkpoints written (their steps' lines are in the same answer, so diag.jsonl reaches a
        checkpoint's step before its file exists): {"record": the last line recorded (None if none), "n": lines
        recorded, "decision", "lost", "step"}; or {"after_end": True, ...} for an answer that comes after a rule
        ended the run: the run is over at the kill's step, so its diags get no line (Monitor.record would refuse
        them)."""
        base = {"lost": answer["lost"], "step": answer["step"]}
        if answer.get("starved"):  # every recent payload bad: the driver ends the run (LearnerWorker.starved)
            base["starved"] = answer["starved"]
        if self.exit_code is not None:
            self._keep(answer.get("checkpoints") or [])
            return {**base, "after_end": True}
        t0 = time.perf_counter()
        decision, n = None, 0
        for diag in answer["diags"]:
            decision = self.record(diag)
            n += 1
            if decision is not None:
                break
        self._seconds["record_s"] += time.perf_counter() - t0
        self._keep(answer.get("checkpoints") or [])
        return {**base, "record": self.last if n else None, "n": n, "decision": decision}

    def keep_checkpoint(self, checkpoint: Checkpoint) -> str:
        """Writes a checkpoint the driver asked the learner for (the end of the run, a kill, Ctrl-C); its path."""
        return str(self._keep([checkpoint])[0])

    def _keep(self, checkpoints: list[Checkpoint]) -> list:
        if not checkpoints:
            return []
        t0 = time.perf_counter()
        written = keep_checkpoints(self.run_dir, checkpoints, self.storage, keep=self.keep)
        sec = self._seconds
        sec["checkpoint_write_s"] += time.perf_counter() - t0
        sec["checkpoint_bytes"] += sum(len(c.data) for c in checkpoints)
        sec["checkpoints"] += len(checkpoints)
        return written

    def timings(self) -> dict[str, float]:
        """record_s; checkpoint_write_s (writing the checkpoints and copying the folder to storage, whose share is
        storage_sync_s), checkpoint_bytes, checkpoints."""
        extra = {f"storage_{k}": v for k, v in self.storage.seconds.items()} if self.storage else {}
        return {**self._seconds, **extra}

    def ready(self) -> bool:
        return True

    def pid(self) -> int:
        """This actor's process id (on the driver's node): the driver makes sure the process is gone before it
        writes the run folder itself (MonitorHandle.take_over)."""
        return os.getpid()

"""The last faults, item 5 (docs/faults.md, "Stop signals, one or a burst"): SIGTERM (or Ctrl-C) in a burst. The
first signal starts the stop; a second, while the stop checkpoint is written, is told so on one line and waits for
it; a third abandons the stop checkpoint and says so; no traceback in any case, summary.json 'stopped' and exit 0
whenever the run ends so, diag.jsonl whole and the newest checkpoint loadable. Before: three SIGTERMs 10 ms apart
printed chained KeyboardInterrupt tracebacks during the stop checkpoint's fsync and left no summary.json and no
stop checkpoint (exit 143); two exited 143 too.

Each test runs the driver in a process of its own (`python -m foxhunt_ray.local`) and signals it once diag.jsonl
has lines. Where the signals must land inside the stop's checkpoint, the process is started through a few lines
that make that checkpoint slow (os.fsync once a stop signal came, or the learner actor's checkpoint in Ray mode),
so that the test can send the next signals while it is being made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from actors.checkpoints import list_checkpoints, read_checkpoint
from foxhunt_ray import driver

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
FLAGS = [
    "--preset", "smoke", "--steps", "100000", "--no-eval", "--quiet", "--name", "sig", "--rollout-workers", "1",
    "--checkpoint-every", "10", "--checkpoint-interval-s", "0",
]  # fmt: skip

SLOW_FSYNC = """
import os, sys, time
from foxhunt_ray import local
from foxhunt_ray.loops import StopSignals
fsync = os.fsync
def slow_fsync(fd):
    if StopSignals.signalled:  # a stop began: its checkpoint's fsync takes this long
        time.sleep(float(os.environ["SLOW_S"]))
    return fsync(fd)
os.fsync = slow_fsync
local._exit(local.main(sys.argv[1:]))
"""

SLOW_LEARNER_CHECKPOINT = """
import os, sys, time
from pathlib import Path
import ray
from foxhunt_ray import local, remote
class SlowStopLearner(remote.RayLearnerWorker):  # made the learner actor's class below, remote's own name kept
    stopping = False
    def drain_answer(self):  # the stop (or the run's end) drains before its checkpoint
        self.stopping = True
        return super().drain_answer()
    def checkpoint(self):
        if self.stopping:
            Path(os.environ["STOP_MARKER"]).touch()
            time.sleep(float(os.environ["SLOW_S"]))
        return super().checkpoint()
remote.learner_actor = lambda *, gpus, resources=None: ray.remote(num_cpus=1, num_gpus=gpus)(SlowStopLearner)
local._ray_init = lambda: ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
local._exit(local.main(sys.argv[1:]))
"""


def start(tmp_path: Path, *flags: str, code: str | None = None, **env: str) -> tuple[subprocess.Popen, Path]:
    """The driver in a process of its own (`python -m foxhunt_ray.local`, or `python -c code` with the same
    arguments), its output piped; and its run folder (--name sig)."""
    head = ["-c", code] if code else ["-m", "foxhunt_ray.local"]
    from foxhunt_ray.local import LOOPBACK_ENV

    proc = subprocess.Popen(
        [sys.executable, *head, *FLAGS, "--out", str(tmp_path / "runs"), *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, LOOPBACK_ENV: "0", **env},
    )
    return proc, tmp_path / "runs"


def wait_for(what, proc: subprocess.Popen, timeout: float = 120.0, every: float = 0.01):
    """Polls what() until it is true; fails (with the process's stderr) if the process ends or time runs out."""
    deadline = time.monotonic() + timeout
    while not (found := what()):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"gave up waiting: {proc.communicate()[1][-3000:]}")
        time.sleep(every)
    return found


def run_dir_with_lines(runs: Path, proc: subprocess.Popen, lines: int) -> Path:
    """The run folder once its diag.jsonl has `lines` lines (past a periodic checkpoint at --checkpoint-every 10)."""

    def found() -> Path | None:
        for diag in runs.glob("*/sig/0/diag.jsonl"):
            if diag.read_bytes().count(b"\n") >= lines:
                return diag.parent
        return None

    return wait_for(found, proc)


def burst(proc: subprocess.Popen, n: int, gap_s: float = 0.01) -> None:
    for i in range(n):
        if i:
            time.sleep(gap_s)
        proc.send_signal(signal.SIGTERM)


def ended(proc: subprocess.Popen, run_dir: Path) -> tuple[str, dict, list[int], int]:
    """After the process exits: (stderr, summary.json, the steps of diag.jsonl, the newest checkpoint's step), with
    what must hold whatever the signals did: exit 0, no traceback, summary 'stopped' at the last line of a whole
    diag.jsonl (every step once), no temporary file, the newest checkpoint loadable and reached by diag.jsonl."""
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    data = (run_dir / "diag.jsonl").read_bytes()
    assert data.endswith(b"\n")
    steps = [json.loads(line)["step"] for line in data.splitlines()]
    assert steps == list(range(1, len(steps) + 1)), steps
    assert summary["status"] == "stopped" and summary["exit_code"] == 0 and summary["step"] == steps[-1], summary
    assert "SIGTERM" in summary["message"]
    assert not list(run_dir.rglob("*.tmp"))
    newest, path = list_checkpoints(run_dir)[-1]
    assert read_checkpoint(path)["step"] == newest <= steps[-1]
    return err, summary, steps, newest


def stopping_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("stopping")]


def test_serial_two_sigterms_10_ms_apart_end_as_a_stopped_run(tmp_path):
    """Two SIGTERMs 10 ms apart (before: exit 143, the second one killing the process after or during the stop):
    exit 0, 'stopped', the stop checkpoint at the last step, at most one 'stopping' line."""
    proc, runs = start(tmp_path, "--serial")
    run_dir = run_dir_with_lines(runs, proc, 15)
    burst(proc, 2)
    err, _, steps, newest = ended(proc, run_dir)
    assert newest == steps[-1]
    assert len(stopping_lines(err)) <= 1, err[-3000:]


def test_serial_three_sigterms_10_ms_apart_end_as_a_stopped_run(tmp_path):
    """The issue's burst: three SIGTERMs 10 ms apart, wherever they land (before: chained tracebacks, no
    summary.json, no stop checkpoint, exit 143): exit 0, 'stopped', diag.jsonl whole, the newest checkpoint
    loadable."""
    proc, runs = start(tmp_path, "--serial")
    run_dir = run_dir_with_lines(runs, proc, 15)
    burst(proc, 3)
    ended(proc, run_dir)


def test_serial_second_signal_waits_for_the_stop_checkpoint_and_a_third_abandons_it(tmp_path):
    """The stop checkpoint's fsync made slow (2 s): a SIGTERM, then once its temporary file exists a second one:
    one 'stopping' line naming what a third would do, the process still there 0.5 s later, then the stop
    checkpoint kept at the last step. Again with a third signal 10 ms after the second: one line saying the stop
    checkpoint is abandoned, summary 'stopped' saying so, no temporary file, the newest checkpoint older (a
    periodic one) and loadable; a resume goes on from it with diag.jsonl cut back to it."""
    for n, slow in ((2, "2"), (3, "60")):
        proc, runs = start(tmp_path / str(n), "--serial", code=SLOW_FSYNC, SLOW_S=slow)
        run_dir = run_dir_with_lines(runs, proc, 15)
        proc.send_signal(signal.SIGTERM)
        folder = run_dir / "checkpoints"
        wait_for(lambda folder=folder: list(folder.glob("*.tmp")), proc, timeout=60, every=0.002)
        sent = time.monotonic()
        burst(proc, n - 1)
        if n == 2:
            time.sleep(0.5)
            assert proc.poll() is None  # the second signal waits for the checkpoint
        err, summary, steps, newest = ended(proc, run_dir)
        said = stopping_lines(err)
        assert len(said) == 1 and "a third signal abandons the stop checkpoint" in said[0], err[-3000:]
        abandoned = [line for line in err.splitlines() if line.startswith("a third signal")]
        if n == 2:
            assert newest == steps[-1] and not abandoned
            continue
        assert time.monotonic() - sent < 30  # not the 60 s of the slow fsync: the third signal cut it short
        assert len(abandoned) == 1 and "abandoned" in summary["message"], err[-3000:]
        assert newest < steps[-1] and f"the newest checkpoint is update {newest}" in err
        assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", str(steps[-1] + 3)]) == 0
        again = [json.loads(line)["step"] for line in (run_dir / "diag.jsonl").read_bytes().splitlines()]
        assert again == list(range(1, steps[-1] + 4))


def test_ray_burst_of_three_sigterms_during_the_stop_checkpoint(tmp_path):
    """Ray mode, the learner actor's stop checkpoint made slow (60 s): a SIGTERM, then, once the learner is making
    that checkpoint, two more 10 ms apart: one 'stopping' line, one line saying the stop checkpoint is abandoned,
    and the run ends in seconds (the learner actor killed, the monitor's wait on it over): exit 0, 'stopped',
    diag.jsonl whole, the newest checkpoint (a periodic one) loadable."""
    marker = tmp_path / "stopping"
    proc, runs = start(tmp_path, code=SLOW_LEARNER_CHECKPOINT, SLOW_S="60", STOP_MARKER=str(marker))
    run_dir = run_dir_with_lines(runs, proc, 15)
    proc.send_signal(signal.SIGTERM)
    wait_for(marker.exists, proc, timeout=60)
    sent = time.monotonic()
    burst(proc, 2)
    err, summary, steps, newest = ended(proc, run_dir)
    assert time.monotonic() - sent < 40, err[-3000:]
    said = stopping_lines(err)
    assert len(said) == 1 and "a third signal abandons the stop checkpoint" in said[0], err[-3000:]
    assert len([line for line in err.splitlines() if line.startswith("a third signal")]) == 1, err[-3000:]
    assert "abandoned" in summary["message"] and newest < steps[-1]


def test_the_job_entry_ignores_the_late_signals_of_a_burst_as_local_does(monkeypatch):
    """`python -m foxhunt_ray.job` (what `ray job submit` runs) ends the way foxhunt_ray.local does once a stop
    signal has reached the run: SIGINT and SIGTERM ignored while the process exits, so a late signal of the burst
    cannot turn the run's exit code into 143 (before: `sys.exit(main())`, the default handlers back). In-process,
    the driver replaced by one that returns 0 after a stop: under a second."""
    import runpy

    from foxhunt_ray.loops import StopSignals

    previous = {sig: signal.getsignal(sig) for sig in StopSignals.SIGNALS}
    monkeypatch.setattr(driver, "main", lambda *a, **k: 0)
    monkeypatch.setattr(StopSignals, "signalled", True, raising=False)
    monkeypatch.setattr(sys, "argv", ["foxhunt_ray.job", "--serial"])
    try:
        with pytest.raises(SystemExit) as ended:
            runpy.run_module("foxhunt_ray.job", run_name="__main__")
        assert ended.value.code == 0
        assert all(signal.getsignal(sig) == signal.SIG_IGN for sig in StopSignals.SIGNALS)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_stop_signal_during_what_follows_the_run_ends_it_with_one_line(tmp_path, capsys):
    """Ctrl-C (or SIGTERM) while foxhunt_ray.local evaluates the finished run: one line saying the run is whole and
    how to evaluate it, the run's exit code, no traceback (before: a KeyboardInterrupt traceback and exit by
    SIGINT, or SIGTERM's default end, 143, with no word); the handlers are back afterwards. In-process, the
    evaluation replaced by one that is interrupted, a run of 2 updates."""

    def interrupted(plan, code):
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):  # it would end the process with no word
            raise AssertionError("SIGTERM has its default handler while the run's evaluation goes on")
        signal.raise_signal(signal.SIGTERM)  # as `kill` would: SIGTERM, not a KeyboardInterrupt raised by hand
        raise AssertionError("SIGTERM did not end the evaluation")

    before = signal.getsignal(signal.SIGTERM)
    flags = ["--preset", "smoke", "--serial", "--quiet", "--steps", "2", "--out", str(tmp_path / "runs")]
    assert driver.main(flags, after=interrupted) == 0
    err = capsys.readouterr().err
    (run_dir,) = (tmp_path / "runs").glob("*/*/0")
    assert f"interrupted after the run, in what follows it: the run is whole in {run_dir} (exit 0)" in err
    assert "Traceback" not in err and json.loads((run_dir / "summary.json").read_text())["status"] == "done"
    assert signal.getsignal(signal.SIGTERM) == before and signal.getsignal(signal.SIGINT) is signal.default_int_handler

"""The last faults, item 4 (docs/faults.md, "A monitor actor alive but silent"): a monitor actor stopped with
`kill -STOP` is found by its own name after --monitor-timeout-s, the healthy learner is not blamed for it (before:
the driver killed the learner as "stuck" after --learner-timeout-s, spending a restart, then waited on the monitor
for ever with no line), and the run ends with exit 1, the run folder whole: the driver kills the monitor actor,
records the steps the learner answered but the monitor never recorded, keeps a checkpoint there and writes
summary.json 'error' itself.

The fault travels with the actor's class, as in tests/test_faults_ray.py: `foxhunt_ray.remote`'s RayMonitor is
swapped for a subclass made inside a function (Ray ships it by value), which stops its own process at its
`at_call`-th record_update."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

from actors.checkpoints import list_checkpoints, read_checkpoint
from foxhunt_ray import driver, remote

SMOKE = ["--preset", "smoke", "--quiet", "--checkpoint-interval-s", "0"]


def monitor_that_stops_itself(at_call: int, pid_file: Path):
    """A RayMonitor that stops its own process (SIGSTOP, as `kill -STOP` would) at its `at_call`-th record_update,
    before recording it; its pid goes to pid_file first (for the test's safety net)."""
    from foxhunt_ray.monitor_actor import RayMonitor

    class StoppingMonitor(RayMonitor):
        calls = 0

        def record_update(self, answer):
            self.calls += 1
            if self.calls == at_call:
                pid_file.write_text(str(os.getpid()))
                os.kill(os.getpid(), signal.SIGSTOP)
            return super().record_update(answer)

    return StoppingMonitor


def continue_later(pid_file: Path, after_s: float) -> threading.Timer:
    """A safety net for code without the fix, which would wait on the stopped monitor for ever: SIGCONT after
    after_s, so that such a run ends (and fails the test's assertions) instead of hanging the suite."""

    def cont() -> None:
        try:
            os.kill(int(pid_file.read_text()), signal.SIGCONT)
        except (OSError, ValueError):
            pass

    timer = threading.Timer(after_s, cont)
    timer.daemon = True
    timer.start()
    return timer


def test_ray_stopped_monitor_actor_is_named_and_the_run_ends_whole(tmp_path, ray_local, monkeypatch, capsys):
    """kill -STOP of the monitor actor at its 6th call (one rollout actor, --learner-timeout-s and
    --monitor-timeout-s 4): one warning and one error naming the monitor actor and --monitor-timeout-s, no word
    of the learner (not killed, no restart), exit 1, summary 'error' at the last line of diag.jsonl, which holds
    every step 1..N once (N past the stopped call: the driver recorded what the learner had answered), the newest
    checkpoint at N and loadable; a resume (serial) goes on from it to N + 5."""
    pid_file = tmp_path / "monitor.pid"
    monkeypatch.setattr(remote, "RayMonitor", monitor_that_stops_itself(6, pid_file))
    timer = continue_later(pid_file, 90.0)
    flags = ("--steps", "40", "--checkpoint-every", "5", "--rollout-workers", "1")
    timeouts = ("--learner-timeout-s", "4", "--monitor-timeout-s", "4")
    try:
        code = driver.main([*SMOKE, "--out", str(tmp_path / "runs"), "--name", "m", *flags, *timeouts])
    finally:
        timer.cancel()
    (run_dir,) = (tmp_path / "runs").glob("*/m/0")
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "learner actor" not in err, err[-3000:]  # the learner is neither blamed, killed nor replaced
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(warnings) == 1 and len(errors) == 1, err[-3000:]
    for line in (warnings[0], errors[0]):
        assert "the monitor actor" in line and "--monitor-timeout-s, 4 s" in line, line

    data = (run_dir / "diag.jsonl").read_bytes()
    assert data.endswith(b"\n")
    steps = [json.loads(line)["step"] for line in data.splitlines()]
    last = steps[-1]
    assert steps == list(range(1, last + 1)) and last >= 6, steps  # whole, each step once, past the stopped call
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "error" and summary["exit_code"] == 1 and summary["step"] == last
    assert "the monitor actor" in summary["message"] and "--monitor-timeout-s" in summary["message"]
    assert f"error: {summary['message']}" == errors[0]
    newest, path = list_checkpoints(run_dir)[-1]
    assert newest == last and read_checkpoint(path)["step"] == last
    assert not list(run_dir.rglob("*.tmp"))

    capsys.readouterr()
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", str(last + 5)]) == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "diag.jsonl").read_bytes().splitlines()]
    assert steps == list(range(1, last + 6))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"

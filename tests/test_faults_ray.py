"""Issue 14, class 4 in Ray mode (docs/faults.md): every rollout payload bad, bad payloads for the starvation
window, and a full disk, end the run with exit 1, one message and summary.json 'error'; a few payloads refused
mid-run are counted and the run goes on; as tests/test_faults.py and tests/test_input_limits.py prove in serial
mode.

A monkeypatch in this process does not reach an actor's process, so the faults travel with the actor's class:
the test swaps `foxhunt_ray.remote`'s RolloutWorker or RayMonitor for a subclass made inside a function (so Ray
ships it by value, not by an import path the worker lacks), and that class makes the fault in the actor's own
process: a rollout actor whose payloads are corrupted on the way out (the actor validated them before), a
learner actor with a starvation window of seconds (WireLimits.max_bad_seconds), a monitor actor whose disk fills
(os.write writes half a line, then ENOSPC), whose process may write no more than a set size (RLIMIT_FSIZE: the
kernel writes half a checkpoint, then EFBIG) or that stops itself (SIGSTOP, as `kill -STOP`)."""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from actors import wire
from actors.checkpoints import list_checkpoints, read_checkpoint
from foxhunt_ray import driver, remote

SMOKE = ["--preset", "smoke", "--quiet", "--checkpoint-interval-s", "0"]


def run(tmp_path: Path, *flags: str) -> tuple[int, Path]:
    code = driver.main([*SMOKE, "--out", str(tmp_path / "runs"), *flags])
    return code, next((tmp_path / "runs").glob("*/*/0"))


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def steps(run_dir: Path) -> list[int]:
    data = (run_dir / "diag.jsonl").read_bytes()
    assert not data or data.endswith(b"\n"), data[-200:]  # no torn last line
    return [r["step"] for r in map(json.loads, data.splitlines()) if "event" not in r]


def checkpoint_steps(run_dir: Path) -> list[int]:
    """The steps of the run's kept checkpoints (checkpoints/ckpt_<step>.pt), oldest first."""
    return sorted(int(p.stem.split("_")[1]) for p in (run_dir / "checkpoints").glob("ckpt_*.pt"))


def no_tmp(run_dir: Path) -> None:
    assert not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))


def one_message(capsys, says: str) -> tuple[str, str]:
    """(the one `error:` line on stderr, all of stderr): no traceback, and the line says `says`."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and says in errors[0], err[-3000:]
    return errors[0], err


# ------------------------------------------------------------------------ every rollout payload bad


def corrupting_rollout_worker():
    """A RolloutWorker whose every payload goes out bad, in turn: cut short, all zeros (no magic), and one that
    decodes but that the learner refuses (an action the market does not have)."""
    import numpy as np

    from actors.rollout import RolloutWorker

    class CorruptingRolloutWorker(RolloutWorker):
        sent = 0

        def sample(self, n_steps=None):
            payload = super().sample(n_steps)
            self.sent += 1
            if self.sent % 3 == 1:
                return payload[:-8]
            if self.sent % 3 == 2:
                return np.zeros(64, np.uint8)
            batch = wire.decode(bytes(payload))
            batch = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in batch.items()}
            batch.pop("wire_version")
            batch["actions"][0, 0] = 99
            return wire.encode(batch)

    return CorruptingRolloutWorker


def learner_log_lines(ray) -> list[str]:
    """The lines the learner actor's PayloadDecoder logged about bad payloads (its worker's stderr file)."""
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    found = []
    for path in logs.glob("worker-*.err"):
        found += [x for x in path.read_text(errors="replace").splitlines() if "payload" in x and "dropped" in x]
        found += [x for x in path.read_text(errors="replace").splitlines() if "the same fault" in x]
    return found


def learner_log_text(ray) -> str:
    """Everything the Ray workers wrote to their stderr files (the learner actor's log among them)."""
    logs = Path(ray._private.worker._global_node.get_logs_dir_path())
    return "".join(path.read_text(errors="replace") for path in logs.glob("worker-*.err"))


def test_ray_run_whose_every_payload_is_bad_ends_with_the_faults_counted(tmp_path, ray_local, monkeypatch, capsys):
    """main: the Ray loop sampled forever with no update. Now the learner actor counts each bad or refused payload,
    says it is starved after 64 in a row, and the driver ends the run: exit 1, one line naming each fault and its
    count, summary 'error' with the same text; each kind of fault logged at most twice (its 1st and 10th), not 64
    lines. --time-limit-s bounds the test should that path regress (the run would then end 'done', exit 0)."""
    monkeypatch.setattr(remote, "RolloutWorker", corrupting_rollout_worker())
    code, run_dir = run(tmp_path, "--steps", "20", "--time-limit-s", "60")
    _, err = one_message(capsys, "no good rollout payload in the last")
    assert code == 1
    s = summary(run_dir)
    assert s["status"] == "error" and s["exit_code"] == 1 and s["step"] == 0 and f"error: {s['message']}\n" in err
    streak = int(re.search(r"in the last (\d+) ", s["message"]).group(1))
    # a learner call takes every payload ready (one or two here): the streak is checked after each call
    assert wire.MAX_BAD_IN_A_ROW <= streak <= wire.MAX_BAD_IN_A_ROW + 2
    kinds = re.findall(r"(?:: |; )(\d+) x (bad rollout payload|rollout payload refused by the learner): ", s["message"])
    assert sum(int(n) for n, _ in kinds) == streak  # every fault counted, under its kind
    assert {what for _, what in kinds} == {"bad rollout payload", "rollout payload refused by the learner"}
    assert "truncated" in s["message"] and "does not start with" in s["message"] and "actions" in s["message"]
    assert steps(run_dir) == []
    logged = learner_log_lines(ray_local)
    assert len(kinds) <= len(logged) <= 2 * len(kinds), logged


# ------------------------------------------------------------------------ bad payloads for the starvation window


def rollout_worker_gone_bad(*, good: int, delay_s: float):
    """A RolloutWorker whose first `good` samples are good; every later one takes delay_s longer and arrives cut
    short: fewer bad payloads than MAX_BAD_IN_A_ROW reach the learner in a window of a few seconds."""
    import time

    from actors.rollout import RolloutWorker

    class GoneBadRolloutWorker(RolloutWorker):
        sent = 0

        def sample(self, n_steps=None):
            payload = super().sample(n_steps)
            self.sent += 1
            if self.sent <= good:
                return payload
            time.sleep(delay_s)
            return payload[:-8]

    return GoneBadRolloutWorker


def learner_with_a_starvation_window(seconds: float):
    """A RayLearnerWorker whose PayloadDecoder says the run is starved after `seconds` of bad payloads instead of
    MAX_BAD_SECONDS (WireLimits.max_bad_seconds: the learner's own argument, not the run's config)."""
    from foxhunt_ray.remote import RayLearnerWorker

    class ShortWindowLearner(RayLearnerWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "limits": wire.WireLimits(max_bad_seconds=seconds)})

    return ShortWindowLearner


def test_ray_run_fed_only_bad_payloads_for_the_starvation_window_ends(tmp_path, ray_local, monkeypatch, capsys):
    """Two rollout actors send 5 good payloads each, then only bad ones, slowly (0.2 s each): after the learner's
    starvation window (3 s here, WireLimits.max_bad_seconds; 120 s by default) the run ends as the serial path
    ends it: exit 1, one error line naming the streak and the window, summary 'error'. Nothing the learner trained
    on is lost: diag.jsonl holds steps 1..10, every good payload's step (main: the last one's lines stayed queued in
    the learner actor, so diag.jsonl ended at 9 while the final checkpoint was at 10), the final checkpoint is at
    10, and once the rollout side is fixed a resume continues the run to its end."""
    monkeypatch.setattr(remote, "RolloutWorker", rollout_worker_gone_bad(good=5, delay_s=0.2))
    monkeypatch.setattr(remote, "RayLearnerWorker", learner_with_a_starvation_window(3.0))
    code, run_dir = run(tmp_path, "--steps", "100", "--rollout-workers", "2", "--time-limit-s", "60")
    message, err = one_message(capsys, "no good rollout payload in the last")
    assert code == 1
    assert "s; the run ends after 64 in a row or 3 s): " in message and "bad rollout payload" in message
    streak = int(re.search(r"in the last (\d+) \((\d+) s;", message).group(1))
    assert 2 <= streak < wire.MAX_BAD_IN_A_ROW  # the window ended it, not the count
    s = summary(run_dir)
    assert s["status"] == "error" and s["exit_code"] == 1 and f"error: {s['message']}\n" in err
    assert steps(run_dir) == list(range(1, 11)) and s["step"] == 10
    assert checkpoint_steps(run_dir)[-1] == 10
    no_tmp(run_dir)
    monkeypatch.undo()
    assert driver.main(["--resume", str(run_dir), "--quiet", "--steps", "20"]) == 0
    assert steps(run_dir) == list(range(1, 21)) and summary(run_dir)["status"] == "done"


# ------------------------------------------------------------------------ a full disk in the monitor actor


# Each RayMonitor subclass defines __init__: RayMonitor itself goes to the actor by value too (the attribute it is
# found by names the subclass while the test runs), and with only its __init__, super() in it refused the actor.


def monitor_whose_disk_fills(*, diag_step: int):
    """A RayMonitor in whose process the disk fills at diag_step's line: half of it is written, then ENOSPC."""
    from foxhunt_ray.remote import RayMonitor

    class FullDiskMonitor(RayMonitor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            real_write = os.write

            def write(fd, data):
                if bytes(data).startswith(b'{"step":%d,' % diag_step):
                    real_write(fd, bytes(data)[: len(data) // 2])
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return real_write(fd, data)

            os.write = write  # this actor's process only

    return FullDiskMonitor


def monitor_with_a_file_size_limit(*, at_checkpoint: int):
    """A RayMonitor whose process may write no file past half a checkpoint's size from its at_checkpoint-th
    checkpoint on (RLIMIT_FSIZE, SIGXFSZ ignored: the kernel writes what fits, then the write fails with EFBIG)."""
    from foxhunt_ray.remote import RayMonitor

    class LimitedMonitor(RayMonitor):
        seen = 0

        def __init__(self, *args, **kwargs):
            import signal

            super().__init__(*args, **kwargs)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

        def _keep(self, checkpoints):
            import resource

            self.seen += len(checkpoints)
            if checkpoints and self.seen >= at_checkpoint:
                half = len(checkpoints[0].data) // 2
                resource.setrlimit(resource.RLIMIT_FSIZE, (half, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
            return super()._keep(checkpoints)

    return LimitedMonitor


def test_ray_full_disk_while_the_monitor_writes_diag(tmp_path, ray_local, monkeypatch, capsys):
    """ENOSPC half-way through step 25's line in the monitor actor: exit 1, one message naming the last whole
    update, diag.jsonl cut back to steps 1..24, summary.json 'error' at 24, no .tmp; a resume goes on from the
    checkpoint at 10 or 20 to a whole run (in serial mode: the folder the fault left is what is checked; a resume
    in Ray mode is the starvation test's)."""
    monkeypatch.setattr(remote, "RayMonitor", monitor_whose_disk_fills(diag_step=25))
    # one rollout actor: the fault is the monitor actor's
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10", "--rollout-workers", "1")
    message, _ = one_message(capsys, "is full (No space left on device)")
    assert code == 1
    assert steps(run_dir) == list(range(1, 25))
    s = summary(run_dir)
    assert s["status"] == "error" and s["exit_code"] == 1 and s["step"] == 24 and "is full" in s["message"]
    assert "the run stopped after update 24;" in message and f"--resume {run_dir}" in message
    no_tmp(run_dir)
    monkeypatch.undo()
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "40"]) == 0
    assert steps(run_dir) == list(range(1, 41)) and summary(run_dir)["status"] == "done"


def test_ray_file_size_limit_while_the_monitor_writes_a_checkpoint(tmp_path, ray_local, monkeypatch, capsys):
    """No write patched: the kernel refuses the monitor actor's second checkpoint part-way (RLIMIT_FSIZE of its
    process, EFBIG): exit 1, one message, no .tmp, the first checkpoint kept whole and loadable, diag.jsonl whole
    lines up to the failed checkpoint's step or past it, summary.json 'error'."""
    monkeypatch.setattr(remote, "RayMonitor", monitor_with_a_file_size_limit(at_checkpoint=2))
    # one rollout actor: the fault is the monitor actor's
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10", "--rollout-workers", "1")
    message, _ = one_message(capsys, "reached the size this process may write (ulimit -f)")
    assert code == 1
    no_tmp(run_dir)
    kept = checkpoint_steps(run_dir)
    assert len(kept) == 1 and 10 <= kept[0] < 20
    done = steps(run_dir)
    assert done == list(range(1, len(done) + 1)) and len(done) >= 20
    s = summary(run_dir)
    assert s["status"] == "error" and s["exit_code"] == 1 and s["step"] == len(done)
    assert f"the run stopped after update {len(done)};" in message and f"--resume {run_dir}" in message


# ------------------------------------------------------------------------ a few payloads refused mid-run


def refusing_rollout_worker(*, refuse_at: tuple[int, ...], narrow_at: tuple[int, ...]):
    """A RolloutWorker whose samples numbered refuse_at (1 = its first) hold an action the market lacks and those
    numbered narrow_at an observation one column narrower than the env's: both decode, the learner refuses them."""
    import numpy as np

    from actors.rollout import RolloutWorker

    class RefusingRolloutWorker(RolloutWorker):
        sent = 0

        def sample(self, n_steps=None):
            payload = super().sample(n_steps)
            self.sent += 1
            if self.sent not in refuse_at + narrow_at:
                return payload
            batch = wire.decode(bytes(payload))
            batch = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in batch.items()}
            batch.pop("wire_version")
            if self.sent in refuse_at:
                batch["actions"][0, 0] = 99
            else:
                batch["obs"] = np.ascontiguousarray(batch["obs"][..., :-1])
            return wire.encode(batch)

    return RefusingRolloutWorker


def test_ray_payloads_refused_mid_run_are_counted_and_the_run_goes_on(tmp_path, ray_local, monkeypatch, capsys):
    """Each of two rollout actors sends good payloads, then one with an action out of range (its 4th sample) and
    one with an observation of another width (its 6th), then good ones again: the learner actor counts and skips
    the four, the run ends 'done' at its --steps with every diag line 1..30 whole, bad_payloads = 4 on the last
    line, in summary.json and in the final checkpoint, each kind of fault logged once, and no error line."""
    from actors.checkpoints import read_checkpoint

    logged_before = Counter(learner_log_lines(ray_local))  # other tests' actors logged there too
    monkeypatch.setattr(remote, "RolloutWorker", refusing_rollout_worker(refuse_at=(4,), narrow_at=(6,)))
    code, run_dir = run(tmp_path, "--steps", "30", "--rollout-workers", "2", "--checkpoint-every", "10")
    err = capsys.readouterr().err
    assert code == 0 and "Traceback" not in err and "error:" not in err, err[-3000:]
    s = summary(run_dir)
    assert s["status"] == "done" and s["exit_code"] == 0 and s["step"] == 30
    assert steps(run_dir) == list(range(1, 31))
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    counts = [r["bad_payloads"] for r in lines]
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == 4  # each refusal counted once, in order
    assert s["last"]["bad_payloads"] == 4
    kept = checkpoint_steps(run_dir)
    assert kept[-1] == 30 and len(kept) == 2
    for step in kept:  # whole and loadable; the last one carries the count into a resume
        state = read_checkpoint(run_dir / "checkpoints" / f"ckpt_{step:08d}.pt")
        assert state["step"] == step
    assert state["bad_payloads"] == 4
    logged = list((Counter(learner_log_lines(ray_local)) - logged_before).elements())
    assert len(logged) == 2 and all("refused by the learner" in x for x in logged), logged  # each kind once
    text = learner_log_text(ray_local)
    assert "batch['actions'] on valid steps must lie in [0, " in text and "batch['obs'].shape=(17, 4, " in text


# ------------------------------------------------------------------------ a rollout actor alive but silent


def claimer(marker: Path):
    """A function, true in the one process (of all the actors sharing `marker`) that creates it first: an atomic
    create, so exactly one actor, and not its restart, makes the fault. Made inside a function so that Ray ships
    it by value with the actor class (the actors' processes cannot import this test module)."""

    def first_to_claim() -> bool:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True

    return first_to_claim


def rollout_worker_that_hangs_once(marker: Path, at_sample: int):
    """A RolloutWorker of which one actor (the first to create `marker`) stops answering at its `at_sample`-th
    sample: alive, its sample never returns. Its restart (a new process, the constructor run again) finds the
    marker taken and samples as usual."""
    import time

    from actors.rollout import RolloutWorker

    first_to_claim = claimer(marker)

    class HangingRolloutWorker(RolloutWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.sent, self.hang = 0, first_to_claim()

        def sample(self, n_steps=None):
            self.sent += 1
            if self.hang and self.sent == at_sample:
                time.sleep(3600)
            return super().sample(n_steps)

    return HangingRolloutWorker


def test_ray_rollout_actor_that_stops_answering_is_restarted(tmp_path, ray_local, monkeypatch, capsys):
    """The one rollout actor stops answering at its third sample: it is killed after --sample-timeout-s and Ray
    restarts it; the sample is retried there and the run ends done with diag.jsonl whole (before: the driver
    waited on it for ever, past any time limit too). Its first sample had the start's grace (STARTUP_GRACE_S):
    an actor's start on this box takes longer than 4 s and is no hang."""
    monkeypatch.setattr(remote, "RolloutWorker", rollout_worker_that_hangs_once(tmp_path / "hung", at_sample=3))
    code, run_dir = run(tmp_path, "--steps", "30", "--rollout-workers", "1", "--sample-timeout-s", "4")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert summary(run_dir)["status"] == "done"
    assert steps(run_dir) == list(range(1, 31))
    warnings = [line for line in err.splitlines() if line.startswith("warning: rollout actor")]
    assert len(warnings) == 1, err[-3000:]
    assert re.search(r"returned no sample in \d+ s .*restart 1 of at most 3; --sample-timeout-s, 4 s,", warnings[0])
    assert (tmp_path / "hung").exists()


def test_ray_time_limit_ends_a_run_whose_rollout_actor_stopped_answering(tmp_path, ray_local, monkeypatch, capsys):
    """With the watchdog off (--sample-timeout-s 0) the time limit still ends the run: the driver stops waiting
    for the silent actor's sample then, the run ends done at the step it reached with a checkpoint there. The silent
    actor never answers the timings asked at the run's end: a short wait for them ends the test sooner."""
    from foxhunt_ray import loops

    monkeypatch.setattr(remote, "RolloutWorker", rollout_worker_that_hangs_once(tmp_path / "hung", at_sample=3))
    monkeypatch.setattr(loops, "WORKER_TIMINGS_WAIT_S", 1.0)
    code, run_dir = run(tmp_path, "--rollout-workers", "1", "--sample-timeout-s", "0", "--time-limit-s", "8")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    done = summary(run_dir)
    assert done["status"] == "done"
    reached = steps(run_dir)
    assert reached == list(range(1, len(reached) + 1)) and reached, reached
    assert checkpoint_steps(run_dir)[-1] == reached[-1]
    assert "warning: rollout actor" not in err


def learner_that_hangs_once(marker: Path, at_call: int):
    """A RayLearnerWorker of which the first actor (the one that creates `marker`) stops answering at its
    `at_call`-th update_from, or at the drain at the run's end for at_call 0: alive, the call never returns. Its
    replacement finds the marker taken."""
    import time

    from foxhunt_ray.remote import RayLearnerWorker

    first_to_claim = claimer(marker)

    class HangingLearner(RayLearnerWorker):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.calls, self.hang = 0, first_to_claim()

        def update_from(self, refs, stop_at=None, progress=None):
            self.calls += 1
            if self.hang and self.calls == at_call:
                time.sleep(3600)
            return super().update_from(refs, stop_at, progress)

        def drain_answer(self):  # at_call 0: the drain at the run's end
            if self.hang and not at_call:
                time.sleep(3600)
            return super().drain_answer()

    return HangingLearner


def test_ray_learner_actor_that_stops_answering_is_replaced(tmp_path, ray_local, monkeypatch, capsys):
    """The learner actor stops answering at its 12th call: after --learner-timeout-s the driver kills it and
    replaces it from the newest checkpoint as it does a learner that died; the run ends done with every step of
    diag.jsonl once (before: the driver waited on the call for ever)."""
    monkeypatch.setattr(remote, "RayLearnerWorker", learner_that_hangs_once(tmp_path / "hung", at_call=12))
    # one rollout actor: the fault is the learner actor's
    flags = ("--steps", "40", "--checkpoint-every", "5", "--learner-timeout-s", "5", "--rollout-workers", "1")
    code, run_dir = run(tmp_path, *flags)
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    assert (tmp_path / "hung").exists()
    warnings = [line for line in err.splitlines() if line.startswith("warning: the learner actor")]
    assert len(warnings) == 1 and "--learner-timeout-s, 5 s," in warnings[0], err[-3000:]
    assert "the learner actor died" in err and "restart 1 of at most 3" in err
    assert steps(run_dir) == list(range(1, 41))
    done = summary(run_dir)
    assert done["status"] == "done" and done["step"] == 40


def test_ray_learner_actor_stuck_at_the_run_s_end_is_replaced(tmp_path, ray_local, monkeypatch, capsys):
    """The learner actor hangs in the drain at the run's end: after --learner-timeout-s it is killed and replaced from
    the newest periodic checkpoint, which finishes the run: done at 40, diag.jsonl 1..40 each once, the final
    checkpoint at 40 (before: the driver waited on it for ever)."""
    monkeypatch.setattr(remote, "RayLearnerWorker", learner_that_hangs_once(tmp_path / "hung", at_call=0))
    # one rollout actor: the fault is the learner actor's
    flags = ("--steps", "40", "--checkpoint-every", "5", "--learner-timeout-s", "5", "--rollout-workers", "1")
    code, run_dir = run(tmp_path, *flags)
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    warnings = [line for line in err.splitlines() if line.startswith("warning: the learner actor")]
    assert len(warnings) == 1 and "at the run's end" in warnings[0], err[-3000:]
    assert "restart 1 of at most 3" in err, err[-3000:]
    assert steps(run_dir) == list(range(1, 41))
    done = summary(run_dir)
    assert done["status"] == "done" and done["step"] == 40
    assert checkpoint_steps(run_dir)[-1] == 40


# ------------------------------------------------------------------------ a monitor actor alive but silent
# (the last faults, item 4; docs/faults.md, "A monitor actor alive but silent"): a monitor actor stopped with
# `kill -STOP` is found by its own name after --monitor-timeout-s, the healthy learner is not blamed for it (before:
# the driver killed the learner as "stuck" after --learner-timeout-s, spending a restart, then waited on the monitor
# for ever with no line), and the run ends with exit 1, the run folder whole: the driver kills the monitor actor,
# records the steps the learner answered but the monitor never recorded, keeps a checkpoint there and writes
# summary.json 'error' itself. On this file's Ray instance.


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


def monitor_that_dies(at_call: int):
    """A RayMonitor whose process is killed (SIGKILL, as `kill -9` or the OOM killer) 0.3 s after it answered its
    `at_call`-th record_update, between calls, as a kill from outside lands: the call it then fails is one whose
    learner answer it never recorded."""
    from foxhunt_ray.monitor_actor import RayMonitor

    class DyingMonitor(RayMonitor):
        calls = 0

        def record_update(self, answer):
            self.calls += 1
            if self.calls == at_call:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
            return super().record_update(answer)

    return DyingMonitor


@pytest.mark.parametrize("fault", ["stops", "dies"])
def test_ray_stopped_monitor_actor_is_named_and_the_run_ends_whole(tmp_path, ray_local, monkeypatch, capsys, fault):
    """kill -STOP of the monitor actor at its 6th call (one rollout actor, --learner-timeout-s and
    --monitor-timeout-s 4): one warning and one error naming the monitor actor and --monitor-timeout-s, no word
    of the learner (not killed, no restart), exit 1, summary 'error' at the last line of diag.jsonl, which holds
    every step 1..N once (N past the stopped call: the driver recorded what the learner had answered), the newest
    checkpoint at N and loadable; a resume (serial) goes on from it to N + 5. A monitor actor killed outright
    (kill -9) after its 6th call ends the same way, its lines saying it died, the learner's answer of the call it
    failed recorded too (before: the driver's error path asked the dead actor for summary.json: a RayActorError
    traceback, no summary.json, no final checkpoint; then, taken over, that answer was dropped: a gap of steps and
    the driver's own monitor refusing the next one with a traceback)."""
    pid_file = tmp_path / "monitor.pid"
    made = monitor_that_stops_itself(6, pid_file) if fault == "stops" else monitor_that_dies(6)
    monkeypatch.setattr(remote, "RayMonitor", made)
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
        said = "--monitor-timeout-s, 4 s" if fault == "stops" else "died ("
        assert "the monitor actor" in line and said in line, line

    data = (run_dir / "diag.jsonl").read_bytes()
    assert data.endswith(b"\n")
    steps = [json.loads(line)["step"] for line in data.splitlines()]
    last = steps[-1]
    assert steps == list(range(1, last + 1)) and last >= 6, steps  # whole, each step once, past the stopped call
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "error" and summary["exit_code"] == 1 and summary["step"] == last
    assert "the monitor actor" in summary["message"]
    assert f"error: {summary['message']}" == errors[0]
    newest, path = list_checkpoints(run_dir)[-1]
    assert newest == last and read_checkpoint(path)["step"] == last
    assert not list(run_dir.rglob("*.tmp"))

    capsys.readouterr()
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", str(last + 5)]) == 0
    steps = [json.loads(line)["step"] for line in (run_dir / "diag.jsonl").read_bytes().splitlines()]
    assert steps == list(range(1, last + 6))
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "done"

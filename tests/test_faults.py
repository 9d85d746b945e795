"""Issue 14, classes 1, 5 and the full disk of 4 (docs/faults.md): one writer per run folder, readers that refuse
a damaged diag.jsonl, a resume that never damages what it resumes, and a full disk that ends in one message."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from actors.checkpoints import list_checkpoints
from actors.diag_file import DiagFileError, read_diag, step_records
from foxhunt_ray import driver, evaluate, report

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--preset", "smoke", "--quiet", "--checkpoint-interval-s", "0", "--serial"]


def run(tmp_path: Path, *flags: str, **kw) -> tuple[int, Path]:
    code = driver.main([*SMOKE, "--out", str(tmp_path / "runs"), *flags], **kw)
    found = sorted((tmp_path / "runs").glob("*/*/0"))
    return code, found[0]


def resume(run_dir: Path, *flags: str, **kw) -> int:
    return driver.main(["--resume", str(run_dir), "--serial", "--quiet", *flags], **kw)


def steps(run_dir: Path) -> list[int]:
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if "event" not in r]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of the run folder but the lock's holder note: what a refused command must leave alone."""
    files = sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != "run.lock")
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in files}


def no_tmp(run_dir: Path) -> None:
    assert not list(run_dir.rglob("*.tmp")), list(run_dir.rglob("*.tmp"))


# ---------------------------------------------------------------- class 1: two writers on one run folder


def test_a_resume_of_a_running_run_is_refused_and_writes_nothing(tmp_path, capsys):
    """While the run is at update 30, a --resume of its folder (the same process here; flock locks are per open
    file, so it is refused as another process's would be) exits 1 naming the folder and the holder, and writes
    nothing; the run goes on to a whole diag.jsonl."""
    seen: dict = {}

    def second_writer(step, workers):
        if step == 30 and not seen:
            run_dir = next((tmp_path / "runs").glob("*/*/0"))
            before = snapshot(run_dir)
            seen["code"] = resume(run_dir, "--steps", "80")
            seen["same"] = snapshot(run_dir) == before

    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "20", hook=second_writer)
    assert code == 0 and seen == {"code": 1, "same": True}
    err = capsys.readouterr().err
    assert f"run folder {run_dir} is being written by pid {os.getpid()} on host" in err
    assert steps(run_dir) == list(range(1, 61))


def test_another_process_holding_the_folder_is_named_and_a_kill_9_frees_it(tmp_path, capsys):
    """A real second process: a resume while it runs is refused with its pid; once it is killed -9 (the OS drops
    its lock) the resume goes on and diag.jsonl is whole."""
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "foxhunt_ray.job", *SMOKE, "--out", str(out), "--steps", "100000",
           "--checkpoint-every", "10"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = sorted(out.glob("*/*/0"))
            if found and len(list_checkpoints(found[0])) >= 2:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run made no two checkpoints in 120 s")
        run_dir = found[0]
        assert resume(run_dir, "--steps", str(list_checkpoints(run_dir)[-1][0] + 10)) == 1
        assert f"is being written by pid {proc.pid} on host" in capsys.readouterr().err
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    last = step_records(read_diag(run_dir / "diag.jsonl"))[-1]["step"]  # perhaps a torn line after it
    assert resume(run_dir, "--steps", str(last + 10)) == 0
    assert steps(run_dir) == list(range(1, last + 11))


def test_the_lock_is_released_when_the_run_ends(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "5")
    assert code == 0 and (run_dir / "run.lock").exists()
    from foxhunt_ray.run_folder import RunLock

    RunLock.acquire(run_dir).release()  # free again


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A done run of 40 updates with checkpoints at 30 and 40: tests copy it."""
    tmp = tmp_path_factory.mktemp("finished")
    code, run_dir = run(tmp, "--steps", "40", "--checkpoint-every", "10")
    assert code == 0 and [s for s, _ in list_checkpoints(run_dir)] == [30, 40]
    return run_dir


def copy_of(finished: Path, tmp_path: Path) -> Path:
    import shutil

    dst = tmp_path / "runs" / finished.relative_to(finished.parents[2])  # OUT/<code_sha>/<name>/0
    shutil.copytree(finished, dst)
    (dst / "run.lock").unlink(missing_ok=True)
    return dst


def damage(run_dir: Path, how: str) -> int:
    """Rewrites diag.jsonl as two writers or an edit would leave it; returns the 1-based line that is bad."""
    path = run_dir / "diag.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    if how == "duplicate":  # a second writer appended steps 21.. again after the first's 40
        lines += lines[20:25]
        bad = 41
    elif how == "interleaved":  # both appended: 21 between the first's steps
        lines.insert(30, lines[20])
        bad = 31
    elif how == "gap":  # steps 26..28 never written
        del lines[25:28]
        bad = 26
    else:  # a torn line in the middle: a crash's tail with lines appended after it
        lines[30] = lines[30][:17]
        bad = 31
    path.write_text("".join(lines))
    return bad


@pytest.mark.parametrize("how", ["duplicate", "interleaved", "gap", "torn_middle"])
def test_readers_refuse_a_damaged_diag_naming_the_line(finished, tmp_path, how, capsys):
    run_dir = copy_of(finished, tmp_path)
    bad = damage(run_dir, how)
    where = f"{run_dir / 'diag.jsonl'}:{bad}:"
    with pytest.raises(DiagFileError) as err:
        read_diag(run_dir / "diag.jsonl")
    assert str(err.value).startswith(where) and f"head -n {bad - 1}" in str(err.value)
    with pytest.raises(report.ReportError, match=rf"diag\.jsonl:{bad}:"):
        report.load_run(run_dir)
    with pytest.raises(evaluate.EvaluationError, match=rf"diag\.jsonl:{bad}:"):
        evaluate.load_run(run_dir)
    before = snapshot(run_dir)
    assert resume(run_dir, "--steps", "60") == 1  # a later resume: refused, nothing changed
    assert where in capsys.readouterr().err and snapshot(run_dir) == before


def test_following_the_message_repairs_the_run(finished, tmp_path):
    run_dir = copy_of(finished, tmp_path)
    bad = damage(run_dir, "duplicate")
    path = run_dir / "diag.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[: bad - 1]))  # head -n bad-1
    assert resume(run_dir, "--steps", "50") == 0 and steps(run_dir) == list(range(1, 51))


# ---------------------------------------------------------------- class 5: resume that damages what it resumes


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


class Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


@pytest.mark.parametrize("how", ["truncated", "empty", "other_preset", "unsafe"])
def test_an_unloadable_checkpoint_falls_back_to_the_older_one(finished, tmp_path, how, capsys):
    run_dir = copy_of(finished, tmp_path)
    newest = run_dir / "checkpoints" / "ckpt_00000040.pt"
    if how == "truncated":
        truncate(newest)
    elif how == "empty":
        newest.write_bytes(b"")
    elif how == "other_preset":  # a plan_a_v2 learner's checkpoint, copied in
        other = copy_of_other_preset(tmp_path)
        newest.write_bytes(other.read_bytes())
    else:
        torch.save({"format": "foxhunt_ray.run/1", "step": 40, "learner": Evil()}, newest)
    summary = (run_dir / "summary.json").read_bytes()
    assert resume(run_dir, "--steps", "40", "--resume-checkpoint", "40") == 1  # named: refused, not replaced
    err = capsys.readouterr().err
    assert "Traceback" not in err and "cannot resume" in err and (run_dir / "summary.json").read_bytes() == summary
    assert resume(run_dir, "--steps", "50") == 0
    err = capsys.readouterr().err
    assert f"checkpoint {newest} cannot be used" in err and "falling back to the older checkpoint" in err
    assert "Traceback" not in err and not (Path.cwd() / "pwned").exists()
    assert steps(run_dir) == list(range(1, 51))  # 31..40 recorded again, once
    assert json.loads((run_dir / "summary.json").read_text())["step"] == 50


def copy_of_other_preset(tmp_path: Path) -> Path:
    code, run_dir = run(tmp_path / "other", "--steps", "2", "--set", "learner.hidden_dim=48")
    assert code == 0
    return list_checkpoints(run_dir)[-1][1]


def test_no_usable_checkpoint_changes_nothing(finished, tmp_path, capsys):
    run_dir = copy_of(finished, tmp_path)
    for _, path in list_checkpoints(run_dir):
        truncate(path)
    before = snapshot(run_dir)
    assert resume(run_dir, "--steps", "60") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no kept checkpoint can be loaded" in err and "--resume-checkpoint" in err
    assert snapshot(run_dir) == before  # summary 'done' and every line stay


def test_a_checkpoint_can_be_chosen(finished, tmp_path, capsys):
    run_dir = copy_of(finished, tmp_path)
    assert resume(run_dir, "--steps", "45", "--resume-checkpoint", "30") == 0
    assert steps(run_dir) == list(range(1, 46))
    assert "run folder" in capsys.readouterr().out


def test_a_done_run_is_not_rewritten_by_a_resume_that_adds_nothing(finished, tmp_path, capsys):
    run_dir = copy_of(finished, tmp_path)
    before = snapshot(run_dir)
    assert resume(run_dir) == 1
    assert "is done at update 40" in capsys.readouterr().err and snapshot(run_dir) == before


def test_a_run_that_died_before_its_first_checkpoint_resumes_from_zero_or_reruns(tmp_path, capsys):
    def crash(step, workers):
        if step == 12:
            raise RuntimeError("the box fell over")

    code, run_dir = run(tmp_path, "--steps", "50", "--checkpoint-every", "100", hook=crash)
    assert code == 1 and not list_checkpoints(run_dir) and steps(run_dir) == list(range(1, 13))
    capsys.readouterr()
    assert resume(run_dir, "--steps", "20") == 0
    assert "starting over from step 0" in capsys.readouterr().err and steps(run_dir) == list(range(1, 21))
    # and a folder like it can be rerun with a new run's flags (under the same --name: another name is another
    # folder)
    code, run_dir = run(tmp_path / "b", "--steps", "50", "--checkpoint-every", "100", "--name", "x", hook=crash)
    assert code == 1
    capsys.readouterr()
    code, _ = run(tmp_path / "b", "--steps", "15", "--seed", "3", "--name", "x")
    assert code == 0 and "a new run replaces it" in capsys.readouterr().err
    assert steps(run_dir) == list(range(1, 16))
    assert json.loads((run_dir / "config.json").read_text())["run"]["seed"] == 3


def test_a_hand_edited_config_is_refused_unless_asked(finished, tmp_path, capsys):
    run_dir = copy_of(finished, tmp_path)
    path = run_dir / "config.json"
    path.write_text(path.read_text().replace('"horizon": 200', '"horizon": 37'))
    before = snapshot(run_dir)
    assert resume(run_dir, "--steps", "50") == 1
    err = capsys.readouterr().err
    assert "run.market.horizon: 200 -> 37" in err and "--allow-config-change" in err and snapshot(run_dir) == before
    assert resume(run_dir, "--steps", "50", "--allow-config-change") == 0
    assert "run.market.horizon: 200 -> 37" in capsys.readouterr().err
    change = json.loads((run_dir / "config_changes.jsonl").read_text())
    assert change["resumed_at_step"] == 40 and change["changes"] == ["run.market.horizon: 200 -> 37"]
    assert resume(run_dir, "--steps", "55") == 0  # the accepted config is the recorded one now


def test_a_reformatted_config_is_not_a_change(finished, tmp_path):
    run_dir = copy_of(finished, tmp_path)
    path = run_dir / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text())))
    assert resume(run_dir, "--steps", "45") == 0


# ---------------------------------------------------------------- class 4: a full disk


def fill_disk_at(monkeypatch, *, diag_step: int | None = None, checkpoint_step: int | None = None, summary=False):
    """The disk fills: diag.jsonl's line of diag_step gets half written, the checkpoint of checkpoint_step gets
    half written, summary.json cannot be written; each then raises ENOSPC as a full disk does."""
    import actors.learner_worker as lw
    import actors.monitor as mon

    real_write, real_save = os.write, torch.save

    def write(fd, data):
        if diag_step is not None and bytes(data).startswith(b'{"step":%d,' % diag_step):
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def save(obj, f, *a, **kw):
        if checkpoint_step is not None and isinstance(obj, dict) and obj.get("step") == checkpoint_step:
            f.write(b"PK\x03\x04 half a checkpoint")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *a, **kw)

    def atomic(path, data, **kw):
        if summary and Path(path).name == "summary.json":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_atomic(path, data, **kw)

    real_atomic = mon.write_atomic
    monkeypatch.setattr(os, "write", write)  # diag.jsonl's writer (actors.diag_file) calls os.write: undone after
    monkeypatch.setattr(lw.torch, "save", save)
    monkeypatch.setattr(mon, "write_atomic", atomic)


def assert_one_message(capsys) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert errors and "the disk holding" in errors[0] and "is full" in errors[0] and "--resume" in errors[0]
    return captured.err


def test_a_full_disk_while_writing_diag_ends_with_whole_lines_and_a_summary(tmp_path, monkeypatch, capsys):
    fill_disk_at(monkeypatch, diag_step=25)
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10")
    assert code == 1
    assert_one_message(capsys)
    assert (run_dir / "diag.jsonl").read_bytes().endswith(b"\n") and steps(run_dir) == list(range(1, 25))
    s = json.loads((run_dir / "summary.json").read_text())
    assert s["status"] == "error" and s["exit_code"] == 1 and "is full" in s["message"] and s["step"] == 24
    no_tmp(run_dir)
    monkeypatch.undo()
    assert resume(run_dir, "--steps", "40") == 0 and steps(run_dir) == list(range(1, 41))


def test_a_full_disk_while_checkpointing_leaves_no_tmp(tmp_path, monkeypatch, capsys):
    fill_disk_at(monkeypatch, checkpoint_step=20)
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10")
    assert code == 1
    assert_one_message(capsys)
    no_tmp(run_dir)
    assert [s for s, _ in list_checkpoints(run_dir)] == [10]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "error"


def test_a_disk_too_full_for_the_summary_says_so(tmp_path, monkeypatch, capsys):
    fill_disk_at(monkeypatch, diag_step=15, summary=True)
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10")
    assert code == 1
    err = assert_one_message(capsys)
    assert "summary.json not written" in err and not (run_dir / "summary.json").exists()
    no_tmp(run_dir)
    assert steps(run_dir) == list(range(1, 15))


def test_a_file_size_limit_in_a_real_process_ends_cleanly(tmp_path):
    """No monkeypatching: RLIMIT_FSIZE makes the kernel refuse writes past 40 kB (EFBIG), as a full disk would;
    the checkpoints of the smoke learner are larger, diag.jsonl reaches it too."""
    out = tmp_path / "runs"
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))\n"
        "from foxhunt_ray import driver\n"
        f"sys.exit(driver.main({[*SMOKE, '--out', str(out), '--steps', '200', '--checkpoint-every', '1000']!r}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and "reached the size this process may write" in proc.stderr
    run_dir = next(out.glob("*/*/0"))
    no_tmp(run_dir)
    assert (run_dir / "diag.jsonl").read_bytes().endswith(b"\n")
    n = len(steps(run_dir))
    assert 0 < n < 200 and json.loads((run_dir / "summary.json").read_text())["status"] == "error"


def test_a_killed_run_is_not_resumed_past_its_kill_unless_asked(tmp_path, capsys):
    """A run killed by a rule has finished: a resume would train past the kill and rewrite its record. It is
    refused, naming the rule and the way to continue on purpose (--resume-checkpoint), and nothing changes."""
    code, run_dir = run(tmp_path, "--steps", "60", "--checkpoint-every", "10", "--inject-nan-at", "25")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 3 and summary["status"] == "killed" and summary["rule"] == "non_finite"
    killed_at = summary["step"]
    before = snapshot(run_dir)
    capsys.readouterr()
    assert resume(run_dir, "--steps", "60") == 1
    err = capsys.readouterr().err
    assert f"was killed by rule non_finite at update {killed_at}" in err and "--resume-checkpoint" in err
    assert snapshot(run_dir) == before
    # its summary.json damaged: refused as unreadable, not passed over (which trained past the kill and rewrote it)
    kept = (run_dir / "summary.json").read_bytes()
    (run_dir / "summary.json").write_bytes(b"{not json")
    damaged = snapshot(run_dir)
    assert resume(run_dir, "--steps", "60") == 1
    err = capsys.readouterr().err
    assert "summary.json cannot be read (JSONDecodeError: " in err and "rm " in err and "Traceback" not in err, err
    assert snapshot(run_dir) == damaged
    (run_dir / "summary.json").write_bytes(kept)
    older = min(s for s, _ in list_checkpoints(run_dir))
    assert older < killed_at
    # on purpose: from the checkpoint before the kill, the run trains again and meets its (injected) fault again
    assert resume(run_dir, "--steps", "60", "--resume-checkpoint", str(older)) == 3
    assert json.loads((run_dir / "summary.json").read_text())["step"] == killed_at
    assert steps(run_dir) == list(range(1, killed_at + 1))

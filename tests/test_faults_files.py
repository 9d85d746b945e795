"""The last faults, items 1, 2, 3 and config.json's part of 6 (docs/faults.md): a symbolic link planted in a run
folder is refused, never written through; an endless or oversized input (a FIFO, /dev/zero, a huge file) is named,
never read; a run's --storage copy is resumed only through its claim, never while the run that copies there goes
on; an edited config.json is caught when config.sha256 is gone but config.written.json is not. Serial mode and
direct calls, seconds."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from actors import files
from actors.checkpoints import CheckpointError, list_checkpoints, read_checkpoint
from actors.diag_file import read_diag
from actors.files import MAX_DIAG_BYTES, MAX_TEXT_BYTES, RunFileError, read_bounded, write_atomic
from actors.kill_rules import KillConfig
from actors.monitor import Monitor
from foxhunt_ray import driver, report, storage
from foxhunt_ray.run_folder import RunLock, config_changes
from foxhunt_ray.storage import OWNER_FILE

SMOKE = ["--preset", "smoke", "--serial", "--quiet", "--checkpoint-interval-s", "0"]


@contextlib.contextmanager
def at_most(seconds: float):
    """Fails the test instead of hanging when the code under test blocks (opening or reading a FIFO)."""

    def late(signum, frame):
        raise TimeoutError(f"still reading after {seconds} s: the input was not refused")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every regular file below folder (links and FIFOs left out: they are what the test planted)."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != "run.lock"
    }


def steps(data: bytes) -> list[int]:
    return [r["step"] for r in map(json.loads, data.decode().splitlines()) if "event" not in r]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished smoke run of 20 updates, checkpoints at 10 and 20."""
    out = tmp_path_factory.mktemp("finished") / "runs"
    assert driver.main([*SMOKE, "--out", str(out), "--steps", "20", "--checkpoint-every", "10"]) == 0
    (run_dir,) = out.glob("*/*/0")
    return run_dir


def copy_of(finished: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "copy" / "sha" / "name" / "0"
    shutil.copytree(finished, run_dir, symlinks=True)
    (run_dir / "run.lock").unlink()
    return run_dir


def resume(run_dir: Path | str, *flags: str) -> int:
    return driver.main(["--resume", str(run_dir), "--serial", "--quiet", *flags])


# ---------------------------------------------------------------- item 1: no write through a symbolic link


@pytest.mark.parametrize(
    "name", ["run.lock", "diag.jsonl", "summary.json", "summary.json.tmp", "checkpoints/ckpt_00000030.pt.tmp"]
)
def test_a_link_in_the_run_folder_is_refused_and_its_target_untouched(finished, tmp_path, name, capsys):
    """A resume of a run folder holding a link where the run writes: exit 1, one message naming the link and how
    to remove it, the file it points at and the run folder as they were (before: the lock holder's JSON was
    written into the target of run.lock, the resume went on and exited 0)."""
    run_dir = copy_of(finished, tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes((finished / "diag.jsonl").read_bytes())  # a file a run could append to as its diag.jsonl
    link = run_dir / name
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    before, kept = snapshot(run_dir), victim.read_bytes()
    assert resume(run_dir, "--steps", "30") == 1
    err = capsys.readouterr().err
    assert f"{link} is a symbolic link to {victim}" in err and f"rm {link}" in err and "Traceback" not in err
    assert victim.read_bytes() == kept and snapshot(run_dir) == before and link.is_symlink()
    link.unlink()  # as the message says: then the resume goes on
    if name in ("diag.jsonl", "summary.json"):
        shutil.copy(finished / name, link)
    assert resume(run_dir, "--steps", "30") == 0
    assert steps((run_dir / "diag.jsonl").read_bytes()) == list(range(1, 31)) and victim.read_bytes() == kept


def test_a_new_run_into_a_folder_with_a_linked_lock_writes_nothing_there(tmp_path, capsys):
    out = tmp_path / "runs"
    sha = driver.provenance.code_sha()
    run_dir = out / sha / "n" / "0"
    run_dir.mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (run_dir / "run.lock").symlink_to(victim)
    assert driver.main([*SMOKE, "--out", str(out), "--steps", "2", "--name", "n"]) == 1
    assert f"{run_dir / 'run.lock'} is a symbolic link to {victim}" in capsys.readouterr().err
    assert victim.read_text() == "precious\n" and sorted(p.name for p in run_dir.iterdir()) == ["run.lock"]


def test_the_writers_open_no_link_even_when_planted_after_the_check(tmp_path):
    """write_atomic's temporary file, the monitor's diag.jsonl (its append and its cut back on a resume): each
    refuses a link (a dangling one too: O_CREAT would make the file it names) and leaves its target alone."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "summary.json"
    (tmp_path / "summary.json.tmp").symlink_to(victim)
    with pytest.raises(RunFileError, match=r"summary.json.tmp is a symbolic link to .*victim"):
        write_atomic(target, "{}")
    assert victim.read_text() == "precious\n" and not target.exists()

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    nowhere = tmp_path / "made-by-the-link"
    (run_dir / "diag.jsonl").symlink_to(nowhere)  # dangling
    with pytest.raises(RunFileError, match=r"diag\.jsonl is a symbolic link"):
        Monitor(run_dir, KillConfig())
    assert not nowhere.exists()
    (run_dir / "diag.jsonl").unlink()
    (run_dir / "diag.jsonl").symlink_to(victim)
    with pytest.raises(ValueError, match=r"diag\.jsonl is a symbolic link"):
        Monitor(run_dir, KillConfig(), resume_at=0)  # a resume cuts diag.jsonl back: never the file it points at
    assert victim.read_text() == "precious\n"


def test_a_link_planted_mid_run_ends_the_run_in_one_error_line(finished, tmp_path, capsys):
    """Links planted after the lock's check, mid-run, at the next checkpoint's and summary.json's temporary names:
    the checkpoint's write is refused, the run ends with exit 1 and one `error:` line naming the link and the
    resume, then one line saying summary.json is not written (its own link refused): no traceback (before: the
    RunFileError's traceback, then a second one from summary.json), the targets and what was kept whole."""
    run_dir = copy_of(finished, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    ckpt_tmp, summary_tmp = run_dir / "checkpoints" / "ckpt_00000025.pt.tmp", run_dir / "summary.json.tmp"
    summary = (run_dir / "summary.json").read_bytes()

    def plant(step, workers):
        if step == 22 and not ckpt_tmp.is_symlink():
            ckpt_tmp.symlink_to(victim)
            summary_tmp.symlink_to(victim)

    code = driver.main(
        ["--resume", str(run_dir), "--serial", "--quiet", "--steps", "30", "--checkpoint-every", "5"], hook=plant
    )
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err[-2000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, err[-2000:]
    assert f"{ckpt_tmp} is a symbolic link to {victim}" in errors[0] and f"rm {ckpt_tmp}" in errors[0]
    assert f"--resume {run_dir}" in errors[0] and "the run stopped after update 2" in errors[0]
    assert errors[1].startswith("error: summary.json not written, ")
    assert f"{summary_tmp} is a symbolic link" in errors[1]
    assert victim.read_text() == "precious\n" and (run_dir / "summary.json").read_bytes() == summary
    kept = steps((run_dir / "diag.jsonl").read_bytes())
    assert kept == list(range(1, len(kept) + 1)) and len(kept) >= 22
    assert [s for s, _ in list_checkpoints(run_dir)] == [10, 20]


# ---------------------------------------------------------------- item 2: endless inputs named, never read


def test_read_bounded_names_what_it_refuses(tmp_path):
    with pytest.raises(RunFileError, match=r"/dev/zero is a character device .*not a regular file"):
        read_bounded("/dev/zero")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with at_most(5), pytest.raises(RunFileError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_bounded(fifo)
    with pytest.raises(RunFileError, match="is a folder, not a regular file"):
        read_bounded(tmp_path)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)  # sparse: nothing written
    with pytest.raises(RunFileError, match=rf"{MAX_TEXT_BYTES + 1:,} bytes, over the limit of {MAX_TEXT_BYTES:,} "):
        read_bounded(big)
    (tmp_path / "link").symlink_to(big)
    with pytest.raises(RunFileError, match="is a symbolic link"):
        read_bounded(tmp_path / "link", follow=False)
    assert read_bounded(__file__, 1 << 20) == Path(__file__).read_bytes()
    assert MAX_DIAG_BYTES >= 2**30


def test_endless_or_huge_config_and_baseline_files_are_refused_by_name(finished, tmp_path, monkeypatch, capsys):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(MAX_TEXT_BYTES + 1)
    out = str(tmp_path / "runs")
    with at_most(20):
        assert driver.main([*SMOKE, "--out", out, "--steps", "2", "--config", str(fifo)]) == 1
        err = capsys.readouterr().err
        assert f"--config={fifo}: cannot read it" in err and "is a FIFO (named pipe), not a regular file" in err
        assert driver.main([*SMOKE, "--out", out, "--steps", "2", "--config", str(big)]) == 1
        err = capsys.readouterr().err
        assert f"is {MAX_TEXT_BYTES + 1:,} bytes, over the limit of {MAX_TEXT_BYTES:,} bytes" in err
        assert "actors.files.MAX_TEXT_BYTES" in err
        assert driver.main([*SMOKE, "--out", out, "--steps", "2", "--baseline", str(fifo)]) == 1
        err = capsys.readouterr().err
        assert f"--baseline={fifo}: diag file {fifo} is a FIFO (named pipe), not a regular file" in err
    monkeypatch.setattr("actors.diag_file.MAX_DIAG_BYTES", 1000)  # the bound of a diag.jsonl, lowered to test it
    size = (finished / "diag.jsonl").stat().st_size
    assert driver.main([*SMOKE, "--out", out, "--steps", "2", "--baseline", str(finished)]) == 1
    err = capsys.readouterr().err
    assert f"diag file {finished / 'diag.jsonl'} is {size:,} bytes, over the limit of 1,000 bytes" in err
    assert "Traceback" not in err and not (tmp_path / "runs").exists()


def test_json_or_toml_nested_thousands_deep_is_refused_by_name(finished, tmp_path, capsys):
    """A --config file, a run folder's config.json or a diag.jsonl line of arrays nested 200,000 deep: refused
    as a file that does not parse, no traceback (before: RecursionError out of the parser, a traceback)."""
    deep_json, deep_toml = tmp_path / "deep.json", tmp_path / "deep.toml"
    deep_json.write_text("[" * 200_000 + "]" * 200_000)
    deep_toml.write_text("a = " + "[" * 100_000 + "]" * 100_000)
    out = str(tmp_path / "runs")
    for path in (deep_json, deep_toml):
        assert driver.main([*SMOKE, "--out", out, "--steps", "2", "--config", str(path)]) == 1
        err = capsys.readouterr().err
        assert f"--config={path}: cannot read it (RecursionError" in err and "Traceback" not in err
    run_dir = copy_of(finished, tmp_path)
    diag = run_dir / "diag.jsonl"
    diag.write_bytes(diag.read_bytes() + b"[" * 200_000 + b"]" * 200_000 + b"\n")
    with pytest.raises(ValueError, match=r"diag.jsonl:\d+: not valid JSON \(maximum recursion depth"):
        read_diag(diag)
    (run_dir / "config.json").write_text("[" * 200_000 + "]" * 200_000)
    assert resume(run_dir, "--steps", "30") == 1
    err = capsys.readouterr().err
    assert "config.json" in err and "not JSON: maximum recursion depth" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("name", ["config.json", "diag.jsonl"])
def test_a_fifo_in_a_run_folder_is_named_by_resume_report_and_evaluate(finished, tmp_path, name, capsys):
    from foxhunt_ray import evaluate

    run_dir = copy_of(finished, tmp_path)
    (run_dir / name).unlink()
    os.mkfifo(run_dir / name)
    before = snapshot(run_dir)
    with at_most(30):
        assert resume(run_dir, "--steps", "30") == 1
        assert report.main([str(run_dir), "--out", str(tmp_path / "report")]) == 1
        assert evaluate.main([str(run_dir), "--episodes", "2"]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 3 and all(f"{run_dir / name} is a FIFO (named pipe), not a regular file" in e for e in errors)
    assert snapshot(run_dir) == before


def test_a_checkpoint_that_is_a_fifo_or_a_device_is_named_never_read(finished, tmp_path, capsys):
    """read_checkpoint (every reader of a checkpoint: evaluate, export, the learner; the resume's checks looked
    before) refuses a FIFO and /dev/zero before torch opens them (a FIFO blocked `foxhunt_ray.export` and
    `foxhunt_ray.evaluate` for ever): the export of a run whose newest checkpoint is a FIFO names it, exit 1."""
    from foxhunt_ray import export

    fifo = tmp_path / "ckpt_00000030.pt"
    os.mkfifo(fifo)
    with at_most(10):
        with pytest.raises(CheckpointError, match=r"/dev/zero: it is a character device .*not a regular file"):
            read_checkpoint("/dev/zero")
        with pytest.raises(CheckpointError, match=r"it is a FIFO \(named pipe\), not a regular file: nothing was read"):
            read_checkpoint(fifo, mmap=True)
        run_dir = copy_of(finished, tmp_path)
        newest = run_dir / "checkpoints" / "ckpt_00000020.pt"
        newest.unlink()
        os.mkfifo(newest)
        assert export.main([str(run_dir), "--out", str(tmp_path / "export")]) == 1
    err = capsys.readouterr().err
    assert f"{newest}" in err and "is a FIFO (named pipe), not a regular file" in err and "Traceback" not in err
    assert not (tmp_path / "export").exists()


@pytest.mark.parametrize("name", ["summary.json", "config.written.json"])
def test_a_resume_refuses_a_fifo_where_the_run_writes_its_summary_or_config(finished, tmp_path, name, capsys):
    """A FIFO at summary.json or config.written.json: the resume is refused under the lock, naming it (before: it
    went on, as if the run had no summary.json: a killed run's would not have stopped it), nothing changed."""
    run_dir = copy_of(finished, tmp_path)
    (run_dir / name).unlink()
    os.mkfifo(run_dir / name)
    before = snapshot(run_dir)
    with at_most(30):
        assert resume(run_dir, "--steps", "30") == 1
    err = capsys.readouterr().err
    assert f"{run_dir / name} is a FIFO (named pipe), not a regular file" in err and "put back the run's own" in err
    assert "Traceback" not in err and snapshot(run_dir) == before


def test_a_run_dir_that_is_no_folder_is_called_what_it_is(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero").symlink_to("/dev/zero")
    for path, kind in ((fifo, "a FIFO (named pipe)"), (tmp_path / "zero", "a character device")):
        with at_most(20):
            assert resume(path) == 1
            assert report.main([str(path), "--out", str(tmp_path / "report")]) == 1
        err = capsys.readouterr().err
        assert f"is {kind}" in err and "not a run folder" in err and "not a folder" in err
        assert "does not exist" not in err and "check its permissions" not in err


# ---------------------------------------------------------------- item 3: the storage copy, through its claim


def test_the_storage_copy_is_not_resumed_while_its_run_goes_on(tmp_path, capsys):
    """The run copies to a local --storage path. While it runs, --resume of its copy (by path, as the claim's own
    message advises, and by file:// URI) is refused naming the run, and nothing changes: the copy keeps no lock
    and no cut diag.jsonl, the run goes on to a whole end. Once it has ended, the same command resumes it through
    the claim: into OUT/<code_sha>/<name>/<fold>, the claim taken over, the copy continued from its last step."""
    root, seen = tmp_path / "store", {}
    out_b = tmp_path / "b"

    def second_writer(step, workers):
        if step == 15 and not seen:
            (copy,) = root.glob("*/s/0")
            seen["before"] = snapshot(copy)
            seen["by_path"] = resume(copy, "--steps", "40", "--out", str(out_b))
            seen["by_uri"] = resume(f"file://{copy}", "--steps", "40", "--out", str(out_b))
            seen["after"] = snapshot(copy)
            seen["lock"] = (copy / "run.lock").exists()

    flags = ["--steps", "30", "--checkpoint-every", "5", "--name", "s", "--storage", str(root)]
    assert driver.main([*SMOKE, "--out", str(tmp_path / "a"), *flags], hook=second_writer) == 0
    (run_a,) = (tmp_path / "a").glob("*/s/0")
    (copy,) = root.glob("*/s/0")
    uri = f"file://{copy.resolve()}"
    err = capsys.readouterr().err
    assert seen["by_path"] == 1 and seen["by_uri"] == 1 and seen["before"] == seen["after"] and not seen["lock"]
    refusals = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(refusals) == 2 and "Traceback" not in err
    for line in refusals:
        assert f"cannot resume {uri}: it is the --storage copy of a run that is running now" in line
        assert f"pid {os.getpid()} on host" in line and f"python -m foxhunt_ray.local --resume {run_a};" in line
    assert not out_b.exists()
    assert steps((copy / "diag.jsonl").read_bytes()) == list(range(1, 31)) == steps((run_a / "diag.jsonl").read_bytes())

    # the run has ended: the same command goes on, through the claim
    assert resume(copy, "--steps", "40", "--out", str(out_b)) == 0
    local = out_b / copy.relative_to(root)
    assert steps((local / "diag.jsonl").read_bytes()) == list(range(1, 41))
    assert steps((copy / "diag.jsonl").read_bytes()) == list(range(1, 41)) and not (copy / "run.lock").exists()
    assert json.loads((copy / OWNER_FILE).read_text())["run_folder"] == str(local.resolve())
    # and the run's own folder, now behind its copy, is refused by the claim (its message names the copy)
    assert resume(run_a, "--steps", "50") == 1
    assert f"error: {copy} is claimed by another driver" in capsys.readouterr().err


def test_the_claim_refusal_advises_a_resume_that_works_and_a_claim_from_another_host_is_told(tmp_path, capsys):
    root = tmp_path / "store"
    flags = ["--steps", "10", "--checkpoint-every", "5", "--name", "s", "--storage", str(root)]
    assert driver.main([*SMOKE, "--out", str(tmp_path / "a"), *flags]) == 0
    (copy,) = root.glob("*/s/0")
    capsys.readouterr()
    # a new run under the taken name: refused, advising `--resume URL`; that command, as written, resumes the copy
    assert driver.main([*SMOKE, "--out", str(tmp_path / "b"), *flags]) == 1
    advice = re.search(r"`(--resume [^`]+)`", capsys.readouterr().err).group(1).split()
    assert advice == ["--resume", str(copy)]
    assert driver.main([*advice, "--steps", "20", "--serial", "--quiet", "--out", str(tmp_path / "c")]) == 0
    assert steps((copy / "diag.jsonl").read_bytes()) == list(range(1, 21)) and not (copy / "run.lock").exists()

    # a claim of a driver on another host that has not ended there: refused (its lock cannot be checked); the
    # advice (remove the claim) makes the resume work
    claim = {"token": "t0", "host": "elsewhere", "pid": 7, "since": "2999-01-01T00:00:00+0000", "run_folder": "/x"}
    (copy / OWNER_FILE).write_text(json.dumps(claim))
    before = snapshot(copy)
    assert resume(copy, "--steps", "30", "--out", str(tmp_path / "d")) == 1
    err = capsys.readouterr().err
    assert "its storage is claimed by pid 7 on host elsewhere" in err and f"rm {copy.resolve() / OWNER_FILE}" in err
    assert snapshot(copy) == before and not (tmp_path / "d").exists()
    (copy / OWNER_FILE).unlink()
    assert resume(copy, "--steps", "30", "--out", str(tmp_path / "d")) == 0
    assert steps((copy / "diag.jsonl").read_bytes()) == list(range(1, 31))


def test_a_link_planted_in_a_storage_folder_is_not_written_through(tmp_path):
    """A local storage folder with a link at a temporary name and at diag.jsonl (which a copy appends to): the
    next copy replaces the links with the run's files and leaves the files they point at alone."""
    local = tmp_path / "run" / "sha" / "s" / "0"
    lock = RunLock.acquire(local)
    (local / "config.json").write_text('{"run": 1}\n')
    (local / "diag.jsonl").write_bytes(b'{"step":1}\n')
    store = storage.RunStorage(str(tmp_path / "store"), "sha/s/0")
    store.sync(local)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    stored = Path(store.path)
    (stored / "config.json.tmp").symlink_to(victim)
    (stored / "diag.jsonl").unlink()
    (stored / "diag.jsonl").symlink_to(victim)
    (local / "config.json").write_text('{"run": 2}\n')
    with open(local / "diag.jsonl", "ab") as f:
        f.write(b'{"step":2}\n')
    store.sync(local)
    lock.release()
    assert victim.read_text() == "precious\n" and not (stored / "diag.jsonl").is_symlink()
    assert (stored / "config.json").read_text() == '{"run": 2}\n' and not (stored / "config.json.tmp").exists()
    assert (stored / "diag.jsonl").read_bytes() == b'{"step":1}\n{"step":2}\n'


def test_a_storage_uri_is_only_read_small(tmp_path):
    """The claim and summary.json of a storage folder are read only when small and regular."""
    store = storage.RunStorage(str(tmp_path / "store"), "sha/s/0")
    os.makedirs(store.path)
    os.mkfifo(f"{store.path}/{OWNER_FILE}")
    with at_most(5):
        assert store._owner() == {}  # unreadable: it still claims the folder


# ---------------------------------------------------------------- item 6: config.sha256 deleted


def test_an_edited_config_is_caught_without_config_sha256(finished, tmp_path, capsys):
    run_dir = copy_of(finished, tmp_path)
    config = run_dir / "config.json"
    (run_dir / "config.sha256").unlink()
    doc = json.loads(config.read_text())
    assert config_changes(run_dir, config.read_text()) == []  # the same config: nothing to say
    assert config_changes(run_dir, json.dumps(doc)) == []  # its layout changed only
    horizon = doc["run"]["market"]["horizon"]
    doc["run"]["market"]["horizon"] = 37
    config.write_text(json.dumps(doc, indent=2))
    before = snapshot(run_dir)
    assert resume(run_dir, "--steps", "30") == 1
    err = capsys.readouterr().err
    assert f"its config.json was changed since the run wrote it: run.market.horizon: {horizon} -> 37" in err
    assert "pass --allow-config-change" in err and snapshot(run_dir) == before
    (run_dir / "config.written.json").unlink()  # neither record left: an older run's folder, resumed unchecked
    assert config_changes(run_dir, config.read_text()) is None
    assert files.kind_of(run_dir / "config.sha256") == "missing"
    assert read_diag(run_dir / "diag.jsonl")

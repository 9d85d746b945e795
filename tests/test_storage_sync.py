"""Issue 15, a run's storage (foxhunt_ray.storage) beyond the mirror itself (tests/test_run_storage.py): diag.jsonl's
copy gets only its new whole lines (appended where the filesystem appends, rewritten whole where it cannot), never
a torn last line; and the storage folder's claim, so two drivers on one storage path do not mix their files (a
fresh run under a taken name refused, a resume taking the claim over, the replaced driver stopping its copies with
an error, its local resume refused). Local paths and memory:// (an object store's semantics: no rename); s3:// on a
local moto server: tests/test_storage_s3.py. Seconds, serial mode."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from foxhunt_ray import driver, storage
from foxhunt_ray.run_folder import RunLock
from foxhunt_ray.storage import OWNER_FILE, RunStorage, StorageClaimError

REL = "c0de/shared/0"
SMOKE = ["--preset", "smoke", "--serial", "--quiet", "--checkpoint-interval-s", "0"]


def root_for(kind: str, tmp_path: Path) -> str:
    return str(tmp_path / "store") if kind == "path" else f"memory://foxhunt-{os.getpid()}-{tmp_path.name}"


class Meter:
    """Counts the bytes a RunStorage writes through its filesystem (put_file, pipe_file, writes to files it opens),
    once per call even where one of them calls another (pipe_file opens the file)."""

    def __init__(self, fs, monkeypatch):
        self.bytes = 0
        self.depth = 0
        meter = self

        class Counted:
            def __init__(self, f, top: bool):
                self.f, self.top = f, top

            def write(self, data):
                meter.bytes += len(data) if self.top else 0
                return self.f.write(data)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()

            def __getattr__(self, name):
                return getattr(self.f, name)

        def counted(name, size):
            real = getattr(fs, name)

            def call(*args, **kwargs):
                self.bytes += size(*args) if self.depth == 0 else 0
                self.depth += 1
                try:
                    return real(*args, **kwargs)
                finally:
                    self.depth -= 1

            monkeypatch.setattr(fs, name, call)

        counted("put_file", lambda src, dst, *a: os.path.getsize(src))
        counted("pipe_file", lambda path, value, *a: len(value))
        real_open = fs.open

        def open_(path, mode="rb", *args, **kwargs):
            f = real_open(path, mode, *args, **kwargs)
            return f if "r" in mode else Counted(f, top=self.depth == 0)

        monkeypatch.setattr(fs, "open", open_)


def line(step: int) -> bytes:
    return (json.dumps({"step": step, "loss": step / 7, "pad": "x" * 150}) + "\n").encode()


def new_run(folder: Path, config: str = '{"run": 1}\n') -> RunLock:
    lock = RunLock.acquire(folder)
    (folder / "config.json").write_text(config)
    return lock


def stored(store: RunStorage, rel: str = "diag.jsonl") -> bytes:
    return store.fs.cat_file(f"{store.path}/{rel}")


@pytest.mark.parametrize("kind", ["path", "memory"])
def test_diag_jsonl_copies_only_its_new_whole_lines(kind, tmp_path, monkeypatch):
    local = tmp_path / "runs" / REL
    lock = new_run(local)
    diag = local / "diag.jsonl"
    diag.write_bytes(b"")
    store = RunStorage(root_for(kind, tmp_path), REL)
    meter = Meter(store.fs, monkeypatch)
    store.sync(local)
    step, synced, moved = 0, 0, []
    for k in range(60):
        with open(diag, "ab") as f:
            torn = diag.stat().st_size - diag.read_bytes().rfind(b"\n") - 1  # a torn line left by the last round
            for _ in range(3):
                step += 1
                f.write(line(step)[torn:])
                torn = 0
            if k % 3 == 1:  # half a line being written as the copy runs: it stays out of the copy
                f.write(line(step + 1)[:40])
        before = meter.bytes
        assert store.sync(local) == meter.bytes - before
        whole = diag.read_bytes()[: diag.read_bytes().rfind(b"\n") + 1]
        assert stored(store) == whole  # the whole lines, never a torn one
        moved.append(meter.bytes - before)
        assert moved[-1] == len(whole) - synced  # the new lines' bytes, nothing else (the claim is checked, read)
        synced = len(whole)
    assert sum(moved) == synced  # each byte of the file sent once: O(new bytes) a copy, not O(file)
    assert store.seconds["synced_bytes"] == synced + len('{"run": 1}\n')

    # a second RunStorage (the driver's last copy after the monitor's) checks the copy's tail, then appends; its
    # first copy sends the other files once (config.json here), as before
    with open(diag, "ab") as f:
        f.write(line(step + 1)[40:] + line(step + 2))
    later = RunStorage(root_for(kind, tmp_path), REL)
    before = meter.bytes
    later.sync(local)
    new = len(diag.read_bytes()) - synced
    assert meter.bytes - before == new + len('{"run": 1}\n') and stored(store) == diag.read_bytes()

    # a resume cuts diag.jsonl back and the run writes new lines past the old end: rewritten whole
    kept = b"".join(diag.read_bytes().splitlines(keepends=True)[:10])
    diag.write_bytes(kept + b"".join(line(s).replace(b'"pad"', b'"new"') for s in range(11, 400)))
    assert diag.stat().st_size > synced
    before = meter.bytes
    later.sync(local)
    assert meter.bytes - before == diag.stat().st_size and stored(store) == diag.read_bytes()
    assert not [n for n in store.fs.find(store.path) if n.endswith(".tmp")]
    lock.release()


def test_a_filesystem_that_cannot_append_gets_diag_jsonl_rewritten_whole(tmp_path, monkeypatch):
    local = tmp_path / "runs" / REL
    lock = new_run(local)
    diag = local / "diag.jsonl"
    store = RunStorage(root_for("memory", tmp_path), REL)
    store._append_from = None  # what gs://, abfs:// get (storage.APPENDS)
    meter = Meter(store.fs, monkeypatch)
    store.sync(local)
    for step in range(1, 6):
        with open(diag, "ab") as f:
            f.write(line(step) + line(step + 100)[:30])
        before = meter.bytes
        store.sync(local)
        whole = diag.read_bytes()[: diag.read_bytes().rfind(b"\n") + 1]
        assert meter.bytes - before == len(whole) and stored(store) == whole
    assert "gs" not in storage.APPENDS and "gcs" not in storage.APPENDS  # gcsfs ignores "a": it would overwrite
    lock.release()


@pytest.mark.parametrize("kind", ["path", "memory"])
def test_two_drivers_on_one_storage_folder_do_not_mix_their_files(kind, tmp_path):
    root = root_for(kind, tmp_path)
    a, b = tmp_path / "machine-a" / REL, tmp_path / "machine-b" / REL
    lock_a, lock_b = new_run(a, '{"run": "a"}\n'), new_run(b, '{"run": "b"}\n')
    (a / "diag.jsonl").write_bytes(line(1))
    (b / "diag.jsonl").write_bytes(line(1000))
    first = RunStorage(root, REL)
    first.sync(a)
    url = first.url
    claim = json.loads(first.fs.cat_file(f"{first.path}/{OWNER_FILE}"))
    assert claim["pid"] == os.getpid() and claim["run_folder"] == str(a.resolve())
    assert (a / OWNER_FILE).read_bytes() == first.fs.cat_file(f"{first.path}/{OWNER_FILE}")

    # a second driver with the same --storage and --name: refused before it copies anything
    second = RunStorage(root, REL)
    with pytest.raises(StorageClaimError) as refused:
        second.sync(b)
    msg = str(refused.value)
    assert f"{url} is claimed by another driver, pid {os.getpid()}" in msg and str(a.resolve()) in msg
    assert "another --name" in msg and f"`--resume {url}`" in msg and f"remove {url}/{OWNER_FILE}" in msg
    with pytest.raises(StorageClaimError):  # and stays refused
        second.sync(b)
    assert stored(first) == line(1) and stored(first, "config.json") == b'{"run": "a"}\n'
    with open(a / "diag.jsonl", "ab") as f:
        f.write(line(2))
    first.sync(a)  # the first goes on
    assert stored(first) == line(1) + line(2)

    # a third driver resumes the stored run (--resume URI: the run copied here, then its first copy): it takes the
    # claim over from the run it continues
    lock_b.release()
    c = tmp_path / "machine-c" / REL
    lock_c = RunLock.acquire(c)
    RunStorage(root, REL).fetch(c)
    with open(c / "diag.jsonl", "ab") as f:
        f.write(line(3))
    third = RunStorage(root, REL)
    third.sync(c)
    assert stored(third) == line(1) + line(2) + line(3)

    # the first driver's next copy finds the claim gone: it stops, naming who has it; nothing of it lands there
    with open(a / "diag.jsonl", "ab") as f:
        f.write(line(99))
    with pytest.raises(StorageClaimError) as lost:
        first.sync(a)
    assert f"{url} was taken over by another driver, pid {os.getpid()}" in str(lost.value)
    assert str(c.resolve()) in str(lost.value) and first.lost == str(lost.value)
    assert stored(third) == line(1) + line(2) + line(3)

    # a later driver on the first folder (its local resume) is refused: the stored run went on without it
    lock_a.release()
    time.sleep(0.05)  # run.lock's mtime, part of the token, moves on the kernel's coarse clock
    lock_a = RunLock.acquire(a)
    with pytest.raises(StorageClaimError, match="is claimed by another driver"):
        RunStorage(root, REL).sync(a)
    # the third one's own later resume (here) takes its claim back
    lock_c.release()
    time.sleep(0.05)
    lock_c = RunLock.acquire(c)
    RunStorage(root, REL).sync(c)
    # a reader's copy (evaluate from the URI: no lock) puts its files back without a claim
    reader = tmp_path / "reader" / REL
    back = RunStorage(root, REL)
    back.fetch(reader)
    (reader / "evaluation.json").write_text("{}")
    assert back.sync(reader) == 2 and stored(back, "evaluation.json") == b"{}"
    lock_a.release()
    lock_c.release()


def run(out: Path, *flags: str, hook=None) -> int:
    return driver.main([*SMOKE, "--out", str(out), *flags], hook=hook)


def steps(data: bytes) -> list[int]:
    return [r["step"] for r in map(json.loads, data.decode().splitlines()) if "event" not in r]


def test_the_driver_refuses_a_taken_storage_folder_and_stops_copying_when_it_loses_it(tmp_path, capsys):
    root = root_for("memory", tmp_path)
    assert run(tmp_path / "a", "--steps", "20", "--checkpoint-every", "10", "--name", "shared", "--storage", root) == 0
    (run_a,) = (tmp_path / "a").glob("*/shared/0")
    store = RunStorage(root, "/".join(run_a.parts[-3:]))
    uri = store.url
    capsys.readouterr()

    # the same --name and --storage from another machine's driver (another --out): exit 1, storage untouched
    before = {n: store.fs.cat_file(n) for n in store.fs.find(store.path)}
    assert run(tmp_path / "b", "--steps", "20", "--name", "shared", "--storage", root) == 1
    err = capsys.readouterr().err
    assert f"error: {uri} is claimed by another driver" in err and f"--resume {uri}" in err
    assert {n: store.fs.cat_file(n) for n in store.fs.find(store.path)} == before

    # resumed from the URI elsewhere: the claim moves there; the first machine's local resume is then refused
    assert driver.main(["--resume", uri, "--steps", "30", "--serial", "--quiet", "--out", str(tmp_path / "c")]) == 0
    assert steps(stored(store)) == list(range(1, 31))
    assert driver.main(["--resume", str(run_a), "--steps", "40", "--serial", "--quiet"]) == 1
    assert f"error: {uri} is claimed by another driver" in capsys.readouterr().err
    assert steps(stored(store)) == list(range(1, 31)) and steps((run_a / "diag.jsonl").read_bytes())[-1] == 20

    # a run whose storage is taken over while it runs: told once, the run goes on here, its last copy is exit 1
    mid_store: list[RunStorage] = []

    def take_over(step, workers):
        if step >= 12 and not mid_store:
            (run_dir,) = (tmp_path / "d").glob("*/mid/0")
            mid_store.append(RunStorage(root, "/".join(run_dir.parts[-3:])))
            other = {"token": "someone-else", "host": "machine-e", "pid": 7, "since": "now", "run_folder": "/e"}
            mid_store[0].fs.pipe_file(f"{mid_store[0].path}/{OWNER_FILE}", json.dumps(other).encode())

    flags = ["--steps", "40", "--checkpoint-every", "10", "--name", "mid", "--storage", root]
    assert run(tmp_path / "d", *flags, hook=take_over) == 1
    (run_d,) = (tmp_path / "d").glob("*/mid/0")
    err = capsys.readouterr().err
    assert err.count("error: stopped copying") == 1
    assert "was taken over by another driver, pid 7 on host machine-e" in err
    assert f"error: the run folder {run_d} is whole, but {mid_store[0].url} was taken over" in err
    assert steps((run_d / "diag.jsonl").read_bytes()) == list(range(1, 41))  # the run itself went to its end
    kept = steps(stored(mid_store[0]))  # what the checkpoint at step 10 copied, before the takeover: no more
    assert kept == list(range(1, len(kept) + 1)) and 9 <= len(kept) <= 10

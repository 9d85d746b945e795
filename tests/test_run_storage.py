"""Issue 15 items 2 and 1, in serial mode (seconds): run names and OUT/latest (also where the filesystem has no
symlinks), and a run's storage: a local path and an object store (fsspec's memory://, which has no rename, as
s3:// has none) mirrored at the start, after each checkpoint and at the end, resumed, reported and evaluated from
its URI; bad --name, --storage and --learner-resources refused before anything is written; a storage that fails
mid-run does not stop the run, and one that fails at the end is exit 1. The two-node cluster: test_two_nodes.py."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from actors.checkpoints import list_checkpoints
from foxhunt_ray import driver, report, run_folder, storage
from foxhunt_ray.evaluate import evaluate_run

SMOKE = ["--preset", "smoke", "--serial", "--quiet", "--checkpoint-interval-s", "0"]


def run(out: Path, *flags: str) -> int:
    return driver.main([*SMOKE, "--out", str(out), *flags])


def steps(run_dir: Path) -> list[int]:
    lines = [json.loads(x) for x in (run_dir / "diag.jsonl").read_text().splitlines()]
    return [r["step"] for r in lines if "event" not in r]


def files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


def test_run_names_and_what_is_refused(tmp_path, capsys):
    name = run_folder.run_name(preset="phase4_3", env_id="foxhunt/LOB-v0", seed=3, started=0.0)
    assert name == "phase4_3-LOB-v0-s3-19700101T000000Z" and run_folder.check_name(name) is None
    assert run_folder.run_name(preset=None, env_id="my.mod:Cart Pole-v1", seed=0, started=0.0).startswith(
        "run-Cart_Pole-v1-s0-"
    )
    for bad in ("a/b", "..", ".hidden", "-x", "", "latest", "a b", "x" * 101):
        assert run(tmp_path / "runs", "--steps", "2", f"--name={bad}") == 1, bad
        err = capsys.readouterr().err
        assert f"--name={bad!r}" in err and "e.g. --name lr3e-3-wide" in err
    assert run(tmp_path / "runs", "--steps", "2", "--learner-resources", "learner_node") == 1
    assert "--learner-resources='learner_node' must be a JSON object" in capsys.readouterr().err
    assert run(tmp_path / "runs", "--steps", "2", "--learner-resources", '{"CPU": 1}') == 1
    assert "driver.learner_resources={'CPU': 1} must be a JSON object of custom resource names" in (
        capsys.readouterr().err
    )
    assert run(tmp_path / "runs", "--steps", "2", "--storage", "nosuch://x") == 1
    assert "--storage=nosuch://x" in capsys.readouterr().err
    try:
        import s3fs  # noqa: F401
    except ImportError:  # what a user without the plugin is told
        assert run(tmp_path / "runs", "--steps", "2", "--storage", "s3://bucket/runs") == 1
        assert "s3:// needs s3fs on the driver's node" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert run(tmp_path / "runs", "--steps", "2", "--storage", str(blocker / "runs")) == 1
    assert f"--storage={blocker / 'runs'}: cannot write there" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_latest_is_a_pointer_file_where_the_filesystem_has_no_symlinks(tmp_path, monkeypatch):
    def no_symlinks(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(run_folder.os, "symlink", no_symlinks)
    out = tmp_path / "runs"
    assert run(out, "--steps", "10", "--checkpoint-every", "5") == 0
    (run_dir,) = out.glob("*/*/0")
    latest = out / "latest"
    assert latest.is_file() and not latest.is_symlink()
    assert latest.read_text() == os.path.relpath(run_dir, out) + "\n"
    assert run_folder.resolve_run_dir(latest) == run_dir
    # the README's commands as written
    assert driver.main(["--resume", str(latest), "--steps", "15", "--serial", "--quiet"]) == 0
    assert steps(run_dir) == list(range(1, 16))
    assert report.load_run(latest).last_step == 15
    assert evaluate_run(latest, episodes=2)["run_dir"] == str(run_dir)
    assert run(out, "--steps", "3", "--baseline", str(latest), "--name", "against-latest") == 0
    (other,) = out.glob("*/against-latest/0")
    assert json.loads((other / "config.json").read_text())["baseline"] == str(run_dir)  # not the moving pointer


@pytest.mark.parametrize("kind", ["path", "memory"])
def test_storage_mirrors_the_run_and_resume_report_evaluate_read_it_back(kind, tmp_path, capsys):
    """A path (a shared or second disk: files renamed into place) and an object store (memory://: a put is
    whole, there is no rename): the same copy after each checkpoint, the pruned checkpoint removed there too."""
    root = str(tmp_path / "store") if kind == "path" else f"memory://foxhunt-{os.getpid()}-{tmp_path.name}"
    out = tmp_path / "runs"
    assert run(out, "--steps", "30", "--checkpoint-every", "10", "--name", "kept", "--storage", root) == 0
    (run_dir,) = out.glob("*/kept/0")
    sha = run_dir.parents[1].name
    assert f"storage {storage.root_of(root)}/{sha}/kept/0" in capsys.readouterr().out
    uri = f"{'file://' if kind == 'path' else ''}{storage.root_of(root)}/{sha}/kept/0"  # a path's URI is file://
    store = storage.RunStorage(storage.root_of(root), f"{sha}/kept/0")
    mirrored = tmp_path / "mirrored"
    store.fetch(mirrored)
    assert files(mirrored) == files(run_dir)  # every file of the run, the lock left out
    assert [s for s, _ in list_checkpoints(mirrored)] == [20, 30]  # ckpt 10 pruned there too
    assert not [n for n in store.fs.find(store.path) if n.endswith(".tmp")]

    # resume from the URI into a fresh local folder: storage is where the run is read from
    resumed_out = tmp_path / "elsewhere"
    assert driver.main(["--resume", uri, "--steps", "40", "--serial", "--quiet", "--out", str(resumed_out)]) == 0
    local = resumed_out / sha / "kept" / "0"
    assert steps(local) == list(range(1, 41)) and run_folder.resolve_run_dir(resumed_out / "latest") == local
    again = tmp_path / "again"
    store.fetch(again)
    assert steps(again) == list(range(1, 41)) and [s for s, _ in list_checkpoints(again)] == [30, 40]

    loaded = report.load_run(uri)
    assert loaded.last_step == 40 and loaded.status == "done"
    result = evaluate_run(uri, episodes=2)
    assert result["run_dir"] == uri and result["checkpoint"] == f"{uri}/checkpoints/ckpt_00000040.pt"
    final = tmp_path / "final"
    store.fetch(final)
    assert (final / "evaluation.json").is_file() and len(list((final / "evaluations").iterdir())) == 1
    assert steps(final) == list(range(1, 41))  # the evaluation copied its record back, nothing else

    assert driver.main(["--resume", uri.replace("/kept/", "/nothing/"), "--serial", "--out", str(out)]) == 1
    assert "holds no run (no config.json there)" in capsys.readouterr().err


def test_a_storage_that_fails_mid_run_is_told_and_one_that_fails_at_the_end_is_exit_1(tmp_path, monkeypatch, capsys):
    calls = []
    real = storage.RunStorage.sync

    def flaky(self, local):
        calls.append(1)
        if len(calls) >= 2:  # the first copy (at the start) works, then the storage is gone
            raise OSError(errno.EHOSTUNREACH, "No route to host")
        return real(self, local)

    monkeypatch.setattr(storage.RunStorage, "sync", flaky)
    out = tmp_path / "runs"
    assert run(out, "--steps", "20", "--checkpoint-every", "10", "--storage", str(tmp_path / "store")) == 1
    (run_dir,) = out.glob("*/*/0")
    assert steps(run_dir) == list(range(1, 21))  # the run itself went on to the end
    err = capsys.readouterr().err
    assert "warning: copying" in err and "the run goes on, the next checkpoint copies it again" in err
    assert f"error: the run folder {run_dir} is whole, but copying it to" in err

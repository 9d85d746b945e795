"""Issue 14: a run folder that holds a run but not its config.json (deleted by hand, or copied without it) is
refused by every reader, a resume, `foxhunt_ray.evaluate` and `foxhunt_ray.report`, with one error line naming
the folder and how to put the file back (foxhunt_ray.run_folder.missing_config), exit 1 as for any other bad input,
no traceback, and the folder left exactly as it was; the fix it names works."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from actors.kill_rules import EXIT_ERROR
from foxhunt_ray import driver, evaluate, report
from foxhunt_ray.run_folder import CONFIG_FILE, CONFIG_HASH_FILE, CONFIG_WRITTEN_FILE

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FLAGS = ["--preset", "smoke", "--serial", "--steps", "8", "--checkpoint-every", "4", "--checkpoint-interval-s", "0"]
"""The run's own flags (what --print-config needs to write its config.json again)."""


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> Path:
    """A serial smoke run, done at 8 with checkpoints at 4 and 8."""
    out = tmp_path_factory.mktemp("runs")
    assert driver.main([*FLAGS, "--quiet", "--out", str(out)]) == 0
    (found,) = out.glob("*/*/0")
    return found


def snapshot(folder: Path) -> dict[str, str]:
    """Every file and folder below folder: its sha256, or 'dir'."""
    return {
        str(p.relative_to(folder)): "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("older", [False, True], ids=["config.json deleted", "no config as written either"])
def test_every_reader_refuses_a_run_folder_without_its_config(smoke_run, tmp_path, capsys, older):
    """main: the report read such a folder as if whole (the kill thresholds KillConfig's defaults, no seed), and
    the resume and evaluate told the user to pass a run folder, which this one is."""
    run_dir = shutil.copytree(smoke_run, tmp_path / "run" / "0")
    gone = [CONFIG_FILE, CONFIG_WRITTEN_FILE, CONFIG_HASH_FILE] if older else [CONFIG_FILE]
    for name in gone:
        (run_dir / name).unlink()
    if older:
        fix = f"python -m foxhunt_ray.local <the run's flags> --print-config > {run_dir / CONFIG_FILE}"
    else:
        fix = f"cp {run_dir / CONFIG_WRITTEN_FILE} {run_dir / CONFIG_FILE}"
    before = snapshot(run_dir)
    readers = {
        "resume": lambda: driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "12"]),
        "evaluate": lambda: evaluate.main([str(run_dir), "--quiet", "--episodes", "4"]),
        "report": lambda: report.main([str(run_dir), "--out", str(tmp_path / "report")]),
    }
    for reader, call in readers.items():
        code = call()
        err = capsys.readouterr().err
        assert code == EXIT_ERROR and "Traceback" not in err, (reader, err[-3000:])
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (reader, err)
        assert f"run folder {run_dir} holds a run (checkpoints/, summary.json" in errors[0], (reader, errors[0])
        assert f"but not its {CONFIG_FILE}" in errors[0] and fix in errors[0], (reader, errors[0])
        assert errors[0].endswith("then run this again; nothing was changed"), (reader, errors[0])
        assert snapshot(run_dir) == before, reader
    assert not (tmp_path / "report").exists()

    # the fix named: the file back (as the run wrote it, or from the run's own flags), and the run resumes
    if older:
        assert driver.main([*FLAGS, "--print-config"]) == 0
        (run_dir / CONFIG_FILE).write_text(capsys.readouterr().out)
    else:
        shutil.copy(run_dir / CONFIG_WRITTEN_FILE, run_dir / CONFIG_FILE)
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "12"]) == 0
    assert report.load_run(run_dir).last_step == 12

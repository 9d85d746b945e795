"""What a run checkpoint is (actors.checkpoints) and what its readers do with one that reads but does not load:
a tensor of another shape inside, a state dict with a key missing. A resume refuses it before anything in the run
folder changes (falling back to the older checkpoint, or naming --resume-checkpoint), evaluate names the file and
--checkpoint, the learner worker raises CheckpointError: never a traceback."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
import torch

from actors.checkpoints import KEYS, RUN_CHECKPOINT_FORMAT, CheckpointError, list_checkpoints, read_checkpoint
from actors.learner_worker import LearnerWorker
from foxhunt_ray import driver
from foxhunt_ray.evaluate import main as evaluate
from foxhunt_ray.presets import preset

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A smoke run of 20 updates, serial, checkpoints at 10 and 20."""
    out = tmp_path_factory.mktemp("runs")
    argv = ["--preset", "smoke", "--steps", "20", "--checkpoint-every", "10", "--checkpoint-interval-s", "0"]
    assert driver.main([*argv, "--serial", "--quiet", "--out", str(out)]) == 0
    (found,) = out.glob("*/*/0")
    return found


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run_dir, dst)
    return dst


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file but run.lock (whose holder a resume names, refused or not)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != "run.lock"
    }


def _damage(path: Path, how: str) -> None:
    """Rewrites a checkpoint so that it still reads (format, step, learner config intact) but does not load."""
    state = torch.load(path, map_location="cpu", weights_only=True)
    if how == "shape":
        state["learner"]["main"]["target_flat"] = torch.zeros(3)
    else:  # a key missing
        del state["learner"]["rng"]
    torch.save(state, path)


def test_a_checkpoint_holds_the_documented_keys(finished):
    state = read_checkpoint(list_checkpoints(finished)[-1][1])
    assert set(state) == set(KEYS) and state["format"] == RUN_CHECKPOINT_FORMAT and state["step"] == 20


@pytest.mark.parametrize("how", ["shape", "missing"])
def test_a_resume_refuses_a_checkpoint_that_reads_but_does_not_load(finished, tmp_path, capsys, how):
    run_dir = _copy(finished, tmp_path)
    for _, path in list_checkpoints(run_dir):
        _damage(path, how)
    before = _snapshot(run_dir)
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "30"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no kept checkpoint can be loaded" in err, err
    assert "ckpt_00000020.pt: it does not load into this run's learner" in err and "--resume-checkpoint" in err
    assert _snapshot(run_dir) == before  # nothing in the run folder changed

    named = str(list_checkpoints(run_dir)[-1][1])
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--resume-checkpoint", named]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"cannot resume {run_dir} from {named}: it does not load" in err, err
    assert _snapshot(run_dir) == before


def test_a_resume_falls_back_past_a_checkpoint_that_does_not_load(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path)
    _damage(list_checkpoints(run_dir)[-1][1], "shape")
    assert driver.main(["--resume", str(run_dir), "--serial", "--quiet", "--steps", "30"]) == 0
    err = capsys.readouterr().err
    assert "ckpt_00000020.pt cannot be used: it does not load" in err and "falling back" in err, err


@pytest.mark.parametrize("how", ["shape", "missing"])
def test_the_learner_worker_names_a_checkpoint_that_does_not_load(finished, tmp_path, how):
    path = tmp_path / "ckpt.pt"
    shutil.copy(list_checkpoints(finished)[-1][1], path)
    _damage(path, how)
    saved = read_checkpoint(path)["learner"]
    worker = LearnerWorker(preset("smoke"), obs_dim=saved["obs_dim"], n_actions=saved["n_actions"])
    with pytest.raises(CheckpointError, match=r"checkpoint .*ckpt.pt does not load into this learner"):
        worker.load(path)
    buf = io.BytesIO()
    torch.save({"format": "other"}, buf)
    with pytest.raises(CheckpointError, match="not a run checkpoint: format='other'"):
        worker.load(buf.getvalue())


def test_evaluate_names_a_checkpoint_without_its_weights(finished, tmp_path, capsys):
    run_dir = _copy(finished, tmp_path)
    path = list_checkpoints(run_dir)[-1][1]
    state = torch.load(path, map_location="cpu", weights_only=True)
    del state["learner"]["main"]
    torch.save(state, path)
    before = _snapshot(run_dir)
    assert evaluate([str(run_dir), "--episodes", "2", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{path} holds no learner main.flat" in err and "--checkpoint STEP" in err, err
    assert _snapshot(run_dir) == before

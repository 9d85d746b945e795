"""A run folder's config.json has one reader (foxhunt_ray.run_folder.read_config), and the test-only faults are
recorded there apart from the learner config (learner.config.FaultInjection): never part of a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actors.checkpoints import list_checkpoints, read_checkpoint
from foxhunt_ray import driver, evaluate
from foxhunt_ray.run_folder import CONFIG_FILE, RunFolderError, read_config, read_config_doc
from learner.config import FaultInjection

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory) -> Path:
    """A smoke run killed by --inject-nan-at 6 (serial), a checkpoint at 4."""
    out = tmp_path_factory.mktemp("runs")
    argv = ["--preset", "smoke", "--steps", "10", "--checkpoint-every", "4", "--checkpoint-interval-s", "0"]
    assert driver.main([*argv, "--inject-nan-at", "6", "--serial", "--quiet", "--out", str(out)]) == 3
    (found,) = out.glob("*/*/0")
    return found


def test_the_faults_are_recorded_apart_from_the_learner_config(nan_run):
    doc = json.loads((nan_run / CONFIG_FILE).read_text())
    assert doc["faults"] == {"inject_nan_at": 6, "flip_distill_sign": False}
    assert "inject_nan_at" not in doc["run"]["learner"] and "flip_distill_sign" not in doc["run"]["learner"]
    saved = read_config(nan_run)
    assert saved.faults == FaultInjection(inject_nan_at=6) and saved.run.preset == "smoke"
    learner = read_checkpoint(list_checkpoints(nan_run)[-1][1])["learner"]["config"]
    assert "inject_nan_at" not in learner and "flip_distill_sign" not in learner


def test_a_config_of_older_code_has_its_faults_moved_out_of_the_learner(nan_run, tmp_path):
    doc = json.loads((nan_run / CONFIG_FILE).read_text())
    faults = doc.pop("faults")
    doc["run"]["learner"].update(faults)  # where older code kept them
    (tmp_path / CONFIG_FILE).write_text(json.dumps(doc))
    assert read_config_doc(tmp_path)["faults"] == faults
    saved = read_config(tmp_path)
    assert saved.faults == FaultInjection(inject_nan_at=6) and saved.run.learner == read_config(nan_run).run.learner


@pytest.mark.parametrize(
    "text, why",
    [
        (None, "does not exist"),
        ("{not json", "unreadable (not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"run": {}}', 'no "driver" section'),
        ('{"run": {"learner": {"hidden_dim": -3}}, "driver": {}}', "learner.hidden_dim=-3"),
    ],
)
def test_a_missing_or_malformed_config_is_named_with_its_fix(tmp_path, capsys, text, why):
    if text is not None:
        (tmp_path / CONFIG_FILE).write_text(text)
    with pytest.raises(RunFolderError, match=r"config\.json") as err:
        read_config(tmp_path)
    assert why in str(err.value) and ("config.written.json" in str(err.value) or text is None)
    # every reader says the same: a resume, evaluate and report
    assert driver.main(["--resume", str(tmp_path), "--serial", "--quiet"]) == 1
    assert evaluate.main([str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.count(f"{tmp_path / CONFIG_FILE} ") == 2 and "Traceback" not in err, err

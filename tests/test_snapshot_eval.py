"""benchmarks/snapshot_eval.py: every snapshot acts as its checkpoint's greedy agent on the same episodes."""

from pathlib import Path

import pytest
import torch

from benchmarks import snapshot_eval
from foxhunt_ray import driver
from foxhunt_ray.evaluate import evaluate_run

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EPISODES = 4


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A tiny trained run: smoke, serial, 8 updates, checkpoints at steps 4 and 8."""
    out = tmp_path_factory.mktemp("runs")
    argv = ["--preset", "smoke", "--steps", "8", "--checkpoint-every", "4", "--checkpoint-interval-s", "0"]
    assert driver.main([*argv, "--serial", "--quiet", "--out", str(out)]) == 0
    (found,) = out.glob("*/*/0")
    return found


def test_watch_keeps_the_newest_checkpoint_s_parameters_and_stops_with_the_run(run_dir, tmp_path):
    snaps = tmp_path / "snaps"
    assert snapshot_eval.watch(run_dir.parents[2], 0.01, snaps, timeout=60) == 0
    (only,) = snaps.glob("snap_*.pt")  # the run had ended: its newest checkpoint, then the watch stops
    snap = torch.load(only, weights_only=True)
    ckpt = torch.load(run_dir / "checkpoints" / "ckpt_00000008.pt", weights_only=True)["learner"]["main"]
    assert snap["step"] == 8 and only.name == "snap_00000008.pt"
    assert torch.equal(snap["flat"], ckpt["flat"]) and torch.equal(snap["target_flat"], ckpt["target_flat"])


def test_each_snapshot_scores_as_its_checkpoint_does_and_one_snapshot_combines_to_itself(run_dir, tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    for step in (4, 8):
        snapshot_eval.take_snapshot(run_dir / "checkpoints" / f"ckpt_{step:08d}.pt", snaps)
    result = snapshot_eval.evaluate(run_dir, snaps, EPISODES, val_fold=1, ks=[1, 2])
    assert [r["step"] for r in result["snapshots"]] == [4, 8]
    for row in result["snapshots"]:  # the test set: the run's fold, as foxhunt_ray.evaluate plays it
        agent = evaluate_run(run_dir, checkpoint=row["step"], episodes=EPISODES, write=False)["policies"]["agent"]
        assert row["test"] == pytest.approx(agent["pnl_usd_mean"])
    pnl = result["test_pnl"]
    assert pnl["last"] == result["snapshots"][-1]["test"]
    assert pnl["ensemble_1"] == pnl["weight_avg_1"] == pnl["last"]  # one snapshot averages to itself
    assert result["val_best_step"] == 8  # the last half of two snapshots is the newest
    assert result["sets"]["val"] != result["sets"]["test"]
    oracle = result["references"]["oracle"]["test"]
    assert result["test_fraction_of_oracle"]["last"] == pytest.approx(pnl["last"] / oracle)


def test_the_run_s_own_fold_is_refused_as_the_validation_set(run_dir, tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    snapshot_eval.take_snapshot(run_dir / "checkpoints" / "ckpt_00000008.pt", snaps)
    with pytest.raises(SystemExit, match="--val-fold=0 is the run's own fold"):
        snapshot_eval.evaluate(run_dir, snaps, EPISODES, val_fold=0, ks=[])


def test_runs_score_alone_as_evaluate_does_and_an_ensemble_of_one_policy_twice_is_that_policy(run_dir):
    result = snapshot_eval.across_runs([run_dir, run_dir], EPISODES, val_fold=1)
    agent = evaluate_run(run_dir, episodes=EPISODES, write=False)["policies"]["agent"]["pnl_usd_mean"]
    assert [r["step"] for r in result["runs"]] == [8, 8]
    assert [r["test"] for r in result["runs"]] == pytest.approx([agent, agent])
    alone = result["runs"][0]
    assert result["ensemble"] == {k: alone[k] for k in ("val", "val_sem", "test", "test_sem")}
    with pytest.raises(SystemExit, match="--val-fold=0 is the run's own fold"):
        snapshot_eval.across_runs([run_dir], EPISODES, val_fold=0)

"""python -m foxhunt_ray.export (foxhunt_ray/export.py): a run's greedy policy alone, TorchScript with its observation
standardisation and a manifest of the market it expects; it plays the same actions as the checkpoint's greedy pi."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from actors.checkpoints import latest_checkpoint
from foxhunt_ray import driver
from foxhunt_ray.evaluate import EvaluationError, load_agent, load_run
from foxhunt_ray.export import MANIFEST_FILE, POLICY_FILE, export_run, load, main
from lobsim_env import LobVectorEnv


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    flags = ["--preset", "smoke", "--serial", "--quiet", "--steps", "40", "--out", str(out)]
    assert driver.main([*flags, "--settings", "learn"]) == 0  # learn: the observation standardised in the encoder
    return next(out.glob("*/*/0"))


def test_the_exported_policy_plays_the_checkpoints_greedy_actions(run_dir, tmp_path, capsys):
    assert main([str(run_dir), "--out", str(tmp_path / "x")]) == 0
    assert "KB) and" in capsys.readouterr().out
    policy = load(tmp_path / "x")
    run, _, _ = load_run(run_dir)
    assert run.learner.obs_norm != "off"
    step, ckpt = latest_checkpoint(run_dir)
    agent, _ = load_agent(ckpt, run, obs_dim=policy.obs_dim, n_actions=7)
    env = LobVectorEnv(64, run.market)
    obs, _ = env.reset(seed=3)
    rng, seen = np.random.default_rng(0), set()
    for _ in range(30):  # observations of a played window, the agent's own actions stepping it
        mine = policy.act(obs)
        np.testing.assert_array_equal(mine, agent(obs, env, rng))
        seen |= set(mine.tolist())
        obs, *_ = env.step(mine)
    assert len(seen) > 1  # more than one action: the comparison can tell them apart
    m = policy.manifest
    assert m["step"] == step and m["obs_dim"] == obs.shape[1] and m["market"]["horizon"] == run.market.horizon
    assert m["columns"]["position"] == 4 * run.market.obs_levels + 4 and m["actions"][1] == "MARKET_BUY"
    assert (tmp_path / "x" / POLICY_FILE).stat().st_size < ckpt.stat().st_size / 10
    with pytest.raises(ValueError, match=r"this policy takes \[B, \d+\]"):
        policy.act(obs[:, :-1])


def test_the_default_folder_and_a_broken_export_are_named(run_dir, tmp_path):
    folder = export_run(run_dir)
    assert folder == run_dir / "export" and json.loads((folder / MANIFEST_FILE).read_text())["format"]
    # exported again over it, with a link planted at the temporary name a pid once made predictable: the link's
    # target is never written, and the export leaves no temporary file
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (folder / f".{POLICY_FILE}.{os.getpid()}.pt2").symlink_to(victim)
    assert export_run(run_dir) == folder and victim.read_text() == "precious"
    assert sorted(p.name for p in folder.iterdir() if not p.is_symlink()) == sorted([MANIFEST_FILE, POLICY_FILE])
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({"format": "other/0"}))
    with pytest.raises(EvaluationError, match=r"format='other/0', expected 'foxhunt_ray.policy/1'; export it again"):
        load(tmp_path)
    assert main([str(tmp_path / "nothing")]) == 1


def test_an_export_folder_holding_a_fifo_is_named_never_read(tmp_path):
    """load() reads policy.json bounded (a regular file, at most actors.files.MAX_TEXT_BYTES) and opens policy.pt2
    only when it is a regular file: a FIFO at either is named, never read (before: a FIFO blocked for ever, and
    /dev/zero at policy.json was read until the kernel killed the process: not tried here, the check is the same)."""
    import os
    import signal

    def late(signum, frame):
        raise TimeoutError("still reading: the input was not refused")

    previous = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, 5)
    try:
        os.mkfifo(tmp_path / MANIFEST_FILE)
        with pytest.raises(EvaluationError, match=r"policy.json cannot be read: .*is a FIFO \(named pipe\), .*export"):
            load(tmp_path)
        (tmp_path / MANIFEST_FILE).unlink()
        (tmp_path / MANIFEST_FILE).write_text(json.dumps({"format": "foxhunt_ray.policy/1", "obs_dim": 3}))
        os.mkfifo(tmp_path / POLICY_FILE)
        with pytest.raises(EvaluationError, match=r"policy.pt2 is a FIFO \(named pipe\), not a regular file"):
            load(tmp_path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

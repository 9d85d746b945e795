"""LearnerWorker (bad payloads counted, periodic checkpoints handed out as bytes, written whole and pruned by
write_checkpoint, load from a file or bytes and its errors) and provenance (git commit + dirty marker, content
hash without git)."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import numpy as np
import pytest
import torch

from actors import wire
from actors.checkpoints import Checkpoint, checkpoint_path, latest_checkpoint, list_checkpoints, write_checkpoint
from actors.config import RolloutConfig
from actors.learner_worker import LearnerWorker
from actors.rollout import RolloutWorker
from foxhunt_ray import provenance
from foxhunt_ray.presets import preset, run_preset
from lobsim_env import MarketConfig


@pytest.fixture()
def pair():
    worker = RolloutWorker(
        # the books in lockstep, so the test knows when episodes end (stagger_episodes: tests/test_rollout.py)
        RolloutConfig(num_envs=4, steps_per_sample=8, torch_threads=torch.get_num_threads(), stagger_episodes=False),
        MarketConfig(horizon=20),
        worker_index=0,
        seed=0,
    )
    make = lambda **kw: LearnerWorker(  # noqa: E731
        preset("smoke"), obs_dim=worker.obs_dim, n_actions=worker.n_actions, **kw
    )
    learner = make(checkpoint_every=3)
    worker.set_weights(learner.policy_weights())
    yield worker, learner, make
    worker.stop()


def test_update_adds_totals_and_counts_bad_payloads(pair):
    worker, learner, _ = pair
    [d1] = learner.update(worker.sample())
    assert d1["step"] == 1 and d1["env_steps"] == 32 and d1["bad_payloads"] == 0 and d1["worker_index"] == 0
    assert d1["call_payloads"] == 1
    assert learner.update(b"\x00garbage") == []
    assert learner.step == 1  # no step on a bad payload
    [d2] = learner.update(worker.sample())
    assert d2["step"] == 2 and d2["env_steps"] == 64 and d2["bad_payloads"] == 1
    # horizon 20, 16 steps so far: no episode ended; 8 more end one per book
    [d3] = learner.update(worker.sample())
    assert d3["episodes"] == 4 and d3["pnl_cum_usd"] == pytest.approx(learner.stats.pnl_cum_usd)


def _edited(payload, key, edit):
    batch = wire.decode(bytes(payload))
    batch = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in batch.items() if k != "wire_version"}
    edit(batch[key])
    return wire.encode(batch)


def test_a_payload_the_learner_refuses_is_counted_and_skipped(pair):
    """A payload that decodes but is no rollout this learner can train on (an action out of range, an obs of
    another width, no valid step) is dropped and counted like a bad one; the run goes on."""
    worker, learner, _ = pair
    good = worker.sample()
    out_of_range = _edited(good, "actions", lambda a: a.__setitem__((0, 0), 99))
    no_valid = _edited(good, "valid", lambda a: a.fill(False))
    assert learner.update(out_of_range) == [] and learner.update(no_valid) == []
    assert learner.step == 0 and learner.decoder.bad_payloads == 2
    assert "no transition" in learner.decoder.last_error
    [d] = learner.update(good)
    assert d["step"] == 1 and d["bad_payloads"] == 2 and d["env_steps"] == 32  # refused payloads did not count


def test_minibatches_wait_stop_at_and_weights():
    """minibatch_envs splits a payload into several steps; wait=False leaves the newest payload's steps queued
    (returned by the next call or drain, in order); stop_at ends exactly at a step; weights carry the step."""
    worker = RolloutWorker(
        RolloutConfig(num_envs=8, steps_per_sample=6, policy_device="cpu"), MarketConfig(horizon=20),
        worker_index=0, seed=0,
    )
    cfg = dataclasses.replace(preset("smoke"), minibatch_envs=2)
    # on the CPU on any machine: a CPU learner's weights are there at once (a GPU learner's once the device has
    # finished the steps: tests/test_learner_cuda.py)
    learner = LearnerWorker(cfg, obs_dim=worker.obs_dim, n_actions=worker.n_actions, device="cpu")
    assert learner.policy_weights()["version"] == 0
    worker.set_weights(learner.policy_weights())
    payloads = [worker.sample() for _ in range(3)]
    first = learner.train(payloads[:2], wait=False)
    assert [d["step"] for d in first] == [1, 2, 3, 4] and learner.step == 8
    assert [d["env_steps"] for d in first] == [48] * 4
    assert learner.policy_weights()["version"] == 8  # a CPU learner's copy is there at once
    rest = learner.train(payloads[2:], wait=False, stop_at=10)
    assert [d["step"] for d in rest] == [5, 6, 7, 8] and learner.step == 10
    last = learner.drain()
    assert [d["step"] for d in last] == [9, 10] and learner.drain() == []
    # call_payloads: the size of the call each step's payload came in (the first two payloads came together)
    assert [d["call_payloads"] for d in first + rest + last] == [2] * 8 + [1] * 2
    t = learner.timings()
    assert t["payloads"] == 3 and t["updates"] == 10 and t["update_gpu_s"] > 0


def test_checkpoints_every_m_keep_two_and_resume_exactly(pair, tmp_path):
    """The learner writes nothing: its periodic checkpoints wait in take_checkpoints() as bytes; write_checkpoint
    puts them in the run folder whole and keeps the newest two; a learner loads the file or the bytes alike."""
    worker, learner, make = pair
    payloads = [worker.sample() for _ in range(8)]
    for p in payloads[:4]:
        learner.update(p)
    assert [c.step for c in learner.take_checkpoints()] == [3] and learner.take_checkpoints() == []
    for p in payloads[4:7]:
        learner.update(p)
    taken = learner.take_checkpoints()
    assert [c.step for c in taken] == [6] and not list(tmp_path.iterdir())  # nothing on disk from the learner
    for c in [Checkpoint(step=3, data=b"old"), Checkpoint(step=1, data=b"older"), *taken]:
        write_checkpoint(tmp_path, c)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 6]
    assert not list(tmp_path.glob("checkpoints/*.tmp"))
    step, path = latest_checkpoint(tmp_path)
    assert path == checkpoint_path(tmp_path, 6) and path.read_bytes() == taken[0].data
    resumed = make()
    assert resumed.load(path) == step == 6
    assert resumed.stats.env_steps == 6 * 32 and resumed.decoder.bad_payloads == 0
    from_bytes = make()
    assert from_bytes.load(taken[0].data) == 6  # what a learner on another node gets from the driver
    a, b = from_bytes.update(payloads[6]), resumed.update(payloads[6])
    assert a == b  # a restored learner continues deterministically
    final = resumed.checkpoint()  # asked for: returned, not queued
    assert final.step == 7 and resumed.take_checkpoints() == []


def test_load_refuses_a_bad_file(pair, tmp_path):
    _, learner, _ = pair
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"cannot read checkpoint .*bad.pt"):
        learner.load(bad)
    with pytest.raises(ValueError, match=r"cannot read the checkpoint's 3 bytes"):
        learner.load(b"bad")
    torch.save({"format": "other"}, bad)
    with pytest.raises(ValueError, match=r"not a run checkpoint: format='other'"):
        learner.load(bad)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"checkpoint_every=0 must be None or an int >= 1"):
        LearnerWorker(preset("smoke"), obs_dim=4, n_actions=3, checkpoint_every=0)


def test_run_presets_are_valid_and_match_the_learner_presets():
    for name in ("plan_a_v2", "phase4_2", "phase4_3", "smoke"):
        cfg = run_preset(name).validate()
        assert cfg.preset == name and cfg.learner == preset(name)
    with pytest.raises(ValueError, match=r"unknown preset 'nope'"):
        run_preset("nope")


def test_content_hash_without_git_and_dirty_marker(tmp_path):
    tree = tmp_path / "tree"
    for name in ("foxhunt_ray", "learner"):
        shutil.copytree(provenance.REPO_ROOT / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(provenance.REPO_ROOT / "pyproject.toml", tree)
    (tree / "tests").mkdir()
    (tree / "tests" / "t.py").write_text("x = 1\n")
    first = provenance.code_sha(tree)
    assert first.startswith("content-") and provenance.git_sha(tree) is None
    (tree / "tests" / "t.py").write_text("x = 2\n")  # not code: the stamp stays
    assert provenance.code_sha(tree) == first
    (tree / "learner" / "config.py").write_text((tree / "learner" / "config.py").read_text() + "\n# edit\n")
    assert provenance.code_sha(tree) != first

    if shutil.which("git") is None:
        return
    git = lambda *a: subprocess.run(["git", "-C", str(tree), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert provenance.code_sha(tree) == head.strip()
    (tree / "learner" / "config.py").write_text("# changed\n")
    assert provenance.code_sha(tree) == head.strip() + "-dirty"
    assert provenance.matches(provenance.content_sha(tree), tree)[0]
    assert not provenance.matches("wrong", tree)[0]

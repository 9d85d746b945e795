"""Values outside their meaning are refused by name (docs/faults.md, "Values outside their meaning"): a rollout
payload's book seeds, log-probabilities, counters and episode count (counted as a bad payload, the run goes on),
and a run's --rollout-workers, market.horizon, evaluate --horizon, a --set preset, and several bad --set values
named together, each before anything is written. Direct calls of the decoder, the learner worker and the
validators, and the driver resolving a serial smoke run (no Ray)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from actors import wire
from actors.config import MAX_ROLLOUT_WORKERS, RolloutConfig
from actors.learner_worker import LearnerWorker
from actors.rollout import RolloutWorker
from foxhunt_ray import driver, evaluate
from foxhunt_ray.plan import DriverConfig
from foxhunt_ray.presets import PRESET_NAMES, preset, run_preset, with_overrides
from lobsim_env import MarketConfig
from lobsim_env.config import MAX_HORIZON

U64 = 2**64 - 1


def make_batch(T: int = 4, B: int = 3, D: int = 2, E: int = 1) -> dict:
    """A well-formed batch of worker 1 (books seeded 10 + i), every value within its meaning."""
    rng = np.random.default_rng(0)
    return {
        "policy_version": 7,
        "fold": 0,
        "worker_index": 1,
        "env_steps": T * B,
        "obs": rng.normal(size=(T + 1, B, D)).astype(np.float32),
        "actions": rng.integers(0, 3, size=(T, B)).astype(np.int64),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": np.zeros((T, B), bool),
        "truncated": np.zeros((T, B), bool),
        "valid": np.ones((T, B), bool),
        "behaviour_logp": np.full((T, B), -np.log(3.0), np.float32),
        "env_ids": np.arange(10, 10 + B, dtype=np.int64),
        "pnl_usd": np.zeros(B),
        "episode_env": np.zeros(E, np.int64),
        "episode_pnl_usd": np.zeros(E),
    }


def edited(**kw) -> np.ndarray:
    batch = make_batch()
    for key, value in kw.items():
        if callable(value):
            value(batch[key])
        else:
            batch[key] = value
    return wire.encode(batch)


# ------------------------------------------------------------------------------------ the wire decoder


@pytest.mark.parametrize(
    ("payload", "says"),
    [
        (edited(env_ids=lambda a: a.__setitem__(0, -5)), r"env_ids \[-5, 11, 12\] are not worker 1's book seeds"),
        (edited(env_ids=np.array([-5, -4, -3], np.int64)), r"consecutive ints from at least 1 x 3 = 3"),
        (edited(env_ids=np.array([10, 12, 11], np.int64)), r"env_ids \[10, 12, 11\] are not worker 1's"),
        (edited(behaviour_logp=lambda a: a.__setitem__((2, 1), 5.0)), r"behaviour_logp holds 5 \(first at index "
         r"\[2, 1\]\): a log-probability must be <= 0 \(a probability <= 1"),
        (edited(policy_version=U64), rf"policy_version={U64} must be an int in 0..{2**53} \(a learner step"),
        (edited(fold=U64), rf"fold={U64} must be an int in 0..{2**53}"),
        (edited(worker_index=U64), rf"worker_index={U64} must be an int in 0..{MAX_ROLLOUT_WORKERS - 1} \(a run "
         rf"has at most 1,024 rollout workers"),
        (edited(env_steps=U64), rf"env_steps={U64} must be an int in 0..{2**53}"),
        (edited(env_steps=13), r"env_steps=13 must be T x B = 4 x 3 = 12"),
    ],
    ids=["env_id_-5", "env_ids_negative", "env_ids_shuffled", "logp_+5", "policy_version_u64", "fold_u64",
         "worker_index_u64", "env_steps_u64", "env_steps_not_TxB"],
)
def test_the_decoder_refuses_values_outside_their_meaning(payload, says):
    with pytest.raises(wire.WireError, match=says) as info:
        wire.decode(payload)
    assert "corrupted" in str(info.value)  # and the fix: where such a payload comes from


def test_values_within_their_meaning_still_decode():
    """The edges: book seeds from worker_index x B, the last worker, 0 and float32 rounding above it as a
    log-probability, the largest counters."""
    out = wire.decode(edited(env_ids=np.arange(3, 6, dtype=np.int64)))
    assert out["env_ids"].tolist() == [3, 4, 5]
    batch = make_batch()
    batch.update(worker_index=MAX_ROLLOUT_WORKERS - 1, env_ids=np.arange(3 * 1023, 3 * 1024, dtype=np.int64))
    batch.update(policy_version=2**53, fold=2**53)
    batch["behaviour_logp"][0, 0], batch["behaviour_logp"][0, 1] = 0.0, 6e-8
    assert wire.decode(wire.encode(batch))["worker_index"] == MAX_ROLLOUT_WORKERS - 1


def test_a_refused_value_counts_as_a_bad_payload_and_starves_the_run():
    dec = wire.PayloadDecoder(limits=wire.WireLimits(max_bad_in_a_row=3))
    assert dec.decode(edited(env_ids=lambda a: a.__setitem__(0, -5))) is None
    assert dec.decode(edited(behaviour_logp=lambda a: a.fill(5.0))) is None
    assert dec.bad_payloads == 2 and dec.diag() == {"bad_payloads": 2.0} and dec.starved() is None
    assert dec.decode(edited(worker_index=U64)) is None
    why = dec.starved()
    assert why is not None and "no good rollout payload in the last 3" in why and "env_ids" in why
    assert dec.decode(wire.encode(make_batch())) is not None  # a good one decodes; the learner calls good()


# ------------------------------------------------------------------------------------ the learner's checks


@pytest.fixture()
def pair(one_torch_thread):
    worker = RolloutWorker(
        RolloutConfig(num_envs=4, steps_per_sample=8, torch_threads=torch.get_num_threads(), policy_device="cpu"),
        MarketConfig(horizon=20),
        worker_index=0,
        seed=0,
    )
    learner = LearnerWorker(preset("smoke"), obs_dim=worker.obs_dim, n_actions=worker.n_actions, device="cpu")
    worker.set_weights(learner.policy_weights())
    yield worker, learner
    worker.stop()


def _rewritten(payload, **kw) -> np.ndarray:
    batch = wire.decode(bytes(payload))
    batch = {k: v for k, v in batch.items() if k != "wire_version"}
    return wire.encode({**batch, **kw})


def test_the_learner_refuses_a_policy_from_the_future_and_8_mi_episodes(pair):
    """A payload acted with weights this learner never made (policy_version above its step), and one listing
    8 Mi ended episodes in a batch of 8 steps of 4 books: each refused, counted as a bad payload (diag
    bad_payloads), no step trained, no episode counted; the run goes on with the next good payload."""
    worker, learner = pair
    good = worker.sample()
    ahead = _rewritten(good, policy_version=5)
    n = 8 * 2**20
    many = _rewritten(good, episode_env=np.zeros(n, np.int64), episode_pnl_usd=np.zeros(n))
    assert learner.update(ahead) == [] and learner.update(many) == []
    assert learner.step == 0 and learner.stats.episodes == 0 and learner.decoder.bad_payloads == 2
    faults = list(learner.decoder.faults.values())  # [count, what, first message] a kind
    assert [what for _, what, _ in faults] == ["rollout payload refused by the learner"] * 2
    first, second = (reason for _, _, reason in faults)
    assert first.startswith("policy_version=5 must be in 0..0, this learner's step: the batch was acted with weights")
    assert second.startswith("episode_env lists 8388608 ended episodes, over the 32 a batch of T=8 steps of B=4")
    [d] = learner.update(good)
    assert d["step"] == 1 and d["bad_payloads"] == 2 and learner.decoder.bad_in_a_row == 0
    # the learner's step now 1: weights of version 1 are its own
    worker.set_weights(learner.policy_weights())
    [d] = learner.update(worker.sample())
    assert d["step"] == 2 and d["bad_payloads"] == 2


# ------------------------------------------------------------------------------------ a run's config


def _run(tmp_path, *flags: str) -> int:
    argv = ["--preset", "smoke", "--quiet", "--serial", "--steps", "2", "--out", str(tmp_path / "runs"), *flags]
    return driver.main(argv)


def _refused(tmp_path, capsys, *flags: str) -> str:
    code = _run(tmp_path, *flags)
    err = capsys.readouterr().err
    assert code == 1 and err.startswith("error: invalid config:") and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists(), "a run folder was made"
    return err


def test_rollout_workers_above_the_bound_are_refused_before_the_run_folder(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--rollout-workers", "100000")
    assert f"driver.rollout_workers=100000 must be an int in 1..{MAX_ROLLOUT_WORKERS} (one process and CPU" in err
    assert "pass --rollout-workers of about one a core" in err
    assert DriverConfig(rollout_workers=MAX_ROLLOUT_WORKERS).errors() == []


def test_a_fold_no_payload_can_carry_is_refused_before_the_run_folder(tmp_path, capsys):
    """--fold 99999999999999999999 (above 2**64): before, a run folder .../99999999999999999999 was made, then the
    first payload's msgpack raised OverflowError with a traceback; a fold above 2**53 ran on refused payloads."""
    err = _refused(tmp_path, capsys, "--fold", "99999999999999999999")
    assert f"driver.fold=99999999999999999999 must be an int in 0..{2**53} (every rollout payload carries it" in err
    assert DriverConfig(fold=2**53).errors() == []


def test_a_horizon_above_the_bound_is_refused_before_anything_is_written(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--set", "market.horizon=1000000000000")
    assert f"market.horizon=1000000000000 must be an int in 1..{MAX_HORIZON} (2**24: time_left, a float32" in err
    assert MarketConfig(horizon=MAX_HORIZON).errors() == []
    assert MarketConfig(horizon=MAX_HORIZON + 1).errors()
    # evaluate --horizon: the same bound, refused before the run folder is even read
    code = evaluate.main([str(tmp_path / "no_run"), "--horizon", "1000000000"])
    err = capsys.readouterr().err
    assert code == 1 and f"--horizon=1000000000 must be an int in 1..{MAX_HORIZON} (2**24" in err
    with pytest.raises(evaluate.EvaluationError, match=r"--horizon=16777217 must be an int in 1\.\.16777216"):
        evaluate.evaluate_run(tmp_path, horizon=MAX_HORIZON + 1)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_preset_in_a_set_is_refused_as_the_flag_refuses_it(tmp_path, capsys):
    err = _refused(tmp_path, capsys, "--set", 'preset="nosuch"')
    assert f"preset='nosuch' is not one of {list(PRESET_NAMES)}: name a preset with --preset NAME" in err
    err = _refused(tmp_path, capsys, "--set", 'sizing="huge"')
    assert "sizing='huge' is not one of" in err


def test_every_bad_set_value_is_named_at_once(tmp_path, capsys):
    """An unknown key and a value of the wrong type no longer hide the other values' errors."""
    err = _refused(
        tmp_path, capsys,
        "--set", "learner.nosuch=3", "--set", 'learner.gamma="x"', "--set", "learner.lr=-1",
        "--set", "market.horizon=0", "--set", 'preset="nosuch"', "--rollout-workers", "0",
    )
    for bad in ("override 'learner.nosuch' names no config field", "learner.gamma='x' must be float",
                "learner.lr=-1.0 must be > 0", "market.horizon=0 must be an int in 1..", "preset='nosuch' is not one",
                "driver.rollout_workers=0 must be an int in 1.."):
        assert bad in err, (bad, err)
    config, errs = with_overrides(run_preset("smoke"), ["learner.lr=1e-3", "learner.nosuch=1", "seed=7"])
    assert config.learner.lr == 1e-3 and config.seed == 7 and len(errs) == 1 and "learner.nosuch" in errs[0]

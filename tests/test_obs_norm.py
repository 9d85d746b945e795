"""learner.obs_norm: the encoder standardises the observation by statistics probed from the env before training.

What must hold: off, the encoder is the plain MLP bit for bit (the pinned semantics do not move); on, it computes
the MLP of (x - mean) / std, with mean and std fixed (buffers, never trained) and carried everywhere the network
goes (the target copy, the rollout actors' weights, checkpoints, evaluation); the probe sees the market's whole
episode; bad statistics or a checkpoint without them are refused by name, with nothing loaded.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from actors.envs import OBS_STD_FLOOR, PROBE_ENVS, PROBE_STEPS, probe_env
from foxhunt_ray import driver
from foxhunt_ray.evaluate import EvaluationError, load_agent, load_run, networks_from_flat
from learner.config import LearnerConfig
from learner.learner import Learner
from learner.network import Encoder, policy_from_weights
from lobsim_env import ENV_ID, MarketConfig
from lobsim_env.market import obs_index
from tests.learner_batches import OBS, N, random_rollout, smoke_cfg

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MEAN = np.linspace(-2.0, 3.0, OBS)
STD = np.linspace(0.05, 4.0, OBS)


def _learner(**kw) -> Learner:
    return Learner(smoke_cfg(obs_norm="probe"), obs_dim=OBS, n_actions=N, obs_mean=MEAN, obs_std=STD, **kw)


def test_off_the_encoder_is_the_plain_mlp_key_for_key_and_bit_for_bit():
    torch.manual_seed(0)
    enc = Encoder(OBS, 16, 2)
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(OBS, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
    assert list(enc.state_dict()) == list(plain.state_dict())
    x = torch.randn(9, OBS)
    assert torch.equal(enc(x), plain(x))


def test_on_it_is_the_mlp_of_the_standardised_observation_with_fixed_buffers():
    torch.manual_seed(0)
    enc = Encoder(OBS, 16, 2, obs_norm=True)
    enc.set_obs_norm_(MEAN, STD)
    x = torch.randn(9, OBS) * 3
    z = (x.double() - torch.tensor(MEAN)) / torch.tensor(STD)
    ref = nn.Sequential(*enc)(z.float())  # the same layers, fed the standardised input
    torch.testing.assert_close(enc(x), ref, rtol=1e-5, atol=1e-5)
    assert {"obs_scale", "obs_shift"} <= set(enc.state_dict())  # travels with the weights and checkpoints
    assert sum(p.numel() for p in enc.parameters()) == sum(p.numel() for p in Encoder(OBS, 16, 2).parameters())


@pytest.mark.parametrize(
    "mean, std, needle",
    [
        (MEAN[:-1], STD, f"({OBS},)"),
        (MEAN, np.where(np.arange(OBS) == 2, 0.0, STD), "std > 0"),
        (np.where(np.arange(OBS) == 1, np.nan, MEAN), STD, "finite"),
    ],
)
def test_bad_statistics_are_refused_by_name(mean, std, needle):
    enc = Encoder(OBS, 8, 1, obs_norm=True)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        enc.set_obs_norm_(mean, std)
    assert torch.equal(enc.obs_scale, torch.ones(OBS)) and torch.equal(enc.obs_shift, torch.zeros(OBS))
    with pytest.raises(ValueError, match="built without obs_norm"):
        Encoder(OBS, 8, 1).set_obs_norm_(MEAN, STD)


def test_the_probe_sees_the_market_s_whole_episode_and_is_the_same_every_time():
    market = MarketConfig(depth_flow_ticks=5)
    a, b = probe_env(ENV_ID, market=market), probe_env(ENV_ID, market=market)
    assert a == b and len(a.obs_mean) == len(a.obs_std) == a.obs_dim
    assert min(a.obs_std) >= OBS_STD_FLOOR
    ix = obs_index(market)
    # the books open spread over the episode: the time left ranges over (0, 1], mean about a half (a probe of
    # the episodes' first PROBE_STEPS steps alone would see about 0.87 and a spread a quarter as wide)
    assert abs(a.obs_mean[ix["time_left"]] - 0.5) < 0.05 and a.obs_std[ix["time_left"]] > 0.25
    # what standardising is for: the flows are an order of magnitude narrower than the book's columns
    assert a.obs_std[ix["flow_slow"]] < 0.1 * a.obs_std[ix["imbalance"]]
    assert PROBE_ENVS * PROBE_STEPS >= 4096


def test_any_gymnasium_env_is_probed_too():
    spaces = probe_env("CartPole-v1", market=MarketConfig())
    assert spaces.obs_dim == 4 and all(s >= OBS_STD_FLOOR for s in spaces.obs_std)
    assert all(np.isfinite(spaces.obs_mean))


def test_the_learner_needs_the_statistics_and_gives_them_to_its_target_and_its_actors():
    with pytest.raises(ValueError, match="obs_mean= and obs_std="):
        Learner(smoke_cfg(obs_norm="probe"), obs_dim=OBS, n_actions=N)
    with pytest.raises(ValueError, match="std > 0"):
        Learner(smoke_cfg(obs_norm="probe"), obs_dim=OBS, n_actions=N, obs_mean=MEAN, obs_std=-STD)
    lrn = _learner()
    enc, tgt = lrn.net.encoder, lrn.main.target.encoder
    torch.testing.assert_close(enc.obs_scale, torch.tensor(1 / STD, dtype=torch.float32))
    assert torch.equal(tgt.obs_scale, enc.obs_scale) and torch.equal(tgt.obs_shift, enc.obs_shift)
    rng = np.random.default_rng(0)
    for i in range(3):
        lrn.update(random_rollout(rng, version=i))
    torch.testing.assert_close(enc.obs_scale, torch.tensor(1 / STD, dtype=torch.float32))  # never trained
    policy = policy_from_weights(lrn.policy_weights())
    assert policy.encoder.obs_norm
    x = torch.randn(11, OBS)
    assert torch.equal(policy(x), lrn.net.pi(lrn.net.encoder(x)))


def test_a_checkpoint_carries_them_and_a_damaged_one_is_refused_with_nothing_loaded():
    lrn = _learner()
    lrn.update(random_rollout(np.random.default_rng(1)))
    sd = lrn.state_dict()
    fresh = Learner(smoke_cfg(obs_norm="probe"), obs_dim=OBS, n_actions=N, obs_mean=[0.0] * OBS, obs_std=[1.0] * OBS)
    fresh.load_state_dict(sd)  # the checkpoint's statistics replace the ones it was built with
    for enc in (fresh.net.encoder, fresh.main.target.encoder):
        assert torch.equal(enc.obs_scale, lrn.net.encoder.obs_scale)
        assert torch.equal(enc.obs_shift, lrn.net.encoder.obs_shift)
    other = Learner(smoke_cfg(obs_norm="probe"), obs_dim=OBS, n_actions=N, obs_mean=[0.0] * OBS, obs_std=[1.0] * OBS)
    before = other.main.flat.detach().clone()
    for damaged in (None, {"obs_scale": sd["obs_norm"]["obs_scale"][:-1], "obs_shift": sd["obs_norm"]["obs_shift"]}):
        with pytest.raises(ValueError, match="obs_norm"):
            other.load_state_dict({**sd, "obs_norm": damaged})
        assert other.step == 0 and torch.equal(other.main.flat, before)
        assert torch.equal(other.net.encoder.obs_scale, torch.ones(OBS))
    # a checkpoint of a learner without obs_norm (or of code before it) does not load into one with it
    plain = Learner(smoke_cfg(), obs_dim=OBS, n_actions=N)
    with pytest.raises(ValueError, match="obs_norm"):
        other.load_state_dict(plain.state_dict())


def test_a_checkpoint_written_before_the_field_existed_loads_as_off():
    sd = Learner(smoke_cfg(), obs_dim=OBS, n_actions=N).state_dict()
    sd["config"] = {k: v for k, v in sd["config"].items() if k != "obs_norm"}
    Learner(smoke_cfg(), obs_dim=OBS, n_actions=N).load_state_dict(sd)
    assert LearnerConfig().obs_norm == "off"


def test_evaluation_rebuilds_the_standardising_policy_from_the_checkpoint():
    lrn = _learner()
    sd = lrn.state_dict()
    cfg = lrn.cfg
    net, policy = networks_from_flat(sd["main"]["flat"], cfg, OBS, N, obs_norm=sd["obs_norm"])
    x = torch.randn(7, OBS)
    assert torch.equal(policy(x), lrn.net.pi(lrn.net.encoder(x)))
    assert torch.equal(net.encoder(x), lrn.net.encoder(x))  # --policy q reads the main net's encoder
    with pytest.raises(ValueError, match="no obs_norm"):
        networks_from_flat(sd["main"]["flat"], cfg, OBS, N, obs_norm=None)


def test_a_run_with_it_trains_checkpoints_and_evaluates_as_its_learner_acts(tmp_path):
    argv = ["--preset", "smoke", "--steps", "6", "--checkpoint-every", "3", "--checkpoint-interval-s", "0"]
    argv += ["--serial", "--quiet", "--out", str(tmp_path), "--set", "learner.obs_norm=probe"]
    assert driver.main(argv) == 0
    (run_dir,) = tmp_path.glob("*/*/0")
    run, _, _ = load_run(run_dir)
    assert run.learner.obs_norm == "probe"
    ckpt = run_dir / "checkpoints" / "ckpt_00000006.pt"
    saved = torch.load(ckpt, weights_only=True)["learner"]
    spaces = probe_env(run.env_id, market=run.market)
    torch.testing.assert_close(saved["obs_norm"]["obs_scale"], 1 / torch.tensor(spaces.obs_std, dtype=torch.float32))
    lrn = Learner(
        run.learner,
        obs_dim=spaces.obs_dim,
        n_actions=spaces.n_actions,
        obs_mean=[0.0] * spaces.obs_dim,
        obs_std=[1.0] * spaces.obs_dim,
    )
    lrn.load_state_dict(saved)
    agent, step = load_agent(ckpt, run, obs_dim=spaces.obs_dim, n_actions=spaces.n_actions)
    obs = np.random.default_rng(0).standard_normal((32, spaces.obs_dim)).astype(np.float32)
    expected = policy_from_weights(lrn.policy_weights()).act(obs, greedy=True)[0]
    assert step == 6 and np.array_equal(agent(obs, None, np.random.default_rng(0)), expected)
    # the same checkpoint without its statistics is named, not evaluated with the raw observation
    damaged = tmp_path / "damaged.pt"
    state = torch.load(ckpt, weights_only=True)
    del state["learner"]["obs_norm"]
    torch.save(state, damaged)
    with pytest.raises(EvaluationError, match="no obs_norm"):
        load_agent(damaged, run, obs_dim=spaces.obs_dim, n_actions=spaces.n_actions)


def test_the_setting_is_part_of_what_a_checkpoint_must_match():
    cfg = dataclasses.replace(smoke_cfg(), obs_norm="probe")
    assert cfg.errors() == []
    bad = dataclasses.replace(smoke_cfg(), obs_norm="running")
    assert any("learner.obs_norm='running'" in e for e in bad.errors())

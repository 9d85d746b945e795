"""benchmarks/bench_rllib.py's environment side (no RLlib needed): the market RLlib's PPO trains on is the one
foxhunt's learner sees (standardised observation, scaled reward, staggered first episodes), and its greedy agent
plays the held-out episodes the baselines play."""

import dataclasses

import numpy as np
import pytest
import torch

from actors.config import RolloutConfig
from actors.rollout import RolloutWorker
from benchmarks import bench_rllib as br
from foxhunt_ray.presets import run_preset
from lobsim_env import LobVectorEnv
from lobsim_env.baselines import POLICIES
from lobsim_env.market import Action, obs_size

MARKET = dataclasses.replace(run_preset("phase4_3").market, horizon=60)
DIM = obs_size(MARKET)
MEAN = np.linspace(-1.0, 1.0, DIM)
STD = np.linspace(0.5, 2.0, DIM)


def test_the_env_is_the_market_standardised_scaled_and_staggered():
    env = br.RllibLobEnv(8, MARKET, MEAN, STD, 0.25, stagger_seed=3)
    raw = LobVectorEnv(8, MARKET)
    obs, _ = env.reset(seed=5)
    first = RolloutWorker._first_steps(RolloutConfig(num_envs=8), MARKET, 3, 5)  # a rollout worker's books
    assert first.any()  # the books do not all open at step 0
    raw_obs, _ = raw.reset(seed=5, options={"first_steps": first})
    assert obs.dtype == np.float32 and env.single_observation_space.shape == (DIM,)
    np.testing.assert_allclose(obs, (raw_obs - MEAN) / STD, rtol=1e-5, atol=1e-5)
    actions = np.array([1, 2, 3, 4, 0, 1, 2, 0])
    for _ in range(MARKET.horizon + 5):  # past the shortened first episodes: autoreset opens them at step 0
        obs, reward, term, trunc, info = env.step(actions)
        raw_obs, raw_reward, raw_term, raw_trunc, raw_info = raw.step(actions)
        np.testing.assert_allclose(obs, (raw_obs - MEAN) / STD, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(reward, raw_reward * 0.25)
        assert np.array_equal(term | trunc, raw_term | raw_trunc)
        np.testing.assert_array_equal(info["equity_usd"], raw_info["equity_usd"])  # USD figures unscaled


def test_a_later_reset_or_one_with_options_is_not_staggered_again():
    env = br.RllibLobEnv(4, MARKET, MEAN, STD, 1.0, stagger_seed=0)
    raw = LobVectorEnv(4, MARKET)
    env.reset(seed=1)
    obs, _ = env.reset(seed=2)
    np.testing.assert_allclose(obs, (raw.reset(seed=2)[0] - MEAN) / STD, rtol=1e-5, atol=1e-5)
    plain = br.RllibLobEnv(4, MARKET, MEAN, STD, 1.0, stagger_seed=None)
    np.testing.assert_allclose(plain.reset(seed=2)[0], obs, rtol=1e-6)


def test_statistics_of_another_market_are_refused_by_shape():
    with pytest.raises(ValueError, match="probe the same MarketConfig"):
        br.RllibLobEnv(2, MARKET, MEAN[:-2], STD[:-2], 1.0)


def test_the_greedy_agent_acts_on_the_standardised_observation():
    weights = torch.zeros(DIM, 7)
    weights[0, Action.MARKET_BUY] = 1.0  # buy where column 0 sits above its mean, sell below
    weights[0, Action.MARKET_SELL] = -1.0
    policy = br.greedy_policy(lambda x: x @ weights, MEAN, STD)
    obs = np.tile(MEAN, (3, 1))
    obs[:, 0] += np.array([1.0, -1.0, 0.0]) * STD[0]
    got = policy(obs, None, np.random.default_rng(0))
    assert got.tolist() == [Action.MARKET_BUY, Action.MARKET_SELL, Action.HOLD]


def test_the_agent_plays_the_baselines_episodes():
    """An agent that only holds makes exactly what flat makes on the held-out episodes, and the table has every
    baseline the evaluation plays."""
    hold = br.greedy_policy(lambda x: torch.nn.functional.one_hot(torch.zeros(len(x), dtype=torch.long), 7), MEAN, STD)
    table = br.heldout_table(MARKET, hold, 4)
    assert set(table) == {"agent", *POLICIES}
    assert table["agent"] == table["flat"]
    assert table["oracle"]["pnl_usd_mean"] > 0

"""benchmarks/bench_rllib.py's environment side (no RLlib needed): the market RLlib's PPO trains on is the one
foxhunt's learner sees (standardised observation, scaled reward, staggered first episodes), and its greedy agent
plays the held-out episodes the baselines play. In the walk-forward mode, a fold's market and statistics come from
its training days alone, the weights kept are the best on the validation period (a tie: the later), validated on
schedule outside the training budget."""

import dataclasses

import numpy as np
import pytest
import torch

from actors.config import RolloutConfig
from actors.rollout import RolloutWorker
from benchmarks import bench_rllib as br
from foxhunt_ray import driver
from foxhunt_ray.config import ConfigError
from foxhunt_ray.presets import run_preset
from foxhunt_ray.walkforward import FoldMarkets
from lobsim_env import LobVectorEnv
from lobsim_env.baselines import POLICIES
from lobsim_env.market import Action, obs_size
from tests.test_replay import _l2_day

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


# The walk-forward mode (--data): what runs without RLlib.


@pytest.fixture(scope="module")
def two_caches(tmp_path_factory):
    """Two caches of three dates that share the first (fold 2's training day) and differ in the validation and test
    days, and a third that differs in the training day alone."""
    roots = [tmp_path_factory.mktemp(name) for name in ("same_a", "same_b", "other_train")]
    for root, seeds in zip(roots, ((10, 11, 12), (10, 21, 22), (30, 11, 12)), strict=True):
        for seed, date in zip(seeds, ("2024-08-08", "2024-08-09", "2024-08-10"), strict=True):
            _l2_day(root, seed=seed, date=date, n=1500)
    return roots


def test_a_folds_market_and_statistics_come_from_its_training_days_alone(two_caches):
    # fold 2: train on 08-08, validate on 08-09, test on 08-10
    a, b, other = (br.fold_market(str(root), fold=2, sets=["market.horizon=40"]) for root in two_caches)
    fold, market, mean, std, scale, hidden = a
    assert fold == 2 and market.source == "replay" and market.horizon == 40 and hidden == 128
    assert (market.days, market.val_days, market.eval_days) == (
        ("test/L2X/2024-08-08",), ("test/L2X/2024-08-09",), ("test/L2X/2024-08-10",)
    )  # fmt: skip
    # other validation and test days change nothing the agent trains on
    assert dataclasses.replace(b[1], data=market.data) == market  # another cache folder, the same days
    np.testing.assert_array_equal(b[2], mean)
    np.testing.assert_array_equal(b[3], std)
    assert b[4] == scale
    # another training day does (the statistics are the training day's, not a constant)
    assert not np.array_equal(other[2], mean)
    assert FoldMarkets.of(market, fold).validation.days == ("test/L2X/2024-08-09",)


def test_a_bad_fold_or_setting_is_refused_naming_it(two_caches):
    with pytest.raises(driver.UsageError, match=r"--fold=3 must be in 1\.\.2"):
        br.fold_market(str(two_caches[0]), fold=3)
    with pytest.raises(ConfigError, match=r"market\.horizon"):
        br.fold_market(str(two_caches[0]), fold=2, sets=["market.horizon=-1"])


def test_the_validation_pick_keeps_the_best_and_the_later_on_a_tie():
    pick = br.ValidationPick()
    weights = torch.zeros(3)
    kept = []
    for iteration, score in zip((10, 20, 30, 40, 50), (1.0, 3.0, 2.0, 3.0, -1.0), strict=True):
        weights.fill_(iteration)  # the module trains on in place
        kept.append(pick.offer(iteration, score, {"w": weights}))
    assert kept == [True, True, False, True, False]
    assert pick.iteration == 40 and pick.scores == {10: 1.0, 20: 3.0, 30: 2.0, 40: 3.0, 50: -1.0}
    assert pick.state["w"].tolist() == [40.0] * 3  # a copy of the weights at 40, not the module's last


class _Clock:
    """time for br.train_for: a training iteration takes 1 s, a validation 100 s."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Algo:
    def __init__(self, clock: _Clock):
        self.clock, self.steps = clock, 0

    def train(self) -> dict:
        self.clock.now += 1.0
        self.steps += 1024
        return {"env_runners": {"num_env_steps_sampled_lifetime": self.steps, "episode_return_mean": 0.5}}


@pytest.mark.parametrize(("every", "validated"), [(3, [3, 6, 9, 10]), (5, [5, 10]), (0, [10]), (None, [])])
def test_training_validates_every_n_iterations_and_after_the_last_outside_the_budget(monkeypatch, every, validated):
    clock = _Clock()
    monkeypatch.setattr(br, "time", clock)
    seen = []

    def validate(iteration: int) -> float:
        seen.append(iteration)
        clock.now += 100.0  # not counted in the 10 s of training
        return float(iteration)

    rows, wall = br.train_for(_Algo(clock), 10.0, every=every or 0, validate=None if every is None else validate)
    assert seen == validated and wall == 10.0
    assert [r["seconds"] for r in rows] == [float(i) for i in range(1, 11)]
    assert [r["iteration"] for r in rows if "validation_usd" in r] == validated
    assert rows[-1]["env_steps"] == 10 * 1024


def test_the_last_line_names_the_fold_rllibs_mean_the_best_rule_and_the_gaps_interval():
    record = {
        "fold": 12,
        "seeds": [0, 1, 2],
        "best_baseline": "quoting",
        "policies": {"agent": {"pnl_usd_mean": 16.987}, "quoting": {"pnl_usd_mean": 40.731}},
        "versus": {"quoting": {"ci95_usd": [-79.981, 40.78]}},
    }
    assert br.fold_line(record) == (
        "fold=12 seeds=3 rllib_usd=16.99 best_baseline_usd=40.73 ci95_low_usd=-79.98 ci95_high_usd=40.78"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--seeds", "0", "1"], "--seeds pick a fold of a day cache: they go with --data DIR"),
        (["--fold", "3", "--blocks", "2"], "--blocks, --fold pick a fold"),
        (["--data", "x", "--seed", "1", "--seeds", "1"], "--seed 1 and --seeds 1: give one"),
        (["--data", "x", "--seeds", "1", "1"], "distinct"),
    ],
)
def test_the_fold_flags_go_with_data_and_one_seed_flag(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        br.main(argv)
    assert exit_.value.code == 2 and message in capsys.readouterr().err

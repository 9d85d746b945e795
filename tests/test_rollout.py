"""actors.rollout.RolloutWorker in serial mode: shapes, determinism, continuity, the NEXT_STEP valid mask,
behaviour log-probs, its batches driving a real smoke Learner (policy version and lag), and EpisodeStats' diag
keys with and without pnl. Other Gymnasium envs: tests/test_env_id.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from actors import wire
from actors.config import RolloutConfig
from actors.episode_stats import RETURN_WINDOW, EpisodeStats
from actors.rollout import RolloutWorker
from foxhunt_ray.presets import preset
from learner.learner import Learner
from lobsim_env import MarketConfig
from lobsim_env.market import obs_index

MARKET = MarketConfig(horizon=6, events_per_step=4)


def make_worker(
    *, B: int = 4, worker_index: int = 0, seed: int = 11, weights: dict | None = None, stagger: bool = False
) -> RolloutWorker:
    """stagger False (books in lockstep) unless a test is about the staggered first episodes."""
    # torch_threads as the test process has them: the worker's set_num_threads is process-wide
    cfg = RolloutConfig(num_envs=B, torch_threads=torch.get_num_threads(), stagger_episodes=stagger)
    return RolloutWorker(cfg, MARKET, worker_index=worker_index, seed=seed, weights=weights)


@pytest.fixture(scope="module")
def learner() -> Learner:
    w = make_worker()
    return Learner(preset("smoke"), obs_dim=w.obs_dim, n_actions=w.n_actions, seed=3)


def sample(worker: RolloutWorker, n: int) -> dict:
    return wire.decode(worker.sample(n))


def test_shapes_dtypes_and_meta(learner):
    w = make_worker(B=4, worker_index=2, weights=learner.policy_weights())
    obs_space, act_space = w.get_spaces()
    assert obs_space.shape == (w.obs_dim,) and act_space.n == w.n_actions
    d = sample(w, 9)
    T, B, D = 9, 4, w.obs_dim
    assert d["obs"].shape == (T + 1, B, D) and d["obs"].dtype == np.float32
    for key in ("actions", "rewards", "terminated", "truncated", "valid", "behaviour_logp"):
        assert d[key].shape == (T, B), key
    assert d["actions"].dtype == np.int64 and d["valid"].dtype == bool
    assert d["policy_version"] == learner.step and d["worker_index"] == 2 and d["fold"] == 0
    assert d["env_steps"] == T * B and w.total_env_steps == T * B
    assert d["env_ids"].tolist() == [11 + 2 * 4 + i for i in range(4)]  # seed + worker_index * B + i


def test_deterministic_given_seed_and_weights(learner):
    weights = learner.policy_weights()
    a, b = make_worker(weights=weights), make_worker(weights=weights)
    assert bytes(a.sample(8)) == bytes(b.sample(8))  # byte-identical payloads
    other = sample(make_worker(worker_index=1, weights=weights), 8)
    assert not np.array_equal(other["obs"], sample(make_worker(weights=weights), 8)["obs"])


def test_consecutive_samples_continue_the_trajectories(learner):
    weights = learner.policy_weights()
    whole = sample(make_worker(weights=weights), 16)
    w = make_worker(weights=weights)
    first, second = sample(w, 10), sample(w, 6)
    np.testing.assert_array_equal(first["obs"][-1], second["obs"][0])
    np.testing.assert_array_equal(np.concatenate([first["obs"][:-1], second["obs"]]), whole["obs"])
    for key in ("actions", "rewards", "terminated", "truncated", "valid", "behaviour_logp"):
        np.testing.assert_array_equal(np.concatenate([first[key], second[key]]), whole[key], err_msg=key)
    np.testing.assert_array_equal(second["pnl_usd"], whole["pnl_usd"])


def test_next_step_valid_mask_and_episode_pnl(learner):
    w = make_worker(weights=learner.policy_weights())
    d = sample(w, 20)  # horizon 6: ends at t = 5, 12, 19
    ended = d["terminated"] | d["truncated"]
    assert ended[[5, 12, 19]].all() and ended.sum() == 3 * 4
    # the step after an episode end is the autoreset step: not a transition, reward 0, nothing ends there
    expect_valid = np.ones_like(d["valid"])
    expect_valid[1:] = ~ended[:-1]
    np.testing.assert_array_equal(d["valid"], expect_valid)
    assert (d["rewards"][~d["valid"]] == 0).all() and not ended[~d["valid"]].any()
    # each ended episode's final pnl is the sum of its rewards (reward = change in equity net of fees)
    assert d["episode_env"].tolist() == [0, 1, 2, 3] * 3
    rewards = d["rewards"].astype(np.float64)
    bounds = [(0, 6), (7, 13), (14, 20)]
    expect = [rewards[lo:hi, b].sum() for lo, hi in bounds for b in range(4)]
    np.testing.assert_allclose(d["episode_pnl_usd"], expect, atol=1e-2)
    # pnl_usd is the equity of the episode as of obs[T]: here the episodes that just ended (reset comes next)...
    np.testing.assert_array_equal(d["pnl_usd"], d["episode_pnl_usd"][-4:])
    nxt = sample(w, 2)  # the episodes ended on the batch's last step: the next batch opens with the autoreset
    assert not nxt["valid"][0].any() and nxt["valid"][1].all() and (nxt["rewards"][0] == 0).all()
    d2 = sample(make_worker(weights=learner.policy_weights()), 3)
    np.testing.assert_allclose(
        d2["pnl_usd"], d2["rewards"].astype(np.float64).sum(0), atol=1e-2
    )  # ...or the running one


def test_staggered_books_are_out_of_phase_and_their_shortened_first_episodes_are_not_counted(learner):
    """stagger_episodes: each book opens its first episode at a step drawn from [0, horizon) by the worker's own
    seeded stream; after that shortened episode its episodes are whole ones, out of phase with the other books',
    and only those are reported (episode_env, episode_pnl_usd)."""
    B, H = 24, MARKET.horizon
    weights = learner.policy_weights()
    w = make_worker(B=B, stagger=True, weights=weights)
    d = sample(w, 30)
    first = np.rint((1 - d["obs"][0][:, obs_index(MARKET)["time_left"]]) * H).astype(int)
    assert first.min() >= 0 and first.max() < H and len(set(first.tolist())) > 3  # books out of phase
    again = sample(make_worker(B=B, stagger=True, weights=weights), 30)
    np.testing.assert_array_equal(again["obs"], d["obs"])  # a pure function of (seed, worker_index, weights)
    other = sample(make_worker(B=B, worker_index=1, stagger=True, weights=weights), 30)["obs"][0]
    assert not np.array_equal(other[:, obs_index(MARKET)["time_left"]], d["obs"][0][:, obs_index(MARKET)["time_left"]])
    ended = d["terminated"] | d["truncated"]
    reported = []
    for b in range(B):  # H - first steps, the autoreset step, then whole episodes of H steps
        e1 = H - first[b] - 1
        ends = list(range(e1, 30, H + 1))
        assert np.flatnonzero(ended[:, b]).tolist() == ends, b
        reported += [(e, b) for e in (ends if first[b] == 0 else ends[1:])]  # a short first one is not reported
    reported.sort()
    assert d["episode_env"].tolist() == [b for _, b in reported]
    rewards = d["rewards"].astype(np.float64)
    expect = [rewards[e - H + 1 : e + 1, b].sum() for e, b in reported]
    np.testing.assert_allclose(d["episode_pnl_usd"], expect, atol=1e-2)
    # the worker's books in lockstep when it is off: every book opens at step 0
    flat = sample(make_worker(B=B, weights=weights), 1)["obs"][0][:, obs_index(MARKET)["time_left"]]
    assert (flat == 1).all()


def test_behaviour_logp_is_the_policys_log_prob(learner):
    w = make_worker(weights=learner.policy_weights())
    d = sample(w, 5)
    with torch.no_grad():
        logp_all = torch.log_softmax(w.policy(torch.from_numpy(d["obs"][:-1])), -1)
    expect = logp_all.gather(-1, torch.from_numpy(d["actions"])[..., None]).squeeze(-1).numpy()
    np.testing.assert_allclose(d["behaviour_logp"], expect, rtol=1e-5, atol=1e-6)


def test_split_feeds_learner_updates_and_tracks_policy_lag():
    w = make_worker(B=8)
    lrn = Learner(preset("smoke"), obs_dim=w.obs_dim, n_actions=w.n_actions, seed=0)
    stats = EpisodeStats()
    lags = []
    for i in range(6):
        if i % 3 == 0:  # broadcast every 3 updates: the actor acts with a lagged copy in between
            w.set_weights(lrn.policy_weights())
        batch, meta = wire.split(wire.decode(w.sample(8)))
        assert tuple(batch) == wire.LEARNER_KEYS
        stats.add(meta)
        out = lrn.update(batch)
        assert out["nan_abort_step"] == 0 and np.isfinite(list(out.values())).all()
        lags.append(out["policy_lag"])
    assert lags == [0, 1, 2, 0, 1, 2]
    assert out["q_trained"] == 1.0  # replay filled past replay_min_size, so the Q losses ran too
    assert stats.env_steps == 6 * 8 * 8 and stats.episodes == 7 * 8  # ends at t = 5, 12, ..., 47 of 48 steps
    with pytest.raises(ValueError, match="unexpected"):
        lrn.update({**batch, "fold": 0})  # why split exists: the learner refuses metadata keys


def test_set_weights_and_sample_errors(learner):
    w = make_worker()
    with pytest.raises(RuntimeError, match=r"before set_weights\(\)"):
        w.sample(2)
    with pytest.raises(ValueError, match=r"weights\['version'\]=None"):
        w.set_weights({})
    wrong = Learner(preset("smoke"), obs_dim=w.obs_dim + 1, n_actions=w.n_actions).policy_weights()
    with pytest.raises(ValueError, match=rf"obs_dim={w.obs_dim + 1}.*this env has obs_dim={w.obs_dim}"):
        w.set_weights(wrong)
    w.set_weights(learner.policy_weights())
    with pytest.raises(ValueError, match="n_steps=0 must be an int >= 1"):
        w.sample(0)
    w.stop()
    w.stop()
    with pytest.raises(RuntimeError, match=r"after stop\(\)"):
        w.sample(2)


def test_config_errors():
    assert RolloutConfig().errors() == []
    assert RolloutConfig(num_envs=0, torch_threads=True).errors() == [
        "rollout.num_envs=0 must be an int >= 1",
        "rollout.torch_threads=True must be an int >= 1",
    ]
    with pytest.raises(ValueError, match=r"worker_index=-1 must be an int >= 0"):
        RolloutWorker(RolloutConfig(), MARKET, worker_index=-1, seed=0)
    assert RolloutConfig(policy_device="gpu").errors() == [
        "rollout.policy_device='gpu' must be one of ['auto', 'cpu', 'cuda']"
    ]
    assert RolloutConfig(stagger_episodes="yes").errors() == ["rollout.stagger_episodes='yes' must be a bool"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_policy_device_cuda_without_a_gpu_is_refused_and_auto_acts_on_the_cpu(learner):
    with pytest.raises(ValueError, match=r"policy_device='cuda' but this process sees no GPU"):
        RolloutWorker(RolloutConfig(policy_device="cuda"), MARKET, worker_index=0, seed=0)
    w = RolloutWorker(RolloutConfig(num_envs=2), MARKET, worker_index=0, seed=0, weights=learner.policy_weights())
    assert w.device.type == "cpu" and w.policy.pi.weight.device.type == "cpu"
    w.sample(3)
    t = w.timings()
    assert t["samples"] == 1 and t["env_s"] > 0 and t["act_s"] > 0 and t["encode_s"] > 0


def episode_meta(returns: list[float], env_steps: int = 8) -> dict:
    return {"env_steps": env_steps, "episode_pnl_usd": np.array(returns, np.float64)}


def test_episode_stats_diag_with_and_without_pnl():
    market = EpisodeStats()  # the market: its episode return is its pnl
    assert market.diag() == {"env_steps": 0, "episodes": 0, "return_cum": 0.0, "pnl_cum_usd": 0.0}
    market.add(episode_meta([10.0, -4.0]))
    market.add(episode_meta([]))
    assert market.diag() == {
        "env_steps": 16,
        "episodes": 2,
        "return_cum": 6.0,
        "episode_return_mean": 3.0,
        "pnl_cum_usd": 6.0,
    }
    assert market.last_episode_pnl_usd == 3.0
    other = EpisodeStats(has_pnl=False)  # e.g. CartPole: returns only, no pnl key at all
    for i in range(RETURN_WINDOW + 20):
        other.add(episode_meta([float(i)]))
    d = other.diag()
    assert "pnl_cum_usd" not in d and d["episodes"] == RETURN_WINDOW + 20
    assert d["return_cum"] == sum(range(RETURN_WINDOW + 20))
    assert d["episode_return_mean"] == np.mean(range(20, RETURN_WINDOW + 20))  # the last RETURN_WINDOW only
    assert EpisodeStats(**dataclasses.asdict(other)) == other  # what a checkpoint keeps


def test_market_worker_reports_pnl():
    w = make_worker()
    assert w.has_pnl and w.env_id == "foxhunt/LOB-v0"

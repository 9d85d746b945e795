"""benchmarks/detection_limit.py: the oracle told the regime late, OFI, and the filter's detection delays."""

import dataclasses

import numpy as np
import pytest

from benchmarks import detection_limit as dl
from foxhunt_ray.presets import run_preset
from lobsim_env.baselines import oracle, run_episodes
from lobsim_env.seeds import heldout_seed

CFG = run_preset("phase4_3").market


def test_told_at_once_it_is_the_oracle_and_never_told_it_stays_flat():
    seed = heldout_seed(0)
    short = dataclasses.replace(CFG, horizon=300)
    now = run_episodes(short, dl.DelayedOracle(0), 16, seed).pnl_usd
    assert np.array_equal(now, run_episodes(short, oracle, 16, seed).pnl_usd)
    never = run_episodes(short, dl.DelayedOracle(short.horizon), 16, seed)
    assert np.all(never.pnl_usd == 0) and np.all(never.metrics()["fills_mean"] == 0)
    late = run_episodes(short, dl.DelayedOracle(50), 16, seed).pnl_usd
    assert not np.array_equal(late, now)


@pytest.mark.parametrize(
    ("before", "after", "ofi"),
    [
        ((100, 101, 5, 4), (100, 101, 7, 4), 2),  # a bid of 2 joined the best bid
        ((100, 101, 5, 4), (100, 101, 5, 1), 3),  # 3 left the best ask (a buy or cancels)
        ((100, 101, 5, 4), (101, 102, 3, 6), 3 + 4),  # both moved up: the new bid counts, the old ask is gone
        ((100, 101, 5, 4), (99, 101, 6, 4), -5),  # the best bid was taken out: its 5 are lost
    ],
)
def test_order_flow_imbalance(before, after, ofi):
    as_arrays = [tuple(np.array([v]) for v in snap) for snap in (before, after)]
    assert dl.order_flow_imbalance(*as_arrays)[0] == ofi


def test_a_filter_that_reads_the_regime_sees_each_change_at_once():
    rng = np.random.default_rng(0)
    z = np.repeat(rng.integers(-1, 2, size=(20, 4)), 50, axis=0)  # [1000, 4], changes every 50 steps at most
    loglik = np.where(np.arange(3)[None, None, :] == (z + 1)[:, :, None], 0.0, -50.0)
    r = dl.detection(z, loglik, 0.005)
    assert r["accuracy"] == 1.0 and r["delay_median"] == 0 and r["undetected"] == 0
    assert r["changes"] == int((np.diff(z, axis=0) != 0).sum())
    assert r["as_position"]["never"] == 0 and r["as_position"]["lag_median"] == 0  # held from the change on
    blind = dl.detection(z, np.zeros_like(loglik), 0.005)  # no information: it never leaves its first guess
    assert blind["accuracy"] < 0.6


def test_position_lag_counts_a_held_position_not_a_flicker():
    z = np.zeros((100, 3), np.int64)
    z[40:, :] = 1  # one change into +1 at step 40 in every episode
    pos = np.zeros((100, 3), np.int64)
    pos[45:, 0] = 2  # follows 5 steps late and holds
    pos[41, 1], pos[60:, 1] = 1, 1  # a one-step flicker at 41, then holds from 60: 20 steps late
    pos[:, 2] = -1  # never
    r = dl.position_lag(z, pos)
    assert r["changes"] == 3 and r["never"] == pytest.approx(1 / 3)
    assert r["lag_median"] == 12.5 and r["lag_mean"] == 12.5  # (5 + 20) / 2
    assert r["aligned"] == pytest.approx((55 + 41) / 180)  # right-signed steps of the 3 x 60 with z != 0
    # the three changes start regimes of 60 steps (to the episode's end): the one never followed is among them
    assert r["never_by_regime_length"]["50-100"] == {"changes": 3, "never": pytest.approx(1 / 3)}
    assert r["never_by_regime_length"]["0-20"]["changes"] == 0
    assert r["flat"] == pytest.approx((45 + 59) / 300)  # episode 0 flat to step 45; episode 1 to 60 but for step 41
    assert r["never_wrong"] == 1.0 and r["never_flat"] == 0.0  # the one never followed sits short throughout


def test_the_passive_oracle_joins_near_its_target_and_never_takes_when_never_urgent():
    seed, short = heldout_seed(0), dataclasses.replace(CFG, horizon=300)
    never = run_episodes(short, dl.PassiveDelayedOracle(0, 1_000), 16, seed).metrics()
    assert never["taker_contracts_mean"] == 0 and never["passive_filled_mean"] > 0
    mixed = run_episodes(short, dl.PassiveDelayedOracle(0, 1), 16, seed).metrics()
    assert 0 < mixed["taker_contracts_mean"] < run_episodes(short, oracle, 16, seed).metrics()["taker_contracts_mean"]


def test_regime_spans_start_at_each_change_and_end_at_the_next():
    assert dl.regime_spans(np.array([0, 0, 1, 1, 1, -1, 0])) == [(2, 5), (5, 6), (6, 7)]
    assert dl.regime_spans(np.zeros(9, np.int64)) == []  # no change: nothing to detect


def test_depth_flow_counts_what_changed_on_the_same_ticks_and_leans_with_the_regime():
    """A bid added and an ask taken near the mid count +2; a recentred price window (the same book on shifted
    indices) counts 0; over real steps the depth flow's sign follows the hidden regime."""
    from lobsim_env.env import LobVectorEnv
    from lobsim_env.market import Action
    from lobsim_env.synthetic import book as bk

    env = LobVectorEnv(4, CFG)
    env.reset(seed=5)
    b = env._state.book
    hold = np.full(4, Action.HOLD, np.int64)
    mid = (b.best[:, bk.BID] + b.best[:, bk.ASK]) // 2
    rows = np.arange(4)

    def add_bid_take_ask(_):
        b.depth[rows, bk.BID, mid - 1] += 1
        b.depth[rows, bk.ASK, mid + 2] -= 1

    def recentre(_):
        b.depth[:] = np.roll(b.depth, -2, axis=2)
        b.depth[:, :, -2:] = 0
        b.base += 2
        b.best -= 2

    for fake, want in ((add_bid_take_ask, 2), (recentre, 0)):
        env.step = fake
        w, _ = dl.step_with_depth_flow(env, hold)
        assert (w == want).all(), (fake.__name__, w)
    env.close()
    _, _, w, z = dl.flows(dataclasses.replace(CFG, horizon=300), 64, seed=11)
    assert w.shape == z.shape == (300, 64) and np.abs(w).max() <= dl.MAX_DEPTH_FLOW
    assert np.corrcoef(w.ravel(), z.ravel())[0, 1] > 0.1  # 0.17 over 256 books x 1,000 steps

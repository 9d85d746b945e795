"""The agent against a replayed LOBSTER day, and walk-forward folds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from lobsim_env import Action, LobEnv, LobVectorEnv, MarketConfig, obs_index
from lobsim_env.folds import DaySpec, lobster_days, synthetic_days, walk_forward
from lobsim_env.lobster import samples
from lobsim_env.lobster.files import LobsterDay, load_day
from lobsim_env.lobster.market import LobsterMarket, lobster_config
from tests.test_lobster_reconstruct import random_day

DATA = samples.data_dir()
FILES = {
    "AMZN_1": samples.sample_zip("AMZN", 1),
    "AMZN_5": samples.sample_zip("AMZN", 5),
    "GOOG_1": samples.sample_zip("GOOG", 1),
}
needs_data = pytest.mark.skipif(not DATA.exists(), reason="LOBSTER sample data not present")


@pytest.fixture(scope="module")
def days():
    return {k: load_day(p) for k, p in FILES.items()} if DATA.exists() else {}


def market(day: LobsterDay, **kw) -> LobsterMarket:
    return LobsterMarket(lobster_config(str(day.source), **kw), day)


@needs_data
@pytest.mark.parametrize("name", list(FILES))
def test_visible_book_is_the_files_row(days, name):
    day = days[name]
    m = market(day, horizon=50, events_per_step=7, obs_levels=5)
    s = m.new_state(3)
    m.reset_rows(s, np.arange(3), np.array([1, 2, 3], np.uint64) * np.uint64(123457))
    hold = np.zeros(3, np.int64)
    for _ in range(20):
        m.step(s, hold)
        obs = m.observe(s)
        for r in range(3):
            k = int(s.start[r] + s.t[r] * 7) - 1
            row = day.book[k]
            n = min(5, day.levels)
            assert np.allclose(obs[r, 5 : 5 + n], row[3::4][:n] / 1000.0)  # bid sizes
            assert np.allclose(obs[r, 15 : 15 + n], row[1::4][:n] / 1000.0)  # ask sizes
            assert np.isclose(obs[r, 20], (row[0] - row[2]) / 100)  # spread in cents
            assert np.isclose(obs[r, 10] - obs[r, 0], (row[0] - row[2]) / 100)  # best ask - best bid offsets


def test_an_env_is_built_on_a_market_object_such_as_a_day_in_memory():
    day = random_day(3, levels=2, n=400)
    cfg = lobster_config(str(day.source), horizon=10, events_per_step=5)
    m = LobsterMarket(cfg, day)
    venv = LobVectorEnv(3, market=m)
    assert venv.market is m and venv.config is cfg
    single = LobEnv(market=LobsterMarket(cfg, day))
    a, _ = venv.reset(seed=4)
    b, _ = single.reset(seed=5)
    assert np.array_equal(a[1], b)
    acts = np.random.default_rng(0).integers(0, len(Action), (10, 3))
    for t in range(10):
        oa, ra, _, _, _ = venv.step(acts[t])
        ob, rb, _, _, _ = single.step(int(acts[t, 1]))
        assert np.array_equal(oa[1], ob) and ra[1] == rb, t


@needs_data
def test_check_env_and_vector_env_on_a_lobster_day():
    cfg = lobster_config(str(FILES["GOOG_1"]), horizon=30)
    check_env(LobEnv(cfg), skip_render_check=True)
    venv = LobVectorEnv(2, cfg)
    a, _ = venv.reset(seed=4)
    single = LobEnv(cfg)
    b, _ = single.reset(seed=5)
    assert np.array_equal(a[1], b)
    with pytest.raises(ValueError, match="no latent regime"):
        venv.latent_regime()


@needs_data
def test_market_buy_walks_displayed_levels_without_impact(days):
    day = days["AMZN_5"]
    m = market(day, latency_events=0, events_per_step=5, order_size=400, position_limit=1000, horizon=10)
    s = m.new_state(1)
    m.reset_rows(s, np.arange(1), np.array([987654321], np.uint64))
    row = day.book[int(s.start[0]) - 1]
    expect_cash, left = 0, 400
    for lvl in range(5):
        c = min(left, int(row[4 * lvl + 1]))
        expect_cash -= c * int(row[4 * lvl])
        left -= c
    res = m.step(s, np.array([Action.MARKET_BUY]))
    assert s.position[0] == 400 - left and s.cash_units[0] == expect_cash
    assert res.fees_usd[0] == pytest.approx((400 - left) * 0.003)
    # No persistent impact: the next visible book is the file's next row, untouched by the agent.
    obs = m.observe(s)
    k = int(s.start[0] + 5) - 1
    assert np.isclose(obs[0, 15], day.book[k, 1] / 1000.0)


def handmade_day() -> LobsterDay:
    """A level-1 day with a constant visible book (ask 101.00 x 200, bid 100.00 x 300) and chosen messages."""
    msgs = [  # type, id, size, price, direction
        (1, 50, 10, 990000, 1),  # 0 filler below the best
        (1, 7, 50, 1000000, 1),  # 1 arrives after the agent joined (agent joins before message 1)
        (3, 7, 50, 1000000, 1),  # 2 deleting a later order: queue_ahead unchanged (300)
        (2, 99, 100, 1000000, 1),  # 3 cancel of an order never seen added (rested before): ahead 200
        (5, 0, 500, 1000000, 1),  # 4 hidden execution: nothing
        (4, 99, 150, 1000000, 1),  # 5 visible execution: ahead 50
        (4, 98, 80, 1000000, 1),  # 6 50 from ahead, 30 fill the agent
        (4, 97, 100, 990000, 1),  # 7 execution below the agent's bid: trades through, fills the other 70
    ] + [(1, 200 + i, 10, 1020000, -1) for i in range(8)]
    m = len(msgs)
    a = np.array(msgs, np.int64)
    book = np.tile(np.array([1010000, 200, 1000000, 300], np.int64), (m, 1))
    return LobsterDay(
        ticker="TEST",
        date="2012-06-21",
        levels=1,
        time_ns=np.arange(m, dtype=np.int64) + 34_200_000_000_000,
        event_type=a[:, 0].astype(np.int8),
        order_id=a[:, 1],
        size=a[:, 2],
        price=a[:, 3],
        direction=a[:, 4].astype(np.int8),
        book=book,
        source=Path("handmade"),
    )


def test_passive_queue_semantics_on_handmade_day():
    day = handmade_day()
    cfg = MarketConfig(
        source="lobster",
        lobster_path="handmade",
        tick_size=0.01,
        usd_per_tick=0.01,
        maker_fee_usd=-0.002,
        order_size=100,
        position_limit=500,
        events_per_step=1,
        latency_events=0,
        horizon=9,
    )
    m = LobsterMarket(cfg, day)
    s = m.new_state(1)
    m.reset_rows(s, np.arange(1), np.zeros(1, np.uint64))
    s.start[0] = 1  # the agent acts before message 1, against row 0
    expected_ahead = [300, 300, 200, 200, 50, 0, 0]
    expected_pos = [0, 0, 0, 0, 0, 30, 100]
    m.step(s, np.array([Action.JOIN_BID]))
    assert s.own_price[0, 0] == 1000000 and s.own_join[0, 0] == 1
    for i in range(1, 7):
        res = m.step(s, np.array([Action.HOLD]))
        assert s.own_ahead[0, 0] == expected_ahead[i], i
        assert s.position[0] == expected_pos[i], i
    assert s.own_size[0, 0] == 0 and s.cash_units[0] == -100 * 1000000
    assert res.fills[0] == 70 and res.fees_usd[0] == pytest.approx(70 * -0.002)


def test_crossing_quote_fills_the_agent():
    day = handmade_day()
    book = day.book.copy()
    book[3:, 0] = 1000000  # the ask comes down to the agent's bid from message 3 on
    day = LobsterDay(**{**day.__dict__, "book": book})
    cfg = MarketConfig(
        source="lobster",
        lobster_path="handmade",
        order_size=100,
        position_limit=500,
        events_per_step=1,
        latency_events=0,
        horizon=9,
    )
    m = LobsterMarket(cfg, day)
    s = m.new_state(1)
    m.reset_rows(s, np.arange(1), np.zeros(1, np.uint64))
    s.start[0] = 1
    m.step(s, np.array([Action.JOIN_BID]))
    m.step(s, np.array([Action.HOLD]))
    assert s.position[0] == 0
    m.step(s, np.array([Action.HOLD]))
    assert s.position[0] == 100


def test_horizon_longer_than_day_is_a_clear_error():
    day = handmade_day()
    cfg = MarketConfig(source="lobster", lobster_path="handmade", horizon=100)
    with pytest.raises(ValueError, match="horizon"):
        LobsterMarket(cfg, day)


# ---- walk-forward folds -----------------------------------------------------------------------------


def test_walk_forward_trains_only_on_earlier_days():
    days = synthetic_days(5, first_seed=10)
    folds = walk_forward(days)
    assert [f.index for f in folds] == [1, 2, 3, 4]
    for f in folds:
        assert f.evaluate == days[f.index] and list(f.train) == days[: f.index]
        assert all(d.date < f.evaluate.date for d in f.train)
    assert len(walk_forward(days, min_train=3)) == 2
    with pytest.raises(ValueError, match="no fold"):
        walk_forward(days[:1])
    with pytest.raises(ValueError, match="increasing date order"):
        walk_forward([days[1], days[0], days[2]])


def test_lobster_days_sort_by_date_and_point_configs():
    paths = ["/x/GOOG_2012-06-22_34200000_57600000_message_1.csv", "/x/AMZN_2012-06-21_1.zip"]
    days = lobster_days(paths)
    assert [d.date for d in days] == ["2012-06-21", "2012-06-22"]
    cfg = days[0].config(MarketConfig())
    assert cfg.source == "lobster" and cfg.lobster_path == paths[1]
    syn = synthetic_days(1)[0].config(cfg)
    assert syn.source == "synthetic" and syn.lobster_path is None
    with pytest.raises(ValueError, match="no YYYY-MM-DD"):
        lobster_days(["/x/undated.zip"])
    assert isinstance(days[0], DaySpec)


@needs_data
def test_depth_flow_on_a_day_is_the_visible_near_mid_depth_change(days):
    """market.depth_flow_ticks=K on a replayed day: the two EMAs of the visible bid size minus ask size gained over
    a step at the prices within K ticks of the step's starting mid, read from the file's book rows; the other
    columns are those of K=0."""
    day, K, B, E = days["AMZN_5"], 3, 3, 20
    plain = market(day, horizon=60, events_per_step=E)
    with_df = market(day, horizon=60, events_per_step=E, depth_flow_ticks=K)
    s, r0 = with_df.new_state(B), plain.new_state(B)
    keys = np.array([5, 6, 7], np.uint64) * np.uint64(7919)
    with_df.reset_rows(s, np.arange(B), keys)
    plain.reset_rows(r0, np.arange(B), keys)
    ix = obs_index(with_df.cfg)
    rng, fast, slow, moved = np.random.default_rng(1), np.zeros(B), np.zeros(B), 0

    def near(row: np.ndarray, mid2: int) -> int:
        q = 0
        for ap, asz, bp, bsz in row.reshape(-1, 4).tolist():  # a level: ask price, ask size, bid price, bid size
            q += bsz * (abs(2 * bp - mid2) <= 2 * K * 100) - asz * (abs(2 * ap - mid2) <= 2 * K * 100)
        return q

    for _ in range(40):
        k0, mid2 = s.start + s.t * E, s.last_mid2.copy()
        acts = rng.integers(0, 7, B)
        with_df.step(s, acts)
        plain.step(r0, acts)
        obs, robs = with_df.observe(s), plain.observe(r0)
        np.testing.assert_array_equal(obs[:, : robs.shape[1]], robs)
        w = np.array([near(day.book[k0[r] + E - 1], mid2[r]) - near(day.book[k0[r] - 1], mid2[r]) for r in range(B)])
        moved += int((w != 0).sum())
        fast, slow = 0.9 * fast + 0.1 * w, 0.98 * slow + 0.02 * w
        np.testing.assert_allclose(obs[:, ix["depth_flow"]], fast / 1000.0, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(obs[:, ix["depth_flow_slow"]], slow / 1000.0, rtol=1e-5, atol=1e-7)
    assert moved > 10

"""benchmarks/crosscheck_hftbacktest.py without hftbacktest: the recorded orders and fills of a window give back the
replay market's own figures, the orders become the hftbacktest calls they should, the cache becomes hftbacktest rows
in its own order; and, where hftbacktest imports (its own virtualenv: the script's docstring), a tiny window replayed
in it on the cache's own events fills as ours does."""

import numpy as np
import pytest

from benchmarks import crosscheck_hftbacktest as xc
from lobsim_env.data import layout
from lobsim_env.data.layout import EVENT_DTYPE, LEVEL, TRADE
from lobsim_env.replay import ReplayMarket, compiled, replay_config
from tests.test_replay import _l2_day


@pytest.fixture(scope="module")
def day_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("xc")
    _l2_day(root, seed=7, n=3000)
    cfg = replay_config(root, [], horizon=40, events_per_step=10)
    day = layout.open_day(layout.day_dir(root, layout.select_days(root, [])[0]))
    return cfg, day


def test_a_windows_recorded_fills_give_back_the_markets_own_position_fees_and_pnl(day_cache):
    cfg, day = day_cache
    keys = xc.window_keys(cfg, day, 6)
    windows = xc.play(cfg, keys, xc.quoting_policy(cfg))
    hows = {f.how for w in windows for f in w.fills}
    assert {"trade", "taker"} <= hows  # passive fills behind the queue, and the flattening market orders
    for w in windows:
        totals = xc.account(w.fills, w.mid2, cfg)
        assert totals.position == w.position
        assert totals.fees_usd == pytest.approx(w.fees_usd, abs=1e-12)
        assert totals.pnl_usd == pytest.approx(w.equity_usd, abs=1e-9)
        posted = {o.order_id: o for o in w.orders if o.kind in (xc.POST, xc.MARKET)}
        for f in w.fills:  # each fill belongs to an order of its side, posted before it, never past its size
            assert posted[f.order_id].side == f.side and posted[f.order_id].event <= f.event
        for oid, o in posted.items():
            assert sum(f.lots for f in w.fills if f.order_id == oid) <= o.lots
    if compiled():  # the instrumented Python step is the C step: the same windows, the same PnL
        market = ReplayMarket(cfg, use_c=True)
        state = market.new_state(len(keys))
        market.reset_rows(state, np.arange(len(keys)), keys)
        policy = xc.quoting_policy(cfg)
        for _ in range(cfg.horizon):
            market.step(state, policy(market.observe(state)))
        np.testing.assert_allclose(state.equity_usd, [w.equity_usd for w in windows], atol=1e-9)


def test_windows_spread_over_the_day_after_its_opening_book(day_cache):
    cfg, day = day_cache
    keys = xc.window_keys(cfg, day, 5)
    market = ReplayMarket(cfg, use_c=False)
    state = market.new_state(5)
    market.reset_rows(state, np.arange(5), keys)
    first = int(np.searchsorted(day.events["ts"], day.events["ts"][0], side="right"))
    assert state.start[0] == first and np.all(np.diff(state.start) > cfg.horizon * cfg.events_per_step)
    assert state.start[-1] + cfg.horizon * cfg.events_per_step < day.manifest.n_events
    with pytest.raises(ValueError, match="windows=100000"):
        xc.window_keys(cfg, day, 100_000)


def test_our_orders_become_hftbacktests_calls():
    w = xc.Window(start=5, end=100)
    w.orders = [
        xc.Order(event=6, kind=xc.POST, side=xc.BID, price=1000, lots=2, order_id=1),
        xc.Order(event=6, kind=xc.POST, side=xc.ASK, price=1001, lots=2, order_id=2),
        xc.Order(event=30, kind=xc.POST, side=xc.BID, price=999, lots=2, order_id=3),  # ours replaced the bid
        xc.Order(event=40, kind=xc.POST, side=xc.ASK, price=1001, lots=2, order_id=4),  # ours had filled: a new ask
        xc.Order(event=50, kind=xc.CANCEL, side=xc.BID),
        xc.Order(event=50, kind=xc.CANCEL, side=xc.ASK),
        xc.Order(event=50, kind=xc.CANCEL, side=xc.ASK),  # nothing rests there any more: no call
        xc.Order(event=50, kind=xc.MARKET, side=xc.ASK, lots=3, order_id=5),
    ]
    clock = np.arange(100, dtype=np.int64) * 10
    clock[39] = 100  # a time going back: the call keeps the one before it
    calls = xc.hbt_calls(w, clock, 0.5, 0.001)
    got = [(c.ts, c.op, c.order_id, c.side, c.price, c.qty) for c in calls]
    post = (2 - xc.POST_SHORTFALL) * 0.001  # a hair short of whole lots (hftbacktest#312)
    assert got == [
        (50, "limit", 1, xc.BID, 500.0, post),
        (50, "limit", 2, xc.ASK, 500.5, post),
        (290, "cancel", 1, xc.BID, 0.0, 0.0),
        (290, "limit", 3, xc.BID, 499.5, post),
        (290, "cancel", 2, xc.ASK, 0.0, 0.0),
        (290, "limit", 4, xc.ASK, 500.5, post),
        (490, "cancel", 3, xc.BID, 0.0, 0.0),
        (490, "cancel", 4, xc.ASK, 0.0, 0.0),
        (490, "market", 5, xc.ASK, 0.0, 0.003),
    ]


def test_fills_count_once_per_order_and_millisecond_and_pay_their_own_fee(day_cache):
    cfg, _ = day_cache
    fills = [
        xc.Fill(order_id=1, side=xc.BID, lots=1, notional=1000, how="trade", ms=7),
        xc.Fill(order_id=1, side=xc.BID, lots=1, notional=1000, how="trade", ms=7),
        xc.Fill(order_id=1, side=xc.BID, lots=2, notional=2000, how="cross", ms=8),
        xc.Fill(order_id=2, side=xc.ASK, lots=4, notional=4004, how="taker", ms=9),
    ]
    t = xc.account(fills, mid2=2002, cfg=cfg)
    usd = cfg.usd_per_tick
    fees = 4000 * usd * cfg.maker_fee_bps * 1e-4 + 4004 * usd * cfg.taker_fee_bps * 1e-4
    assert (t.passive_fills, t.passive_lots, t.taker_lots, t.position) == (2, 4, 4, 0)
    assert t.fees_usd == pytest.approx(fees) and t.pnl_usd == pytest.approx(4 * usd - fees)


def test_the_cache_becomes_hftbacktest_rows_in_its_own_order():
    ev = np.zeros(5, EVENT_DTYPE)
    ev["ts"] = [1_000_000, 1_000_000, 1_000_000, 2_000_000, 2_000_000]
    ev["kind"] = [LEVEL, LEVEL, TRADE, TRADE, LEVEL]
    ev["side"] = [1, -1, 1, -1, 1]
    ev["price"] = [99, 101, 99, 101, 98]
    ev["size"] = [5, 6, 2, 3, 0]
    rows, clock = xc.cache_feed(ev, 0.5, 0.01)
    assert clock.tolist() == [1_000_000, 1_000_001, 1_000_002, 2_000_000, 2_000_001]
    assert rows["exch_ts"].tolist() == clock.tolist() and rows["local_ts"].tolist() == clock.tolist()
    both = xc.EXCH_EVENT | xc.LOCAL_EVENT
    assert rows["ev"].tolist() == [
        xc.DEPTH_EVENT | xc.BUY_EVENT | both,
        xc.DEPTH_EVENT | xc.SELL_EVENT | both,
        xc.TRADE_EVENT | xc.SELL_EVENT | both,  # it hit the bids: a sell
        xc.TRADE_EVENT | xc.BUY_EVENT | both,
        xc.DEPTH_EVENT | xc.BUY_EVENT | both,
    ]
    np.testing.assert_allclose(rows["px"], [49.5, 50.5, 49.5, 50.5, 49.0])
    np.testing.assert_allclose(rows["qty"], [0.05, 0.06, 0.02, 0.03, 0.0])
    ev["kind"][0] = layout.ADD
    with pytest.raises(ValueError, match="L2 days"):
        xc.cache_feed(ev, 0.5, 0.01)


def test_depth_times_are_the_caches_own_on_the_converters_clock():
    ev = np.zeros(4, EVENT_DTYPE)
    ev["ts"] = np.array([900, 995, 995, 1010]) * 1_000_000  # the snapshot's level, two levels of one update, a trade
    ev["kind"] = [LEVEL, LEVEL, LEVEL, TRADE]
    clock = xc.hbt_clock(ev)
    assert clock.dtype == np.int64 and clock.tolist() == ev["ts"].tolist()


def test_a_tiny_window_replayed_in_hftbacktest_on_the_caches_own_events_fills_as_ours(day_cache):
    pytest.importorskip("hftbacktest")
    from hftbacktest import order, types

    assert (xc.DEPTH_EVENT, xc.TRADE_EVENT) == (types.DEPTH_EVENT, types.TRADE_EVENT)
    assert (xc.EXCH_EVENT, xc.LOCAL_EVENT) == (types.EXCH_EVENT, types.LOCAL_EVENT)
    assert (xc.BUY_EVENT, xc.SELL_EVENT) == (types.BUY_EVENT, types.SELL_EVENT)
    assert xc.HBT_EVENT_DTYPE == types.event_dtype
    assert (xc.NEW, xc.PARTIALLY_FILLED, xc.FILLED, xc.CANCELED, xc.EXPIRED) == (
        order.NEW, order.PARTIALLY_FILLED, order.FILLED, order.CANCELED, order.EXPIRED
    )  # fmt: skip
    cfg, day = day_cache
    windows = xc.play(cfg, xc.window_keys(cfg, day, 2), xc.quoting_policy(cfg))
    feed, clock = xc.cache_feed(day.events, day.manifest.tick_size, day.manifest.lot_size)
    rows = xc.crosscheck(windows, day, feed, clock, cfg)
    for r in rows:
        assert r["hbt"]["taker_lots"] == r["ours"]["taker_lots"] > 0
        assert r["hbt"]["passive_lots"] == r["ours"]["passive_lots"] > 0, r["differ"]
        assert r["hbt"]["pnl_usd"] == pytest.approx(r["ours"]["pnl_usd"], abs=1e-9)
        assert r["notes"]["book_end_same"]

"""The day cache and the replay market (lobsim_env.data, lobsim_env.replay; docs/data.md).

- LOBSTER sample days ingest into the cache (once: a second ingest writes nothing), check against their own
  orderbook rows with nothing unexplained, and a day is written whole or not at all.
- The replay market on a cached LOBSTER day, each message given a time of its own, is LobsterMarket (the
  book-by-book reference of docs/market.md's "LOBSTER replay" rules): the same observations, fills, fees and
  rewards for the same keys and actions, through the C step and through the Python step. On the day as it is
  (messages sharing a time) and on L2 days (made here from a seeded flow of level updates and trades, with and
  without runs of one time) the C step is the Python step, under both queue models.
- An order reaches the book at the end of the run of messages of one time it falls inside, at most at the step's
  end (ReplayMarket's `arrivals`), in both steps; the hindsight bound plans on the book its orders meet.
- Windows never cross a day's end, several days are drawn from, a day's arrays are memory-mapped (nothing copied
  into the market), a config of another contract or an inverse contract is refused by name.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.data import layout
from lobsim_env.data import lobster as lobster_source
from lobsim_env.data.l2book import ASK, BID, L2Book
from lobsim_env.data.layout import EVENT_DTYPE, LEVEL, TRADE, DataError, Manifest
from lobsim_env.lobster.market import LobsterMarket, lobster_config
from lobsim_env.lobster.samples import sample_zip
from lobsim_env.market import Action
from lobsim_env.replay import ReplayMarket, compiled, replay_config
from lobsim_env.replay.market import arrivals

AMZN5 = sample_zip("AMZN", 5)
AAPL1 = sample_zip("AAPL", 1)
needs_samples = pytest.mark.skipif(not AMZN5.exists(), reason=f"no LOBSTER sample at {AMZN5}")
needs_c = pytest.mark.skipif(not compiled(), reason="lobsim_env.replay._replay_fast is not built (pip install -e .)")


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("cache")
    if AMZN5.exists():
        lobster_source.ingest([AMZN5, AAPL1], root)
    return root


@needs_samples
def test_lobster_days_ingest_once_and_check_against_their_own_orderbook(cache, tmp_path):
    days = layout.list_days(cache)
    assert [m.key for m in days] == ["nasdaq/AAPL/2012-06-21", "nasdaq/AMZN/2012-06-21"]
    amzn = layout.open_day(layout.day_dir(cache, days[1]))
    m = amzn.manifest
    assert (m.depth, m.levels, m.tick_size, m.lot_size, m.source) == ("L3", 5, 0.01, 1.0, "lobster")
    assert m.n_events == 155_935 and m.files[0].name == AMZN5.name and len(m.files[0].sha256) == 64
    assert isinstance(amzn.events, np.memmap) and isinstance(amzn.book, np.memmap)
    assert amzn.book.shape == (m.n_events, 20) and amzn.book[:, 0].min() > 0  # the best ask, in cents: never empty
    rep = lobster_source.check(amzn)
    assert rep.ok and rep.rows == m.n_events and rep.matched > 0.7 * rep.rows, rep
    # the same files again: nothing written
    stamp = (layout.day_dir(cache, m) / layout.EVENTS).stat().st_mtime_ns
    assert lobster_source.ingest([AMZN5], cache) == [(m, False)]
    assert (layout.day_dir(cache, m) / layout.EVENTS).stat().st_mtime_ns == stamp


@needs_samples
def test_several_files_of_one_day_keep_the_deepest():
    paths = [sample_zip("GOOG", n) for n in (1, 10, 5)]
    keep, skipped = lobster_source.deepest_per_day(paths)
    assert keep == [sample_zip("GOOG", 10)] and len(skipped) == 2 and "at 10 levels" in skipped[0]
    with pytest.raises(DataError, match="at one depth"):
        lobster_source.deepest_per_day([AMZN5, AMZN5])


def _tiny_day(n: int = 50) -> tuple[Manifest, np.ndarray, np.ndarray]:
    events = np.zeros(n, EVENT_DTYPE)
    events["ts"] = np.arange(n)
    events["kind"] = LEVEL
    events["side"] = BID
    events["price"] = 100
    events["size"] = 1
    book = np.zeros((n, 4), np.int64)
    book[:, :] = (101, 1, 100, 1)
    m = Manifest(
        venue="test", instrument="X", date="2024-01-02", source="tardis", depth="L2", levels=1, tick_size=0.5,
        lot_size=1.0, n_events=n, first_ts=0, last_ts=n - 1,
    )  # fmt: skip
    return m, events, book


def test_a_day_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    m, events, book = _tiny_day()
    folder = layout.write_day(tmp_path, m, events, book)
    assert layout.open_day(folder).manifest == m
    before = {p: p.read_bytes() for p in folder.iterdir()}

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(layout.json, "dump", full_disk)  # the manifest, written last, fails
    events["size"] = 2
    with pytest.raises(OSError, match="No space"):
        layout.write_day(tmp_path, m, events, book)
    assert {p: p.read_bytes() for p in folder.iterdir()} == before  # the old day whole
    assert [p.name for p in folder.parent.iterdir()] == [m.date]  # no temporary folder left


def test_a_cache_of_another_layout_or_a_broken_manifest_is_refused_by_name(tmp_path):
    m, events, book = _tiny_day()
    folder = layout.write_day(tmp_path, m, events, book)
    doc = json.loads((folder / layout.MANIFEST).read_text())
    (folder / layout.MANIFEST).write_text(json.dumps({**doc, "layout": "foxhunt.day/0"}))
    with pytest.raises(DataError, match=r"layout='foxhunt.day/0'.*ingest the source files again"):
        layout.open_day(folder)
    (folder / layout.MANIFEST).write_text(json.dumps({**doc, "tick_size": -1}))
    with pytest.raises(DataError, match=r"tick_size=-1 must be a number > 0"):
        layout.open_day(folder)
    (folder / layout.MANIFEST).write_text(json.dumps(doc))
    np.save(folder / layout.BOOK, book[:10])
    with pytest.raises(DataError, match=r"book.npy: int64\(10, 4\).*expected int64\[50, 4\]"):
        layout.open_day(folder)
    with pytest.raises(DataError, match="--days 'nosuch' matches no day"):
        layout.select_days(tmp_path, ["nosuch"])


# ------------------------------------------------------------------------------------- the replay market


def _play(markets: dict, keys: np.ndarray, steps: int, seed: int, check) -> None:
    """Steps every market with the same keys and random actions, `check(name, obs, result, ref_obs, ref_result)`
    against the first one each step."""
    rng = np.random.default_rng(seed)
    states = {}
    for name, m in markets.items():
        states[name] = m.new_state(len(keys))
        m.reset_rows(states[name], np.arange(len(keys)), keys)
    ref = next(iter(markets))
    for _ in range(steps):
        a = rng.integers(0, 7, len(keys))
        out = {name: (m.observe(states[name]), m.step(states[name], a)) for name, m in markets.items()}
        for name in markets:
            if name != ref:
                check(name, *out[name], *out[ref])


def _same(name, obs, res, ref_obs, ref_res):
    np.testing.assert_allclose(obs, ref_obs, rtol=1e-6, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(res.fills, ref_res.fills, err_msg=name)
    np.testing.assert_allclose(res.reward, ref_res.reward, rtol=1e-9, atol=1e-9, err_msg=name)
    np.testing.assert_allclose(res.fees_usd, ref_res.fees_usd, rtol=1e-9, atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(res.truncated, ref_res.truncated, err_msg=name)


def _own_times(cache: Path, ticker: str, root: Path) -> Path:
    """A copy of the cache's day of `ticker` in `root`, each message a time of its own (its time plus its rank among
    the messages of that time): no order waits for the end of a message, as in LobsterMarket."""
    m = layout.select_days(cache, [ticker])[0]
    day = layout.open_day(layout.day_dir(cache, m))
    events = np.array(day.events)
    ts = events["ts"]
    events["ts"] = ts + np.arange(len(ts)) - np.searchsorted(ts, ts, side="left")
    layout.write_day(root, dataclasses.replace(m, last_ts=int(events["ts"][-1])), events, np.array(day.book))
    return root


@needs_samples
@pytest.mark.parametrize("path, depth_flow", [(AMZN5, 0), (AAPL1, 2)])
def test_the_replay_market_on_a_cached_lobster_day_is_lobster_market(cache, tmp_path, path, depth_flow):
    """The same windows (one day: the key's start is LobsterMarket's), actions, fills, fees and rewards, each
    message a time of its own (LobsterMarket's orders arrive between any two messages); on the day as it is, with
    its messages of one time, the C step is the Python step."""
    ref = lobster_config(str(path), horizon=60, depth_flow_ticks=depth_flow)
    ticker = path.name.split("_")[2]
    same_contract = {f: getattr(ref, f) for f in ("maker_fee_usd", "taker_fee_usd", "order_size", "position_limit")}
    kw = dict(horizon=60, depth_flow_ticks=depth_flow, size_scale=ref.size_scale, **same_contract)
    cfg = replay_config(_own_times(cache, ticker, tmp_path), [ticker], **kw)
    markets = {"lobster": LobsterMarket(ref), "python": ReplayMarket(cfg, use_c=False)}
    if compiled():
        markets["c"] = ReplayMarket(cfg, use_c=True)
    keys = np.random.default_rng(1).integers(0, 2**63, 24).astype(np.uint64)
    _play(markets, keys, 60, 2, _same)
    if compiled():
        as_is = replay_config(cache, [ticker], **kw)
        _play({"python": ReplayMarket(as_is, use_c=False), "c": ReplayMarket(as_is, use_c=True)}, keys, 60, 2, _same)


def _l2_day(root: Path, seed: int, n: int = 4000, date: str = "2024-08-08", same_time: float = 0.0) -> Manifest:
    """A seeded L2 day: level updates around a wandering mid and trades at the touch, rebuilt with L2Book; each
    message after the first shares the time of the one before it with probability `same_time` (runs of one time,
    as a venue message of many levels makes; 0: every message a time of its own)."""
    rng = np.random.default_rng(seed)
    book, ev, rows = L2Book(3), np.zeros(n, EVENT_DTYPE), np.zeros((n, 12), np.int64)
    mid = 1000
    for p in range(1, 6):
        book.set(BID, mid - p, 5)
        book.set(ASK, mid + p, 5)
    for k in range(n):
        bid, ask = book.best()
        if rng.random() < 0.2:  # a trade at the touch: the resting side's level shrinks after it
            side = BID if rng.random() < 0.5 else ASK
            price = bid if side == BID else ask
            size = int(rng.integers(1, 4))
            ev[k] = (k, TRADE, side, price, size, 0, 0, -1)
        else:
            side = BID if rng.random() < 0.5 else ASK
            price = (bid - int(rng.integers(0, 3))) if side == BID else (ask + int(rng.integers(0, 3)))
            if rng.random() < 0.1:  # the touch moves
                price = bid + 1 if side == BID and bid + 1 < ask else price
            size = int(rng.integers(0, 9)) if price not in (bid, ask) or rng.random() < 0.8 else 0
            if (side == BID and price == bid and size == 0 and len(book.prices[BID]) < 2) or (
                side == ASK and price == ask and size == 0 and len(book.prices[ASK]) < 2
            ):
                size = 3
            delta = book.set(side, price, size)
            ev[k] = (k, LEVEL, side, price, size, delta, 0, -1)
        book.row(rows[k])
    if same_time:
        ev["ts"] = np.cumsum(np.random.default_rng(seed + 1000).random(n) >= same_time)
        ev["ts"] -= ev["ts"][0]
    m = Manifest(
        venue="test", instrument="L2X", date=date, source="tardis", depth="L2", levels=3, tick_size=0.1,
        lot_size=0.001, maker_fee_bps=2.0, taker_fee_bps=5.0, order_lots=2, n_events=n, first_ts=0,
        last_ts=int(ev["ts"][-1]),
    )  # fmt: skip
    layout.write_day(root, m, ev, rows)
    return m


@needs_c
@pytest.mark.parametrize("queue_model, same_time", [("risk_averse", 0.0), ("prob", 0.0), ("risk_averse", 0.85),
                                                   ("prob", 0.85)])  # fmt: skip
def test_the_c_step_is_the_python_step_on_l2_days(tmp_path, queue_model, same_time):
    for i, date in enumerate(("2024-08-08", "2024-08-09")):
        _l2_day(tmp_path, seed=i, date=date, same_time=same_time)
    cfg = replay_config(tmp_path, [], horizon=40, events_per_step=10, depth_flow_ticks=2, queue_model=queue_model,
                        latency_events=3)  # fmt: skip
    assert cfg.taker_fee_bps == 5.0 and cfg.order_size == 2 and cfg.usd_per_tick == pytest.approx(0.1 * 0.001)
    markets = {"python": ReplayMarket(cfg, use_c=False), "c": ReplayMarket(cfg, use_c=True)}
    keys = np.random.default_rng(3).integers(0, 2**63, 64).astype(np.uint64)
    _play(markets, keys, 45, 4, _same)  # past the horizon: finished books stand still until reset


def test_windows_stay_inside_their_day_and_every_day_is_drawn(tmp_path):
    for i, date in enumerate(("2024-08-08", "2024-08-09", "2024-08-10")):
        _l2_day(tmp_path, seed=i, date=date, n=1500 + 500 * i)
    cfg = replay_config(tmp_path, [], horizon=50, events_per_step=20)
    market = ReplayMarket(cfg)
    state = market.new_state(600)
    market.reset_rows(state, np.arange(600), np.random.default_rng(0).integers(0, 2**63, 600).astype(np.uint64))
    assert set(state.day.tolist()) == {0, 1, 2}
    n = np.array([d.manifest.n_events for d in market.days])[state.day]
    assert (state.start >= 1).all() and (state.start + 50 * 20 < n).all()
    assert all(isinstance(d.events, np.memmap) for d in market.days)  # read in place, not copied


def test_a_config_of_another_contract_or_an_inverse_day_is_refused(tmp_path):
    m = _l2_day(tmp_path, seed=0)
    cfg = replay_config(tmp_path, [])
    with pytest.raises(DataError, match=r"not the contract of test/L2X/2024-08-08.*replay_config"):
        ReplayMarket(dataclasses.replace(cfg, usd_per_tick=12.5))
    folder = layout.day_dir(tmp_path, m)
    doc = json.loads((folder / layout.MANIFEST).read_text())
    (folder / layout.MANIFEST).write_text(json.dumps({**doc, "inverse": True, "contract_multiplier": 100.0}))
    with pytest.raises(DataError, match="inverse contract"):
        replay_config(tmp_path, [])
    (folder / layout.MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"horizon \* market.events_per_step = 40000 must be <"):
        ReplayMarket(dataclasses.replace(cfg, horizon=2000))


@needs_c
def test_the_c_step_follows_a_state_whose_arrays_were_replaced_and_alternating_states(tmp_path):
    """The C pointers of a state are kept between calls while its arrays are the same objects: a replaced array, or
    another state, gets its own (the C step then matches the Python step on every state)."""
    _l2_day(tmp_path, seed=5)
    cfg = replay_config(tmp_path, [], horizon=30, events_per_step=10)
    c, py = ReplayMarket(cfg, use_c=True), ReplayMarket(cfg, use_c=False)
    keys = [np.random.default_rng(s).integers(0, 2**63, 16).astype(np.uint64) for s in (1, 2)]
    states = [(c.new_state(16), py.new_state(16)) for _ in keys]
    for (sc, sp), k in zip(states, keys, strict=True):
        c.reset_rows(sc, np.arange(16), k)
        py.reset_rows(sp, np.arange(16), k)
    rng = np.random.default_rng(7)
    for t in range(25):
        for sc, sp in states:  # two states through one market, in turn
            if t == 10:
                sc.cash = sc.cash.copy()  # a new array: the old pointer would write elsewhere
            a = rng.integers(0, 7, 16)
            _same("c", c.observe(sc), c.step(sc, a), py.observe(sp), py.step(sp, a))


# ------------------------------------------------------------------------- orders wait for the message's end


def _runs_day(root: Path, runs: list[tuple[int, int]], rows: dict[int, tuple] | None = None) -> Path:
    """_tiny_day of 60 messages, messages [a, b) of each run sharing one time, book rows replaced by `rows`."""
    m, events, book = _tiny_day(60)
    for a, b in runs:
        events["ts"][a:b] = events["ts"][a]
    for k, row in (rows or {}).items():
        book[k] = row
    layout.write_day(root, m, events, book)
    return root


RUNS = [(9, 16), (19, 35)]
"""Messages 9-15 share a time, and 19-34: with 10 messages a step from message 11 (key 10), step 0's order falls
inside the first run and step 1's inside the second, which runs past the step's end (message 31)."""


@pytest.mark.parametrize("latency, joined", [(0, (16, 31)), (1, (16, 31)), (7, (18, 31)), (10, (21, 31))])
def test_an_order_waits_for_the_end_of_its_message_and_no_longer_than_its_step(tmp_path, latency, joined):
    """The message an order reaches the book before (a join records it): latency 0 and 1 fall inside messages 9-15
    and wait for 16; latency 7 meets message 18, alone in its time; step 1's run goes past the step, so its order
    arrives at the step's end (31), before the next observation; latency 10 is the step's end already."""
    cfg = replay_config(_runs_day(tmp_path, RUNS), [], horizon=3, events_per_step=10, latency_events=latency)
    ts = layout.open_day(layout.day_dir(tmp_path, layout.select_days(tmp_path, [])[0])).events["ts"]
    due = np.array([11, 21]) + latency
    assert arrivals(ts, due, np.array([21, 31])).tolist() == list(joined)
    for use_c in (False, True) if compiled() else (False,):
        market = ReplayMarket(cfg, use_c=use_c)
        state = market.new_state(1)
        market.reset_rows(state, np.arange(1), np.array([10], np.uint64))
        assert state.start[0] == 11
        for action in (Action.JOIN_BID, Action.JOIN_ASK):
            market.step(state, np.array([action]))
        assert tuple(state.own_join[0]) == joined and (state.own_size[0] > 0).all(), use_c


def test_the_hindsight_bound_plans_on_the_book_its_orders_meet(tmp_path):
    """A cheap ask seen half way through a message (the book after message 11 of the run 9-15) is not one an order
    can take; the one at the end of message 21-24 is. The bound buys once, at step 1, at that price."""
    cheap = (50, 5, 49, 5)
    cfg = replay_config(_runs_day(tmp_path, [(9, 16), (21, 25)], {11: cheap, 24: cheap}), [], horizon=3,
                        events_per_step=10, latency_events=1)  # fmt: skip
    for use_c in (False, True) if compiled() else (False,):
        market = ReplayMarket(cfg, use_c=use_c)
        state = market.new_state(1)
        market.reset_rows(state, np.arange(1), np.array([10], np.uint64))
        sent = []
        for _ in range(cfg.horizon):
            sent.append(int(market.hindsight_actions(state)[0]))
            market.step(state, np.array(sent[-1:]))
        assert sent == [Action.HOLD, Action.MARKET_BUY, Action.HOLD], use_c
        assert (state.position[0], state.cash[0]) == (1, -50), use_c
        assert state.equity_usd[0] == pytest.approx((100.5 - 50) * cfg.usd_per_tick), use_c

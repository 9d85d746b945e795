"""A second engine's verdict on the replay market's fill model: the same orders replayed inside hftbacktest.

For each Binance capture given, the day is ingested into a cache (`python -m lobsim_env.data ingest`) and played by
the replay market (lobsim_env.replay, the Python reference step, instrumented) on `--windows` windows spread evenly
over the day, with a fixed policy: the quoting rule `lobsim_env.baselines.Quoting()` or, with `--policy DIR`, a
policy exported by `python -m foxhunt_ray.export RUN`. Every order the policy's actions send is recorded (a post at
the best bid or ask, a cancel, a market order: at which message it reaches the book, price, lots), with every fill
(passive or taker, the message that made it) and the window's final position, cash, fees and PnL.

The same orders are then replayed inside hftbacktest (nkaz001/hftbacktest 2.x, driven from plain Python): a fresh
`HashMapMarketDepthBacktest` a window, `BacktestAsset().linear_asset(1.0)`, the day's tick and lot, the risk-averse
queue model (ours: market.queue_model='risk_averse'), the partial-fill exchange (ours fills partially), order
latency 0 ns both ways, the day's maker / taker fees as a share of the traded value. A post is a GTX (post-only)
limit order, a market order hftbacktest's MARKET order. Our latency is counted in messages (market.latency_events:
the order reaches the book after that many of the step's messages, then waits for the end of the run of messages of
one time it fell inside, at most until the step's end: lobsim_env.replay.market.arrivals); hftbacktest's in ns. So
each order is submitted at the exchange time of the message after which ours reaches the book, with 0 ns latency:
hftbacktest processes an order arriving at time t after every market event stamped <= t, so both engines see the
order meet the same book, except where the step's end cut ours short inside a time's messages. Two feeds, each a
table:
- `hbt`: hftbacktest's own converter (`hftbacktest.data.utils.binancefutures.convert`) on the capture: the
  primary verdict, with everything that differs between the two converters (diffs applied as they come rather
  than synced by update id; only MARKET trades). Both stamp futures depth and trades with the transaction time T
  (our ingest's `binance/2`), so an order's time is its message's time in our cache (`hbt_clock`);
- `cache`: our cache's own events as hftbacktest rows (one row an event, stamped in ns in the cache's order), so an
  order meets exactly the message ours meets: what differs there is the two engines' fill rules alone.
Each PnL is marked at our window's last mid (the same price for both engines, so the gap is the fills' alone).

It prints, per capture and feed, a table a window and the totals, and a last line (the `hbt` feed, all captures)
`windows=<n> fills_ours=<a> fills_hbt=<b> pnl_ours_usd=<x> pnl_hbt_usd=<y> pnl_gap_usd=<mean abs gap>`, the fills
being passive fill events summed over windows and the PnLs means a window.

hftbacktest pins numpy < 2.3 and numba 0.61+, so it runs in a virtual environment of its own (torch 2.13.0 is the
CPU build on this disk; an unpinned torch pulls a multi-GB CUDA one):

    python3 -m venv .hbt && .hbt/bin/pip install "torch==2.13.0" hftbacktest -e .
    .hbt/bin/python benchmarks/crosscheck_hftbacktest.py ../shared/data/binance/usdm_btcusdt_20240808.gz \\
        ../shared/data/binance/usdm_ethusdt_20240808.gz --cache /tmp/xc/cache --windows 32 --json out.json

The recording, the accounting and the translation of our orders into hftbacktest's calls import without
hftbacktest and are tested in tests/test_crosscheck_hftbacktest.py.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lobsim_env.baselines import Quoting  # noqa: E402
from lobsim_env.config import MarketConfig  # noqa: E402
from lobsim_env.data import layout  # noqa: E402
from lobsim_env.data.layout import EXECUTE, TRADE, Day  # noqa: E402
from lobsim_env.market import Action  # noqa: E402
from lobsim_env.replay import ReplayMarket, replay_config  # noqa: E402

POST, CANCEL, MARKET = "post", "cancel", "market"
BID, ASK = 0, 1

# hftbacktest.types' event flags (checked against the installed package in the tests)
DEPTH_EVENT, TRADE_EVENT = 1, 2
EXCH_EVENT, LOCAL_EVENT, BUY_EVENT, SELL_EVENT = 1 << 31, 1 << 30, 1 << 29, 1 << 28
HBT_EVENT_DTYPE = np.dtype(
    {
        "names": ["ev", "exch_ts", "local_ts", "px", "qty", "order_id", "ival", "fval"],
        "formats": ["<u8", "<i8", "<i8", "<f8", "<f8", "<u8", "<i8", "<f8"],
        "offsets": [0, 8, 16, 24, 32, 40, 48, 56],
        "itemsize": 64,
        "aligned": True,
    }
)


# ---------------------------------------------------------------------------------------------- our side


@dataclass(kw_only=True, frozen=True, slots=True)
class Order:
    """One order the agent's action sent: it reaches the book before message `event` (after message event - 1)."""

    event: int
    kind: str
    """POST (a resting order at `price`), CANCEL (the agent's order on `side`, if any), MARKET (`lots` at market)."""
    side: int
    """BID (a bid, a buy) or ASK (an ask, a sell)."""
    price: int = 0
    """Ticks (POST only)."""
    lots: int = 0
    order_id: int = 0
    """POST and MARKET: 1, 2, ... in the window's order (hftbacktest's order ids: hbt_calls); CANCEL: 0."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Fill:
    """A fill of one of the window's orders, in either engine."""

    order_id: int
    side: int
    """BID: bought, ASK: sold."""
    lots: int
    notional: int
    """Ticks x lots (a market order: summed over the levels it walked)."""
    how: str
    """'trade' (a trade at its price, past the queue ahead), 'through' (a trade beyond its price), 'cross' (the
    opposite best quote reached its price), 'taker' (a market order); hftbacktest's: 'passive' or 'taker'."""
    ms: int
    """The exchange millisecond it happened in (fills of one order in one millisecond count as one fill)."""
    event: int = -1
    """Ours: the message that filled it (a market order: the one it reached the book before)."""


@dataclass(kw_only=True)
class Window:
    """One window of one day as our market played it."""

    start: int
    """Its first message."""
    end: int
    """One past its last message."""
    orders: list[Order] = field(default_factory=list)
    fills: list[Fill] = field(default_factory=list)
    position: int = 0
    cash: int = 0
    """Ticks x lots."""
    fees_usd: float = 0.0
    equity_usd: float = 0.0
    mid2: int = 0
    """Twice the mid (ticks) the window ends on: its PnL's mark."""


class RecordingMarket(ReplayMarket):
    """ReplayMarket's Python reference step (`_step_python`), each order its actions send and each fill recorded
    into `windows` (one a book, in the books' order); the step's rules are untouched."""

    def __init__(self, cfg: MarketConfig, days: list[Day] | None = None):
        super().__init__(cfg, days, use_c=False)
        self.windows: list[Window] = []
        self._how: dict[int, str] = {}
        self._live: list[list[int]] = []  # a book's resting order id a side

    def reset_rows(self, state, rows, keys, first_step=None) -> None:
        super().reset_rows(state, rows, keys, first_step)
        span = self.cfg.horizon * self.cfg.events_per_step
        while len(self.windows) < state.t.shape[0]:
            self.windows.append(Window(start=0, end=0))
            self._live.append([0, 0])
        for r in np.asarray(rows):
            self.windows[r] = Window(start=int(state.start[r]), end=int(state.start[r]) + span)
            self._live[r] = [0, 0]

    def _message(self, st, r, e, row, k):
        self._k, self._ms = k, int(e["ts"]) // 1_000_000
        kind, price, s = int(e["kind"]), int(e["price"]), 0 if int(e["side"]) == 1 else 1
        self._how = {}
        if kind in (EXECUTE, TRADE) and int(e["side"]) != 0 and st.own_size[r, s] > 0:
            own = int(st.own_price[r, s])
            if price == own:
                self._how[s] = "trade"
            elif price < own if s == BID else price > own:
                self._how[s] = "through"
        return super()._message(st, r, e, row, k)

    def _fill(self, st, r, s, qty):
        how = self._how.pop(s, "cross")  # the trade branch fills first; the quote check after it
        price = int(st.own_price[r, s])
        signed, fee = super()._fill(st, r, s, qty)
        if signed:
            fill = Fill(order_id=self._live[r][s], side=s, lots=abs(signed), notional=abs(signed) * price, how=how,
                        ms=self._ms, event=self._k)  # fmt: skip
            self.windows[r].fills.append(fill)
        return signed, fee

    def _act(self, st, r, row, levels, action, msg):
        size0, price0, cash0 = st.own_size[r].copy(), st.own_price[r].copy(), int(st.cash[r])
        taken, fee = super()._act(st, r, row, levels, action, msg)
        w, live = self.windows[r], self._live[r]
        cancelled = {
            Action.CANCEL: (BID, ASK), Action.FLATTEN: (BID, ASK), Action.MARKET_BUY: (ASK,), Action.MARKET_SELL: (BID,)
        }.get(Action(action), ())  # fmt: skip
        for s in (BID, ASK):
            replaced = size0[s] > 0 and (st.own_size[r, s] == 0 or st.own_price[r, s] != price0[s])
            if s in cancelled or replaced:
                w.orders.append(Order(event=msg, kind=CANCEL, side=s))
        ids = [o.order_id for o in w.orders if o.order_id]
        next_id = max(ids, default=0) + 1
        if taken:
            s = BID if taken > 0 else ASK
            w.orders.append(Order(event=msg, kind=MARKET, side=s, lots=abs(taken), order_id=next_id))
            ms = int(self.days[st.day[r]].events["ts"][msg - 1]) // 1_000_000
            w.fills.append(Fill(order_id=next_id, side=s, lots=abs(taken), notional=abs(int(st.cash[r]) - cash0),
                                how="taker", ms=ms, event=msg))  # fmt: skip
            next_id += 1
        for s in (BID, ASK):
            if st.own_size[r, s] > 0 and (size0[s] == 0 or st.own_price[r, s] != price0[s]):
                w.orders.append(Order(event=msg, kind=POST, side=s, price=int(st.own_price[r, s]),
                                      lots=int(st.own_size[r, s]), order_id=next_id))  # fmt: skip
                live[s] = next_id
                next_id += 1
        return taken, fee


def window_keys(cfg: MarketConfig, day: Day, n: int) -> np.ndarray:
    """Keys of one day's windows spread evenly over it, the first opening after the day's opening book (the events
    of its first time stamp: the snapshot a Binance day opens from): the key of a window opening at message s is
    s - 1 (ReplayMarket.reset_rows: start = 1 + key % (n_events - 1 - horizon x events_per_step))."""
    ts = day.events["ts"]
    first = int(np.searchsorted(ts, ts[0], side="right"))
    last = day.manifest.n_events - 1 - cfg.horizon * cfg.events_per_step  # one past the last start a key can give
    if n < 1 or last - first < n:
        raise ValueError(f"windows={n}: {day.key} has room for 1..{max(last - first, 0)} windows of this span")
    return (first - 1 + np.arange(n) * ((last - first) // n)).astype(np.uint64)


def play(cfg: MarketConfig, keys: np.ndarray, policy) -> list[Window]:
    """Plays one window a key (one book each) to its horizon under `policy(obs [B, D]) -> actions [B]`; returns the
    windows as recorded, their final position, cash, fees, equity and mark filled in."""
    market = RecordingMarket(cfg)
    state = market.new_state(len(keys))
    market.reset_rows(state, np.arange(len(keys)), keys)
    for _ in range(cfg.horizon):
        market.step(state, np.asarray(policy(market.observe(state)), np.int64))
    for r, w in enumerate(market.windows):
        w.position, w.cash = int(state.position[r]), int(state.cash[r])
        w.fees_usd, w.equity_usd, w.mid2 = float(state.fees_usd[r]), float(state.equity_usd[r]), int(state.last_mid2[r])
    return market.windows


def quoting_policy(cfg: MarketConfig, rule: Quoting | None = None):
    rule, env, rng = rule or Quoting(), SimpleNamespace(config=cfg), np.random.default_rng(0)
    return lambda obs: rule(obs, env, rng)


@dataclass(kw_only=True, frozen=True)
class Totals:
    """A window's figures in one engine, from its fills."""

    passive_fills: int
    """(resting order, exchange millisecond) pairs in which the order filled."""
    passive_lots: int
    taker_lots: int
    fees_usd: float
    position: int
    """Lots."""
    pnl_usd: float
    """Cash plus the position marked at the window's last mid, less fees."""


def account(fills: list[Fill], mid2: int, cfg: MarketConfig) -> Totals:
    """A window's figures from its fills alone, by the market's accounting (ours: equal to the market's own position,
    cash, fees and equity, tests/test_crosscheck_hftbacktest.py; hftbacktest's fills go through the same sums)."""
    position, cash, fees = 0, 0, 0.0
    for f in fills:
        position += f.lots if f.side == BID else -f.lots
        cash += -f.notional if f.side == BID else f.notional
        taker = f.how == "taker"
        per_lot, bps = (cfg.taker_fee_usd, cfg.taker_fee_bps) if taker else (cfg.maker_fee_usd, cfg.maker_fee_bps)
        fees += f.lots * per_lot + bps * 1e-4 * f.notional * cfg.usd_per_tick
    passive = [f for f in fills if f.how != "taker"]
    return Totals(
        passive_fills=len({(f.order_id, f.ms) for f in passive}),
        passive_lots=sum(f.lots for f in passive),
        taker_lots=sum(f.lots for f in fills if f.how == "taker"),
        fees_usd=fees,
        position=position,
        pnl_usd=(cash + position * mid2 / 2) * cfg.usd_per_tick - fees,
    )


# ------------------------------------------------------------------------------- into hftbacktest's calls

POST_SHORTFALL = 1e-6
"""Lots a post's quantity is short of ours in hftbacktest: its partial-fill exchange (2.4.4) leaves an order that a
trade fills exactly (the queue model's fill == leaves_qty) in its book as Filled, and the next trade at that price
stops the backtest with InvalidOrderStatus (nkaz001/hftbacktest#312); a hair less than whole lots makes that fill
'more than leaves_qty', the branch that removes the order. Every figure counts whole lots (rounded)."""


@dataclass(kw_only=True, frozen=True, slots=True)
class Call:
    """One call on hftbacktest: at exchange time `ts` (ns), `op` 'limit' (a GTX post), 'market' or 'cancel'."""

    ts: int
    op: str
    order_id: int
    side: int = BID
    price: float = 0.0
    qty: float = 0.0


def hbt_calls(w: Window, clock: np.ndarray, tick: float, lot: float) -> list[Call]:
    """Our window's orders as hftbacktest calls: each at clock[event - 1] (the exchange time of the message after
    which ours reaches the book; never earlier than the call before it), prices and sizes in the venue's units,
    our order ids. The agent has one resting order a side: a post replaces the order hftbacktest still rests on
    that side (ours may have filled already), and a cancel cancels it, if any. A post's quantity is POST_SHORTFALL
    lots short of its own (see there)."""
    calls, live, t = [], {BID: 0, ASK: 0}, int(clock[w.start - 1])
    for o in w.orders:
        t = max(t, int(clock[o.event - 1]))
        if o.kind in (CANCEL, POST) and live[o.side]:
            calls.append(Call(ts=t, op="cancel", order_id=live[o.side], side=o.side))
            live[o.side] = 0
        if o.kind == POST:
            calls.append(Call(ts=t, op="limit", order_id=o.order_id, side=o.side, price=o.price * tick,
                              qty=(o.lots - POST_SHORTFALL) * lot))  # fmt: skip
            live[o.side] = o.order_id
        elif o.kind == MARKET:
            calls.append(Call(ts=t, op="market", order_id=o.order_id, side=o.side, qty=o.lots * lot))
    return calls


def cache_feed(events: np.ndarray, tick: float, lot: float) -> tuple[np.ndarray, np.ndarray]:
    """The cache's events as hftbacktest rows (the `cache` feed), and each event's time in them: the event's ns
    plus its rank among the events of the same ns, so that every event has a time of its own, in the cache's order.
    A LEVEL is a depth event (the level set to the size), a TRADE a trade event of the initiator's side (a trade that
    hit the bids was a sell); other kinds (an L3 day's) are not L2 and refused."""
    kinds = set(np.unique(events["kind"]).tolist()) - {layout.LEVEL, TRADE}
    if kinds:
        raise ValueError(f"event kinds {sorted(kinds)} in the day: the cache feed replays L2 days (LEVEL, TRADE) only")
    ts = events["ts"].astype(np.int64)
    first = np.searchsorted(ts, ts, side="left")  # ts is sorted: the index of the first event of each ns
    clock = ts + (np.arange(len(ts)) - first)
    rows = np.zeros(len(events), HBT_EVENT_DTYPE)
    bid = events["side"] == 1
    trade = events["kind"] == TRADE
    side = np.where(trade, np.where(bid, SELL_EVENT, BUY_EVENT), np.where(bid, BUY_EVENT, SELL_EVENT))
    rows["ev"] = np.where(trade, TRADE_EVENT, DEPTH_EVENT) | side | EXCH_EVENT | LOCAL_EVENT
    rows["exch_ts"] = rows["local_ts"] = clock
    rows["px"] = events["price"] * tick
    rows["qty"] = events["size"] * lot
    return rows, clock


def hbt_clock(events: np.ndarray) -> np.ndarray:
    """Each cache event's time on hftbacktest's converter's clock (the `hbt` feed): its own. The converter stamps a
    futures depth update and a trade with the transaction time T, and so does our ingest (manifest `binance/2`)."""
    return events["ts"].astype(np.int64)


# ------------------------------------------------------------------------------------------- hftbacktest


class HbtError(RuntimeError):
    """hftbacktest refused a call or stopped with an error code."""


def hbt_run(calls: list[Call], feed: np.ndarray, polls: np.ndarray, cfg: MarketConfig, tick: float, lot: float,
            exchange: str = "partial") -> tuple[list[Fill], dict]:  # fmt: skip
    """Replays `calls` in a fresh hftbacktest backtest of `feed`, reading every order's filled quantity at each time
    of `polls` (sorted ns; the last one ends the window). hftbacktest 2.4.4's own state_values miss partial fills
    (its local processor applies a response's fill only once the order is Filled: nkaz001/hftbacktest#299, #316),
    so the fills are taken from the orders themselves (qty - leaves_qty, at the order's price; a market order's at
    its exec price). Returns the fills and what hftbacktest said of each order (status, exec time)."""
    from hftbacktest import GTC, GTX, LIMIT, MARKET, BacktestAsset, HashMapMarketDepthBacktest

    if cfg.maker_fee_usd or cfg.taker_fee_usd:
        raise ValueError("per-lot fees: this cross-check sets hftbacktest's fees as a share of the traded value only")
    asset = BacktestAsset().data([feed]).linear_asset(1.0).constant_order_latency(0, 0).risk_adverse_queue_model()
    asset = asset.partial_fill_exchange() if exchange == "partial" else asset.no_partial_fill_exchange()
    asset = asset.trading_value_fee_model(cfg.maker_fee_bps * 1e-4, cfg.taker_fee_bps * 1e-4)
    hbt = HashMapMarketDepthBacktest([asset.tick_size(tick).lot_size(lot).last_trades_capacity(0)])
    fills: list[Fill] = []
    live: dict[int, tuple[Call, int]] = {}  # resting order id: (its call, lots filled so far)
    notes = {"multi_level_taker": 0, "rejected_posts": 0}

    def check(rc: int, what: str) -> None:
        if rc not in (0, 1):  # 1: the end of the data
            raise HbtError(f"hftbacktest returned {rc} on {what}")

    def goto(ts: int) -> None:
        if ts > hbt.current_timestamp:
            check(hbt.elapse(ts - hbt.current_timestamp), f"elapse to {ts}")
        ms = ts // 1_000_000
        orders = hbt.orders(0)
        for oid, (c, done) in list(live.items()):
            o = orders.get(oid)
            filled = round((o.qty - o.leaves_qty) / lot)
            if filled > done:
                price = round(c.price / tick)
                fills.append(Fill(order_id=oid, side=c.side, lots=filled - done, notional=(filled - done) * price,
                                  how="passive", ms=ms))  # fmt: skip
                live[oid] = (c, filled)
            if int(o.status) not in (NEW, PARTIALLY_FILLED):
                notes["rejected_posts"] += int(o.status) == EXPIRED
                del live[oid]

    check(hbt.elapse(0), "opening the feed")
    i = 0
    for t in polls:
        goto(int(t))
        while i < len(calls) and calls[i].ts <= t:
            c = calls[i]
            i += 1
            if c.op == "cancel":
                if c.order_id in live and hbt.orders(0).get(c.order_id).cancellable:
                    check(hbt.cancel(0, c.order_id, False), str(c))
                continue
            submit = hbt.submit_buy_order if c.side == BID else hbt.submit_sell_order
            if c.op == "limit":
                check(submit(0, c.order_id, c.price, c.qty, GTX, LIMIT, False), str(c))
                live[c.order_id] = (c, 0)
                continue
            check(submit(0, c.order_id, c.price, c.qty, GTC, MARKET, True), str(c))  # waits for it: 0 ns away
            o = hbt.orders(0).get(c.order_id)
            lots = round((o.qty - o.leaves_qty) / lot)
            notes["multi_level_taker"] += round(o.exec_qty / lot) != lots  # its notional: the last level's price
            if lots:
                fills.append(Fill(order_id=c.order_id, side=c.side, lots=lots, notional=lots * int(o.exec_price_tick),
                                  how="taker", ms=int(t) // 1_000_000))  # fmt: skip
    depth = hbt.depth(0)
    notes["book_end"] = (int(depth.best_bid_tick), int(depth.best_ask_tick))
    notes["state_position_lots"] = round(hbt.state_values(0).position / lot)
    hbt.close()
    return fills, notes


NEW, PARTIALLY_FILLED, FILLED, CANCELED, EXPIRED = 1, 5, 3, 4, 2  # hftbacktest.order's statuses


def poll_times(feed_ts: np.ndarray, calls: list[Call], start_ts: int, end_ts: int) -> np.ndarray:
    """Where to read hftbacktest's orders: every distinct feed time in (start_ts, end_ts] and every call's time."""
    lo, hi = np.searchsorted(feed_ts, [start_ts, end_ts], side="right")
    return np.unique(np.concatenate([feed_ts[lo:hi], [c.ts for c in calls], [end_ts]]).astype(np.int64))


# ----------------------------------------------------------------------------------------------- report


def compare(ours: list[Fill], theirs: list[Fill], orders: list[Order]) -> list[dict]:
    """The orders whose filled lots differ between the engines: id, kind, side, price, the message ours reached
    the book before, both engines' lots and how ours filled."""
    rows = []
    for o in orders:
        if not o.order_id:
            continue
        mine = [f for f in ours if f.order_id == o.order_id]
        a, b = sum(f.lots for f in mine), sum(f.lots for f in theirs if f.order_id == o.order_id)
        if a != b:
            rows.append({"order_id": o.order_id, "kind": o.kind, "event": o.event, "side": "bid" if o.side == BID
                         else "ask", "price": o.price, "ours": a, "hbt": b, "how": sorted({f.how for f in mine}),
                         "first_fill_event": min((f.event for f in mine), default=None)})  # fmt: skip
    return rows


def table(name: str, rows: list[dict]) -> str:
    head = (
        f"{'win':>3} {'start':>7} {'posts':>5} {'pfill o/h':>9} {'plots o/h':>11} {'tlots o/h':>9} "
        f"{'fees o/h $':>13} {'pos o/h':>9} {'pnl ours $':>10} {'pnl hbt $':>10} {'gap $':>7} {'odiff':>5}"
    )
    out = [f"== {name}", head]
    for i, r in enumerate(rows):
        o, h = r["ours"], r["hbt"]
        out.append(
            f"{i:>3} {r['start']:>7} {r['posts']:>5} {o['passive_fills']:>4}/{h['passive_fills']:<4} "
            f"{o['passive_lots']:>5}/{h['passive_lots']:<5} {o['taker_lots']:>4}/{h['taker_lots']:<4} "
            f"{o['fees_usd']:>6.3f}/{h['fees_usd']:<6.3f} {o['position']:>4}/{h['position']:<4} "
            f"{o['pnl_usd']:>10.3f} {h['pnl_usd']:>10.3f} {h['pnl_usd'] - o['pnl_usd']:>7.3f} {len(r['differ']):>5}"
        )
    out.append(summary(rows))
    return "\n".join(out)


def summary(rows: list[dict]) -> str:
    n = len(rows)
    fo, fh = (sum(r[k]["passive_fills"] for r in rows) for k in ("ours", "hbt"))
    po, ph = (float(np.mean([r[k]["pnl_usd"] for r in rows])) for k in ("ours", "hbt"))
    gap = float(np.mean([abs(r["hbt"]["pnl_usd"] - r["ours"]["pnl_usd"]) for r in rows]))
    return (
        f"windows={n} fills_ours={fo} fills_hbt={fh} pnl_ours_usd={po:.4f} pnl_hbt_usd={ph:.4f} pnl_gap_usd={gap:.4f}"
    )


def crosscheck(windows: list[Window], day: Day, feed: np.ndarray, clock: np.ndarray, cfg: MarketConfig,
               exchange: str = "partial") -> list[dict]:  # fmt: skip
    """Each window's orders replayed in hftbacktest on `feed` (`clock`: each of the day's messages on its clock);
    a row a window: both engines' Totals, the orders whose fills differ, hftbacktest's notes."""
    tick, lot = day.manifest.tick_size, day.manifest.lot_size
    feed_ts = np.unique(feed["exch_ts"][(feed["ev"] & EXCH_EVENT) != 0])
    rows = []
    for w in windows:
        ours = account(w.fills, w.mid2, cfg)
        if abs(ours.pnl_usd - w.equity_usd) > 1e-6 or ours.position != w.position:
            raise AssertionError(f"window at {w.start}: its fills give {ours}, the market {w.position} lots, "
                                 f"{w.equity_usd} USD: the recording lost a fill")  # fmt: skip
        calls = hbt_calls(w, clock, tick, lot)
        polls = poll_times(feed_ts, calls, int(clock[w.start - 1]), int(clock[w.end - 1]))
        fills, notes = hbt_run(calls, feed, polls, cfg, tick, lot, exchange)
        end = day.book[w.end - 1]
        notes["book_end_same"] = notes["book_end"] == (int(end[2]), int(end[0]))
        rows.append({"start": w.start, "posts": sum(o.kind == POST for o in w.orders), "ours": asdict(ours),
                     "hbt": asdict(account(fills, w.mid2, cfg)), "differ": compare(w.fills, fills, w.orders),
                     "notes": notes})  # fmt: skip
    return rows


def ingest(captures: list[Path], cache: Path) -> list[str]:
    """Ingests the captures into `cache` (a no-op for days already there from the same files); the day key of each."""
    subprocess.run([sys.executable, "-m", "lobsim_env.data", "ingest", *map(str, captures), "--out", str(cache)],
                   check=True, stdout=subprocess.DEVNULL)  # fmt: skip
    keys = []
    for c in captures:
        hits = [m.key for m in layout.select_days(cache, []) if any(f.name == c.name for f in m.files)]
        if not hits:
            raise ValueError(f"{c}: ingested, yet no day of {cache} names it among its files")
        keys.append(hits[0])
    return keys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("captures", nargs="+", type=Path, help="Binance USD-M captures <usdm>_<symbol>_<YYYYMMDD>.gz")
    p.add_argument("--cache", type=Path, required=True, help="the day cache to ingest them into")
    p.add_argument("--windows", type=int, default=32)
    p.add_argument("--horizon", type=int, default=200, help="steps a window")
    p.add_argument("--events-per-step", type=int, default=50)
    p.add_argument("--latency-events", type=int, default=1)
    p.add_argument("--exchange", choices=("partial", "no_partial"), default="partial")
    p.add_argument("--policy", type=Path, default=None, help="an exported policy folder (default: Quoting())")
    p.add_argument("--json", type=Path, default=None, help="write every window's figures and differing orders")
    args = p.parse_args(argv)
    keys = ingest(args.captures, args.cache)
    report, last = {}, []
    for capture, key in zip(args.captures, keys, strict=True):
        cfg = replay_config(args.cache, [key], horizon=args.horizon, events_per_step=args.events_per_step,
                            latency_events=args.latency_events)  # fmt: skip
        if args.policy is not None:
            from foxhunt_ray.export import load

            exported = load(args.policy)
            seen = exported.manifest.get("market", {})
            obs = {k: seen[k] for k in ("obs_levels", "depth_flow_ticks") if k in seen}  # its observation's width
            cfg = dataclasses.replace(cfg, **obs).validate()
            policy = exported.act
        else:
            policy = quoting_policy(cfg)
        day = layout.open_day(layout.day_dir(args.cache, layout.select_days(args.cache, [key])[0]))
        tick, lot = day.manifest.tick_size, day.manifest.lot_size
        windows = play(cfg, window_keys(cfg, day, args.windows), policy)
        from hftbacktest.data.utils import binancefutures

        with contextlib.redirect_stdout(sys.stderr):  # the converter's progress lines
            converted = binancefutures.convert(str(capture), buffer_size=4 * day.manifest.n_events)
        feeds = {"hbt": (converted, hbt_clock(day.events)), "cache": cache_feed(day.events, tick, lot)}
        for feed_name, (feed, clock) in feeds.items():
            rows = crosscheck(windows, day, feed, clock, cfg, args.exchange)
            name = f"{key} feed={feed_name} exchange={args.exchange} latency_events={args.latency_events}"
            print(table(name, rows), flush=True)
            same = sum(r["notes"]["book_end_same"] for r in rows)
            print(f"best quotes at the windows' ends the same in both engines: {same}/{len(rows)}")
            report[name] = rows
            if feed_name == "hbt":
                last.extend(rows)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    print(summary(last))
    return 0


if __name__ == "__main__":
    sys.exit(main())

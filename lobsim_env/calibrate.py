"""Fits the synthetic market's order flow (`SyntheticConfig`) to real days of a cache.

    python -m lobsim_env.calibrate CACHE [--days NAMES] --out FILE.toml|json [--name NAME] [--tick-multiple K]

The days are read in the synthetic market's units: prices in its ticks, K venue ticks each (--tick-multiple; by
default 1 where the spread is one venue tick at least half of the time, else the fewest that make it so, as the
synthetic spread mostly is one tick), sizes in the day's median trade (its `order_lots`, the replay's order). The
book is read where it settled (the end of a timestamp: `settled_rows`). Then, by field:

- limit_rate, market_rate, cancel_rate: from the shares of limit orders and cancels within `levels` of the best and
  of market orders (the executions of one aggressive order are one). A synthetic cancel is an attempt that finds
  nothing to take as queues shorten, and a day shows only the cancels that happened, so the rates are found by
  simulation: the synthetic flow is recorded (`synthetic_flow`) and measured as a day is, and rounds correct the
  rates until it shows the days' shares.
- level_decay, levels: orders at level d from the best, as the synthetic market places them (a limit bid at
  best_ask - 1 - d, a cancel at best_bid - d). `levels` holds --coverage of them (at most --max-levels);
  level_decay is the maximum-likelihood decay of a geometric truncated there, pooled over limits and cancels (one
  parameter places both), corrected by the same simulations.
- max_limit_size: a synthetic cancel takes one unit and limit sizes are uniform in 1..M (mean (M + 1) / 2): M keeps
  the days' mean limit order over their mean cancel. base_depth: the mean queue at the best over the mean cancel,
  the book an episode opens with.
- signal_strength, loosely: a market order follows the latent regime with probability (1 + s) / 2, so the
  autocorrelation of market order signs is s**2 times the one at s = 1; s matches the days' at lags 1-10. Real sign
  persistence comes mostly from split orders, not regimes. The imbalance figures (the sign of the next mid move on
  the top-of-book imbalance: hit rate, slope) are measured and compared, not fitted: the synthetic market's come
  mostly from its queue mechanics and do not rise with s.
- Not fitted: queue_ref, regime_switch_prob, flow_decay, slow_flow_decay, start_tick (written at their defaults) and
  market.events_per_step (not written); window_ticks only grows to 4 x levels. The spread, the mid's moves, market
  order sizes and hidden executions are measured beside the fitted market's own.

It writes a --config file of `foxhunt_ray.local` (market.source and [market.synthetic]) and beside it
`<stem>.measured.json`: every figure measured and the fitted market's own, the days, the notes (the config reader
refuses unknown keys). Exit codes: 0 written; 2 bad input (the message names the value and the fix), nothing written.
docs/market.md, "Calibrating the synthetic market to real days".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lobsim_env.config import MarketConfig, SyntheticConfig
from lobsim_env.data import layout
from lobsim_env.data.layout import ADD, CANCEL, DELETE, EVENT_DTYPE, EXECUTE, HIDDEN, LEVEL, TRADE, Day
from lobsim_env.synthetic import book as bk
from lobsim_env.synthetic.flow import hash_draws
from lobsim_env.synthetic.market import SyntheticMarket
from lobsim_env.validation import InputError

NONE, LIMIT, MARKET, CANCELLED, HIDDEN_EXEC = range(5)
"""An event's part in the order flow: none (a halt, a level restated, a decrement a trade explains, the opening
snapshot), a limit order, a visible execution, a cancel, an execution against hidden size."""
MAX_LEVEL = 256
"""Levels counted one by one; those further from the best share the last bin."""
L2_TRADE_NS = 1_000_000_000
"""L2: a level's decrease within 1 s after a trade at or through its price is the trade's, up to its size."""
SIGN_LAGS = 10
"""Market order signs are compared 1 .. SIGN_LAGS orders apart (signal_strength's figure)."""
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class CalibrationError(InputError):
    """A calibration that cannot run on its input (the days, an option, the output path): names it and the fix."""


@dataclass(kw_only=True)
class Tally:
    """What the measurement keeps of one or more streams of events and books; `+` pools two."""

    flow: np.ndarray = field(default_factory=lambda: np.zeros(5, np.int64))
    """Events by part in the flow (NONE, LIMIT, MARKET, CANCELLED, HIDDEN_EXEC); executions grouped into orders."""
    limit_levels: np.ndarray = field(default_factory=lambda: np.zeros(MAX_LEVEL + 1, np.int64))
    """Limit orders by level d from the opposite best (the synthetic market's placement); the last bin: beyond."""
    cancel_levels: np.ndarray = field(default_factory=lambda: np.zeros(MAX_LEVEL + 1, np.int64))
    """Cancels by level d from their own side's best."""
    limit_units: np.ndarray = field(default_factory=lambda: np.zeros(0))
    cancel_units: np.ndarray = field(default_factory=lambda: np.zeros(0))
    market_units: np.ndarray = field(default_factory=lambda: np.zeros(0))
    best_units: np.ndarray = field(default_factory=lambda: np.zeros(0))
    """The size at the best bid and at the best ask of every row with both, in units."""
    spreads: np.ndarray = field(default_factory=lambda: np.zeros(MAX_LEVEL + 1, np.int64))
    """Rows with both sides by spread in ticks (bin 0: locked or crossed; the last: wider)."""
    mid: np.ndarray = field(default_factory=lambda: np.zeros(4))
    """Events between the settled rows compared, the moves of the mid between them, the sum of their squares
    (ticks^2) and of their sizes (ticks)."""
    signs: np.ndarray = field(default_factory=lambda: np.zeros((2, SIGN_LAGS + 1)))
    """Market orders' signs (+1 a buy): [0, 0] their sum, [1, 0] their number; [0, k] the sum of products of signs k
    orders apart in one stream, [1, k] their number."""
    imbalance: np.ndarray = field(default_factory=lambda: np.zeros(7))
    """Rows with a next mid move: n, sum x, sum y, sum xy, sum xx, hits (sign x = y), n with x != 0; x the top
    imbalance (q_bid - q_ask) / (q_bid + q_ask), y the sign of the next mid move."""

    def __add__(self, other: Tally) -> Tally:
        cat = ("limit_units", "cancel_units", "market_units", "best_units")
        return Tally(
            **{
                f.name: np.concatenate([getattr(self, f.name), getattr(other, f.name)])
                if f.name in cat
                else getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)
            }
        )


def top_of_book(book: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(bid, bid size, ask, ask size) [n] of book.npy rows in ticks of k venue ticks: a bid's price rounds down, an
    ask's up (a coarse quote is never better than the venue's), and the size at the best is every visible level's
    that rounds to it. An empty side has size 0."""
    ask, ask_q, bid, bid_q = (np.asarray(book[:, i::4]) for i in range(4))
    if k > 1:
        bid, ask = bid // k, -(-ask // k)
    best_bid, best_ask = bid[:, 0], ask[:, 0]
    qb = np.where((bid == best_bid[:, None]) & (bid_q > 0), bid_q, 0).sum(axis=1)
    qa = np.where((ask == best_ask[:, None]) & (ask_q > 0), ask_q, 0).sum(axis=1)
    return best_bid, qb, best_ask, qa


def flow_of_l3(events: np.ndarray) -> np.ndarray:
    """Each L3 event's part in the flow (ADD a limit, CANCEL / DELETE a cancel, EXECUTE / HIDDEN an execution)."""
    kinds = np.full(256, NONE, np.int8)
    kinds[[ADD, CANCEL, DELETE, EXECUTE, HIDDEN]] = [LIMIT, CANCELLED, CANCELLED, MARKET, HIDDEN_EXEC]
    return kinds[events["kind"]]


def flow_of_l2(events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(part in the flow, lots) of each L2 event. A level that grows is a limit order of the growth; a trade print
    is an execution; a level that shrinks is a cancel, but for the part a trade on its side at or through its
    price in the second before explains (L2_TRADE_NS). The opening snapshot (the events at the first timestamp)
    is no flow."""
    kind, delta, side, price, ts = events["kind"], events["delta"], events["side"], events["price"], events["ts"]
    flow = np.full(len(events), NONE, np.int8)
    lots = np.where(kind == TRADE, events["size"], np.abs(delta))
    flow[(kind == LEVEL) & (delta > 0)] = LIMIT
    flow[kind == TRADE] = MARKET
    shrink = (kind == LEVEL) & (delta < 0)
    flow[shrink] = CANCELLED
    flow[ts == ts[0]] = NONE
    pending = {1: [0, 0, 0], -1: [0, 0, 0]}  # side -> [lots, worst price, ts of the last trade]
    for i in np.flatnonzero(((kind == TRADE) | shrink) & (ts != ts[0])).tolist():
        s, p, t = int(side[i]), int(price[i]), int(ts[i])
        if s not in pending:
            continue
        left, worst, when = pending[s]
        if kind[i] == TRADE:
            worst = p if left == 0 else (min(worst, p) if s == 1 else max(worst, p))
            pending[s] = [left + int(lots[i]), worst, t]
            continue
        if left == 0 or t - when > L2_TRADE_NS or (p < worst if s == 1 else p > worst):
            continue
        taken = min(left, int(lots[i]))
        pending[s][0] = left - taken
        lots[i] -= taken
        if lots[i] == 0:
            flow[i] = NONE
    return flow, lots


def settled_rows(ts: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(settled[n]: the row is the book at the end of its timestamp, as others saw it; before[n]: the settled row
    before each event's timestamp, -1 at a stream's start). A venue's messages of one time (an aggressive order's
    executions, an L2 depth update's levels) pass through states nobody saw: a depth update may remove a level
    before it adds the next, and the book looks wide for a row."""
    n = len(ts)
    opens = first.copy()
    opens[1:] |= ts[1:] != ts[:-1]
    settled = np.ones(n, bool)
    settled[:-1] = opens[1:]
    group = np.maximum.accumulate(np.where(opens, np.arange(n), 0))
    before = np.where(first[group], -1, group - 1)
    return settled, before


def tally(
    events: np.ndarray, flow: np.ndarray, lots: np.ndarray, book: np.ndarray, *, unit: float, k: int, first: np.ndarray
) -> Tally:
    """The Tally of a stream in ticks of k venue ticks and sizes in units of `unit` lots; first[i] marks an event
    that opens a stream (several books or days may lie end to end: nothing is compared across them). The book's
    figures and the levels of orders are read from settled rows (`settled_rows`)."""
    side, ts = events["side"].astype(np.int64), np.asarray(events["ts"])
    price = np.asarray(events["price"])
    if k > 1:
        price = np.where(side == 1, price // k, -(-price // k))
    bid, qb, ask, qa = top_of_book(book, k)
    two_sided = (qb > 0) & (qa > 0) & (ask > bid)
    settled, before = settled_rows(ts, first)
    stream = np.cumsum(first)
    out = Tally()
    # executions of one aggressive order (same time, same resting side, in a row) are one market order
    execs = np.flatnonzero((flow == MARKET) | (flow == HIDDEN_EXEC))
    if execs.size:
        prev = np.maximum(execs - 1, 0)
        same = (execs - 1 == prev) & ~first[execs] & np.isin(flow[prev], (MARKET, HIDDEN_EXEC))
        same &= (ts[prev] == ts[execs]) & (side[prev] == side[execs])
        starts = np.flatnonzero(~same)
        visible = np.add.reduceat((flow[execs] == MARKET).astype(np.int64), starts) > 0
        out.flow[MARKET], out.flow[HIDDEN_EXEC] = int(visible.sum()), int((~visible).sum())
        out.market_units = np.add.reduceat(lots[execs], starts)[visible] / unit
        sign = -side[execs[starts]][visible]  # the resting side hit: the asks (-1) for a buy
        where = stream[execs[starts]][visible]
        out.signs[:, 0] = sign.sum(), sign.size
        for lag in range(1, min(SIGN_LAGS, sign.size - 1) + 1):
            same_stream = where[lag:] == where[:-lag]
            out.signs[:, lag] = (sign[lag:] * sign[:-lag])[same_stream].sum(), same_stream.sum()
    for code in (NONE, LIMIT, CANCELLED):
        out.flow[code] = int((flow == code).sum())
    out.limit_units = lots[flow == LIMIT] / unit
    out.cancel_units = lots[flow == CANCELLED] / unit
    # levels from the best quotes before the event, as the synthetic market places its orders
    i = np.flatnonzero((flow == LIMIT) | (flow == CANCELLED))
    j = before[i]
    i, j = i[j >= 0], j[j >= 0]
    i, j = i[two_sided[j]], j[two_sided[j]]
    bid_side, is_limit = side[i] == 1, flow[i] == LIMIT
    d = np.where(
        is_limit,
        np.where(bid_side, ask[j] - 1 - price[i], price[i] - bid[j] - 1),
        np.where(bid_side, bid[j] - price[i], price[i] - ask[j]),
    )
    keep = d >= 0  # a limit through the opposite best (a marketable order's rest): no level
    d = np.minimum(d, MAX_LEVEL)
    out.limit_levels = np.bincount(d[keep & is_limit], minlength=MAX_LEVEL + 1)
    out.cancel_levels = np.bincount(d[keep & ~is_limit], minlength=MAX_LEVEL + 1)
    # the book at settled rows: spread, size at the best, mid moves
    r = np.flatnonzero(settled & two_sided)
    out.spreads = np.bincount(np.minimum(ask[r] - bid[r], MAX_LEVEL), minlength=MAX_LEVEL + 1)
    out.best_units = np.concatenate([qb[r], qa[r]]) / unit
    mid2 = bid + ask
    pair = stream[r[1:]] == stream[r[:-1]]
    dm = (mid2[r[1:]] - mid2[r[:-1]])[pair] / 2
    out.mid = np.array([(r[1:] - r[:-1])[pair].sum(), (dm != 0).sum(), (dm * dm).sum(), np.abs(dm).sum()])
    # the imbalance at a settled row against the sign of the stream's next mid move
    moved = np.flatnonzero(pair & (mid2[r[1:]] != mid2[r[:-1]])) + 1  # indices into r of rows after a move
    nxt = np.searchsorted(moved, np.arange(r.size), side="right")
    has = nxt < moved.size
    rows, after = r[has], r[moved[nxt[has]]]
    rows, after = rows[stream[after] == stream[rows]], after[stream[after] == stream[rows]]
    if rows.size:
        x = (qb[rows] - qa[rows]) / (qb[rows] + qa[rows])
        y = np.sign(mid2[after] - mid2[rows]).astype(np.float64)
        signed = x != 0
        hits = (np.sign(x) == y) & signed
        out.imbalance = np.array([x.size, x.sum(), y.sum(), (x * y).sum(), (x * x).sum(), hits.sum(), signed.sum()])
    return out


def tally_day(day: Day, k: int, span: tuple[int, int] | None = None) -> tuple[Tally, int]:
    """(the day's Tally in ticks of k venue ticks and units of its median order, its events of the opening snapshot
    (L2) left out of the flow). span (lo, hi): its events lo..hi-1 alone (a block: --blocks), the L2 flow read
    from the day's start (a trade before lo explains a decrease after it)."""
    lo, hi = span or (0, day.manifest.n_events)
    events = np.asarray(day.events[:hi])
    if day.manifest.depth == "L3":
        flow, lots, opening = flow_of_l3(events), np.asarray(events["size"]), 0
    else:
        flow, lots = flow_of_l2(events)
        opening = int((events["ts"] == events["ts"][0]).sum()) if lo == 0 else 0
    first = np.zeros(hi - lo, bool)
    first[0] = True
    t = tally(events[lo:], flow[lo:], lots[lo:], np.asarray(day.book[lo:hi]), unit=float(day.manifest.order_lots),
              k=k, first=first)  # fmt: skip
    return t, opening


def decay_mle(counts: np.ndarray) -> float:
    """The maximum-likelihood r of P(d) proportional to r**d over d = 0 .. len(counts) - 1, given counts by d: the r
    whose truncated geometric has the data's mean (an exponential family), by bisection."""
    levels, n = len(counts), counts.sum()
    if n == 0 or levels < 2:
        return 1.0
    mean = float((np.arange(levels) * counts).sum() / n)
    if mean >= (levels - 1) / 2:
        return 1.0

    def geometric_mean(r: float) -> float:
        return r / (1 - r) - levels * r**levels / (1 - r**levels)

    lo, hi = 1e-6, 1 - 1e-9
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if geometric_mean(mid) < mean else (lo, mid)
    return (lo + hi) / 2


def choose_levels(counts: np.ndarray, coverage: float, most: int) -> tuple[int, float]:
    """(the fewest levels, at least 2 and at most `most`, holding `coverage` of the counts; the share they hold)."""
    share = np.cumsum(counts) / max(counts.sum(), 1)
    levels = int(min(max(np.searchsorted(share, coverage) + 1, 2), most))
    return levels, float(share[levels - 1])


def _sizes(units: np.ndarray) -> dict:
    """Mean, mean with sizes above the 99th percentile counted at it (a few huge orders move a mean a lot), median
    and 90th percentile of sizes in units."""
    if not units.size:
        return {"mean": 0.0, "mean_clipped_p99": 0.0, "median": 0.0, "p90": 0.0}
    p50, p90, p99 = np.percentile(units, [50, 90, 99])
    clipped = np.minimum(units, p99).mean()
    return {
        k: round(float(v), 4)
        for k, v in zip(("mean", "mean_clipped_p99", "median", "p90"), (units.mean(), clipped, p50, p90), strict=True)
    }


def sign_autocorrelation(signs: np.ndarray) -> list[float]:
    """The autocorrelation of market order signs at lags 1 .. SIGN_LAGS, from a Tally's `signs`."""
    m = signs[0, 0] / max(signs[1, 0], 1)
    prod = signs[0, 1:] / np.maximum(signs[1, 1:], 1)
    return [round(float(x), 6) for x in (prod - m * m) / max(1 - m * m, 1e-9)]


def figures(t: Tally, levels: int) -> dict:
    """The measured figures of a Tally; level decays are fitted over `levels` levels."""
    flow = t.flow[[LIMIT, MARKET, CANCELLED]]
    total = max(int(flow.sum()), 1)
    near = np.array([t.limit_levels[:levels].sum(), t.flow[MARKET], t.cancel_levels[:levels].sum()])
    pooled = t.limit_levels + t.cancel_levels
    rows = max(int(t.spreads.sum()), 1)
    n, sx, sy, sxy, sxx, hits, signed = t.imbalance
    var = n * sxx - sx * sx
    acf = sign_autocorrelation(t.signs)
    executions = max(int(t.flow[[MARKET, HIDDEN_EXEC]].sum()), 1)
    return {
        "events": {
            "limit": int(t.flow[LIMIT]),
            "market": int(t.flow[MARKET]),
            "cancel": int(t.flow[CANCELLED]),
            "hidden_executions": int(t.flow[HIDDEN_EXEC]),
            "no_flow": int(t.flow[NONE]),
        },
        "shares": dict(
            zip(("limit", "market", "cancel"), (round(float(x / max(near.sum(), 1)), 6) for x in near), strict=True)
        ),
        "shares_all_levels": dict(
            zip(("limit", "market", "cancel"), (round(float(x) / total, 6) for x in flow), strict=True)
        ),
        "hidden_share_of_executions": round(float(t.flow[HIDDEN_EXEC]) / executions, 6),
        "level_decay": {
            "pooled": round(decay_mle(pooled[:levels]), 6),
            "limit": round(decay_mle(t.limit_levels[:levels]), 6),
            "cancel": round(decay_mle(t.cancel_levels[:levels]), 6),
            "levels": levels,
            "coverage": round(float(pooled[:levels].sum() / max(pooled.sum(), 1)), 6),
            "limit_by_level": t.limit_levels[:16].tolist(),
            "cancel_by_level": t.cancel_levels[:16].tolist(),
        },
        "limit_size_units": _sizes(t.limit_units),
        "cancel_size_units": _sizes(t.cancel_units),
        "market_order_units": _sizes(t.market_units),
        "best_queue_units": _sizes(t.best_units),
        "spread": {
            "mean_ticks": round(float((np.arange(MAX_LEVEL + 1) * t.spreads).sum() / rows), 4),
            "one_tick_share": round(float(t.spreads[1] / rows), 6),
            "locked_or_crossed_share": round(float(t.spreads[0] / rows), 6),
        },
        "mid": {
            # per event of the flow the synthetic market models (`shares`), per message of the day
            "move_share_per_event": round(float(t.mid[1] / max(near.sum(), 1)), 6),
            "std_ticks_per_event": round(math.sqrt(t.mid[2] / max(near.sum(), 1)), 6),
            "move_share_per_message": round(float(t.mid[1] / max(t.mid[0], 1)), 6),
            "mean_abs_move_ticks": round(float(t.mid[3] / max(t.mid[1], 1)), 4),
        },
        "market_sign_autocorrelation": {"mean_lags_1_10": round(float(np.mean(acf)), 6), "by_lag": acf},
        "imbalance": {
            "rows": int(n),
            "hit_rate": round(float(hits / max(signed, 1)), 6),
            "slope": round(float((n * sxy - sx * sy) / var), 6) if var > 0 else 0.0,
        },
    }


@dataclass(kw_only=True, frozen=True)
class SyntheticFlowRecord:
    """The synthetic market's own flow as a day of the cache holds it (layout.py): n_books books end to end."""

    events: np.ndarray
    """EVENT_DTYPE[n]: every event that changed a book (ADD, CANCEL of one unit, EXECUTE), ts its index."""
    book: np.ndarray
    """int64[n, 4]: the best quotes after each event (book.npy's columns, one level)."""
    first: np.ndarray
    """bool[n]: the first event of each book."""
    attempts: np.ndarray
    """[3] the limit orders, market orders and cancels drawn (a cancel may find nothing to take)."""


def synthetic_flow(cfg: MarketConfig, *, n_books: int, n_steps: int, seed: int) -> SyntheticFlowRecord:
    """n_books synthetic books stepped n_steps steps with no agent, recorded event by event; a step is the
    synthetic market's (regime, `events_per_step` events, recentring), its draws its own hash of the book's key."""
    market = SyntheticMarket(cfg)
    flow_model, state = market.flow_model, market.new_state(n_books)
    keys = np.random.default_rng(seed).integers(1, 2**63, n_books, dtype=np.uint64)
    market.reset_rows(state, np.arange(n_books), keys)
    b, E = state.book, cfg.events_per_step
    W, rows2, S = b.window, b.rows2, n_steps * E
    depth, best = b.depth.reshape(-1), b.best.reshape(-1)
    kind, side, lvl, change, best_bid, best_ask, base = np.zeros((7, S, n_books), np.int64)
    bid_q, ask_q = np.zeros((2, S, n_books), depth.dtype)
    attempts = np.zeros(3, np.int64)
    f, tmp, q0 = np.zeros(n_books, np.int64), np.zeros(n_books, np.int64), np.zeros(n_books, depth.dtype)
    for t in range(n_steps):
        h = hash_draws(state.key, state.t, E + 1)
        state.regime = flow_model.step_regime(state.regime, h[E])
        ev = flow_model.prepare(h[:E], state.regime)
        now = slice(t * E, (t + 1) * E)
        attempts += [ev.is_limit.sum(), ev.is_market.sum(), ev.is_cancel.sum()]
        kind[now] = np.where(ev.is_limit, ADD, np.where(ev.is_market, EXECUTE, CANCEL))
        side[now], base[now] = ev.side, b.base
        for e in range(E):
            i = t * E + e
            np.add(best[rows2 + ev.anchor[e]], ev.offset[e], out=lvl[i])
            np.add(rows2, ev.side[e], out=f)
            f *= W
            f += np.clip(lvl[i], 0, W - 1)
            np.take(depth, f, out=q0)
            ev.apply(b, e)
            np.subtract(depth[f], q0, out=change[i])
            np.take(best, rows2, out=best_bid[i])
            np.take(best, rows2 + 1, out=best_ask[i])
            np.add(rows2 * W, np.maximum(best_bid[i], 0), out=tmp)
            np.take(depth, tmp, out=bid_q[i])
            np.add((rows2 + 1) * W, np.minimum(best_ask[i], W - 1), out=tmp)
            np.take(depth, tmp, out=ask_q[i])
        bk.recentre(b, market.margin, cfg.synthetic.base_depth)
        state.t += 1
    pick = np.flatnonzero(change.T.reshape(-1))  # the events that changed a book, book by book
    slot, book_id = pick % S, pick // S
    at = (slot, book_id)
    n = pick.size
    bb, ba = best_bid[at], best_ask[at]
    events = np.zeros(n, EVENT_DTYPE)
    events["ts"] = np.arange(n)
    events["kind"], events["side"], events["price"] = kind[at], 1 - 2 * side[at], base[at] + lvl[at]
    events["size"], events["delta"], events["first_seen"] = np.abs(change[at]), change[at], -1
    book = np.zeros((n, 4), np.int64)
    book[:, 0] = np.where(ba < W, base[at] + ba, 0)
    book[:, 1] = np.where(ba < W, ask_q[at], 0)
    book[:, 2] = np.where(bb >= 0, base[at] + bb, 0)
    book[:, 3] = np.where(bb >= 0, bid_q[at], 0)
    first = np.ones(n, bool)
    first[1:] = book_id[1:] != book_id[:-1]
    return SyntheticFlowRecord(events=events, book=book, first=first, attempts=attempts)


@dataclass(kw_only=True, frozen=True)
class Fit:
    """A fitted synthetic flow, what it was fitted to, and the fitted market's own figures."""

    synthetic: SyntheticConfig
    measured: dict
    """figures() of the days."""
    at_fit: dict
    """figures() of the fitted synthetic market, measured as the days are (a fresh simulation)."""
    rounds: list
    """Each simulation round: the parameters simulated and what they gave (how the fit converged)."""


def _simulate(cfg: MarketConfig, books: int, steps: int, seed: int, levels: int) -> tuple[dict, np.ndarray]:
    """(figures of the synthetic market's flow, the share of each kind drawn that a day would show: limit orders,
    market orders, cancels)."""
    rec = synthetic_flow(cfg, n_books=books, n_steps=steps, seed=seed)
    t = tally(rec.events, flow_of_l3(rec.events), rec.events["size"], rec.book, unit=1.0, k=1, first=rec.first)
    return figures(t, levels), t.flow[[LIMIT, MARKET, CANCELLED]] / np.maximum(rec.attempts, 1)


def _size_ratio(f: dict) -> float:
    """The mean limit order over the mean cancel (figures())."""
    return f["limit_size_units"]["mean_clipped_p99"] / max(f["cancel_size_units"]["mean_clipped_p99"], 1e-9)


def _queue_in_cancels(f: dict) -> float:
    """The mean queue at the best over the mean cancel: the cancels it takes to empty it (figures())."""
    return f["best_queue_units"]["mean_clipped_p99"] / max(f["cancel_size_units"]["mean_clipped_p99"], 1e-9)


def _solve_rates(shares: np.ndarray, rate: np.ndarray, success: np.ndarray, elasticity: np.ndarray) -> np.ndarray:
    """Rates r summing to 1 whose kinds a day would show in `shares` (r_i x success_i proportional to shares_i), a
    kind's success taken as success_i x (r_i / rate_i) ** elasticity_i near the rates simulated: r_i = (lam x
    shares_i x rate_i ** e_i / success_i) ** (1 / (1 + e_i)), lam by bisection."""
    e = np.clip(elasticity, -0.8, 0.5)
    base = np.maximum(shares, 1e-9) * rate**e / success
    lo, hi = -60.0, 60.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ((np.exp(mid) * base) ** (1 / (1 + e))).sum() < 1 else (lo, mid)
    return (np.exp(lo) * base) ** (1 / (1 + e))


def _rates(shares: np.ndarray) -> dict:
    """limit / market / cancel rates rounded to 4 decimals that sum to 1 (the cancel rate takes the rest)."""
    p = shares / shares.sum()
    limit, market = round(float(p[0]), 4), round(float(p[1]), 4)
    return {"limit_rate": limit, "market_rate": market, "cancel_rate": round(1.0 - limit - market, 4)}


def fit(
    measured: Tally,
    base: MarketConfig,
    *,
    coverage: float = 0.95,
    max_levels: int = 16,
    books: int = 512,
    steps: int = 250,
    seed: int = 0,
    rounds: int = 4,
) -> Fit:
    """Fits base.synthetic's flow to a Tally (the module's docstring says how); each simulation is `books` books
    of `steps` steps of base's events_per_step, all from `seed` (common random numbers: a round's correction is the
    parameters' effect, not noise)."""
    pooled = measured.limit_levels + measured.cancel_levels
    if measured.flow[[LIMIT, MARKET, CANCELLED]].sum() == 0 or pooled.sum() == 0:
        raise CalibrationError(
            "the days hold no limit orders or cancels next to a two-sided book: nothing to fit; pick days with "
            "order flow (--days)"
        )
    levels, _ = choose_levels(pooled, coverage, max_levels)
    target = figures(measured, levels)
    shares = np.array([target["shares"][k] for k in ("limit", "market", "cancel")])
    want_decay = target["level_decay"]["pooled"]
    s = dataclasses.replace(
        base.synthetic,
        **_rates(shares),
        levels=levels,
        window_ticks=max(base.synthetic.window_ticks, 4 * levels),
        level_decay=round(max(want_decay, 0.01), 4),
        max_limit_size=max(1, round(2 * _size_ratio(target) - 1)),  # sizes 1..M have mean (M + 1) / 2
        base_depth=max(1, round(_queue_in_cancels(target))),
    )
    trace = []

    def simulate(s: SyntheticConfig, seed: int) -> tuple[dict, np.ndarray]:
        at, success = _simulate(dataclasses.replace(base, synthetic=s), books, steps, seed, levels)
        trace.append({"simulated": dataclasses.asdict(s), "shares": at["shares"], "level_decay": at["level_decay"]
                      ["pooled"], "best_queue_mean": at["best_queue_units"]["mean_clipped_p99"],
                      "sign_autocorrelation": at["market_sign_autocorrelation"]["mean_lags_1_10"]})  # fmt: skip
        return at, success

    # a market order's sign is the regime's with probability (1 + s) / 2: sign autocorrelation scales with s**2
    at, _ = simulate(dataclasses.replace(s, signal_strength=1.0), seed)
    want_acf = target["market_sign_autocorrelation"]["mean_lags_1_10"]
    full = at["market_sign_autocorrelation"]["mean_lags_1_10"]
    s = dataclasses.replace(
        s, signal_strength=round(min(math.sqrt(max(want_acf, 0) / full), 1.0), 3) if full > 0 else 0.0
    )
    decay, best, last = s.level_decay, None, None
    for _ in range(rounds):
        at, success = simulate(s, seed)
        got = np.array([at["shares"][k] for k in ("limit", "market", "cancel")])
        rate = np.maximum([s.limit_rate, s.market_rate, s.cancel_rate], 1e-6)
        success = np.maximum(success, 1e-3)
        miss = float(np.abs(got - shares).sum() + abs(at["level_decay"]["pooled"] - want_decay))
        if best is None or miss < best[0]:
            best = (miss, s)
        elasticity = np.zeros(3)  # of a kind's success in its rate: a cancel finds less to take as cancels rise
        if last is not None:
            d_rate = np.log(rate / last[0])
            moved = np.abs(d_rate) > 1e-3
            elasticity[moved] = np.log(success / last[1])[moved] / d_rate[moved]
        last = (rate, success)
        decay = min(max(decay + want_decay - at["level_decay"]["pooled"], 0.01), 1.0)
        s = dataclasses.replace(
            s, **_rates(_solve_rates(shares, rate, success, elasticity)), level_decay=round(decay, 4)
        )
    s = best[1] if best else s
    s = dataclasses.replace(base, synthetic=s).validate().synthetic
    at, _ = simulate(s, seed + 1)  # a fresh draw: the fit's own figures, not its seed's
    return Fit(synthetic=s, measured=target, at_fit=at, rounds=trace)


def settled_quotes(
    day: Day, *, rows: int = 200_000, span: tuple[int, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(best bid, best ask) in venue ticks of the day's settled two-sided rows (span (lo, hi): of events lo..hi-1
    alone), at most `rows` of them evenly spaced."""
    lo, hi = span or (0, day.manifest.n_events)
    ts = np.asarray(day.events["ts"][lo:hi])
    first = np.zeros(len(ts), bool)
    first[0] = True
    settled, _ = settled_rows(ts, first)
    pick = np.flatnonzero(settled)[:: max(1, int(settled.sum()) // rows)]
    bid, qb, ask, qa = top_of_book(np.asarray(day.book[lo:hi][pick]), 1)
    ok = (qb > 0) & (qa > 0) & (ask > bid)
    return bid[ok], ask[ok]


def one_tick_share(quotes: list[tuple[np.ndarray, np.ndarray]], k: int) -> float:
    """The share of settled_quotes whose spread is one tick in ticks of k venue ticks (a bid rounds down, an ask up)."""
    bid, ask = np.concatenate([q[0] for q in quotes]), np.concatenate([q[1] for q in quotes])
    return float((-(-ask // k) - bid // k == 1).mean()) if bid.size else 0.0


def choose_tick_multiple(quotes: list[tuple[np.ndarray, np.ndarray]]) -> int:
    """The fewest venue ticks per tick making the spread of the days' settled_quotes one tick at least half of the
    time, as the synthetic market's spread mostly is: 1 for a large-tick name."""
    spreads = np.concatenate([ask - bid for bid, ask in quotes])
    if not spreads.size:
        raise CalibrationError("the days never show a two-sided book: nothing to measure; pick other days (--days)")
    most = 4 * int(np.median(spreads)) + 1
    return next((k for k in range(1, most) if one_tick_share(quotes, k) >= 0.5), most)


def day_notes(m: layout.Manifest) -> list[str]:
    """What a day's data leaves out that the fit would need."""
    notes = []
    if m.source == "lobster":
        notes.append(
            f"{m.key}: LOBSTER's messages cover only the book's first {m.levels} level(s): flow deeper than that "
            "is not in the day" + (" (1 level: every cancel is at the best)" if m.levels == 1 else "")
        )
    if m.depth == "L2":
        notes.append(
            f"{m.key}: L2: a depth update nets every order at a price over the venue's update interval, so limit "
            "orders and cancels are counted as level changes (fewer than the orders) and a trade's decrease is told "
            "from a cancel by time and price alone"
        )
    return notes


@dataclass(kw_only=True, frozen=True)
class Calibration:
    """A fit and what it came from."""

    fit: Fit
    days: list
    """The days' keys."""
    tick_multiple: int
    per_day: dict
    """Day key -> what it is and its own shares and spread."""
    notes: list
    """What the fit could not see or match, in words."""


def calibrate(
    cache: str | Path,
    names: list[str] | None = None,
    *,
    tick_multiple: int | None = None,
    coverage: float = 0.95,
    max_levels: int = 16,
    books: int = 512,
    steps: int = 250,
    seed: int = 0,
    base: MarketConfig | None = None,
    blocks: int = 1,
) -> Calibration:
    """Measures the days `names` picks of the cache (layout.select_days; None: all) and fits base's synthetic flow
    to them (fit()); tick_multiple None picks K (choose_tick_multiple). With blocks > 1 each day is cut into that
    many blocks of equal time (the replay market's, MarketConfig.blocks) and a name ending in '#k' picks block k
    alone: the walk-forward fits a fold's training blocks, never its validation or test ones. Each simulation is
    `books` books of `steps` steps. DataError / CalibrationError naming a bad input."""
    base = base or MarketConfig()
    manifests, days, spans, keys = periods(cache, list(names or ()), blocks)
    quotes = [settled_quotes(day, span=span) for day, span in zip(days, spans, strict=True)]
    k = tick_multiple or choose_tick_multiple(quotes)
    tallies = [tally_day(day, k, span) for day, span in zip(days, spans, strict=True)]
    pooled = sum((t for t, _ in tallies), Tally())
    fitted = fit(pooled, base, coverage=coverage, max_levels=max_levels, books=books, steps=steps,
                 seed=seed)  # fmt: skip
    lv = fitted.measured["level_decay"]
    per_day = {}
    for key, m, (t, opening), (bid, ask) in zip(keys, manifests, tallies, quotes, strict=True):
        f = figures(t, lv["levels"])
        per_day[key] = {
            "source": m.source,
            "depth": m.depth,
            "book_levels": m.levels,
            "unit_lots": m.order_lots,
            "venue_tick_size": m.tick_size,
            "synthetic_tick_size": m.tick_size * k,
            "usd_per_synthetic_tick_per_unit": m.usd_per_tick_lot * m.order_lots * k,
            "opening_snapshot_events": opening,
            "venue_spread": {
                "mean_ticks": round(float((ask - bid).mean()), 4) if bid.size else 0.0,
                "one_tick_share": round(float((ask - bid == 1).mean()), 6) if bid.size else 0.0,
            },
            **{key: f[key] for key in ("events", "shares", "shares_all_levels", "spread", "best_queue_units")},
        }
    notes = [n for m in {m.key: m for m in manifests}.values() for n in day_notes(m)]
    if k > 1:
        notes.append(
            f"small-tick days: the spread is one venue tick on {one_tick_share(quotes, 1):.0%} of rows; measured in "
            f"ticks of {k} venue ticks (--tick-multiple), where it is one tick on {one_tick_share(quotes, k):.0%}"
        )
    if lv["coverage"] < coverage:
        notes.append(
            f"levels={lv['levels']} (--max-levels) holds only {lv['coverage']:.0%} of the limit orders and cancels: "
            "the shares count those within it; the rest of the flow is deeper than the synthetic market reaches"
        )
    notes += [
        "signal_strength matches the autocorrelation of market order signs (lags 1-10), which the planted regime "
        "makes s**2 times that at s=1; real sign persistence comes mostly from split orders, not regimes: a loose map",
        "the imbalance hit rate and slope are reported, not fitted: in the synthetic market they come mostly from "
        "its queue mechanics and do not rise with signal_strength",
        "not fitted: queue_ref, regime_switch_prob, flow_decay, slow_flow_decay and start_tick (written at "
        f"SyntheticConfig's defaults), market.events_per_step (not written; the fit simulated {base.events_per_step}); "
        "base_depth is the days' mean queue at the best in cancels: the book an episode opens with, not a fit of "
        "its flow",
    ]
    return Calibration(fit=fitted, days=keys, tick_multiple=k, per_day=per_day, notes=notes)


def periods(cache: str | Path, names: list[str], blocks: int = 1) -> tuple[list, list[Day], list, list[str]]:
    """(manifests, days opened, (lo, hi) event spans, keys) of the periods `names` picks: each day whole, or with
    blocks > 1 each of its blocks, or block k alone for a name 'key#k' (the replay market's periods, its
    block_range). CalibrationError for a bad block."""
    from lobsim_env.replay.market import block_range

    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 1 <= blocks <= 10_000:
        raise CalibrationError(f"--blocks={blocks!r} must be an int in 1..10000 (each day cut into that many periods)")
    opened: dict[str, Day] = {}
    out: tuple[list, list, list, list] = ([], [], [], [])
    for name in names or [""]:
        base, _, block = name.partition("#")
        if block and (not block.isdigit() or int(block) >= blocks):
            raise CalibrationError(
                f"--days: {name!r} names block {block!r}, and --blocks={blocks} (blocks 0..{blocks - 1}); pass "
                "--blocks N with the walk-forward's N, or name whole days"
            )
        for m in layout.select_days(cache, [base] if base else []):
            day = opened.setdefault(m.key, layout.open_day(layout.day_dir(cache, m)))
            for b in [int(block)] if block else range(blocks):
                for lst, v in zip(out, (m, day, block_range(day, b, blocks), f"{m.key}#{b}" if blocks > 1 else m.key),
                                  strict=True):  # fmt: skip
                    lst.append(v)
    return out


FITTED = ("limit_rate", "market_rate", "cancel_rate", "level_decay", "levels", "max_limit_size", "base_depth",
          "signal_strength", "window_ticks")  # fmt: skip
"""The SyntheticConfig fields a calibration sets (window_ticks only grows to 4 x levels)."""


def _at(d: dict, path: str) -> float:
    for key in path.split("."):
        d = d[key]
    return d


def table(cal: Calibration) -> list[str]:
    """Measured against the fitted market's own figures, and the field each one sets."""
    m, a, s = cal.fit.measured, cal.fit.at_fit, cal.fit.synthetic
    lv = m["level_decay"]

    rows = [
        ("limit share", "shares.limit", f"limit_rate={s.limit_rate}"),
        ("market order share", "shares.market", f"market_rate={s.market_rate}"),
        ("cancel share", "shares.cancel", f"cancel_rate={s.cancel_rate} (attempts: some find nothing)"),
        ("level decay (MLE)", "level_decay.pooled", f"level_decay={s.level_decay} levels={s.levels} "
         f"({lv['coverage']:.1%} of the flow)"),
        ("limit size / cancel size", _size_ratio, f"max_limit_size={s.max_limit_size}"),
        ("best queue / cancel size", _queue_in_cancels, f"base_depth={s.base_depth} (the opening book)"),
        ("sign autocorrelation", "market_sign_autocorrelation.mean_lags_1_10",
         f"signal_strength={s.signal_strength} (loose)"),
        ("imbalance hit rate", "imbalance.hit_rate", "- (reported: a loose map)"),
        ("imbalance slope", "imbalance.slope", "-"),
        ("spread (ticks)", "spread.mean_ticks", "-"),
        ("one-tick spreads", "spread.one_tick_share", "-"),
        ("mid moves per event", "mid.move_share_per_event", "-"),
        ("mid std per event (ticks)", "mid.std_ticks_per_event", "-"),
        ("market order (units)", "market_order_units.mean_clipped_p99", "- (synthetic: 1 or 2)"),
        ("hidden executions", "hidden_share_of_executions", "- (synthetic: none)"),
    ]  # fmt: skip
    out = [f"{'figure':<27}{'measured':>10}{'synthetic':>10}  fitted"]
    for label, what, field_ in rows:
        got = [what(f) if callable(what) else _at(f, what) for f in (m, a)]
        out.append(f"{label:<27}{got[0]:>10.4f}{got[1]:>10.4f}  {field_}")
    return out


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return json.dumps(str(v))


def render(cal: Calibration, name: str, fmt: str, sidecar: str) -> str:
    """The --config file: TOML (with the days, the table and the notes as comments) or JSON."""
    s = dataclasses.asdict(cal.fit.synthetic)
    ordered = {k: s[k] for k in FITTED} | {k: v for k, v in s.items() if k not in FITTED}
    if fmt == "json":
        return json.dumps({"market": {"source": "synthetic", "synthetic": ordered}}, indent=1) + "\n"
    lines = [
        f"# Synthetic market {name!r}: fitted to real days by python -m lobsim_env.calibrate",
        "# (docs/market.md, 'Calibrating the synthetic market to real days'); every measured figure: " + sidecar,
        f"# days: {', '.join(cal.days)}",
        f"# one synthetic tick = {cal.tick_multiple} venue tick(s); one unit = the day's median trade",
        "#",
        *(f"# {row}" for row in table(cal)),
        "#",
        *(f"# - {note}" for note in cal.notes),
        "",
        "[market]",
        'source = "synthetic"',
        "",
        "[market.synthetic]",
        "# fitted",
        *(f"{k} = {_toml_value(ordered[k])}" for k in FITTED),
        "# not fitted: SyntheticConfig's defaults",
        *(f"{k} = {_toml_value(v)}" for k, v in ordered.items() if k not in FITTED),
    ]
    return "\n".join(lines) + "\n"


def write_together(files: dict[Path, str]) -> None:
    """Each file whole or not at all: every one written to a temporary file beside it and fsynced, then each renamed
    into place; on any failure the temporary files are removed and the error raised."""
    tmps: list[tuple[Path, Path]] = []
    try:
        for path, text in files.items():
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmps.append((tmp, path))
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        for tmp, path in tmps:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in tmps:
            tmp.unlink(missing_ok=True)
        raise


def _output(out: str) -> tuple[Path, str, Path]:
    """(--out, its format, the sidecar's path); CalibrationError naming what is wrong with it."""
    path = Path(out)
    fmt = path.suffix[1:].lower()
    if fmt not in ("toml", "json"):
        raise CalibrationError(
            f"--out={out} must end in .toml or .json (what python -m foxhunt_ray.local --config reads)"
        )
    if not path.parent.is_dir():
        raise CalibrationError(
            f"--out={out}: no folder {path.parent}; make it first (mkdir -p {path.parent}) or write elsewhere"
        )
    if path.is_dir():
        raise CalibrationError(f"--out={out} is a folder; name a file in it, e.g. {path / 'calibrated.toml'}")
    return path, fmt, path.with_name(path.stem + ".measured.json")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lobsim_env.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("cache", metavar="CACHE", help="a day cache (python -m lobsim_env.data ingest PATH... --out CACHE)")
    p.add_argument("--days", action="append", default=[], metavar="NAMES",
                   help="the days to fit, comma-separated (venue/instrument/date, an instrument, a date; repeatable); "
                   "default: all")  # fmt: skip
    p.add_argument("--out", required=True, metavar="FILE", help="the config to write: FILE.toml or FILE.json")
    p.add_argument("--name", default=None, help="the market's name in the files (default: FILE's stem)")
    p.add_argument("--tick-multiple", default="auto", metavar="K",
                   help="venue ticks per synthetic tick (default auto: 1 for a large-tick name, else the fewest that "
                   "make the spread one tick half of the time)")  # fmt: skip
    p.add_argument("--blocks", type=int, default=1, metavar="N",
                   help="cut each day into N blocks of equal time, as --data --blocks N does; a --days name 'KEY#k' "
                   "then picks block k (default 1: whole days)")  # fmt: skip
    p.add_argument("--coverage", type=float, default=0.95, help="share of limit orders and cancels `levels` holds")
    p.add_argument("--max-levels", type=int, default=16, help="most levels the flow may reach (default 16)")
    p.add_argument("--sim-books", type=int, default=512, help="books a fitting simulation steps (default 512)")
    p.add_argument("--sim-steps", type=int, default=250, help="steps of each of them (default 250)")
    p.add_argument("--seed", type=int, default=0, help="the simulations' seed (default 0)")
    return p.parse_args(argv)


def _check(args: argparse.Namespace) -> list[str]:
    """Every bad option, worded as a config's errors are."""
    errs = []
    k = args.tick_multiple
    if k != "auto" and not (k.isdigit() and int(k) >= 1):
        errs.append(f"--tick-multiple={k} must be 'auto' or an int >= 1 (venue ticks per synthetic tick)")
    if not 0 < args.coverage <= 1:
        errs.append(f"--coverage={args.coverage} must be in (0, 1], e.g. 0.95")
    if args.max_levels < 2:
        errs.append(f"--max-levels={args.max_levels} must be >= 2 (a decay needs two levels)")
    for flag, v in (("--sim-books", args.sim_books), ("--sim-steps", args.sim_steps)):
        if v < 1:
            errs.append(f"{flag}={v} must be >= 1")
    if args.sim_books * args.sim_steps > 1_000_000:  # 8 events a step, about 100 bytes an event while recorded
        errs.append(
            f"--sim-books={args.sim_books} x --sim-steps={args.sim_steps} must be <= 1,000,000 (memory); the default "
            "512 x 250 measures rates to about 0.001"
        )
    if args.seed < 0:
        errs.append(f"--seed={args.seed} must be >= 0")
    if args.name is not None and not _NAME.match(args.name):
        errs.append(f"--name={args.name!r} must be 1-64 of A-Z a-z 0-9 . _ - (it names the market in the files)")
    return errs


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    try:
        if errs := _check(args):
            raise CalibrationError("; ".join(errs))
        out, fmt, sidecar = _output(args.out)
        name = args.name or out.stem
        if not _NAME.match(name):
            raise CalibrationError(f"--name={name!r} (FILE's stem) must be 1-64 of A-Z a-z 0-9 . _ -; pass --name")
        cal = calibrate(
            args.cache,
            [n for given in args.days for n in given.split(",") if n],
            tick_multiple=None if args.tick_multiple == "auto" else int(args.tick_multiple),
            coverage=args.coverage,
            max_levels=args.max_levels,
            books=args.sim_books,
            steps=args.sim_steps,
            seed=args.seed,
            blocks=args.blocks,
        )
        measured = {
            "name": name,
            "config": str(out),
            "days": cal.days,
            "tick_multiple": cal.tick_multiple,
            "fitted": {k: getattr(cal.fit.synthetic, k) for k in FITTED},
            "measured": cal.fit.measured,
            "at_fit": cal.fit.at_fit,
            "per_day": cal.per_day,
            "notes": cal.notes,
            "fit_rounds": cal.fit.rounds,
        }
        write_together({out: render(cal, name, fmt, sidecar.name), sidecar: json.dumps(measured, indent=1) + "\n"})
    except (InputError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{name}: {len(cal.days)} day(s), one synthetic tick = {cal.tick_multiple} venue tick(s)")
    print("\n".join(table(cal)))
    print("\n".join(f"- {note}" for note in cal.notes))
    print(f"measured figures: {sidecar}")
    s = cal.fit.synthetic
    print(
        f"calibrated={out} days={len(cal.days)} limit_rate={s.limit_rate} market_rate={s.market_rate} "
        f"cancel_rate={s.cancel_rate} level_decay={s.level_decay}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

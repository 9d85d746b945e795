"""B limit-order books as a structure of arrays, every operation vectorised over the books.

Each book holds the resting size at every price tick of a window of W ticks, `depth[b, side, j]` for absolute
tick `base[b] + j` (side 0 = bids, 1 = asks), so a price level is a queue summarised by its total size. Prices
are integer ticks and sizes integer units; nothing is a float and there are no infinite sentinels: an empty
bid side has `best[b, 0] == -1`, an empty ask side `best[b, 1] == W`.

The agent owns at most one resting order per side (`own_tick`, `own_size`, `own_ahead`), included in `depth`.
Its queue position is exact under price-time priority with unit cancels: `own_ahead` is the size that was
resting at its price when it joined; executions at that price consume `own_ahead` first, then the agent,
then what arrived after it; a cancel at that price removes one unit of the others' size, ahead of the agent
when the caller's uniform draw says so (probability own_ahead / others, see `apply_event`), so an
order-level engine fed the same decisions reproduces every fill exactly.

A short loop over the levels a marketable order walks, or over rows that need re-centring, is the only Python
iteration; there is no loop over books or orders.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BID, ASK = 0, 1

# Event codes of `apply_event`; one event per book per call (NONE for books that sit this one out).
NONE, LIMIT_BID, LIMIT_ASK, MARKET_BUY, MARKET_SELL, CANCEL_BID, CANCEL_ASK = range(7)
# The book side an event touches: a market buy takes from the asks, a market sell from the bids.
_EVENT_SIDE = np.array([BID, BID, ASK, ASK, BID, BID, ASK], dtype=np.int64)
_EVENT_KIND = np.array([0, 1, 1, 2, 2, 3, 3], dtype=np.int64)  # 0 none, 1 limit, 2 market, 3 cancel
NO_ORDER = -1
"""own_tick of a side without an agent order (absolute ticks are positive), so one comparison finds it."""
CANCEL_U_RANGE = 65536
"""`cancel_u` is uniform in [0, 65536): the unit cancelled is ahead iff cancel_u*others < ahead*65536."""


@dataclass(kw_only=True, slots=True)
class BookState:
    """B books. Arrays are int64 (depth int32), owned by the state; functions below update them in place."""

    depth: np.ndarray
    """[B, 2, W] int32 resting size per window tick, the agent's own resting size included (int32 halves
    the cache traffic of the random per-book gathers that dominate a step)."""
    base: np.ndarray
    """[B] absolute tick of window index 0."""
    best: np.ndarray
    """[B, 2] window index of the best bid (-1 if none) and best ask (W if none)."""
    own_tick: np.ndarray
    """[B, 2] absolute tick of the agent's resting bid / ask; NO_ORDER (-1) where own_size == 0."""
    own_size: np.ndarray
    """[B, 2] the agent's resting size per side (0 = no order)."""
    own_ahead: np.ndarray
    """[B, 2] size resting ahead of the agent's order at its price."""
    own_filled: np.ndarray
    """[B, 2] passive fills since the last `drain_fills`: contracts bought (bid side) / sold (ask side)."""
    own_filled_ticks: np.ndarray
    """[B, 2] sum of fill price x contracts for those fills, in ticks."""
    signed_volume: np.ndarray
    """[B] market-order volume since the last drain: buys minus sells (the observable 'recent flow')."""
    n_trades: np.ndarray
    """[B] market orders that executed (cumulative, for the stylised facts)."""
    n_cancels: np.ndarray
    """[B] unit cancels that executed (cumulative)."""
    rows2: np.ndarray
    """[B] constant 2 * row: flat index of a row's bid in [B, 2] arrays (cached for the hot path)."""

    @property
    def n_books(self) -> int:
        return self.depth.shape[0]

    @property
    def window(self) -> int:
        return self.depth.shape[2]

    @classmethod
    def empty(cls, n_books: int, window: int) -> BookState:
        z2 = np.zeros((n_books, 2), np.int64)
        best = np.tile(np.array([-1, window], np.int64), (n_books, 1))
        return cls(
            depth=np.zeros((n_books, 2, window), np.int32),
            base=np.zeros(n_books, np.int64),
            best=best,
            own_tick=np.full((n_books, 2), NO_ORDER, np.int64),
            own_size=z2.copy(),
            own_ahead=z2.copy(),
            own_filled=z2.copy(),
            own_filled_ticks=z2.copy(),
            signed_volume=np.zeros(n_books, np.int64),
            n_trades=np.zeros(n_books, np.int64),
            n_cancels=np.zeros(n_books, np.int64),
            rows2=np.arange(0, 2 * n_books, 2),
        )


def open_books(book: BookState, rows: np.ndarray, best_bid_tick: np.ndarray, base_depth: int) -> None:
    """(Re)opens `rows` with `base_depth` at every tick: bids up to `best_bid_tick`, asks above it."""
    W = book.window
    centre = W // 2 - 1
    j = np.arange(W)
    book.depth[rows, BID] = np.where(j <= centre, base_depth, 0)
    book.depth[rows, ASK] = np.where(j > centre, base_depth, 0)
    book.base[rows] = np.asarray(best_bid_tick, np.int64) - centre
    book.best[rows] = (centre, centre + 1)
    for a in (book.own_size, book.own_ahead, book.own_filled, book.own_filled_ticks):
        a[rows] = 0
    book.own_tick[rows] = NO_ORDER
    book.signed_volume[rows] = 0
    book.n_trades[rows] = 0
    book.n_cancels[rows] = 0


def apply_event(
    book: BookState,
    etype: np.ndarray,
    level: np.ndarray,
    size: np.ndarray,
    cancel_u: np.ndarray,
    cancel_gate: np.ndarray | None = None,
) -> None:
    """Applies one event per book (vectorised over all B books).

    etype: [B] event codes (NONE, LIMIT_BID, ..., CANCEL_ASK). level: [B] window index of a limit or a cancel
    (ignored for market orders, which hit the best opposite level). size: [B] units of a limit or a market
    order; a market order takes min(size, best level size) (flow market orders never walk the book).
    A cancel removes exactly one unit of the others' (non-agent) size at that level, if there are `others`
    units and cancel_gate < others (cancel_gate defaults to 0: always, when there is anything to cancel).
    cancel_u: [B] ints in [0, 65536): at the agent's price the cancelled unit is ahead of it iff
    cancel_u * others < own_ahead * 65536, i.e. with probability own_ahead / others for a uniform draw
    (0 forces 'ahead' whenever any size is ahead, 65535 forces 'behind' unless all others are ahead).
    Events that cannot apply are ignored: a limit at or through the opposite best, a level outside the
    window, a market order against an empty side.
    """
    B = book.n_books
    rows2 = np.arange(B) * 2
    etype = np.asarray(etype, np.int64)
    size = np.asarray(size, np.int64)
    if etype.shape != (B,) or ((etype < 0) | (etype >= len(_EVENT_KIND))).any():
        raise ValueError(f"etype must be [{B}] event codes in 0..{len(_EVENT_KIND) - 1}; got {etype!r}")
    sized = (_EVENT_KIND[etype] == 1) | (_EVENT_KIND[etype] == 2)
    if (sized & (size < 1)).any():
        bad = int(np.flatnonzero(sized & (size < 1))[0])
        raise ValueError(
            f"size[{bad}]={int(size[bad])} for a limit or market order: sizes must be >= 1 "
            "(an empty order would move the best quote to an empty level)"
        )
    side = _EVENT_SIDE[etype]
    kind = _EVENT_KIND[etype]
    best_flat = book.best.reshape(-1)
    best_side = best_flat[rows2 + side]
    best_opp = best_flat[rows2 + 1 - side]
    is_limit = kind == 1
    lvl = np.where(kind == 2, best_side, np.asarray(level, np.int64))
    crosses = np.where(side == BID, lvl >= best_opp, lvl <= best_opp)
    is_limit &= ~crosses
    gate = np.zeros(B, np.int64) if cancel_gate is None else np.asarray(cancel_gate, np.int64)
    apply_prepared(
        book,
        side,
        is_limit,
        kind == 2,
        kind == 3,
        lvl,
        size,
        np.asarray(cancel_u, np.int64),
        gate,
    )


def apply_prepared(
    book: BookState,
    side: np.ndarray,
    is_limit: np.ndarray,
    is_market: np.ndarray,
    is_cancel: np.ndarray,
    lvl: np.ndarray,
    size: np.ndarray,
    cancel_u: np.ndarray,
    cancel_gate: np.ndarray,
) -> None:
    """The hot path of `apply_event`: sides and kinds decoded, market levels resolved to the best, limits
    known not to cross (the synthetic flow guarantees it by construction). Arrays are [B]."""
    W = book.window
    sflat = book.rows2 + side
    best_flat = book.best.reshape(-1)
    best_side = best_flat[sflat]
    lvc = np.minimum(np.maximum(lvl, 0), W - 1)
    valid = lvc == lvl
    f = sflat * W + lvc
    depth_flat = book.depth.reshape(-1)
    q = depth_flat[f]

    own_tick = book.own_tick.reshape(-1)[sflat]
    at_own = own_tick == book.base + lvl  # NO_ORDER never matches
    take = np.minimum(size, q)
    take *= is_market & valid
    cancel = is_cancel & valid
    if at_own.any():
        own_here = book.own_size.reshape(-1)[sflat] * at_own
        cancel &= cancel_gate < q - own_here  # others' size only
    else:
        cancel &= cancel_gate < q
    removed = take + cancel
    lim = is_limit & valid
    newq = size * lim
    newq += q
    newq -= removed
    depth_flat[f] = newq

    touched = at_own & (removed > 0)
    if touched.any():
        r = np.flatnonzero(touched)
        sf = sflat[r]
        own_ah = book.own_ahead.reshape(-1)[sf]
        own_sz = book.own_size.reshape(-1)[sf]
        tk = take[r]
        from_ahead = np.minimum(tk, own_ah)
        to_own = np.minimum(tk - from_ahead, own_sz)
        others = q[r] - own_sz
        c_ahead = cancel[r] & (cancel_u[r] * others < own_ah * CANCEL_U_RANGE)
        book.own_ahead.reshape(-1)[sf] = own_ah - from_ahead - c_ahead
        left = own_sz - to_own
        book.own_size.reshape(-1)[sf] = left
        book.own_tick.reshape(-1)[sf] = np.where(left > 0, own_tick[r], NO_ORDER)
        book.own_filled.reshape(-1)[sf] += to_own
        book.own_filled_ticks.reshape(-1)[sf] += to_own * own_tick[r]
    sign = 2 * side - 1  # +1 for the ask side (a market buy took it), -1 for the bid side
    book.signed_volume += take * sign
    book.n_trades += take > 0
    book.n_cancels += cancel

    # Best quotes: a limit can only improve its side; a taken or cancelled best level may empty.
    improve = lim & ((lvl - best_side) * sign < 0)
    best_flat[sflat] = np.where(improve, lvl, best_side)
    emptied = (newq == 0) & (removed > 0) & (lvl == best_side)
    if emptied.any():
        r = np.flatnonzero(emptied)
        _step_best(book, r, side[r])


def _step_best(book: BookState, rows: np.ndarray, s: np.ndarray, probes: int = 3) -> None:
    """The best level of side s[i] of book rows[i] emptied: look a few ticks further out first (the next
    level is nearly always there), and rescan the whole window only for the rows where it is not."""
    W = book.window
    depth = book.depth.reshape(-1)
    o = rows * 2 + s
    step = 2 * s - 1  # bids look down, asks up
    lvl = book.best.reshape(-1)[o]
    for _ in range(probes):
        lvl = lvl + step
        inside = (lvl >= 0) & (lvl < W)
        found = inside & (depth[o * W + np.minimum(np.maximum(lvl, 0), W - 1)] > 0)
        done = found | ~inside  # past the window's edge: the side is empty (best -1 / W)
        book.best.reshape(-1)[o[done]] = lvl[done]
        rest = ~done
        if not rest.any():
            return
        rows, s, o, step, lvl = rows[rest], s[rest], o[rest], step[rest], lvl[rest]
    _rescan_best(book, rows, s)


def _rescan_best(book: BookState, rows: np.ndarray, s: np.ndarray) -> None:
    """Recomputes the best level of side s[i] of book rows[i] from the whole window."""
    W = book.window
    has = book.depth.reshape(-1, W)[rows * 2 + s] > 0  # [n, W]
    any_ = has.any(axis=1)
    top_bid = W - 1 - np.argmax(has[:, ::-1], axis=1)
    low_ask = np.argmax(has, axis=1)
    book.best.reshape(-1)[rows * 2 + s] = np.where(s == BID, np.where(any_, top_bid, -1), np.where(any_, low_ask, W))


def rescan_all(book: BookState, rows: np.ndarray) -> None:
    """Recomputes both best quotes of `rows` from the depth."""
    for s in (BID, ASK):
        _rescan_best(book, rows, np.full(rows.shape[0], s))


def join_best(book: BookState, rows: np.ndarray, side: int, size: np.ndarray) -> np.ndarray:
    """Rests the agent's order of `size` at the best of `side` in `rows` (which must have no order there).

    It queues behind everything resting at that price. Rows whose side is empty are skipped; returns the mask
    (over rows) of orders placed.
    """
    W = book.window
    lvl = book.best[rows, side]
    ok = (lvl >= 0) & (lvl < W) & (size > 0)
    r, lvl, size = rows[ok], lvl[ok], size[ok]
    o = r * 2 + side
    f = o * W + lvl
    depth = book.depth.reshape(-1)
    book.own_ahead.reshape(-1)[o] = depth[f]
    book.own_tick.reshape(-1)[o] = book.base[r] + lvl
    book.own_size.reshape(-1)[o] = size
    depth[f] += size
    return ok


def cancel_own(book: BookState, rows: np.ndarray, side: int) -> None:
    """Cancels the agent's resting order on `side` in `rows` (no-op where there is none)."""
    own_size = book.own_size.reshape(-1)
    o = rows * 2 + side
    keep = own_size[o] > 0
    rows, o = rows[keep], o[keep]
    if rows.size == 0:
        return
    W = book.window
    lvl = book.own_tick.reshape(-1)[o] - book.base[rows]
    f = o * W + lvl
    depth = book.depth.reshape(-1)
    left = depth[f] - own_size[o]
    depth[f] = left
    own_size[o] = 0
    book.own_ahead.reshape(-1)[o] = 0
    book.own_tick.reshape(-1)[o] = NO_ORDER
    emptied = (left == 0) & (lvl == book.best.reshape(-1)[o])
    if emptied.any():
        _step_best(book, rows[emptied], np.full(int(emptied.sum()), side))


def take_liquidity(book: BookState, rows: np.ndarray, side_hit: int, qty: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The agent's marketable order for `qty` walks the levels of `side_hit` (ASK for a buy) in `rows`.

    Fills at each level's price until filled or the window's side is exhausted (the rest is dropped). The
    agent's own resting order on `side_hit` must have been cancelled first (self-trade prevention).
    Returns (filled contracts, sum of price x contracts in ticks), each [len(rows)].
    """
    W = book.window
    filled = np.zeros(rows.shape[0], np.int64)
    ticks = np.zeros(rows.shape[0], np.int64)
    rem = qty.astype(np.int64).copy()
    active = np.flatnonzero(rem > 0)
    depth = book.depth.reshape(-1)
    while active.size:
        r = rows[active]
        lvl = book.best.reshape(-1)[r * 2 + side_hit]
        live = (lvl >= 0) & (lvl < W)
        active, r, lvl = active[live], r[live], lvl[live]
        if active.size == 0:
            break
        f = (r * 2 + side_hit) * W + lvl
        q = depth[f]
        c = np.minimum(rem[active], q)
        depth[f] = q - c
        filled[active] += c
        ticks[active] += c * (book.base[r] + lvl)
        rem[active] -= c
        emptied = q == c
        if emptied.any():
            _step_best(book, r[emptied], np.full(int(emptied.sum()), side_hit))
        active = active[rem[active] > 0]
    book.signed_volume[rows] += np.where(side_hit == ASK, filled, -filled)
    return filled, ticks


def drain_fills(book: BookState) -> tuple[np.ndarray, np.ndarray]:
    """Returns and clears the agent's passive fills: (signed contracts [B], signed cash flow in ticks [B]).

    Bought contracts are positive and cost cash (negative ticks); sold contracts are negative.
    """
    qty = book.own_filled[:, BID] - book.own_filled[:, ASK]
    cash = book.own_filled_ticks[:, ASK] - book.own_filled_ticks[:, BID]
    book.own_filled[:] = 0
    book.own_filled_ticks[:] = 0
    return qty, cash


def recentre(book: BookState, margin: int, base_depth: int) -> None:
    """Shifts the window of books whose quotes came within `margin` ticks of an edge (or whose side emptied).

    Ticks entering the window hold `base_depth` on the side where they lie (the deep book beyond the window);
    ticks leaving it are dropped, and an agent order left outside the new window is cancelled. A side still
    empty afterwards is refilled with `base_depth` from one tick beyond the other side's best (a liquidity
    provider of last resort); with the default flow this never happens.
    """
    W = book.window
    bb, ba = book.best[:, BID], book.best[:, ASK]
    need = (bb < margin) | (ba > W - 1 - margin)
    if not need.any():
        return
    r = np.flatnonzero(need)
    bb, ba = bb[r], ba[r]
    bb_ = np.where(bb < 0, ba - 1, bb)
    ba_ = np.where(ba >= W, bb_ + 1, ba)
    shift = (bb_ + ba_) // 2 - (W // 2 - 1)
    j = np.arange(W)
    src = j[None, :] + shift[:, None]  # [n, W] old index feeding new index j
    inside = (src >= 0) & (src < W)
    srcc = np.clip(src, 0, W - 1)
    old = book.depth[r]
    for s, fill_above in ((BID, False), (ASK, True)):
        gathered = np.take_along_axis(old[:, s], srcc, axis=1)
        fill = np.where((src >= W) if fill_above else (src < 0), base_depth, 0)
        book.depth[r, s] = np.where(inside, gathered, fill)
    book.base[r] += shift
    for s in (BID, ASK):
        own_lvl = book.own_tick[r, s] - book.base[r]
        gone = (book.own_size[r, s] > 0) & ((own_lvl < 0) | (own_lvl >= W))
        book.own_size[r[gone], s] = 0
        book.own_ahead[r[gone], s] = 0
        book.own_tick[r[gone], s] = NO_ORDER
    rescan_all(book, r)
    bb, ba = book.best[r, BID], book.best[r, ASK]
    no_bid, no_ask = bb < 0, ba >= W
    if no_bid.any() or no_ask.any():
        book.depth[r[no_bid], BID] = np.where(j[None, :] < ba[no_bid, None], base_depth, 0)
        book.depth[r[no_ask], ASK] = np.where(j[None, :] > bb[no_ask, None], base_depth, 0)
        rescan_all(book, r)

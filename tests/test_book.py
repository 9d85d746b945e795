"""The batched book: hand cases for each rule, and property tests against a unit-level FIFO model.

The model keeps every unit of resting size in a FIFO list per price (the agent's units tagged), so queue
position, fills and cancels are re-derived from first principles; the batched book must match it exactly,
book by book, after every event, and never be crossed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsim_env.synthetic import book as bk

W = 24
START = 1000  # best bid tick when a book opens


def fresh(n: int = 1, depth: int = 3) -> bk.BookState:
    b = bk.BookState.empty(n, W)
    bk.open_books(b, np.arange(n), np.full(n, START), depth)
    return b


def one(etype: int, level: int = 0, size: int = 1, cancel_u: int = 0, gate: int = 0):
    return [np.array([x]) for x in (etype, level, size, cancel_u, gate)]


def lvl(b: bk.BookState, tick: int, row: int = 0) -> int:
    return tick - int(b.base[row])


def test_open_book_layout():
    b = fresh(2)
    assert (b.best[:, 0] == START - b.base).all() and (b.best[:, 1] == b.best[:, 0] + 1).all()
    assert (b.depth[:, 0, : b.best[0, 0] + 1] == 3).all() and (b.depth[:, 1, : b.best[0, 1]] == 0).all()


def test_limit_improves_and_joins():
    b = fresh()
    bb, ba = b.best[0]
    bk.apply_event(b, *one(bk.LIMIT_BID, bb, 2))
    assert b.depth[0, 0, bb] == 5 and b.best[0, 0] == bb
    # A limit at the best ask would cross: ignored.
    bk.apply_event(b, *one(bk.LIMIT_BID, ba, 2))
    assert b.depth[0, 0, ba] == 0 and b.best[0, 0] == bb


@pytest.mark.parametrize("etype", [bk.LIMIT_ASK, bk.MARKET_BUY])
@pytest.mark.parametrize("size", [0, -1])
def test_empty_or_negative_orders_are_refused_and_change_nothing(etype, size):
    b = fresh(2)
    before = (b.depth.copy(), b.best.copy())
    with pytest.raises(ValueError, match=rf"size\[1\]={size} .*must be >= 1"):
        bk.apply_event(b, np.array([bk.NONE, etype]), np.array([0, b.best[1, 1] - 1]), np.array([1, size]),
                       np.zeros(2, np.int64))
    assert np.array_equal(b.depth, before[0]) and np.array_equal(b.best, before[1])


def test_unknown_event_codes_are_refused():
    with pytest.raises(ValueError, match="event codes"):
        bk.apply_event(fresh(), *one(99)[:4])


def test_market_takes_best_only_and_moves_quote():
    b = fresh(depth=2)
    bb = b.best[0, 0]
    bk.apply_event(b, *one(bk.MARKET_SELL, 0, 5))  # takes min(5, 2): flow market orders never walk
    assert b.depth[0, 0, bb] == 0 and b.best[0, 0] == bb - 1
    assert b.signed_volume[0] == -2 and b.n_trades[0] == 1


def test_queue_position_exact_through_executions_and_cancels():
    b = fresh(depth=3)
    bb = b.best[0, 0]
    bk.join_best(b, np.array([0]), bk.BID, np.array([2]))
    assert b.own_ahead[0, 0] == 3 and b.depth[0, 0, bb] == 5
    bk.apply_event(b, *one(bk.LIMIT_BID, bb, 4))  # arrives behind the agent
    assert b.own_ahead[0, 0] == 3
    bk.apply_event(b, *one(bk.CANCEL_BID, bb, cancel_u=0))  # forced ahead
    assert b.own_ahead[0, 0] == 2 and b.depth[0, 0, bb] == 8
    bk.apply_event(b, *one(bk.CANCEL_BID, bb, cancel_u=65535))  # forced behind
    assert b.own_ahead[0, 0] == 2 and b.depth[0, 0, bb] == 7
    bk.apply_event(b, *one(bk.MARKET_SELL, 0, 2))  # consumes exactly what is ahead
    assert b.own_ahead[0, 0] == 0 and b.own_size[0, 0] == 2 and b.own_filled[0, 0] == 0
    bk.apply_event(b, *one(bk.MARKET_SELL, 0, 1))
    assert b.own_size[0, 0] == 1 and b.own_filled[0, 0] == 1
    assert b.own_filled_ticks[0, 0] == START
    qty, cash = bk.drain_fills(b)
    assert qty[0] == 1 and cash[0] == -START and b.own_filled[0, 0] == 0


def test_cancel_probability_is_ahead_over_others():
    # With 3 ahead of 10 others, a uniform cancel_u lands ahead for exactly 3/10 of [0, 65536).
    b = fresh(1, depth=3)
    bb = b.best[0, 0]
    bk.join_best(b, np.array([0]), bk.BID, np.array([1]))
    bk.apply_event(b, *one(bk.LIMIT_BID, bb, 7))
    u = np.arange(65536)
    ahead = u * 10 < 3 * 65536
    assert abs(ahead.mean() - 0.3) < 1e-4


def test_cancel_never_touches_the_agents_units_and_gate():
    b = fresh(depth=1)
    bb = b.best[0, 0]
    bk.join_best(b, np.array([0]), bk.BID, np.array([1]))
    bk.apply_event(b, *one(bk.CANCEL_BID, bb, gate=1))  # gate 1 >= 1 other: refused
    assert b.depth[0, 0, bb] == 2
    bk.apply_event(b, *one(bk.CANCEL_BID, bb))
    bk.apply_event(b, *one(bk.CANCEL_BID, bb))  # only the agent is left: no-op
    assert b.depth[0, 0, bb] == 1 and b.own_size[0, 0] == 1 and b.own_ahead[0, 0] == 0
    assert b.best[0, 0] == bb and b.n_cancels[0] == 1


def test_take_liquidity_walks_levels():
    b = fresh(depth=2)
    ba = b.best[0, 1]
    filled, ticks = bk.take_liquidity(b, np.array([0]), bk.ASK, np.array([5]))
    assert filled[0] == 5 and ticks[0] == 2 * (START + 1) + 2 * (START + 2) + (START + 3)
    assert b.best[0, 1] == ba + 2 and b.depth[0, 1, ba + 2] == 1


def test_cancel_own_restores_depth_and_best():
    b = fresh(depth=1)
    bk.take_liquidity(b, np.array([0]), bk.BID, np.array([1]))  # best bid moves down one tick
    bb = b.best[0, 0]
    bk.apply_event(b, *one(bk.LIMIT_BID, bb + 1, 1))  # new best one tick up
    bk.join_best(b, np.array([0]), bk.BID, np.array([2]))
    bk.apply_event(b, *one(bk.CANCEL_BID, bb + 1))  # the other unit leaves: the agent is alone at best
    assert b.best[0, 0] == bb + 1 and b.own_ahead[0, 0] == 0
    bk.cancel_own(b, np.array([0]), bk.BID)
    assert b.best[0, 0] == bb and b.depth[0, 0, bb + 1] == 0 and b.own_size[0, 0] == 0


def test_recentre_keeps_absolute_prices_and_refills():
    b = fresh(depth=2)
    before = {int(b.base[0]) + j: int(b.depth[0, 0, j]) for j in range(W)}
    for _ in range(8):  # walk the bid down towards the window's edge
        bk.take_liquidity(b, np.array([0]), bk.BID, np.array([2]))
        bk.apply_event(b, *one(bk.LIMIT_ASK, b.best[0, 0] + 1, 2))
    old_base, bb_abs = int(b.base[0]), int(b.base[0] + b.best[0, 0])
    bk.recentre(b, margin=W // 2 - 2, base_depth=9)
    assert int(b.base[0]) != old_base
    assert int(b.base[0] + b.best[0, 0]) == bb_abs  # the quotes do not move
    for j in range(W):
        tick = int(b.base[0]) + j
        if tick in before and tick <= bb_abs:
            assert b.depth[0, 0, j] == before[tick]
        elif tick < old_base:
            assert b.depth[0, 0, j] == 9  # deep book entering the window


# ---- property tests: the batched book against a unit-level FIFO model ---------------------------------


class FifoBook:
    """Every unit of size in arrival order per (side, tick); the agent's units are True."""

    def __init__(self, b: bk.BookState, row: int):
        self.q = {0: {}, 1: {}}
        for s in (0, 1):
            for j in range(W):
                n = int(b.depth[row, s, j])
                if n:
                    self.q[s][int(b.base[row]) + j] = [False] * n
        self.filled = 0
        self.added = self.taken = self.cancelled = self.trades = 0

    def best(self, s: int) -> int | None:
        ticks = [t for t, u in self.q[s].items() if u]
        if not ticks:
            return None
        return max(ticks) if s == 0 else min(ticks)

    def apply(self, etype: int, tick: int, size: int, cancel_u: int) -> None:
        side = int(bk._EVENT_SIDE[etype])
        kind = int(bk._EVENT_KIND[etype])
        if kind == 1:
            opp = self.best(1 - side)
            if opp is not None and (tick >= opp if side == 0 else tick <= opp):
                return
            self.q[side].setdefault(tick, []).extend([False] * size)
            self.added += size
        elif kind == 2:
            t = self.best(side)
            if t is None:
                return
            units = self.q[side][t]
            self.trades += 1
            for _ in range(min(size, len(units))):
                self.filled += units.pop(0)
                self.taken += 1
        elif kind == 3:
            units = self.q[side].get(tick, [])
            others = units.count(False)
            if others == 0:
                return
            self.cancelled += 1
            if True in units:
                pos = units.index(True)
                ahead = pos
                if cancel_u * others < ahead * 65536:
                    units.pop(pos - 1)  # a unit ahead of the agent
                    return
                behind = [i for i, u in enumerate(units) if not u and i > pos]
                if behind:
                    units.pop(behind[-1])
                    return
            units.pop(max(i for i, u in enumerate(units) if not u))

    def join(self, s: int, size: int) -> None:
        t = self.best(s)
        if t is not None:
            self.q[s][t].extend([True] * size)

    def own(self, s: int) -> tuple[int, int]:
        for units in self.q[s].values():
            if True in units:
                return units.count(True), units.index(True)
        return 0, 0


def _check_same(b: bk.BookState, row: int, m: FifoBook) -> None:
    for s in (0, 1):
        for j in range(W):
            assert b.depth[row, s, j] == len(m.q[s].get(int(b.base[row]) + j, [])), (s, j)
        t = m.best(s)
        expect = (-1 if s == 0 else W) if t is None else t - int(b.base[row])
        assert b.best[row, s] == expect
        size, ahead = m.own(s)
        assert (b.own_size[row, s], b.own_ahead[row, s] if size else 0) == (size, ahead)
    assert b.own_filled[row].sum() == m.filled
    bb, ba = b.best[row]
    assert bb < ba  # never crossed
    assert (b.depth[row, 0, bb + 1 :] == 0).all() and (b.depth[row, 1, : max(ba, 0)] == 0).all()


event = st.tuples(
    st.integers(0, 6),  # etype
    st.sampled_from([0, 0, 0, 0, -1, 1, -2, 2, 3]),  # level relative to the side's best (mostly at it)
    st.integers(1, 3),  # size
    st.sampled_from([0, 65535, 20000, 40000]),  # cancel_u
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(event, min_size=3, max_size=3), min_size=1, max_size=40),
    st.lists(st.tuples(st.integers(0, 1), st.integers(1, 3)), min_size=3, max_size=3),
)
def test_matches_unit_fifo_model(steps, joins):
    B = 3
    b = fresh(B, depth=2)
    models = [FifoBook(b, r) for r in range(B)]
    for r, (s, size) in enumerate(joins):
        bk.join_best(b, np.array([r]), s, np.array([size]))
        models[r].join(s, size)
    for r in range(B):
        _check_same(b, r, models[r])
    total_before = b.depth.sum(axis=(1, 2))
    rows = np.arange(B)
    for evs in steps:
        et = np.array([e[0] for e in evs])
        level = b.best[rows, bk._EVENT_SIDE[et]] + np.array([e[1] for e in evs])
        size = np.array([e[2] for e in evs])
        cu = np.array([e[3] for e in evs])
        bk.apply_event(b, et, level, size, cu)
        for r in range(B):
            if 0 <= level[r] < W or bk._EVENT_KIND[et[r]] == 2:  # the window bounds a book's prices
                models[r].apply(int(et[r]), int(b.base[r]) + int(level[r]), int(size[r]), int(cu[r]))
            _check_same(b, r, models[r])
    for r, m in enumerate(models):
        # Size is conserved: what rests = what rested + limits added - executed - cancelled.
        assert b.depth[r].sum() == total_before[r] + m.added - m.taken - m.cancelled
        assert (b.n_trades[r], b.n_cancels[r]) == (m.trades, m.cancelled)


@pytest.mark.parametrize("seed", [0, 1])
def test_random_flow_keeps_invariants(seed):
    """Many random events over many books: never crossed, depth >= 0, best quotes consistent with depth."""
    rng = np.random.default_rng(seed)
    B = 64
    b = fresh(B, depth=2)
    rows = np.arange(B)
    for _ in range(300):
        et = rng.integers(0, 7, B)
        side = bk._EVENT_SIDE[et]
        anchor = np.where(bk._EVENT_KIND[et] == 1, b.best[rows, 1 - side], b.best[rows, side])
        d = rng.integers(0, 4, B)
        level = np.where(
            bk._EVENT_KIND[et] == 1,
            np.where(side == 0, anchor - 1 - d, anchor + 1 + d),
            np.where(side == 0, anchor - d, anchor + d),
        )
        bk.apply_event(b, et, level, rng.integers(1, 3, B), rng.integers(0, 65536, B))
        bk.recentre(b, 4, 2)
        assert (b.depth >= 0).all()
        assert (b.best[:, 0] < b.best[:, 1]).all()
        bid_top = np.where(b.depth[:, 0].any(1), W - 1 - np.argmax(b.depth[:, 0, ::-1] > 0, 1), -1)
        ask_low = np.where(b.depth[:, 1].any(1), np.argmax(b.depth[:, 1] > 0, 1), W)
        assert (b.best[:, 0] == bid_top).all() and (b.best[:, 1] == ask_low).all()

"""Differential tests: the batched book (lobsim_env.synthetic.book) against the order-level reference engine.

B books are driven at once, each book by its own random events, so every mask in the vectorised code is
exercised with books that take different branches in the same call. One reference `OrderBook` per batched
book receives the same events, and after every call the two must agree on the depth at every price, the best
quotes, the agent's resting orders (price, size, queue_ahead), the agent's fills and the trade counters.

The batched book aggregates depth per tick, so a one-unit market cancel at the agent's price is a choice the
batched book makes (ahead of the agent or behind it, from `cancel_u`); the mirror reads that rule and cancels
one unit of a specific order ahead of or behind the agent's in the reference. Everything else the reference
decides for itself. A flow market order takes at most the best level (`apply_event`'s rule), mirrored as a
market order of that size; a recentre is mirrored from the new window the batched book chose: orders that
left the window are cancelled, entering ticks get `base_depth`, an emptied side is refilled (`recentre`).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsim_env.config import SyntheticConfig
from lobsim_env.synthetic import book as bk
from lobsim_env.synthetic.flow import SyntheticFlow, hash_draws
from tests.reference_engine import OrderBook, Side

SIDE = (Side.BID, Side.ASK)  # batched side index -> engine side
# What each event code means, written out here rather than read from book.py's own tables:
# (book side it touches, kind 1 limit / 2 market / 3 cancel). A market buy takes from the asks.
EVENT = {
    bk.LIMIT_BID: (bk.BID, 1),
    bk.LIMIT_ASK: (bk.ASK, 1),
    bk.MARKET_BUY: (bk.ASK, 2),
    bk.MARKET_SELL: (bk.BID, 2),
    bk.CANCEL_BID: (bk.BID, 3),
    bk.CANCEL_ASK: (bk.ASK, 3),
}
START_TICK = 1000


class Mirror:
    """One reference OrderBook per batched book, fed the same events as the batched book."""

    def __init__(self, book: bk.BookState, base_depth: int):
        self.B, self.W = book.n_books, book.window
        self.engines = [OrderBook() for _ in range(self.B)]
        self.agent: list[list[int | None]] = [[None, None] for _ in range(self.B)]  # resting agent order ids
        self.filled = np.zeros((self.B, 2), np.int64)  # passive agent fills per side, since the last drain
        self.filled_ticks = np.zeros((self.B, 2), np.int64)
        self.signed_volume = np.zeros(self.B, np.int64)
        self.n_trades = np.zeros(self.B, np.int64)
        self.n_cancels = np.zeros(self.B, np.int64)
        self.agent_dropped = 0  # agent orders cancelled because the window left them
        self.base = book.base.copy()
        self.next_id = 0
        for b in range(self.B):
            for j in range(self.W):
                s = bk.BID if book.depth[b, bk.ASK, j] == 0 else bk.ASK
                self.limit(b, s, int(self.base[b]) + j, base_depth)

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def best_index(self, b: int, s: int) -> int:
        """The engine's best of side s as a window index, with the batched book's empty sentinels."""
        eng = self.engines[b]
        price = eng.best_bid() if s == bk.BID else eng.best_ask()
        if price is None:
            return -1 if s == bk.BID else self.W
        return price - int(self.base[b])

    def agent_at(self, b: int, s: int, price: int) -> int | None:
        oid = self.agent[b][s]
        if oid is not None and oid in self.engines[b] and self.engines[b].order(oid).price == price:
            return oid
        return None

    def book_fills(self, b: int, fills) -> None:
        """Records the agent's passive fills among `fills` (the agent as maker)."""
        for f in fills:
            for s in (bk.BID, bk.ASK):
                if f.maker_id == self.agent[b][s]:
                    self.filled[b, s] += f.size
                    self.filled_ticks[b, s] += f.size * f.price

    # ---- flow events --------------------------------------------------------------------------------

    def limit(self, b: int, s: int, price: int, size: int) -> None:
        fills = self.engines[b].limit(order_id=self.new_id(), side=SIDE[s], price=price, size=size)
        assert fills == [], f"book {b}: a flow limit {SIDE[s].name}@{price} crossed the reference: {fills}"

    def market(self, b: int, s_hit: int, size: int) -> None:
        """A flow market order taking from side s_hit: at most the best level, as the batched book does."""
        lvl = self.best_index(b, s_hit)
        if not 0 <= lvl < self.W:
            return
        take = min(size, self.engines[b].depth(SIDE[s_hit], int(self.base[b]) + lvl))
        result = self.engines[b].market(order_id=self.new_id(), side=SIDE[1 - s_hit], size=take)
        assert result.dropped == 0 and {f.price for f in result.fills} == {int(self.base[b]) + lvl}
        self.book_fills(b, result.fills)
        self.signed_volume[b] += take if s_hit == bk.ASK else -take
        self.n_trades[b] += 1

    def cancel_unit(self, b: int, s: int, lvl: int, cancel_u: int, gate: int) -> None:
        """One unit of the others' size at lvl, ahead of the agent or behind it by the batched book's rule."""
        if not 0 <= lvl < self.W:
            return
        eng, price = self.engines[b], int(self.base[b]) + lvl
        queue = [o for o in eng.orders(SIDE[s]) if o.price == price]
        agent = self.agent_at(b, s, price)
        others = [o for o in queue if o.order_id != agent]
        n_others = sum(o.size for o in others)
        if not gate < n_others:
            return
        if agent is not None:
            ahead = eng.queue_ahead(agent)
            pos = [o.order_id for o in queue].index(agent)
            # The batched book's choice (apply_prepared): ahead iff cancel_u * others < ahead * 65536.
            others = queue[:pos] if cancel_u * n_others < ahead * bk.CANCEL_U_RANGE else queue[pos + 1 :]
        # Which order of the chosen group loses the unit does not change any aggregate; vary it anyway.
        eng.cancel(others[cancel_u % len(others)].order_id, 1)
        self.n_cancels[b] += 1

    def flow_event(self, b: int, etype: int, lvl: int, size: int, cancel_u: int, gate: int) -> None:
        """`apply_event`'s rules for one book; lvl is a window index."""
        if etype == bk.NONE:
            return
        s, kind = EVENT[etype]
        if kind == 1:
            opp = self.best_index(b, 1 - s)
            crosses = lvl >= opp if s == bk.BID else lvl <= opp
            if 0 <= lvl < self.W and not crosses:
                self.limit(b, s, int(self.base[b]) + lvl, size)
        elif kind == 2:
            self.market(b, s, size)
        else:
            self.cancel_unit(b, s, lvl, cancel_u, gate)

    # ---- agent orders -------------------------------------------------------------------------------

    def join_best(self, b: int, s: int, size: int) -> None:
        lvl = self.best_index(b, s)
        if not 0 <= lvl < self.W or size <= 0:
            return
        oid = self.new_id()
        assert self.engines[b].limit(order_id=oid, side=SIDE[s], price=int(self.base[b]) + lvl, size=size) == []
        self.agent[b][s] = oid

    def cancel_own(self, b: int, s: int) -> None:
        oid = self.agent[b][s]
        if oid is not None and oid in self.engines[b]:
            self.engines[b].cancel(oid)
        self.agent[b][s] = None

    def take(self, b: int, s_hit: int, qty: int) -> tuple[int, int]:
        """The agent's marketable order; returns (filled, sum of price x size in ticks)."""
        if qty <= 0:
            return 0, 0
        result = self.engines[b].market(order_id=self.new_id(), side=SIDE[1 - s_hit], size=qty)
        filled = sum(f.size for f in result.fills)
        self.signed_volume[b] += filled if s_hit == bk.ASK else -filled
        return filled, sum(f.size * f.price for f in result.fills)

    # ---- recentre -----------------------------------------------------------------------------------

    def recentre(self, b: int, new_base: int, base_depth: int) -> None:
        """Mirrors a window shift the batched book chose: drop what left, fill what entered."""
        eng, old_base, W = self.engines[b], int(self.base[b]), self.W
        self.base[b] = new_base
        for s in (bk.BID, bk.ASK):
            for o in list(eng.orders(SIDE[s])):
                if not new_base <= o.price < new_base + W:
                    eng.cancel(o.order_id)
            if self.agent[b][s] is not None and self.agent[b][s] not in eng:
                self.agent[b][s] = None
                self.agent_dropped += 1
        for price in range(new_base, new_base + W):
            if price < old_base:
                self.limit(b, bk.BID, price, base_depth)
            elif price >= old_base + W:
                self.limit(b, bk.ASK, price, base_depth)
        bb, ba = self.best_index(b, bk.BID), self.best_index(b, bk.ASK)
        if bb < 0:
            for j in range(ba):
                self.limit(b, bk.BID, new_base + j, base_depth)
        if ba >= W:
            for j in range(bb + 1, W):
                self.limit(b, bk.ASK, new_base + j, base_depth)


def assert_same(book: bk.BookState, m: Mirror, where: str) -> None:
    """The batched book equals the reference books in every aggregate the env can observe."""
    W = m.W
    np.testing.assert_array_equal(book.base, m.base, err_msg=f"{where}: window base")
    for b in range(m.B):
        eng, base = m.engines[b], int(m.base[b])
        for s in (bk.BID, bk.ASK):
            want = np.zeros(W, np.int64)
            for price, size in eng.levels(SIDE[s], 10**9):
                assert base <= price < base + W, f"{where}, book {b}: reference has {SIDE[s].name}@{price} outside"
                want[price - base] = size
            np.testing.assert_array_equal(book.depth[b, s], want, err_msg=f"{where}, book {b}, {SIDE[s].name} depth")
            assert book.best[b, s] == m.best_index(b, s), f"{where}, book {b}: best {SIDE[s].name}"
            oid = m.agent[b][s]
            if oid is not None and oid not in eng:
                m.agent[b][s] = oid = None  # fully filled
            if oid is None:
                got = (int(book.own_size[b, s]), int(book.own_tick[b, s]), int(book.own_ahead[b, s]))
                no_order = (0, bk.NO_ORDER, 0)
                assert got == no_order, f"{where}, book {b}: agent {SIDE[s].name} (size, tick, ahead) of no order"
            else:
                order = eng.order(oid)
                got = (int(book.own_tick[b, s]), int(book.own_size[b, s]), int(book.own_ahead[b, s]))
                want_own = (order.price, order.size, eng.queue_ahead(oid))
                assert got == want_own, f"{where}, book {b}: agent {SIDE[s].name} (tick, size, queue_ahead)"
    np.testing.assert_array_equal(book.own_filled, m.filled, err_msg=f"{where}: agent passive fills")
    np.testing.assert_array_equal(book.own_filled_ticks, m.filled_ticks, err_msg=f"{where}: agent fill ticks")
    np.testing.assert_array_equal(book.signed_volume, m.signed_volume, err_msg=f"{where}: signed volume")
    np.testing.assert_array_equal(book.n_trades, m.n_trades, err_msg=f"{where}: trades")
    np.testing.assert_array_equal(book.n_cancels, m.n_cancels, err_msg=f"{where}: cancels")


def open_pair(n_books: int, window: int, base_depth: int) -> tuple[bk.BookState, Mirror]:
    book = bk.BookState.empty(n_books, window)
    bk.open_books(book, np.arange(n_books), START_TICK + 7 * np.arange(n_books), base_depth)
    mirror = Mirror(book, base_depth)
    assert_same(book, mirror, "open")
    return book, mirror


def agent_step(book: bk.BookState, m: Mirror, op: str, rows: np.ndarray, qty: np.ndarray) -> None:
    """One agent call over a subset of rows, in both books (join and take cancel the side first, as the
    agent module does)."""
    s = bk.BID if op.endswith("bid") or op == "take_sell" else bk.ASK
    bk.cancel_own(book, rows, s)  # a take first cancels the agent's order on the side it hits
    for b in rows:
        m.cancel_own(b, s)
    if op.startswith("join"):
        placed = bk.join_best(book, rows, s, qty)
        for i, b in enumerate(rows):
            m.join_best(b, s, int(qty[i]))
            assert placed[i] == (m.agent[b][s] is not None), f"book {b}: join_best placed mask"
    elif op.startswith("take"):
        filled, ticks = bk.take_liquidity(book, rows, s, qty)
        for i, b in enumerate(rows):
            assert (int(filled[i]), int(ticks[i])) == m.take(b, s, int(qty[i])), f"book {b}: agent taker fill"


def drain_and_check(book: bk.BookState, m: Mirror, where: str) -> None:
    qty, cash = bk.drain_fills(book)
    np.testing.assert_array_equal(qty, m.filled[:, bk.BID] - m.filled[:, bk.ASK], err_msg=f"{where}: drain qty")
    np.testing.assert_array_equal(
        cash, m.filled_ticks[:, bk.ASK] - m.filled_ticks[:, bk.BID], err_msg=f"{where}: drain cash"
    )
    m.filled[:] = 0
    m.filled_ticks[:] = 0


def recentre_both(book: bk.BookState, m: Mirror, margin: int, base_depth: int) -> None:
    bk.recentre(book, margin, base_depth)
    # Every book: one with an empty side is refilled even when its window does not move.
    for b in range(m.B):
        m.recentre(b, int(book.base[b]), base_depth)


# ---- random apply_event sequences (hypothesis) ----------------------------------------------------------

B, W, DEPTH = 4, 16, 2
AGENT_OPS = ("join_bid", "join_ask", "cancel_bid", "cancel_ask", "take_buy", "take_sell")
FLOW = st.tuples(
    st.integers(0, 6),  # etype
    st.one_of(
        st.integers(-1, W).map(lambda j: ("at", j)),  # a window index (-1 and W are outside)
        # From the quotes, as the synthetic flow places orders: a limit bid at best_ask - 1 - d, a limit ask at
        # best_bid + 1 + d, a cancel at its side's best -/+ d. This is where the agent rests.
        st.integers(0, 3).map(lambda d: ("from_best", d)),
    ),
    st.integers(1, 5),  # size
    st.one_of(st.sampled_from([0, bk.CANCEL_U_RANGE - 1]), st.integers(0, bk.CANCEL_U_RANGE - 1)),
    st.integers(0, 2),  # cancel gate
)


def resolve_level(m: Mirror, b: int, etype: int, level: tuple[str, int]) -> int:
    how, x = level
    if how == "at":
        return x
    if etype == bk.NONE:
        return 0
    s, kind = EVENT[etype]
    if kind == 1:
        return m.best_index(b, bk.ASK) - 1 - x if s == bk.BID else m.best_index(b, bk.BID) + 1 + x
    return m.best_index(b, s) - x if s == bk.BID else m.best_index(b, s) + x


STEP = st.one_of(
    st.tuples(st.just("flow"), st.lists(FLOW, min_size=B, max_size=B)),
    st.tuples(st.sampled_from(AGENT_OPS), st.lists(st.integers(0, 6), min_size=B, max_size=B)),  # 0 = skip
    st.tuples(st.just("recentre"), st.integers(1, 5)),
    st.tuples(st.just("drain"), st.none()),
)


def run_steps(steps) -> tuple[bk.BookState, Mirror]:
    book, m = open_pair(B, W, DEPTH)
    for i, (op, payload) in enumerate(steps):
        where = f"step {i} ({op})"
        if op == "flow":
            etype, levels, size, cancel_u, gate = zip(*payload, strict=True)
            lvl = [resolve_level(m, b, etype[b], levels[b]) for b in range(B)]
            etype, lvl, size, cancel_u, gate = (np.array(x, np.int64) for x in (etype, lvl, size, cancel_u, gate))
            bk.apply_event(book, etype, lvl, size, cancel_u, gate)
            for b in range(B):
                m.flow_event(b, *(int(x[b]) for x in (etype, lvl, size, cancel_u, gate)))
        elif op == "recentre":
            recentre_both(book, m, payload, DEPTH)
        elif op == "drain":
            drain_and_check(book, m, where)
        else:
            qty = np.array(payload, np.int64)
            rows = np.flatnonzero(qty > 0)
            agent_step(book, m, op, rows, qty[rows])
        assert_same(book, m, where)
    return book, m


# Weight the flow: most steps are market events, as in the env.
STEPS = st.lists(
    st.one_of(STEP, st.tuples(st.just("flow"), st.lists(FLOW, min_size=B, max_size=B))), min_size=5, max_size=80
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
def test_batched_book_matches_engine_on_random_events(steps):
    run_steps(steps)


# ---- the synthetic flow's own hot path, with the agent acting in between -------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batched_book_matches_engine_under_synthetic_flow(seed):
    cfg = SyntheticConfig(window_ticks=32, levels=4, max_limit_size=3, base_depth=3, signal_strength=0.8)
    flow = SyntheticFlow(cfg)
    n_books, margin = 6, cfg.levels + 3
    book, m = open_pair(n_books, cfg.window_ticks, cfg.base_depth)
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 2**63, n_books, dtype=np.uint64)
    regime = flow.initial_regime(keys)
    events_per_step = 4
    for t in range(200):
        h = hash_draws(keys, np.full(n_books, t, np.uint64), events_per_step)
        events = flow.prepare(h, regime)
        for e in range(events_per_step):
            # Resolve each book's level against its quotes now, exactly as PreparedEvents.apply does.
            lvl = [m.best_index(b, int(events.anchor[e, b])) + int(events.offset[e, b]) for b in range(n_books)]
            events.apply(book, e)
            for b in range(n_books):
                kind = 1 if events.is_limit[e, b] else 2 if events.is_market[e, b] else 3
                s = int(events.side[e, b])
                if kind == 1:
                    if 0 <= lvl[b] < m.W:
                        m.limit(b, s, int(m.base[b]) + lvl[b], int(events.size[e, b]))
                elif kind == 2:
                    m.market(b, s, int(events.size[e, b]))
                else:
                    m.cancel_unit(b, s, lvl[b], int(events.cancel_u[e, b]), int(events.cancel_gate[e, b]))
            assert_same(book, m, f"seed {seed}, t {t}, event {e}")
        op = AGENT_OPS[rng.integers(len(AGENT_OPS))]
        rows = np.flatnonzero(rng.random(n_books) < 0.6)
        agent_step(book, m, op, rows, rng.integers(1, 5, rows.size))
        assert_same(book, m, f"seed {seed}, t {t}, agent {op}")
        drain_and_check(book, m, f"seed {seed}, t {t}")
        recentre_both(book, m, margin, cfg.base_depth)
        assert_same(book, m, f"seed {seed}, t {t}, recentre")


# ---- edges the random sequences reach only rarely -------------------------------------------------------

IDLE = (bk.NONE, ("at", 0), 1, 0, 0)


def only(book_event, b: int = 0):
    """A flow step in which book b has `book_event` and the others sit it out."""
    return ("flow", [book_event if i == b else IDLE for i in range(B)])


def test_cancel_at_agent_price_with_nothing_ahead_goes_behind():
    # The agent reaches the head of its queue, one unit arrives behind it, then a cancel with cancel_u = 0
    # (the draw that most favours 'ahead') must still come from behind: nothing is ahead.
    run_steps(
        [
            ("join_bid", [1, 1, 0, 0]),
            only((bk.MARKET_SELL, ("at", 0), DEPTH, 0, 0)),
            only((bk.LIMIT_BID, ("from_best", 0), 1, 0, 0)),
            only((bk.CANCEL_BID, ("from_best", 0), 1, 0, 0)),
            ("drain", None),
        ]
    )


def test_cancel_at_agent_price_with_everything_ahead_goes_ahead():
    run_steps(
        [
            ("join_ask", [0, 2, 0, 1]),
            only((bk.CANCEL_ASK, ("from_best", 0), 1, bk.CANCEL_U_RANGE - 1, 0), b=1),
            only((bk.CANCEL_ASK, ("from_best", 0), 1, bk.CANCEL_U_RANGE - 1, 0), b=3),
            only((bk.MARKET_BUY, ("at", 0), 5, 0, 0), b=1),
        ]
    )


def test_agent_order_left_behind_by_a_trend_is_dropped_at_recentre():
    # Book 0 trends up (the agent takes the asks, flow bids follow) until the window leaves the agent's bid;
    # book 2's bid stays. No one sells, so a bid that is gone was dropped, not filled.
    up = [("take_buy", [6, 0, 0, 0]), only((bk.LIMIT_BID, ("from_best", 0), 3, 0, 0)), ("recentre", 2)]
    book, m = run_steps([("join_bid", [1, 0, 1, 0]), *(up * 6)])
    assert m.agent_dropped == 1 and book.own_size[0, bk.BID] == 0 and book.own_size[2, bk.BID] == 1


def test_recentre_refills_a_book_emptied_on_both_sides():
    # Book 1 loses every resting unit to the agent; the shift brings in asks only, so the bids are refilled.
    book, _ = run_steps([("take_buy", [0, 99, 3, 0]), ("take_sell", [0, 99, 0, 0]), ("recentre", 3)])
    assert (book.depth[1] > 0).sum() == W and book.best[1, bk.BID] + 1 == book.best[1, bk.ASK]

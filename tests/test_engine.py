"""The reference engine: unit cases for each rule, and property tests over random event sequences.

The property tests hold the engine to the invariants of docs/engine.md (never crossed, size conserved,
price-time priority, queue position) and, independently, to a naive oracle that re-derives every fill by
sorting the resting orders; the test keeps its own arrival numbers, so neither check trusts engine state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference_engine import Fill, MarketResult, Order, OrderBook, Side

BID, ASK = Side.BID, Side.ASK


def book_with(*orders: tuple[int, Side, int, int]) -> OrderBook:
    book = OrderBook()
    for oid, side, price, size in orders:
        assert book.limit(order_id=oid, side=side, price=price, size=size) == []
    return book


# ---- unit cases -------------------------------------------------------------------------------------


def test_limit_rests_and_queries():
    book = book_with((1, BID, 99, 5), (2, BID, 98, 3), (3, BID, 99, 2), (4, ASK, 101, 4), (5, ASK, 103, 1))
    assert (book.best_bid(), book.best_ask()) == (99, 101)
    assert book.depth(BID, 99) == 7 and book.depth(ASK, 103) == 1 and book.depth(ASK, 102) == 0
    assert book.levels(BID, 5) == [(99, 7), (98, 3)]
    assert book.levels(ASK, 1) == [(101, 4)]
    assert book.queue_ahead(1) == 0 and book.queue_ahead(3) == 5 and book.queue_ahead(2) == 0
    assert book.order(3) == Order(order_id=3, side=BID, price=99, size=2)
    assert [o.order_id for o in book.orders(BID)] == [1, 3, 2]
    assert len(book) == 5 and 4 in book and 6 not in book and book.resting_size() == 15


def test_empty_book():
    book = OrderBook()
    assert book.best_bid() is None and book.best_ask() is None and book.levels(ASK, 3) == []
    assert book.market(order_id=1, side=BID, size=4) == MarketResult(fills=(), dropped=4)


def test_crossing_limit_fills_at_maker_prices_then_rests():
    book = book_with((1, ASK, 100, 2), (2, ASK, 101, 3), (3, ASK, 102, 5))
    fills = book.limit(order_id=9, side=BID, price=101, size=6)
    assert fills == [
        Fill(maker_id=1, taker_id=9, price=100, size=2, taker_side=BID),
        Fill(maker_id=2, taker_id=9, price=101, size=3, taker_side=BID),
    ]
    # The remainder rests at the limit price, which is now the best bid; 102 is untouched.
    assert book.order(9) == Order(order_id=9, side=BID, price=101, size=1)
    assert (book.best_bid(), book.best_ask()) == (101, 102)


def test_market_walks_levels_in_time_priority_and_drops_remainder():
    book = book_with((1, BID, 100, 2), (2, BID, 100, 3), (3, BID, 99, 1))
    result = book.market(order_id=7, side=ASK, size=10)
    assert [(f.maker_id, f.price, f.size) for f in result.fills] == [(1, 100, 2), (2, 100, 3), (3, 99, 1)]
    assert result.dropped == 4 and len(book) == 0 and book.best_bid() is None


def test_partial_fill_keeps_place_at_head():
    book = book_with((1, ASK, 100, 5), (2, ASK, 100, 5))
    book.market(order_id=8, side=BID, size=3)
    assert book.order(1).size == 2 and book.queue_ahead(2) == 2
    assert [f.maker_id for f in book.market(order_id=9, side=BID, size=3).fills] == [1, 2]


def test_cancel_full_and_partial_keeps_priority():
    book = book_with((1, BID, 100, 5), (2, BID, 100, 4), (3, BID, 100, 1))
    assert book.cancel(1, 3) == 3  # partial: order 1 keeps the head of the queue
    assert book.queue_ahead(1) == 0 and book.queue_ahead(2) == 2 and book.queue_ahead(3) == 6
    assert book.cancel(2) == 4
    assert book.queue_ahead(3) == 2 and 2 not in book
    assert [f.maker_id for f in book.market(order_id=9, side=ASK, size=3).fills] == [1, 3]
    assert book.levels(BID, 3) == [] and book.best_bid() is None


def test_cancel_errors_name_the_value():
    book = book_with((1, BID, 100, 5))
    with pytest.raises(KeyError, match="order_id=42"):
        book.cancel(42)
    with pytest.raises(KeyError, match="order_id=42"):
        book.queue_ahead(42)
    with pytest.raises(ValueError, match="size=6 exceeds order 1's remaining size 5"):
        book.cancel(1, 6)
    with pytest.raises(ValueError, match="size=0 must be >= 1"):
        book.cancel(1, 0)
    book.cancel(1)
    with pytest.raises(KeyError, match="order_id=1 is not resting"):
        book.cancel(1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"price": 100.0}, r"price=100\.0 must be an integer"),
        ({"price": -1}, "price=-1 must be >= 0"),
        ({"size": 2.5}, r"size=2\.5 must be an integer"),
        ({"size": 0}, "size=0 must be >= 1"),
        ({"size": -3}, "size=-3 must be >= 1"),
        ({"size": True}, "size=True must be an integer"),
        ({"side": 0}, "side=0 must be Side.BID"),
        ({"order_id": "a"}, "order_id='a' must be an integer"),
        ({"order_id": 1}, "order_id=1 is already resting"),
    ],
)
def test_limit_rejects_bad_input(kwargs, message):
    book = book_with((1, BID, 99, 1))
    order = {"order_id": 2, "side": ASK, "price": 100, "size": 1} | kwargs
    with pytest.raises(ValueError, match=message):
        book.limit(**order)
    assert len(book) == 1 and book.depth(ASK, 100) == 0  # nothing half-applied


def test_market_rejects_bad_input():
    book = book_with((1, ASK, 100, 2))
    with pytest.raises(ValueError, match=r"size=1\.0 must be an integer"):
        book.market(order_id=2, side=BID, size=1.0)
    with pytest.raises(ValueError, match="order_id=1 is already resting"):
        book.market(order_id=1, side=BID, size=1)
    assert book.depth(ASK, 100) == 2


def test_numpy_integers_are_accepted_and_stored_as_int():
    book = OrderBook()
    book.limit(order_id=np.int64(3), side=np.int8(1), price=np.int32(100), size=np.int64(4))
    order = book.order(3)
    assert order == Order(order_id=3, side=BID, price=100, size=4) and type(order.price) is int


# ---- property tests ---------------------------------------------------------------------------------

PRICES = st.integers(95, 105)  # a narrow band so orders cross, share levels and queue behind each other
EVENT = st.one_of(
    st.tuples(st.just("limit"), st.sampled_from([BID, ASK]), PRICES, st.integers(1, 6)),
    st.tuples(st.just("market"), st.sampled_from([BID, ASK]), st.integers(1, 15)),
    # Cancel the pick-th live order (mod the count); fraction 1.0 is a full cancel.
    st.tuples(st.just("cancel"), st.integers(0, 10**6), st.sampled_from([0.3, 0.6, 1.0])),
)
EVENTS = st.lists(EVENT, min_size=1, max_size=60)
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(kw_only=True)
class Resting:
    """The test's own record of a resting order; `seq` is the arrival number the test assigned."""

    seq: int
    order_id: int
    side: Side
    price: int
    size: int


def priority(o: Resting) -> tuple[int, int]:
    return (-o.price if o.side is BID else o.price, o.seq)


class NaiveBook:
    """Oracle: a flat list of orders; a taker consumes the eligible makers sorted by (price, arrival)."""

    def __init__(self) -> None:
        self.orders: list[Resting] = []

    def take(self, taker_id: int, side: Side, size: int, limit: int | None) -> tuple[list[Fill], int]:
        def eligible(o: Resting) -> bool:
            if o.side is side:
                return False
            return limit is None or (o.price <= limit if side is BID else o.price >= limit)

        fills = []
        for maker in sorted(filter(eligible, self.orders), key=priority):
            if size == 0:
                break
            traded = min(size, maker.size)
            fills.append(
                Fill(
                    maker_id=maker.order_id,
                    taker_id=taker_id,
                    price=maker.price,
                    size=traded,
                    taker_side=side,
                )
            )
            maker.size -= traded
            size -= traded
        self.orders = [o for o in self.orders if o.size > 0]
        return fills, size


def run_and_check(events) -> None:
    book, oracle = OrderBook(), NaiveBook()
    submitted = filled = cancelled = dropped = 0
    next_id = 0
    for event in events:
        before = {o.order_id: (replace(o), book.queue_ahead(o.order_id)) for o in oracle.orders}
        seq_of = {o.order_id: o.seq for o in oracle.orders}
        executed: dict[int, int] = {}  # maker id -> size executed by this event
        cancelled_now: tuple[int, int] | None = None
        kind = event[0]
        if kind == "cancel":
            if not oracle.orders:
                continue
            target = oracle.orders[event[1] % len(oracle.orders)]
            size = max(1, round(target.size * event[2]))
            assert book.cancel(target.order_id, None if event[2] == 1.0 else size) == size
            target.size -= size
            oracle.orders = [o for o in oracle.orders if o.size > 0]
            cancelled += size
            cancelled_now = (target.order_id, size)
        else:
            next_id += 1
            side, size = event[1], event[-1]
            submitted += size
            limit = event[2] if kind == "limit" else None
            opposite_before = [replace(o) for o in sorted(oracle.orders, key=priority) if o.side is not side]
            want_fills, left = oracle.take(next_id, side, size, limit)
            if kind == "limit":
                got_fills = book.limit(order_id=next_id, side=side, price=limit, size=size)
                if left:
                    oracle.orders.append(
                        Resting(seq=next_id, order_id=next_id, side=side, price=limit, size=left)
                    )
            else:
                result = book.market(order_id=next_id, side=side, size=size)
                got_fills = list(result.fills)
                assert result.dropped == left
                dropped += left
            assert got_fills == want_fills
            filled += sum(f.size for f in got_fills)
            check_price_time_priority(got_fills, opposite_before, size)
            for f in got_fills:
                executed[f.maker_id] = executed.get(f.maker_id, 0) + f.size

        # Never crossed after matching.
        bid, ask = book.best_bid(), book.best_ask()
        assert bid is None or ask is None or bid < ask
        # Size conserved: each fill removes its size from the maker and from the taker.
        assert submitted == book.resting_size() + 2 * filled + cancelled + dropped
        # The engine holds exactly the oracle's orders, in priority order, with the same depth per level.
        for side in (BID, ASK):
            want = sorted((o for o in oracle.orders if o.side is side), key=priority)
            assert list(book.orders(side)) == [
                Order(order_id=o.order_id, side=o.side, price=o.price, size=o.size) for o in want
            ]
            levels: dict[int, int] = {}
            for o in want:
                levels[o.price] = levels.get(o.price, 0) + o.size
            assert book.levels(side, 100) == sorted(levels.items(), reverse=side is BID)
        check_queue_positions(book, oracle, before, seq_of, executed, cancelled_now)


def check_price_time_priority(fills: list[Fill], opposite_before: list[Resting], size: int) -> None:
    """Fills consume the opposite side strictly in (best price, earliest) order; only the last is partial."""
    assert len(fills) <= len(opposite_before)
    for i, (fill, maker) in enumerate(zip(fills, opposite_before, strict=False)):
        assert (fill.maker_id, fill.price) == (maker.order_id, maker.price)
        if i < len(fills) - 1:
            assert fill.size == maker.size  # an earlier maker is used up before a later one is touched
    assert sum(f.size for f in fills) <= size


def check_queue_positions(book, oracle, before, seq_of, executed, cancelled_now) -> None:
    """queue_ahead = size of earlier orders at the price; it moves only by executions and cancels ahead."""
    for o in oracle.orders:
        earlier = sum(
            p.size for p in oracle.orders if p.side is o.side and p.price == o.price and p.seq < o.seq
        )
        qa = book.queue_ahead(o.order_id)
        assert qa == earlier
        if o.order_id not in before:
            continue
        _, old_qa = before[o.order_id]

        def ahead(oid: int, o=o) -> bool:
            p = before.get(oid, (None,))[0]
            return p is not None and p.side is o.side and p.price == o.price and seq_of[oid] < o.seq

        drop = sum(size for oid, size in executed.items() if ahead(oid))
        if cancelled_now is not None and ahead(cancelled_now[0]):
            drop += cancelled_now[1]
        # Arrivals (always later) and cancels behind or elsewhere leave it unchanged.
        assert old_qa - qa == drop


@PROPERTY
@given(EVENTS)
def test_engine_invariants_and_oracle(events):
    run_and_check(events)


def test_engine_invariants_long_sequence():
    # One long seeded sequence reaches deep queues and many partial fills the short examples rarely do.
    rng = np.random.default_rng(7)
    events = []
    for _ in range(3000):
        u = rng.random()
        side = BID if rng.random() < 0.5 else ASK
        if u < 0.55:
            events.append(("limit", side, int(rng.integers(95, 106)), int(rng.integers(1, 7))))
        elif u < 0.7:
            events.append(("market", side, int(rng.integers(1, 16))))
        else:
            events.append(("cancel", int(rng.integers(0, 10**6)), float(rng.choice([0.3, 0.6, 1.0]))))
    run_and_check(events)

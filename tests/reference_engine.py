"""Order-level reference matching engine: the semantics the batched book of lobsim_env is held to.

One book, one Python object per resting order, integer price ticks and integer sizes, price-time priority.
It is deliberately plain (dicts of insertion-ordered dicts) so that it is obviously right; the fast path is
the batched structure-of-arrays book in `lobsim_env.synthetic.book`, tested against this one event by event
(tests/test_book_vs_engine.py). The rules are written out in docs/engine.md.

It lives with the tests because it is a test oracle: nothing that runs (the envs, either market, an evaluation)
steps it, and only the tests consult it.

- `limit` matches against the opposite side while the limit price allows, at each maker's price (the taker
  gets any price improvement), then rests the remainder at the back of its price's queue.
- `market` walks the opposite side best price first; what it cannot fill is dropped and reported.
- `cancel` removes an order or reduces it. A partial cancel keeps the order's time priority (size down, place
  kept), as on CME and in LOBSTER (type 2), so it moves up only the orders behind it.
- No self-trade prevention: any two orders of opposite sides match.
"""

from __future__ import annotations

import numbers
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum


class Side(IntEnum):
    """Book side; its value is the sign of a position change for the owner of a filled order."""

    BID = 1
    ASK = -1

    @property
    def opposite(self) -> Side:
        return Side(-self.value)


@dataclass(frozen=True, kw_only=True, slots=True)
class Order:
    """A resting order as the book holds it now: `size` is what remains."""

    order_id: int
    side: Side
    price: int
    size: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Fill:
    """One execution: `size` contracts at the resting (maker) order's `price`."""

    maker_id: int
    taker_id: int
    price: int
    size: int
    taker_side: Side


@dataclass(frozen=True, kw_only=True, slots=True)
class MarketResult:
    """What a market order did: its fills, and the size left unfilled (dropped, never rested)."""

    fills: tuple[Fill, ...]
    dropped: int


def _int(name: str, value: object, *, minimum: int) -> int:
    # numbers.Integral admits numpy integers (the batched book's dtype); bool is an int but never a size.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}={value!r} must be an integer (ticks and sizes are ints, never floats)")
    if value < minimum:
        raise ValueError(f"{name}={value!r} must be >= {minimum}")
    return int(value)


def _side(value: object) -> Side:
    try:
        return Side(value)
    except ValueError:
        raise ValueError(f"side={value!r} must be Side.BID (1) or Side.ASK (-1)") from None


class OrderBook:
    """A single limit order book, order by order.

    Per side: price -> queue, the queue an insertion-ordered dict order_id -> remaining size, so that time
    priority is the dict's order, a cancel anywhere is O(1), and a partial fill or cancel keeps the place.
    """

    def __init__(self) -> None:
        self._queues: dict[Side, dict[int, OrderedDict[int, int]]] = {Side.BID: {}, Side.ASK: {}}
        self._where: dict[int, tuple[Side, int]] = {}  # resting order_id -> (side, price)

    # ---- order entry -------------------------------------------------------------------------------

    def limit(self, *, order_id: int, side: Side | int, price: int, size: int) -> list[Fill]:
        """Match a limit order, then rest its remainder. Returns the fills, in execution order.

        Raises ValueError for a non-integer or negative price, a non-integer or non-positive size, a bad
        side, or an order_id that is already resting.
        """
        order_id, side = self._new_id(order_id), _side(side)
        price = _int("price", price, minimum=0)
        size = _int("size", size, minimum=1)
        fills, left = self._take(taker_id=order_id, side=side, size=size, limit_price=price)
        if left:
            self._queues[side].setdefault(price, OrderedDict())[order_id] = left
            self._where[order_id] = (side, price)
        return fills

    def market(self, *, order_id: int, side: Side | int, size: int) -> MarketResult:
        """Walk the opposite side best price first; the unfilled remainder is dropped and reported.

        Raises ValueError for a non-integer or non-positive size, a bad side, or a resting order_id.
        """
        order_id, side = self._new_id(order_id), _side(side)
        size = _int("size", size, minimum=1)
        fills, left = self._take(taker_id=order_id, side=side, size=size, limit_price=None)
        return MarketResult(fills=tuple(fills), dropped=left)

    def cancel(self, order_id: int, size: int | None = None) -> int:
        """Cancel `size` of a resting order (all of it when None); returns the size removed.

        A partial cancel keeps the order's place in its queue. Raises KeyError for an order_id that is not
        resting, ValueError for a size that is not an integer in 1..remaining.
        """
        side, price = self._locate(order_id)
        queue = self._queues[side][price]
        remaining = queue[order_id]
        if size is None:
            size = remaining
        size = _int("size", size, minimum=1)
        if size > remaining:
            raise ValueError(
                f"cancel size={size} exceeds order {order_id}'s remaining size {remaining}; "
                "cancel at most what rests (or pass size=None to cancel it all)"
            )
        if size == remaining:
            self._remove(side, price, order_id)
        else:
            queue[order_id] = remaining - size
        return size

    # ---- queries -----------------------------------------------------------------------------------

    def best_bid(self) -> int | None:
        """Highest bid price, or None when no bid rests."""
        bids = self._queues[Side.BID]
        return max(bids) if bids else None

    def best_ask(self) -> int | None:
        """Lowest ask price, or None when no ask rests."""
        asks = self._queues[Side.ASK]
        return min(asks) if asks else None

    def depth(self, side: Side | int, price: int) -> int:
        """Total resting size at `price` on `side` (0 when none)."""
        queue = self._queues[_side(side)].get(_int("price", price, minimum=0))
        return sum(queue.values()) if queue else 0

    def levels(self, side: Side | int, k: int) -> list[tuple[int, int]]:
        """The best `k` non-empty levels of `side` as (price, total size), best first."""
        side = _side(side)
        k = _int("k", k, minimum=0)
        queues = self._queues[side]
        prices = sorted(queues, reverse=side is Side.BID)[:k]
        return [(p, sum(queues[p].values())) for p in prices]

    def queue_ahead(self, order_id: int) -> int:
        """Size resting ahead of `order_id` at its price (earlier orders, same side). KeyError if unknown."""
        side, price = self._locate(order_id)
        ahead = 0
        for oid, size in self._queues[side][price].items():
            if oid == order_id:
                return ahead
            ahead += size
        raise AssertionError("unreachable: _where and the queues disagree")  # internal invariant, not input

    def order(self, order_id: int) -> Order:
        """The resting order `order_id` as it stands now. KeyError if it is not resting."""
        side, price = self._locate(order_id)
        return Order(order_id=order_id, side=side, price=price, size=self._queues[side][price][order_id])

    def orders(self, side: Side | int) -> Iterator[Order]:
        """Resting orders of `side` in priority order: best price first, then earliest first."""
        side = _side(side)
        queues = self._queues[side]
        for price in sorted(queues, reverse=side is Side.BID):
            for oid, size in queues[price].items():
                yield Order(order_id=oid, side=side, price=price, size=size)

    def resting_size(self) -> int:
        """Total size resting on both sides."""
        return sum(sum(q.values()) for queues in self._queues.values() for q in queues.values())

    def __contains__(self, order_id: object) -> bool:
        return order_id in self._where

    def __len__(self) -> int:
        return len(self._where)

    # ---- one level of helpers ----------------------------------------------------------------------

    def _new_id(self, order_id: object) -> int:
        order_id = _int("order_id", order_id, minimum=0)
        if order_id in self._where:
            raise ValueError(f"order_id={order_id} is already resting; give each live order a unique id")
        return order_id

    def _locate(self, order_id: object) -> tuple[Side, int]:
        try:
            return self._where[order_id]  # type: ignore[index]
        except (KeyError, TypeError):
            raise KeyError(
                f"order_id={order_id!r} is not resting in this book (filled, cancelled or never added)"
            ) from None

    def _remove(self, side: Side, price: int, order_id: int) -> None:
        queue = self._queues[side][price]
        del queue[order_id]
        del self._where[order_id]
        if not queue:
            del self._queues[side][price]

    def _take(
        self, *, taker_id: int, side: Side, size: int, limit_price: int | None
    ) -> tuple[list[Fill], int]:
        """Consume the opposite side for a taker of `side`; returns the fills and the size left over."""
        makers = self._queues[side.opposite]
        fills: list[Fill] = []
        while size and makers:
            best = min(makers) if side is Side.BID else max(makers)
            if limit_price is not None and (best > limit_price if side is Side.BID else best < limit_price):
                break
            queue = makers[best]
            while size and queue:
                maker_id, maker_size = next(iter(queue.items()))
                traded = min(size, maker_size)
                fills.append(
                    Fill(maker_id=maker_id, taker_id=taker_id, price=best, size=traded, taker_side=side)
                )
                size -= traded
                if traded == maker_size:
                    self._remove(side.opposite, best, maker_id)
                else:
                    queue[maker_id] = maker_size - traded  # assigning an existing key keeps its place
        return fills, size

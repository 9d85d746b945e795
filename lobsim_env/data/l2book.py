"""A price-level book at full depth, for the L2 sources' ingest (Binance, Tardis): levels set by size, the top
`levels` of each side written out as a row of the cache's book (lobsim_env.data.layout).

Prices are integer ticks and sizes integer lots. Each side keeps its prices in a sorted list (bids ascending,
read from the end) beside a dict of sizes, so setting a level is a dict write plus, for a new or emptied price,
one bisect into the list; writing the top of the book reads the list's ends.

A day's book.npy has a row per event, but most events of a full-depth feed touch levels below the written top:
`BookRows` keeps a row only where the top changed and fills the others forward, so the cost of the rows is the
count of top-changing events, not of events.
"""

from __future__ import annotations

import bisect
from itertools import chain

import numpy as np

BID, ASK = 1, -1


class L2Book:
    """Both sides of one instrument's book at full depth."""

    def __init__(self, levels: int):
        self.levels = levels
        self.size = {BID: {}, ASK: {}}
        self.prices = {BID: [], ASK: []}  # ascending on both sides

    def set(self, side: int, price: int, size: int) -> int:
        """Sets the level (size 0 removes it); returns the change of size there."""
        sizes, prices = self.size[side], self.prices[side]
        old = sizes.get(price, 0)
        if size:
            if not old:
                bisect.insort(prices, price)
            sizes[price] = size
        elif old:
            del sizes[price]
            del prices[bisect.bisect_left(prices, price)]
        return size - old

    def clear(self) -> None:
        for side in (BID, ASK):
            self.size[side].clear()
            self.prices[side].clear()

    def best(self) -> tuple[int, int]:
        """(best bid, best ask) in ticks, 0 for an empty side."""
        bids, asks = self.prices[BID], self.prices[ASK]
        return (bids[-1] if bids else 0, asks[0] if asks else 0)

    def crossed(self) -> bool:
        bid, ask = self.best()
        return bool(bid and ask and bid >= ask)

    def in_top(self, side: int, price: int) -> bool:
        """True when a level at `price` on `side` is, or would be, among the top `levels` of that side: setting it
        may change the written row; setting a level below them cannot (the top keeps its prices and sizes)."""
        prices, n = self.prices[side], self.levels
        if len(prices) < n:
            return True
        return price >= prices[-n] if side == BID else price <= prices[n - 1]

    def top(self, side: int) -> list[int]:
        """The top `levels` of one side as [price_1, size_1, price_2, size_2, ...], best first, zero-padded to
        2 * levels."""
        n = self.levels
        prices = self.prices[side][: -n - 1 : -1] if side == BID else self.prices[side][:n]
        out = [0] * (2 * n)
        out[0 : 2 * len(prices) : 2] = prices
        out[1 : 2 * len(prices) : 2] = map(self.size[side].__getitem__, prices)
        return out

    def row(self, out: np.ndarray) -> None:
        """Writes the top `levels` of each side into out (int64[4 * levels], zeroed by the caller): ask_price_1,
        ask_size_1, bid_price_1, bid_size_1, ask_price_2, ..."""
        n = self.levels
        asks, bids = self.prices[ASK][:n], self.prices[BID][: -n - 1 : -1]
        sa, sb = self.size[ASK], self.size[BID]
        for i, p in enumerate(asks):
            out[4 * i] = p
            out[4 * i + 1] = sa[p]
        for i, p in enumerate(bids):
            out[4 * i + 2] = p
            out[4 * i + 3] = sb[p]

    def write_side(self, row, side: int, levels: int) -> None:
        """Writes one side's top `levels` into a book.npy row (any int sequence: ask_price_1, ask_size_1, bid_price_1,
        bid_size_1, ...), zeroing the levels it does not have."""
        if side == ASK:
            prices, k = self.prices[ASK][:levels], 0
        else:
            prices, k = self.prices[BID][: -levels - 1 : -1], 2
        sizes = self.size[side]
        for p in prices:
            row[k] = p
            row[k + 1] = sizes[p]
            k += 4
        while k < 4 * levels:
            row[k] = row[k + 1] = 0
            k += 4

    def levels_now(self) -> list[tuple[int, int, int]]:
        """Every level as (side, price, size), bids from the best down, then asks from the best up: the events that
        rebuild this book from empty (a day that continues another starts with them)."""
        bids = [(BID, p, self.size[BID][p]) for p in reversed(self.prices[BID])]
        return bids + [(ASK, p, self.size[ASK][p]) for p in self.prices[ASK]]


class BookRows:
    """The rows of a day's book.npy, recorded only at the events that changed the top of `book`.

    Call `changed(index, side)` right after event `index` changed the top `levels` of `side` (L2Book.in_top before
    the set, and a size that differs from the old one); `array(n)` then gives int64[n, 4 * levels], each row the
    last recorded one at or before it (zeros before the first)."""

    def __init__(self, book: L2Book):
        self.book = book
        self.index: list[int] = []
        self._rows: list[list[int]] = []  # ask top, bid top, ask top, ...: references, never mutated
        self._ask, self._bid = book.top(ASK), book.top(BID)

    def changed(self, index: int, side: int) -> None:
        if side == BID:
            self._bid = self.book.top(BID)
        else:
            self._ask = self.book.top(ASK)
        self.index.append(index)
        self._rows.append(self._ask)
        self._rows.append(self._bid)

    def array(self, n_events: int) -> np.ndarray:
        n = self.book.levels
        k = len(self.index)
        flat = np.fromiter(chain.from_iterable(self._rows), dtype=np.int64, count=k * 4 * n)
        tops = flat.reshape(k, 2, n, 2)  # (row, ask|bid, level, price|size)
        rows = np.zeros((k + 1, 4 * n), dtype=np.int64)  # row 0: the empty book before any recorded change
        rows[1:] = tops.transpose(0, 2, 1, 3).reshape(k, 4 * n)
        idx = np.array(self.index, dtype=np.int64)
        bounds = np.concatenate([[0], idx, [n_events]])
        runs = np.diff(bounds)
        if np.any(runs[1:-1] <= 0) or np.any(runs < 0):
            raise ValueError(f"BookRows.changed: event indices must increase and lie below {n_events}")
        return np.repeat(rows, runs, axis=0)

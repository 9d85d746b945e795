"""The agent's action set and how an action becomes orders in the books (vectorised over B).

Exposure rule (the position limit L): for every book, position + resting bid size <= L and
position - resting ask size >= -L at all times. Market orders and joins are clipped to what the rule allows
and ignored when that is zero; passive fills then can never breach L. Self-trade prevention: a market buy
first cancels the agent's resting ask, a market sell its resting bid.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from lobsim_env import book as bk


class Action(IntEnum):
    """The discrete actions (docs/market.md)."""

    HOLD = 0
    """Do nothing; resting orders stay."""
    MARKET_BUY = 1
    """Buy order_size contracts at market (walks the asks; taker fee)."""
    MARKET_SELL = 2
    """Sell order_size contracts at market (walks the bids; taker fee)."""
    JOIN_BID = 3
    """Rest a bid of order_size at the best bid, behind the queue; kept (with its queue place) if there."""
    JOIN_ASK = 4
    """Rest an ask of order_size at the best ask; kept if already there."""
    CANCEL = 5
    """Cancel both resting orders."""
    FLATTEN = 6
    """Cancel both resting orders and close the whole position at market."""


N_ACTIONS = len(Action)


def apply_actions(
    book: bk.BookState, position: np.ndarray, actions: np.ndarray, *, order_size: int, position_limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """Turns actions [B] into orders. Returns (signed taker contracts [B], taker cash flow in ticks [B]).

    `position` is read, not written: the caller books the returned fills.
    """
    B = book.n_books
    qty_taken = np.zeros(B, np.int64)
    cash = np.zeros(B, np.int64)
    own = book.own_size

    def market(rows: np.ndarray, buy: bool, qty: np.ndarray) -> None:
        bk.cancel_own(book, rows, bk.ASK if buy else bk.BID)
        ok = qty > 0
        rows, qty = rows[ok], qty[ok]
        if rows.size == 0:
            return
        filled, ticks = bk.take_liquidity(book, rows, bk.ASK if buy else bk.BID, qty)
        qty_taken[rows] += filled if buy else -filled
        cash[rows] += -ticks if buy else ticks

    r = np.flatnonzero(actions == Action.MARKET_BUY)
    if r.size:
        market(r, True, np.minimum(order_size, position_limit - position[r] - own[r, bk.BID]))
    r = np.flatnonzero(actions == Action.MARKET_SELL)
    if r.size:
        market(r, False, np.minimum(order_size, position_limit + position[r] - own[r, bk.ASK]))
    for action, side, sign in ((Action.JOIN_BID, bk.BID, 1), (Action.JOIN_ASK, bk.ASK, -1)):
        r = np.flatnonzero(actions == action)
        if r.size == 0:
            continue
        at_best = (own[r, side] > 0) & (book.own_tick[r, side] == book.base[r] + book.best[r, side])
        r = r[~at_best]
        bk.cancel_own(book, r, side)
        bk.join_best(book, r, side, np.clip(position_limit - sign * position[r], 0, order_size))
    r = np.flatnonzero((actions == Action.CANCEL) | (actions == Action.FLATTEN))
    if r.size:
        bk.cancel_own(book, r, bk.BID)
        bk.cancel_own(book, r, bk.ASK)
    r = np.flatnonzero((actions == Action.FLATTEN) & (position != 0))
    if r.size:
        long = position[r] > 0
        market(r[~long], True, -position[r[~long]])
        market(r[long], False, position[r[long]])
    return qty_taken, cash

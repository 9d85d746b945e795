"""How an action becomes orders in the batched books (vectorised over B), keeping the exposure rule and
self-trade prevention of `lobsim_env.market` (the action set).
"""

from __future__ import annotations

import numpy as np

from lobsim_env.market import Action
from lobsim_env.synthetic import book as bk


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
    # Each book takes exactly one action, so books never interact: one pass per side for each kind of order.
    join = {bk.BID: actions == Action.JOIN_BID, bk.ASK: actions == Action.JOIN_ASK}
    for side, j in join.items():
        # A join at the best where the agent already rests keeps that order and its queue place.
        keep = j & (own[:, side] > 0) & (book.own_tick[:, side] == book.base + book.best[:, side])
        join[side] = j & ~keep
    flatten = actions == Action.FLATTEN
    cancel_all = (actions == Action.CANCEL) | flatten
    # Self-trade prevention: a market buy cancels the resting ask, a market sell the resting bid.
    bk.cancel_own(book, np.flatnonzero(cancel_all | join[bk.BID] | (actions == Action.MARKET_SELL)), bk.BID)
    bk.cancel_own(book, np.flatnonzero(cancel_all | join[bk.ASK] | (actions == Action.MARKET_BUY)), bk.ASK)
    for side, sign in ((bk.BID, 1), (bk.ASK, -1)):
        r = np.flatnonzero(join[side])
        if r.size:
            bk.join_best(book, r, side, np.clip(position_limit - sign * position[r], 0, order_size))
    buy = np.where(actions == Action.MARKET_BUY, np.minimum(order_size, position_limit - position - own[:, bk.BID]), 0)
    sell = np.where(
        actions == Action.MARKET_SELL, np.minimum(order_size, position_limit + position - own[:, bk.ASK]), 0
    )
    buy = np.where(flatten & (position < 0), -position, buy)
    sell = np.where(flatten & (position > 0), position, sell)
    for side_hit, qty, sign in ((bk.ASK, buy, 1), (bk.BID, sell, -1)):
        r = np.flatnonzero(qty > 0)
        if r.size:
            filled, ticks = bk.take_liquidity(book, r, side_hit, qty[r])
            qty_taken[r] += sign * filled
            cash[r] -= sign * ticks
    return qty_taken, cash

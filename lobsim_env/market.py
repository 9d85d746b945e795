"""What a market is to the envs: the action set, the observation layout, one step's result, and `Market`.

Two markets implement `Market`: the synthetic one (`synthetic.market.SyntheticMarket`: a batched book and a seeded order
flow) and a replayed LOBSTER day (`lobster.market.LobsterMarket`); `markets.make_market` picks one by the config's
`source`. The Gymnasium envs drive either through this interface alone; semantics in docs/market.md.

Exposure rule (the position limit L), which both markets keep: for every book, position + resting bid size <= L
and position - resting ask size >= -L at all times. Market orders and joins are clipped to what the rule allows
and ignored when that is zero; passive fills then can never breach L. Self-trade prevention: a market buy first
cancels the agent's resting ask, a market sell its resting bid.

What an action did where it met the book (its taker fill, the resting orders it placed) is folded into the
step's `fills` with the passive fills; a market reports it apart only to its `action_listener`, when one is set
(`ActionReport`): the evaluation loop (lobsim_env.baselines) reads the taker / passive split through it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from lobsim_env.config import MarketConfig


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

OBS_FIXED = 12
"""Observation entries besides the 4 * obs_levels book entries (see `obs_index`)."""


DEPTH_FLOW_COLUMNS = ("depth_flow", "depth_flow_slow")
"""Entries appended after OBS_FIXED's when cfg.depth_flow_ticks > 0."""


def obs_size(cfg: MarketConfig) -> int:
    return 4 * cfg.obs_levels + OBS_FIXED + (len(DEPTH_FLOW_COLUMNS) if cfg.depth_flow_ticks else 0)


def obs_index(cfg: MarketConfig) -> dict[str, int]:
    """Column of each scalar observation entry (the book ladders take the first 4 * obs_levels columns)."""
    o = 4 * cfg.obs_levels
    names = (
        "spread",
        "imbalance",
        "flow",
        "flow_slow",
        "position",
        "own_bid_offset",
        "own_bid_size",
        "own_bid_ahead",
        "own_ask_offset",
        "own_ask_size",
        "own_ask_ahead",
        "time_left",
    ) + (DEPTH_FLOW_COLUMNS if cfg.depth_flow_ticks else ())
    return {n: o + i for i, n in enumerate(names)}


@dataclass(kw_only=True, slots=True)
class StepResult:
    reward: np.ndarray
    """[B] float64 change of equity in USD."""
    fills: np.ndarray
    """[B] int64 signed contracts filled this step (passive and taker)."""
    fees_usd: np.ndarray
    """[B] float64 fees paid this step."""
    truncated: np.ndarray
    """[B] bool: the episode reached its horizon."""


@dataclass(kw_only=True, frozen=True, slots=True)
class ActionReport:
    """What the actions of one step did where they met the B books, apart from the passive fills.

    A market with an `action_listener` builds one per step and passes it to the listener once, at the end of
    `step` (the state is then the step's final one). The arrays are the listener's to keep.
    """

    taker: np.ndarray
    """[B] int64 signed contracts the action's market orders filled (buys +); `StepResult.fills` minus this is the
    step's passive fill."""
    taker_cash_usd: np.ndarray
    """[B] float64 the cash those market orders moved, in USD before fees (selling +, buying -): contracts times the
    price of each level they took."""
    posted: np.ndarray
    """[B] int64 contracts of the resting orders the action newly placed (`new_order_contracts`): a join where the
    agent already rests at that price keeps its order and posts nothing."""


ActionListener = Callable[[ActionReport], None]


def new_order_contracts(size0: np.ndarray, price0: np.ndarray, size1: np.ndarray, price1: np.ndarray) -> np.ndarray:
    """Contracts of the resting orders an action placed, summed over the last axis (the sides: [..., 2] of the
    agent's order sizes and prices before / after the action, in any one price unit).

    An order is new where there is one after the action and there was none before, or it sits at another price;
    a join at the price where the agent already rests keeps that order (and its queue place).
    """
    new = (size1 > 0) & ((size0 == 0) | (price0 != price1))
    return np.where(new, size1, 0).sum(axis=-1)


class MarketState(Protocol):
    """What the envs read of a market's state over B books; each market keeps more (its book, flow, orders)."""

    position: np.ndarray
    """[B] contracts held (signed)."""
    equity_usd: np.ndarray
    """[B] float64 marked equity after the last step, net of all fees paid in the episode (the cumulative
    pnl_usd)."""


State = TypeVar("State", bound=MarketState)


@runtime_checkable
class Market(Protocol[State]):
    """B books of one market under one config, stepped together as arrays.

    A market object holds its config and precomputed tables only; everything that evolves lives in the state
    it makes, so the single env (B = 1) and the vector env (B books) share one step function.
    """

    cfg: MarketConfig
    action_listener: ActionListener | None
    """None (the default: nothing is reported, and the step pays one `is None` test for it), or a callable that
    `step` calls once, at its end, with the step's `ActionReport`. Set it on a market of one's own (an env's
    `market`); an env's autoreset discards, after the step, what it reported for the books it resets."""

    def new_state(self, n_books: int) -> State:
        """The state of n_books books; each is opened by `reset_rows` before its first step."""
        ...

    def reset_rows(
        self, state: State, rows: np.ndarray, keys: np.ndarray, first_step: np.ndarray | None = None
    ) -> None:
        """Opens a fresh episode in books `rows` [R], each a pure function of its uint64 key [R].

        first_step: None (step 0), or int64 [R] in [0, horizon): each book opens its episode at that step, a fresh
        book with `horizon - first_step` steps left (its time_left reads so), as if it had joined the episode late.
        The vector env's reset takes it as options={"first_steps": ...}; the rollout workers use it to stagger
        their books' first episodes (RolloutConfig.stagger_episodes)."""
        ...

    def step(self, state: State, actions: np.ndarray) -> StepResult:
        """Advances every book one env step under its action (int64 [B], values of `Action`)."""
        ...

    def observe(self, state: State) -> np.ndarray:
        """float32 [B, obs_size(cfg)]: the layout of docs/market.md, columns named by `obs_index`."""
        ...

    def latent_regime(self, state: State) -> np.ndarray:
        """[B] the hidden regime in {-1, 0, +1} (for the oracle baseline; never observed). Raises ValueError
        where the market has none."""
        ...

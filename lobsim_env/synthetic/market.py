"""THE step function of the synthetic market, shared by the single env and the native vector env.

`SyntheticMarket` implements `lobsim_env.market.Market`. State is a `SyntheticState` over B books; `reset_rows`
opens some of them from per-book keys, `step` advances all of them by one env step, `observe` builds the float32
observation. One env step, per book:

  1. the latent regime takes one Markov step;
  2. `events_per_step` market events are drawn and applied in order; the agent's action is applied just
     before event number `latency_events` (0 = before any market event, events_per_step = after all of them);
  3. passive fills are booked; the window re-centres if needed; equity is marked at the mid;
  4. reward = equity_usd now - equity_usd before the step (equity = cash + position * mid, in USD, net of all
     fees paid in the episode).
With an `action_listener` set, the step ends by reporting what the actions did in 2 where they met the books
(`lobsim_env.market.ActionReport`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lobsim_env.config import MarketConfig
from lobsim_env.market import OBS_FIXED, ActionListener, ActionReport, StepResult, new_order_contracts, obs_size
from lobsim_env.synthetic import book as bk
from lobsim_env.synthetic.agent import apply_actions
from lobsim_env.synthetic.flow import SyntheticFlow, hash_draws


@dataclass(kw_only=True, slots=True)
class SyntheticState:
    """Everything that evolves in B synthetic markets."""

    book: bk.BookState
    key: np.ndarray
    """[B] uint64 per-episode random key."""
    t: np.ndarray
    """[B] steps taken in the episode."""
    regime: np.ndarray
    """[B] latent regime in {-1, 0, +1} (hidden from the observation)."""
    flow: np.ndarray
    """[B] float64 EMA of signed market-order volume (buys - sells) per step, decay flow_decay."""
    flow_slow: np.ndarray
    """[B] float64 the same EMA with decay slow_flow_decay."""
    depth_flow: np.ndarray
    """[B] float64 EMA (decay flow_decay) of the depth flow near the mid (MarketConfig.depth_flow_ticks; 0 when
    that is off)."""
    depth_flow_slow: np.ndarray
    """[B] float64 the same EMA with decay slow_flow_decay."""
    position: np.ndarray
    """[B] contracts held (signed)."""
    cash_ticks: np.ndarray
    """[B] cash in ticks x contracts (selling adds, buying subtracts)."""
    fees_usd: np.ndarray
    """[B] float64 fees paid in the episode (negative = rebates earned)."""
    equity_usd: np.ndarray
    """[B] float64 marked equity after the last step, net of fees (the cumulative pnl_usd)."""

    @classmethod
    def empty(cls, n_books: int, cfg: MarketConfig) -> SyntheticState:
        z = np.zeros(n_books, np.int64)
        return cls(
            book=bk.BookState.empty(n_books, cfg.synthetic.window_ticks),
            key=np.zeros(n_books, np.uint64),
            t=z.copy(),
            regime=z.copy(),
            flow=np.zeros(n_books),
            flow_slow=np.zeros(n_books),
            depth_flow=np.zeros(n_books),
            depth_flow_slow=np.zeros(n_books),
            position=z.copy(),
            cash_ticks=z.copy(),
            fees_usd=np.zeros(n_books),
            equity_usd=np.zeros(n_books),
        )


class SyntheticMarket:
    """The step function over a SyntheticState for one config; holds only precomputed tables (and the
    `action_listener` of `lobsim_env.market.Market`, None unless set)."""

    action_listener: ActionListener | None = None

    def __init__(self, cfg: MarketConfig):
        self.cfg = cfg.validate()
        self.flow_model = SyntheticFlow(cfg.synthetic)
        # recentring keeps the quotes this far inside the window: the book the observation and the flow touch,
        # and the depth flow's ticks around the mid
        self.margin = max(cfg.synthetic.levels + cfg.obs_levels, cfg.depth_flow_ticks) + 2
        # mid in half ticks -> USD
        self._usd_per_half_tick = cfg.usd_per_tick / 2
        self._draw_buf: np.ndarray | None = None
        self._near: tuple[np.ndarray, ...] | None = None  # _near_mid_imbalance's index and buffers

    def new_state(self, n_books: int) -> SyntheticState:
        return SyntheticState.empty(n_books, self.cfg)

    def latent_regime(self, state: SyntheticState) -> np.ndarray:
        """[B] the hidden regime in {-1, 0, +1} that drives the flow (for the oracle; never observed)."""
        return state.regime.copy()

    def reset_rows(
        self, state: SyntheticState, rows: np.ndarray, keys: np.ndarray, first_step: np.ndarray | None = None
    ) -> None:
        """Opens a fresh episode in `rows` with per-book keys [len(rows)] uint64, at step first_step (Market)."""
        s = self.cfg.synthetic
        bk.open_books(state.book, rows, np.full(rows.shape[0], s.start_tick), s.base_depth)
        state.key[rows] = keys
        state.regime[rows] = self.flow_model.initial_regime(keys)
        for a in (
            state.t,
            state.position,
            state.cash_ticks,
            state.flow,
            state.flow_slow,
            state.depth_flow,
            state.depth_flow_slow,
            state.fees_usd,
            state.equity_usd,
        ):
            a[rows] = 0
        if first_step is not None:
            state.t[rows] = first_step

    def step(self, state: SyntheticState, actions: np.ndarray) -> StepResult:
        cfg = self.cfg
        book = state.book
        E = cfg.events_per_step
        h = hash_draws(state.key, state.t, E + 1, out=self._draws(E + 1, state.key.shape[0]))
        state.regime = self.flow_model.step_regime(state.regime, h[E])
        book.signed_volume[:] = 0
        K = cfg.depth_flow_ticks
        if K:
            near = (book.best[:, bk.BID] + book.best[:, bk.ASK]) // 2 - K  # window index of the ticks' lowest
            depth0 = self._near_mid_imbalance(book, near, K)
        listener = self.action_listener
        act = self._act if listener is None else self._act_reported
        taker_qty = taker_cash = posted = None
        events = self.flow_model.prepare(h[:E], state.regime)
        for e in range(E):
            if e == cfg.latency_events:
                taker_qty, taker_cash, posted = act(state, actions)
            events.apply(book, e)
        if taker_qty is None:
            taker_qty, taker_cash, posted = act(state, actions)
        passive_qty, passive_cash = bk.drain_fills(book)
        if K:  # before recentring: the same window indices are the same absolute ticks
            depth_flow = self._near_mid_imbalance(book, near, K) - depth0
        bk.recentre(book, self.margin, cfg.synthetic.base_depth)

        state.position += taker_qty + passive_qty
        state.cash_ticks += taker_cash + passive_cash
        fees = np.abs(taker_qty) * cfg.taker_fee_usd + np.abs(passive_qty) * cfg.maker_fee_usd
        state.fees_usd += fees
        d, ds = cfg.synthetic.flow_decay, cfg.synthetic.slow_flow_decay
        state.flow = d * state.flow + (1 - d) * book.signed_volume
        state.flow_slow = ds * state.flow_slow + (1 - ds) * book.signed_volume
        if K:
            state.depth_flow = d * state.depth_flow + (1 - d) * depth_flow
            state.depth_flow_slow = ds * state.depth_flow_slow + (1 - ds) * depth_flow
        state.t += 1
        equity = self.equity_usd(state)
        reward = equity - state.equity_usd
        state.equity_usd = equity
        result = StepResult(
            reward=reward, fills=taker_qty + passive_qty, fees_usd=fees, truncated=state.t >= cfg.horizon
        )
        if listener is not None:
            listener(ActionReport(taker=taker_qty, taker_cash_usd=taker_cash * cfg.usd_per_tick, posted=posted))
        return result

    def _act(self, state: SyntheticState, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, None]:
        """(signed taker contracts [B], taker cash in ticks [B], None: nothing posted is counted)."""
        # Passive fills earlier in this step count towards the position limit already.
        b = state.book
        position = state.position + b.own_filled[:, bk.BID] - b.own_filled[:, bk.ASK]
        qty, cash = apply_actions(
            state.book,
            position,
            actions,
            order_size=self.cfg.order_size,
            position_limit=self.cfg.position_limit,
        )
        return qty, cash, None

    def _act_reported(self, state: SyntheticState, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`_act`, with the contracts of the resting orders it newly placed [B] in place of None."""
        b = state.book
        size0, tick0 = b.own_size.copy(), b.own_tick.copy()
        qty, cash, _ = self._act(state, actions)
        return qty, cash, new_order_contracts(size0, tick0, b.own_size, b.own_tick)

    def _near_mid_imbalance(self, book: bk.BookState, low: np.ndarray, K: int) -> np.ndarray:
        """[B] int64 resting bid size minus resting ask size on window indices low .. low + 2K of each book."""
        W, shape = book.window, (book.n_books, 2 * K + 1)
        if self._near is None or self._near[0].shape != shape or self._near[0][-1, 0] != book.rows2[-1] * W:
            off = book.rows2[:, None] * W + np.arange(2 * K + 1)  # flat index of a row's bids at window index 0..2K
            self._near = (off, np.empty_like(off), np.empty(shape, book.depth.dtype), np.empty(shape, book.depth.dtype))
        off, i, bid, ask = self._near  # preallocated: [B, 2K+1] int64 temporaries would page-fault each step
        flat = book.depth.reshape(-1)
        np.add(off, low[:, None], out=i)
        np.take(flat, i, out=bid)
        np.add(i, W, out=i)
        np.take(flat, i, out=ask)
        np.subtract(bid, ask, out=bid)
        return bid.sum(axis=1, dtype=np.int64)

    def _draws(self, n: int, B: int) -> np.ndarray:
        if self._draw_buf is None or self._draw_buf.shape != (n, B):
            self._draw_buf = np.empty((n, B), np.uint64)
        return self._draw_buf

    def mid2(self, state: SyntheticState) -> np.ndarray:
        """Mid in absolute half ticks (best bid + best ask), an exact integer."""
        b = state.book
        return 2 * b.base + b.best[:, bk.BID] + b.best[:, bk.ASK]

    def equity_usd(self, state: SyntheticState) -> np.ndarray:
        half_ticks = 2 * state.cash_ticks + state.position * self.mid2(state)
        return half_ticks * self._usd_per_half_tick - state.fees_usd

    def observe(self, state: SyntheticState) -> np.ndarray:
        """float32 [B, 4L + 12] (+ 2 with the depth flow, last); layout in docs/market.md:

        [bid price offsets from mid (ticks) x L, bid sizes x L, ask offsets x L, ask sizes x L,
        spread (ticks), top-level imbalance (qb-qa)/(qb+qa), recent signed trade flow (fast and slow EMAs),
        position / limit,
        own bid: offset from mid, size, queue_ahead; own ask: offset, size, queue_ahead;
        fraction of time left].
        Levels are consecutive ticks from the best outward (an empty tick shows size 0); sizes are divided by
        size_scale; own-order entries are 0 when there is no order.
        """
        cfg, b = self.cfg, state.book
        L, W = cfg.obs_levels, b.window
        B = b.n_books
        bb, ba = b.best[:, bk.BID], b.best[:, bk.ASK]
        out = np.empty((B, obs_size(cfg)), np.float32)
        sc = np.float32(1.0 / cfg.size_scale)
        half_spread = (0.5 * (ba - bb)).astype(np.float32)
        low = bb - (L - 1)
        if low.min() >= 0 and ba.max() <= W - L:
            # The usual case (re-centring keeps the quotes well inside): each ladder is L contiguous ticks,
            # one gather of [B, L] blocks from a sliding-window view.
            win = np.lib.stride_tricks.sliding_window_view(b.depth, L, axis=2)
            rows = np.arange(B)
            # float32 arithmetic straight into `out`: [B, L] float64 temporaries would page-fault.
            np.multiply(win[rows, 0, low][:, ::-1], sc, out=out[:, L : 2 * L], dtype=np.float32)
            np.multiply(win[rows, 1, ba], sc, out=out[:, 3 * L : 4 * L], dtype=np.float32)
        else:
            depth = b.depth.reshape(-1)
            for s, best, sign in ((0, bb, -1), (1, ba, 1)):
                for k in range(L):
                    lv = best + sign * k
                    lvc = np.minimum(np.maximum(lv, 0), W - 1)
                    size = np.take(depth, b.rows2 * W + s * W + lvc)
                    out[:, (2 * s + 1) * L + k] = size * (lvc == lv) * sc  # beyond the window: 0
        k = np.arange(L, dtype=np.float32)
        np.add(half_spread[:, None], k, out=out[:, 2 * L : 3 * L])
        np.negative(out[:, 2 * L : 3 * L], out=out[:, 0:L])
        qb, qa = out[:, L] / sc, out[:, 3 * L] / sc
        o = 4 * L
        out[:, o] = ba - bb
        out[:, o + 1] = (qb - qa) / np.maximum(qb + qa, 1)
        out[:, o + 2] = state.flow * sc
        out[:, o + 3] = state.flow_slow * sc
        out[:, o + 4] = state.position * (1.0 / cfg.position_limit)
        mid = 0.5 * (bb + ba)
        for s in (0, 1):
            has = b.own_size[:, s] > 0
            out[:, o + 5 + 3 * s] = ((b.own_tick[:, s] - b.base) - mid) * has
            out[:, o + 6 + 3 * s] = b.own_size[:, s] * sc
            out[:, o + 7 + 3 * s] = b.own_ahead[:, s] * sc
        out[:, o + 11] = 1.0 - state.t * (1.0 / cfg.horizon)
        if cfg.depth_flow_ticks:
            out[:, o + OBS_FIXED] = state.depth_flow * sc
            out[:, o + OBS_FIXED + 1] = state.depth_flow_slow * sc
        return out

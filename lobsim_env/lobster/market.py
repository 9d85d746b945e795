"""The agent trading against a replayed LOBSTER day (MarketConfig(source="lobster", lobster_path=...)).

Semantics (docs/market.md, "LOBSTER replay"):
- An episode is `horizon` steps of `events_per_step` messages from a start message drawn from the book's key
  (so seeds sample different windows of the day). The visible book at message k is the file's orderbook row
  k, which `lobsim_env.lobster.reconstruct` reproduces from the messages.
- The agent's marketable orders walk the displayed levels at the displayed prices and leave no trace: the
  replayed book does not react to them (no persistent market impact).
- Its passive order joins the back of the displayed queue: queue_ahead = the displayed size at its price.
  Visible executions (type 4) at its price consume queue_ahead, then fill it; cancels and deletions
  (types 2, 3) at its price reduce queue_ahead only for orders that rested before it joined (added before
  the join message, or never seen added: they rested before the window opened), never for later orders.
  A visible execution at a price beyond it (a sell below its bid) or a visible opposite quote that reaches
  its price fills it at its price (the flow traded through it). Hidden executions (type 5) never touch the
  visible book and never fill the agent.
- Prices are LOBSTER units (dollars * 10000); one tick is 100 units (one cent). With one share per contract,
  usd_per_tick = 0.01 (`lobster_config` sets it, with per-share fees).
This market loops over books and messages in Python: the speed target is the synthetic market's.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from lobsim_env.config import MarketConfig
from lobsim_env.lobster.files import TICK, LobsterDay, load_day
from lobsim_env.market import (
    OBS_FIXED,
    Action,
    ActionListener,
    ActionReport,
    StepResult,
    new_order_contracts,
    obs_size,
)


def lobster_config(path: str, **overrides) -> MarketConfig:
    """A MarketConfig for a LOBSTER day: one share per contract, a one-cent tick = $0.01, per-share fees."""
    base = {
        "source": "lobster",
        "lobster_path": str(path),
        "tick_size": 0.01,
        "usd_per_tick": 0.01,
        "maker_fee_usd": -0.002,
        "taker_fee_usd": 0.003,
        "position_limit": 500,
        "order_size": 100,
        "size_scale": 1000.0,
        "events_per_step": 20,
        "horizon": 500,
    }
    base.update(overrides)
    return MarketConfig(**base).validate()


@dataclass(kw_only=True, slots=True)
class LobsterState:
    """B agents, each on its own window of the same day. Own-order arrays are [B, 2] (0 bid, 1 ask)."""

    start: np.ndarray
    t: np.ndarray
    position: np.ndarray
    cash_units: np.ndarray
    """Cash in LOBSTER price units x contracts."""
    fees_usd: np.ndarray
    equity_usd: np.ndarray
    flow: np.ndarray
    flow_slow: np.ndarray
    depth_flow: np.ndarray
    """EMA (flow_decay) of the visible depth flow near the mid (MarketConfig.depth_flow_ticks); 0 when off."""
    depth_flow_slow: np.ndarray
    last_mid2: np.ndarray
    own_price: np.ndarray
    own_size: np.ndarray
    own_ahead: np.ndarray
    own_join: np.ndarray
    """Message index at which the order joined (orders added at or after it are behind it)."""

    @classmethod
    def empty(cls, n: int) -> LobsterState:
        z, z2 = np.zeros(n, np.int64), np.zeros((n, 2), np.int64)
        return cls(
            start=z.copy(),
            t=z.copy(),
            position=z.copy(),
            cash_units=z.copy(),
            fees_usd=np.zeros(n),
            equity_usd=np.zeros(n),
            flow=np.zeros(n),
            flow_slow=np.zeros(n),
            depth_flow=np.zeros(n),
            depth_flow_slow=np.zeros(n),
            last_mid2=z.copy(),
            own_price=z2.copy(),
            own_size=z2.copy(),
            own_ahead=z2.copy(),
            own_join=z2.copy(),
        )


class LobsterMarket:
    """`lobsim_env.market.Market` over a LOBSTER day."""

    action_listener: ActionListener | None = None

    def __init__(self, cfg: MarketConfig, day: LobsterDay | None = None):
        self.cfg = cfg.validate()
        self.day = load_day(cfg.lobster_path) if day is None else day
        if self.day.book is None:
            raise ValueError(f"{self.day.source}: the LOBSTER market needs the orderbook file beside the messages")
        span = cfg.horizon * cfg.events_per_step
        if span + 1 >= self.day.n_messages:
            raise ValueError(
                f"market.horizon * market.events_per_step = {span} must be < the day's "
                f"{self.day.n_messages - 1} messages ({self.day.source}); lower horizon or events_per_step"
            )
        d = self.day
        self._types = d.event_type.tolist()
        self._prices = d.price.tolist()
        self._sizes = d.size.tolist()
        self._dirs = d.direction.tolist()
        self._add_idx = _first_add_index(d.event_type, d.order_id).tolist()
        self._span = span
        self._units_to_usd = cfg.usd_per_tick / TICK

    def new_state(self, n_books: int) -> LobsterState:
        return LobsterState.empty(n_books)

    def latent_regime(self, state: LobsterState) -> np.ndarray:
        raise ValueError("a LOBSTER replay has no latent regime: the oracle baseline needs source='synthetic'")

    def reset_rows(
        self, state: LobsterState, rows: np.ndarray, keys: np.ndarray, first_step: np.ndarray | None = None
    ) -> None:
        """Opens a fresh episode in `rows` (a window of the day drawn from each key), at step first_step (Market):
        the window is the same, its first first_step * events_per_step messages already played."""
        # Start >= 1 so the book before the first message is a file row.
        choices = np.uint64(self.day.n_messages - 1 - self._span)
        state.start[rows] = 1 + (np.asarray(keys, np.uint64) % choices).astype(np.int64)
        for a in (
            state.t,
            state.position,
            state.cash_units,
            state.fees_usd,
            state.equity_usd,
            state.flow,
            state.flow_slow,
            state.depth_flow,
            state.depth_flow_slow,
        ):
            a[rows] = 0
        for a in (state.own_price, state.own_size, state.own_ahead, state.own_join):
            a[rows] = 0
        if first_step is not None:
            state.t[rows] = first_step
        E = self.cfg.events_per_step
        for r in rows:
            state.last_mid2[r] = self._mid2(int(state.start[r] + state.t[r] * E) - 1, 0)

    def _mid2(self, row: int, fallback: int) -> int:
        ask, bid = int(self.day.book[row, 0]), int(self.day.book[row, 2])
        if self.day.book[row, 1] > 0 and self.day.book[row, 3] > 0:
            return ask + bid
        return fallback

    def step(self, state: LobsterState, actions: np.ndarray) -> StepResult:
        cfg, E = self.cfg, self.cfg.events_per_step
        B = state.t.shape[0]
        fills = np.zeros(B, np.int64)
        fees = np.zeros(B)
        listener = self.action_listener
        if listener is None:
            act = self._act
        else:  # the same action, with what it did recorded book by book
            report = ActionReport(taker=np.zeros(B, np.int64), taker_cash_usd=np.zeros(B), posted=np.zeros(B, np.int64))
            act = functools.partial(self._act_reported, report)
        H, K = cfg.horizon, cfg.depth_flow_ticks
        for r in range(B):
            if state.t[r] >= H:  # a finished book (the vector env's autoreset step): past its window, reset next
                continue
            k0 = int(state.start[r] + state.t[r] * E)
            if K:
                depth0 = self._near_mid_imbalance(k0 - 1, int(state.last_mid2[r]), K)
            signed_volume = 0
            for e in range(E + 1):
                k = k0 + e
                if e == cfg.latency_events:
                    q, f = act(state, r, int(actions[r]), row=k - 1, msg=k)
                    fills[r] += q
                    fees[r] += f
                if e == E:
                    break
                q, v = self._message(state, r, k)
                fills[r] += q
                fees[r] += abs(q) * cfg.maker_fee_usd
                signed_volume += v
            d, ds = cfg.synthetic.flow_decay, cfg.synthetic.slow_flow_decay
            state.flow[r] = d * state.flow[r] + (1 - d) * signed_volume
            state.flow_slow[r] = ds * state.flow_slow[r] + (1 - ds) * signed_volume
            if K:  # the same prices, after the step's messages
                w = self._near_mid_imbalance(k0 + E - 1, int(state.last_mid2[r]), K) - depth0
                state.depth_flow[r] = d * state.depth_flow[r] + (1 - d) * w
                state.depth_flow_slow[r] = ds * state.depth_flow_slow[r] + (1 - ds) * w
            state.last_mid2[r] = self._mid2(k0 + E - 1, int(state.last_mid2[r]))
        state.fees_usd += fees
        state.t += 1
        equity = (state.cash_units + state.position * state.last_mid2 / 2) * self._units_to_usd - state.fees_usd
        reward = equity - state.equity_usd
        state.equity_usd = equity
        result = StepResult(reward=reward, fills=fills, fees_usd=fees, truncated=state.t >= cfg.horizon)
        if listener is not None:
            listener(report)
        return result

    def _near_mid_imbalance(self, row: int, mid2: int, K: int) -> int:
        """Visible bid size minus visible ask size at prices within K ticks of the mid (mid2 / 2) in book row
        `row` (the day's file shows its first `levels` non-empty levels a side: with 1, the best quotes only)."""
        book = self.day.book[row]
        near = np.abs(2 * book[0::2] - mid2) <= 2 * K * TICK  # [2 * levels]: ask, bid, ask, bid, ... prices
        sizes = book[1::2] * near
        return int(sizes[1::2].sum() - sizes[0::2].sum())

    # ---- one book, one message / one action -------------------------------------------------------------

    def _fill(self, state: LobsterState, r: int, side: int, qty: int) -> int:
        """Books a passive fill of the agent's order on `side` at its price; returns signed contracts."""
        qty = min(qty, int(state.own_size[r, side]))
        if qty <= 0:
            return 0
        state.own_size[r, side] -= qty
        signed = qty if side == 0 else -qty
        state.position[r] += signed
        state.cash_units[r] -= signed * int(state.own_price[r, side])
        return signed

    def _message(self, state: LobsterState, r: int, k: int) -> tuple[int, int]:
        """Applies message k to book r's agent. Returns (signed passive fill, signed visible volume)."""
        kind, price, size, direction = self._types[k], self._prices[k], self._sizes[k], self._dirs[k]
        volume = 0
        filled = 0
        side = 0 if direction == 1 else 1
        if kind == 4:
            volume = -size if direction == 1 else size  # a resting buy executed = a sell came in
        if state.own_size[r, side] > 0 and kind in (2, 3, 4):
            own = int(state.own_price[r, side])
            if kind == 4 and price == own:
                from_ahead = min(size, int(state.own_ahead[r, side]))
                state.own_ahead[r, side] -= from_ahead
                filled += self._fill(state, r, side, size - from_ahead)
            elif kind == 4 and (price < own if side == 0 else price > own):
                filled += self._fill(state, r, side, size)  # traded through the agent's price
            elif kind in (2, 3) and price == own and self._add_idx[k] < state.own_join[r, side]:
                state.own_ahead[r, side] -= min(size, int(state.own_ahead[r, side]))
        # The visible opposite quote reaching the agent's price fills it there.
        row = self.day.book[k]
        if state.own_size[r, 0] > 0 and row[1] > 0 and row[0] <= state.own_price[r, 0]:
            filled += self._fill(state, r, 0, int(state.own_size[r, 0]))
        if state.own_size[r, 1] > 0 and row[3] > 0 and row[2] >= state.own_price[r, 1]:
            filled += self._fill(state, r, 1, int(state.own_size[r, 1]))
        return filled, volume

    def _act(self, state: LobsterState, r: int, action: int, *, row: int, msg: int) -> tuple[int, float]:
        """Applies an action against the visible book `row`; returns (signed taker contracts, taker fees)."""
        cfg = self.cfg
        L, os_ = cfg.position_limit, cfg.order_size
        pos = int(state.position[r])
        book = self.day.book[row]
        taken = 0
        if action in (Action.CANCEL, Action.FLATTEN):
            state.own_size[r] = 0
        if action == Action.MARKET_BUY:
            state.own_size[r, 1] = 0
            taken = self._take(state, r, book, buy=True, qty=min(os_, L - pos - int(state.own_size[r, 0])))
        elif action == Action.MARKET_SELL:
            state.own_size[r, 0] = 0
            taken = -self._take(state, r, book, buy=False, qty=min(os_, L + pos - int(state.own_size[r, 1])))
        elif action == Action.FLATTEN and pos != 0:
            taken = self._take(state, r, book, buy=pos < 0, qty=abs(pos)) * (1 if pos < 0 else -1)
        elif action in (Action.JOIN_BID, Action.JOIN_ASK):
            side = 0 if action == Action.JOIN_BID else 1
            col = 2 if side == 0 else 0  # LOBSTER rows: ask_p1, ask_s1, bid_p1, bid_s1, ...
            price, size = int(book[col]), int(book[col + 1])
            if size > 0 and not (state.own_size[r, side] > 0 and state.own_price[r, side] == price):
                want = max(0, min(os_, L - pos if side == 0 else L + pos))
                state.own_size[r, side] = want
                state.own_price[r, side] = price
                state.own_ahead[r, side] = size
                state.own_join[r, side] = msg
        return taken, abs(taken) * cfg.taker_fee_usd

    def _act_reported(
        self, report: ActionReport, state: LobsterState, r: int, action: int, *, row: int, msg: int
    ) -> tuple[int, float]:
        """`_act`, writing into row r of `report` its taker contracts and cash (USD) and what it newly rested."""
        size0, price0, cash0 = state.own_size[r].copy(), state.own_price[r].copy(), int(state.cash_units[r])
        taken, fee = self._act(state, r, action, row=row, msg=msg)
        report.taker[r] = taken
        report.taker_cash_usd[r] = (int(state.cash_units[r]) - cash0) * self._units_to_usd
        report.posted[r] = new_order_contracts(size0, price0, state.own_size[r], state.own_price[r])
        return taken, fee

    def _take(self, state: LobsterState, r: int, book: np.ndarray, *, buy: bool, qty: int) -> int:
        """Walks the displayed levels (asks for a buy); books the fills; returns contracts filled."""
        done = 0
        col = 0 if buy else 2
        for lvl in range(self.day.levels):
            if done >= qty:
                break
            price, size = int(book[4 * lvl + col]), int(book[4 * lvl + col + 1])
            if size <= 0:
                break
            c = min(size, qty - done)
            done += c
            state.cash_units[r] += -c * price if buy else c * price
        state.position[r] += done if buy else -done
        return done

    def observe(self, state: LobsterState) -> np.ndarray:
        """Same layout as synthetic.market.SyntheticMarket.observe, from the visible LOBSTER levels (ticks = cents)."""
        cfg = self.cfg
        L = cfg.obs_levels
        B = state.t.shape[0]
        out = np.zeros((B, obs_size(cfg)), np.float32)
        n = min(L, self.day.levels)
        sc = 1.0 / cfg.size_scale
        for r in range(B):
            k = int(state.start[r] + state.t[r] * cfg.events_per_step) - 1
            row = self.day.book[k]
            mid2 = state.last_mid2[r]
            ap, asz, bp, bsz = row[0::4][:n], row[1::4][:n], row[2::4][:n], row[3::4][:n]
            out[r, 0:n] = np.where(bsz > 0, (2 * bp - mid2) / (2 * TICK), 0)
            out[r, L : L + n] = bsz * sc
            out[r, 2 * L : 2 * L + n] = np.where(asz > 0, (2 * ap - mid2) / (2 * TICK), 0)
            out[r, 3 * L : 3 * L + n] = asz * sc
            o = 4 * L
            both = asz[0] > 0 and bsz[0] > 0
            out[r, o] = (ap[0] - bp[0]) / TICK if both else 0
            out[r, o + 1] = (bsz[0] - asz[0]) / max(bsz[0] + asz[0], 1)
            out[r, o + 2] = state.flow[r] * sc
            out[r, o + 3] = state.flow_slow[r] * sc
            out[r, o + 4] = state.position[r] / cfg.position_limit
            for s in (0, 1):
                if state.own_size[r, s] > 0:
                    out[r, o + 5 + 3 * s] = (2 * state.own_price[r, s] - mid2) / (2 * TICK)
                    out[r, o + 6 + 3 * s] = state.own_size[r, s] * sc
                    out[r, o + 7 + 3 * s] = state.own_ahead[r, s] * sc
            out[r, o + 11] = 1.0 - state.t[r] / cfg.horizon
        if cfg.depth_flow_ticks:
            out[:, 4 * L + OBS_FIXED] = state.depth_flow * sc
            out[:, 4 * L + OBS_FIXED + 1] = state.depth_flow_slow * sc
        return out


def _first_add_index(event_type: np.ndarray, order_id: np.ndarray) -> np.ndarray:
    """For each message, the index of the submission (type 1) of its order id; -1 if never seen added."""
    adds = np.flatnonzero(event_type == 1)
    ids = order_id[adds]
    order = np.argsort(ids, kind="stable")
    sid, sidx = ids[order], adds[order]
    pos = np.searchsorted(sid, order_id)
    posc = np.minimum(pos, max(len(sid) - 1, 0))
    found = (pos < len(sid)) & (sid[posc] == order_id) if len(sid) else np.zeros(order_id.shape, bool)
    return np.where(found, sidx[posc] if len(sid) else -1, -1)

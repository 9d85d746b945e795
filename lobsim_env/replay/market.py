"""The agent against real days from the cache (MarketConfig(source="replay", data=DIR, days=...)): B books, each on
its own window of its own day, stepped together.

The days are a cache's (lobsim_env.data: `python -m lobsim_env.data ingest`), memory-mapped: every rollout actor on a
host reads the one copy in the page cache, and a process's memory does not grow with the number of days.

Semantics: docs/market.md, "LOBSTER replay", which this market keeps for every source:
- An episode is `horizon` steps of `events_per_step` messages of one day, from a start message drawn from the
  book's key (the day too, when there are several: `day = mix(key) % days`, `start = 1 + key % (n - 1 - span)`,
  so with one day the windows are LobsterMarket's). A window never crosses its day's end.
- The agent's orders reach the book after `latency_events` messages of the step, moved on to the end of the venue
  message they fell inside (`arrivals`: the run of messages sharing the timestamp of the last one before them), and
  never past the step's end (docs/data.md, "The replay market").
- The agent's marketable orders walk the displayed levels at the displayed prices and leave no trace.
- Its passive order joins behind the displayed size at its price. L3 days (LOBSTER, Databento MBO): executions at
  its price consume the queue ahead, then fill it; cancels and deletions at its price shorten the queue only for
  orders that rested before it joined. L2 days (Binance, Tardis): a trade print at its price consumes the queue
  ahead, then fills it; a depth update at its price moves the queue ahead by the queue model
  (MarketConfig.queue_model: "risk_averse", hftbacktest's RiskAverseQueueModel: the queue ahead only shrinks to
  the level's new size, so a cancel is taken to be behind; "prob", its ProbQueueModel with f(x) = x ** queue_power:
  a decrease is behind the agent with probability f(back) / (f(back) + f(front))). On both, a trade beyond its price
  or the opposite best quote reaching it fills it at its price.
- Prices are the day's ticks, sizes its lots; PnL in USD from the day's manifest (usd_per_tick: tick x lot x
  multiplier), fees per lot (maker_fee_usd, taker_fee_usd) plus a share of the notional (maker_fee_bps,
  taker_fee_bps). Every day of one market has one contract (the same tick, lot and multiplier).

The step runs in C (lobsim_env/replay/_replay_fast.c, through ctypes) where `pip install -e .` built it; without it,
`_step_python` below (the same rules, one book at a time: the reference tests/test_replay.py holds the C to).
"""

from __future__ import annotations

import ctypes
import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lobsim_env.config import MarketConfig
from lobsim_env.data import layout
from lobsim_env.data.layout import CANCEL, DELETE, EXECUTE, LEVEL, TRADE, DataError, Day, Manifest
from lobsim_env.market import OBS_FIXED, Action, ActionListener, ActionReport, StepResult, obs_size

try:
    from lobsim_env.replay import _replay_fast as _C
except ImportError:  # not built: the Python step, same results
    _C = None
_API = 2
if _C is not None and getattr(_C, "API", None) != _API:
    warnings.warn(
        f"{_C.__file__} was built from another version of _replay_fast.c (API {getattr(_C, 'API', None)}, this code "
        f"needs {_API}); stepping in Python. Rebuild it: pip install -e .",
        stacklevel=1,
    )
    _C = None

QUEUE_MODELS = ("risk_averse", "prob")


def compiled() -> bool:
    """Whether the C step is built (else the market steps its books in Python, far slower)."""
    return _C is not None


def replay_config(data: str | Path, days: tuple[str, ...] | list[str] = (), **overrides) -> MarketConfig:
    """A MarketConfig for days of a cache, its contract from their manifests: tick, USD per tick and lot, fees, an
    order of the day's median trade (`order_lots`), a position limit of 5 orders, sizes observed in tens of orders,
    and the days' median mid (reference_price_ticks: what the bps fees of one order cost, for the reward scale)."""
    manifests = layout.select_days(data, list(days))
    m = contract_of(manifests)
    mids = []
    for day in manifests:  # every 1,000th row of each day: the median mid prices the bps fees (reward scale)
        book = layout.open_day(layout.day_dir(data, day)).book[::1000]
        both = (book[:, 1] > 0) & (book[:, 3] > 0)
        mids.append((book[both, 0] + book[both, 2]) // 2)
    base = {
        "source": "replay",
        "data": str(data),
        "days": tuple(d.key for d in manifests),
        "tick_size": m.tick_size,
        "usd_per_tick": m.usd_per_tick_lot,
        "maker_fee_usd": m.maker_fee_per_lot * m.quote_usd,
        "taker_fee_usd": m.taker_fee_per_lot * m.quote_usd,
        "maker_fee_bps": m.maker_fee_bps,
        "taker_fee_bps": m.taker_fee_bps,
        "order_size": m.order_lots,
        "position_limit": 5 * m.order_lots,
        "size_scale": float(10 * m.order_lots),
        "events_per_step": 20,
        "horizon": 500,
        "queue_model": "risk_averse",
        "reference_price_ticks": int(np.median(np.concatenate(mids))) if sum(map(len, mids)) else 0,
    }
    base.update(overrides)
    return MarketConfig(**base).validate()


def open_periods(cfg: MarketConfig) -> tuple[list[Day], list[tuple[int, int]]]:
    """The periods of cfg.days in cfg.data: each day whole, or with cfg.blocks > 1 each of its blocks (a name ending
    in '#k' picks block k), as (the day, opened once, memory-mapped) and its event range [lo, hi). Block k spans
    first_ts + k x (last_ts - first_ts) / blocks to the next boundary, the last one to the day's end."""
    root, opened = Path(cfg.data), {}
    days, ranges = [], []
    for name in cfg.days or ("",):
        base, _, block = name.partition("#")
        if block and (not block.isdigit() or int(block) >= cfg.blocks):
            raise DataError(f"market.days: {name!r} names block {block}, and market.blocks={cfg.blocks} (0..blocks-1)")
        for m in layout.select_days(root, [base] if base else []):
            if m.key not in opened:
                opened[m.key] = layout.open_day(layout.day_dir(root, m))
            day = opened[m.key]
            for k in [int(block)] if block else range(cfg.blocks):
                days.append(day)
                ranges.append(block_range(day, k, cfg.blocks))
    return days, ranges


def block_range(day: Day, k: int, blocks: int) -> tuple[int, int]:
    """[lo, hi): the events of block k of `blocks` of equal time over the day's span."""
    if blocks == 1:
        return 0, day.manifest.n_events
    first, last = day.manifest.first_ts, day.manifest.last_ts
    edges = [first + (last - first) * j // blocks for j in (k, k + 1)]
    ts = day.events["ts"]
    lo = int(np.searchsorted(ts, edges[0], "left")) if k else 0
    hi = int(np.searchsorted(ts, edges[1], "left")) if k + 1 < blocks else day.manifest.n_events
    return lo, hi


def contract_of(manifests: list[Manifest]) -> Manifest:
    """The first day's manifest, once every day is checked to share its contract; DataError naming the odd one."""
    if not manifests:
        raise DataError("no days: a replay market needs at least one day of a cache")
    first = manifests[0]
    for m in manifests[1:]:
        for name in ("tick_size", "lot_size", "contract_multiplier", "inverse", "quote_usd"):
            if getattr(m, name) != getattr(first, name):
                raise DataError(
                    f"days {first.key} and {m.key} differ in {name} ({getattr(first, name)!r} and "
                    f"{getattr(m, name)!r}): one market trades one contract; pick days of one contract with --days"
                )
    if first.inverse:
        raise DataError(
            f"{first.key} is an inverse contract (PnL in the coin): the replay market marks PnL linearly in USD, "
            "so it trains on linear contracts only (spot, USD-M); ingest and check work for it"
        )
    return first


@dataclass(kw_only=True, slots=True)
class ReplayState:
    """B agents, each on its own window of its own day. Own-order arrays are [B, 2] (0 bid, 1 ask)."""

    day: np.ndarray
    start: np.ndarray
    t: np.ndarray
    position: np.ndarray
    cash: np.ndarray
    """Cash in ticks x lots."""
    fees_usd: np.ndarray
    equity_usd: np.ndarray
    flow: np.ndarray
    flow_slow: np.ndarray
    depth_flow: np.ndarray
    depth_flow_slow: np.ndarray
    last_mid2: np.ndarray
    own_price: np.ndarray
    own_size: np.ndarray
    own_join: np.ndarray
    """Message index at which the order joined (L3: orders first seen at or after it are behind it)."""
    own_ahead: np.ndarray
    """float64: lots ahead of the order in its queue (fractional under the "prob" queue model)."""

    @classmethod
    def empty(cls, n: int) -> ReplayState:
        z, f, z2 = (lambda: np.zeros(n, np.int64)), (lambda: np.zeros(n)), (lambda: np.zeros((n, 2), np.int64))
        return cls(
            day=z(), start=z(), t=z(), position=z(), cash=z(), fees_usd=f(), equity_usd=f(), flow=f(), flow_slow=f(),
            depth_flow=f(), depth_flow_slow=f(), last_mid2=z(), own_price=z2(), own_size=z2(), own_join=z2(),
            own_ahead=np.zeros((n, 2)),
        )  # fmt: skip


_STATE_FIELDS = (
    ("day", ctypes.c_int64),
    ("start", ctypes.c_int64),
    ("t", ctypes.c_int64),
    ("position", ctypes.c_int64),
    ("cash", ctypes.c_int64),
    ("fees_usd", ctypes.c_double),
    ("equity_usd", ctypes.c_double),
    ("flow", ctypes.c_double),
    ("flow_slow", ctypes.c_double),
    ("depth_flow", ctypes.c_double),
    ("depth_flow_slow", ctypes.c_double),
    ("last_mid2", ctypes.c_int64),
    ("own_price", ctypes.c_int64),
    ("own_size", ctypes.c_int64),
    ("own_join", ctypes.c_int64),
    ("own_ahead", ctypes.c_double),
)


class _Days(ctypes.Structure):
    _fields_ = [
        ("events", ctypes.POINTER(ctypes.c_void_p)),
        ("book", ctypes.POINTER(ctypes.c_void_p)),
        ("levels", ctypes.POINTER(ctypes.c_int64)),
    ]


class _Params(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_int64)
        for name in (
            "events_per_step",
            "latency_events",
            "horizon",
            "depth_flow_ticks",
            "position_limit",
            "order_size",
            "obs_levels",
            "queue_model",
        )
    ] + [
        (name, ctypes.c_double)
        for name in (
            "flow_decay",
            "slow_flow_decay",
            "usd_per_tick_lot",
            "maker_fee_lot",
            "taker_fee_lot",
            "maker_fee_rate",
            "taker_fee_rate",
            "queue_power",
            "size_scale",
        )
    ]


class _State(ctypes.Structure):
    _fields_ = [(name, ctypes.POINTER(ctype)) for name, ctype in _STATE_FIELDS]


class _Report(ctypes.Structure):
    _fields_ = [
        ("taker", ctypes.POINTER(ctypes.c_int64)),
        ("taker_cash_usd", ctypes.POINTER(ctypes.c_double)),
        ("posted", ctypes.POINTER(ctypes.c_int64)),
    ]


def _ptr(a: np.ndarray, ctype) -> ctypes._Pointer:
    return a.ctypes.data_as(ctypes.POINTER(ctype))


if _C is not None:
    _step_addr, _observe_addr, *_sizes = _C.addresses()
    _expected = [layout.EVENT_DTYPE.itemsize, *(ctypes.sizeof(s) for s in (_Days, _Params, _State, _Report))]
    if _sizes != _expected:  # the C structs and these mirrors must agree byte for byte
        raise ImportError(f"lobsim_env/replay/_replay_fast.c's structs are {_sizes} bytes, the mirrors {_expected}")
    _c_step = ctypes.CFUNCTYPE(
        None,
        ctypes.POINTER(_Days),
        ctypes.POINTER(_Params),
        ctypes.POINTER(_State),
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(_Report),
    )(_step_addr)
    _c_observe = ctypes.CFUNCTYPE(
        None,
        ctypes.POINTER(_Days),
        ctypes.POINTER(_Params),
        ctypes.POINTER(_State),
        ctypes.c_int64,
        ctypes.POINTER(ctypes.c_float),
        ctypes.c_int64,
    )(_observe_addr)


def arrivals(ts: np.ndarray, due: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The message each order reaches the book before: an order due before message `due` (a step's first message
    plus latency_events) waits for the end of the run of messages sharing the timestamp of message due - 1, so it
    meets the book after a whole venue message (a Binance depth update is tens to hundreds of LEVEL messages of one
    time; hftbacktest, like the venue, applies every event of a time before an order of that time), and at most
    until `end` (the step's end: one past its last message).

    Why the step's end caps it: a step keeps its events_per_step messages, so every window of one span covers the
    same messages whatever the agent does, and the step's order is in the book when the next observation is taken
    (that observation shows it resting, with its queue, and the step's reward has its fills). Its cost: a message
    longer than what is left of the step is met where the step ends, in its middle, which is where the observation
    stands too (a step of a fixed message count can end inside a message).

    ts: one day's message times; due, end: int arrays (or ints) of one shape, due <= end, due >= 1. The run is of
    consecutive messages of one time (no order of times is assumed). The C step scans the same run
    (_replay_fast.c)."""
    due, end = np.asarray(due, np.int64), np.asarray(end, np.int64)
    lo, hi = int(due.min()) - 1, int(end.max())
    times = np.asarray(ts[lo : hi + 1])
    # the messages j in (lo, hi] whose time is not message j - 1's (each opens a run), then hi as a sentinel
    starts = np.append(np.flatnonzero(times[1:] != times[:-1]) + lo + 1, hi)
    return np.minimum(starts[np.searchsorted(starts, due, "left")], end)  # the first run opening at or after `due`


def _mix(keys: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: the day of a key, independent of its start (key % choices)."""
    z = keys.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class ReplayMarket:
    """`lobsim_env.market.Market` over days of a cache."""

    action_listener: ActionListener | None = None

    def __init__(self, cfg: MarketConfig, days: list[Day] | None = None, *, use_c: bool | None = None):
        """days: the days already open (else cfg.days of cfg.data). use_c: None (the C step where built), or force it
        on (ImportError where not built) or off (the Python reference)."""
        self.cfg = cfg.validate()
        if days is None:
            if cfg.source != "replay" or not cfg.data:
                raise ValueError(f"market.source={cfg.source!r}: the replay market needs source='replay' and data")
            days, ranges = open_periods(cfg)
        else:
            ranges = [(0, d.manifest.n_events) for d in days]
        self.days = days
        """The market's periods' days, one entry a period (a day, or a block of it: MarketConfig.blocks); a book's
        `state.day` indexes this list and _lo / _hi."""
        self._lo = np.array([lo for lo, _ in ranges], np.int64)
        self._hi = np.array([hi for _, hi in ranges], np.int64)
        m = contract_of([d.manifest for d in days])
        if not math.isclose(cfg.usd_per_tick, m.usd_per_tick_lot, rel_tol=1e-9) or not math.isclose(
            cfg.tick_size, m.tick_size, rel_tol=1e-9
        ):
            raise DataError(
                f"market.tick_size={cfg.tick_size} and usd_per_tick={cfg.usd_per_tick} are not the contract of "
                f"{m.key} (tick {m.tick_size}, {m.usd_per_tick_lot:g} USD a tick and lot): build the config with "
                "lobsim_env.replay.replay_config (the driver's --data does)"
            )
        self._span = cfg.horizon * cfg.events_per_step
        for d, lo, hi in zip(days, self._lo, self._hi, strict=True):
            if self._span + 1 >= hi - lo:
                what = d.key if hi - lo == d.manifest.n_events else f"a block of {d.key} (market.blocks={cfg.blocks})"
                raise DataError(
                    f"market.horizon * market.events_per_step = {self._span} must be < the {hi - lo - 1} messages of "
                    f"{what}; lower horizon, events_per_step or blocks, or leave that day out"
                )
        self._plans: tuple | None = None  # hindsight_actions' plans
        self._c_kept: tuple | None = None  # _c_state's pointers of the last state, with its arrays
        self._levels = np.array([d.manifest.levels for d in days], np.int64)
        if use_c and _C is None:
            raise ImportError("lobsim_env.replay._replay_fast is not built (pip install -e . with a C compiler)")
        self._use_c = _C is not None if use_c is None else use_c
        self._params = _Params(
            events_per_step=cfg.events_per_step,
            latency_events=cfg.latency_events,
            horizon=cfg.horizon,
            depth_flow_ticks=cfg.depth_flow_ticks,
            position_limit=cfg.position_limit,
            order_size=cfg.order_size,
            obs_levels=cfg.obs_levels,
            queue_model=QUEUE_MODELS.index(cfg.queue_model),
            flow_decay=cfg.synthetic.flow_decay,
            slow_flow_decay=cfg.synthetic.slow_flow_decay,
            usd_per_tick_lot=cfg.usd_per_tick,
            maker_fee_lot=cfg.maker_fee_usd,
            taker_fee_lot=cfg.taker_fee_usd,
            maker_fee_rate=cfg.maker_fee_bps * 1e-4,
            taker_fee_rate=cfg.taker_fee_bps * 1e-4,
            queue_power=cfg.queue_power,
            size_scale=cfg.size_scale,
        )
        self._event_addr = (ctypes.c_void_p * len(days))(*(d.events.ctypes.data for d in days))
        self._book_addr = (ctypes.c_void_p * len(days))(*(d.book.ctypes.data for d in days))
        self._days_c = _Days(
            events=ctypes.cast(self._event_addr, ctypes.POINTER(ctypes.c_void_p)),
            book=ctypes.cast(self._book_addr, ctypes.POINTER(ctypes.c_void_p)),
            levels=_ptr(self._levels, ctypes.c_int64),
        )

    # ------------------------------------------------------------------------------------------ the protocol

    def new_state(self, n_books: int) -> ReplayState:
        return ReplayState.empty(n_books)

    def latent_regime(self, state: ReplayState) -> np.ndarray:
        raise ValueError("a real day has no latent regime: its yardsticks are flat, imbalance and the hindsight bound")

    def hindsight_actions(self, state: ReplayState) -> np.ndarray:
        """[B] the hindsight bound's actions (lobsim_env.baselines.hindsight): market orders of order_size, one a
        step at most, that make the most PnL over each book's window with the whole window known (the prices at
        which each step's order would be filled, the mid the window ends on, the taker fees). A dynamic programme
        over the position in orders, planned when a book's window starts (or at its first call) and followed from
        there. No agent that sees only the past can match it: a ceiling of what market orders could earn on these
        windows (a passive agent's rebates and spread are outside it)."""
        B, H = state.t.shape[0], self.cfg.horizon
        if self._plans is None or self._plans[0] is not state:  # the plans of the state it last saw
            self._plans = (state, np.full(B, -1, np.int64), np.full(B, -1, np.int64), np.zeros((B, H + 1), np.int64))
        _, key_day, key_start, targets = self._plans
        stale = (state.t < H) & ((key_day != state.day) | (key_start != state.start))
        if stale.any():
            self._plan(state, np.flatnonzero(stale), targets)
            key_day[stale], key_start[stale] = state.day[stale], state.start[stale]
        os_ = self.cfg.order_size
        t = np.minimum(state.t, H)
        want = targets[np.arange(B), t] * os_
        act = np.where(state.position < want, Action.MARKET_BUY, np.where(state.position > want, Action.MARKET_SELL, 0))
        return np.where(state.t < H, act, Action.HOLD).astype(np.int64)

    def _plan(self, state: ReplayState, rows: np.ndarray, targets: np.ndarray) -> None:
        """targets[r, t]: the position (in orders) the bound holds after step t's order, for rows `rows`."""
        cfg, H, E = self.cfg, self.cfg.horizon, self.cfg.events_per_step
        n, os_ = cfg.position_limit // cfg.order_size, cfg.order_size
        t0 = state.t[rows].copy()
        steps = np.arange(H)
        due = state.start[rows, None] + steps[None, :] * E + cfg.latency_events  # [R, H]
        end_rows = state.start[rows, None] + (steps[None, :] + 1) * E - 1
        ask, bid, ask_s, bid_s, mid = (np.zeros((len(rows), H)) for _ in range(5))
        for i, r in enumerate(rows):
            day = self.days[state.day[r]]
            book = day.book
            a = book[arrivals(day.events["ts"], due[i], end_rows[i] + 1) - 1]  # the book each step's order meets
            e = book[end_rows[i]]
            ask[i], ask_s[i], bid[i], bid_s[i] = a[:, 0], a[:, 1], a[:, 2], a[:, 3]
            ok = np.flatnonzero((e[:, 1] > 0) & (e[:, 3] > 0))  # a one-sided book has no mid: its neighbours' then
            mid[i] = np.interp(steps, ok, (e[ok, 0] + e[ok, 2]) / 2.0) if ok.size else state.last_mid2[r] / 2.0
        usd = cfg.usd_per_tick
        fee_buy = os_ * cfg.taker_fee_usd + cfg.taker_fee_bps * 1e-4 * os_ * ask * usd
        fee_sell = os_ * cfg.taker_fee_usd + cfg.taker_fee_bps * 1e-4 * os_ * bid * usd
        buy_cost = np.where(ask_s > 0, os_ * ask * usd + fee_buy, np.inf)  # cash paid for one order
        sell_gain = np.where(bid_s > 0, os_ * bid * usd - fee_sell, -np.inf)
        positions = np.arange(-n, n + 1)
        value = positions[None, :] * os_ * mid[:, -1:] * usd  # [R, 2n+1] at the window's end, marked at its mid
        choice = np.zeros((len(rows), H, 2 * n + 1), np.int8)
        for t in range(H - 1, -1, -1):
            hold = value
            up = np.full_like(value, -np.inf)
            up[:, :-1] = value[:, 1:] - buy_cost[:, t : t + 1]
            down = np.full_like(value, -np.inf)
            down[:, 1:] = value[:, :-1] + sell_gain[:, t : t + 1]
            stack = np.stack([hold, up, down])  # 0 hold, 1 buy, 2 sell
            best = stack.argmax(axis=0)
            choice[:, t] = best
            value = np.take_along_axis(stack, best[None], axis=0)[0]
        p = np.rint(state.position[rows] / os_).astype(np.int64) + n
        for t in range(H):
            c = choice[np.arange(len(rows)), t, p]
            started = t >= t0
            p = np.where(started, p + (c == 1) - (c == 2), p)
            targets[rows, t] = p - n
        targets[rows, H] = targets[rows, H - 1]

    def reset_rows(
        self, state: ReplayState, rows: np.ndarray, keys: np.ndarray, first_step: np.ndarray | None = None
    ) -> None:
        """Opens a fresh episode in `rows`: a day and a window of it drawn from each key; at step first_step (the
        window is the same, its first first_step * events_per_step messages already played)."""
        rows = np.asarray(rows, np.int64)
        keys = np.asarray(keys, np.uint64)
        day = (_mix(keys) % np.uint64(len(self.days))).astype(np.int64) if len(self.days) > 1 else np.zeros_like(rows)
        choices = (self._hi[day] - self._lo[day] - 1 - self._span).astype(np.uint64)
        state.day[rows] = day
        # >= lo + 1: the book before the window's first message is a row of its period
        state.start[rows] = self._lo[day] + 1 + (keys % choices).astype(np.int64)
        for a in (
            state.t, state.position, state.cash, state.fees_usd, state.equity_usd, state.flow, state.flow_slow,
            state.depth_flow, state.depth_flow_slow, state.own_price, state.own_size, state.own_join, state.own_ahead,
        ):  # fmt: skip
            a[rows] = 0
        if first_step is not None:
            state.t[rows] = first_step
        E = self.cfg.events_per_step
        for r in rows:
            row = self.days[state.day[r]].book[state.start[r] + state.t[r] * E - 1]
            state.last_mid2[r] = row[0] + row[2] if row[1] > 0 and row[3] > 0 else 0

    def step(self, state: ReplayState, actions: np.ndarray) -> StepResult:
        B = state.t.shape[0]
        actions = np.ascontiguousarray(actions, np.int64)
        reward, fills, fees = np.zeros(B), np.zeros(B, np.int64), np.zeros(B)
        listener = self.action_listener
        report = None
        if listener is not None:
            report = ActionReport(taker=np.zeros(B, np.int64), taker_cash_usd=np.zeros(B), posted=np.zeros(B, np.int64))
        if self._use_c:
            rep = None
            if report is not None:
                rep = _Report(
                    taker=_ptr(report.taker, ctypes.c_int64),
                    taker_cash_usd=_ptr(report.taker_cash_usd, ctypes.c_double),
                    posted=_ptr(report.posted, ctypes.c_int64),
                )
            _c_step(
                ctypes.byref(self._days_c), ctypes.byref(self._params), ctypes.byref(self._c_state(state)), B,
                _ptr(actions, ctypes.c_int64), _ptr(reward, ctypes.c_double), _ptr(fills, ctypes.c_int64),
                _ptr(fees, ctypes.c_double), ctypes.byref(rep) if rep is not None else None,
            )  # fmt: skip
        else:
            self._step_python(state, actions, reward, fills, fees, report)
        result = StepResult(reward=reward, fills=fills, fees_usd=fees, truncated=state.t >= self.cfg.horizon)
        if listener is not None:
            listener(report)
        return result

    def observe(self, state: ReplayState) -> np.ndarray:
        """The layout of docs/market.md (the synthetic market's and LobsterMarket's), from the day's visible levels."""
        B = state.t.shape[0]
        out = np.zeros((B, obs_size(self.cfg)), np.float32)
        if self._use_c:
            c_state = self._c_state(state)
            _c_observe(ctypes.byref(self._days_c), ctypes.byref(self._params), ctypes.byref(c_state), B,
                       _ptr(out, ctypes.c_float), out.shape[1])  # fmt: skip
        else:
            self._observe_python(state, out)
        return out

    def _c_state(self, state: ReplayState) -> _State:
        """The state's arrays as C pointers (each must be C-contiguous of its dtype: ReplayState.empty makes them so
        and reset_rows / step write into them in place). Kept for the state of the last call while each of its
        arrays is the same object (checked every call: a replaced array gets new pointers, never stale ones)."""
        arrays = tuple(getattr(state, name) for name, _ in _STATE_FIELDS)
        kept = self._c_kept
        if kept is not None and all(a is b for a, b in zip(kept[0], arrays, strict=True)):
            return kept[1]
        ptrs = {}
        for name, ctype in _STATE_FIELDS:
            a = getattr(state, name)
            want = np.int64 if ctype is ctypes.c_int64 else np.float64
            if a.dtype != want or not a.flags.c_contiguous:
                raise TypeError(f"ReplayState.{name} must be a C-contiguous {np.dtype(want)} array, got {a.dtype}")
            ptrs[name] = _ptr(a, ctype)
        self._c_kept = (arrays, _State(**ptrs))
        return self._c_kept[1]

    # ------------------------------------------------------------------ the reference: one book at a time

    def _step_python(self, st: ReplayState, actions, reward, fills, fees, report: ActionReport | None) -> None:
        cfg, E, H, K = self.cfg, self.cfg.events_per_step, self.cfg.horizon, self.cfg.depth_flow_ticks
        d, ds = cfg.synthetic.flow_decay, cfg.synthetic.slow_flow_decay
        for r in range(st.t.shape[0]):
            if st.t[r] >= H:
                continue
            day = self.days[st.day[r]]
            ev, book, levels = day.events, day.book, day.manifest.levels
            k0 = int(st.start[r] + st.t[r] * E)
            depth0 = self._near_mid(book[k0 - 1], levels, int(st.last_mid2[r]), K) if K else 0
            volume = 0
            act = int(arrivals(ev["ts"], k0 + cfg.latency_events, k0 + E)) - k0  # the order's place in the step
            for e in range(E + 1):
                k = k0 + e
                if e == act:
                    size0, price0, cash0 = st.own_size[r].copy(), st.own_price[r].copy(), int(st.cash[r])
                    q, f = self._act(st, r, book[k - 1], levels, int(actions[r]), k)
                    fills[r] += q
                    fees[r] += f
                    if report is not None:
                        report.taker[r] = q
                        report.taker_cash_usd[r] = (int(st.cash[r]) - cash0) * cfg.usd_per_tick
                        new = (st.own_size[r] > 0) & ((size0 == 0) | (price0 != st.own_price[r]))
                        report.posted[r] = int(np.where(new, st.own_size[r], 0).sum())
                if e == E:
                    break
                q, v, f = self._message(st, r, ev[k], book[k], k)
                fills[r] += q
                fees[r] += f
                volume += v
            st.flow[r] = d * st.flow[r] + (1 - d) * volume
            st.flow_slow[r] = ds * st.flow_slow[r] + (1 - ds) * volume
            if K:
                w = self._near_mid(book[k0 + E - 1], levels, int(st.last_mid2[r]), K) - depth0
                st.depth_flow[r] = d * st.depth_flow[r] + (1 - d) * w
                st.depth_flow_slow[r] = ds * st.depth_flow_slow[r] + (1 - ds) * w
            row = book[k0 + E - 1]
            if row[1] > 0 and row[3] > 0:
                st.last_mid2[r] = row[0] + row[2]
        st.fees_usd += fees
        st.t += st.t < H  # a finished book stays at its window's end: nothing past it is read
        equity = (st.cash + st.position * st.last_mid2 / 2) * cfg.usd_per_tick - st.fees_usd
        reward[:] = equity - st.equity_usd
        st.equity_usd[:] = equity

    @staticmethod
    def _near_mid(row: np.ndarray, levels: int, mid2: int, K: int) -> int:
        near = np.abs(2 * row[0::2] - mid2) <= 2 * K
        sizes = row[1::2] * near
        return int(sizes[1::2].sum() - sizes[0::2].sum())

    def _fill(self, st: ReplayState, r: int, s: int, qty: int) -> tuple[int, float]:
        qty = min(qty, int(st.own_size[r, s]))
        if qty <= 0:
            return 0, 0.0
        st.own_size[r, s] -= qty
        signed = qty if s == 0 else -qty
        price = int(st.own_price[r, s])
        st.position[r] += signed
        st.cash[r] -= signed * price
        cfg = self.cfg
        return signed, qty * cfg.maker_fee_usd + cfg.maker_fee_bps * 1e-4 * (qty * price) * cfg.usd_per_tick

    def _message(self, st: ReplayState, r: int, e, row: np.ndarray, k: int) -> tuple[int, int, float]:
        """Message k of book r's day: (signed passive fill, signed visible traded volume, fees)."""
        kind, side, price, size = int(e["kind"]), int(e["side"]), int(e["price"]), int(e["size"])
        s = 0 if side == 1 else 1
        volume = (-size if side == 1 else size) if kind in (EXECUTE, TRADE) else 0
        filled, fee = 0, 0.0
        if side != 0 and st.own_size[r, s] > 0:
            own, ahead = int(st.own_price[r, s]), float(st.own_ahead[r, s])
            if kind in (EXECUTE, TRADE) and price == own:
                from_ahead = min(float(size), ahead)
                st.own_ahead[r, s] = ahead - from_ahead
                q, f = self._fill(st, r, s, size - math.ceil(from_ahead))
                filled, fee = filled + q, fee + f
            elif kind in (EXECUTE, TRADE) and (price < own if s == 0 else price > own):
                q, f = self._fill(st, r, s, size)
                filled, fee = filled + q, fee + f
            elif kind in (CANCEL, DELETE) and price == own and int(e["first_seen"]) < st.own_join[r, s]:
                st.own_ahead[r, s] = ahead - min(float(size), ahead)
            elif kind == LEVEL and price == own:
                now = float(size)
                if self.cfg.queue_model == "risk_averse":
                    st.own_ahead[r, s] = min(ahead, now)
                elif int(e["delta"]) < 0:
                    chg = float(-int(e["delta"]))
                    back = max(now + chg - ahead, 0.0)
                    n = self.cfg.queue_power
                    fb, ff = (back**n if back > 0 else 0.0), (ahead**n if ahead > 0 else 0.0)
                    prob = fb / (fb + ff) if fb + ff > 0 else 1.0
                    est = ahead - (1.0 - prob) * chg + min(back - prob * chg, 0.0)
                    st.own_ahead[r, s] = max(min(est, now), 0.0)
        if st.own_size[r, 0] > 0 and row[1] > 0 and row[0] <= st.own_price[r, 0]:
            q, f = self._fill(st, r, 0, int(st.own_size[r, 0]))
            filled, fee = filled + q, fee + f
        if st.own_size[r, 1] > 0 and row[3] > 0 and row[2] >= st.own_price[r, 1]:
            q, f = self._fill(st, r, 1, int(st.own_size[r, 1]))
            filled, fee = filled + q, fee + f
        return filled, volume, fee

    def _act(self, st: ReplayState, r: int, row: np.ndarray, levels: int, action: int, msg: int) -> tuple[int, float]:
        cfg = self.cfg
        L, os_ = cfg.position_limit, cfg.order_size
        pos = int(st.position[r])
        taken, notional = 0, 0
        if action in (Action.CANCEL, Action.FLATTEN):
            st.own_size[r] = 0
        if action == Action.MARKET_BUY:
            st.own_size[r, 1] = 0
            done, notional = self._take(st, r, row, levels, True, min(os_, L - pos - int(st.own_size[r, 0])))
            taken = done
        elif action == Action.MARKET_SELL:
            st.own_size[r, 0] = 0
            done, notional = self._take(st, r, row, levels, False, min(os_, L + pos - int(st.own_size[r, 1])))
            taken = -done
        elif action == Action.FLATTEN and pos != 0:
            done, notional = self._take(st, r, row, levels, pos < 0, abs(pos))
            taken = done if pos < 0 else -done
        elif action in (Action.JOIN_BID, Action.JOIN_ASK):
            s = 0 if action == Action.JOIN_BID else 1
            col = 2 if s == 0 else 0
            price, size = int(row[col]), int(row[col + 1])
            if size > 0 and not (st.own_size[r, s] > 0 and st.own_price[r, s] == price):
                st.own_size[r, s] = max(0, min(os_, L - pos if s == 0 else L + pos))
                st.own_price[r, s] = price
                st.own_ahead[r, s] = size
                st.own_join[r, s] = msg
        fee = abs(taken) * cfg.taker_fee_usd + cfg.taker_fee_bps * 1e-4 * notional * cfg.usd_per_tick
        return taken, fee

    @staticmethod
    def _take(st: ReplayState, r: int, row: np.ndarray, levels: int, buy: bool, qty: int) -> tuple[int, int]:
        done, notional = 0, 0
        col = 0 if buy else 2
        for lvl in range(levels):
            if done >= qty:
                break
            price, size = int(row[4 * lvl + col]), int(row[4 * lvl + col + 1])
            if size <= 0:
                break
            c = min(size, qty - done)
            done += c
            notional += c * price
            st.cash[r] += -c * price if buy else c * price
        st.position[r] += done if buy else -done
        return done, notional

    def _observe_python(self, st: ReplayState, out: np.ndarray) -> None:
        cfg = self.cfg
        L, sc = cfg.obs_levels, 1.0 / cfg.size_scale
        for r in range(st.t.shape[0]):
            day = self.days[st.day[r]]
            n = min(L, day.manifest.levels)
            row = day.book[int(st.start[r] + st.t[r] * cfg.events_per_step) - 1]
            mid2 = st.last_mid2[r]
            ap, asz, bp, bsz = row[0::4][:n], row[1::4][:n], row[2::4][:n], row[3::4][:n]
            out[r, 0:n] = np.where(bsz > 0, (2 * bp - mid2) / 2, 0)
            out[r, L : L + n] = bsz * sc
            out[r, 2 * L : 2 * L + n] = np.where(asz > 0, (2 * ap - mid2) / 2, 0)
            out[r, 3 * L : 3 * L + n] = asz * sc
            o = 4 * L
            out[r, o] = ap[0] - bp[0] if asz[0] > 0 and bsz[0] > 0 else 0
            out[r, o + 1] = (bsz[0] - asz[0]) / max(bsz[0] + asz[0], 1)
            out[r, o + 2] = st.flow[r] * sc
            out[r, o + 3] = st.flow_slow[r] * sc
            out[r, o + 4] = st.position[r] / cfg.position_limit
            for s in (0, 1):
                if st.own_size[r, s] > 0:
                    out[r, o + 5 + 3 * s] = (2 * st.own_price[r, s] - mid2) / 2
                    out[r, o + 6 + 3 * s] = st.own_size[r, s] * sc
                    out[r, o + 7 + 3 * s] = st.own_ahead[r, s] * sc
            out[r, o + 11] = 1.0 - st.t[r] / cfg.horizon
        if cfg.depth_flow_ticks:
            out[:, 4 * L + OBS_FIXED] = st.depth_flow * sc
            out[:, 4 * L + OBS_FIXED + 1] = st.depth_flow_slow * sc


__all__ = ["QUEUE_MODELS", "ReplayMarket", "ReplayState", "arrivals", "compiled", "contract_of", "replay_config"]

"""The market's configuration: contract, agent, episode, and the synthetic order flow.

Every dataclass is keyword-only and frozen, each field's own rule is in its type (lobsim_env.validation), and
`errors()` returns every problem as a message naming the value and the fix ("market.tick_size=-0.25 must be
> 0"), the rules that tie fields together last; the caller raises them together (`MarketConfig.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from lobsim_env.validation import ConfigError, Int, Number, OneOf, field_errors

MAX_HORIZON = 2**24
"""The longest episode, in steps (market.horizon, `evaluate --horizon`): the observation's time_left, a float32,
is 1 - t / horizon, and float32 holds those values apart only up to 2**24 steps (16,777,216; from 2**24 + 2
steps on, two steps of an episode read the same). A longer episode would also never end within a run or an
evaluation (1e12 steps: no episode ends, no episode statistics, an
evaluation that never returns)."""
HORIZON_WHY = "2**24: time_left, a float32 of the observation, tells the steps apart only up to there"
"""Why the bound, as market.horizon's error says it."""


class MarketConfigError(ConfigError):
    """A market config with one or more bad values; `errors` lists each."""

    def __init__(self, errors: list[str]):
        super().__init__(errors, "market config")


@dataclass(kw_only=True, frozen=True)
class SyntheticConfig:
    """The seeded zero-intelligence / queue-reactive order flow and its planted signal (docs/market.md)."""

    window_ticks: Annotated[int, Int(ge=24, why="room for the levels")] = 64
    """Price ticks held per book (W); the window re-centres on the mid when the best quotes near its edges."""
    start_tick: Annotated[int, Int(ge=1, le=2**40, why="2**40: cash in ticks cannot overflow")] = 20_000
    """Initial best bid in absolute ticks (20000 x 0.25 = 5000.00); the best ask starts one tick above."""
    base_depth: Annotated[int, Int(ge=1)] = 5
    """Resting size at every level when the book opens and at every tick that enters the window."""
    limit_rate: Annotated[float, Number(ge=0)] = 0.44
    """Probability that a market event is a limit order (split between the two sides)."""
    market_rate: Annotated[float, Number(ge=0)] = 0.06
    """Probability that a market event is a market order (split between buy and sell)."""
    cancel_rate: Annotated[float, Number(ge=0)] = 0.50
    """Probability that a market event is a cancel attempt (split between the two sides)."""
    level_decay: Annotated[float, Number(gt=0, le=1)] = 0.55
    """Limit and cancel prices: level d (0 = inside/at the best) has probability proportional to decay**d."""
    levels: Annotated[int, Int(ge=1)] = 6
    """Number of levels near the best that limit orders and cancels touch."""
    max_limit_size: Annotated[int, Int(ge=1)] = 1
    """Limit orders have a size uniform in 1..max_limit_size; cancels remove one unit, market orders 1-2."""
    queue_ref: Annotated[int, Int(ge=1)] = 6
    """A cancel attempt at a level with q others succeeds with probability min(1, q / queue_ref)."""
    regime_switch_prob: Annotated[float, Number(ge=0, le=1)] = 0.005
    """Per step, the latent regime (-1, 0, +1) jumps to one of the other two with this probability (mean stay
    1 / p steps: 200). At 0.01 no simple rule that reads only the observation reached half the oracle's PnL
    (docs/market.md, "How much of the signal can be seen")."""
    signal_strength: Annotated[float, Number(ge=0, le=1, why="0 = no signal")] = 0.3
    """0 = no signal. Market buys have probability x (1 + s * regime), sells x (1 - s * regime)."""
    flow_decay: Annotated[float, Number(ge=0, lt=1)] = 0.9
    """The observed recent signed trade flow is an EMA with this decay per step (about a 10-step window)."""
    slow_flow_decay: Annotated[float, Number(ge=0, lt=1)] = 0.98
    """A second, slower EMA of the same flow is observed too (about a 50-step window): a regime lasts about
    200 steps, and a 10-step window alone is too noisy to tell it (docs/market.md)."""

    def errors(self) -> list[str]:
        bad = field_errors(self, "market.synthetic")
        errs = list(bad.values())
        p = "market.synthetic."
        rates = [self.limit_rate, self.market_rate, self.cancel_rate]
        if not bad.keys() & {"limit_rate", "market_rate", "cancel_rate"} and abs(sum(rates) - 1.0) > 1e-9:
            errs.append(f"{p}limit_rate+market_rate+cancel_rate={sum(rates)!r} must be 1 (they split each event)")
        if not bad.keys() & {"levels", "window_ticks"} and self.levels > self.window_ticks // 4:
            errs.append(f"{p}levels={self.levels} must be <= window_ticks // 4 = {self.window_ticks // 4}")
        return errs


@dataclass(kw_only=True, frozen=True)
class MarketConfig:
    """One market: where the order flow comes from, the contract, the agent's limits, and the episode."""

    source: Annotated[str, OneOf(("synthetic", "lobster", "replay"))] = "synthetic"
    """'synthetic' (seeded generator), 'replay' (real days of a cache: data, days; docs/data.md) or 'lobster' (one
    LOBSTER file, replayed book by book in Python: the replay market's reference)."""
    lobster_path: str | None = None
    """A LOBSTER sample zip (or message CSV) when source='lobster'."""
    data: str | None = None
    """A day cache (python -m lobsim_env.data ingest ... --out DIR) when source='replay'."""
    days: tuple[str, ...] = ()
    """The cache's days the market draws from (keys venue/instrument/date, or an instrument, a date); () for all.
    With blocks > 1 a name may end in '#k' for the day's block k alone (0-based)."""
    blocks: Annotated[int, Int(ge=1, le=10_000)] = 1
    """Replay: each day's span (first to last message) cut into this many blocks of equal time, each a period of
    its own that windows never cross (13 cuts NASDAQ's 09:30-16:00 into half hours): the walk-forward folds then
    run over blocks of a day as over days (docs/data.md)."""
    reference_price_ticks: Annotated[int, Int(ge=0)] = 0
    """Replay: the days' median mid in ticks (replay_config sets it), which values the bps fees of one order for
    the reward scale (foxhunt_ray.config.market_reward_scale); 0 where fees are per contract only."""
    eval_days: tuple[str, ...] = ()
    """The days evaluation plays (the fold's held-out day, never in `days`); () for none held out."""
    val_days: tuple[str, ...] = ()
    """The fold's validation days (the period before its test, never in `days` or `eval_days`): the walk-forward
    protocol picks the run's checkpoint and tunes the quoting rule there (foxhunt_ray.walkforward); () for none."""
    synthetic_share: Annotated[float, Number(ge=0, le=1)] = 0.0
    """Replay: the share of the books that play the synthetic flow (`synthetic`, fitted to the training days by
    lobsim_env.calibrate) in this contract's units instead of the days (lobsim_env.markets.MixedMarket: the
    walk-forward's --train-on synthetic or both); 0 every book real, 1 every book synthetic. Training only: the
    validation and test periods are always real."""
    synthetic_tick_multiple: Annotated[int, Int(ge=1)] = 1
    """With synthetic_share > 0: venue ticks in one synthetic tick (the calibration's --tick-multiple)."""
    queue_model: Annotated[str, OneOf(("risk_averse", "prob"))] = "risk_averse"
    """Where an L2 day's depth updates leave the agent's queue place (docs/data.md, "Queue models"): 'risk_averse'
    (a cancel is behind it) or 'prob' (behind it with probability f(back) / (f(back) + f(front)), f = x ** queue_power).
    L3 days (LOBSTER, MBO) need none: every order's place is in the data."""
    queue_power: Annotated[float, Number(gt=0)] = 3.0
    """The exponent of the 'prob' queue model."""
    tick_size: Annotated[float, Number(gt=0)] = 0.25
    """Displayed price of one tick (prices are integer ticks internally)."""
    usd_per_tick: Annotated[float, Number(gt=0)] = 12.5
    """USD value of a one-tick move for one contract (LOBSTER: 0.01 per 1-share contract)."""
    maker_fee_usd: Annotated[float, Number(why="USD per contract")] = 0.0
    """Fee per contract filled passively; negative is a rebate."""
    taker_fee_usd: Annotated[float, Number(why="USD per contract")] = 0.5
    """Fee per contract filled by the agent's market orders."""
    maker_fee_bps: Annotated[float, Number(ge=-100, le=100)] = 0.0
    """Replay: a passive fill's fee in basis points of its notional (negative: a rebate), on top of maker_fee_usd."""
    taker_fee_bps: Annotated[float, Number(ge=-100, le=100)] = 0.0
    """Replay: a market order's fee in basis points of its notional, on top of taker_fee_usd."""
    position_limit: Annotated[int, Int(ge=1)] = 5
    """|position| plus same-side resting size never exceeds this; orders beyond it are clipped or ignored."""
    order_size: Annotated[int, Int(ge=1)] = 1
    """Contracts per market order and per resting order."""
    latency_events: Annotated[int, Int(ge=0)] = 1
    """The agent's order arrives after this many of the step's market events (0..events_per_step)."""
    events_per_step: Annotated[int, Int(ge=1)] = 8
    """Market events (synthetic) or LOBSTER messages per env step."""
    horizon: Annotated[int, Int(ge=1, le=MAX_HORIZON, why=HORIZON_WHY)] = 1000
    """Steps per episode (then truncated); at most MAX_HORIZON."""
    obs_levels: Annotated[int, Int(ge=1, le=10)] = 5
    """Book levels per side in the observation."""
    size_scale: Annotated[float, Number(gt=0)] = 10.0
    """Sizes in the observation are divided by this."""
    depth_flow_ticks: Annotated[int, Int(ge=0, le=10)] = 0
    """0: off. K > 0: the observation also carries the depth flow near the mid, two EMAs (synthetic.flow_decay
    and slow_flow_decay) of the bid size gained minus the ask size gained in one step on the absolute ticks within
    K of the mid at the step's start: every limit order, cancel and trade there, a multi-level order flow
    imbalance (Xu, Gould and Howison 2018). Appended after time_left (docs/market.md)."""
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    """The synthetic order flow (used when source='synthetic')."""

    def errors(self) -> list[str]:
        bad = field_errors(self, "market")
        errs = list(bad.values())
        p = "market."
        if self.source == "lobster" and not self.lobster_path:
            errs.append(f"{p}lobster_path={self.lobster_path!r} must name a LOBSTER zip when source='lobster'")
        if self.synthetic_share and self.source != "replay":
            errs.append(
                f"{p}synthetic_share={self.synthetic_share} goes with source='replay' (the synthetic flow in a real "
                f"day's units), not source={self.source!r}; set it to 0"
            )
        if self.source == "replay" and not self.data:
            errs.append(f"{p}data={self.data!r} must name a day cache when source='replay' (--data DIR)")
        named = ("days", "eval_days", "val_days")
        for name in named:
            v = getattr(self, name)
            if not isinstance(v, tuple) or not all(isinstance(d, str) and d for d in v):
                errs.append(f"{p}{name}={v!r} must be a list of day names (venue/instrument/date, or a part)")
        if not bad.keys() & set(named) and all(isinstance(getattr(self, n), tuple) for n in named):
            for a, b in (("days", "eval_days"), ("days", "val_days"), ("val_days", "eval_days")):
                if shared := sorted(set(getattr(self, a)) & set(getattr(self, b))):
                    errs.append(
                        f"{p}{a} and {p}{b} share {shared}: a fold's training, validation and test days are apart "
                        "(--data with --fold builds them)"
                    )
        if not bad.keys() & {"latency_events", "events_per_step"} and self.latency_events > self.events_per_step:
            errs.append(f"{p}latency_events={self.latency_events} must be <= events_per_step={self.events_per_step}")
        if not bad.keys() & {"order_size", "position_limit"} and self.order_size > self.position_limit:
            errs.append(f"{p}order_size={self.order_size} must be <= position_limit={self.position_limit}")
        if not isinstance(self.synthetic, SyntheticConfig):
            errs.append(f"{p}synthetic={self.synthetic!r} must be a SyntheticConfig")
        else:
            errs += self.synthetic.errors()
        return errs

    def validate(self) -> MarketConfig:
        """Returns self when valid; raises MarketConfigError listing every problem otherwise."""
        if errs := self.errors():
            raise MarketConfigError(errs)
        return self

"""The market's configuration: contract, agent, episode, and the synthetic order flow.

Every dataclass is keyword-only and frozen, and `errors()` returns every problem as a message naming the value
and the fix ("market.tick_size=-0.25 must be > 0"); the caller raises them together (`MarketConfig.validate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field


class MarketConfigError(ValueError):
    """A market config with one or more bad values; `errors` lists each."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("invalid market config:\n  " + "\n  ".join(self.errors))


def _positive(errs: list[str], name: str, value: object, *, integer: bool = False, zero_ok: bool = False) -> None:
    kind = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind):
        errs.append(f"{name}={value!r} must be {'an int' if integer else 'a number'}")
    elif value < 0 or (value == 0 and not zero_ok):
        errs.append(f"{name}={value!r} must be {'>= 0' if zero_ok else '> 0'}")


@dataclass(kw_only=True, frozen=True)
class SyntheticConfig:
    """The seeded zero-intelligence / queue-reactive order flow and its planted signal (docs/market.md)."""

    window_ticks: int = 64
    """Price ticks held per book (W); the window re-centres on the mid when the best quotes near its edges."""
    start_tick: int = 20_000
    """Initial best bid in absolute ticks (20000 x 0.25 = 5000.00); the best ask starts one tick above."""
    base_depth: int = 5
    """Resting size at every level when the book opens and at every tick that enters the window."""
    limit_rate: float = 0.44
    """Probability that a market event is a limit order (split between the two sides)."""
    market_rate: float = 0.06
    """Probability that a market event is a market order (split between buy and sell)."""
    cancel_rate: float = 0.50
    """Probability that a market event is a cancel attempt (split between the two sides)."""
    level_decay: float = 0.55
    """Limit and cancel prices: level d (0 = inside/at the best) has probability proportional to decay**d."""
    levels: int = 6
    """Number of levels near the best that limit orders and cancels touch."""
    max_limit_size: int = 1
    """Limit orders have a size uniform in 1..max_limit_size; cancels remove one unit, market orders 1-2."""
    queue_ref: int = 6
    """A cancel attempt at a level with q others succeeds with probability min(1, q / queue_ref)."""
    regime_switch_prob: float = 0.005
    """Per step, the latent regime (-1, 0, +1) jumps to one of the other two with this probability (mean stay
    1 / p steps: 200). At 0.01 no policy that reads only the observation came near half the oracle's PnL
    (docs/market.md, "How much of the signal can be seen")."""
    signal_strength: float = 0.3
    """0 = no signal. Market buys have probability x (1 + s * regime), sells x (1 - s * regime)."""
    flow_decay: float = 0.9
    """The observed recent signed trade flow is an EMA with this decay per step (about a 10-step window)."""
    slow_flow_decay: float = 0.98
    """A second, slower EMA of the same flow is observed too (about a 50-step window): a regime lasts about
    200 steps, and a 10-step window alone is too noisy to tell it (docs/market.md)."""

    def errors(self) -> list[str]:
        errs: list[str] = []
        p = "market.synthetic."
        if not isinstance(self.window_ticks, int) or self.window_ticks < 24:
            errs.append(f"{p}window_ticks={self.window_ticks!r} must be an int >= 24 (room for the levels)")
        _positive(errs, p + "start_tick", self.start_tick, integer=True)
        if isinstance(self.start_tick, int) and self.start_tick > 2**40:
            errs.append(f"{p}start_tick={self.start_tick} must be <= 2**40 so cash in ticks cannot overflow")
        _positive(errs, p + "base_depth", self.base_depth, integer=True)
        for name in ("limit_rate", "market_rate", "cancel_rate"):
            _positive(errs, p + name, getattr(self, name), zero_ok=True)
        rates = [self.limit_rate, self.market_rate, self.cancel_rate]
        if all(isinstance(r, int | float) for r in rates) and abs(sum(rates) - 1.0) > 1e-9:
            errs.append(f"{p}limit_rate+market_rate+cancel_rate={sum(rates)!r} must be 1 (they split each event)")
        if not isinstance(self.level_decay, int | float) or not 0 < self.level_decay <= 1:
            errs.append(f"{p}level_decay={self.level_decay!r} must be in (0, 1]")
        _positive(errs, p + "levels", self.levels, integer=True)
        if isinstance(self.levels, int) and isinstance(self.window_ticks, int) and self.levels > self.window_ticks // 4:
            errs.append(f"{p}levels={self.levels} must be <= window_ticks // 4 = {self.window_ticks // 4}")
        _positive(errs, p + "max_limit_size", self.max_limit_size, integer=True)
        _positive(errs, p + "queue_ref", self.queue_ref, integer=True)
        if not isinstance(self.regime_switch_prob, int | float) or not 0 <= self.regime_switch_prob <= 1:
            errs.append(f"{p}regime_switch_prob={self.regime_switch_prob!r} must be in [0, 1]")
        if not isinstance(self.signal_strength, int | float) or not 0 <= self.signal_strength <= 1:
            errs.append(f"{p}signal_strength={self.signal_strength!r} must be in [0, 1] (0 = no signal)")
        for name in ("flow_decay", "slow_flow_decay"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 1:
                errs.append(f"{p}{name}={v!r} must be in [0, 1)")
        return errs


@dataclass(kw_only=True, frozen=True)
class MarketConfig:
    """One market: where the order flow comes from, the contract, the agent's limits, and the episode."""

    source: str = "synthetic"
    """'synthetic' (seeded generator) or 'lobster' (replay of lobster_path)."""
    lobster_path: str | None = None
    """A LOBSTER sample zip (or message CSV) when source='lobster'."""
    tick_size: float = 0.25
    """Displayed price of one tick (prices are integer ticks internally)."""
    usd_per_tick: float = 12.5
    """USD value of a one-tick move for one contract (LOBSTER: 0.01 per 1-share contract)."""
    maker_fee_usd: float = 0.0
    """Fee per contract filled passively; negative is a rebate."""
    taker_fee_usd: float = 0.5
    """Fee per contract filled by the agent's market orders."""
    position_limit: int = 5
    """|position| plus same-side resting size never exceeds this; orders beyond it are clipped or ignored."""
    order_size: int = 1
    """Contracts per market order and per resting order."""
    latency_events: int = 1
    """The agent's order arrives after this many of the step's market events (0..events_per_step)."""
    events_per_step: int = 8
    """Market events (synthetic) or LOBSTER messages per env step."""
    horizon: int = 1000
    """Steps per episode (then truncated)."""
    obs_levels: int = 5
    """Book levels per side in the observation."""
    size_scale: float = 10.0
    """Sizes in the observation are divided by this."""
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    """The synthetic order flow (used when source='synthetic')."""

    def errors(self) -> list[str]:
        errs: list[str] = []
        p = "market."
        if self.source not in ("synthetic", "lobster"):
            errs.append(f"{p}source={self.source!r} must be 'synthetic' or 'lobster'")
        if self.source == "lobster" and not self.lobster_path:
            errs.append(f"{p}lobster_path={self.lobster_path!r} must name a LOBSTER zip when source='lobster'")
        for name in ("tick_size", "usd_per_tick", "size_scale"):
            _positive(errs, p + name, getattr(self, name))
        for name in ("maker_fee_usd", "taker_fee_usd"):
            if isinstance(getattr(self, name), bool) or not isinstance(getattr(self, name), int | float):
                errs.append(f"{p}{name}={getattr(self, name)!r} must be a number (USD per contract)")
        for name in ("position_limit", "order_size", "events_per_step", "horizon", "obs_levels"):
            _positive(errs, p + name, getattr(self, name), integer=True)
        _positive(errs, p + "latency_events", self.latency_events, integer=True, zero_ok=True)
        if (
            isinstance(self.latency_events, int)
            and isinstance(self.events_per_step, int)
            and self.latency_events > self.events_per_step
        ):
            errs.append(f"{p}latency_events={self.latency_events} must be <= events_per_step={self.events_per_step}")
        if isinstance(self.order_size, int) and isinstance(self.position_limit, int):
            if self.order_size > self.position_limit:
                errs.append(f"{p}order_size={self.order_size} must be <= position_limit={self.position_limit}")
        if isinstance(self.obs_levels, int) and self.obs_levels > 10:
            errs.append(f"{p}obs_levels={self.obs_levels} must be <= 10")
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

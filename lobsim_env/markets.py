"""The two markets behind `lobsim_env.market.Market`, and the one place a config chooses between them.

`MarketConfig.source` picks: "synthetic" builds `synthetic.market.SyntheticMarket` (a seeded order flow in
batched books), "replay" builds `replay.market.ReplayMarket` (the agent against real days of a cache, any source),
"lobster" builds `lobster.market.LobsterMarket` (one LOBSTER file, book by book in Python: the replay's reference).
A replay config with `synthetic_share` > 0 builds `MixedMarket`: that share of the books plays the synthetic flow
(fitted to the days by lobsim_env.calibrate) in the days' units, the rest the days (sim-to-real training).
The envs take the market this returns, or one the caller built (`LobEnv(market=...)`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from lobsim_env.config import MarketConfig
from lobsim_env.lobster.market import LobsterMarket
from lobsim_env.market import ActionReport, Market, StepResult, obs_index
from lobsim_env.replay.market import ReplayMarket, ReplayState
from lobsim_env.synthetic.market import SyntheticMarket, SyntheticState


def make_market(config: MarketConfig) -> Market:
    """The market of a config: synthetic flow, real days of a cache, one replayed LOBSTER file, or a mixture."""
    if not isinstance(config, MarketConfig):
        raise TypeError(f"config={config!r} must be a lobsim_env.MarketConfig (build one from a dict first)")
    config.validate()
    if config.source == "lobster":
        return LobsterMarket(config)
    if config.source == "replay":
        return MixedMarket(config) if config.synthetic_share > 0 else ReplayMarket(config)
    return SyntheticMarket(config)


def synthetic_part(cfg: MarketConfig) -> MarketConfig:
    """The synthetic market of a replay config with synthetic_share > 0, in units the same agent plays alike:
    one synthetic tick is K = synthetic_tick_multiple venue ticks and one synthetic unit one order of the days
    (order_size lots, the calibration's unit), so USD a tick and unit = usd_per_tick x order_size x K, fees a
    unit = fees a lot x order_size (bps fees at the days' median price, reference_price_ticks), an order is one
    unit, the position limit and size_scale the days' over order_size (the observation's sizes and position read
    the same), and the depth flow's reach ceil(depth_flow_ticks / K) synthetic ticks. Everything else (horizon,
    events_per_step, latency, obs_levels) is the config's."""
    k, lots = cfg.synthetic_tick_multiple, cfg.order_size
    price = cfg.reference_price_ticks * cfg.usd_per_tick  # USD a lot at the median price
    return dataclasses.replace(
        cfg,
        source="synthetic",
        data=None,
        days=(),
        eval_days=(),
        val_days=(),
        blocks=1,
        synthetic_share=0.0,
        synthetic_tick_multiple=1,
        reference_price_ticks=0,
        tick_size=cfg.tick_size * k,
        usd_per_tick=cfg.usd_per_tick * lots * k,
        maker_fee_usd=(cfg.maker_fee_usd + cfg.maker_fee_bps * 1e-4 * price) * lots,
        taker_fee_usd=(cfg.taker_fee_usd + cfg.taker_fee_bps * 1e-4 * price) * lots,
        maker_fee_bps=0.0,
        taker_fee_bps=0.0,
        order_size=1,
        position_limit=max(1, cfg.position_limit // lots),
        size_scale=cfg.size_scale / lots,
        depth_flow_ticks=math.ceil(cfg.depth_flow_ticks / k),
    ).validate()


@dataclass(kw_only=True)
class MixedState:
    """B books: the first `n_synthetic` synthetic, the rest real; positions read in lots."""

    synthetic: SyntheticState
    real: ReplayState | None
    n_synthetic: int
    lots: int

    @property
    def position(self) -> np.ndarray:
        own = self.synthetic.position * self.lots
        return own if self.real is None else np.concatenate([own, self.real.position])

    @property
    def equity_usd(self) -> np.ndarray:
        own = self.synthetic.equity_usd
        return own if self.real is None else np.concatenate([own, self.real.equity_usd])


class MixedMarket:
    """`lobsim_env.market.Market`: round(synthetic_share x B) of B books play the synthetic flow of
    `synthetic_part(cfg)`, the others the config's days (ReplayMarket). Both observe the same layout in the days'
    units: the synthetic prices (ladder offsets, spread, own orders' offsets) are multiplied by K to read in venue
    ticks, sizes and positions already agree (synthetic_part); USD is USD. Fills and positions of the synthetic
    books are reported in lots (units x order_size), as the real books'."""

    action_listener = None

    def __init__(self, cfg: MarketConfig):
        self.cfg = cfg.validate()
        if cfg.source != "replay" or not cfg.synthetic_share > 0:
            raise ValueError(
                f"market.source={cfg.source!r}, synthetic_share={cfg.synthetic_share}: MixedMarket is a replay "
                "config with synthetic_share > 0"
            )
        self.synthetic = SyntheticMarket(synthetic_part(cfg))
        self.real = ReplayMarket(cfg) if cfg.synthetic_share < 1 else None
        self._k = np.float32(cfg.synthetic_tick_multiple)
        L, at = cfg.obs_levels, obs_index(cfg)
        self._prices = [*range(L), *range(2 * L, 3 * L), at["spread"], at["own_bid_offset"], at["own_ask_offset"]]

    def n_synthetic(self, n_books: int) -> int:
        return n_books if self.real is None else round(self.cfg.synthetic_share * n_books)

    def new_state(self, n_books: int) -> MixedState:
        n = self.n_synthetic(n_books)
        real = None if self.real is None else self.real.new_state(n_books - n)
        return MixedState(synthetic=self.synthetic.new_state(n), real=real, n_synthetic=n, lots=self.cfg.order_size)

    def reset_rows(self, state: MixedState, rows, keys, first_step=None) -> None:
        rows, keys = np.asarray(rows), np.asarray(keys)
        n = state.n_synthetic
        for market, sub, pick, offset in ((self.synthetic, state.synthetic, rows < n, 0),
                                          (self.real, state.real, rows >= n, n)):  # fmt: skip
            if pick.any():
                fs = None if first_step is None else np.asarray(first_step)[pick]
                market.reset_rows(sub, rows[pick] - offset, keys[pick], fs)

    def step(self, state: MixedState, actions: np.ndarray) -> StepResult:
        actions = np.asarray(actions, np.int64)
        n, lots = state.n_synthetic, self.cfg.order_size
        reports: list[ActionReport] = []
        parts = [(self.synthetic, state.synthetic, actions[:n], lots)] if n else []
        if self.real is not None and len(actions) > n:
            parts.append((self.real, state.real, actions[n:], 1))
        results = []
        for market, sub, a, _ in parts:
            market.action_listener = reports.append if self.action_listener is not None else None
            results.append(market.step(sub, np.ascontiguousarray(a)))
        res = StepResult(
            reward=np.concatenate([r.reward for r in results]),
            fills=np.concatenate([r.fills * scale for r, (*_, scale) in zip(results, parts, strict=True)]),
            fees_usd=np.concatenate([r.fees_usd for r in results]),
            truncated=np.concatenate([r.truncated for r in results]),
        )
        if self.action_listener is not None:
            scales = [scale for *_, scale in parts]
            self.action_listener(
                ActionReport(
                    taker=np.concatenate([r.taker * s for r, s in zip(reports, scales, strict=True)]),
                    taker_cash_usd=np.concatenate([r.taker_cash_usd for r in reports]),
                    posted=np.concatenate([r.posted * s for r, s in zip(reports, scales, strict=True)]),
                )
            )
        return res

    def observe(self, state: MixedState) -> np.ndarray:
        obs = self.synthetic.observe(state.synthetic) if state.n_synthetic else None
        if obs is not None:
            obs[:, self._prices] *= self._k
        real = None if state.real is None or not len(state.real.t) else self.real.observe(state.real)
        return np.concatenate([o for o in (obs, real) if o is not None])

    def latent_regime(self, state: MixedState) -> np.ndarray:
        raise ValueError("a mixed market has no regime to read on its real books: its yardsticks are on real days")

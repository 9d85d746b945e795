"""Reference policies, vectorised over B books, and the one evaluation loop that scores any policy.

A policy is `policy(obs [B, D], env, rng) -> actions [B]`. `flat` never trades; `random` picks uniformly;
`imbalance` reads only the observation (top-level imbalance plus recent signed trade flow) and holds a
full long / short / flat position by its sign; `Quoting` makes the market at the best quotes with inventory skew
(a real day's passive yardstick); `hindsight` plans a real day's window with its future known; `oracle` reads
the latent regime through the explicit accessor `env.latent_regime()` (never part of the observation) and holds
position_limit * regime. Learning is scored between `flat` / `imbalance` and `oracle` (on a real day, which has no
oracle, beside `quoting` and below `hindsight`).

`run_episodes(config, policy, episodes, seed)` plays `episodes` full episodes, one per book of a LobVectorEnv
reset with `seed` (book i: seed + i), and measures PnL, drawdown, turnover, fees and the fill rate of passive
orders; `evaluate_policy` scores a named baseline with it and foxhunt_ray.evaluate scores a trained agent with
the same loop, on the same seeds, so every policy meets the same episodes (docs/evaluation.md). The split of a
step's fills into taker and passive contracts, and the orders posted, come from the env's market through the
`Market` protocol's `action_listener` (whichever market the config picks).

Bad arguments raise `lobsim_env.validation.InputError`, worded as every config's errors are: the value, then
what it must be ("episodes=0 must be an int >= 1").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from lobsim_env.config import MarketConfig
from lobsim_env.env import LobVectorEnv
from lobsim_env.market import N_ACTIONS, Action, ActionReport, obs_index
from lobsim_env.validation import InputError, Int, OneOf, Rule

Policy = Callable[[np.ndarray, LobVectorEnv, np.random.Generator], np.ndarray]


def _position(obs: np.ndarray, cfg: MarketConfig) -> np.ndarray:
    return np.rint(obs[:, obs_index(cfg)["position"]] * cfg.position_limit).astype(np.int64)


def _trade_towards(position: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Market orders that move the position one order at a time towards target, else hold."""
    return np.where(
        position < target, Action.MARKET_BUY, np.where(position > target, Action.MARKET_SELL, Action.HOLD)
    ).astype(np.int64)


def flat(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
    return np.full(obs.shape[0], Action.HOLD, np.int64)


def random(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, N_ACTIONS, obs.shape[0])


IMBALANCE_THRESHOLD = 0.15
"""The `imbalance` policy goes long above this score, short below minus it (score = imbalance/4 + flow)."""


def imbalance(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
    cfg = env.config
    ix = obs_index(cfg)
    score = 0.25 * obs[:, ix["imbalance"]] + obs[:, ix["flow"]]
    position = _position(obs, cfg)
    target = np.where(
        score > IMBALANCE_THRESHOLD,
        cfg.position_limit,
        np.where(score < -IMBALANCE_THRESHOLD, -cfg.position_limit, position),
    )
    return _trade_towards(position, target)


def oracle(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
    cfg = env.config
    return _trade_towards(_position(obs, cfg), env.latent_regime() * cfg.position_limit)


@dataclass(frozen=True)
class Quoting:
    """A market maker with inventory skew, in the spirit of Avellaneda and Stoikov with the action set's join-at-best
    quotes: it rests a bid and an ask at the best quotes (one join a step), stops quoting the side that would grow
    its inventory once it holds `skew` orders (a cancel removes both quotes; the other side is joined again next
    step: its reservation price has moved past that side's quote), and once less than `flatten_at` of the episode
    is left it flattens what it holds and quotes no more (inventory risk into the window's end). `skew` is in orders of
    order_size; the parameters of a fold are picked on its validation day (`tune_quoting`), never its test day."""

    skew: int = 2
    flatten_at: float = 0.05

    def __call__(self, obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        cfg = env.config
        ix = obs_index(cfg)
        held = _position(obs, cfg) / cfg.order_size  # in orders
        bid, ask = obs[:, ix["own_bid_size"]] > 0, obs[:, ix["own_ask_size"]] > 0
        long, short = held >= self.skew, held <= -self.skew
        act = np.full(obs.shape[0], Action.HOLD, np.int64)
        act = np.where(~ask & ~short, Action.JOIN_ASK, act)
        act = np.where(~bid & ~long, Action.JOIN_BID, act)
        act = np.where((long & bid) | (short & ask), Action.CANCEL, act)
        late = obs[:, ix["time_left"]] < self.flatten_at  # out: flat, its quotes cancelled
        act = np.where(late, np.where(held != 0, Action.FLATTEN, np.where(bid | ask, Action.CANCEL, Action.HOLD)), act)
        return act.astype(np.int64)


QUOTING_GRID = tuple(Quoting(skew=k, flatten_at=f) for k in (1, 2, 3, 5) for f in (0.0, 0.05, 0.2))
"""The parameters `tune_quoting` tries: inventory skew in orders, and the share of the window flattened out."""


def tune_quoting(validation: MarketConfig, episodes: int, seed: int) -> tuple[Quoting, dict[str, float]]:
    """The QUOTING_GRID entry with the best mean PnL on `validation` (a fold's validation day, never its test day),
    and every entry's mean PnL by its repr."""
    scores = {repr(q): run_episodes(validation, q, episodes, seed).pnl_usd.mean() for q in QUOTING_GRID}
    best = max(QUOTING_GRID, key=lambda q: scores[repr(q)])
    return best, scores


def hindsight(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
    """The hindsight bound of a real day: the market orders (one order a step at most) that make the most PnL over
    the window, planned with the whole window known (lobsim_env.replay.ReplayMarket.hindsight_actions). No agent
    that sees only the past can reach it: the ceiling a real day has in place of the oracle (docs/data.md)."""
    return env.hindsight_actions()


POLICIES: dict[str, Policy] = {"flat": flat, "random": random, "imbalance": imbalance, "oracle": oracle}
NEEDS_LATENT_REGIME = frozenset({"oracle"})
"""Baselines that read the synthetic market's hidden regime: there is none in a LOBSTER replay."""
REAL_DAY_POLICIES: dict[str, Policy] = {
    "flat": flat,
    "random": random,
    "imbalance": imbalance,
    "quoting": Quoting(),
    "hindsight": hindsight,
}
"""The yardsticks of a real day (the replay market): no oracle; a quoting rule with inventory skew at its default
parameters (a fold's protocol tunes them on its validation day: tune_quoting), the hindsight bound as the ceiling."""


def _check(name: str, value: object, rule: Rule) -> None:
    """Raises InputError "name=value must ..." where value breaks rule (lobsim_env.validation's wording)."""
    if (problem := rule.problem(value)) is not None:
        raise InputError(f"{name}={value!r} {problem}")


def _plain_int(value: object) -> object:
    """A numpy integer as the int it holds (seeds often come out of numpy arrays); anything else as it is."""
    return int(value) if isinstance(value, np.integer) else value


class _LastReport:
    """An `action_listener`: keeps the `ActionReport` of the market's last step."""

    def __init__(self) -> None:
        self.report: ActionReport | None = None

    def __call__(self, report: ActionReport) -> None:
        self.report = report


@dataclass(kw_only=True, frozen=True)
class EpisodeResults:
    """Per-episode totals of one policy over `episodes` episodes of `steps` steps (arrays [episodes])."""

    seed: int
    """Book i of the episodes was seeded seed + i."""
    steps: int
    pnl_usd: np.ndarray
    """Final marked-to-market equity, net of fees (the sum of the step rewards)."""
    max_drawdown_usd: np.ndarray
    """Largest fall of the equity curve (0 at the start, then after every step) below its running maximum."""
    fills: np.ndarray
    """Sum over steps of |signed contracts filled| (taker and passive of a step netted, as `info['fills']`)."""
    taker_contracts: np.ndarray
    """Contracts the agent's market orders filled."""
    passive_filled: np.ndarray
    """Contracts the agent's resting orders filled: sum over steps of |fills - taker contracts|."""
    passive_posted: np.ndarray
    """Contracts of the resting orders the agent newly placed."""
    fees_usd: np.ndarray
    """Fees net of rebates, taker and maker."""
    taker_fees_usd: np.ndarray
    """The market orders' share of fees_usd (per contract plus bps of the cash they moved); the rest,
    fees_usd - taker_fees_usd, is the resting orders' (negative where rebates exceed fees)."""
    inventory: np.ndarray
    """Mean over the window's steps of |position| in contracts, after each step."""

    def metrics(self) -> dict[str, Any]:
        """The summary over episodes (docs/evaluation.md defines each); None where it is 0/0."""
        n = self.pnl_usd.shape[0]
        mean, std = float(self.pnl_usd.mean()), float(self.pnl_usd.std())
        posted = int(self.passive_posted.sum())
        traded = float((self.taker_contracts + self.passive_filled).sum())
        out = {
            "pnl_usd_mean": mean,
            "pnl_usd_std": std,
            "pnl_usd_sem": std / float(np.sqrt(n)),
            "sharpe": mean / std if std > 0 else None,
            "max_drawdown_usd": float(self.max_drawdown_usd.mean()),
            "max_drawdown_usd_worst": float(self.max_drawdown_usd.max()),
            "turnover": float((self.taker_contracts + self.passive_filled).mean()),
            "fills_mean": float(self.fills.mean()),
            "taker_contracts_mean": float(self.taker_contracts.mean()),
            "passive_filled_mean": float(self.passive_filled.mean()),
            "passive_posted_mean": float(self.passive_posted.mean()),
            "fees_usd_mean": float(self.fees_usd.mean()),
            "taker_fees_usd_mean": float(self.taker_fees_usd.mean()),
            "maker_fees_usd_mean": float((self.fees_usd - self.taker_fees_usd).mean()),
            "fill_rate": int(self.passive_filled.sum()) / posted if posted else None,
            "usd_per_contract": float(self.pnl_usd.sum()) / traded if traded else None,
            "inventory_mean": float(self.inventory.mean()),
        }
        if std == 0:
            out["sharpe_note"] = "null: the PnL is the same in every episode (std 0)"
        if not posted:
            out["fill_rate_note"] = "null: no passive order was posted (0/0)"
        return out


def run_episodes(
    config: MarketConfig,
    policy: Policy,
    episodes: int,
    seed: int,
    *,
    rng_seed: int | None = None,
) -> EpisodeResults:
    """Plays `episodes` full episodes, one per book of a LobVectorEnv reset with `seed` (book i: seed + i).

    The episodes depend only on (config, seed), never on the policy's name, so policies run with the same
    seed meet the same flow (as far as their own orders leave it unchanged: docs/evaluation.md). `rng` of
    the policy is np.random.default_rng(rng_seed, default seed).
    """
    seed, rng_seed = _plain_int(seed), _plain_int(rng_seed)
    _check("episodes", episodes, Int(ge=1, why="one book per episode"))
    _check("seed", seed, Int(ge=0))
    _check("rng_seed", rng_seed, Int(ge=0, none_ok=True, why="None: use seed"))
    if not callable(policy):
        raise InputError(
            f"policy={policy!r} must be a callable policy(obs, env, rng) -> actions, "
            "such as lobsim_env.baselines.POLICIES['imbalance']"
        )
    env = LobVectorEnv(episodes, config)
    last = _LastReport()
    env.market.action_listener = last  # the env's own market: nothing outside this loop hears it
    rng = np.random.default_rng(seed if rng_seed is None else rng_seed)
    obs, _ = env.reset(seed=int(seed))
    z = np.zeros(episodes, np.int64)
    fills, taker, passive, posted = z.copy(), z.copy(), z.copy(), z.copy()
    fees, peak, drawdown = np.zeros(episodes), np.zeros(episodes), np.zeros(episodes)
    taker_fees, inventory = np.zeros(episodes), np.zeros(episodes)
    taker_rate = config.taker_fee_bps * 1e-4
    equity = np.zeros(episodes)
    for _ in range(config.horizon):
        last.report = None
        obs, _, _, _, info = env.step(policy(obs, env, rng))
        report = last.report
        if report is None:
            raise RuntimeError(f"{type(env.market).__name__}.step did not call its action_listener (lobsim_env.Market)")
        step_fills = info["fills"]
        fills += np.abs(step_fills)
        taker += np.abs(report.taker)
        passive += np.abs(step_fills - report.taker)
        posted += report.posted
        fees += info["fees_usd"]
        taker_fees += np.abs(report.taker) * config.taker_fee_usd + np.abs(report.taker_cash_usd) * taker_rate
        inventory += np.abs(info["position"])
        equity = info["equity_usd"]
        np.maximum(peak, equity, out=peak)
        np.maximum(drawdown, peak - equity, out=drawdown)
    env.market.action_listener = None
    env.close()
    return EpisodeResults(
        seed=int(seed),
        steps=config.horizon,
        pnl_usd=np.asarray(equity, np.float64).copy(),
        max_drawdown_usd=drawdown,
        fills=fills,
        taker_contracts=taker,
        passive_filled=passive,
        passive_posted=posted,
        fees_usd=fees,
        taker_fees_usd=taker_fees,
        inventory=inventory / config.horizon,
    )


def evaluate_policy(config: MarketConfig, policy_name: str, episodes: int, seed: int) -> dict[str, Any]:
    """Runs `episodes` full episodes (one per book of a LobVectorEnv seeded `seed`) under a named policy.

    Returns the name, the episode count and `EpisodeResults.metrics()`: the mean, standard deviation and
    standard error of the final pnl_usd over episodes, the Sharpe-like ratio, drawdown, turnover, the mean
    contracts filled and fees paid per episode, and the fill rate of passive orders.
    """
    every = {**POLICIES, **REAL_DAY_POLICIES}
    _check("policy_name", policy_name, OneOf(tuple(every)))
    results = run_episodes(config, every[policy_name], episodes, seed)
    return {"policy": policy_name, "episodes": episodes, **results.metrics()}

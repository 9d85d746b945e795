"""Typed run configuration: one dataclass per section, validated all at once.

Every section dataclass (the market's, the learner's, the run's) has `errors() -> list[str]` naming each bad
value and the fix; each field's own rule is in its type (lobsim_env.validation, which also holds `ConfigError`).
`validate()` collects all of them and raises one `ConfigError`, so a user fixes a config in one pass instead of
one error per run (Sample Factory's habit). `from_dict` and `apply_overrides` build a config from JSON (a run's
config.json, `--resume`) and from `section.field=value` strings, with the same collected, named errors: an
unknown key, a wrong type or an unparsable value never passes silently.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any

from actors.config import RolloutConfig
from actors.envs import is_market
from actors.kill_rules import KillConfig
from foxhunt_ray.flags import Flag
from learner.config import LearnerConfig
from lobsim_env import ENV_ID
from lobsim_env.config import MarketConfig
from lobsim_env.validation import ConfigError, Int, field_errors


def order_fee_usd(market: MarketConfig) -> float:
    """What one market order of order_size pays in taker fees: per contract, plus the bps of its notional at the
    days' median price (market.reference_price_ticks; 0 on the synthetic market, whose fees are per contract)."""
    bps = market.taker_fee_bps * 1e-4 * market.reference_price_ticks * market.usd_per_tick
    return market.order_size * (market.taker_fee_usd + bps)


def market_reward_scale(market: MarketConfig) -> float:
    """learner.reward_scale='auto' on the market: 1 / unit, the unit being the larger of half a tick's move of the
    agent's mark at the largest position it may hold (usd_per_tick x position_limit / 2: the mark is the mid, which
    moves in half ticks) and one order's taker fee (order_fee_usd). On the default market the first is $31.25
    (0.032) and the fee $0.5; on the LOBSTER samples a half tick at 375 shares is $1.875 against $0.225 of fees.
    On a crypto day with a tiny tick and fees in bps the fee is the unit (Binance spot BTCUSDT, 2024-08-08: a
    half tick at 300 lots is $0.000015, one order's 10 bps $0.037): with the tick's unit one fee would be 2,500
    units, far outside the C51 support, and the dueling loss explodes at the first updates (the kill rule's end).

    Why half a tick: a step's reward is the change of the marked equity, position x mid move x usd_per_tick, less
    fees. On the default market the 90th percentile of |reward| a step is exactly that $31.25 for the oracle and
    the imbalance policy (the 99th: one tick, $62.5), and the 90th percentile of the oracle's discounted returns
    (gamma 0.99) is $312 (imbalance: $225): 10 scaled units, the edge of the C51 support [v_min, v_max] =
    [-10, 10], so nine of its returns in ten fit it and the rest are clipped to its edge (32 books x 1,000 steps
    measured). The sweep (BENCHMARKS.md, "Learning on the synthetic market") found 0.04 to learn and 0.1 not (at 0.1
    more than half of the oracle's returns lie beyond the support: their median |G| is $123); a one-tick unit (0.016)
    did worse than 0.04 on the one seed tried."""
    return 1.0 / max(market.usd_per_tick * market.position_limit / 2.0, order_fee_usd(market))


@dataclass(kw_only=True, frozen=True)
class RunConfig:
    """Everything a run needs; recorded resolved in the run folder's config.json."""

    preset: str = "plan_a_v2"
    """Name of the preset this config started from (foxhunt_ray.presets)."""
    settings: str | None = None
    """Name of the settings group (learning rates, reward scale) the preset was built with: 'learn' or 'seed'
    (foxhunt_ray.presets.SETTINGS); a label, the values are the learner's fields. None: not recorded."""
    sizing: str | None = None
    """Name of the sizing (widths, batch shapes) the preset was built with: 'gpu', 'cpu' or 'smoke'
    (foxhunt_ray.presets.SIZINGS); a label, the values are the learner's and rollout's fields. None: not
    recorded."""
    seed: Annotated[int, Int(ge=0), Flag("base seed")] = 0
    """Base seed: rollout worker w of B books seeds its book i with seed + w*B + i (lobsim_env.seeds); the learner uses
    seed."""
    env_id: Annotated[str, Flag(
        "Gymnasium env id (default {default}, the market): any registered id with a 1-D Box observation and a "
        "Discrete action space, e.g. CartPole-v1; 'module:Id' imports module first",
        metavar="ID",
    )] = ENV_ID
    """Gymnasium id the rollout workers step: the market (configured by `market`) or any registered id with a
    1-D Box observation and a Discrete action space; 'module:Id' imports module first (docs/running.md)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor keywords of an env other than the market, e.g. {"max_episode_steps": 200}."""
    market: MarketConfig = field(default_factory=MarketConfig)
    """The limit-order-book market the agent trades in."""
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    """Network sizes, losses and optimiser."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Books per rollout worker, steps per sample, torch threads."""
    kill: KillConfig = field(default_factory=KillConfig)
    """Thresholds of the monitor's kill rules (the seed's kill criteria by default)."""

    def errors(self) -> list[str]:
        errs = list(field_errors(self, "").values())
        if not isinstance(self.env_id, str) or not self.env_id.strip():
            errs.append(f"env_id={self.env_id!r} must be a Gymnasium id such as {ENV_ID!r} or 'CartPole-v1'")
        if not isinstance(self.env_kwargs, dict) or not all(isinstance(k, str) for k in self.env_kwargs):
            errs.append(f'env_kwargs={self.env_kwargs!r} must be a JSON object, e.g. {{"max_episode_steps": 200}}')
        elif self.env_kwargs and isinstance(self.env_id, str) and is_market(self.env_id):
            errs.append(f"env_kwargs={self.env_kwargs!r} is for other envs: set the market's fields (market.*)")
        resolved = self.resolved() if isinstance(self.env_id, str) else self
        for name in ("market", "learner", "rollout", "kill"):
            errs += [e if e.startswith(f"{name}.") else f"{name}.{e}" for e in getattr(resolved, name).errors()]
        m, b = self.learner.minibatch_envs, self.rollout.num_envs
        if not errs and m and b % m:
            errs.append(
                f"learner.minibatch_envs={m} must divide rollout.num_envs={b} (a rollout splits into minibatches of "
                "whole envs): pick a divisor, or 0 for one step per rollout"
            )
        return errs

    def resolved(self) -> RunConfig:
        """This config with learner.reward_scale='auto' replaced by its number: market_reward_scale(market) on the
        market, 1.0 on any other env (rewards as the env gives them). A number is kept as it is."""
        if self.learner.reward_scale != "auto":
            return self
        market_ok = is_market(self.env_id) and not self.market.errors()
        scale = market_reward_scale(self.market) if market_ok else 1.0
        return dataclasses.replace(self, learner=dataclasses.replace(self.learner, reward_scale=scale))

    def validate(self) -> RunConfig:
        """Returns the config resolved (`resolved()`) when valid; raises ConfigError listing every problem."""
        if errs := self.errors():
            raise ConfigError(errs)
        return self.resolved()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Builds dataclass `cls` from nested dicts; each unknown key and type error goes into one ConfigError."""
    errs: list[str] = []
    obj = _build(cls, data, path, errs)
    if errs:
        raise ConfigError(errs)
    return obj


def apply_overrides(config: Any, overrides: list[str]) -> Any:
    """Returns a copy of `config` with each `a.b.c=value` applied (value read as JSON, else as a string)."""
    data = dataclasses.asdict(config)
    errs = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            errs.append(f"override {item!r} must look like section.field=value, e.g. learner.lr=3e-4")
            continue
        node, prefix = data, ""
        parts = key.split(".")
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                break
            node, prefix = node[part], f"{prefix}{part}."
        else:
            if parts[-1] in node:
                try:
                    node[parts[-1]] = json.loads(raw)
                except json.JSONDecodeError:
                    node[parts[-1]] = raw
                continue
        valid = ", ".join(prefix + k for k in sorted(node))
        errs.append(f"override {key!r} names no config field; valid here: {valid}")
    obj = _build(type(config), data, "", errs)
    if errs:
        raise ConfigError(errs)
    return obj


def _build(cls: type, data: Any, path: str, errs: list[str]) -> Any:
    where = path or type(cls).__name__
    if not isinstance(data, dict):
        errs.append(f"{where} must be a mapping of fields, got {type(data).__name__}: {data!r}")
        return None
    before = len(errs)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for key in data:
        if key not in fields:
            errs.append(f"{_join(path, key)} is not a field of {cls.__name__}; valid: {sorted(fields)}")
    kwargs = {}
    for name in fields:
        if name in data:
            kwargs[name] = _coerce(hints[name], data[name], _join(path, name), errs)
    if len(errs) > before:
        return None
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, path: str, errs: list[str]) -> Any:
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, path, errs)
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            trial: list[str] = []
            out = _coerce(option, value, path, trial)
            if not trial:
                return out
        names = [_option_name(o) for o in options]
        errs.append(f"{path}={value!r} must be one of: {', '.join(names)}")
        return None
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            errs.append(f"{path}={value!r} must be one of {list(typing.get_args(tp))}")
        return value
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            errs.append(f"{path}={value!r} must be a list")
            return None
        args = typing.get_args(tp)
        inner = args[0] if args else Any
        items = [_coerce(inner, v, f"{path}[{i}]", errs) for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and type(value) is not tp:
        errs.append(f"{path}={value!r} must be {tp.__name__}, got {type(value).__name__}")
        return None
    return value


def _option_name(tp: Any) -> str:
    """A type as an error message names it: float, null, or a Literal's values ('auto')."""
    if tp is type(None):
        return "null"
    if typing.get_origin(tp) is typing.Literal:
        return ", ".join(map(repr, typing.get_args(tp)))
    return getattr(tp, "__name__", str(tp))


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key

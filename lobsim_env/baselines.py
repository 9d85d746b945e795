"""Reference policies, vectorised over B books, and `evaluate_policy` to score them.

A policy is `policy(obs [B, D], env, rng) -> actions [B]`. `flat` never trades; `random` picks uniformly;
`imbalance` reads only the observation (top-level imbalance plus recent signed trade flow) and holds a
full long / short / flat position by its sign; `oracle` reads the latent regime through the explicit accessor
`env.latent_regime()` (never part of the observation) and holds position_limit * regime. Learning is scored
between `flat` / `imbalance` and `oracle`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from lobsim_env.agent import N_ACTIONS, Action
from lobsim_env.config import MarketConfig
from lobsim_env.core import obs_index
from lobsim_env.env import LobVectorEnv

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


POLICIES: dict[str, Policy] = {"flat": flat, "random": random, "imbalance": imbalance, "oracle": oracle}


def evaluate_policy(config: MarketConfig, policy_name: str, episodes: int, seed: int) -> dict[str, Any]:
    """Runs `episodes` full episodes (one per book of a LobVectorEnv seeded `seed`) under a named policy.

    Returns the mean, standard deviation and standard error of the final pnl_usd over episodes, and the
    mean contracts filled and fees paid per episode.
    """
    if policy_name not in POLICIES:
        raise ValueError(f"policy_name={policy_name!r} must be one of {sorted(POLICIES)}")
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes={episodes!r} must be an int >= 1")
    policy = POLICIES[policy_name]
    env = LobVectorEnv(episodes, config)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    fills = np.zeros(episodes, np.int64)
    fees = np.zeros(episodes)
    for _ in range(config.horizon):
        obs, _, _, _, info = env.step(policy(obs, env, rng))
        fills += np.abs(info["fills"])
        fees += info["fees_usd"]
    pnl = info["pnl_usd"]
    return {
        "policy": policy_name,
        "episodes": episodes,
        "pnl_usd_mean": float(pnl.mean()),
        "pnl_usd_std": float(pnl.std()),
        "pnl_usd_sem": float(pnl.std() / np.sqrt(episodes)),
        "fills_mean": float(fills.mean()),
        "fees_usd_mean": float(fees.mean()),
    }

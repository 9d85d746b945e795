"""lobsim_env: limit-order-book markets (synthetic, and real days replayed) behind one interface, as Gymnasium envs.

- `market`: what every market is to the envs: the action set, the observation layout, `Market` (the protocol);
- `synthetic/`: the synthetic market (batched books, a seeded order flow with a planted signal);
- `lobster/`: the LOBSTER files (load, validate, rebuild the book) and `LobsterMarket`, the replay's book-by-book
  reference;
- `data/`: real market data in (LOBSTER, Binance, Tardis, Databento) as a cache of memory-mapped days
  (`python -m lobsim_env.data`); `replay/`: the market over a cache's days, stepped in C;
- `markets.make_market`: the one place a `MarketConfig` (`config`) picks one of them;
- `env`: `LobEnv` and the natively batched `LobVectorEnv`, built on any `Market`;
- `baselines` (reference policies and the one evaluation loop), `stats` (paired intervals and tests), `folds`
  (walk-forward days).

`import lobsim_env` registers `foxhunt/LOB-v0` with an `entry_point` (LobEnv) and a `vector_entry_point`
(LobVectorEnv). Semantics: docs/market.md (docs/lobster.md for LOBSTER's files).
"""

from __future__ import annotations

import gymnasium as gym

from lobsim_env.baselines import POLICIES, evaluate_policy
from lobsim_env.config import MarketConfig, MarketConfigError, SyntheticConfig
from lobsim_env.env import INFO_KEYS, LobEnv, LobVectorEnv
from lobsim_env.folds import DaySpec, Fold, lobster_days, synthetic_days, walk_forward
from lobsim_env.market import N_ACTIONS, Action, Market, obs_index, obs_size
from lobsim_env.markets import make_market

ENV_ID = "foxhunt/LOB-v0"

if ENV_ID not in gym.registry:
    gym.register(
        id=ENV_ID,
        entry_point="lobsim_env.env:LobEnv",
        vector_entry_point="lobsim_env.env:LobVectorEnv",
    )

__all__ = [
    "ENV_ID",
    "INFO_KEYS",
    "N_ACTIONS",
    "POLICIES",
    "Action",
    "DaySpec",
    "Fold",
    "LobEnv",
    "LobVectorEnv",
    "Market",
    "MarketConfig",
    "MarketConfigError",
    "SyntheticConfig",
    "evaluate_policy",
    "lobster_days",
    "make_market",
    "obs_index",
    "obs_size",
    "synthetic_days",
    "walk_forward",
]

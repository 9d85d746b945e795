"""lobsim_env: a batched limit-order-book market (synthetic flow or LOBSTER replay) as Gymnasium envs.

`import lobsim_env` registers `foxhunt/LOB-v0` with an `entry_point` (LobEnv) and a `vector_entry_point`
(LobVectorEnv). Semantics: docs/market.md.
"""

from __future__ import annotations

import gymnasium as gym

from lobsim_env.baselines import POLICIES, evaluate_policy
from lobsim_env.config import MarketConfig, MarketConfigError, SyntheticConfig
from lobsim_env.env import INFO_KEYS, LobEnv, LobVectorEnv, make_market
from lobsim_env.folds import DaySpec, Fold, lobster_days, synthetic_days, walk_forward
from lobsim_env.market import N_ACTIONS, Action, Market, obs_index, obs_size

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

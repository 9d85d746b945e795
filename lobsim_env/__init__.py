"""lobsim_env: a batched limit-order-book market (synthetic flow or LOBSTER replay) as Gymnasium envs.

`import lobsim_env` registers `foxhunt/LOB-v0` with an `entry_point` (LobEnv) and a `vector_entry_point`
(LobVectorEnv). Semantics: docs/market.md.
"""

from __future__ import annotations

import gymnasium as gym

from lobsim_env.agent import N_ACTIONS, Action
from lobsim_env.config import MarketConfig, MarketConfigError, SyntheticConfig
from lobsim_env.env import INFO_KEYS, LobEnv, LobVectorEnv, make_market

ENV_ID = "foxhunt/LOB-v0"

if ENV_ID not in gym.registry:
    gym.register(
        id=ENV_ID,
        entry_point="lobsim_env.env:LobEnv",
        vector_entry_point="lobsim_env.env:LobVectorEnv",
        disable_env_checker=False,
    )

__all__ = [
    "ENV_ID",
    "INFO_KEYS",
    "N_ACTIONS",
    "Action",
    "LobEnv",
    "LobVectorEnv",
    "MarketConfig",
    "MarketConfigError",
    "SyntheticConfig",
    "make_market",
]

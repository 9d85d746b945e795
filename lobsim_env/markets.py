"""The two markets behind `lobsim_env.market.Market`, and the one place a config chooses between them.

`MarketConfig.source` picks: "synthetic" builds `synthetic.market.SyntheticMarket` (a seeded order flow in
batched books), "replay" builds `replay.market.ReplayMarket` (the agent against real days of a cache, any source),
"lobster" builds `lobster.market.LobsterMarket` (one LOBSTER file, book by book in Python: the replay's reference).
The envs take the market this returns, or one the caller built (`LobEnv(market=...)`).
"""

from __future__ import annotations

from lobsim_env.config import MarketConfig
from lobsim_env.lobster.market import LobsterMarket
from lobsim_env.market import Market
from lobsim_env.replay.market import ReplayMarket
from lobsim_env.synthetic.market import SyntheticMarket


def make_market(config: MarketConfig) -> Market:
    """The market of a config: synthetic flow, real days of a cache, or one replayed LOBSTER file."""
    if not isinstance(config, MarketConfig):
        raise TypeError(f"config={config!r} must be a lobsim_env.MarketConfig (build one from a dict first)")
    config.validate()
    if config.source == "lobster":
        return LobsterMarket(config)
    if config.source == "replay":
        return ReplayMarket(config)
    return SyntheticMarket(config)

"""The agent against real days of a cache (lobsim_env.data): `ReplayMarket`, its config (`replay_config`), and
whether its compiled step is built (`compiled`). Semantics: docs/market.md ("LOBSTER replay") and docs/data.md."""

from lobsim_env.replay.market import QUEUE_MODELS, ReplayMarket, ReplayState, compiled, contract_of, replay_config

__all__ = ["QUEUE_MODELS", "ReplayMarket", "ReplayState", "compiled", "contract_of", "replay_config"]

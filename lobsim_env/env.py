"""The Gymnasium faces of the market: a single `gymnasium.Env` and a natively batched `VectorEnv`.

Both drive one `lobsim_env.market.Market` over a state of B books (B = 1 for the single env), so there is exactly
one step function; they read nothing of it beyond that protocol. The market is the one `markets.make_market` builds
for the config (the synthetic market, or a replayed LOBSTER day), or one the caller built: `LobEnv(market=m)`.

Seeding: each book's episode is a pure function of a 64-bit key drawn from that book's generator at reset.
The single env draws it from its `np_random`; the vector env keeps one generator per book, seeded
`seed + i` for book i exactly as `gymnasium.utils.seeding.np_random(seed + i)` (what a single env's
`reset(seed=seed + i)` builds), so book i of `LobVectorEnv(B).reset(seed=s)` replays exactly what
`LobEnv().reset(seed=s + i)` does, episode after episode (autoreset draws the next key from the same
generator as the single env's next `reset()`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from lobsim_env.config import MarketConfig
from lobsim_env.market import N_ACTIONS, Market, obs_size
from lobsim_env.markets import make_market

INFO_KEYS = ("pnl_usd", "position", "fills", "fees_usd", "equity_usd")


def _config_and_market(config: MarketConfig | None, market: Market | None) -> tuple[MarketConfig, Market]:
    """The env's market: the one given, else the config's (MarketConfig() by default)."""
    if market is None:
        config = MarketConfig() if config is None else config
        return config, make_market(config)
    if not isinstance(market, Market):
        raise TypeError(f"market={market!r} must be a lobsim_env.Market (e.g. lobsim_env.make_market(config))")
    if config is not None and config != market.cfg:
        raise ValueError("config differs from market.cfg: pass the market alone (the env reads market.cfg)")
    return market.cfg, market


def _hindsight_actions(market: Market, state) -> np.ndarray:
    plan = getattr(market, "hindsight_actions", None)
    if plan is None:
        raise ValueError(f"{type(market).__name__} cannot see ahead: the hindsight baseline needs a real day (replay)")
    return plan(state)


def _observation_space(config: MarketConfig) -> gym.spaces.Box:
    # Finite bounds (check_env warns on infinite ones); no entry comes near them in practice.
    return gym.spaces.Box(-1e6, 1e6, shape=(obs_size(config),), dtype=np.float32)


def _draw_key(rng: np.random.Generator) -> np.uint64:
    return rng.integers(0, 2**64, dtype=np.uint64)


def _check_actions(actions: Any, n: int) -> np.ndarray:
    a = np.asarray(actions)
    if a.shape != (n,) or a.dtype.kind not in "iu":
        raise ValueError(f"actions of shape {a.shape} dtype {a.dtype} must be integers of shape ({n},)")
    if n and (a.min() < 0 or a.max() >= N_ACTIONS):
        raise ValueError(f"actions must be in 0..{N_ACTIONS - 1} (lobsim_env.Action); got {a.min()}..{a.max()}")
    return a.astype(np.int64, copy=False)


class LobEnv(gym.Env):
    """One limit-order book. Observation, action set and reward: docs/market.md."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self, config: MarketConfig | None = None, render_mode: str | None = None, *, market: Market | None = None
    ):
        self.config, self.market = _config_and_market(config, market)
        self.observation_space = _observation_space(self.config)
        self.action_space = gym.spaces.Discrete(N_ACTIONS)
        self.render_mode = render_mode
        self._state = self.market.new_state(1)
        self._rows = np.zeros(1, np.int64)
        self._done = True

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.market.reset_rows(self._state, self._rows, np.array([_draw_key(self.np_random)]))
        self._done = False
        return self.market.observe(self._state)[0], self._info(np.zeros(1, np.int64), np.zeros(1))

    def step(self, action):
        if self._done:
            raise RuntimeError("LobEnv.step called after the episode ended (or before reset): call reset() first")
        a = _check_actions(np.reshape(action, (1,)), 1)
        res = self.market.step(self._state, a)
        truncated = bool(res.truncated[0])
        self._done = truncated
        obs = self.market.observe(self._state)[0]
        info = self._info(res.fills, res.fees_usd)
        return obs, float(res.reward[0]), False, truncated, info

    def _info(self, fills: np.ndarray, fees: np.ndarray) -> dict[str, Any]:
        s = self._state
        return {
            "pnl_usd": float(s.equity_usd[0]),
            "position": int(s.position[0]),
            "fills": int(fills[0]),
            "fees_usd": float(fees[0]),
            "equity_usd": float(s.equity_usd[0]),
        }

    def latent_regime(self) -> int:
        """The hidden regime (-1, 0, +1) of the synthetic flow; for the oracle baseline only."""
        return int(self.market.latent_regime(self._state)[0])

    def hindsight_actions(self) -> int:
        """The hindsight bound's action on a real day (it reads the day's future); for that baseline only."""
        return int(_hindsight_actions(self.market, self._state)[0])


class LobVectorEnv(gym.vector.VectorEnv):
    """B books stepped together as arrays; NEXT_STEP autoreset (a finished book resets on the next step,
    which ignores that book's action and returns its first observation with reward 0)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": [], "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(
        self,
        num_envs: int = 1,
        config: MarketConfig | None = None,
        render_mode: str | None = None,
        *,
        market: Market | None = None,
    ):
        if not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs={num_envs!r} must be an int >= 1")
        self.config, self.market = _config_and_market(config, market)
        self.num_envs = num_envs
        self.single_observation_space = _observation_space(self.config)
        self.single_action_space = gym.spaces.Discrete(N_ACTIONS)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.spaces.MultiDiscrete(np.full(num_envs, N_ACTIONS))
        self.render_mode = render_mode
        self._state = self.market.new_state(num_envs)
        self._rngs: list[np.random.Generator] = []
        self._autoreset = np.zeros(num_envs, bool)
        self._started = False

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None):
        """Resets every book. seed: an int (book i gets seed + i), a list of B ints, or None (fresh entropy
        the first time, else each book's generator continues).

        options={"first_steps": [B] ints in [0, horizon)}: book i opens this episode at step first_steps[i] (a
        fresh book with horizon - first_steps[i] steps left; Market.reset_rows), so the books' episodes end at
        different steps from then on; later episodes (autoreset) open at step 0. Without it every book opens at 0.
        """
        B = self.num_envs
        first_steps = self._first_steps(options)
        if isinstance(seed, int | np.integer):
            seeds = [int(seed) + i for i in range(B)]
        elif seed is not None:
            seeds = [int(x) for x in seed]
            if len(seeds) != B:
                raise ValueError(f"reset(seed=...) got {len(seeds)} seeds for num_envs={B}")
        elif not self._rngs:
            base = int(np.random.SeedSequence().entropy % 2**62)
            seeds = [base + i for i in range(B)]
        else:
            seeds = None
        super().reset(seed=seeds[0] if seeds else None)
        if seeds is not None:
            self._rngs = [seeding.np_random(s)[0] for s in seeds]
        rows = np.arange(B)
        self.market.reset_rows(self._state, rows, self._keys(rows), first_steps)
        self._autoreset[:] = False
        self._started = True
        zi, zf = np.zeros(B, np.int64), np.zeros(B)
        return self.market.observe(self._state), self._info(zi, zf)

    def _first_steps(self, options: dict[str, Any] | None) -> np.ndarray | None:
        """options' "first_steps" checked: None, or int64 [B] in [0, horizon)."""
        options = dict(options or {})
        unknown = sorted(set(options) - {"first_steps"})
        if unknown:
            raise ValueError(f"reset(options=...) got unknown keys {unknown}: the only option is 'first_steps'")
        if options.get("first_steps") is None:
            return None
        steps, B, H = np.asarray(options["first_steps"]), self.num_envs, self.config.horizon
        if steps.shape != (B,) or steps.dtype.kind not in "iu":
            raise ValueError(
                f"options['first_steps'] of shape {steps.shape} dtype {steps.dtype} must be {B} integers (one a book)"
            )
        if B and (steps.min() < 0 or steps.max() >= H):
            raise ValueError(
                f"options['first_steps'] must be in [0, horizon={H}); got {steps.min()}..{steps.max()}"
            )
        return steps.astype(np.int64, copy=True)

    def _keys(self, rows: np.ndarray) -> np.ndarray:
        return np.array([_draw_key(self._rngs[i]) for i in rows], dtype=np.uint64)

    def step(self, actions):
        if not self._started:
            raise RuntimeError("LobVectorEnv.step called before reset(): call reset() first")
        a = _check_actions(actions, self.num_envs)
        res = self.market.step(self._state, a)
        truncated = res.truncated
        if self._autoreset.any():
            rows = np.flatnonzero(self._autoreset)
            self.market.reset_rows(self._state, rows, self._keys(rows))
            res.reward[rows] = 0.0
            res.fills[rows] = 0
            res.fees_usd[rows] = 0.0
            truncated = truncated.copy()
            truncated[rows] = False
        terminated = np.zeros(self.num_envs, bool)
        self._autoreset = truncated
        return (
            self.market.observe(self._state),
            res.reward,
            terminated,
            truncated,
            self._info(res.fills, res.fees_usd),
        )

    def _info(self, fills: np.ndarray, fees: np.ndarray) -> dict[str, np.ndarray]:
        s = self._state
        return {
            "pnl_usd": s.equity_usd.copy(),
            "position": s.position.copy(),
            "fills": fills,
            "fees_usd": fees,
            "equity_usd": s.equity_usd.copy(),
        }

    def latent_regime(self) -> np.ndarray:
        """[B] hidden regimes (-1, 0, +1) of the synthetic flow; for the oracle baseline only."""
        return self.market.latent_regime(self._state)

    def hindsight_actions(self) -> np.ndarray:
        """[B] the hindsight bound's actions on a real day (it reads the day's future); for that baseline only."""
        return _hindsight_actions(self.market, self._state)

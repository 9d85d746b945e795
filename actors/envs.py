"""The env factory: any Gymnasium id as a vector env the rollout can step, its spaces checked and probed.

The market (foxhunt/LOB-v0) is its native LobVectorEnv; any other registered id needs a 1-D Box observation and
a Discrete action space (`make_envs`: its own vector env when the spec has a vector_entry_point, else a
SyncVectorEnv). Either way the vector env must autoreset NEXT_STEP (`check_envs`; actors.rollout says why).
`probe_env` builds one throwaway copy and returns the `EnvSpaces` the driver sizes the learner by. An env the
system cannot train on raises `EnvError`, naming the fix.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

import lobsim_env  # noqa: F401  (registers foxhunt/LOB-v0)
from lobsim_env import ENV_ID, MarketConfig
from lobsim_env.validation import InputError

SUPPORTED_SPACES = "a 1-D Box observation (a vector of numbers) and a Discrete(n >= 2) action space"


class EnvError(InputError):
    """An env the system cannot train on (unknown id, unsupported spaces or autoreset mode); names the fix."""


@dataclass(kw_only=True, frozen=True)
class EnvSpaces:
    """What the learner is built from, probed once from the env (`probe_env`)."""

    obs_dim: int
    """D: length of the 1-D observation."""
    n_actions: int
    """n of the Discrete action space (actions on the wire are 0..n-1; the env's `start` is added when stepping)."""
    has_pnl: bool
    """The env reports pnl_usd in its info (the market): the diag carries pnl_cum_usd beside the returns."""


def is_market(env_id: str) -> bool:
    """The LOB market, by its id, also as 'lobsim_env:foxhunt/LOB-v0'."""
    return env_id.rpartition(":")[2] == ENV_ID


def _spec(env_id: str) -> gym.envs.registration.EnvSpec:
    """gymnasium's spec of env_id; 'module:Id' imports module first (it registers Id). EnvError otherwise."""
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise EnvError(
                f"env_id={env_id!r}: cannot import module {module!r} ({type(err).__name__}: {err}); the module that "
                "registers the env must be importable here and in every rollout worker process (install it, or "
                "ship it in the working directory of `ray job submit`)"
            ) from None
    try:
        return gym.spec(name)
    except gym.error.Error as err:
        raise EnvError(
            f"env_id={env_id!r} is not a registered Gymnasium env ({type(err).__name__}: {err}); pick a registered "
            "id (gymnasium.pprint_registry() lists them), or register yours with gymnasium.register(id=..., "
            "entry_point=...) in an importable module and pass 'module:Id' so that every rollout worker imports it"
        ) from None


def make_envs(
    env_id: str, num_envs: int, *, market: MarketConfig, env_kwargs: dict | None = None
) -> gym.vector.VectorEnv:
    """num_envs copies of env_id as one VectorEnv with NEXT_STEP autoreset, its spaces checked (EnvError).

    The market is its native LobVectorEnv configured by `market` (env_kwargs must be empty); any other id is
    gym.make_vec(id, vectorization_mode="vector_entry_point") when its spec has one, else a SyncVectorEnv
    forced to NEXT_STEP; env_kwargs go to the env's constructor (e.g. max_episode_steps).
    """
    env_kwargs = dict(env_kwargs or {})
    if is_market(env_id):
        if env_kwargs:
            raise EnvError(f"env_kwargs={env_kwargs!r}: the market takes its settings from market.*, not env_kwargs")
        envs = gym.make_vec(ENV_ID, num_envs=num_envs, vectorization_mode="vector_entry_point", config=market)
    else:
        spec = _spec(env_id)
        try:
            if spec.vector_entry_point is not None:
                envs = gym.make_vec(spec, num_envs=num_envs, vectorization_mode="vector_entry_point", **env_kwargs)
            else:
                envs = gym.make_vec(
                    spec,
                    num_envs=num_envs,
                    vectorization_mode="sync",
                    vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP},
                    **env_kwargs,
                )
        except TypeError as err:  # an env_kwargs key the env's constructor does not take
            raise EnvError(f"env_id={env_id!r} refused env_kwargs={env_kwargs!r}: {err}") from None
    try:
        check_envs(env_id, envs)
    except EnvError:
        envs.close()
        raise
    return envs


def check_envs(env_id: str, envs: gym.vector.VectorEnv) -> None:
    """EnvError unless envs autoresets NEXT_STEP and has a 1-D Box observation and a Discrete(n >= 2) action."""
    mode = envs.metadata.get("autoreset_mode")
    if mode not in (AutoresetMode.NEXT_STEP, AutoresetMode.NEXT_STEP.value):
        raise EnvError(
            f"env_id={env_id!r}: its vector env {type(envs).__name__} autoresets {mode!r}; the rollout's valid mask "
            f"needs {AutoresetMode.NEXT_STEP!r} (the step after an episode end returns the next episode's first obs): "
            "declare metadata['autoreset_mode'] = AutoresetMode.NEXT_STEP and implement it, or register the id "
            "without a vector_entry_point (a SyncVectorEnv is built with NEXT_STEP)"
        )
    obs_space, act_space = envs.single_observation_space, envs.single_action_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1 or obs_space.shape[0] < 1:
        raise EnvError(
            f"env_id={env_id!r} has observation space {obs_space}; foxhunt_ray supports {SUPPORTED_SPACES}: wrap "
            "the env so that it observes a 1-D vector (e.g. gymnasium.wrappers.FlattenObservation, which one-hot "
            "encodes a Discrete space) and register the wrapped env under its own id"
        )
    if not np.issubdtype(obs_space.dtype, np.number):
        raise EnvError(f"env_id={env_id!r} has observation dtype {obs_space.dtype}; it must convert to float32")
    if not isinstance(act_space, gym.spaces.Discrete) or int(act_space.n) < 2:
        raise EnvError(
            f"env_id={env_id!r} has action space {act_space}; foxhunt_ray supports {SUPPORTED_SPACES} (the policy "
            "picks one of n actions): discretise a Box action space (e.g. gymnasium.wrappers.DiscretizeAction) and "
            "register the wrapped env under its own id"
        )


def probe_env(env_id: str, *, market: MarketConfig, env_kwargs: dict | None = None) -> EnvSpaces:
    """Builds one copy of the env, checks it (EnvError) and returns its spaces; what the driver sizes the learner by."""
    envs = make_envs(env_id, 1, market=market, env_kwargs=env_kwargs)
    try:
        _, info = envs.reset(seed=0)
        return EnvSpaces(
            obs_dim=int(envs.single_observation_space.shape[0]),
            n_actions=int(envs.single_action_space.n),
            has_pnl="pnl_usd" in info,
        )
    finally:
        envs.close()

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
    obs_mean: tuple[float, ...]
    """Per observation column: the mean over the probe's steps (`probe_obs_stats`); learner.obs_norm reads it."""
    obs_std: tuple[float, ...]
    """Per observation column: the standard deviation over the probe's steps, at least OBS_STD_FLOOR."""


PROBE_ENVS = 16
"""Copies of the env the observation probe steps together (books, for the market)."""
PROBE_STEPS = 256
"""Steps of uniform random actions the observation probe takes (with PROBE_ENVS: 4,096 observations)."""
PROBE_SEED = 0
"""The probe's env seeds (copy i: PROBE_SEED + i, the first training books of a run of seed 0) and action stream:
the same statistics for every run of one env and config, whatever its seed."""
OBS_STD_FLOOR = 1e-2
"""A column that barely moves under the probe (a constant, or one the random policy leaves alone) is divided by
this, not by its tiny spread: standardising must not blow up what the probe did not see move."""


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
    """Builds PROBE_ENVS copies of the env, checks them (EnvError) and returns their spaces and observation
    statistics (`probe_obs_stats`); what the driver sizes the learner by."""
    envs = make_envs(env_id, PROBE_ENVS, market=market, env_kwargs=env_kwargs)
    try:
        # the market's books open at steps spread over the episode, as the rollout's staggered books do, so that
        # every column (the time left among them) is seen over its whole range, not only an episode's first steps
        first = np.linspace(0, market.horizon, PROBE_ENVS, endpoint=False).astype(np.int64)
        options = {"first_steps": first} if is_market(env_id) else None
        obs, info = envs.reset(seed=PROBE_SEED, options=options)
        mean, std = probe_obs_stats(envs, obs, env_id=env_id)
        return EnvSpaces(
            obs_dim=int(envs.single_observation_space.shape[0]),
            n_actions=int(envs.single_action_space.n),
            has_pnl="pnl_usd" in info,
            obs_mean=mean,
            obs_std=std,
        )
    finally:
        envs.close()


def probe_obs_stats(
    envs: gym.vector.VectorEnv, obs: np.ndarray, *, env_id: str, steps: int = PROBE_STEPS
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-column mean and std (floored at OBS_STD_FLOOR) of the observations of `steps` steps of uniform random
    actions from `obs` (the reset's), seeded by PROBE_SEED; the statistics learner.obs_norm standardises by.
    EnvError when the env observes something not finite (the learner would train on it)."""
    rng = np.random.default_rng(PROBE_SEED)
    n = int(envs.single_action_space.n)
    start = int(envs.single_action_space.start)
    count, total, total_sq = 0, 0.0, 0.0
    for _ in range(steps + 1):
        x = np.asarray(obs, np.float64).reshape(envs.num_envs, -1)
        if not np.isfinite(x).all():
            raise EnvError(
                f"env_id={env_id!r} observed a non-finite value while probed with random actions: the learner "
                "would train on it; make the env's observation finite (clip or replace NaN/inf)"
            )
        count, total, total_sq = count + len(x), total + x.sum(0), total_sq + (x * x).sum(0)
        obs = envs.step(rng.integers(0, n, envs.num_envs) + start)[0]
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean * mean, 0.0))
    std = np.maximum(std, OBS_STD_FLOOR)
    return tuple(float(v) for v in mean), tuple(float(v) for v in std)

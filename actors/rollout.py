"""The rollout role: B copies of an env (the market's books) and a CPU copy of the policy; sample(T) -> one payload.

A plain class (no Ray here; `ray.remote` wraps it in the driver). The env is the market (foxhunt/LOB-v0, its
native LobVectorEnv) or any registered Gymnasium id with a 1-D Box observation and a Discrete action space
(`make_envs`: its own vector env when the spec has a vector_entry_point, else a SyncVectorEnv). Either way the
vector env must autoreset NEXT_STEP: after an env's episode ends, its next step ignores the action and returns
the first obs of the next episode with reward 0. That step is not a transition, so it is shipped with
valid=False, and obs[t+1] is always the true next observation of step t. The env is reset (seeded) exactly
once, at construction; every later episode follows from autoreset, so the stream of a worker is a pure function
of (seed, worker_index, weights) and consecutive sample() calls continue the same trajectories.

The market reports each book's pnl_usd in its info; an env without it (CartPole, ...) gets its episode return
(the sum of its rewards) tracked here instead, shipped in the same wire columns (wire version 1 has one number
per episode), and the driver reports it as return_cum / episode_return_mean only (EpisodeStats.has_pnl=False).
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

import lobsim_env  # noqa: F401  (registers foxhunt/LOB-v0)
from actors import wire
from learner.network import PolicyNet, policy_from_weights
from lobsim_env import ENV_ID, MarketConfig


@dataclass(kw_only=True, frozen=True)
class RolloutConfig:
    """One rollout worker's books and threads; the market itself is a MarketConfig."""

    num_envs: int = 16
    """B: books stepped together by one worker."""
    steps_per_sample: int = 64
    """T: env steps per sample() batch (what the driver passes to sample)."""
    torch_threads: int = 1
    """torch intra-op threads in the worker process (1: N workers share the cores without oversubscribing)."""
    policy_device: str = "auto"
    """Where the worker's policy copy acts: "cpu", "cuda", or "auto" (the GPU when the worker's process sees one,
    else the CPU). On a GPU host the policy's forward pass costs a CPU core more than stepping the books does
    (BENCHMARKS.md, "The system on one GPU host"); under Ray a worker sees the GPU only when the driver gave it a
    share of one (foxhunt_ray.remote)."""

    def errors(self) -> list[str]:
        errs = []
        for name in ("num_envs", "steps_per_sample", "torch_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                errs.append(f"rollout.{name}={v!r} must be an int >= 1")
        if self.policy_device not in POLICY_DEVICES:
            errs.append(f"rollout.policy_device={self.policy_device!r} must be one of {list(POLICY_DEVICES)}")
        return errs


POLICY_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")


def policy_device(setting: str) -> torch.device:
    """The device a rollout worker acts on for RolloutConfig.policy_device = setting, in this process."""
    if setting == "auto":
        setting = "cuda" if torch.cuda.is_available() else "cpu"
    if setting == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "rollout.policy_device='cuda' but this process sees no GPU: use 'auto' or 'cpu', or give the rollout "
            "workers a GPU (under Ray the driver does when the cluster has one)"
        )
    return torch.device(setting)


SUPPORTED_SPACES = "a 1-D Box observation (a vector of numbers) and a Discrete(n >= 2) action space"


class EnvError(ValueError):
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


def book_seed(seed: int, worker_index: int, num_envs: int) -> int:
    """Seed of book 0 of a worker; book i gets this + i. Workers' books never overlap (docs/market.md)."""
    return seed + worker_index * num_envs


class RolloutWorker:
    """Owns a VectorEnv of B envs and a PolicyNet copy; methods: set_weights, sample, get_spaces, timings, stop."""

    def __init__(
        self,
        cfg: RolloutConfig,
        market: MarketConfig,
        *,
        worker_index: int,
        seed: int,
        fold: int = 0,
        weights: dict | None = None,
        env_id: str = ENV_ID,
        env_kwargs: dict | None = None,
    ):
        """market configures the market's books; env_id / env_kwargs pick any other env (make_envs)."""
        errs = cfg.errors() + (market.errors() if is_market(env_id) else [])
        for name, v in (("worker_index", worker_index), ("seed", seed), ("fold", fold)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                errs.append(f"{name}={v!r} must be an int >= 0")
        if errs:
            raise ValueError("cannot build RolloutWorker:\n  " + "\n  ".join(errs))
        torch.set_num_threads(cfg.torch_threads)
        self.device = policy_device(cfg.policy_device)
        self.cfg, self.worker_index, self.fold, self.env_id = cfg, worker_index, fold, env_id
        B = cfg.num_envs
        self.env = make_envs(env_id, B, market=market, env_kwargs=env_kwargs)
        self.obs_dim = int(self.env.single_observation_space.shape[0])
        self.n_actions = int(self.env.single_action_space.n)
        self._action_start = int(self.env.single_action_space.start)  # Discrete(n, start): the env's action ids
        first = book_seed(seed, worker_index, B)
        self.env_ids = np.arange(first, first + B, dtype=np.int64)
        obs, info = self.env.reset(seed=first)
        self._obs = np.asarray(obs, dtype=np.float32)
        self.has_pnl = "pnl_usd" in info
        # the market's pnl from its info; any other env's running episode return (sum of rewards), kept here
        self._pnl = np.asarray(info["pnl_usd"], dtype=np.float64) if self.has_pnl else np.zeros(B, np.float64)
        self._autoreset = np.zeros(B, bool)  # envs whose next step is an autoreset (not a transition)
        # Action sampling has its own seeded stream (on the policy's device): nothing else can shift it.
        self._gen = torch.Generator(device=self.device).manual_seed(seed + worker_index)
        self.policy: PolicyNet | None = None
        self.policy_version = -1
        self.total_env_steps = 0
        self._stopped = False
        self._seconds = dict.fromkeys(TIMING_KEYS, 0.0)
        if weights is not None:
            self.set_weights(weights)

    def set_weights(self, weights: dict) -> None:
        """Loads Learner.policy_weights(); its 'version' stamps every later batch (the learner's policy lag)."""
        version = weights.get("version") if isinstance(weights, dict) else None
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"weights['version']={version!r} must be an int >= 0: pass Learner.policy_weights()")
        if (weights.get("obs_dim"), weights.get("n_actions")) != (self.obs_dim, self.n_actions):
            raise ValueError(
                f"weights are for obs_dim={weights.get('obs_dim')}, n_actions={weights.get('n_actions')}; this "
                f"env has obs_dim={self.obs_dim}, n_actions={self.n_actions}: build the Learner from get_spaces()"
            )
        t0 = time.perf_counter()
        if self.policy is None:
            self.policy = policy_from_weights(weights).eval().to(self.device)
        else:  # same sizes: load in place, no rebuild per broadcast
            self.policy.load_state_dict(weights["state"])
        self.policy_version = version
        self._seconds["weights_s"] += time.perf_counter() - t0

    def get_spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        """(observation space, action space) of one env (book)."""
        return self.env.single_observation_space, self.env.single_action_space

    def timings(self) -> dict[str, float]:
        """Seconds spent so far: env_s (stepping the books), act_s (the policy: forward, sampling, copies to and
        from its device), encode_s (the wire payload), weights_s (loading broadcast weights), and samples."""
        return dict(self._seconds)

    def sample(self, n_steps: int | None = None) -> np.ndarray:
        """Steps every book n_steps times (default cfg.steps_per_sample); returns one wire payload (actors.wire:
        a numpy uint8 array, which Ray's object store hands to a reader on this node without a copy)."""
        if self._stopped:
            raise RuntimeError("RolloutWorker.sample after stop(): build a new worker")
        if self.policy is None:
            raise RuntimeError("RolloutWorker.sample before set_weights(): send Learner.policy_weights() first")
        T = self.cfg.steps_per_sample if n_steps is None else n_steps
        if isinstance(T, bool) or not isinstance(T, int) or T < 1:
            raise ValueError(f"n_steps={n_steps!r} must be an int >= 1")
        B, D = self.cfg.num_envs, self.obs_dim
        obs = np.empty((T + 1, B, D), np.float32)
        actions = np.empty((T, B), np.int64)
        logp = np.empty((T, B), np.float32)
        rewards = np.empty((T, B), np.float32)
        terminated = np.empty((T, B), bool)
        truncated = np.empty((T, B), bool)
        valid = np.empty((T, B), bool)
        ep_env: list[np.ndarray] = []
        ep_pnl: list[np.ndarray] = []
        obs[0] = self._obs
        clock = time.perf_counter
        act_s = env_s = 0.0
        for t in range(T):
            t0 = clock()
            actions[t], logp[t] = self.policy.act(obs[t], generator=self._gen)
            t1 = clock()
            valid[t] = ~self._autoreset
            step_actions = actions[t] + self._action_start if self._action_start else actions[t]
            next_obs, reward, term, trunc, info = self.env.step(step_actions)
            act_s += t1 - t0
            env_s += clock() - t1
            obs[t + 1] = next_obs
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
            if self.has_pnl:
                self._pnl = np.asarray(info["pnl_usd"], dtype=np.float64)
            else:  # a new episode's return starts on its autoreset step (reward 0 there)
                self._pnl = np.where(valid[t], self._pnl, 0.0) + np.asarray(reward, dtype=np.float64)
            self._autoreset = term | trunc
            if self._autoreset.any():
                ended = np.flatnonzero(self._autoreset)
                ep_env.append(ended)
                ep_pnl.append(self._pnl[ended])
        if not (np.isfinite(obs).all() and np.isfinite(rewards).all()):
            raise ValueError(
                f"env {self.env_id!r} returned a non-finite observation or reward in worker {self.worker_index}'s "
                "batch: the env diverged (or observes inf); fix or wrap the env"
            )
        self._obs = obs[T].copy()
        self.total_env_steps += T * B
        t0 = clock()
        payload = wire.encode(
            {
                "policy_version": self.policy_version,
                "fold": self.fold,
                "worker_index": self.worker_index,
                "env_steps": T * B,
                "obs": obs,
                "actions": actions,
                "rewards": rewards,
                "terminated": terminated,
                "truncated": truncated,
                "valid": valid,
                "behaviour_logp": logp,
                "env_ids": self.env_ids,
                "pnl_usd": self._pnl,
                "episode_env": np.concatenate(ep_env) if ep_env else np.zeros(0, np.int64),
                "episode_pnl_usd": np.concatenate(ep_pnl) if ep_pnl else np.zeros(0, np.float64),
            }
        )
        sec = self._seconds
        sec["env_s"] += env_s
        sec["act_s"] += act_s
        sec["encode_s"] += clock() - t0
        sec["samples"] += 1
        return payload

    def stop(self) -> None:
        """Closes the books; idempotent."""
        if not self._stopped:
            self.env.close()
            self._stopped = True


TIMING_KEYS: tuple[str, ...] = ("env_s", "act_s", "encode_s", "weights_s", "samples")
"""RolloutWorker.timings(): where a rollout worker's time goes (bench_system.py sums them over the workers)."""

PNL_CUM_USD = "pnl_cum_usd"
RETURN_CUM = "return_cum"
EPISODE_RETURN_MEAN = "episode_return_mean"
RETURN_WINDOW = 100
"""episode_return_mean is the mean return of the last RETURN_WINDOW episodes that ended, over all workers."""


@dataclass(kw_only=True)
class EpisodeStats:
    """Running totals over the batches' metadata: what the learner worker puts in each diag line (`diag()`).

    Wire version 1 carries one number per ended episode, episode_pnl_usd: the market's final pnl_usd, or, for
    an env without pnl (has_pnl=False), the episode's return. The market's reward is its change in equity, so
    its episode return is its pnl: return_cum and episode_return_mean mean the same for every env, and
    pnl_cum_usd is there only for the market.
    """

    has_pnl: bool = True
    """The env reports pnl_usd (the market); False for any other env: no pnl_cum_usd in the diag."""
    env_steps: int = 0
    episodes: int = 0
    return_cum: float = 0.0
    """Sum of the returns of every episode that ended so far, over all workers (= pnl_cum_usd for the market)."""
    recent_returns: list[float] = field(default_factory=list)
    """Returns of the last RETURN_WINDOW episodes that ended, oldest first."""
    pnl_cum_usd: float = 0.0
    """Sum of the final pnl_usd of every episode that ended so far, over all workers."""
    last_episode_pnl_usd: float = 0.0
    """Mean final pnl_usd of the episodes that ended in the latest batch that had any."""

    def add(self, meta: dict) -> None:
        returns = meta["episode_pnl_usd"]
        self.env_steps += int(meta["env_steps"])
        self.episodes += int(returns.size)
        if returns.size:
            self.return_cum += float(returns.sum())
            self.recent_returns = (self.recent_returns + returns.tolist())[-RETURN_WINDOW:]
            if self.has_pnl:
                self.pnl_cum_usd += float(returns.sum())
                self.last_episode_pnl_usd = float(returns.mean())

    @property
    def episode_return_mean(self) -> float | None:
        """Mean return of the last RETURN_WINDOW ended episodes; None before the first one ends."""
        return sum(self.recent_returns) / len(self.recent_returns) if self.recent_returns else None

    def diag(self) -> dict[str, float | int]:
        """env_steps, episodes, return_cum, episode_return_mean (once an episode ended) and, for the market,
        pnl_cum_usd."""
        out: dict[str, float | int] = {
            "env_steps": self.env_steps,
            "episodes": self.episodes,
            RETURN_CUM: self.return_cum,
        }
        if (mean := self.episode_return_mean) is not None:
            out[EPISODE_RETURN_MEAN] = mean
        if self.has_pnl:
            out[PNL_CUM_USD] = self.pnl_cum_usd
        return out

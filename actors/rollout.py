"""The rollout role: B copies of an env (the market's books) and a CPU copy of the policy; sample(T) -> one payload.

A plain class (no Ray here; `ray.remote` wraps it in the driver), configured by actors.config.RolloutConfig. The
env is the market (foxhunt/LOB-v0, its native LobVectorEnv) or any registered Gymnasium id with a 1-D Box
observation and a Discrete action space, built by the env factory (actors.envs.make_envs). Either way the
vector env must autoreset NEXT_STEP: after an env's episode ends, its next step ignores the action and returns
the first obs of the next episode with reward 0. That step is not a transition, so it is shipped with
valid=False, and obs[t+1] is always the true next observation of step t. The env is reset (seeded) exactly
once, at construction; every later episode follows from autoreset, so the stream of a worker is a pure function
of (seed, worker_index, weights) and consecutive sample() calls continue the same trajectories. The market's books
open that first episode at staggered steps (RolloutConfig.stagger_episodes; the shortened first episodes are left
out of the episode stats), so a worker's books are out of phase and a batch is not one phase of the episode.

The market reports each book's pnl_usd in its info; an env without it (CartPole, ...) gets its episode return
(the sum of its rewards) tracked here instead, shipped in the same wire columns (wire version 1 has one number
per episode), and the driver reports it as return_cum / episode_return_mean only
(actors.episode_stats.EpisodeStats, has_pnl=False).
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch

from actors import wire
from actors.config import RolloutConfig
from actors.envs import is_market, make_envs
from learner.network import PolicyNet, policy_from_weights
from lobsim_env import ENV_ID, MarketConfig
from lobsim_env.seeds import book_seed

STAGGER_STREAM = 0x57A66E
"""Mixed into the seed of the generator that draws the books' first steps (RolloutConfig.stagger_episodes), so
that stream is its own: no other draw of the worker shifts it."""


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
        first_steps = self._first_steps(cfg, market, seed, worker_index) if is_market(env_id) else None
        obs, info = self.env.reset(seed=first, options=None if first_steps is None else {"first_steps": first_steps})
        self._obs = np.asarray(obs, dtype=np.float32)
        # False for a book whose current episode opened late (stagger_episodes): the episode stats skip it
        self._full_episode = np.ones(B, bool) if first_steps is None else first_steps == 0
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

    @staticmethod
    def _first_steps(cfg: RolloutConfig, market: MarketConfig, seed: int, worker_index: int) -> np.ndarray | None:
        """The step each book opens its first episode at (cfg.stagger_episodes), from its own seeded stream."""
        if not cfg.stagger_episodes:
            return None
        rng = np.random.default_rng([seed, worker_index, STAGGER_STREAM])
        return rng.integers(0, market.horizon, cfg.num_envs, dtype=np.int64)

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
                full = ended[self._full_episode[ended]]
                self._full_episode[ended] = True
                ep_env.append(full)
                ep_pnl.append(self._pnl[full])
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

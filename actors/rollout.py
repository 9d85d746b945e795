"""The rollout role: B books of the market and a CPU copy of the policy; sample(T) -> one wire payload.

A plain class (no Ray here; `ray.remote` wraps it in the driver). The books are the native LobVectorEnv with
NEXT_STEP autoreset: after a book's episode ends, its next step ignores the action and returns the first obs of
the next episode with reward 0. That step is not a transition, so it is shipped with valid=False, and obs[t+1]
is always the true next observation of step t. The env is reset (seeded) exactly once, at construction; every
later episode follows from autoreset, so the stream of a worker is a pure function of (seed, worker_index,
weights) and consecutive sample() calls continue the same trajectories.
"""

from __future__ import annotations

from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

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

    def errors(self) -> list[str]:
        errs = []
        for name in ("num_envs", "steps_per_sample", "torch_threads"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                errs.append(f"rollout.{name}={v!r} must be an int >= 1")
        return errs


def book_seed(seed: int, worker_index: int, num_envs: int) -> int:
    """Seed of book 0 of a worker; book i gets this + i. Workers' books never overlap (docs/market.md)."""
    return seed + worker_index * num_envs


class RolloutWorker:
    """Owns a LobVectorEnv of B books and a PolicyNet copy; methods: set_weights, sample, get_spaces, stop."""

    def __init__(
        self,
        cfg: RolloutConfig,
        market: MarketConfig,
        *,
        worker_index: int,
        seed: int,
        fold: int = 0,
        weights: dict | None = None,
    ):
        errs = cfg.errors() + market.errors()
        for name, v in (("worker_index", worker_index), ("seed", seed), ("fold", fold)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                errs.append(f"{name}={v!r} must be an int >= 0")
        if errs:
            raise ValueError("cannot build RolloutWorker:\n  " + "\n  ".join(errs))
        torch.set_num_threads(cfg.torch_threads)
        self.cfg, self.worker_index, self.fold = cfg, worker_index, fold
        B = cfg.num_envs
        self.env = gym.make_vec(ENV_ID, num_envs=B, vectorization_mode="vector_entry_point", config=market)
        self.obs_dim = int(self.env.single_observation_space.shape[0])
        self.n_actions = int(self.env.single_action_space.n)
        first = book_seed(seed, worker_index, B)
        self.env_ids = np.arange(first, first + B, dtype=np.int64)
        obs, info = self.env.reset(seed=first)
        self._obs = np.asarray(obs, dtype=np.float32)
        self._pnl = np.asarray(info["pnl_usd"], dtype=np.float64)
        self._autoreset = np.zeros(B, bool)  # books whose next step is an autoreset (not a transition)
        # Action sampling has its own seeded stream: nothing else in the process can shift it.
        self._gen = torch.Generator().manual_seed(seed + worker_index)
        self.policy: PolicyNet | None = None
        self.policy_version = -1
        self.total_env_steps = 0
        self._stopped = False
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
                f"market has obs_dim={self.obs_dim}, n_actions={self.n_actions}: build the Learner from get_spaces()"
            )
        if self.policy is None:
            self.policy = policy_from_weights(weights).eval()
        else:  # same sizes: load in place, no rebuild per broadcast
            self.policy.load_state_dict(weights["state"])
        self.policy_version = version

    def get_spaces(self) -> tuple[gym.spaces.Box, gym.spaces.Discrete]:
        """(observation space, action space) of one book."""
        return self.env.single_observation_space, self.env.single_action_space

    def sample(self, n_steps: int | None = None) -> bytes:
        """Steps every book n_steps times (default cfg.steps_per_sample); returns one wire payload."""
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
        for t in range(T):
            actions[t], logp[t] = self.policy.act(obs[t], generator=self._gen)
            valid[t] = ~self._autoreset
            next_obs, reward, term, trunc, info = self.env.step(actions[t])
            obs[t + 1] = next_obs
            rewards[t], terminated[t], truncated[t] = reward, term, trunc
            self._pnl = np.asarray(info["pnl_usd"], dtype=np.float64)
            self._autoreset = term | trunc
            if self._autoreset.any():
                ended = np.flatnonzero(self._autoreset)
                ep_env.append(ended)
                ep_pnl.append(self._pnl[ended])
        self._obs = obs[T].copy()
        self.total_env_steps += T * B
        return wire.encode(
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

    def stop(self) -> None:
        """Closes the books; idempotent."""
        if not self._stopped:
            self.env.close()
            self._stopped = True


@dataclass(kw_only=True)
class EpisodeStats:
    """Running totals over the batches' metadata (what the driver puts in diag: pnl_cum_usd, env_steps)."""

    env_steps: int = 0
    episodes: int = 0
    pnl_cum_usd: float = 0.0
    """Sum of the final pnl_usd of every episode that ended so far, over all workers."""
    last_episode_pnl_usd: float = 0.0
    """Mean final pnl_usd of the episodes that ended in the latest batch that had any."""

    def add(self, meta: dict) -> None:
        pnl = meta["episode_pnl_usd"]
        self.env_steps += int(meta["env_steps"])
        self.episodes += int(pnl.size)
        if pnl.size:
            self.pnl_cum_usd += float(pnl.sum())
            self.last_episode_pnl_usd = float(pnl.mean())

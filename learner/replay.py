"""Rollout batches in, learning data out: batch validation, n-step returns, the device-resident uniform replay
for the Q heads and the on-policy queue for PPO.

A rollout is time-major and columnar (what a rollout actor ships): obs[T+1, B, D] with obs[t+1] the TRUE next
observation of transition t (gymnasium NEXT_STEP autoreset), and valid[t] False on autoreset steps, which are
not transitions (their action is ignored and their obs[t] -> obs[t+1] crosses an episode boundary).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields

import numpy as np
import torch

from learner import ops

BATCH_DTYPES = {
    "obs": torch.float32,
    "actions": torch.int64,
    "rewards": torch.float32,
    "terminated": torch.bool,
    "truncated": torch.bool,
    "behaviour_logp": torch.float32,
    "valid": torch.bool,
}
"""Required rollout columns and their dtypes; plus `policy_version` (int)."""


@dataclass(kw_only=True, frozen=True)
class Rollout:
    """A validated rollout, where it arrived or (after .to) on the learner's device; layout: module docstring."""

    obs: torch.Tensor  # [T+1, B, D] float32
    actions: torch.Tensor  # [T, B] int64
    rewards: torch.Tensor  # [T, B] float32
    terminated: torch.Tensor  # [T, B] bool
    truncated: torch.Tensor  # [T, B] bool
    behaviour_logp: torch.Tensor  # [T, B] float32, log pi_behaviour(a_t | s_t) from the actor's lagged copy
    valid: torch.Tensor  # [T, B] bool
    valid_idx: torch.Tensor  # [n_valid] int64: flat t*B + b of the valid steps
    policy_version: int

    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def to(self, device: torch.device, non_blocking: bool = False) -> Rollout:
        d = self.to_dict()
        return Rollout(
            **{k: (v.to(device, non_blocking=non_blocking) if torch.is_tensor(v) else v) for k, v in d.items()}
        )


def rollout_from_batch(batch: dict, *, obs_dim: int, n_actions: int, finite_checked: bool = False) -> Rollout:
    """Checks keys, dtypes, shapes and values of a rollout dict; one ValueError names every problem.

    finite_checked: the float columns were already checked finite where they came from (actors.wire.decode
    does, on the learner worker's receive path), so the pass over them is not made twice."""
    if not isinstance(batch, dict):
        raise ValueError(f"batch must be a dict of rollout columns, got {type(batch).__name__}")
    want = [*BATCH_DTYPES, "policy_version"]
    missing = [k for k in want if k not in batch]
    extra = [k for k in batch if k not in want]
    if missing or extra:
        raise ValueError(f"batch keys: missing {missing}, unexpected {extra}; a rollout has exactly {want}")
    errs: list[str] = []
    cols: dict[str, torch.Tensor] = {}
    for key, dtype in BATCH_DTYPES.items():
        value = batch[key]
        if not isinstance(value, (np.ndarray, torch.Tensor)):
            errs.append(f"batch[{key!r}] must be a numpy array or tensor, got {type(value).__name__}")
            continue
        t = torch.as_tensor(value)
        if t.dtype != dtype:
            errs.append(f"batch[{key!r}].dtype={t.dtype} must be {dtype} (cast it in the rollout actor)")
            continue
        cols[key] = t
    version = batch["policy_version"]
    if isinstance(version, (np.integer, torch.Tensor)) and np.ndim(version) == 0:
        version = int(version)
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        errs.append(f"batch['policy_version']={version!r} must be an int >= 0")
    if "obs" in cols:
        obs = cols["obs"]
        if obs.ndim != 3 or obs.shape[0] < 2 or obs.shape[2] != obs_dim:
            errs.append(f"batch['obs'].shape={tuple(obs.shape)} must be [T+1, B, obs_dim={obs_dim}] with T >= 1")
        else:
            tb = (obs.shape[0] - 1, obs.shape[1])
            for key in BATCH_DTYPES:
                if key != "obs" and key in cols and tuple(cols[key].shape) != tb:
                    errs.append(
                        f"batch[{key!r}].shape={tuple(cols[key].shape)} must be [T, B]={tb} "
                        f"(obs is [T+1, B, D]={tuple(obs.shape)})"
                    )
    if not errs:
        actions = cols["actions"]
        # one pass over every step; only when some step is out of range, a look at the valid ones alone
        lo, hi = torch.aminmax(actions) if actions.numel() else (0, 0)
        if int(lo) < 0 or int(hi) >= n_actions:
            a = actions[cols["valid"]]
            if a.numel() and (a.min() < 0 or a.max() >= n_actions):
                errs.append(
                    f"batch['actions'] on valid steps must lie in [0, {n_actions}), "
                    f"got range [{int(a.min())}, {int(a.max())}]"
                )
        if not cols["valid"].any():
            errs.append("batch['valid'] is False everywhere: the rollout holds no transition")
        for key in () if finite_checked else ("obs", "rewards", "behaviour_logp"):
            if not torch.isfinite(cols[key]).all():
                errs.append(f"batch[{key!r}] holds NaN or inf values")
    if errs:
        raise ValueError("invalid rollout batch:\n  " + "\n  ".join(errs))
    # Index the valid steps where the data arrives (the CPU, for numpy batches): on the device, each boolean
    # mask would be a host sync, and the learner needs this selection a dozen times per update.
    cols["valid_idx"] = cols["valid"].reshape(-1).nonzero().squeeze(1)
    return Rollout(policy_version=version, **cols)


def nstep_transitions(r: Rollout, gamma: float, n: int, reward_scale: float) -> dict[str, torch.Tensor]:
    """n-step transitions of every valid step: (obs, action, ret, discount, next_obs), flattened.

    ret = sum_{k<m} gamma^k r_{t+k}, m <= n steps, stopping at an episode end or the end of the rollout
    (a shorter, still unbiased horizon); discount = gamma^m * (1 - terminated_{t+m-1}), so truncation
    bootstraps from the true next observation and termination does not.
    """
    return gather_transitions(r, nstep_returns(r, gamma, n, reward_scale), r.valid_idx)


def nstep_returns(r: Rollout, gamma: float, n: int, reward_scale: float) -> tuple[torch.Tensor, ...]:
    """(ret, discount, next_row), each [T, B], of every step of r (nstep_transitions' arithmetic, elementwise per
    env: a minibatch of envs gets exactly its columns). next_row is the flat row t' * B + b of obs[T+1, B] that
    step (t, b) bootstraps from. One kernel on CUDA (learner.ops.nstep_returns), the reference elsewhere."""
    return ops.nstep_returns(r.rewards, r.valid, r.terminated, r.truncated, gamma, n, reward_scale)


def gather_transitions(r: Rollout, returns: tuple[torch.Tensor, ...], flat_idx: torch.Tensor) -> dict:
    """The n-step transitions (nstep_returns of r) of the steps at flat indices t * B + b of r, in that order."""
    ret, discount, next_row = returns
    obs = r.obs.reshape(-1, r.obs.shape[-1])
    return {
        "obs": obs[flat_idx],
        "action": r.actions.reshape(-1)[flat_idx],
        "ret": ret.reshape(-1)[flat_idx],
        "discount": discount.reshape(-1)[flat_idx],
        "next_obs": obs[next_row.reshape(-1)[flat_idx]],
    }


class ReplayBuffer:
    """Uniform ring buffer of n-step transitions, kept on the learner's device; sampled with its own RNG."""

    KEYS = ("obs", "action", "ret", "discount", "next_obs")

    def __init__(self, capacity: int, obs_dim: int, device: torch.device, seed: int):
        self.capacity, self.obs_dim, self.device = capacity, obs_dim, torch.device(device)
        self.data = {
            "obs": torch.zeros(capacity, obs_dim, device=device),
            "action": torch.zeros(capacity, dtype=torch.int64, device=device),
            "ret": torch.zeros(capacity, device=device),
            "discount": torch.zeros(capacity, device=device),
            "next_obs": torch.zeros(capacity, obs_dim, device=device),
        }
        self.cursor = 0
        self.size = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def __len__(self) -> int:
        return self.size

    def add(self, tr: dict[str, torch.Tensor]) -> None:
        n = tr["action"].shape[0]
        if n > self.capacity:  # more than fits: only the newest `capacity` survive anyway
            tr = {k: v[-self.capacity :] for k, v in tr.items()}
            n = self.capacity
        idx = (self.cursor + torch.arange(n, device=self.device)) % self.capacity
        for k in self.KEYS:
            self.data[k][idx] = tr[k]
        self._advance(n)

    def add_rows(self, r: Rollout, returns: tuple[torch.Tensor, ...], flat_idx: torch.Tensor) -> None:
        """`add(gather_transitions(r, returns, flat_idx))` without the gathered copies: the steps at flat indices
        t * B + b of r (on this buffer's device, with their nstep_returns) go straight into the ring, one kernel on
        CUDA (learner.ops.replay_write_)."""
        n = flat_idx.numel()
        if n > self.capacity:  # more than fits: only the newest `capacity` survive anyway
            flat_idx, n = flat_idx[-self.capacity :], self.capacity
        ops.replay_write_(self.data, r.obs, r.actions, returns, flat_idx, self.cursor)
        self._advance(n)

    def _advance(self, n: int) -> None:
        """The ring after n rows were written at the cursor."""
        self.cursor = (self.cursor + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def sample(self, batch_size: int) -> dict[str, torch.Tensor]:
        if self.size == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty; add a rollout first")
        idx = torch.randint(0, self.size, (batch_size,), generator=self.gen, device=self.device)
        return {k: v[idx] for k, v in self.data.items()}

    def state_dict(self) -> dict:
        return {
            "capacity": self.capacity,
            "obs_dim": self.obs_dim,
            "cursor": self.cursor,
            "size": self.size,
            "rng": self.gen.get_state(),
            **{k: v[: self.size].cpu() for k, v in self.data.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        if (state["capacity"], state["obs_dim"]) != (self.capacity, self.obs_dim):
            raise ValueError(
                f"replay checkpoint has capacity={state['capacity']}, obs_dim={state['obs_dim']}; "
                f"this learner has capacity={self.capacity}, obs_dim={self.obs_dim}"
            )
        self.cursor, self.size = int(state["cursor"]), int(state["size"])
        for k in self.KEYS:
            self.data[k][: self.size] = state[k].to(self.device)
        self.gen.set_state(state["rng"])


class OnPolicyQueue:
    """FIFO of validated rollouts waiting for their PPO/V/distill step; an update trains on the oldest.

    Learner.update pushes the rollout it is given and pops the oldest, so a synchronous caller always
    trains on the rollout just given; the queue is checkpointed, so a rollout received is never lost.
    """

    def __init__(self) -> None:
        self.items: deque[Rollout] = deque()

    def push(self, r: Rollout) -> None:
        self.items.append(r)

    def pop(self) -> Rollout:
        return self.items.popleft()

    def __len__(self) -> int:
        return len(self.items)

    def state_dict(self) -> list[dict]:
        return [
            {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in r.to_dict().items()} for r in self.items
        ]

    def load_state_dict(self, state: list[dict], device: torch.device) -> None:
        self.items.clear()
        for d in state:
            self.push(Rollout(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in d.items()}))

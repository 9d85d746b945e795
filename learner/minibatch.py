"""A rollout into learner steps, and the steps' figures back: minibatches, epochs and the diag hand-off.

`Minibatches.steps(rollout)` splits a validated rollout's B envs into minibatches of `LearnerConfig.minibatch_envs`
envs (whole trajectories), `ppo_epochs` passes over them in the same order, and hands back each step's minibatch
with its replay write (the first pass writes the minibatch's n-step transitions into replay; later ones write
nothing). The Learner runs each as one step and keeps its diag values on the device as a `Pending`; `diag_values`
and `diag_dict` turn them into the diag dicts after one device sync (or none, with `diag_values_to_host`).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np
import torch

from learner import diag as D
from learner.config import LearnerConfig
from learner.replay import BATCH_DTYPES, ReplayBuffer, Rollout, nstep_returns


def _nothing() -> None:
    """What a later pass over a rollout writes into replay (LearnerConfig.ppo_epochs): nothing."""


class Minibatches:
    """Splits rollouts into the learner steps of LearnerConfig.minibatch_envs and ppo_epochs."""

    def __init__(self, cfg: LearnerConfig, replay: ReplayBuffer, device: torch.device):
        self.cfg, self.replay, self.device = cfg, replay, device
        self._index_templates: tuple = (None, None, None)  # _indices' (shape key, local, flat)

    def steps(
        self,
        host: Rollout,
        *,
        limit: int | None = None,
        before_copy: Callable[[], None] | None = None,
        after_copy: Callable[[], None] | None = None,
    ) -> list[tuple[Rollout, Callable[[], None]]]:
        """(minibatch, write it into replay) for each learner step of a validated rollout, in order, at most `limit`
        of them: the rollout goes to the device in one copy (asynchronous when its tensors are pinned), each
        minibatch is a view of it, and its n-step returns are computed there. `cfg.ppo_epochs` passes over the
        minibatches, in the same order; only the first writes them into replay.

        A minibatch's valid steps are indexed where the rollout arrived (the host): on the device each index
        would be a sync. With minibatch_envs = 0 the rollout is one minibatch. `before_copy` and `after_copy` are
        called around the queueing of the copies (the learner worker records CUDA events there)."""
        cfg = self.cfg
        b = host.rewards.shape[1]
        m = cfg.minibatch_envs or b
        if b % m:
            raise ValueError(
                f"a rollout of {b} envs does not split into minibatches of learner.minibatch_envs={m}: make "
                "rollout.num_envs a multiple of it"
            )
        total = b // m * cfg.ppo_epochs if limit is None else min(b // m * cfg.ppo_epochs, limit)
        n = min(b // m, total)  # the minibatches the first pass reaches
        if n < 1:
            return []
        if n == 1 and m == b:
            local = flat = [host.valid_idx]
        else:  # minibatch c's valid steps, t-major within it: the mask seen as [c, t, env] picks from two templates
            local, flat = self._indices(host.valid, n, m)
        if before_copy is not None:
            before_copy()
        # the columns alone: valid_idx stays where it was made (pageable memory; a copy from there may wait)
        cols = {k: getattr(host, k).to(self.device, non_blocking=True) for k in BATCH_DTYPES}
        if self.device.type != "cpu":
            sizes = [int(i.numel()) for i in local]
            both = torch.cat([*local, *flat]).pin_memory().to(self.device, non_blocking=True).split(sizes * 2)
            local, flat = list(both[:n]), list(both[n:])
        if after_copy is not None:
            after_copy()
        # n-step returns of the whole rollout at once (elementwise per env: each minibatch gets its own columns)
        whole = Rollout(**cols, valid_idx=local[0], policy_version=host.policy_version)  # valid_idx: not read here
        returns = nstep_returns(whole, cfg.gamma, cfg.n_step, cfg.reward_scale)
        parts = [
            Rollout(
                **{k: v[:, c * m : (c + 1) * m] for k, v in cols.items()},
                valid_idx=local[c],
                policy_version=host.policy_version,
            )
            for c in range(n)
        ]
        out = []
        for i in range(total):
            c = i % n
            # first pass: the minibatch's valid steps go from the rollout straight into the ring (one kernel on
            # CUDA); later passes train on the same minibatch again and add nothing
            add = functools.partial(self.replay.add_rows, whole, returns, flat[c]) if i < n else _nothing
            out.append((parts[c], add))
        return out

    def _indices(self, valid: torch.Tensor, n: int, m: int) -> tuple[list, list]:
        """(local, flat): per minibatch c < n of m envs, its valid steps' rows t * m + j within it and t * B + c*m + j
        in the rollout, t-major. The mask as [c, t, j] selects from two index templates of the rollout's shape
        (made once): a numpy boolean selection, several times faster than a nonzero and index arithmetic per
        payload on the learner's host thread (BENCHMARKS.md, "The system on one GPU host")."""
        t_len, b = valid.shape
        key = (t_len, b, m, n)
        if self._index_templates[0] != key:
            t, j = np.divmod(np.arange(t_len * m, dtype=np.int64), m)
            c = np.arange(n, dtype=np.int64)[:, None]
            self._index_templates = (key, np.tile(t * m + j, n), (t * b + c * m + j).reshape(-1))
        _, local_t, flat_t = self._index_templates
        mask = np.ascontiguousarray(valid.numpy().reshape(t_len, b // m, m)[:, :n].transpose(1, 0, 2)).reshape(-1)
        counts = mask.reshape(n, -1).sum(1).tolist()
        local = torch.from_numpy(local_t[mask]).split(counts)
        flat = torch.from_numpy(flat_t[mask]).split(counts)
        return list(local), list(flat)


# ---------------------------------------------------------------------------------------- the diag hand-off


@dataclasses.dataclass(kw_only=True)
class Pending:
    """A learner step whose diag values are still on the device (Learner.start_updates / finish_updates)."""

    keys: list[str]
    values: torch.Tensor
    """The diag values in keys' order, then the healthy flag."""
    step: int
    policy_version: int
    transitions: int
    replay_size: int
    q_trained: bool
    lr_scale: float = 1.0
    graph_events: tuple | None = None
    """CUDA events around this step's graph replay (GraphUpdate.timed), for its device time."""


def diag_values_to_host(pendings: list[Pending]) -> torch.Tensor:
    """The queued steps' diag values gathered and copied to pinned host memory, queued on the current stream
    after those steps (no sync): once the stream has passed this point (an event recorded after it), the
    tensor holds them and `diag_values(pendings, host_values)` reads them without waiting for any step queued
    later. A plain read (`diag_values` without it) is a copy queued behind every step queued so far, so it
    waits for all of them."""
    values = torch.cat([p.values for p in pendings])
    out = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
    return out.copy_(values, non_blocking=True)


def diag_values(pendings: list[Pending], host_values: torch.Tensor | None = None) -> list[list[float]]:
    """Each queued step's values (healthy flag last), read with one device sync; or, with `host_values` (the
    pendings' `diag_values_to_host`, whose copy the caller knows to have landed), with none."""
    if not pendings:
        return []
    values = (torch.cat([p.values for p in pendings]) if host_values is None else host_values).tolist()
    out, at = [], 0
    for p in pendings:
        n = p.values.numel()
        out.append(values[at : at + n])
        at += n
    return out


def diag_dict(p: Pending, values: list[float], nan_abort_step: int) -> tuple[dict[str, float], int]:
    """(the diag dict of step p from its values (healthy flag last), the learner's nan_abort_step after it): a step
    that was not applied is the first such step unless one came before (sticky)."""
    values = list(values)
    if values.pop() < 0.5 and nan_abort_step == 0:
        nan_abort_step = p.step
    result = dict(zip(p.keys, values, strict=True))
    result.setdefault(D.V_DQ_MEAN, 0.0)
    result.setdefault(D.grad_norm_key("dueling"), 0.0)
    result[D.STEP] = float(p.step)
    result[D.NAN_ABORT_STEP] = float(nan_abort_step)
    result[D.POLICY_LAG] = float(p.step - 1 - p.policy_version)
    result[D.REPLAY_SIZE] = float(p.replay_size)
    result[D.TRANSITIONS] = float(p.transitions)
    result[D.Q_TRAINED] = float(p.q_trained)
    result[D.LR_SCALE] = float(p.lr_scale)
    return result, nan_abort_step

"""The Learner: one plain class, no Ray. update(rollout) -> diag dict; reads top to bottom (CleanRL style).

Per update: validate the rollout, add its n-step transitions to replay, then one optimiser step of
  - on the rollout (on-policy): PPO clipped surrogate on GAE advantages + entropy bonus, Q->pi distillation
    KL(softmax(q_ens/T) || pi) with q_ens detached, V_scalar MSE to the GAE returns;
  - on a replay sample (off-policy): C51 cross-entropy to the double-DQN projected target, IQN quantile Huber;
  - the DuelingQHead's own Huber Bellman loss on a detached h, with its own Adam and its own clipping;
then Polyak-update both target copies. The dueling head is fully encapsulated: in "diagnostic" mode the
main network trains to bit-identical parameters as with no dueling head at all (tests/test_pearls.py).

The seed's failed designs run here too, as ablations (LearnerConfig.c51_scalar_v, iqn_dueling, iqn_baseline;
foxhunt_ray/presets.py): they change what MainNet's heads hand their consumers and which V is the GAE baseline,
nothing else; off, every path below is Plan A v2's, op for op (tests/test_ablations.py).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from learner import diag as D
from learner import graph as G
from learner import losses as L
from learner import ops
from learner.config import CHECKPOINT_FORMAT, NO_FAULTS, FaultInjection, LearnerConfig, config_differences
from learner.network import (
    DuelingQHead,
    MainNet,
    flatten_parameters_,
    group_slices,
    main_net,
    obs_norm_problem,
)
from learner.replay import (
    BATCH_DTYPES,
    OnPolicyQueue,
    ReplayBuffer,
    Rollout,
    nstep_returns,
    nstep_transitions,
    rollout_from_batch,
)

_DUELING_SEED_OFFSET = 0x5EED  # the dueling head's own generator: seeded apart from the main net's RNG
V_IQN_MEAN = "v_iqn_mean"
"""Diag key (iqn_baseline on): mean V_IQN over the rollout's valid states, beside v_scalar_mean (its scale)."""
BASELINE_ALPHA = "baseline_alpha"
"""Diag key (iqn_baseline='blend'): this step's alpha in alpha*V_scalar + (1-alpha)*V_IQN."""


def _nothing() -> None:
    """What a later pass over a rollout writes into replay (LearnerConfig.ppo_epochs): nothing."""


class _Trainable:
    """A network's flat parameters, flat gradients, Adam and target copy, stepped as one unit."""

    def __init__(
        self, net: torch.nn.Module, lr: float, eps: float, clip: float, capturable: bool = False, decays: bool = False
    ):
        target = copy.deepcopy(net).requires_grad_(False)
        self.net, self.target, self.clip, self.capturable = net, target, clip, capturable
        self.flat, self.grad = flatten_parameters_(net)
        self.target_flat, _ = flatten_parameters_(target)
        self.target_flat.requires_grad_(False)
        self.base_lr = lr
        # a decaying lr in a CUDA graph is a device tensor the captured Adam step reads at each replay
        self.lr: float | torch.Tensor = (
            torch.tensor(lr, dtype=torch.float32, device=self.flat.device) if decays and capturable else lr
        )
        # fused on CUDA: the whole Adam step of a flat buffer is one kernel; capturable keeps its step
        # count on the device, so a CUDA graph can replay it
        self.opt = torch.optim.Adam(
            [self.flat], lr=self.lr, eps=eps, fused=self.flat.is_cuda or None, capturable=capturable
        )
        self._lr_device: torch.Tensor | None = None  # lr_tensor's, made on its first call
        self._lr_device_value: float | None = None

    def set_lr_scale(self, scale: float) -> None:
        """Adam's lr := base_lr * scale from the next step on (in place when a captured graph reads it)."""
        lr = self.base_lr * scale
        if torch.is_tensor(self.lr):
            self.lr.fill_(lr)
        else:
            self.lr = lr
        for group in self.opt.param_groups:
            group["lr"] = self.lr

    def snapshot(self) -> tuple[torch.Tensor, dict]:
        """Parameters and Adam state before a step, so a step that ends non-finite can be undone."""
        state = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in self.opt.state[self.flat].items()}
        return self.flat.detach().clone(), state

    def restore(self, snap: tuple[torch.Tensor, dict]) -> None:
        flat, state = snap
        with torch.no_grad():
            self.flat.copy_(flat)
        if state:
            for k, v in state.items():
                cur = self.opt.state[self.flat][k]
                cur.copy_(v) if torch.is_tensor(cur) else self.opt.state[self.flat].__setitem__(k, v)
        else:
            self.opt.state.pop(self.flat, None)

    def adam_state(self) -> dict[str, torch.Tensor]:
        """Adam's step, exp_avg and exp_avg_sq for the flat buffer, made as torch.optim.Adam makes them on its first
        step (zeros; the step count a float32 scalar on the device when capturable or fused) if it has none yet:
        the state ops.guarded_adam_ steps in place, which checkpoints and torch's own step then carry on."""
        state = self.opt.state[self.flat]
        if not state:
            group = self.opt.param_groups[0]
            on_device = group["capturable"] or group["fused"]
            state["step"] = (
                torch.zeros((), dtype=torch.float32, device=self.flat.device) if on_device else torch.tensor(0.0)
            )
            state["exp_avg"] = torch.zeros_like(self.flat, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(self.flat, memory_format=torch.preserve_format)
        return state

    def lr_tensor(self) -> torch.Tensor:
        """The learning rate as a float32 scalar on the device (ops.guarded_adam_ reads it there): the tensor a
        captured graph reads when the lr decays, else one kept in step with the float (made on the first call, which
        is eager: a graph's warm-up)."""
        lr = self.opt.param_groups[0]["lr"]  # what torch's Adam would read (set_lr_scale sets it)
        if torch.is_tensor(lr):
            return lr
        if self._lr_device is None:
            self._lr_device = torch.tensor(lr, dtype=torch.float64, device=self.flat.device)  # the float, exactly
        elif self._lr_device_value != lr:
            self._lr_device.fill_(lr)
        self._lr_device_value = lr
        return self._lr_device

    def _adam_tensors(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.opt.state.get(self.flat, {}).items() if torch.is_tensor(v)}

    @torch.no_grad()
    def device_snapshot(self) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """Parameters, target and Adam state before a step, for `restore_unless` (the device guard's snapshot)."""
        state = {k: v.clone() for k, v in self._adam_tensors().items()}
        return self.flat.detach().clone(), self.target_flat.clone(), state

    @torch.no_grad()
    def restore_unless(self, healthy: torch.Tensor, snap) -> None:
        """Where not healthy, put back parameters, target and Adam state (written in place: a graph replays it)."""
        flat, target, state = snap
        torch.where(healthy, self.flat.detach(), flat, out=self.flat.detach())
        torch.where(healthy, self.target_flat, target, out=self.target_flat)
        for k, v in self._adam_tensors().items():
            # No snapshot of a key means Adam had no state yet: its zero initial state is "not stepped".
            before = state[k] if k in state else torch.zeros_like(v)
            torch.where(healthy, v, before, out=v)

    def state_dict(self) -> dict:
        return {
            "flat": self.flat.detach().cpu().clone(),
            "target_flat": self.target_flat.detach().cpu().clone(),
            "opt": self.opt.state_dict(),
        }

    def load_state_dict(self, state: dict, what: str) -> None:
        for key in ("flat", "target_flat"):
            if tuple(state[key].shape) != tuple(self.flat.shape):
                raise ValueError(
                    f"checkpoint {what}.{key} has {tuple(state[key].shape)} parameters, this "
                    f"learner has {tuple(self.flat.shape)}: sizes in the config differ"
                )
        with torch.no_grad():
            self.flat.copy_(state["flat"])
            self.target_flat.copy_(state["target_flat"])
        self.opt.load_state_dict(state["opt"])
        for group in self.opt.param_groups:  # ours (the tensor a graph reads, or the float): set_progress sets it
            group["lr"] = self.lr
        if self.capturable:  # the checkpoint's param group (perhaps from a CPU learner) replaced ours
            for group in self.opt.param_groups:
                group["capturable"] = True
            st = self.opt.state.get(self.flat, {})
            if torch.is_tensor(st.get("step")):
                st["step"] = st["step"].to(self.flat.device, torch.float32)


@dataclasses.dataclass(kw_only=True)
class _Pending:
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


class Learner:
    """Builds the network, replay and optimisers from `cfg`; `update(batch)` runs one learner step."""

    def __init__(
        self,
        cfg: LearnerConfig,
        *,
        obs_dim: int,
        n_actions: int,
        device: str | torch.device = "cpu",
        seed: int = 0,
        faults: FaultInjection = NO_FAULTS,
        obs_mean: Sequence[float] | np.ndarray | None = None,
        obs_std: Sequence[float] | np.ndarray | None = None,
    ):
        """faults: test-only faults to make on purpose (learner.config.FaultInjection), not part of cfg.
        obs_mean, obs_std: the observation's per-column statistics the encoder standardises by when
        cfg.obs_norm is "probe" (actors.envs.EnvSpaces, from probe_env); ignored when it is "off"."""
        errs = cfg.errors() + faults.errors()
        if cfg.obs_norm != "off" and (obs_mean is None or obs_std is None):
            errs.append(
                f"learner.obs_norm={cfg.obs_norm!r} standardises the observation by its probed statistics: pass "
                "obs_mean= and obs_std= (actors.envs.probe_env's EnvSpaces has them), or set learner.obs_norm='off'"
            )
        for name, v, lo in (("obs_dim", obs_dim, 1), ("n_actions", n_actions, 2), ("seed", seed, 0)):
            # numpy integers are welcome (gymnasium's Discrete.n is numpy's int64); bools and floats are not
            if not isinstance(v, numbers.Integral) or isinstance(v, bool | np.bool_) or v < lo:
                errs.append(f"{name}={v!r} must be an int >= {lo}")
        if errs:
            raise ValueError("cannot build Learner:\n  " + "\n  ".join(errs))
        obs_dim, n_actions, seed = int(obs_dim), int(n_actions), int(seed)
        self.cfg, self.obs_dim, self.n_actions, self.faults = cfg, obs_dim, n_actions, faults
        self.device = torch.device(device)
        on_cuda = self.device.type == "cuda"
        graphed = cfg.cuda_graph and on_cuda
        # The main net is built from its own seeded stream; the caller's global RNG is left as it was.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            net = main_net(cfg, obs_dim, n_actions)
        if cfg.obs_norm != "off":  # before the target copy is made: both standardise alike
            try:
                net.encoder.set_obs_norm_(obs_mean, obs_std)
            except ValueError as err:
                raise ValueError(f"cannot build Learner:\n  learner.obs_norm={cfg.obs_norm!r}: {err}") from None
        decays = cfg.lr_decay_to < 1
        self.lr_scale = 1.0
        self.main = _Trainable(net.to(self.device), cfg.lr, cfg.adam_eps, cfg.grad_clip, graphed, decays)
        self.net: MainNet = self.main.net
        self.groups = group_slices(self.net, self.net.groups)
        self.dueling: _Trainable | None = None
        if cfg.dueling_mode != "off":
            head = DuelingQHead(cfg.hidden_dim, n_actions, seed=seed + _DUELING_SEED_OFFSET)
            self.dueling = _Trainable(
                head.to(self.device), cfg.dueling_lr, cfg.adam_eps, cfg.dueling_grad_clip, graphed, decays
            )
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.n_atoms, device=self.device)
        # _main_loss's weights of (l_pi, entropy, l_distill, l_v, l_c51, l_iqn)
        weights = (1.0, -cfg.entropy_coef, cfg.distill_coef, cfg.value_coef, cfg.c51_coef, cfg.iqn_coef)
        self.loss_weights = torch.tensor(weights, device=self.device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)  # IQN tau samples
        # Phase 3.2c's alpha of this step, a device tensor written before each update (a CUDA graph reads it)
        self.baseline_alpha = torch.ones((), device=self.device)
        self.replay = ReplayBuffer(cfg.replay_capacity, obs_dim, self.device, seed + 1)
        self._index_templates: tuple = (None, None, None)  # _minibatch_indices' (shape key, local, flat)
        self.queue = OnPolicyQueue()
        self.step = 0
        self.nan_abort_step = 0
        # On CUDA the NaN guard runs on the device (no host sync before the diag's); on CPU a sync is free and
        # the host-side guard skips the wasted step. Tests set these to compare the paths on CPU.
        self.device_guard = on_cuda
        # The device guard as one op (ops.guarded_adam_: three launches a network) or as the composition of torch
        # ops in _guarded_step: None (the default) takes the op where the ops run their CUDA kernels; tests set
        # True or False to compare the two on CPU.
        self.fused_guard: bool | None = None
        self.graph: G.GraphUpdate | None = G.GraphUpdate(self, capture=True) if graphed else None

    # ------------------------------------------------------------------ update
    def set_progress(self, fraction: float) -> None:
        """The run's progress in [0, 1] (the driver's: steps done, or time budget spent): lr and dueling_lr from
        the next step on are scaled by 1 - (1 - lr_decay_to) * fraction. A no-op at lr_decay_to = 1."""
        if self.cfg.lr_decay_to >= 1:
            return
        fraction = min(max(float(fraction), 0.0), 1.0)
        self.lr_scale = 1.0 - (1.0 - self.cfg.lr_decay_to) * fraction
        for p in (self.main, self.dueling):
            if p is not None:
                p.set_lr_scale(self.lr_scale)

    def update(self, batch: dict) -> dict[str, float]:
        """One learner step on `batch` (a rollout, see learner.replay); returns the diag dict."""
        cfg = self.cfg
        # Validation and n-step returns run where the batch arrives (the host, for numpy batches): a few
        # dozen tiny [T, B] ops are cheaper there than as kernel launches.
        host = rollout_from_batch(batch, obs_dim=self.obs_dim, n_actions=self.n_actions)
        nstep = nstep_transitions(host, cfg.gamma, cfg.n_step, cfg.reward_scale)
        transitions = {k: v.to(self.device, non_blocking=True) for k, v in nstep.items()}
        pending = self._step(host, lambda: self.replay.add(transitions))
        return self._finish(pending, pending.values.tolist())  # one device sync

    def updates(self, batch: dict) -> list[dict[str, float]]:
        """`cfg.minibatch_envs` splits the rollout's B envs into minibatches, one learner step each, in order;
        exactly what `update` on each minibatch in turn computes (tests/test_learner.py), `cfg.ppo_epochs` passes
        over them. Returns their diags."""
        host = rollout_from_batch(batch, obs_dim=self.obs_dim, n_actions=self.n_actions)
        return self.finish_updates(self.start_updates(host))

    def start_updates(
        self,
        host: Rollout,
        *,
        limit: int | None = None,
        before_copy: Callable[[], None] | None = None,
        after_copy: Callable[[], None] | None = None,
    ) -> list[_Pending]:
        """Queues the minibatch steps of a validated rollout (at most `limit` of them) without a host sync: the
        rollout goes to the device in one copy (asynchronous when its tensors are pinned), each minibatch is a
        view of it, and its n-step returns are computed there. `cfg.ppo_epochs` passes over the minibatches, in
        the same order; only the first writes them into replay. `finish_updates` reads the diags.

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
            local, flat = self._minibatch_indices(host.valid, n, m)
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
        pendings = []
        for i in range(total):
            c = i % n
            # first pass: the minibatch's valid steps go from the rollout straight into the ring (one kernel on
            # CUDA); later passes train on the same minibatch again and add nothing
            add = functools.partial(self.replay.add_rows, whole, returns, flat[c]) if i < n else _nothing
            pendings.append(self._step(parts[c], add))
        return pendings

    def _minibatch_indices(self, valid: torch.Tensor, n: int, m: int) -> tuple[list, list]:
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

    @staticmethod
    def diag_values_to_host(pendings: list[_Pending]) -> torch.Tensor:
        """The queued steps' diag values gathered and copied to pinned host memory, queued on the current stream
        after those steps (no sync): once the stream has passed this point (an event recorded after it), the
        tensor holds them and `finish_updates(pendings, host_values=...)` reads them without waiting for any
        step queued later. A plain read (`finish_updates` without it) is a copy queued behind every step queued
        so far, so it waits for all of them."""
        values = torch.cat([p.values for p in pendings])
        out = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
        return out.copy_(values, non_blocking=True)

    def finish_updates(
        self, pendings: list[_Pending], host_values: torch.Tensor | None = None
    ) -> list[dict[str, float]]:
        """The diags of queued steps, in order, after one device sync; or, with `host_values` (the pendings'
        `diag_values_to_host`, whose copy the caller knows to have landed), with none."""
        if not pendings:
            return []
        values = (torch.cat([p.values for p in pendings]) if host_values is None else host_values).tolist()
        out, at = [], 0
        for p in pendings:
            n = p.values.numel()
            out.append(self._finish(p, values[at : at + n]))
            at += n
        return out

    def _step(self, host: Rollout, add_to_replay: Callable[[], None]) -> _Pending:
        """One learner step: `add_to_replay()` writes its n-step transitions into replay, then the update; its diag
        values stay on the device (a _Pending) until `_finish` reads them."""
        if self.device.type != "cuda":
            return self._step_body(host, add_to_replay)
        # cfg.matmul_precision for this step's matmuls (and the kernels a CUDA graph captures), then the
        # caller's setting back: the flag is process-wide
        before = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.cfg.matmul_precision)
        try:
            return self._step_body(host, add_to_replay)
        finally:
            torch.set_float32_matmul_precision(before)

    def _step_body(self, host: Rollout, add_to_replay: Callable[[], None]) -> _Pending:
        cfg = self.cfg
        add_to_replay()
        q_trained = len(self.replay) >= cfg.replay_min_size
        if self.graph is not None and q_trained and not self.queue:
            ro = host  # the queue is empty: what it would pop is this rollout, copied straight into the graph
        else:
            # non_blocking: a pageable source is staged before the call returns, so no stream sync is needed
            self.queue.push(host.to(self.device, non_blocking=True))
            ro = self.queue.pop()
        self.step += 1
        meta = dict(
            step=self.step,
            policy_version=ro.policy_version,
            transitions=int(ro.valid_idx.numel()),
            replay_size=len(self.replay),
            q_trained=q_trained,
            lr_scale=self.lr_scale,
        )
        if cfg.iqn_baseline == "blend":
            self.baseline_alpha.fill_(L.blend_alpha(self.step, cfg.alpha_start_step, cfg.alpha_end_step))
        if self.graph is not None and q_trained:
            self.graph.last_events = None
            keys, stacked = self.graph.run(ro, inject_nan=self.faults.inject_nan_at == self.step)
            # the graph's output buffer is overwritten by its next replay: a copy of this step's values
            return _Pending(keys=keys, values=stacked.clone(), graph_events=self.graph.last_events, **meta)
        out: dict[str, torch.Tensor] = {}

        sample = self.replay.sample(cfg.q_batch_size) if q_trained else None
        h_all, h_q = self._encode(ro.obs, None if sample is None else sample["obs"])
        l_pi, ent, l_distill, l_v = self._policy_losses(ro.to_dict(), out, h_all=h_all)
        zero = torch.zeros((), device=self.device)
        l_c51 = l_iqn = l_dueling = zero
        if sample is not None:
            l_c51, l_iqn, l_dueling = self._q_losses(sample, h=h_q)
        loss = self._main_loss(out, l_pi, ent, l_distill, l_v, l_c51, l_iqn, l_dueling)
        if self.faults.inject_nan_at == self.step:  # test-only fault: exercises the guard in _apply end to end
            loss = loss * float("nan")
        if self.device_guard:
            healthy = self._guarded_step(loss, l_dueling if q_trained else None, out)
        else:
            healthy = torch.tensor(self._apply(loss, l_dueling if q_trained else None, out), device=self.device)

        keys = list(out)
        stacked = torch.stack([*(out[k].detach().float().reshape(()) for k in keys), healthy.float()])
        return _Pending(keys=keys, values=stacked, **meta)

    def graph_body(
        self,
        ro: Mapping[str, torch.Tensor],
        idx: torch.Tensor,
        tau_next: torch.Tensor,
        tau: torch.Tensor,
        loss_scale: torch.Tensor,
    ) -> tuple[list[str], torch.Tensor]:
        """The device side of a steady-state update (replay sampled, Q losses on) from fixed-shape inputs: the
        rollout `ro`, the replay indices `idx`, the IQN taus and a loss scale (NaN injects the test fault). What
        learner.graph.GraphUpdate captures once per rollout shape and replays (capture=False: runs it eagerly).
        No host sync, no data-dependent shape: replay gather, one encoder pass, on-policy losses, Q losses, main
        loss, the device guard's step, and the diag stack. Returns (keys, values[len(keys)+1]) with the healthy flag
        last."""
        out: dict[str, torch.Tensor] = {}
        sample = {k: v[idx] for k, v in self.replay.data.items()}
        h_all, h_q = self._encode(ro["obs"], sample["obs"])  # the eager path's own code from here on
        l_pi, ent, l_distill, l_v = self._policy_losses(ro, out, h_all=h_all)
        l_c51, l_iqn, l_dueling = self._q_losses(sample, tau_next=tau_next, tau=tau, h=h_q)
        loss = self._main_loss(out, l_pi, ent, l_distill, l_v, l_c51, l_iqn, l_dueling) * loss_scale
        healthy = self._guarded_step(loss, l_dueling, out)
        keys = list(out)
        values = torch.stack([*(out[k].detach().float().reshape(()) for k in keys), healthy.float()])
        return keys, values

    def _main_loss(self, out: dict, l_pi, ent, l_distill, l_v, l_c51, l_iqn, l_dueling) -> torch.Tensor:
        """Records every loss in `out` and returns the main network's loss (the dueling loss stays apart: it
        has its own backward target, its own Adam and its own clipping)."""
        out.update({D.L_C51: l_c51, D.L_IQN: l_iqn, D.L_PI: l_pi, D.L_V: l_v, D.L_DISTILL: l_distill})
        out.update({D.L_DUELING: l_dueling, D.ENTROPY: ent})
        # l_pi - entropy_coef * ent + distill_coef * l_distill + value_coef * l_v + c51_coef * l_c51 + iqn_coef *
        # l_iqn as one dot product: 2 kernels forward and 1 backward where the sum's terms were 10 and 5 on CUDA.
        # Each loss's gradient is its weight exactly, as before; the sum itself (only checked for finiteness)
        # may round differently.
        return torch.dot(torch.stack([l_pi, ent, l_distill, l_v, l_c51, l_iqn]), self.loss_weights)

    def _finish(self, p: _Pending, values: list[float]) -> dict[str, float]:
        """The diag dict of step p from its values (healthy flag last); records a step that was not applied."""
        values = list(values)
        if values.pop() < 0.5 and self.nan_abort_step == 0:
            self.nan_abort_step = p.step
        result = dict(zip(p.keys, values, strict=True))
        result.setdefault(D.V_DQ_MEAN, 0.0)
        result.setdefault(D.grad_norm_key("dueling"), 0.0)
        result[D.STEP] = float(p.step)
        result[D.NAN_ABORT_STEP] = float(self.nan_abort_step)
        result[D.POLICY_LAG] = float(p.step - 1 - p.policy_version)
        result[D.REPLAY_SIZE] = float(p.replay_size)
        result[D.TRANSITIONS] = float(p.transitions)
        result[D.Q_TRAINED] = float(p.q_trained)
        result[D.LR_SCALE] = float(p.lr_scale)
        return result

    def _encode(self, ro_obs: torch.Tensor, q_obs: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(h of the rollout's states [(T+1)B, H], h of the replay sample's [n, H] or None) from one pass of the
        online encoder over both: its two layers' GEMMs, ReLUs and backward (and the sum of the two passes'
        weight gradients) launch once a step instead of twice. Row for row the same encoder; only the order in
        which the weight gradient sums its rows differs. Split, not sliced: the backward then joins the two parts'
        gradients with one concatenation, where two slices would each zero a gradient of h's full size, copy their
        part in and add the two."""
        x = ro_obs.reshape(-1, self.obs_dim)
        if q_obs is None:
            return self.net.encoder(x), None
        h_all, h_q = self.net.encoder(torch.cat([x, q_obs])).split([x.shape[0], q_obs.shape[0]])
        return h_all, h_q

    def _policy_losses(
        self, ro: Mapping[str, torch.Tensor], out: dict, h_all: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """(l_pi, entropy, l_distill, l_v) on the rollout's valid steps; GAE baseline per dueling_mode and
        iqn_baseline (_gae_baseline).

        `ro` holds the rollout's columns by name (Rollout.to_dict(), or the CUDA graph's static buffers).
        Every loss and diag mean runs over all T*B rows with the valid mask as row mask, never indexing the
        valid rows, whose count changes per rollout: every shape is then fixed by (T, B), so the eager path
        and the captured graph run this same code. Invalid rows get action 0 and a behaviour log-prob equal
        to pi's own (ratio exactly 1), so nothing computed on them can overflow: the mask passes them a
        zero gradient, but 0 * inf would still be NaN.
        """
        cfg = self.cfg
        t_len, b = ro["rewards"].shape
        tb = t_len * b
        valid = ro["valid"].reshape(-1)  # False on autoreset steps: not transitions
        if h_all is None:  # [(T+1)B, H]: s_t for t = 0..T
            h_all = self.net.encoder(ro["obs"].reshape(-1, self.obs_dim))
        h_t = h_all[:tb]
        # pi on all (T+1)B rows and its first TB taken, not pi on h_all[:TB]: the backward of a slice of h would zero
        # a gradient of h's size [(T+1)B, H] and copy its part in; a slice of the logits does so at [(T+1)B, N]
        logits_all, v_all = self.net.pi_value(h_all)
        logits = logits_all[:tb]
        with torch.no_grad():
            q_ens = self.net.q_ens(h_t, self.support, cfg.ensemble_w, cfg.iqn_taus)
            baseline = self._gae_baseline(h_all, v_all, valid, out)
            adv, ret = L.gae(
                ro["rewards"] * cfg.reward_scale,
                baseline[:tb].view(t_len, b),
                baseline[b:].view(t_len, b),
                ro["terminated"],
                ro["terminated"] | ro["truncated"],
                cfg.gamma,
                cfg.gae_lambda,
            )
        p = L.policy_losses(
            logits,
            q_ens,
            v_all[:tb],
            ret.reshape(-1),
            adv.reshape(-1),
            ro["actions"].reshape(-1),
            ro["behaviour_logp"].reshape(-1),
            valid,
            clip=cfg.ppo_clip,
            temperature=cfg.distill_temperature,
            normalize=cfg.normalize_advantages,
            flip_distill=self.faults.flip_distill_sign,
        )
        out[D.ADV_MEAN], out[D.APPROX_KL], out[D.CLIP_FRAC] = p.adv_mean, p.approx_kl, p.clip_frac
        out[D.QPA], out[D.V_SCALAR_MEAN], out[D.Q_ENS_MEAN] = p.qpa, p.v_mean, p.q_mean
        return p.l_pi, p.entropy, p.l_distill, p.l_v

    def _gae_baseline(self, h_all: torch.Tensor, v_all: torch.Tensor, valid: torch.Tensor, out: dict) -> torch.Tensor:
        """V at s_t for t = 0..T, [(T+1)B] (no grad): V_scalar (Plan A v2), V_dq (Phase 4.3), V_IQN (Phase 3.2)
        or alpha*V_scalar + (1-alpha)*V_IQN (Phase 3.2c; alpha = 1 gives V_scalar bit for bit)."""
        cfg, tb = self.cfg, valid.shape[0]
        baseline = v_all
        if self.dueling is not None:
            v_dq_all = self.dueling.net(h_all.detach())[0]
            out[D.V_DQ_MEAN] = L.masked_mean(v_dq_all[:tb], valid)
            if cfg.dueling_mode == "baseline":  # Phase 4.3: V_dq and V_dq(s_{t+1}) are the GAE baseline
                baseline = v_dq_all
        if cfg.iqn_baseline != "off":
            v_iqn_all = self.net.v_iqn(h_all, cfg.iqn_taus)
            out[V_IQN_MEAN] = L.masked_mean(v_iqn_all[:tb], valid)
            if cfg.iqn_baseline == "v_iqn":
                baseline = v_iqn_all
            else:
                alpha = self.baseline_alpha
                baseline = alpha * v_all + (1.0 - alpha) * v_iqn_all
                out[BASELINE_ALPHA] = alpha
        return baseline

    def _parts(self) -> list[_Trainable]:
        return [self.main] if self.dueling is None else [self.main, self.dueling]

    def _backward(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
        """ONE backward (_backprop), then the grad norms; returns healthy (bool [], on the device):
        the losses and gradients are all finite. Both guards (host: _apply, device: _guarded_step) use it.

        h is detached before the dueling head, so the two graphs are disjoint and one backward of
        loss + l_dueling gives every gradient bit-identically to two (tests/test_graph.py): the dueling loss
        cannot touch a main-net gradient.
        """
        parts = self._backprop(loss, l_dueling)
        for name, sl in self.groups.items():
            out[D.grad_norm_key(name)] = self.main.grad[sl].norm()
        out[D.grad_norm_key("total")] = self.main.grad.norm()
        if self.dueling is not None:
            out[D.grad_norm_key("dueling")] = self.dueling.grad.norm()
        healthy = torch.isfinite(loss)
        if l_dueling is not None:
            healthy = healthy & torch.isfinite(l_dueling)
        for p in parts:
            healthy = healthy & torch.isfinite(p.grad).all()
        return healthy

    def _backprop(self, loss: torch.Tensor, l_dueling: torch.Tensor | None) -> list[_Trainable]:
        """ONE backward of loss (+ l_dueling): every part's flat gradient := the gradient of that sum by its
        parameters (zeros where the sum does not reach them); returns the parts. One autograd.grad and one
        concatenation into each flat buffer: backward() into the .grad views would zero each buffer, then add into
        it once per parameter tensor (about 20 kernels a step on CUDA)."""
        parts = self._parts()
        duel = l_dueling is not None and self.dueling is not None
        leaves = [list(p.net.parameters()) for p in parts]
        grads = torch.autograd.grad(
            loss + l_dueling if duel else loss,
            [q for ps in leaves for q in ps],
            allow_unused=True,
            materialize_grads=True,
        )
        start = 0
        for p, ps in zip(parts, leaves, strict=True):
            torch.cat([g.reshape(-1) for g in grads[start : start + len(ps)]], out=p.grad)
            start += len(ps)
        return parts

    def _clip_and_step(self) -> None:
        for p in self._parts():  # each network is clipped on its own norm: a global norm would couple them
            torch.nn.utils.clip_grad_norm_([p.flat], p.clip)
            p.opt.step()

    def _apply(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> bool:
        """Host guard: backward, then skip (changing nothing) unless finite; clip, Adam, undo if the new
        parameters are not finite, Polyak. Returns whether the step was applied. On CPU a sync is free and
        skipping saves the wasted step; the device guard (_guarded_step) always steps and undoes."""
        parts = self._parts()
        if not bool(self._backward(loss, l_dueling, out)):
            return False
        snaps = [p.snapshot() for p in parts]
        self._clip_and_step()
        if not all(bool(torch.isfinite(p.flat).all()) for p in parts):
            for p, snap in zip(parts, snaps, strict=True):
                p.restore(snap)
            return False
        for p in parts:
            ops.soft_update_(p.target_flat.detach(), p.flat.detach(), self.cfg.polyak_tau)
        return True

    def _guarded_step(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
        """Device guard: backward, then ALWAYS clip, Adam, Polyak, and undo it all on the device with torch.where
        unless the losses, gradients and new parameters are finite. Returns healthy (bool [], on the device).

        The backward (and grad norms, and the pre-step healthy flag) is the host guard's, _backward; only the
        policy differs: the host guard (_apply) syncs and skips, this one never syncs, so a graph can capture it.
        """
        if self.fused_guard if self.fused_guard is not None else ops.uses_kernels(loss):
            return self._fused_guarded_step(loss, l_dueling, out)
        parts = self._parts()
        healthy = self._backward(loss, l_dueling, out)
        snaps = [p.device_snapshot() for p in parts]
        self._clip_and_step()
        for p in parts:
            healthy = healthy & torch.isfinite(p.flat).all()
        for p in parts:
            ops.soft_update_(p.target_flat.detach(), p.flat.detach(), self.cfg.polyak_tau)
        for p, snap in zip(parts, snaps, strict=True):
            p.restore_unless(healthy, snap)
        return healthy

    def _fused_guarded_step(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
        """_guarded_step as one op, ops.guarded_adam_ (the same grad norms in `out`, the same healthy flag, the same
        parameters, Adam state and targets afterwards; tests/test_graph.py, composed_vs_fused, compares them)."""
        parts = self._backprop(loss, l_dueling)
        checks = [loss.detach()] + ([l_dueling.detach()] if l_dueling is not None else [])
        group = self.main.opt.param_groups[0]
        states = [p.adam_state() for p in parts]
        stats, healthy = ops.guarded_adam_(
            [p.flat.detach() for p in parts],
            [p.grad for p in parts],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [s["step"] for s in states],
            [p.target_flat for p in parts],
            [p.lr_tensor() for p in parts],
            checks,
            [sl.stop for sl in self.groups.values()],
            [p.clip for p in parts],
            beta1=group["betas"][0],
            beta2=group["betas"][1],
            eps=group["eps"],
            tau=self.cfg.polyak_tau,
        )
        g = len(self.groups)
        for i, name in enumerate(self.groups):
            out[D.grad_norm_key(name)] = stats[i]
        out[D.grad_norm_key("total")] = stats[g]
        if self.dueling is not None:
            out[D.grad_norm_key("dueling")] = stats[g + 3]
        return healthy

    def _q_losses(
        self,
        s: dict[str, torch.Tensor],
        tau_next: torch.Tensor | None = None,
        tau: torch.Tensor | None = None,
        h: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(l_c51, l_iqn, l_dueling) on replay sample `s`; targets from the target nets at the online a*.

        The IQN taus are drawn here from self.gen (tau_next first) unless given (the CUDA graph draws them
        into its static buffers, in the same order); h, the online encoder on s["obs"], is computed here unless
        given (_encode's)."""
        cfg, net, tgt = self.cfg, self.net, self.main.target
        n = s["action"].shape[0]
        if h is None:
            h = net.encoder(s["obs"])
        with torch.no_grad():
            h_next = net.encoder(s["next_obs"])
            h_next_tgt = tgt.encoder(s["next_obs"])
            # C51, double DQN: a* from the online expected Q, distribution from the target net at a*.
            a_c51 = (net.c51_logits(h_next).softmax(-1) * self.support).sum(-1).argmax(-1)
            p_next = _atoms_at(tgt.c51_logits(h_next_tgt), a_c51).softmax(-1)
            m = L.c51_target(p_next, s["ret"], s["discount"], cfg.v_min, cfg.v_max)
            # IQN, double DQN: a* from the online quantile mean, T' target quantiles at a*.
            a_iqn = net.iqn_quantiles(h_next, cfg.iqn_target_taus)[:, 0].argmax(-1)  # the midpoints' mean
            if tau_next is None:
                tau_next = torch.rand(n, cfg.iqn_target_taus, generator=self.gen, device=self.device)
            q_next = _at_action(tgt.iqn_quantiles(h_next_tgt, tau_next), a_iqn)
            iqn_target = s["ret"][:, None] + s["discount"][:, None] * q_next
        l_c51 = L.c51_cross_entropy(_atoms_at(net.c51_logits(h), s["action"]), m)
        if tau is None:
            tau = torch.rand(n, cfg.iqn_taus, generator=self.gen, device=self.device)
        l_iqn = L.iqn_loss(_at_action(net.iqn_quantiles(h, tau), s["action"]), tau, iqn_target, cfg.huber_kappa)
        l_dueling = torch.zeros((), device=self.device)
        if self.dueling is not None:  # h detached: this loss reaches w_v, b_v, w_a, b_a and nothing else
            q_dq = self.dueling.net(h.detach())[2]
            with torch.no_grad():
                q_online_next = self.dueling.net(h_next)[2]
                q_target_next = self.dueling.target(h_next)[2]
            l_dueling = L.dueling_loss(
                q_dq, s["action"], q_online_next, q_target_next, s["ret"], s["discount"], cfg.huber_kappa
            )
        return l_c51, l_iqn, l_dueling

    # ------------------------------------------------------------------ acting and checkpoints
    def policy_weights(self) -> dict:
        """What a rollout actor needs: PolicyNet sizes, encoder + pi state on CPU, and the policy version."""
        state = {
            k: v.detach().cpu().clone() for k, v in self.net.state_dict().items() if k.startswith(("encoder.", "pi."))
        }
        return {
            "version": self.step,
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "hidden_dim": self.cfg.hidden_dim,
            "encoder_layers": self.cfg.encoder_layers,
            "state": state,
        }

    def state_dict(self) -> dict:
        """Everything to resume bit-exactly; only tensors, numbers, strings, dicts, lists (weights_only)."""
        sd = {
            "format": CHECKPOINT_FORMAT,
            "config": dataclasses.asdict(self.cfg),
            "obs_dim": self.obs_dim,
            "n_actions": self.n_actions,
            "step": self.step,
            "nan_abort_step": self.nan_abort_step,
            "main": self.main.state_dict(),
            "rng": self.gen.get_state(),
            "replay": self.replay.state_dict(),
            "queue": self.queue.state_dict(),
        }
        if self.dueling is not None:
            sd["dueling"] = self.dueling.state_dict()
        if self.cfg.obs_norm != "off":
            enc = self.net.encoder
            sd["obs_norm"] = {k: getattr(enc, k).detach().cpu().clone() for k in ("obs_scale", "obs_shift")}
        return sd

    def load_state_dict(self, sd: dict) -> None:
        if not isinstance(sd, dict) or sd.get("format") != CHECKPOINT_FORMAT:
            got = sd.get("format") if isinstance(sd, dict) else type(sd).__name__
            raise ValueError(f"not a learner checkpoint: format={got!r}, expected {CHECKPOINT_FORMAT!r}")
        diff = config_differences(self.cfg, sd["config"])
        if diff or (sd["obs_dim"], sd["n_actions"]) != (self.obs_dim, self.n_actions):
            raise ValueError(
                f"checkpoint was written by a different learner: config fields differ {diff}, "
                f"obs_dim/n_actions {sd['obs_dim']}/{sd['n_actions']} vs {self.obs_dim}/{self.n_actions}; "
                "build the Learner from the checkpoint's own config (its 'config' entry)"
            )
        norm = sd.get("obs_norm") if self.cfg.obs_norm != "off" else None
        if self.cfg.obs_norm != "off" and (why := obs_norm_problem(norm, self.obs_dim)) is not None:
            raise ValueError(f"checkpoint obs_norm: {why}; the checkpoint is damaged or from another learner")
        self.main.load_state_dict(sd["main"], "main")
        if self.dueling is not None:
            self.dueling.load_state_dict(sd["dueling"], "dueling")
        self.gen.set_state(sd["rng"])
        self.replay.load_state_dict(sd["replay"])
        self.queue.load_state_dict(sd["queue"], self.device)
        self.step, self.nan_abort_step = int(sd["step"]), int(sd["nan_abort_step"])
        if norm is not None:  # checked above, before anything was loaded; the network was trained with it
            for enc in (self.net.encoder, self.main.target.encoder):
                enc.load_obs_norm_(norm)
        if self.graph is not None:  # Adam state tensors were replaced: the captured addresses are stale
            self.graph.reset()


def _atoms_at(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[B, N, Z] C51 logits at action[B] -> [B, Z] (a gather: no row index to make each step)."""
    return logits.gather(1, action[:, None, None].expand(-1, 1, logits.shape[2])).squeeze(1)


def _at_action(quantiles: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[B, T, N] quantiles at action[B] -> [B, T]."""
    idx = action[:, None, None].expand(-1, quantiles.shape[1], 1)
    return quantiles.gather(2, idx).squeeze(2)

"""The Learner: one plain class, no Ray. update(rollout) -> diag dict; reads top to bottom (CleanRL style).

Per update: validate the rollout, add its n-step transitions to replay, then one optimiser step of
  - on the rollout (on-policy): PPO clipped surrogate on GAE advantages + entropy bonus, Q->pi distillation
    KL(softmax(q_ens/T) || pi) with q_ens detached, V_scalar MSE to the GAE returns;
  - on a replay sample (off-policy): C51 cross-entropy to the double-DQN projected target, IQN quantile Huber;
  - the DuelingQHead's own Huber Bellman loss on a detached h, with its own Adam and its own clipping;
then Polyak-update both target copies. The dueling head is fully encapsulated: in "diagnostic" mode the
main network trains to bit-identical parameters as with no dueling head at all (tests/test_pearls.py).

This file is the story: build the network and its parts, take a batch, step, hand back the figures. The parts
have their own modules: learner/optim.py (the flat buffers, Adam, the learning-rate schedule and the NaN guard
behind `Optimiser.step`), learner/minibatch.py (a rollout into minibatch steps and epochs, and the diag hand-off of
queued steps), learner/graph.py (the CUDA graph that captures `graph_body`), learner/checkpoint.py (the
state_dict's layout), learner/losses.py and learner/network.py.

The seed's failed designs run here too, as ablations (LearnerConfig.c51_scalar_v, iqn_dueling, iqn_baseline;
foxhunt_ray/presets.py): they change what MainNet's heads hand their consumers and which V is the GAE baseline,
nothing else; off, every path below is Plan A v2's, op for op (tests/test_ablations.py).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from learner import checkpoint as C
from learner import diag as D
from learner import graph as G
from learner import losses as L
from learner import minibatch as M
from learner import network as N
from learner.config import NO_FAULTS, FaultInjection, LearnerConfig
from learner.minibatch import Pending
from learner.network import DuelingQHead, MainNet, main_net
from learner.optim import Optimiser, Trainable
from learner.replay import OnPolicyQueue, ReplayBuffer, Rollout, nstep_transitions, rollout_from_batch

_DUELING_SEED_OFFSET = 0x5EED  # the dueling head's own generator: seeded apart from the main net's RNG
V_IQN_MEAN = "v_iqn_mean"
"""Diag key (iqn_baseline on): mean V_IQN over the rollout's valid states, beside v_scalar_mean (its scale)."""
BASELINE_ALPHA = "baseline_alpha"
"""Diag key (iqn_baseline='blend'): this step's alpha in alpha*V_scalar + (1-alpha)*V_IQN."""


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
        # the parts: each network's flat buffers, Adam and target copy, stepped behind the NaN guard (learner/optim.py)
        head = None
        if cfg.dueling_mode != "off":
            head = DuelingQHead(cfg.hidden_dim, n_actions, seed=seed + _DUELING_SEED_OFFSET).to(self.device)
        self.optim = Optimiser(cfg, net.to(self.device), head, capturable=graphed)
        self.main: Trainable = self.optim.main
        self.dueling: Trainable | None = self.optim.dueling
        self.net: MainNet = self.main.net
        self.groups = self.optim.groups
        self.support = torch.linspace(cfg.v_min, cfg.v_max, cfg.n_atoms, device=self.device)
        # _main_loss's weights of (l_pi, entropy, l_distill, l_v, l_c51, l_iqn)
        weights = (1.0, -cfg.entropy_coef, cfg.distill_coef, cfg.value_coef, cfg.c51_coef, cfg.iqn_coef)
        self.loss_weights = torch.tensor(weights, device=self.device)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)  # IQN tau samples
        # Phase 3.2c's alpha of this step, a device tensor written before each update (a CUDA graph reads it)
        self.baseline_alpha = torch.ones((), device=self.device)
        self.replay = ReplayBuffer(cfg.replay_capacity, obs_dim, self.device, seed + 1)
        self.minibatches = M.Minibatches(cfg, self.replay, self.device)
        self.queue = OnPolicyQueue()
        self.step = 0
        self.nan_abort_step = 0
        self.graph: G.GraphUpdate | None = G.GraphUpdate(self, capture=True) if graphed else None

    # ------------------------------------------------------------------ take a batch
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
    ) -> list[Pending]:
        """Queues the minibatch steps of a validated rollout (at most `limit` of them; Minibatches.steps: one copy
        to the device, `cfg.ppo_epochs` passes, replay written on the first) without a host sync;
        `finish_updates` reads their diags. `before_copy` and `after_copy` are called around the queueing of the
        copies (the learner worker records CUDA events there)."""
        steps = self.minibatches.steps(host, limit=limit, before_copy=before_copy, after_copy=after_copy)
        return [self._step(minibatch, add_to_replay) for minibatch, add_to_replay in steps]

    diag_values_to_host = staticmethod(M.diag_values_to_host)  # queued steps' values to pinned memory, no sync

    def finish_updates(
        self, pendings: list[Pending], host_values: torch.Tensor | None = None
    ) -> list[dict[str, float]]:
        """The diags of queued steps, in order, after one device sync; or, with `host_values` (the pendings'
        `diag_values_to_host`, whose copy the caller knows to have landed), with none."""
        return [self._finish(p, v) for p, v in zip(pendings, M.diag_values(pendings, host_values), strict=True)]

    def _finish(self, p: Pending, values: list[float]) -> dict[str, float]:
        """The diag dict of step p; records a step that was not applied (nan_abort_step, sticky)."""
        result, self.nan_abort_step = M.diag_dict(p, values, self.nan_abort_step)
        return result

    def set_progress(self, fraction: float) -> None:
        """The run's progress in [0, 1], for the learning-rate schedule (Optimiser.set_progress)."""
        self.optim.set_progress(fraction)

    # ------------------------------------------------------------------ one step
    def _step(self, host: Rollout, add_to_replay: Callable[[], None]) -> Pending:
        """One learner step: `add_to_replay()` writes its n-step transitions into replay, then the update; its diag
        values stay on the device (a Pending) until `_finish` reads them."""
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

    def _step_body(self, host: Rollout, add_to_replay: Callable[[], None]) -> Pending:
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
            lr_scale=self.optim.lr_scale,
        )
        if cfg.iqn_baseline == "blend":
            self.baseline_alpha.fill_(L.blend_alpha(self.step, cfg.alpha_start_step, cfg.alpha_end_step))
        if self.graph is not None and q_trained:
            self.graph.last_events = None
            keys, stacked = self.graph.run(ro, inject_nan=self.faults.inject_nan_at == self.step)
            # the graph's output buffer is overwritten by its next replay: a copy of this step's values
            return Pending(keys=keys, values=stacked.clone(), graph_events=self.graph.last_events, **meta)
        out: dict[str, torch.Tensor] = {}

        sample = self.replay.sample(cfg.q_batch_size) if q_trained else None
        h_all, h_q = self._encode(ro.obs, None if sample is None else sample["obs"])
        l_pi, ent, l_distill, l_v = self._policy_losses(ro.to_dict(), out, h_all=h_all)
        zero = torch.zeros((), device=self.device)
        l_c51 = l_iqn = l_dueling = zero
        if sample is not None:
            l_c51, l_iqn, l_dueling = self._q_losses(sample, h=h_q)
        loss = self._main_loss(out, l_pi, ent, l_distill, l_v, l_c51, l_iqn, l_dueling)
        if self.faults.inject_nan_at == self.step:  # test-only fault: exercises the guard end to end
            loss = loss * float("nan")
        healthy = self.optim.step(loss, l_dueling if q_trained else None, out)

        keys = list(out)
        stacked = torch.stack([*(out[k].detach().float().reshape(()) for k in keys), healthy.float()])
        return Pending(keys=keys, values=stacked, **meta)

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
        loss, the device guard's step (Optimiser.step, in_graph), and the diag stack. Returns (keys,
        values[len(keys)+1]) with the healthy flag last."""
        out: dict[str, torch.Tensor] = {}
        sample = {k: v[idx] for k, v in self.replay.data.items()}
        h_all, h_q = self._encode(ro["obs"], sample["obs"])  # the eager path's own code from here on
        l_pi, ent, l_distill, l_v = self._policy_losses(ro, out, h_all=h_all)
        l_c51, l_iqn, l_dueling = self._q_losses(sample, tau_next=tau_next, tau=tau, h=h_q)
        loss = self._main_loss(out, l_pi, ent, l_distill, l_v, l_c51, l_iqn, l_dueling) * loss_scale
        healthy = self.optim.step(loss, l_dueling, out, in_graph=True)
        keys = list(out)
        values = torch.stack([*(out[k].detach().float().reshape(()) for k in keys), healthy.float()])
        return keys, values

    # ------------------------------------------------------------------ the losses
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
        """What a rollout actor needs (learner.network.policy_weights): PolicyNet sizes, encoder + pi state on CPU,
        and the policy version, this learner's step."""
        return N.policy_weights(self.net, self.cfg, self.obs_dim, self.n_actions, version=self.step)

    def state_dict(self) -> dict:
        """Everything to resume bit-exactly; only tensors, numbers, strings, dicts, lists (weights_only). The
        layout: learner/checkpoint.py."""
        return C.learner_state(self)

    def load_state_dict(self, sd: dict) -> None:
        """Loads a state_dict of this learner's config, obs_dim and n_actions (learner/checkpoint.py); a
        ValueError names what differs."""
        C.load_learner_state(self, sd)
        if self.graph is not None:  # Adam state tensors were replaced: the captured addresses are stale
            self.graph.reset()


def _atoms_at(logits: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[B, N, Z] C51 logits at action[B] -> [B, Z] (a gather: no row index to make each step)."""
    return logits.gather(1, action[:, None, None].expand(-1, 1, logits.shape[2])).squeeze(1)


def _at_action(quantiles: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """[B, T, N] quantiles at action[B] -> [B, T]."""
    idx = action[:, None, None].expand(-1, quantiles.shape[1], 1)
    return quantiles.gather(2, idx).squeeze(2)

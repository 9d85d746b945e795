"""The Learner's CUDA path: a device-side NaN guard and one captured CUDA graph per steady-state update.

On the H200 a `Learner.update` kept the GPU busy ~2.5 ms out of 10-17 ms: the rest was ~420 kernel launches
from Python and ~12 host syncs. Three changes remove that overhead without changing what is learned:

1. `guarded_step`: ONE backward of `loss + l_dueling` (h is detached, so the two graphs are disjoint and every
   gradient is bit-identical to two backwards), then always clip and step, and undo with `torch.where`
   against a snapshot of parameters, Adam state and targets when the step was not healthy. The healthy flag
   stays on the device; the caller reads it with the diag dict at its one host sync.
2. `policy_losses_masked`: the on-policy losses over all T*B rows with the valid mask as weights, instead of
   indexing the valid rows (whose count changes per rollout): every shape is fixed by (T, B), so one graph
   serves every rollout of that shape. Same maths as Learner._policy_losses; reductions in another order.
3. `GraphUpdate`: static input buffers (rollout, replay indices, IQN taus, loss scale) and the whole device
   side (replay gather, forward, losses, backward, clipping, fused capturable Adam, guard, Polyak, diag
   stack) captured once per rollout shape and replayed. The random draws stay outside the graph, three
   launches on the learner's own generators in the eager path's order, so a graph update samples exactly
   what the eager update would (and checkpoints resume the same streams). Validation, n-step returns and
   the replay-ring write also stay outside (host-side or data-dependent).

On CPU `GraphUpdate(capture=False)` runs the same body eagerly: that is how tests check it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from learner import diag as D
from learner import losses as L
from learner import ops

if TYPE_CHECKING:
    from learner.learner import Learner, _Trainable
    from learner.replay import Rollout

HEALTHY = "__healthy__"
"""Key of the device-side healthy flag in a diag stack (read, then removed, by the Learner)."""

ROLLOUT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "behaviour_logp", "valid")
MAX_SHAPES = 4
"""Rollout shapes (T, B) kept captured at once; the least recently used is dropped (each holds a memory pool)."""


# ---------------------------------------------------------------------------------------------- the guard


def _adam_state(p: _Trainable) -> dict[str, torch.Tensor]:
    return {k: v for k, v in p.opt.state.get(p.flat, {}).items() if torch.is_tensor(v)}


@torch.no_grad()
def _snapshot(p: _Trainable) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    return p.flat.detach().clone(), p.target_flat.clone(), {k: v.clone() for k, v in _adam_state(p).items()}


@torch.no_grad()
def _restore_unless(healthy: torch.Tensor, p: _Trainable, snap) -> None:
    """Where not healthy, put back parameters, target and Adam state (written in place: a graph replays it)."""
    flat, target, state = snap
    torch.where(healthy, p.flat.detach(), flat, out=p.flat.detach())
    torch.where(healthy, p.target_flat, target, out=p.target_flat)
    for k, v in _adam_state(p).items():
        # No snapshot of a key means Adam had no state yet: its zero initial state is "not stepped".
        before = state[k] if k in state else torch.zeros_like(v)
        torch.where(healthy, v, before, out=v)


def guarded_step(lrn: Learner, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
    """Backward, clip, Adam, Polyak; everything undone on the device unless finite. Returns healthy (bool [])."""
    parts = [lrn.main] if lrn.dueling is None else [lrn.main, lrn.dueling]
    for p in parts:
        p.grad.zero_()
    duel = l_dueling is not None and lrn.dueling is not None
    (loss + l_dueling if duel else loss).backward()  # disjoint graphs (h detached): grads as two backwards
    for name, sl in lrn.groups.items():
        out[D.grad_norm_key(name)] = lrn.main.grad[sl].norm()
    out[D.grad_norm_key("total")] = lrn.main.grad.norm()
    if lrn.dueling is not None:
        out[D.grad_norm_key("dueling")] = lrn.dueling.grad.norm()
    healthy = torch.isfinite(loss)
    if l_dueling is not None:
        healthy = healthy & torch.isfinite(l_dueling)
    for p in parts:
        healthy = healthy & torch.isfinite(p.grad).all()
    snaps = [_snapshot(p) for p in parts]
    for p in parts:  # each network is clipped on its own norm: a global norm would couple them
        torch.nn.utils.clip_grad_norm_([p.flat], p.clip)
        p.opt.step()
    for p in parts:
        healthy = healthy & torch.isfinite(p.flat).all()
    for p in parts:
        ops.soft_update_(p.target_flat.detach(), p.flat.detach(), lrn.cfg.polyak_tau)
    for p, snap in zip(parts, snaps, strict=True):
        _restore_unless(healthy, p, snap)
    return healthy


# ------------------------------------------------------------------------------------ masked policy losses


def policy_losses_masked(lrn: Learner, ro: dict[str, torch.Tensor], out: dict) -> tuple[torch.Tensor, ...]:
    """Learner._policy_losses over all T*B rows, the invalid ones weighted 0: (l_pi, entropy, l_distill, l_v).

    Invalid rows get action 0 and a behaviour log-prob equal to pi's own (ratio exactly 1), so nothing
    computed on them can overflow: torch.where passes a zero gradient, but 0 * inf would still be NaN.
    """
    cfg = lrn.cfg
    t_len, b = ro["rewards"].shape
    tb = t_len * b
    valid = ro["valid"].reshape(-1)
    n = valid.sum().to(ro["rewards"].dtype)

    def mean(x: torch.Tensor) -> torch.Tensor:  # mean over the valid rows (and any trailing dims)
        mask = valid.view(-1, *([1] * (x.ndim - 1)))
        return torch.where(mask, x, 0.0).sum() / (n * (x.numel() // tb))

    h_all = lrn.net.encoder(ro["obs"].reshape(-1, lrn.obs_dim))
    h_t = h_all[:tb]
    v_all = lrn.net.value(h_all)
    logits = lrn.net.pi(h_t)
    with torch.no_grad():
        q_ens = lrn.net.q_ens(h_t, lrn.support, cfg.ensemble_w, cfg.iqn_taus)
        baseline = v_all
        if lrn.dueling is not None:
            v_dq_all = lrn.dueling.net(h_all.detach())[0]
            out[D.V_DQ_MEAN] = mean(v_dq_all[:tb])
            if cfg.dueling_mode == "baseline":
                baseline = v_dq_all
        adv, ret = L.gae(
            ro["rewards"] * cfg.reward_scale,
            baseline[:tb].view(t_len, b),
            baseline[b:].view(t_len, b),
            ro["terminated"],
            ro["terminated"] | ro["truncated"],
            cfg.gamma,
            cfg.gae_lambda,
        )
        adv = adv.reshape(-1)
        out[D.ADV_MEAN] = adv_mean = mean(adv)
        if cfg.normalize_advantages:  # the eager path skips a single valid step: std 0 would zero it
            std = mean((adv - adv_mean).pow(2)).sqrt()
            adv = torch.where(n > 1, (adv - adv_mean) / (std + 1e-8), adv)
    logp_all = torch.log_softmax(logits, dim=-1)
    actions = torch.where(ro["valid"], ro["actions"], 0).reshape(-1, 1)
    logp = logp_all.gather(-1, actions).squeeze(-1)
    behaviour = torch.where(valid, ro["behaviour_logp"].reshape(-1), logp.detach())
    log_ratio = logp - behaviour
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * adv, ratio.clamp(1.0 - cfg.ppo_clip, 1.0 + cfg.ppo_clip) * adv)
    l_pi = -mean(surrogate)
    with torch.no_grad():
        out[D.APPROX_KL] = mean((ratio - 1.0) - log_ratio)
        out[D.CLIP_FRAC] = mean(((ratio - 1.0).abs() > cfg.ppo_clip).to(ratio.dtype))
    ent = mean(-(logp_all.exp() * logp_all).sum(-1))
    q_teacher = -q_ens if cfg.flip_distill_sign else q_ens
    log_q = torch.log_softmax(q_teacher / cfg.distill_temperature, dim=-1)
    l_distill = mean((log_q.exp() * (log_q - logp_all)).sum(-1))
    v_t = v_all[:tb]
    l_v = mean((v_t - ret.reshape(-1)).pow(2))
    out[D.QPA] = mean(D.qpa_rows(q_ens, logp_all.detach()))
    out[D.V_SCALAR_MEAN] = mean(v_t.detach())
    out[D.Q_ENS_MEAN] = mean(q_ens)
    return l_pi, ent, l_distill, l_v


# ------------------------------------------------------------------------------------- the captured update


class _Static:
    """One rollout shape's input buffers, its captured graph and the graph's output (the diag stack)."""

    def __init__(self, lrn: Learner, t_len: int, b: int):
        dev, cfg = lrn.device, lrn.cfg
        self.ro = {
            "obs": torch.zeros(t_len + 1, b, lrn.obs_dim, device=dev),
            "actions": torch.zeros(t_len, b, dtype=torch.int64, device=dev),
            "rewards": torch.zeros(t_len, b, device=dev),
            "terminated": torch.zeros(t_len, b, dtype=torch.bool, device=dev),
            "truncated": torch.zeros(t_len, b, dtype=torch.bool, device=dev),
            "behaviour_logp": torch.zeros(t_len, b, device=dev),
            "valid": torch.zeros(t_len, b, dtype=torch.bool, device=dev),
        }
        self.idx = torch.zeros(cfg.q_batch_size, dtype=torch.int64, device=dev)
        self.tau_next = torch.zeros(cfg.q_batch_size, cfg.iqn_target_taus, device=dev)
        self.tau = torch.zeros(cfg.q_batch_size, cfg.iqn_taus, device=dev)
        self.loss_scale = torch.ones((), device=dev)  # NaN on cfg.inject_nan_at: the guard sees it in-graph
        self.keys: list[str] = []
        self.values: torch.Tensor | None = None
        self.graph: torch.cuda.CUDAGraph | None = None


class GraphUpdate:
    """The device side of a steady-state update (replay sampled, Q losses on) from static buffers.

    `run(ro, inject_nan)` copies the rollout into the buffers of its (T, B), draws the replay indices and
    IQN taus in the eager path's order, then replays the captured graph (capturing it on first use, after
    one eager warm-up step that IS this update's step), or with capture=False runs the body eagerly.
    Returns (keys, values[len(keys)+1]) with the healthy flag last: the caller's one host sync reads them.
    Any change of the tensors the graph captured (Adam state, parameters replaced by a load) calls reset().
    """

    def __init__(self, lrn: Learner, *, capture: bool):
        self.lrn, self.capture = lrn, capture
        self.shapes: dict[tuple[int, int], _Static] = {}
        self.captures = 0
        self._stream: torch.cuda.Stream | None = None  # warm-up and capture share it (lazy cuBLAS state)

    def reset(self) -> None:
        self.shapes.clear()

    def run(self, ro: Rollout, inject_nan: bool) -> tuple[list[str], torch.Tensor]:
        lrn = self.lrn
        t_len, b = ro.rewards.shape
        st = self.shapes.pop((t_len, b), None)
        if st is None:
            if len(self.shapes) >= MAX_SHAPES:
                self.shapes.pop(next(iter(self.shapes)))
            st = _Static(lrn, t_len, b)
        self.shapes[(t_len, b)] = st  # re-inserted: the dict's order is least recently used first
        for k in ROLLOUT_FIELDS:
            st.ro[k].copy_(getattr(ro, k), non_blocking=True)
        # What ReplayBuffer.sample and Learner._q_losses draw, in that order, on the same generators.
        st.idx.random_(0, len(lrn.replay), generator=lrn.replay.gen)
        st.tau_next.uniform_(0.0, 1.0, generator=lrn.gen)
        st.tau.uniform_(0.0, 1.0, generator=lrn.gen)
        if inject_nan:
            st.loss_scale.fill_(math.nan)
        try:
            if not self.capture:
                st.keys, values = self._body(st)
            elif st.graph is None:
                values = self._warm_up_and_capture(st)
            else:
                st.graph.replay()
                values = st.values
        finally:
            if inject_nan:
                st.loss_scale.fill_(1.0)
        return st.keys, values

    def _warm_up_and_capture(self, st: _Static) -> torch.Tensor:
        # The warm-up runs on a side stream (as torch.cuda.graphs asks: lazy inits must not be captured) and
        # is this update's real step; the capture only records kernels, it changes nothing.
        if self._stream is None:
            self._stream = torch.cuda.Stream(self.lrn.device)
        side = self._stream
        side.wait_stream(torch.cuda.current_stream(self.lrn.device))
        with torch.cuda.stream(side):
            st.keys, values = self._body(st)
        torch.cuda.current_stream(self.lrn.device).wait_stream(side)
        values = values.clone()  # the capture's allocations must not reuse this block while we still read it
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            keys, st.values = self._body(st)
        if keys != st.keys:
            raise RuntimeError(f"captured update produced diag keys {keys}, the warm-up {st.keys}")
        st.graph = graph
        self.captures += 1
        return values

    def _body(self, st: _Static) -> tuple[list[str], torch.Tensor]:
        lrn, cfg = self.lrn, self.lrn.cfg
        out: dict[str, torch.Tensor] = {}
        l_pi, ent, l_distill, l_v = policy_losses_masked(lrn, st.ro, out)
        sample = {k: v[st.idx] for k, v in lrn.replay.data.items()}
        l_c51, l_iqn, l_dueling = lrn._q_losses(sample, tau_next=st.tau_next, tau=st.tau)
        loss = (
            l_pi
            - cfg.entropy_coef * ent
            + cfg.distill_coef * l_distill
            + cfg.value_coef * l_v
            + cfg.c51_coef * l_c51
            + cfg.iqn_coef * l_iqn
        ) * st.loss_scale
        healthy = guarded_step(lrn, loss, l_dueling, out)
        out.update({D.L_C51: l_c51, D.L_IQN: l_iqn, D.L_PI: l_pi, D.L_V: l_v, D.L_DISTILL: l_distill})
        out.update({D.L_DUELING: l_dueling, D.ENTROPY: ent})
        keys = list(out)
        values = torch.stack([*(out[k].detach().float().reshape(()) for k in keys), healthy.float()])
        return keys, values

"""The learner's optimiser: its networks' flat buffers and Adams, the learning-rate schedule, and the NaN guard.

One interface, `Optimiser`: `step(loss, l_dueling, out)` takes the losses of one learner step and returns its
healthy flag (a bool tensor on the device), having applied the step only where every loss, gradient and new
parameter is finite; `set_progress(p)` sets the learning rate of the steps that follow. Each network (the main
net; the dueling head, with its own Adam and its own clipping) is a `Trainable`: its parameters and gradients are
views into one flat buffer each, so clipping, Adam, the finiteness check, the snapshot and the Polyak update are
one operation a network.

The guard takes one of three paths, which `LearnerConfig.nan_guard` names ("auto" picks by device):
- "host" (`_apply`, the CPU's): backward, then skip the step (changing nothing) unless finite; otherwise clip,
  Adam, undo from a snapshot if the new parameters are not finite, Polyak. A sync decides: free on a CPU.
- "composed" (`_guarded_step`, the device guard from torch ops): the same backward, then always clip, Adam and
  Polyak, and undo it all with `torch.where` against a snapshot when anything is not finite. It never syncs, so
  a CUDA graph can capture it.
- "fused" (`_fused_guarded_step`): the composed guard as one op, `ops.guarded_adam_` (three launches a network).
All three train bit-identically on the CPU (tests/test_graph.py); "auto" is the host guard off CUDA and, on CUDA,
the fused guard where the ops run their kernels, else the composed one. A step inside a CUDA graph cannot sync:
there "host" and "auto" take auto's device guard.
"""

from __future__ import annotations

import copy

import torch

from learner import diag as D
from learner import ops
from learner.config import LearnerConfig
from learner.network import flatten_parameters_, group_slices


class Trainable:
    """A network's flat parameters, flat gradients, Adam and target copy, stepped as one unit.

    Its learning rate is `base_lr` times the schedule's scale, held where torch's Adam reads it (the param group's
    "lr"): a float, or, when it decays inside a CUDA graph, a float32 device tensor the captured Adam step reads at
    each replay (set in place). The fused guard reads it as a device tensor too (`lr_tensor`)."""

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
        lr_now: float | torch.Tensor = (
            torch.tensor(lr, dtype=torch.float32, device=self.flat.device) if decays and capturable else lr
        )
        # fused on CUDA: the whole Adam step of a flat buffer is one kernel; capturable keeps its step
        # count on the device, so a CUDA graph can replay it
        self.opt = torch.optim.Adam(
            [self.flat], lr=lr_now, eps=eps, fused=self.flat.is_cuda or None, capturable=capturable
        )
        self._lr_device: torch.Tensor | None = None  # lr_tensor's, made on its first call
        self._lr_device_value: float | None = None

    def set_lr_scale(self, scale: float) -> None:
        """Adam's lr := base_lr * scale from the next step on (in place when a captured graph reads it)."""
        lr = self.base_lr * scale
        for group in self.opt.param_groups:
            if torch.is_tensor(group["lr"]):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr

    def lr_tensor(self) -> torch.Tensor:
        """The learning rate as a scalar on the device (ops.guarded_adam_ reads it there): the tensor a captured
        graph reads when the lr decays, else a float64 one kept in step with the float (made on the first call,
        which is eager: a graph's warm-up)."""
        lr = self.opt.param_groups[0]["lr"]  # what torch's Adam would read (set_lr_scale sets it)
        if torch.is_tensor(lr):
            return lr
        if self._lr_device is None:
            self._lr_device = torch.tensor(lr, dtype=torch.float64, device=self.flat.device)  # the float, exactly
        elif self._lr_device_value != lr:
            self._lr_device.fill_(lr)
        self._lr_device_value = lr
        return self._lr_device

    def load_adam_state(self, state: dict) -> None:
        """torch's Adam state_dict loaded, keeping this learner's own learning rate (the tensor a graph reads, or
        the float: set_progress sets it) and, when capturable, its step count on the device."""
        lrs = [group["lr"] for group in self.opt.param_groups]
        self.opt.load_state_dict(state)
        for group, lr in zip(self.opt.param_groups, lrs, strict=True):
            group["lr"] = lr
        if self.capturable:  # the checkpoint's param group (perhaps from a CPU learner) replaced ours
            for group in self.opt.param_groups:
                group["capturable"] = True
            st = self.opt.state.get(self.flat, {})
            if torch.is_tensor(st.get("step")):
                st["step"] = st["step"].to(self.flat.device, torch.float32)

    # ---- the host guard's snapshot
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

    # ---- the device guards' state
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


class Optimiser:
    """The main net's and the dueling head's Trainables, the learning-rate schedule and the guarded step."""

    def __init__(
        self, cfg: LearnerConfig, net: torch.nn.Module, dueling_head: torch.nn.Module | None, *, capturable: bool
    ):
        """net, dueling_head: on their device already. capturable: Adam's state stays on the device, so a CUDA graph
        can replay its step (a graphed learner's)."""
        decays = cfg.lr_decay_to < 1
        self.cfg = cfg
        self.main = Trainable(net, cfg.lr, cfg.adam_eps, cfg.grad_clip, capturable, decays)
        self.dueling: Trainable | None = None
        if dueling_head is not None:
            self.dueling = Trainable(
                dueling_head, cfg.dueling_lr, cfg.adam_eps, cfg.dueling_grad_clip, capturable, decays
            )
        self.parts: list[Trainable] = [self.main] if self.dueling is None else [self.main, self.dueling]
        self.groups = group_slices(net, net.groups)
        """The main net's parameter groups (encoder, c51, iqn, pi, v, ...) as slices of its flat buffer."""
        self.lr_scale = 1.0
        """The factor on lr and dueling_lr of the next step (set_progress)."""
        on_cuda = self.main.flat.is_cuda
        self.guard = cfg.nan_guard if cfg.nan_guard != "auto" else ("auto" if on_cuda else "host")
        """The path `step` takes: "host", "composed", "fused", or "auto" (a device guard, fused where the ops run
        their kernels: decided per step, as the ops' backend may change)."""

    # ------------------------------------------------------------------ the learning-rate schedule
    def set_progress(self, fraction: float) -> None:
        """The run's progress in [0, 1] (the driver's: steps done, or time budget spent): lr and dueling_lr from
        the next step on are scaled by 1 - (1 - lr_decay_to) * fraction. A no-op at lr_decay_to = 1."""
        if self.cfg.lr_decay_to >= 1:
            return
        fraction = min(max(float(fraction), 0.0), 1.0)
        self.lr_scale = 1.0 - (1.0 - self.cfg.lr_decay_to) * fraction
        for p in self.parts:
            p.set_lr_scale(self.lr_scale)

    # ------------------------------------------------------------------ the guarded step
    def step(
        self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict, *, in_graph: bool = False
    ) -> torch.Tensor:
        """One backward of loss (+ l_dueling: None when the Q losses did not run), the grad norms into `out`, and
        the step of every network behind the guard; returns healthy (bool [], on the device). in_graph: the step
        is captured in a CUDA graph, so it must not sync (a device guard however nan_guard reads)."""
        guard = self.guard
        if guard == "host" and not in_graph:
            return torch.tensor(self._apply(loss, l_dueling, out), device=loss.device)
        if guard == "fused" or (guard in ("auto", "host") and ops.uses_kernels(loss)):
            return self._fused_guarded_step(loss, l_dueling, out)
        return self._guarded_step(loss, l_dueling, out)

    def _backward(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
        """ONE backward (_backprop), then the grad norms; returns healthy (bool [], on the device):
        the losses and gradients are all finite. The host guard (_apply) and the composed one (_guarded_step) use
        it.

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

    def _backprop(self, loss: torch.Tensor, l_dueling: torch.Tensor | None) -> list[Trainable]:
        """ONE backward of loss (+ l_dueling): every part's flat gradient := the gradient of that sum by its
        parameters (zeros where the sum does not reach them); returns the parts. One autograd.grad and one
        concatenation into each flat buffer: backward() into the .grad views would zero each buffer, then add into
        it once per parameter tensor (about 20 kernels a step on CUDA)."""
        parts = self.parts
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
        for p in self.parts:  # each network is clipped on its own norm: a global norm would couple them
            torch.nn.utils.clip_grad_norm_([p.flat], p.clip)
            p.opt.step()

    def _polyak(self) -> None:
        for p in self.parts:
            ops.soft_update_(p.target_flat.detach(), p.flat.detach(), self.cfg.polyak_tau)

    def _apply(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> bool:
        """Host guard: backward, then skip (changing nothing) unless finite; clip, Adam, undo if the new
        parameters are not finite, Polyak. Returns whether the step was applied. On CPU a sync is free and
        skipping saves the wasted step; the device guard (_guarded_step) always steps and undoes."""
        parts = self.parts
        if not bool(self._backward(loss, l_dueling, out)):
            return False
        snaps = [p.snapshot() for p in parts]
        self._clip_and_step()
        if not all(bool(torch.isfinite(p.flat).all()) for p in parts):
            for p, snap in zip(parts, snaps, strict=True):
                p.restore(snap)
            return False
        self._polyak()
        return True

    def _guarded_step(self, loss: torch.Tensor, l_dueling: torch.Tensor | None, out: dict) -> torch.Tensor:
        """Device guard: backward, then ALWAYS clip, Adam, Polyak, and undo it all on the device with torch.where
        unless the losses, gradients and new parameters are finite. Returns healthy (bool [], on the device).

        The backward (and grad norms, and the pre-step healthy flag) is the host guard's, _backward; only the
        policy differs: the host guard (_apply) syncs and skips, this one never syncs, so a graph can capture it.
        """
        parts = self.parts
        healthy = self._backward(loss, l_dueling, out)
        snaps = [p.device_snapshot() for p in parts]
        self._clip_and_step()
        for p in parts:
            healthy = healthy & torch.isfinite(p.flat).all()
        self._polyak()
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

"""The Learner's CUDA graph: one captured CUDA graph per steady-state update, replayed.

An eager `Learner.update` on a GPU spends most of its time launching hundreds of small kernels from Python and
waiting on about a dozen host syncs, not computing (BENCHMARKS.md, "The learner's update"). Three things remove
that overhead without changing what is learned:

1. The device guard (learner/optim.py, Optimiser.step: composed of torch ops, or fused as one op): the shared
   backward (Optimiser._backward: ONE backward of `loss + l_dueling`, bit-identical to two since h is detached,
   grad norms, finite check), then always clip and step, and undo with `torch.where` against a snapshot of
   parameters, Adam state and targets when the step was not healthy. The healthy flag stays on the device; the
   caller reads it with the diag dict at its one host sync.
2. The on-policy losses (Learner._policy_losses, the eager path's own code) run over all T*B rows with the
   valid mask as row mask, never indexing the valid rows (whose count changes per rollout): every shape is
   fixed by (T, B), so one graph serves every rollout of that shape.
3. `GraphUpdate` (this module): static input buffers (rollout, replay indices, IQN taus, loss scale) and the
   whole device side (Learner.graph_body: replay gather, forward, losses, backward, clipping, fused capturable
   Adam, guard, Polyak, diag stack) captured once per rollout shape and replayed. The random draws stay
   outside the graph, three launches on the learner's own generators in the eager path's order, so a graph
   update samples exactly what the eager update would (and checkpoints resume the same streams). Validation,
   n-step returns and the replay-ring write also stay outside (host-side or data-dependent).

The ablation switches (LearnerConfig.c51_scalar_v, iqn_dueling, iqn_baseline) run in the graph unchanged: they
live in the Learner's loss code that graph_body calls. Phase 3.2c's alpha changes every step, so it is not a
captured constant but a device scalar (Learner.baseline_alpha) written before each replay, like the loss scale.
This module owns the buffers, the capture and the replay; what the graph computes is the Learner's (this module
does not import learner.learner: the Learner imports it).

On CPU `GraphUpdate(capture=False)` runs the same body eagerly: that is how tests check it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Protocol

import torch

from learner.config import LearnerConfig
from learner.replay import ReplayBuffer, Rollout

ROLLOUT_FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "behaviour_logp", "valid")
MAX_SHAPES = 4
"""Rollout shapes (T, B) kept captured at once; the least recently used is dropped (each holds a memory pool)."""


class LearnerLike(Protocol):
    """What GraphUpdate reads of the learner.learner.Learner it serves (sizes, generators, replay) and the body
    it captures."""

    cfg: LearnerConfig
    device: torch.device
    obs_dim: int
    gen: torch.Generator
    replay: ReplayBuffer

    def graph_body(
        self,
        ro: Mapping[str, torch.Tensor],
        idx: torch.Tensor,
        tau_next: torch.Tensor,
        tau: torch.Tensor,
        loss_scale: torch.Tensor,
    ) -> tuple[list[str], torch.Tensor]: ...


# ------------------------------------------------------------------------------------- the captured update


class _Static:
    """One rollout shape's input buffers, its captured graph and the graph's output (the diag stack)."""

    def __init__(self, lrn: LearnerLike, t_len: int, b: int):
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
        self.loss_scale = torch.ones((), device=dev)  # NaN on faults.inject_nan_at: the guard sees it in-graph
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

    def __init__(self, lrn: LearnerLike, *, capture: bool):
        self.lrn, self.capture = lrn, capture
        self.shapes: dict[tuple[int, int], _Static] = {}
        self.captures = 0
        self.timed = False
        """Record a pair of CUDA events around each replay (`last_events`): the update's own device time,
        without the host's launch gaps around it (the learner worker's learner_busy)."""
        self.last_events: tuple | None = None
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
            elif self.timed:
                self.last_events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                self.last_events[0].record()
                st.graph.replay()
                self.last_events[1].record()
                values = st.values
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
        return self.lrn.graph_body(st.ro, st.idx, st.tau_next, st.tau, st.loss_scale)

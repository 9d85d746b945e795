"""RolloutConfig: one rollout worker's books, sample length, threads and policy device (the worker: actors.rollout).

A plain dataclass with no heavy import (no torch, no gymnasium), so that foxhunt_ray.config can hold it in a
RunConfig without loading the worker.
"""

from __future__ import annotations

from dataclasses import dataclass

POLICY_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
"""RolloutConfig.policy_device's choices (actors.rollout.policy_device resolves "auto" in the worker)."""


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

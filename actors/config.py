"""RolloutConfig: one rollout worker's books, sample length, threads and policy device (the worker: actors.rollout).

A plain dataclass with no heavy import (no torch, no gymnasium), so that foxhunt_ray.config can hold it in a
RunConfig without loading the worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from lobsim_env.validation import Bool, Int, OneOf, field_errors

POLICY_DEVICES: tuple[str, ...] = ("auto", "cpu", "cuda")
"""RolloutConfig.policy_device's choices (actors.rollout.policy_device resolves "auto" in the worker)."""
MAX_ROLLOUT_WORKERS = 1024
"""The most rollout workers a run may have (driver.rollout_workers, --rollout-workers), and so the bound of a
payload's worker_index (actors.wire). Under Ray each worker is an actor process with up to a CPU of its own: 1,024
is a cluster of 8 hosts of 128 cores, one worker a core. In serial mode the driver builds every worker before the
first update and steps them one after another in its one process, so a count far above the cores only delays the
first update and fills memory (100,000 workers: no update in 90 s, memory rising). A larger cluster raises it here."""
ROLLOUT_WORKERS_WHY = (
    f"one process and CPU each under Ray, {MAX_ROLLOUT_WORKERS:,} = 8 hosts of 128 cores; serial mode builds every "
    "one before its first update and steps them in turn: pass --rollout-workers of about one a core; the bound is "
    "actors.config.MAX_ROLLOUT_WORKERS"
)
"""Why the bound, as driver.rollout_workers' error says it."""


@dataclass(kw_only=True, frozen=True)
class RolloutConfig:
    """One rollout worker's books and threads; the market itself is a MarketConfig."""

    num_envs: Annotated[int, Int(ge=1)] = 16
    """B: books stepped together by one worker."""
    steps_per_sample: Annotated[int, Int(ge=1)] = 64
    """T: env steps per sample() batch (what the driver passes to sample)."""
    torch_threads: Annotated[int, Int(ge=1)] = 1
    """torch intra-op threads in the worker process (1: N workers share the cores without oversubscribing)."""
    policy_device: Annotated[str, OneOf(POLICY_DEVICES)] = "auto"
    """Where the worker's policy copy acts: "cpu", "cuda", or "auto" (the GPU when the worker's process sees one,
    else the CPU). On a GPU host the policy's forward pass costs a CPU core more than stepping the books does
    (BENCHMARKS.md, "The system on one GPU host"); under Ray a worker sees the GPU only when the driver gave it a
    share of one (foxhunt_ray.remote)."""
    stagger_episodes: Annotated[bool, Bool()] = True
    """The market's books open their first episode at a step drawn uniformly from [0, horizon) (seeded by the
    worker's seed and index), a shorter first episode that the episode stats leave out, so their episodes end at
    different steps from then on and every batch mixes all phases of an episode. False: every book opens at step
    0 and the worker's books sweep the episode in lockstep, each batch from one phase of it (the learner's
    entropy and distillation loss then cycle with the episode: BENCHMARKS.md, "Learning on the synthetic
    market"). Envs other than the market end their episodes at their own times and ignore it."""

    def errors(self) -> list[str]:
        """Every problem as 'rollout.field=value must ...'; empty when the config is usable."""
        return list(field_errors(self, "rollout").values())

"""The Ray loop's scheduling state (foxhunt_ray.ray_loop): which payload is where, and when a rollout actor may be
asked for the next one. Nothing here waits or talks to an actor: the loop asks, this counts."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from foxhunt_ray.plan import DriverConfig


class Schedule:
    """Where each payload of the Ray loop is, and whether a rollout actor may be asked for the next: a sample in
    flight (`samples`, `asked`), ready for the learner (`ready`), in a learner call (`calls`), or its actor idle
    (`idle`). The bounds are drv.max_payloads_waiting and drv.max_payloads_ahead (docs/system.md, "Policy lag")."""

    def __init__(self, drv: DriverConfig, per_payload: int, step: int):
        self.drv, self.per_payload = drv, per_payload
        self.samples: dict = {}  # a sample in flight -> its rollout actor's index
        self.asked: dict = {}  # ... -> when it was asked (time.monotonic), for drv.sample_timeout_s
        self.ready: list = []  # finished samples not yet in a learner call, oldest first
        self.idle: list[int] = []  # rollout actors not asked for a sample, in the order they went idle
        self.calls: list[tuple] = []  # (monitor's answer ref, payloads in it, learner's answer ref), oldest first
        self.learner_step = step  # the learner's step by its newest answer

    def waiting(self) -> int:
        """Payloads sampled and not yet trained on: ready, or in a learner call."""
        return len(self.ready) + sum(n for _, n, _ in self.calls)

    def room(self) -> bool:
        """Whether one more sample may be asked (drv.max_payloads_waiting, drv.max_payloads_ahead)."""
        ahead, waiting = self.drv.max_payloads_ahead, self.waiting()
        return waiting < self.drv.max_payloads_waiting and (not ahead or len(self.samples) + waiting < ahead)

    def dispatched(self) -> int:
        """The learner step once every payload sent to it is trained on."""
        return self.learner_step + self.per_payload * sum(n for _, n, _ in self.calls)

    def wanted(self, start: float) -> bool:
        """Whether the run (its loop started at `start`) still wants samples: steps left beyond those dispatched,
        and time left."""
        return self.dispatched() < self.drv.steps and not self.drv.out_of_time(start)

    def asking(self, ref, i: int) -> None:
        """Rollout actor i's sample `ref`, asked now."""
        self.samples[ref], self.asked[ref] = i, time.monotonic()

    def take(self) -> list:
        """The ready payloads of the next learner call, oldest first: all, or drv.max_payloads_per_call at most."""
        cap = self.drv.max_payloads_per_call or len(self.ready)
        take, self.ready = self.ready[:cap], self.ready[cap:]
        return take

    def came_back(self, ref) -> int:
        """A sample that finished: ready for the learner. Returns its rollout actor's index."""
        i = self.samples.pop(ref)
        self.asked.pop(ref, None)
        self.ready.append(ref)
        return i

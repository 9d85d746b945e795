"""The one place where `ray.remote(...)` wraps the roles (DESIGN.md: roles are plain classes).

- Learner actor: LearnerWorker plus `update_from([ref])`, which fetches a rollout payload itself (the driver
  never pulls payloads through its own process) and turns a sample lost with a dead rollout actor into a
  `{"lost_sample": reason}` answer instead of an exception. num_gpus=1 when the cluster has a GPU.
- Rollout actors: RolloutWorker with max_restarts and as many task retries, so a sample in flight when its actor
  died is run again on the restarted actor. A restarted actor reruns its constructor, weights included.
"""

from __future__ import annotations

import ray

from actors.learner_worker import LearnerWorker
from actors.rollout import RolloutWorker

LEARNER_CPUS = 1.0


class RayLearnerWorker(LearnerWorker):
    """LearnerWorker inside a Ray actor: picks its device from the GPUs Ray gave it."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("device", "cuda" if ray.get_gpu_ids() else "cpu")
        super().__init__(*args, **kwargs)

    def update_from(self, refs: list) -> dict | None:
        """update() on the payload behind refs[0]; {'lost_sample': why} when its rollout actor lost it."""
        try:
            payload = ray.get(refs[0])
        except ray.exceptions.RayError as err:
            return {"lost_sample": f"{type(err).__name__}: {err}"[:500]}
        return self.update(payload)


def cluster_has_gpu() -> bool:
    return ray.cluster_resources().get("GPU", 0) >= 1


def rollout_cpus(n_workers: int) -> float:
    """CPUs reserved per rollout actor: one each when the cluster has room beside the learner, else a share
    (a 2-core laptop runs the learner and two workers on ray.init(num_cpus=2))."""
    free = ray.cluster_resources().get("CPU", 1.0) - LEARNER_CPUS
    return round(max(0.05, min(1.0, free / max(n_workers, 1))), 2)


def learner_actor(*, gpu: bool):
    return ray.remote(num_cpus=LEARNER_CPUS, num_gpus=1 if gpu else 0)(RayLearnerWorker)


def rollout_actor(*, cpus: float, max_restarts: int):
    return ray.remote(num_cpus=cpus, max_restarts=max_restarts, max_task_retries=max_restarts)(RolloutWorker)

"""The one place where `ray.remote(...)` wraps the roles (DESIGN.md: roles are plain classes).

- Learner actor: LearnerWorker plus `update_from([ref])`, which fetches a rollout payload itself (the driver
  never pulls payloads through its own process) and turns a sample lost with a dead rollout actor into a
  `{"lost_sample": reason}` answer instead of an exception. num_gpus=1 when the cluster has a GPU.
- Rollout actors: RolloutWorker with max_restarts and as many task retries, so a sample in flight when its actor
  died is run again on the restarted actor. A restarted actor reruns its constructor, weights included.
- Monitor actor: Monitor plus `record_update(diag)`, which takes the learner actor's answer straight from the
  object store (the driver passes the update's ref), so diag.jsonl, the kill rules and the dashboard gauges
  live in their own actor. It is pinned to the driver's node, where the run folder is. `MonitorHandle` gives
  the driver the calls it makes on a plain Monitor (finish, close, last, exit_code).
"""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.learner_worker import LearnerWorker
from actors.monitor import Monitor
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


class RayMonitor(Monitor):
    """Monitor inside its own actor."""

    def record_update(self, diag: dict | None) -> dict:
        """record() for a learner answer: {"record", "decision"}, or {"skipped": answer} when the learner made
        no step (a bad payload: None; a sample lost with its rollout actor: {"lost_sample": why}), or
        {"after_end": step} for an update that was already queued on the learner when a rule ended the run:
        the run is over at the kill's step, so that update gets no line (Monitor.record would refuse it)."""
        if diag is None or "lost_sample" in diag:
            return {"skipped": diag}
        if self.exit_code is not None:
            return {"after_end": diag.get("step")}
        decision = self.record(diag)
        return {"record": self.last, "decision": decision}

    def ready(self) -> bool:
        return True


class MonitorHandle:
    """The driver's side of the monitor actor, with the calls the driver makes on a plain Monitor."""

    def __init__(self, *args, **kwargs):
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.actor = ray.remote(num_cpus=0, scheduling_strategy=here)(RayMonitor).remote(*args, **kwargs)
        ray.get(self.actor.ready.remote())  # a bad baseline or diag file raises here, as the plain Monitor does
        self.last: dict | None = None
        self.exit_code: int | None = None

    def record_update(self, update_ref) -> ray.ObjectRef:
        """The monitor's answer (see RayMonitor.record_update) once the learner's update behind the ref is done;
        actor tasks from one caller run in order, so lines are appended in step order."""
        return self.actor.record_update.remote(update_ref)

    def finish(self, status: str = "done", message: str | None = None) -> int:
        self.exit_code = ray.get(self.actor.finish.remote(status, message))
        return self.exit_code

    def close(self) -> None:
        try:
            ray.get(self.actor.close.remote(), timeout=60)
        finally:
            ray.kill(self.actor)

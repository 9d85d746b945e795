"""The one place where `ray.remote(...)` wraps the roles (DESIGN.md: roles are plain classes).

- Learner actor: LearnerWorker plus `update_from(refs)`, which fetches rollout payloads itself (the driver never
  pulls payloads through its own process; on the same node Ray hands them over without a copy), trains on them
  leaving the newest payload's steps running on the GPU, and reports a sample lost with a dead rollout actor in
  its answer instead of raising. A periodic checkpoint rides in that answer as bytes: the learner never writes
  to disk, so it may run on any node. A GPU when the cluster has one (half of it when the rollout policies act
  there); custom resources when the driver is given some (`--learner-resources`, e.g. to pin it to one node).
- Rollout actors: RolloutWorker with max_restarts and as many task retries, so a sample in flight when its actor
  died is run again on the restarted actor. A restarted actor reruns its constructor, whose arguments are small
  values inlined in the actor's spec (nothing in the object store, which Ray does not keep for a restart:
  ray-project/ray#53727); the policy weights come with each sample call instead (`sample_on`), as a ref that the
  call keeps alive until it is done, retries included. A share of the GPU when their policies act on it
  (RolloutConfig.policy_device; gpu_shares).
- Monitor actor: Monitor plus `record_update(answer)`, which takes the learner actor's answer straight from the
  object store (the driver passes the answer's ref) and records its diags in order, so diag.jsonl, the kill
  rules and the dashboard gauges live in their own actor. It is pinned to the driver's node, where the run
  folder is, and writes the checkpoints that come in the learner's answers (or from `keep_checkpoint`) there,
  copying the folder to the run's storage after each (foxhunt_ray.storage): every file of a run reaches the
  driver's node whatever node made it; the answer travels from the learner's node to the monitor's through the
  object store. `MonitorHandle` gives the driver the calls it makes on a plain Monitor (finish, close, last,
  exit_code) and `keep_checkpoint`. RayMonitor lives in foxhunt_ray.monitor_actor, which imports no torch: the
  monitor's process starts without it (a second of CPU and a few hundred MB it never uses). A monitor actor
  silent for `DriverConfig.monitor_timeout_s` raises MonitorSilent in the driver, which then kills it and writes
  the run folder itself through `MonitorHandle.take_over` (foxhunt_ray.loops; docs/faults.md).
"""

from __future__ import annotations

import math
import os
import signal
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.config import RolloutConfig
from actors.learner_worker import LearnerWorker
from actors.rollout import RolloutWorker
from foxhunt_ray.monitor_actor import RayMonitor

LEARNER_CPUS = 1.0


class RayLearnerWorker(LearnerWorker):
    """LearnerWorker inside a Ray actor: picks its device from the GPUs Ray gave it, fetches payloads itself."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("device", "cuda" if ray.get_gpu_ids() else "cpu")
        super().__init__(*args, **kwargs)
        self._ray_seconds = {"fetch_s": 0.0, "idle_s": 0.0, "calls": 0.0}
        self._last_return: float | None = None

    def update_from(self, refs: list, stop_at: int | None = None, progress: float | None = None) -> dict:
        """train() on the payloads behind refs, fetched here (zero-copy from this node's object store), leaving
        the newest payload's steps running (LearnerWorker.train(wait=False)); progress: the run's, for the
        learning-rate decay (DriverConfig.progress). Answers {"diags": [...], "lost":
        [why, ...] for samples lost with their rollout actor, "step": the learner step with queued steps,
        "starved": why the run cannot go on when every recent payload was bad (LearnerWorker.starved), else None,
        "checkpoints": the periodic checkpoints taken (LearnerWorker.take_checkpoints), for the monitor to write}."""
        t0 = time.perf_counter()
        sec = self._ray_seconds
        if self._last_return is not None:
            sec["idle_s"] += t0 - self._last_return
        payloads, lost = [], []
        for ref in refs:
            try:
                payloads.append(ray.get(ref))
            except ray.exceptions.RayError as err:
                lost.append(f"{type(err).__name__}: {err}"[:500])
        sec["fetch_s"] += time.perf_counter() - t0
        sec["calls"] += 1
        diags = self.train(payloads, wait=False, stop_at=stop_at, progress=progress)
        self._last_return = time.perf_counter()
        return {
            "diags": diags,
            "lost": lost,
            "step": self.step,
            "starved": self.starved(),
            "checkpoints": self.take_checkpoints(),
        }

    def drain_answer(self) -> dict:
        """drain() in update_from's answer format."""
        return {"diags": self.drain(), "lost": [], "step": self.step, "checkpoints": self.take_checkpoints()}

    def timings(self) -> dict[str, float]:
        return {**super().timings(), **self._ray_seconds}


def cluster_has_gpu() -> bool:
    return ray.cluster_resources().get("GPU", 0) >= 1


def rollout_cpus(n_workers: int) -> float:
    """CPUs reserved per rollout actor: one each when the cluster has room beside the learner, else a share
    (a 2-core laptop runs the learner and two workers on ray.init(num_cpus=2))."""
    free = ray.cluster_resources().get("CPU", 1.0) - LEARNER_CPUS
    return max(0.05, min(1.0, _share_down(free / max(n_workers, 1), 2)))


ROLLOUT_GPU_SHARE = 0.5
"""Of one GPU, what the rollout actors share between them when their policies act on it (the learner has the rest)."""


def gpu_shares(rollout: RolloutConfig, n_workers: int, has_gpu: bool) -> tuple[float, float]:
    """(learner's GPUs, each rollout actor's GPUs): a whole GPU for the learner unless the rollout policies act on
    the GPU too (policy_device 'auto' or 'cuda' on a cluster with one), then the learner and the rollout actors
    share one: Ray shows a GPU only to an actor that asked for a share of it."""
    if not has_gpu:
        return 0.0, 0.0
    if rollout.policy_device == "cpu":
        return 1.0, 0.0
    return 1.0 - ROLLOUT_GPU_SHARE, _share_down(ROLLOUT_GPU_SHARE / max(n_workers, 1), 4)


def _share_down(x: float, places: int) -> float:
    """x rounded down to `places` decimals (Ray counts a resource in units of 0.0001): n actors asking for a share
    of a total each then fit in it together. Rounded to nearest they need not: 0.5 / 12 = 0.0417 makes twelve
    rollout actors ask for 0.5004 GPU beside the learner's 0.5, so the twelfth never starts and the run trains on
    the other eleven's payloads only (tests/test_remote.py)."""
    scale = 10**places
    return math.floor(x * scale + 1e-9) / scale


def learner_actor(*, gpus: float, resources: dict[str, float] | None = None):
    """The learner actor's class: LEARNER_CPUS, `gpus`, and any custom resources (DriverConfig.learner_resources)."""
    return ray.remote(num_cpus=LEARNER_CPUS, num_gpus=gpus, resources=dict(resources or {}))(RayLearnerWorker)


class WeightsInCalls:
    """What makes RolloutWorker a restartable rollout actor: its weights come with each sample call, not with its
    constructor. An ObjectRef among an actor's constructor arguments is not kept for the actor's restarts (Ray logs
    an error-level line for every such actor: ray-project/ray#53727); a call's arguments are kept until the call
    is done, its retries on a restarted actor included."""

    def sample_on(self, weights: list) -> object:
        """sample(), after loading weights[0] (a ref of Learner.policy_weights(), nested in a list so that Ray
        passes the ref and does not fetch it) when this actor has no policy yet: its first call, or its first after
        Ray restarted it (the constructor ran again). Other calls never read it: their weights come by
        set_weights."""
        if self.policy is None:
            self.set_weights(ray.get(weights[0]))
        return self.sample()


def rollout_actor(*, cpus: float, gpus: float = 0.0, max_restarts: int):
    """The rollout actor's class: RolloutWorker (as this module names it when called: the tests swap in subclasses)
    with WeightsInCalls, `cpus` and `gpus`, restarted up to max_restarts times, its calls retried as often."""
    cls = type(RolloutWorker.__name__, (WeightsInCalls, RolloutWorker), {"__module__": RolloutWorker.__module__})
    return ray.remote(num_cpus=cpus, num_gpus=gpus, max_restarts=max_restarts, max_task_retries=max_restarts)(cls)


class MonitorSilent(RuntimeError):
    """The monitor actor has not answered within DriverConfig.monitor_timeout_s (alive but silent: stopped, hung):
    the driver ends the run, writing what is left of it itself (foxhunt_ray.loops)."""

    def __init__(self, waited_s: float, timeout_s: float, what: str):
        super().__init__(
            f"the monitor actor (it writes diag.jsonl, summary.json and the checkpoints) answered nothing in "
            f"{waited_s:.0f} s {what} (stopped or hung; --monitor-timeout-s, {timeout_s:g} s, sets the wait)"
        )
        self.waited_s, self.timeout_s = waited_s, timeout_s


MONITOR_EXIT_WAIT_S = 15.0
"""How long take_over waits for a killed monitor actor's process to be gone (Ray ends a stopped one within about 5
s) before it sends SIGKILL itself; then as long again."""


class MonitorHandle:
    """The driver's side of the monitor actor, with the calls the driver makes on a plain Monitor. After
    `take_over` those calls go to a RayMonitor in the driver's own process."""

    timeout_s: float = 0.0
    """How long a call of the driver's own (finish, keep_checkpoint's answer) may wait for the actor (0: for ever);
    the loop sets it (DriverConfig.monitor_timeout_s)."""

    def __init__(self, *args, **kwargs):
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        self.actor = ray.remote(num_cpus=0, scheduling_strategy=here)(RayMonitor).remote(*args, **kwargs)
        ray.get(self.actor.ready.remote())  # a bad baseline or diag file raises here, as the plain Monitor does
        self.pid = ray.get(self.actor.pid.remote())
        self._args, self._kwargs = args, kwargs
        self.local: RayMonitor | None = None  # the driver's own, once it took over the run folder
        self.last: dict | None = None
        self.exit_code: int | None = None

    def get(self, refs, what: str):
        """ray.get of the monitor actor's answers within `timeout_s` (counted from now), else MonitorSilent."""
        if not self.timeout_s:
            return ray.get(refs)
        try:
            return ray.get(refs, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise MonitorSilent(self.timeout_s, self.timeout_s, what) from None

    def take_over(self) -> RayMonitor | None:
        """Kills the monitor actor, waits until its process is gone (a stopped process that went on later would
        write into the run folder beside this one), and opens a RayMonitor on the run folder in this process: it
        keeps every whole line of diag.jsonl (a torn last one is cut off), the kill rules' state, and writes the
        checkpoints and summary.json from here on (finish, close go to it). None when the process cannot be ended:
        the run folder is then left as the actor left it."""
        ray.kill(self.actor, no_restart=True)
        try:  # a stopped process (kill -STOP) takes Ray's kill once continued: it exits at once, not seconds later
            os.kill(self.pid, signal.SIGCONT)
        except (ProcessLookupError, PermissionError):
            pass
        if not _end_process(self.pid):
            return None
        run_dir = Path(self._args[0])
        from actors.files import remove_tmp_files

        remove_tmp_files(run_dir)  # what the killed actor was writing: nothing else writes the folder now
        self.local = RayMonitor(*self._args, **{**self._kwargs, "resume_at": None})
        self.last = self.local.last
        return self.local

    def record_update(self, update_ref) -> ray.ObjectRef:
        """The monitor's answer (see RayMonitor.record_update) once the learner's update behind the ref is done;
        actor tasks from one caller run in order, so lines are appended in step order."""
        return self.actor.record_update.remote(update_ref)

    def keep_checkpoint(self, checkpoint_ref) -> ray.ObjectRef:
        """The checkpoint behind the ref (the learner's `checkpoint()`) written into the run folder: its path."""
        return self.actor.keep_checkpoint.remote(checkpoint_ref)

    def finish(self, status: str = "done", message: str | None = None) -> int:
        if self.local is not None:
            self.exit_code = self.local.finish(status, message)
        else:
            self.exit_code = self.get(self.actor.finish.remote(status, message), "writing summary.json")
        return self.exit_code

    def timings(self) -> dict:
        """The monitor's timings (RayMonitor.timings), from the actor or the driver's own monitor."""
        if self.local is not None:
            return self.local.timings()
        return ray.get(self.actor.timings.remote(), timeout=60)

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
            return
        try:
            ray.get(self.actor.close.remote(), timeout=min(self.timeout_s or 60, 60))
        except ray.exceptions.RayError:  # silent or gone: killed below all the same, its files are whole
            pass
        finally:
            ray.kill(self.actor)


def _end_process(pid: int) -> bool:
    """Whether the process `pid` (a killed actor's, on this node) is gone, as it must be before the driver writes
    what it wrote: ray.kill asks the actor to exit, which a stopped process cannot do, and Ray kills it some
    seconds later; after MONITOR_EXIT_WAIT_S this sends SIGKILL itself and waits as long again (a process in an
    uninterruptible wait, a hung disk, may outlast even that)."""
    for last in (False, True):
        deadline = time.monotonic() + MONITOR_EXIT_WAIT_S
        while time.monotonic() < deadline:
            if _gone(pid):
                return True
            time.sleep(0.05)
        if last:
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
    return False


def _gone(pid: int) -> bool:
    """Whether process pid has ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc here: ask the process itself
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

"""The loops that run a resolved Plan (foxhunt_ray.driver): serial (every role in this process) and Ray.

Both feed every learner step's diag dict to the Monitor: in serial mode a plain Monitor in this process; in
Ray mode the monitor actor, which takes each update's answer from the learner actor by reference and tells
the driver of a kill in the answer the driver waits on. The learner worker checkpoints every M updates by
itself; the loops broadcast weights every K updates and keep a checkpoint at the end, on a kill and on Ctrl-C
(or SIGTERM).

Ray mode waits with `ray.wait` on every outstanding sample and on the oldest in-flight update (two at most:
one running on the learner actor, one queued, so the learner never waits for the driver); payloads go from a
rollout actor to the learner actor by reference, never through the driver.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from actors.learner_worker import LearnerWorker
from actors.monitor import Monitor
from actors.rollout import EPISODE_RETURN_MEAN, PNL_CUM_USD, RolloutWorker

if TYPE_CHECKING:
    from actors.kill_rules import KillDecision
    from foxhunt_ray.driver import Plan
    from foxhunt_ray.remote import MonitorHandle

RESUME_SEED_STRIDE = 1_000_003  # a resumed run's rollout workers get fresh books, not the run's first episodes


class Progress:
    """The progress line: updates, env steps/s, qpa_ema, pnl (the market) or the mean episode return (any other
    env); at most one line every `every_s` seconds."""

    def __init__(self, plan: Plan, every_s: float = 2.0):
        self.total, self.quiet, self.every_s = plan.driver.steps, plan.quiet, every_s
        self.start = self.last_print = time.monotonic()
        self.env0: int | None = None
        self.shown_step = -1

    def show(self, rec: dict, force: bool = False) -> None:
        now = time.monotonic()
        if rec["step"] == self.shown_step:
            return
        env = int(rec.get("env_steps", 0))
        if self.env0 is None:
            self.env0 = env
        if self.quiet or (not force and now - self.last_print < self.every_s):
            return
        self.last_print, self.shown_step = now, rec["step"]
        elapsed = max(now - self.start, 1e-9)
        if PNL_CUM_USD in rec:
            outcome = f"pnl ${rec[PNL_CUM_USD]:,.0f}"
        else:
            outcome = f"return {rec.get(EPISODE_RETURN_MEAN, float('nan')):.1f} (last 100 episodes)"
        print(
            f"[{elapsed:7.1f}s] update {rec['step']}/{self.total}  env steps {env:,} "
            f"({(env - self.env0) / elapsed:,.0f}/s)  qpa_ema {rec.get('qpa_ema', float('nan')):+.3f}  {outcome}",
            flush=True,
        )


def worker_seed(plan: Plan) -> int:
    return plan.config.seed + plan.resume_step * RESUME_SEED_STRIDE


def learner_kwargs(plan: Plan) -> dict:
    return dict(
        obs_dim=plan.spaces.obs_dim,
        n_actions=plan.spaces.n_actions,
        has_pnl=plan.spaces.has_pnl,
        run_dir=str(plan.run_dir),
        seed=plan.config.seed,
        checkpoint_every=plan.driver.checkpoint_every,
    )


def worker_kwargs(plan: Plan, worker_index: int) -> dict:
    cfg = plan.config
    return dict(
        worker_index=worker_index,
        seed=worker_seed(plan),
        fold=plan.driver.fold,
        env_id=cfg.env_id,
        env_kwargs=cfg.env_kwargs,
    )


Hook = Callable[[int, list], None]
"""Test hook: called with (step, rollout worker handles) after each recorded step."""


def run_serial(plan: Plan, monitor: Monitor, progress: Progress, hook: Hook | None = None) -> int:
    """Every role in this process: the loop of docs/system.md with checkpoints and resume."""
    import torch

    cfg, drv = plan.config, plan.driver
    learner = LearnerWorker(cfg.learner, **learner_kwargs(plan))
    if plan.checkpoint is not None:
        learner.load(plan.checkpoint)
    # serial: the rollout workers must not shrink this process's torch threads (set_num_threads is global)
    rollout = dataclasses.replace(cfg.rollout, torch_threads=torch.get_num_threads())
    weights = learner.policy_weights()
    workers = [
        RolloutWorker(rollout, cfg.market, weights=weights, **worker_kwargs(plan, i))
        for i in range(drv.rollout_workers)
    ]
    code, i, start = None, 0, time.monotonic()
    try:
        while learner.step < drv.steps and not drv.out_of_time(start):
            diag = learner.update(workers[i % len(workers)].sample())
            i += 1
            if diag is None:  # a bad payload: counted by the decoder, no step
                continue
            if (code := _record(monitor, progress, diag)) is not None:
                break
            if hook is not None:
                hook(learner.step, workers)
            if learner.step % drv.broadcast_every == 0:
                weights = learner.policy_weights()
                for w in workers:
                    w.set_weights(weights)
    except KeyboardInterrupt:
        learner.checkpoint()
        print(f"interrupted at update {learner.step}: checkpoint kept in {plan.run_dir}", file=sys.stderr)
        return monitor.finish("stopped", "interrupted by the user (Ctrl-C)")
    finally:
        for w in workers:
            w.stop()
    learner.checkpoint()
    return code if code is not None else monitor.finish("done")


def run_ray(plan: Plan, monitor: MonitorHandle, progress: Progress, hook: Hook | None = None) -> int:
    """Rollout actors, the learner actor and the monitor actor, driven with ray.wait."""
    import ray

    from foxhunt_ray import remote

    cfg, drv = plan.config, plan.driver
    learner = remote.learner_actor(gpu=remote.cluster_has_gpu()).remote(cfg.learner, **learner_kwargs(plan))
    workers: list = []
    try:
        if plan.checkpoint is not None:
            ray.get(learner.load.remote(str(plan.checkpoint)))
        weights = learner.policy_weights.remote()  # one object in the store, shared by every worker
        cls = remote.rollout_actor(cpus=remote.rollout_cpus(drv.rollout_workers), max_restarts=drv.max_worker_restarts)
        # a restarted actor reruns its constructor: with these weights it can sample at once
        workers = [
            cls.remote(cfg.rollout, cfg.market, weights=weights, **worker_kwargs(plan, i))
            for i in range(drv.rollout_workers)
        ]
        return _drive(plan, monitor, progress, learner, workers, hook)
    except KeyboardInterrupt:
        try:
            ray.get(learner.checkpoint.remote(), timeout=60)
            print(f"interrupted: checkpoint kept in {plan.run_dir}", file=sys.stderr)
        except Exception as err:  # the actors may be gone with the same Ctrl-C; the periodic checkpoint stays
            print(f"interrupted: no final checkpoint ({err}); the last periodic one stays", file=sys.stderr)
        return monitor.finish("stopped", "interrupted by the user (Ctrl-C)")
    finally:
        for handle in [*workers, learner]:
            ray.kill(handle)


MAX_UPDATES_IN_FLIGHT = 2  # one running on the learner, one queued: the learner never waits for the driver
MAX_LOST_IN_A_ROW = 8


def _drive(plan: Plan, monitor: MonitorHandle, progress: Progress, learner, workers: list, hook: Hook | None) -> int:
    import ray

    drv = plan.driver
    samples = {w.sample.remote(): i for i, w in enumerate(workers)}
    updates: list = []  # in submission order; the actor runs them in that order
    dispatched, lost_in_a_row, code, start = plan.resume_step, 0, None, time.monotonic()
    while (more := dispatched < drv.steps and not drv.out_of_time(start)) or updates:
        can_dispatch = more and len(updates) < MAX_UPDATES_IN_FLIGHT
        wait_on = ([*samples] if can_dispatch else []) + updates[:1]
        (ready,), _ = ray.wait(wait_on, num_returns=1)
        if updates and ready == updates[0]:
            updates.pop(0)
            answer = ray.get(ready)  # ready: this does not block
            if "skipped" in answer:
                diag = answer["skipped"]
                dispatched -= 1  # no step: a bad payload (counted in bad_payloads) or a sample a dead actor lost
                lost_in_a_row = lost_in_a_row + 1 if diag is not None else 0
                if lost_in_a_row > MAX_LOST_IN_A_ROW:
                    raise RuntimeError(f"{lost_in_a_row} samples lost in a row: {diag['lost_sample']}")
                continue
            lost_in_a_row = 0
            monitor.last, decision = answer["record"], answer["decision"]
            if (code := _report(monitor, progress, decision)) is not None:
                ray.get(updates)  # the updates still queued end as {"after_end"}: fetched, none left unread
                break
            step = int(monitor.last["step"])
            if hook is not None:
                hook(step, workers)
            if step % drv.broadcast_every == 0:
                weights = learner.policy_weights.remote()
                for w in workers:
                    w.set_weights.remote(weights)
        else:
            i = samples.pop(ready)
            # nested: the learner fetches the payload itself; the monitor actor takes the learner's answer
            updates.append(monitor.record_update(learner.update_from.remote([ready])))
            dispatched += 1
            samples[workers[i].sample.remote()] = i
    ray.get(learner.checkpoint.remote())
    return code if code is not None else monitor.finish("done")


def _record(monitor: Monitor, progress: Progress, diag: dict) -> int | None:
    return _report(monitor, progress, monitor.record(diag))


def _report(monitor: Monitor | MonitorHandle, progress: Progress, decision: KillDecision | None) -> int | None:
    """The progress line for the monitor's last record; on a kill, says which rule and returns the exit code."""
    progress.show(monitor.last, force=decision is not None)
    if decision is not None:
        print(f"killed by rule {decision.rule} at update {decision.step}: {decision.message}", file=sys.stderr)
        monitor.exit_code = decision.exit_code
        return decision.exit_code
    return None

"""The Ray loop: rollout actors, the learner actor and the monitor actor, driven with `ray.wait` (foxhunt_ray.loops
has what it shares with the serial loop, and its constants, read there when used: a test may set them).
foxhunt_ray.schedule.Schedule holds where each payload is; `_Drive` waits, dispatches and watches the deadlines."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from actors.checkpoints import latest_checkpoint
from foxhunt_ray import loops
from foxhunt_ray.loops import (
    LEARNER_NAME,
    Hook,
    LearnerLost,
    Progress,
    StopSignals,
    _report,
    _rollout_totals,
    _starved,
    _stop_line,
    _stop_message,
    interrupts_after,
    learner_kwargs,
    steps_per_payload,
    worker_kwargs,
    write_timings,
)
from foxhunt_ray.schedule import Schedule

if TYPE_CHECKING:
    from foxhunt_ray.plan import Plan
    from foxhunt_ray.remote import MonitorHandle


def run_ray(
    plan: Plan, monitor: MonitorHandle, progress: Progress, hook: Hook | None = None, stop: StopSignals | None = None
) -> int:
    """Rollout actors, the learner actor and the monitor actor, driven with ray.wait. Raises LearnerLost when the
    learner actor dies. A monitor actor silent for drv.monitor_timeout_s ends the run (_Drive.monitor_silent)."""
    import uuid

    import ray

    from foxhunt_ray import remote
    from foxhunt_ray.monitor_actor import MonitorDied

    cfg, drv = plan.config, plan.driver
    learner_gpus, worker_gpus = remote.gpu_shares(cfg.rollout, drv.rollout_workers, remote.cluster_has_gpu())
    name = f"{LEARNER_NAME} {plan.run_dir} {uuid.uuid4().hex[:8]}"
    cls = remote.learner_actor(gpus=learner_gpus, resources=drv.learner_resources)
    learner = cls.options(name=name).remote(cfg.learner, **learner_kwargs(plan))
    workers: list = []
    stop = stop or StopSignals()
    monitor.timeout_s = drv.monitor_timeout_s
    drive = _Drive(plan, monitor, progress, learner, hook, stop)
    lost = False
    try:
        if plan.checkpoint is not None:  # its bytes, read here: the learner's node may not see the run folder
            ray.get(learner.load.remote(plan.checkpoint.read_bytes()))
        drive.weights = learner.policy_weights.remote()  # one object in the store, shared by every worker
        cls = remote.rollout_actor(
            cpus=remote.rollout_cpus(drv.rollout_workers), gpus=worker_gpus, max_restarts=drv.max_worker_restarts
        )
        # no weights in the constructor: a restarted actor reruns it, and loads the weights its next sample brings
        workers = [cls.remote(cfg.rollout, cfg.market, **worker_kwargs(plan, i)) for i in range(drv.rollout_workers)]
        drive.workers = workers
        stop.arm()  # a signal that came while the actors started stops the run here
        return drive.run()
    except ray.exceptions.RayActorError as err:  # also a call whose input was the dead learner's answer
        if monitor.local is None and getattr(err, "actor_id", None) == monitor.actor._actor_id.hex():
            return drive.monitor_silent(MonitorDied(err))  # its process ended: taken over as a silent one is
        if getattr(err, "actor_id", None) != learner._actor_id.hex():
            raise
        lost = True
        raise LearnerLost(f"{type(err).__name__} at update {drive.last_step()}") from err
    except KeyboardInterrupt:  # a stop signal (StopSignals), or Ctrl-C where none is installed
        progress.end_line()
        try:
            return drive.stop_run()
        except remote.MonitorSilent as err:
            return drive.monitor_silent(err)
    except remote.MonitorSilent as err:
        return drive.monitor_silent(err)
    except LearnerLost:  # killed by the loop's watchdog at the run's end (_Drive._get_learner)
        lost = True
        raise
    except Exception:
        _catch_up(monitor)
        raise
    finally:
        stop.ending()
        try:
            if lost:  # the next run of the loop (a resume in this process) writes them
                raise RuntimeError("the learner actor died")
            # a worker answers once its sample in flight is done (asked at the loop's end, while the learner drains
            # and checkpoints): those that do not within loops.WORKER_TIMINGS_WAIT_S are left out
            asked = drive.worker_timings or [w.timings.remote() for w in workers]
            answered, _ = ray.wait(asked, num_returns=len(asked), timeout=loops.WORKER_TIMINGS_WAIT_S)
            roles = {
                "learner": ray.get(learner.timings.remote(), timeout=60),
                "rollout": _rollout_totals(ray.get(answered)),
                "monitor": monitor.timings(),
                "driver": drive.seconds,
            }
            write_timings(plan, drive.wall_s(), roles, ray.get(drive.snapshots, timeout=60))
        except Exception as err:  # actors lost with the run's failure: no timings, the run's own outcome stands
            if not lost:
                print(f"no timings.json: {type(err).__name__}: {err}"[:300], file=sys.stderr)
        for handle in [*workers, learner]:
            ray.kill(handle)



def _catch_up(monitor: MonitorHandle) -> None:
    """After a call failed: the driver's last record becomes the monitor actor's. The actor may have written lines
    of an answer the driver never got (a full disk at the checkpoint after them), and the error message names the
    update diag.jsonl ends with."""
    import ray

    if monitor.local is not None:  # the driver took the run folder over (MonitorHandle.take_over)
        monitor.last = monitor.local.last
        return
    try:
        monitor.last = ray.get(monitor.actor.last_record.remote(), timeout=60)
    except ray.exceptions.RayError:  # the monitor actor is gone too: the driver's last record stands
        pass


class _Drive:
    """The Ray loop. Each rollout actor has one sample in flight; finished samples wait in `ready` until the
    learner actor takes them in a call, all at once or at most `drv.max_payloads_per_call` of them, oldest first
    (at most MAX_CALLS_IN_FLIGHT calls queued on it). A worker
    whose sample finishes while `drv.max_payloads_waiting` payloads already wait for the learner (ready or in a
    call), or while `drv.max_payloads_ahead` (when set) are being sampled or waiting, idles until the learner
    catches up: that bounds the policy lag (docs/system.md, "Policy lag"). Idle workers are asked again in the
    order they went idle, while there is room: all at once under the waiting bound alone (then they sample on one
    weights version, in lockstep), one per payload the learner finishes under the ahead bound. Broadcast
    weights go to the rollout actors once the learner has made them, never as a pending ref that would hold up
    an actor's next sample. A sample in
    flight longer than `drv.sample_timeout_s` (STARTUP_GRACE_S for an actor's first) has its actor killed for Ray to
    restart it (`_restart_silent`); a learner call whose own answer (`update_from`'s, not the monitor's that records
    it) has not come for `drv.learner_timeout_s` has the learner actor killed, for the driver to replace it as one
    that died (`_kill_stuck_learner`); a monitor answer not back `drv.monitor_timeout_s` after the monitor could
    start on it (the learner's answer ready and the monitor's previous answer back) raises MonitorSilent, and the
    driver ends the run writing the run folder itself (`monitor_silent`): a silent monitor is named as such, and
    the learner is never blamed for the time it waits on it."""

    def __init__(self, plan: Plan, monitor, progress: Progress, learner, hook: Hook | None, stop: StopSignals):
        self.plan, self.monitor, self.progress, self.learner, self.hook = plan, monitor, progress, learner, hook
        self.stop = stop
        self.schedule = Schedule(plan.driver, steps_per_payload(plan.config), plan.resume_step)
        self.calls = self.schedule.calls  # (monitor's answer ref, payloads in it, learner's answer ref), oldest first
        self.asked_weights = None  # weights asked of the learner, sent on once made: an actor runs its calls in order
        self.broadcast_at = plan.resume_step  # the step of the last broadcast
        self.lost_in_a_row = 0  # samples lost with their rollout actors since the last payload trained on
        self.learner_done: dict = {}  # a call's monitor answer ref -> when its learner answer was seen ready
        self.learner_answered = False  # this learner has answered a call (its start's grace is over)
        self.monitor_free_at = time.monotonic()  # when the monitor's previous answer came back
        self.workers: list = []
        self.seconds = {"wait_s": 0.0, "dispatch_s": 0.0, "answers": 0.0}
        self.snapshots: list = []  # refs of the learner's timings at half the time limit and at the loop's end
        self.worker_timings: list = []  # refs of the rollout workers' timings, asked at the loop's end
        self.restarts: dict[int, int] = {}  # rollout actor index -> kills for a sample past drv.sample_timeout_s
        self.starting: set[int] = set()  # rollout actors that have returned no sample since they were (re)started
        self.first_sample_at: float | None = None  # when the first sample of this loop came back (time.monotonic)
        self.named_late: set[int] = set()  # rollout actors _warn_late has named
        self.call_sent: dict = {}  # a learner call's answer ref -> when it was sent (time.monotonic)
        self.weights = None  # the ref of the newest policy weights the learner has made, sent with every sample call
        self.start = time.monotonic()
        self.end: float | None = None

    def wall_s(self) -> float:
        return (self.end or time.monotonic()) - self.start

    def last_step(self) -> int:
        """The newest step the monitor recorded in this run of the loop (its resume step before the first)."""
        last = getattr(self.monitor, "last", None)
        return int(last["step"]) if last else self.plan.resume_step

    def stop_run(self) -> int:
        """The stop (StopSignals): the steps the learner has queued are finished and recorded, then kept in a stop
        checkpoint, and summary.json says 'stopped'. A third signal abandons the wait: the learner actor is
        killed, so that the monitor's calls waiting on its answers fail at once instead of holding summary.json
        back (a checkpoint the monitor is already writing is finished)."""
        import ray

        monitor, learner, stop = self.monitor, self.learner, self.stop
        kept, why = False, ""
        try:
            if not stop.abandoned:
                drained = ray.get(monitor.record_update(learner.drain_answer.remote()), timeout=60)
                if drained.get("n"):
                    monitor.last = drained["record"]
                ray.get(monitor.keep_checkpoint(learner.checkpoint.remote()), timeout=120)
                kept = True
        except KeyboardInterrupt:  # a third signal (StopSignals)
            pass
        except Exception as err:  # the actors may be gone with the same signal; the periodic checkpoints stay
            why = f" ({type(err).__name__}: {err})"[:300]
        stop.ending()
        if not kept:
            ray.kill(learner)
        code = monitor.finish("stopped", _stop_message(stop))
        print(_stop_line(self.plan, self.last_step(), kept, stop) + why, file=sys.stderr, flush=True)
        return code

    def monitor_silent(self, silent: Exception) -> int:
        """The monitor actor answered nothing for drv.monitor_timeout_s (MonitorSilent): the run ends with exit 1
        and the run folder whole. The actor is killed (its process gone), and the driver takes the run folder
        over (MonitorHandle.take_over): it records the learner's answers the actor never recorded (the calls in
        flight, the drain), in order and each step once, keeps a final checkpoint at the learner's step and writes
        summary.json 'error' naming the monitor and --monitor-timeout-s. A kill the driver already knew of stands
        (exit 3). The learner, healthy, is not replaced; one stuck as well (--learner-timeout-s) is killed and
        what it held is lost (the newest checkpoint stays). A monitor actor that died (MonitorDied) ends the same
        way."""
        from foxhunt_ray.remote import MonitorSilent

        plan, monitor, learner = self.plan, self.monitor, self.learner
        self.stop.ending()
        self.progress.end_line()
        print(
            f"warning: {silent}: {'killing it; ' if isinstance(silent, MonitorSilent) else ''}the driver records what "
            "the learner holds, keeps a checkpoint and ends the run",
            file=sys.stderr,
            flush=True,
        )
        known = monitor.exit_code  # a kill the driver already reported: its summary.json stands
        local = monitor.take_over()
        if local is None:
            print(
                f"error: {silent}; its process {monitor.pid} could not be ended, so the driver leaves "
                f"{plan.run_dir} as it is (diag.jsonl whole lines, its checkpoints whole, summary.json not written)",
                file=sys.stderr,
                flush=True,
            )
            monitor.exit_code = known if known is not None else 1
            return monitor.exit_code
        held = [u for _, _, u in self.calls]
        self.calls.clear()
        learner_ok = True
        if known is None:
            for update in [*held, learner.drain_answer.remote()]:
                answer = self._learner_answer(update)
                if answer is None:
                    learner_ok = False
                    break
                answer = {**answer, "diags": [d for d in answer["diags"] if d["step"] > local.last_step]}
                recorded = local.record_update(answer)
                if recorded.get("n"):
                    monitor.last = recorded["record"]
                if recorded.get("decision") is not None:
                    known = _report(monitor, self.progress, recorded["decision"])
        if learner_ok and (checkpoint := self._learner_answer(learner.checkpoint.remote())) is not None:
            local.keep_checkpoint(checkpoint)
        if known is not None:
            return known
        step = local.last_step
        newest = latest_checkpoint(plan.run_dir)
        if newest and newest[0] == step:
            where = "a checkpoint there"
        else:
            where = f"its newest checkpoint at update {newest[0]}" if newest else "no checkpoint"
        message = (
            f"{silent}: the run stopped after update {step}; the driver killed the monitor actor and wrote diag.jsonl "
            f"(whole lines, every step once), {where} and this summary itself; resume with --resume {plan.run_dir}"
        )
        print(f"error: {message}", file=sys.stderr, flush=True)
        return monitor.finish("error", message)

    def _learner_answer(self, ref):
        """The learner's answer behind ref within _learner_wait, or None (the learner stuck too: killed, told on
        stderr; or dead)."""
        import ray

        timeout = self._learner_wait()
        try:
            return ray.get(ref, timeout=timeout or None)
        except ray.exceptions.GetTimeoutError:
            print(
                f"warning: the learner actor answered nothing in {timeout:g} s either (--learner-timeout-s): killed; "
                "what it held is lost",
                file=sys.stderr,
                flush=True,
            )
            ray.kill(self.learner)
        except ray.exceptions.RayError as err:
            print(f"warning: the learner actor's answer is lost ({type(err).__name__})", file=sys.stderr, flush=True)
        return None

    def run(self) -> int:
        import ray

        drv, sched, learner = self.plan.driver, self.schedule, self.learner
        self.starting = set(range(len(self.workers)))
        for i in range(len(self.workers)):
            if sched.room():
                self.ask(i)
            else:
                sched.idle.append(i)
        code, starved = None, None
        self.start = self.monitor_free_at = time.monotonic()
        while True:
            t0 = time.monotonic()
            more = sched.wanted(self.start)
            if more and sched.ready and len(sched.calls) < loops.MAX_CALLS_IN_FLIGHT:
                self._send_call(sched.take(), t0)
                continue
            if not sched.calls and not (more and sched.samples):
                break
            wait_on = ([*sched.samples] if more else []) + [c for c, _, _ in sched.calls[:1]]
            watched = self._watched()  # the oldest call whose learner answer is not in yet (for the watchdogs)
            if watched is not None:
                wait_on.append(watched[2])
            if self.asked_weights is not None:
                wait_on.append(self.asked_weights)
            timeout = self._wait_timeout(sched.samples if more else {}, sched.asked, watched)
            found, _ = ray.wait(wait_on, num_returns=1, timeout=timeout)
            t1 = time.monotonic()
            self.seconds["wait_s"] += t1 - t0
            if not found:  # a sample, the learner or the monitor past its deadline, or the time limit: look again
                self._restart_silent(sched.samples, sched.asked, t1)
                self._kill_stuck_learner(watched[0] if watched else None, t1)
                self._check_monitor(t1)
                continue
            (done,) = found
            if watched is not None and done == watched[2]:  # the learner answered: from now on the monitor's turn
                self.learner_done[watched[0]] = t1
                self.learner_answered = True
                continue
            if drv.time_limit_s and not self.snapshots and t1 - self.start >= drv.time_limit_s / 2:
                self.snapshots.append(learner.timings.remote())  # queued behind the calls: no wait here
            if done == self.asked_weights:
                for w in self.workers:
                    w.set_weights.remote(self.asked_weights)
                self.weights, self.asked_weights = self.asked_weights, None
            elif sched.calls and done == sched.calls[0][0]:
                outcome = self._answered(done, t1)
                if outcome == "next":
                    continue
                if outcome is not None:
                    code, starved = outcome
                    break
            else:
                i = sched.came_back(done)
                self.starting.discard(i)
                self._warn_late(sched.samples, t1)
                if more and sched.room():
                    self.ask(i)
                else:
                    sched.idle.append(i)
            self.seconds["dispatch_s"] += time.monotonic() - t1
        return self._finish(code, starved)

    def ask(self, i: int) -> None:
        """Rollout actor i asked for its next sample, with the newest weights (read by an actor with no policy yet:
        new or restarted)."""
        self.schedule.asking(self.workers[i].sample_on.remote([self.weights]), i)

    def resume_idle(self) -> None:
        """Idle actors asked again, in the order they went idle, while there is room; an actor idle while no more
        samples are wanted stays idle: none is wasted."""
        sched = self.schedule
        while sched.idle and sched.room() and sched.wanted(self.start):
            self.ask(sched.idle.pop(0))

    def _send_call(self, take: list, t0: float) -> None:
        """A learner call on the payloads `take` (the learner fetches them itself), and the monitor's call that
        records its answer, sent both or neither."""
        drv, sched = self.plan.driver, self.schedule
        progress = drv.progress(sched.dispatched(), self.start)
        with interrupts_after(self.stop):  # the learner's call and the monitor's both sent, or neither
            update = self.learner.update_from.remote(take, drv.steps, progress)
            answer = self.monitor.record_update(update)
        sched.calls.append((answer, len(take), update))
        self.call_sent[answer] = time.monotonic()
        self.seconds["dispatch_s"] += time.monotonic() - t0

    def _answered(self, done, t1: float):
        """The monitor's answer to the oldest call, `done`: "next" (look again at once), None (go on), or the loop's
        end as (exit code or None, the starved message or None)."""
        import ray

        drv, sched, monitor = self.plan.driver, self.schedule, self.monitor
        answer = ray.get(done)  # ready: this does not block (a dead monitor's raises: the call stays held)
        sched.calls.pop(0)
        self.call_sent.pop(done, None)
        self.learner_done.pop(done, None)
        self.learner_answered, self.monitor_free_at = True, t1
        self.seconds["answers"] += 1
        sched.learner_step = answer["step"]
        for why in answer["lost"]:  # a sample lost with its rollout actor: no step
            self.lost_in_a_row += 1
            if self.lost_in_a_row > loops.MAX_LOST_IN_A_ROW:
                raise RuntimeError(f"{self.lost_in_a_row} samples lost in a row: {why}")
        if answer.get("starved") and not answer.get("after_end"):
            self._end_calls()  # the queued calls finish before the learner checkpoints
            return None, answer["starved"]  # the run ends once the learner's queued steps are recorded
        if answer.get("after_end") or not answer["n"]:
            self.resume_idle()
            return "next"
        self.lost_in_a_row = 0
        monitor.last = answer["record"]
        if (code := _report(monitor, self.progress, answer["decision"])) is not None:
            self._end_calls()  # answers queued behind the kill end as after_end
            return code, None
        step = int(monitor.last["step"])
        if self.hook is not None:
            self.hook(step, self.workers)
        if step // drv.broadcast_every > self.broadcast_at // drv.broadcast_every and self.asked_weights is None:
            self.broadcast_at = step
            self.asked_weights = self.learner.policy_weights.remote()  # sent on once ready (run)
        self.resume_idle()
        return None

    def _finish(self, code: int | None, starved: str | None) -> int:
        """The loop's end: the learner's timings, the steps it still runs recorded (perhaps a kill among them), a
        starved run's error, the final checkpoint kept and summary.json."""
        monitor, learner = self.monitor, self.learner
        if len(self.snapshots) == 1:
            self.snapshots.append(learner.timings.remote())
        self.worker_timings = [w.timings.remote() for w in self.workers]
        if code is None:  # the steps the learner still runs: their lines, and perhaps a kill among them
            drain = learner.drain_answer.remote()
            self.calls.append((monitor.record_update(drain), 0, drain))  # held, as a call's, for monitor_silent
            (answer,) = self._end_calls()
            if answer.get("n"):
                monitor.last = answer["record"]
                code = _report(monitor, self.progress, answer["decision"])
        if code is None and starved is not None:  # after the last good payload's lines (train(wait=False) held them)
            code = _starved(monitor, self.progress, starved)
        self.end = time.monotonic()
        checkpoint = learner.checkpoint.remote()
        kept = monitor.keep_checkpoint(checkpoint)
        self._wait_learner([checkpoint], "the final checkpoint")
        monitor.get(kept, "keeping the final checkpoint")
        return code if code is not None else monitor.finish("done")

    def _deadline(self, asked_at: float, i: int) -> float:
        """When a sample asked of rollout actor i at `asked_at` is overdue: drv.sample_timeout_s after it was asked,
        or STARTUP_GRACE_S when the actor has not yet returned a sample since it was (re)started (its process
        starting, torch importing, the cluster finding it a CPU are not a hang)."""
        timeout = self.plan.driver.sample_timeout_s
        return asked_at + (max(timeout, loops.STARTUP_GRACE_S) if i in self.starting else timeout)

    def _learner_wait(self) -> float:
        """How long the learner may take to answer: drv.learner_timeout_s, or LEARNER_STARTUP_GRACE_S before this
        learner's first answer (0: for ever)."""
        timeout = self.plan.driver.learner_timeout_s
        return max(timeout, loops.LEARNER_STARTUP_GRACE_S) if timeout and not self.learner_answered else timeout

    def _call_deadline(self, call) -> float:
        """When the learner's answer to `call` is overdue (_learner_wait after it was sent)."""
        return self.call_sent[call] + self._learner_wait()

    def _watched(self) -> tuple | None:
        """The oldest call whose learner answer has not been seen (None: none, or neither the learner's nor the
        monitor's watchdog is on): the loop waits on that answer too, so that the learner's time is told apart
        from the monitor's."""
        drv = self.plan.driver
        if not (drv.learner_timeout_s or drv.monitor_timeout_s):
            return None
        return next((c for c in self.calls if c[0] not in self.learner_done), None)

    def _monitor_deadline(self) -> float | None:
        """When the monitor's answer to the oldest call is overdue: drv.monitor_timeout_s after the monitor could
        start on it (its learner answer seen, the monitor's previous answer back); None before that, or when
        the watchdog is off."""
        timeout = self.plan.driver.monitor_timeout_s
        if not timeout or not self.calls or self.calls[0][0] not in self.learner_done:
            return None
        return max(self.learner_done[self.calls[0][0]], self.monitor_free_at) + timeout

    def _check_monitor(self, now: float) -> None:
        """Raises MonitorSilent when the monitor's answer to the oldest call is overdue (_monitor_deadline)."""
        from foxhunt_ray.remote import MonitorSilent

        deadline = self._monitor_deadline()
        if deadline is not None and now >= deadline:
            timeout = self.plan.driver.monitor_timeout_s
            waited = now - deadline + timeout
            raise MonitorSilent(waited, timeout, "after the learner's answer it records was ready")

    def _wait_timeout(self, samples: dict, asked: dict, watched: tuple | None) -> float | None:
        """Seconds ray.wait may block: until the first sample in flight is overdue (_deadline), the oldest learner
        call is (_call_deadline), the monitor's answer is (_monitor_deadline), or the time limit (so that the loop
        stops asking for samples then); None when none applies."""
        drv, now = self.plan.driver, time.monotonic()
        ends = []
        if drv.sample_timeout_s and samples:
            ends.append(min(self._deadline(asked[ref], i) for ref, i in samples.items()))
        call = watched[0] if watched is not None else None
        if drv.learner_timeout_s and call in self.call_sent:
            ends.append(self._call_deadline(call))
        if (monitor_deadline := self._monitor_deadline()) is not None:
            ends.append(monitor_deadline)
        if drv.time_limit_s and samples:
            ends.append(self.start + drv.time_limit_s)
        return max(0.0, min(ends) - now) + 0.01 if ends else None

    def _warn_late(self, samples: dict, now: float) -> None:
        """Names, once, the rollout actors with a sample in flight (`samples`: ref -> actor index) that have returned
        no sample loops.STARTING_WARN_S after the first actor's first one; the run goes on with the others."""
        if self.first_sample_at is None:
            self.first_sample_at = now
        unnamed = self.starting - self.named_late
        if not unnamed or now - self.first_sample_at < loops.STARTING_WARN_S:
            return
        late = sorted(unnamed.intersection(samples.values()))
        if not late:
            return
        self.named_late.update(late)
        self.progress.end_line()
        print(
            f"warning: rollout actor(s) {late} of {len(self.workers)} returned no sample {loops.STARTING_WARN_S:g} s "
            "after the first one came back: still starting, or pending for resources Ray cannot give them "
            "(`ray status`; `ray list actors --filter state=PENDING_CREATION`); the run goes on with the others",
            file=sys.stderr,
            flush=True,
        )

    def _restart_silent(self, samples: dict, asked: dict, now: float) -> None:
        """Kills (for Ray to restart) every rollout actor whose sample is overdue (_deadline): alive but silent, it
        would hold its share of the run for ever. Its sample is retried on the restarted actor
        (remote.rollout_actor's max_task_retries); once its restarts are spent the sample fails and the learner
        counts it lost."""
        import ray

        drv = self.plan.driver
        if not drv.sample_timeout_s:
            return
        for ref, i in samples.items():
            if now < self._deadline(asked[ref], i):
                continue
            self.restarts[i] = self.restarts.get(i, 0) + 1
            self.progress.end_line()
            waited = now - asked[ref]
            print(
                f"warning: rollout actor {i} returned no sample in {waited:.0f} s (hung, or waiting for resources: "
                f"see `ray status`); killed for Ray to restart it (restart {self.restarts[i]} of at most "
                f"{drv.max_worker_restarts}; --sample-timeout-s, {drv.sample_timeout_s:g} s, sets the wait)",
                file=sys.stderr,
                flush=True,
            )
            ray.kill(self.workers[i], no_restart=False)
            asked[ref] = now  # the retried sample gets its own time, with the grace of a start
            self.starting.add(i)

    def _end_calls(self) -> list:
        """The monitor's answers to every call still in flight at the loop's end (the queued update calls, the
        drain), in order: the learner's answers within _learner_wait (_wait_learner), then the monitor's within
        drv.monitor_timeout_s (MonitorSilent); the calls are answered then, and no longer held."""
        if not self.calls:
            return []
        self._wait_learner([u for _, _, u in self.calls], "its queued calls")
        answers = self.monitor.get([a for a, _, _ in self.calls], "recording the learner's last answers")
        self.calls.clear()
        return answers

    def _wait_learner(self, refs: list, what: str) -> None:
        """Waits for the learner's answers behind refs at the loop's end (its queued calls, the drain, the final
        checkpoint), within _learner_wait (0: for ever): a learner stuck there is killed and LearnerLost raised,
        for the driver to replace it from the newest checkpoint. The monitor's calls that record them are
        waited on apart (MonitorHandle.get): the learner is never held to the monitor's time."""
        import ray

        timeout = self._learner_wait()
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout or None, fetch_local=False)
        if len(ready) < len(refs):
            self.progress.end_line()
            print(
                f"warning: the learner actor answered nothing in {timeout:g} s at the run's end ({what}; stuck; "
                "--learner-timeout-s sets the wait): killing it for the driver to replace",
                file=sys.stderr,
                flush=True,
            )
            ray.kill(self.learner)
            raise LearnerLost(f"no answer in {timeout:g} s at update {self.last_step()}")

    def _kill_stuck_learner(self, call, now: float) -> None:
        """Kills the learner actor when its oldest call is overdue (_call_deadline): alive but stuck, it would hold
        the run for ever. Its calls then fail as a dead learner's do, and the driver replaces it from the newest
        checkpoint (driver.max_learner_restarts), diag.jsonl cut back to that step."""
        import ray

        drv = self.plan.driver
        if not drv.learner_timeout_s or call not in self.call_sent or now < self._call_deadline(call):
            return
        self.progress.end_line()
        print(
            f"warning: the learner actor answered no call in {now - self.call_sent[call]:.0f} s (stuck; "
            f"--learner-timeout-s, {drv.learner_timeout_s:g} s, sets the wait): killing it for the driver to replace",
            file=sys.stderr,
            flush=True,
        )
        ray.kill(self.learner)
        del self.call_sent[call]  # killed once: the call's failure, not another timeout, ends the wait

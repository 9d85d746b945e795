"""The loops that run a resolved Plan (foxhunt_ray.plan; foxhunt_ray.driver resolves it and calls them): serial
(every role in this process) and Ray.

Both feed every learner step's diag dict to the Monitor: in serial mode a plain Monitor in this process; in
Ray mode the monitor actor, which takes each update's answer from the learner actor by reference and tells
the driver of a kill in the answer the driver waits on. The learner worker takes a checkpoint every M updates by
itself and hands it out as bytes; the loops have it written into the run folder on the driver's node (serial:
here; Ray: by the monitor actor, which the answer carrying it reaches through the object store), broadcast weights
every K updates and keep a checkpoint at the end, on a kill and on Ctrl-C (or SIGTERM).

Ray mode waits with `ray.wait` on every outstanding sample and on the oldest in-flight update (two at most:
one running on the learner actor, one queued, so the learner never waits for the driver); payloads go from a
rollout actor to the learner actor by reference, never through the driver.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from actors.checkpoints import latest_checkpoint
from actors.episode_stats import EPISODE_RETURN_MEAN, PNL_CUM_USD
from actors.files import write_atomic
from actors.learner_worker import LearnerWorker
from actors.monitor import Monitor
from actors.rollout import RolloutWorker
from foxhunt_ray.storage import RunStorage, keep_checkpoints
from lobsim_env.seeds import resumed_seed

if TYPE_CHECKING:
    from actors.kill_rules import KillDecision
    from foxhunt_ray.config import RunConfig
    from foxhunt_ray.plan import Plan
    from foxhunt_ray.remote import MonitorHandle

TIMINGS_FILE = "timings.json"


class StopSignals:
    """How a run stops on SIGINT (Ctrl-C) and SIGTERM (`ray job stop`, a scheduler), one signal or a burst of them
    (docs/faults.md, "Stop signals"):

    - the first starts the stop: the loop ends at a safe point (serial: before its next payload; Ray: at once, by
      KeyboardInterrupt, but never between a learner call and the monitor call that records it), the steps the
      learner holds are recorded, a stop checkpoint is kept and summary.json says 'stopped' (exit 0);
    - a second, while that goes on, is told so on one line and waits for it;
    - a third abandons the stop checkpoint (if it is still being made) and says so on one line; summary.json is
      written all the same, and the checkpoints kept before stay;
    - any later one is ignored.

    No signal raises outside the loop and its stop (`armed` .. `ending`), so none ends the run with a traceback or
    without its summary.json. Signals are counted as they arrive, not as Python calls the handler: Python calls it
    once for signals that come close together, and not at all while Ray waits (`ray.get` and `ray.wait` look for
    signals once a second), so a burst would count as one; the handler counts the bytes that each arrival writes
    to the wakeup fd (signal.set_wakeup_fd).

    The driver installs one for a run (`install`) and puts the previous handlers back when it is done with the run
    (`release_current`); a run stopped by a signal runs nothing after it (the driver skips foxhunt_ray.local's
    evaluation). Without `install` (off the main thread, or a loop called directly) it
    sees no signal, and a KeyboardInterrupt (a test's hook) stops the run the same way."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)
    current: StopSignals | None = None
    """The installed instance (the driver's run), if any."""
    signalled = False
    """Whether a stop signal reached this process's installed instance: foxhunt_ray.local ignores any later one
    of the burst while the process exits, so that it ends with the run's own exit code."""

    def __init__(self) -> None:
        self.count = 0
        self.first: str | None = None  # the first signal's name, 'SIGTERM'
        self.armed = False  # in the loop or its stop: a signal may raise KeyboardInterrupt there
        self.deferred = False  # the first signal waits for the loop's next safe point (check()) instead of raising
        self.pending = False  # a first signal that has not raised yet
        self.abandoned = False  # a third signal came while the stop checkpoint could still be abandoned
        self.ended = False  # the run's summary.json is written (or being written): nothing left to interrupt
        self.previous: dict = {}
        self._wakeup: tuple[int, int] | None = None  # the pipe each arrival writes a byte to (read, write)
        self._previous_wakeup = -1
        self._credit = 0  # arrivals counted already whose own handler call is still to come

    @classmethod
    def install(cls) -> StopSignals:
        """The current instance, else a new one whose handler takes SIGINT and SIGTERM (none off the main thread)."""
        if cls.current is not None:
            return cls.current
        stop = cls()
        if threading.current_thread() is threading.main_thread():
            stop._wakeup = os.pipe()
            for fd in stop._wakeup:
                os.set_blocking(fd, False)
            stop._previous_wakeup = signal.set_wakeup_fd(stop._wakeup[1], warn_on_full_buffer=False)
            stop.previous = {sig: signal.signal(sig, stop._handle) for sig in cls.SIGNALS}
            cls.current = stop
        return stop

    @classmethod
    def release_current(cls) -> None:
        """The handlers the installed instance replaced, put back."""
        stop, cls.current = cls.current, None
        if stop is not None:
            for sig, handler in stop.previous.items():
                signal.signal(sig, handler)
            if stop._wakeup is not None:
                signal.set_wakeup_fd(stop._previous_wakeup)
                for fd in stop._wakeup:
                    os.close(fd)
                stop._wakeup = None

    def arm(self, *, deferred: bool = False) -> None:
        """The loop starts (within its try: a KeyboardInterrupt now reaches its stop): a signal that came before
        raises now, unless `deferred` (the serial loop checks between payloads)."""
        self.armed, self.deferred, self.ended = True, deferred, False
        if not deferred:
            self.check()

    def check(self) -> None:
        """Raises KeyboardInterrupt for a first signal that waited for this point."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferring(self) -> Iterator[None]:
        """A first signal inside the block is acted on when the block ends (interrupts_after)."""
        before, self.deferred = self.deferred, True
        try:
            yield
        finally:
            self.deferred = before
        if not before:
            self.check()

    def ending(self) -> None:
        """The stop checkpoint is kept or given up, summary.json comes next: no signal raises from here on."""
        self.armed, self.ended = False, True

    def _handle(self, signum, frame) -> None:
        interrupt = False
        for _ in range(self._arrivals(signum)):
            interrupt = self._arrived(signum) or interrupt
        if interrupt:  # once, after every arrival of this call is counted
            raise KeyboardInterrupt

    def _arrivals(self, signum: int) -> int:
        """How many arrivals of stop signals this handler call stands for: the bytes of `signum` in the wakeup fd
        (those of the other stop signal are counted when their own call comes, as credit); 1 without a wakeup fd,
        or when its byte is not there yet (another thread took the signal and is still writing it)."""
        if self._wakeup is None:
            return 1
        data = b""
        try:
            while chunk := os.read(self._wakeup[0], 512):
                data += chunk
        except OSError:  # BlockingIOError: nothing (more) to read
            pass
        mine = data.count(bytes([signum]))
        self._credit += sum(data.count(bytes([int(sig)])) for sig in self.SIGNALS if sig != signum)
        if mine:
            return mine
        if self._credit:
            self._credit -= 1
            return 0
        return 1

    def _arrived(self, signum: int) -> bool:
        """One stop signal more; whether it raises KeyboardInterrupt (the first in the loop, the third in the stop)."""
        self.count += 1
        StopSignals.signalled = True
        if self.count == 1:
            self.first = signal.Signals(signum).name
            if self.armed and not self.deferred:
                return True
            self.pending = not self.ended  # before the loop, or deferred in it: raised at its next check()
            if self.ended:
                _say(f"{self.first}: the run is ending; it stops there (nothing runs after it)")
            return False
        if self.count == 2:
            tail = "; a third signal abandons the stop checkpoint" if self.armed else ""
            _say(f"stopping ({self.first}, then {signal.Signals(signum).name}): the run ends once its checkpoint "
                 f"and summary.json are written{tail}")
            return False
        if self.count == 3 and self.armed:
            self.abandoned = True
            _say("a third signal: the stop checkpoint is abandoned; summary.json is still written and the checkpoints "
                 "kept before stay")
            return True
        return False


def _say(line: str) -> None:
    """One line on stderr from a signal handler. The handler may run while this thread writes to stderr, where a
    second write through the same buffer raises RuntimeError ('reentrant call'): the line then goes to the file
    descriptor itself."""
    try:
        print(line, file=sys.stderr, flush=True)
    except RuntimeError:
        os.write(sys.stderr.fileno(), (line + "\n").encode())


def _stop_message(stop: StopSignals) -> str:
    """summary.json's message for a stopped run."""
    what = "interrupted by the user (Ctrl-C)" if stop.first in (None, "SIGINT") else f"stopped by {stop.first}"
    if stop.abandoned:
        what += "; a third signal abandoned the stop checkpoint: the newest one kept may be older than this update"
    return what


def _stop_line(plan: Plan, step: int | None, kept: bool, stop: StopSignals) -> str:
    """The line a stop ends with: where its checkpoint is, or that it was abandoned and which one is the newest."""
    at = f" at update {step}" if step is not None else ""
    newest = latest_checkpoint(plan.run_dir)
    if kept or (newest and newest[0] == step):  # Ray: a checkpoint the monitor was writing when abandoned is whole
        return f"interrupted{at}: checkpoint kept in {plan.run_dir}"
    kept_before = f"the newest checkpoint is update {newest[0]}" if newest else "no checkpoint is kept"
    why = "abandoned" if stop.abandoned else "not kept"
    return f"interrupted{at}: the stop checkpoint was {why}; {kept_before} in {plan.run_dir}"


class Progress:
    """The progress bar: done fraction, updates, env steps/s, qpa_ema, pnl (the market) or the mean episode
    return (any other env), and the time left. On a terminal it redraws one line in place (every `tty_every_s`);
    elsewhere (a log, a pipe, `ray job logs`) it prints a line every `every_s` seconds.

    The bar measures whichever bound ends the run first, and says which: the time budget (`52% of 240 s  update
    2328`: the update count alone, the step cap being far away, like local's 1,000,000 placeholder) or the
    updates (`52% update 2328/5000`)."""

    WIDTH = 20

    def __init__(self, plan: Plan, every_s: float = 2.0, tty_every_s: float = 0.5, stream=None):
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.total, self.quiet = plan.driver.steps, plan.quiet
        self.every_s = tty_every_s if self.tty else every_s
        self.first_step, self.time_limit_s = plan.resume_step, plan.driver.time_limit_s
        self.start = self.last_print = time.monotonic()
        self.env0: int | None = None
        self.shown_step = -1
        self.open_line = False

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
        step = int(rec["step"])
        by_steps, by_time = self._fractions(step, elapsed)
        done = min(1.0, max(by_steps, by_time))
        bar = "#" * round(done * self.WIDTH)
        # the bound that ends the run first: the time budget (the update count without its distant cap) or the steps
        where = f"of {self.time_limit_s:g} s  update {step}" if by_time > by_steps else f"update {step}/{self.total}"
        line = (
            f"[{elapsed:7.1f}s] [{bar:<{self.WIDTH}}] {100 * done:3.0f}% {where}  env steps "
            f"{env:,} ({(env - self.env0) / elapsed:,.0f}/s)  qpa_ema {rec.get('qpa_ema', float('nan')):+.3f}  "
            f"{outcome}  ETA {self._eta(done, elapsed)}"
        )
        if self.tty:
            self.stream.write("\r" + line + "\x1b[K")  # redraw in place, clear what a longer line left
            self.open_line = True
            if force:
                self.end_line()
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end_line(self) -> None:
        """Ends the line a terminal redraws (before any other output)."""
        if self.open_line:
            self.stream.write("\n")
            self.stream.flush()
            self.open_line = False

    def _fractions(self, step: int, elapsed: float) -> tuple[float, float]:
        """(the updates done as a share of the run's steps, the time used as a share of its time limit: 0 without
        one); the run ends when either reaches 1."""
        by_steps = (step - self.first_step) / max(self.total - self.first_step, 1)
        by_time = elapsed / self.time_limit_s if self.time_limit_s else 0.0
        return by_steps, by_time

    @staticmethod
    def _eta(done: float, elapsed: float) -> str:
        if done <= 0:
            return "?"
        left = elapsed * (1 - done) / done
        left = round(left)
        return f"{left // 60}m{left % 60:02d}s" if left >= 60 else f"{left}s"


def worker_seed(plan: Plan) -> int:
    return resumed_seed(plan.config.seed, plan.resume_step)  # a resumed run's workers get fresh books


def learner_kwargs(plan: Plan) -> dict:
    return dict(
        obs_dim=plan.spaces.obs_dim,
        n_actions=plan.spaces.n_actions,
        has_pnl=plan.spaces.has_pnl,
        obs_mean=plan.spaces.obs_mean,
        obs_std=plan.spaces.obs_std,
        seed=plan.config.seed,
        checkpoint_every=plan.driver.checkpoint_every,
        checkpoint_interval_s=plan.driver.checkpoint_interval_s,
        faults=plan.faults,
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


def steps_per_payload(config: RunConfig) -> int:
    """Learner steps one rollout payload makes: one per minibatch of envs (learner.minibatch_envs) and pass over
    them (learner.ppo_epochs)."""
    lrn = config.learner
    return (config.rollout.num_envs // lrn.minibatch_envs if lrn.minibatch_envs else 1) * lrn.ppo_epochs


Hook = Callable[[int, list], None]
"""Test hook: called with (last step recorded, rollout worker handles) after each learner answer (serial: each
payload) that recorded steps."""


def write_timings(plan: Plan, wall_s: float, roles: dict, learner_steady: list[dict] | None = None) -> None:
    """run_dir/timings.json: where each role's time went over the run's loop (benchmarks/bench_system.py), and
    in Ray mode with a time limit, the learner's totals at half time and at the loop's end ("learner_steady":
    their difference is the steady state, without start-up or the final checkpoint)."""
    doc = {"wall_s": wall_s, "roles": roles, "learner_steady": learner_steady or []}
    try:
        write_atomic(plan.run_dir / TIMINGS_FILE, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    except OSError as err:  # a full disk: the run's own outcome is what the user must hear about, not this
        print(f"no {TIMINGS_FILE}: {err.strerror or err}", file=sys.stderr)


def _rollout_totals(timings: list[dict]) -> dict:
    """The rollout workers' timings summed key by key, and how many workers they came from."""
    out: dict = {"workers": len(timings)}
    for d in timings:
        for k, v in d.items():
            out[k] = out.get(k, 0.0) + v
    return out


def run_serial(
    plan: Plan, monitor: Monitor, progress: Progress, hook: Hook | None = None, stop: StopSignals | None = None
) -> int:
    """Every role in this process: the loop of docs/system.md with checkpoints and resume. The process runs
    torch with `rollout.torch_threads` threads (default 1) for the run, as a rollout worker's process would:
    torch's default of one thread a core is several times slower where the other cores are busy (BENCHMARKS.md,
    "Torch threads in serial mode")."""
    import torch

    threads_before = torch.get_num_threads()
    torch.set_num_threads(plan.config.rollout.torch_threads)
    try:
        return _run_serial(plan, monitor, progress, hook, stop or StopSignals())
    finally:
        torch.set_num_threads(threads_before)  # driver.main called in a process that goes on (tests, notebooks)


def _run_serial(plan: Plan, monitor: Monitor, progress: Progress, hook: Hook | None, stop: StopSignals) -> int:
    cfg, drv = plan.config, plan.driver
    learner = LearnerWorker(cfg.learner, **learner_kwargs(plan))
    if plan.checkpoint is not None:
        learner.load(plan.checkpoint)
    storage = RunStorage.of_run(drv.storage, plan.run_dir) if drv.storage else None

    def keep(checkpoints) -> None:
        keep_checkpoints(plan.run_dir, checkpoints, storage, keep=drv.keep_checkpoints)

    rollout = cfg.rollout  # its torch_threads is this process's already (run_serial)
    weights = learner.policy_weights()
    workers = [
        RolloutWorker(rollout, cfg.market, weights=weights, **worker_kwargs(plan, i))
        for i in range(drv.rollout_workers)
    ]
    code, i, start = None, 0, time.monotonic()
    broadcast_at = learner.step
    try:
        stop.arm(deferred=True)  # a payload's steps are trained and recorded whole before a stop (check())
        while learner.step < drv.steps and not drv.out_of_time(start):
            stop.check()
            payload = workers[i % len(workers)].sample()
            diags = learner.train([payload], stop_at=drv.steps, progress=drv.progress(learner.step, start))
            keep(learner.take_checkpoints())
            i += 1
            if not diags and (why := learner.starved()) is not None:
                code = _starved(monitor, progress, why)
                break
            for diag in diags:  # none for a bad payload: counted by the decoder
                if (code := _record(monitor, progress, diag)) is not None:
                    break
            if code is not None:
                break
            if diags and hook is not None:
                hook(learner.step, workers)
            if learner.step // drv.broadcast_every > broadcast_at // drv.broadcast_every:
                broadcast_at = learner.step
                weights = learner.policy_weights()
                for w in workers:
                    w.set_weights(weights)
    except KeyboardInterrupt:  # a stop signal (StopSignals), or Ctrl-C where none is installed
        progress.end_line()
        kept = False
        try:
            if not stop.abandoned:
                keep([learner.checkpoint()])  # a third signal here leaves no temporary file (write_atomic)
                kept = True
        except KeyboardInterrupt:
            pass
        stop.ending()
        step = int(monitor.last["step"]) if monitor.last else plan.resume_step
        print(_stop_line(plan, step, kept, stop), file=sys.stderr, flush=True)
        return monitor.finish("stopped", _stop_message(stop))
    finally:
        stop.ending()
        write_timings(
            plan,
            time.monotonic() - start,
            {
                "learner": learner.timings(),
                "rollout": _rollout_totals([w.timings() for w in workers]),
            },
        )
        for w in workers:
            w.stop()
    keep([learner.checkpoint()])  # the run's end: a signal now only stops what would run after it (StopSignals)
    return code if code is not None else monitor.finish("done")


class LearnerLost(RuntimeError):
    """The learner actor died (its process killed, out of memory): the driver replaces it from the newest
    checkpoint (DriverConfig.max_learner_restarts), as a resume of the run folder in the same process."""


LEARNER_NAME = "foxhunt-learner"
"""Prefix of the learner actor's name (then the run folder and a tag): how the dashboard and `ray.get_actor` find it."""


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
            # and checkpoints): those that do not within WORKER_TIMINGS_WAIT_S are left out
            asked = drive.worker_timings or [w.timings.remote() for w in workers]
            answered, _ = ray.wait(asked, num_returns=len(asked), timeout=WORKER_TIMINGS_WAIT_S)
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


@contextlib.contextmanager
def interrupts_after(stop: StopSignals | None = None) -> Iterator[None]:
    """A Ctrl-C or SIGTERM that comes inside the block is handled when the block ends, by the handler it would have
    met (the driver's StopSignals, or any that turns SIGTERM into KeyboardInterrupt): the learner call and the
    monitor call that records its answer are sent both or neither. (An interrupt between the two would leave the
    monitor a gap of steps, so that the stop's drain is refused and no final checkpoint kept.) With `stop`
    installed, its own deferral does it, so that every signal of a burst is counted. Outside the main thread,
    where handlers cannot be set, the block runs as it is."""
    if stop is not None and stop is StopSignals.current:
        with stop.deferring():
            yield
        return
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def later(signum, frame) -> None:
        caught.append(signum)

    previous = {sig: signal.signal(sig, later) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(caught):
            signal.raise_signal(sig)


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


MAX_CALLS_IN_FLIGHT = 2  # one running on the learner, one queued: the learner never waits for the driver
MAX_LOST_IN_A_ROW = 8
STARTUP_GRACE_S = 600.0
"""The wait for a rollout actor's first sample after it was (re)started, when --sample-timeout-s is shorter."""
STARTING_WARN_S = 60.0
"""A rollout actor asked for a sample that has returned none this many seconds after the first actor's first sample
is named in a warning (once): still starting, or pending for resources Ray cannot give it, while the run goes on
with the others (an actor pending for ever would otherwise go unseen: the run trains on the others' payloads)."""
LEARNER_STARTUP_GRACE_S = 1800.0
"""The wait for a learner actor's first answer (it may build the CUDA extension and capture its graphs first),
when --learner-timeout-s is shorter."""
WORKER_TIMINGS_WAIT_S = 20.0
"""At the run's end, the wait for the rollout actors' timings (timings.json): an actor still pending for resources,
or hung in a sample, never answers, and is left out of them after this long."""


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
        self.calls: list[tuple] = []  # (monitor's answer ref, payloads in it, the learner's answer ref), oldest first
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

        plan, drv, monitor, learner = self.plan, self.plan.driver, self.monitor, self.learner
        per_payload = steps_per_payload(plan.config)
        workers = self.workers
        samples: dict = {}  # a sample in flight -> its rollout actor's index
        asked: dict = {}  # ... -> when it was asked (time.monotonic), for drv.sample_timeout_s

        def ask(i: int) -> None:
            ref = workers[i].sample_on.remote([self.weights])  # read by an actor with no policy yet (new or restarted)
            samples[ref], asked[ref] = i, time.monotonic()

        ready: list = []
        idle: list[int] = []
        calls = self.calls  # (monitor's answer ref, payloads in it, learner's answer ref), in submission order

        def waiting() -> int:
            return len(ready) + sum(n for _, n, _ in calls)

        def room() -> bool:
            """Whether one more sample may be asked (drv.max_payloads_waiting, drv.max_payloads_ahead)."""
            ahead = drv.max_payloads_ahead
            return waiting() < drv.max_payloads_waiting and (not ahead or len(samples) + waiting() < ahead)

        self.starting = set(range(len(workers)))
        for i in range(len(workers)):
            if room():
                ask(i)
            else:
                idle.append(i)
        learner_step = broadcast_at = plan.resume_step
        # Policy weights asked of the learner, sent to the rollout actors only once the learner has answered: an
        # actor runs its calls in order, so a set_weights whose argument is still being made would hold up the
        # actor's next sample until the learner got to it (behind its queued update calls).
        asked_weights = None
        lost_in_a_row, code, starved = 0, None, None
        self.start = self.monitor_free_at = time.monotonic()

        def dispatched() -> int:
            """The learner step once every payload sent to it is trained on."""
            return learner_step + per_payload * sum(n for _, n, _ in calls)

        def wanted() -> bool:
            """Whether the run still wants samples: steps left beyond those dispatched, and time left."""
            return dispatched() < drv.steps and not drv.out_of_time(self.start)

        def resume_idle() -> None:  # an actor idle while no more samples are wanted stays idle: none is wasted
            while idle and room() and wanted():
                ask(idle.pop(0))

        while True:
            t0 = time.monotonic()
            more = wanted()
            if more and ready and len(calls) < MAX_CALLS_IN_FLIGHT:
                # nested: the learner fetches the payloads itself; the monitor actor takes the learner's answer
                cap = drv.max_payloads_per_call or len(ready)
                take, ready = ready[:cap], ready[cap:]  # the oldest first; the rest go in the next call
                progress = drv.progress(dispatched(), self.start)
                with interrupts_after(self.stop):  # the learner's call and the monitor's both sent, or neither
                    update = learner.update_from.remote(take, drv.steps, progress)
                    answer = monitor.record_update(update)
                calls.append((answer, len(take), update))
                self.call_sent[answer] = time.monotonic()
                self.seconds["dispatch_s"] += time.monotonic() - t0
                continue
            if not calls and not (more and samples):
                break
            wait_on = ([*samples] if more else []) + [c for c, _, _ in calls[:1]]
            watched = self._watched()  # the oldest call whose learner answer is not in yet (for the watchdogs)
            if watched is not None:
                wait_on.append(watched[2])
            if asked_weights is not None:
                wait_on.append(asked_weights)
            timeout = self._wait_timeout(samples if more else {}, asked, watched)
            found, _ = ray.wait(wait_on, num_returns=1, timeout=timeout)
            t1 = time.monotonic()
            self.seconds["wait_s"] += t1 - t0
            if not found:  # a sample, the learner or the monitor past its deadline, or the time limit: look again
                self._restart_silent(samples, asked, t1)
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
            if done == asked_weights:
                for w in workers:
                    w.set_weights.remote(asked_weights)
                self.weights, asked_weights = asked_weights, None
            elif calls and done == calls[0][0]:
                calls.pop(0)
                self.call_sent.pop(done, None)
                self.learner_done.pop(done, None)
                self.learner_answered, self.monitor_free_at = True, t1
                answer = ray.get(done)  # ready: this does not block
                self.seconds["answers"] += 1
                learner_step = answer["step"]
                for why in answer["lost"]:  # a sample lost with its rollout actor: no step
                    lost_in_a_row += 1
                    if lost_in_a_row > MAX_LOST_IN_A_ROW:
                        raise RuntimeError(f"{lost_in_a_row} samples lost in a row: {why}")
                if answer.get("starved") and not answer.get("after_end"):
                    starved = answer["starved"]  # the run ends once the learner's queued steps are recorded
                    self._end_calls()  # the queued calls finish before the learner checkpoints
                    break
                if answer.get("after_end") or not answer["n"]:
                    resume_idle()
                    continue
                lost_in_a_row = 0
                monitor.last = answer["record"]
                if (code := _report(monitor, self.progress, answer["decision"])) is not None:
                    self._end_calls()  # answers queued behind the kill end as after_end
                    break
                step = int(monitor.last["step"])
                if self.hook is not None:
                    self.hook(step, workers)
                if step // drv.broadcast_every > broadcast_at // drv.broadcast_every and asked_weights is None:
                    broadcast_at = step
                    asked_weights = learner.policy_weights.remote()  # sent on once ready (above)
                resume_idle()
            else:
                i = samples.pop(done)
                asked.pop(done, None)
                self.starting.discard(i)
                self._warn_late(samples, t1)
                ready.append(done)
                if more and room():
                    ask(i)
                else:
                    idle.append(i)
            self.seconds["dispatch_s"] += time.monotonic() - t1
        if len(self.snapshots) == 1:
            self.snapshots.append(learner.timings.remote())
        self.worker_timings = [w.timings.remote() for w in workers]
        if code is None:  # the steps the learner still runs: their lines, and perhaps a kill among them
            drain = learner.drain_answer.remote()
            calls.append((monitor.record_update(drain), 0, drain))  # held, as a call's, for monitor_silent
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
        return asked_at + (max(timeout, STARTUP_GRACE_S) if i in self.starting else timeout)

    def _learner_wait(self) -> float:
        """How long the learner may take to answer: drv.learner_timeout_s, or LEARNER_STARTUP_GRACE_S before this
        learner's first answer (0: for ever)."""
        timeout = self.plan.driver.learner_timeout_s
        return max(timeout, LEARNER_STARTUP_GRACE_S) if timeout and not self.learner_answered else timeout

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
        no sample STARTING_WARN_S after the first actor's first one; the run goes on with the others."""
        if self.first_sample_at is None:
            self.first_sample_at = now
        unnamed = self.starting - self.named_late
        if not unnamed or now - self.first_sample_at < STARTING_WARN_S:
            return
        late = sorted(unnamed.intersection(samples.values()))
        if not late:
            return
        self.named_late.update(late)
        self.progress.end_line()
        print(
            f"warning: rollout actor(s) {late} of {len(self.workers)} returned no sample {STARTING_WARN_S:g} s after "
            "the first one came back: still starting, or pending for resources Ray cannot give them (`ray status`; "
            "`ray list actors --filter state=PENDING_CREATION`); the run goes on with the others",
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


def _starved(monitor: Monitor | MonitorHandle, progress: Progress, why: str) -> int:
    """Ends a run that gets no good rollout payload: one line on stderr naming each distinct fault with
    its count, summary 'error' with the same message, exit 1; the loop still keeps a checkpoint."""
    progress.end_line()
    print(f"error: {why}", file=sys.stderr, flush=True)
    return monitor.finish("error", why)


def _record(monitor: Monitor, progress: Progress, diag: dict) -> int | None:
    return _report(monitor, progress, monitor.record(diag))


def _report(monitor: Monitor | MonitorHandle, progress: Progress, decision: KillDecision | None) -> int | None:
    """The progress line for the monitor's last record; on a kill, says which rule and returns the exit code."""
    progress.show(monitor.last, force=decision is not None)
    if decision is not None:
        progress.end_line()
        print(f"killed by rule {decision.rule} at update {decision.step}: {decision.message}", file=sys.stderr)
        monitor.exit_code = decision.exit_code
        return decision.exit_code
    return None

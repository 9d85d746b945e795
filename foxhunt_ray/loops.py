"""The loops that run a resolved Plan (foxhunt_ray.plan; foxhunt_ray.driver resolves it and calls them): serial
(every role in this process, here) and Ray (foxhunt_ray.ray_loop, with what both share from here).

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

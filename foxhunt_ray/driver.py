"""The driver shared by `python -m foxhunt_ray.local` and `python -m foxhunt_ray.job`.

Its command line is foxhunt_ray.cli (the flags made from the config fields, the entry points' defaults); a new
run's Plan is resolved by foxhunt_ray.resolve, a resume's by foxhunt_ray.resume; this module opens the run folder,
runs the run and ends it.

It resolves the preset and the `--set` overrides into one RunConfig, validates it (every bad value at once, the
env's too: `--env-id` must name a registered Gymnasium env with a 1-D Box observation and a Discrete action
space, whose spaces size the learner; actors.envs.probe_env),
stamps the code (foxhunt_ray.provenance) and refuses a mismatch with `--expect-code-sha`, creates the run folder
`<out>/<code_sha>/<name>/<fold>/` (the name: `--name`, else preset, env, seed and start time;
foxhunt_ray.run_folder) with config.json, diag.jsonl, summary.json and checkpoints/, points `<out>/latest` at it,
and runs the roles (foxhunt_ray.loops, foxhunt_ray.ray_loop):

- serial (`--serial`): rollout workers, the learner worker and the monitor in this process, no Ray;
- Ray: rollout actors, the learner actor and the monitor actor (foxhunt_ray.remote), driven with `ray.wait`;
  the monitor actor is pinned to the driver's node, where the run folder is, and writes every file the actors
  make there, the learner's checkpoints included (they come through the object store: the learner may run on
  any node, `--learner-resources` places it).

With `--storage ROOT` the run folder is also copied to ROOT/<code_sha>/<name>/<fold>/ when the run starts, after
each checkpoint and when it ends (foxhunt_ray.storage); `--resume` takes such a URI and copies the run back first.

Either way the learner worker checkpoints every `--checkpoint-every` updates; weights go to the rollout workers
every `--broadcast-every` updates (one object, shared by every worker). A kill by a rule keeps a checkpoint and
exits 3; Ctrl-C keeps a checkpoint and exits 0 (status "stopped"); an error exits 1, a full disk with one
message (no traceback), no `.tmp` file and diag.jsonl cut to whole lines. `--resume RUN_DIR` continues a run from
its newest checkpoint that its diag.jsonl reaches and that loads (else an older one, `--resume-checkpoint`, or
step 0 for a run that never kept one), with the run's own config.json (a hand-edited one only with
`--allow-config-change`). The driver holds the run folder's lock (foxhunt_ray.run_folder) for the run's life:
a second writer is refused. docs/faults.md says what a user gets in each case.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import json
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from actors.envs import is_market
from actors.files import disk_full, refused_file, remove_tmp_files, write_atomic
from actors.kill_rules import EXIT_ERROR, EXIT_OK
from actors.monitor import SUMMARY_FILE, Monitor
from foxhunt_ray import provenance, run_folder
from foxhunt_ray.cli import (  # noqa: F401  (the driver's command line, as callers know it: driver.parse_args, ...)
    CONFIG_HELP,
    ENTRY_DEFAULTS,
    EntryDefaults,
    UsageError,
    parse_args,
    read_config_file,
    run_config_flags,
)
from foxhunt_ray.config import market_reward_scale, order_fee_usd
from foxhunt_ray.loops import Hook, LearnerLost, Progress, StopSignals, run_serial
from foxhunt_ray.plan import DriverConfig, Plan  # noqa: F401
from foxhunt_ray.ray_loop import run_ray
from foxhunt_ray.resolve import check_code, check_fresh, data_sets, resolve_new  # noqa: F401
from foxhunt_ray.resume import resolve_resume
from foxhunt_ray.run_folder import (
    CONFIG_FILE,
    RunLock,
    accept_config_change,
    point_latest,
    record_config,
    resolve_run_dir,
)
from foxhunt_ray.storage import RunStorage, StorageClaimError, is_uri, stored_copy_uri, take_stored_run


def resolve(args: argparse.Namespace) -> Plan:
    """Flags -> Plan: a resume's (foxhunt_ray.resume) or a new run's (foxhunt_ray.resolve); raises UsageError (or
    ConfigError) naming every bad value."""
    sha = check_code(args.expect_code_sha)
    return resolve_resume(args, sha) if args.resume is not None else resolve_new(args, sha)


def describe(plan: Plan) -> str:
    """The header's lines under the run folder: which settings and sizes run, and the budget, as values."""
    c = plan.config
    lrn, ro = c.learner, c.rollout
    scale = f"reward_scale {lrn.reward_scale:g}"
    if is_market(c.env_id) and lrn.reward_scale == market_reward_scale(c.market):
        m = c.market
        unit = "lots" if m.source == "replay" else "contracts"
        half_tick = m.usd_per_tick * m.position_limit / 2
        if order_fee_usd(m) > half_tick:
            scale += f" (from the market: 1 / ${order_fee_usd(m):.4g}, one order's taker fee)"
        else:
            scale += f" (from the market: 2 / (${m.usd_per_tick:g} a tick x {m.position_limit} {unit}), half a tick)"
    settings = f"settings {c.settings or 'not recorded'}: lr {lrn.lr:g}, dueling_lr {lrn.dueling_lr:g}, {scale}"
    if is_market(c.env_id):
        k = c.market.depth_flow_ticks
        settings += f", depth flow within {k} ticks of the mid observed" if k else ", no depth flow observed"
    settings += ", observation standardised (learner.obs_norm)" if lrn.obs_norm != "off" else ""
    settings += f", distillation temperature {lrn.distill_temperature:g}"
    why = f" ({plan.sizing_reason})" if plan.sizing_reason else ""
    sizing = (
        f"sizing {c.sizing or 'not recorded'}{why}: hidden_dim {lrn.hidden_dim}, q_batch_size {lrn.q_batch_size}, "
        f"iqn_taus {lrn.iqn_taus}/{lrn.iqn_target_taus}, rollout {ro.num_envs} envs x {ro.steps_per_sample} steps, "
        f"{plan.driver.rollout_workers} rollout worker{'s' * (plan.driver.rollout_workers != 1)}"
    )
    d = plan.driver
    if d.time_limit_s:
        budget = f"budget {d.time_limit_s:g} s of training or update {d.steps:,}, whichever comes first"
    else:
        budget = f"budget update {d.steps:,} (no time limit)"
    m = c.market
    if not is_market(c.env_id) or m.source != "replay":
        return f"{settings}\n{sizing}\n{budget}"
    held = f"tests on {', '.join(m.eval_days)}" if m.eval_days else "holds out no day (one date)"
    if m.val_days:
        held += f", validates on {', '.join(m.val_days)}"
    market = (
        f"market real days {', '.join(m.days)} (fold {d.fold}: {held}), {m.data}: tick {m.tick_size:g} = "
        f"${m.usd_per_tick:g} a lot, orders of {m.order_size} lots, position limit {m.position_limit}, fees maker "
        f"${m.maker_fee_usd:g} + {m.maker_fee_bps:g} bps, taker ${m.taker_fee_usd:g} + {m.taker_fee_bps:g} bps, "
        f"queue model {m.queue_model} (L2 days)"
    )
    if m.synthetic_share:  # lobsim_env.markets.MixedMarket: sim-to-real training
        market += (f"; {m.synthetic_share:.0%} of the training books play the synthetic flow calibrated on them (tick "
                   f"= {m.synthetic_tick_multiple} venue ticks, a unit = one order)")  # fmt: skip
    return f"{market}\n{settings}\n{sizing}\n{budget}"


def write_config(plan: Plan) -> None:
    """config.json: the resolved RunConfig and DriverConfig, the test-only faults (apart from the learner config:
    never part of what a checkpoint must match), code_sha and baseline (atomic write)."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "code_sha": plan.code_sha,
        "content_sha": provenance.content_sha(),
        "baseline": plan.baseline,
        "run": plan.config.to_dict(),
        "driver": dataclasses.asdict(plan.driver),
        "faults": dataclasses.asdict(plan.faults),
    }
    text = json.dumps(doc, indent=2, sort_keys=True) + "\n"
    write_atomic(plan.run_dir / CONFIG_FILE, text)
    record_config(plan.run_dir, text)  # what a resume compares config.json with


def _connect_ray(ray_init: Callable[[], None] | None) -> None:
    import ray

    if ray.is_initialized():
        return
    try:
        (ray_init or ray.init)()
    except Exception as err:  # Ray raises ConnectionError, RuntimeError, TimeoutError, ... by version and cause
        raise UsageError(
            f"cannot start or reach Ray ({type(err).__name__}: {err}); start a cluster with `ray start --head` "
            "(foxhunt_ray.job), or run with --serial"
        ) from None


def _sigterm_as_interrupt():
    """SIGTERM as Ctrl-C, every time: KeyboardInterrupt. (A run installs loops.StopSignals instead, which also holds
    a burst of signals: docs/faults.md.) Returns the previous handler, or None where signals cannot be set (not
    the main thread)."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:
        return None


def main(
    argv: list[str] | None = None,
    *,
    prog: str = "foxhunt_ray",
    ray_init: Callable[[], None] | None = None,
    hook: Hook | None = None,
    after: Callable[[Plan, int], int] | None = None,
    defaults: EntryDefaults | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> int:
    """Parse, resolve, run; returns the exit code (0 done or stopped, 3 killed, 1 error). `after(plan, code)` runs
    once the run has ended (foxhunt_ray.local evaluates the run there) and returns the exit code; `defaults` are
    the entry point's for the flags left out, and `parents` its own flags (shown by --help). The run folder's lock
    is held from before the run is read (a resume) or written (a new run) until `after` has returned."""
    args = parse_args(argv, prog, defaults or ENTRY_DEFAULTS["job"], parents)
    lock: RunLock | None = None
    try:
        if args.resume is not None:
            lock, args = _take_resumed_folder(args)
        return _main(args, lock, ray_init=ray_init, hook=hook, after=after)
    except (UsageError, ValueError, OSError) as err:  # ConfigError, DiagFileError, RunFolderError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if lock is not None:
            lock.release()
        StopSignals.release_current()  # a run stopped by a signal kept them to the end (loops.StopSignals)


def _take_resumed_folder(args: argparse.Namespace) -> tuple[RunLock | None, argparse.Namespace]:
    """For --resume: the run folder behind OUT/latest, or a storage URI copied into OUT/<code_sha>/<name>/<fold>;
    its lock, taken before the folder is read (a writer still at it would move it under us) or filled from
    storage, and the arguments with --resume that folder (resume_storage: the root). The lock is None when there
    is no run to lock (the resume then fails, naming the folder)."""
    resume = args.resume
    if not is_uri(resume):
        resume = str(resolve_run_dir(resume))
        if (stored := stored_copy_uri(resume)) is None:  # a --storage copy: through its claim, as its URI
            lock = RunLock.acquire(resume) if (Path(resume) / CONFIG_FILE).is_file() else None
            return lock, _with(args, resume=resume)
        resume = stored
    lock, local, root, told = take_stored_run(resume, args.out)  # refused while the claim's run goes on
    print(told, file=sys.stderr, flush=True)
    return lock, _with(args, resume=str(local), resume_storage=root)


def _with(args: argparse.Namespace, **changes) -> argparse.Namespace:
    """A copy of args with `changes` (the parsed flags are never rewritten)."""
    return argparse.Namespace(**{**vars(args), **changes})


def _main(args: argparse.Namespace, lock: RunLock | None, *, ray_init, hook, after) -> int:
    try:
        plan = resolve(args)
        if getattr(args, "print_config", False):  # nothing started: no Ray, no run folder
            doc = {  # config.json's layout
                "run": plan.config.to_dict(),
                "driver": dataclasses.asdict(plan.driver),
                "faults": dataclasses.asdict(plan.faults),
            }
            print(json.dumps(doc, indent=2, sort_keys=True))
            return EXIT_OK
        stamp = {
            "code_sha": plan.code_sha,
            "preset": plan.config.preset,
            "env_id": plan.config.env_id,
            "fold": plan.driver.fold,
        }
        if not plan.serial:
            _connect_ray(ray_init)  # before the run folder: a cluster that is not there leaves no half run
        if lock is None:
            lock = RunLock.acquire(plan.run_dir)
        try:
            monitor = _open_run(plan, stamp)
        except BaseException:
            lock.release()
            raise
    except (UsageError, ValueError, OSError) as err:  # ConfigError and DiagFileError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    try:
        restarts, started = 0, time.monotonic()
        while True:
            try:
                can_restart = restarts < plan.driver.max_learner_restarts
                code = _run(plan, monitor, hook=hook, after=after, restartable=can_restart)
                return _last_copy(plan, code)
            except LearnerLost as lost:
                restarts += 1
                print(
                    f"the learner actor died ({lost}); replacing it from the newest checkpoint of {plan.run_dir} "
                    f"(restart {restarts} of at most {plan.driver.max_learner_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
                plan = resolve(_restart_args(args, plan, time.monotonic() - started))
                monitor = _open_run(plan, stamp)
    finally:
        lock.release()


def _restart_args(args: argparse.Namespace, plan: Plan, elapsed_s: float) -> argparse.Namespace:
    """The arguments of a resume of plan's run folder in this process, after its learner actor died: its own
    config.json, the same steps, what is left of the time budget (the first plan's clock started the budget)."""
    cleared = {f: None for f in run_config_flags()} | {"overrides": [], "flip_distill_sign": False}
    left = plan.driver.time_limit_s
    if left:
        left = max(left - elapsed_s, 1e-3)
    return _with(
        args,
        **cleared,
        resume=str(plan.run_dir),
        resume_checkpoint=None,
        allow_config_change=False,
        replacing_learner=True,  # the run's own resume: its newest checkpoint may be at its last step
        steps=plan.driver.steps,
        time_limit_s=left,
    )


def _last_copy(plan: Plan, code: int) -> int:
    """The run folder copied to the run's storage once the run (and `after`, an evaluation) has ended. A copy that
    fails is an error (exit 1): the user asked for the run there; the run folder on this node is whole."""
    if not plan.driver.storage:
        return code
    store = RunStorage.of_run(plan.driver.storage, plan.run_dir)
    try:
        store.sync(plan.run_dir)
    except StorageClaimError as err:  # another driver copies there: a copy of this folder would mix with its
        print(f"error: the run folder {plan.run_dir} is whole, but {err}", file=sys.stderr, flush=True)
        return code if code != EXIT_OK else EXIT_ERROR
    except (OSError, ValueError) as err:
        print(
            f"error: the run folder {plan.run_dir} is whole, but copying it to {store.url} failed "
            f"({type(err).__name__}: {err}); copy the folder there yourself",
            file=sys.stderr,
            flush=True,
        )
        return code if code != EXIT_OK else EXIT_ERROR
    print(f"storage {store.url}", flush=True)
    return code


def _open_run(plan: Plan, stamp: dict) -> Monitor:
    """Under the run folder's lock: the folder made ready (_ready_folder), then the monitor opened (which cuts
    diag.jsonl back to the step the run restarts from)."""
    _ready_folder(plan)
    args = (plan.run_dir, plan.config.kill, plan.baseline)
    if plan.serial:
        return Monitor(*args, stamp=stamp, resume_at=plan.monitor_resume_at)
    from foxhunt_ray.remote import MonitorHandle

    # the folder as this process sees it: an actor's working directory need not be the driver's
    args = (plan.run_dir.absolute(), *args[1:])
    d = plan.driver
    return MonitorHandle(
        *args, stamp=stamp, resume_at=plan.monitor_resume_at, storage=d.storage, keep=d.keep_checkpoints
    )


def _ready_folder(plan: Plan) -> None:
    """The folder checked again (another run may have taken it meanwhile), what the user must know printed,
    config.json written (a new run) or a config change recorded, OUT/latest pointed at it, and the folder copied
    to the run's storage."""
    if plan.fresh:
        note = check_fresh(plan.run_dir)
        plan.notes = (note,) if note else ()
        plan.monitor_resume_at = 0 if note else None
    for note in plan.notes:
        print(f"note: {note}", file=sys.stderr, flush=True)
    remove_tmp_files(plan.run_dir)  # what a crash mid-write left: no other writer can be at it now
    if plan.fresh:
        if plan.monitor_resume_at is not None:  # the replaced run's outcome is not this one's
            (plan.run_dir / SUMMARY_FILE).unlink(missing_ok=True)
        write_config(plan)
    elif plan.config_change:
        text = run_folder.read_run_file(plan.run_dir / CONFIG_FILE)
        accept_config_change(plan.run_dir, text, plan.resume_step, list(plan.config_change))
    if plan.out is not None and (note := point_latest(plan.out, plan.run_dir)) is not None:
        print(f"note: {note}", file=sys.stderr, flush=True)
    if plan.driver.storage:  # the config files now: storage that cannot be written fails before the run trains
        RunStorage.of_run(plan.driver.storage, plan.run_dir).sync(plan.run_dir)


def _span(plan: Plan) -> str:
    """The header's updates: 'updates 40..60' for a run to a step, 'from update 40' for one that a time budget ends
    (its step cap, e.g. local's 1,000,000, is a bound the budget line names, not a plan)."""
    if plan.driver.time_limit_s:
        return f"from update {plan.resume_step}"
    return f"updates {plan.resume_step}..{plan.driver.steps}"


def _run(plan: Plan, monitor, *, hook, after, restartable: bool = False) -> int:
    """One run of the loop; a learner actor that died raises LearnerLost when `restartable` (the caller resumes
    the run in this process), else ends the run in error like any other failure."""
    progress = Progress(plan)
    mode = "serial" if plan.serial else "ray"
    print(
        f"run folder {plan.run_dir}  ({mode}, preset {plan.config.preset}, env {plan.config.env_id}, "
        f"code {plan.code_sha}, {_span(plan)})",
        flush=True,
    )
    if plan.driver.storage:
        print(f"storage {RunStorage.of_run(plan.driver.storage, plan.run_dir).url}", flush=True)
    print(describe(plan), flush=True)
    stop = StopSignals.install()  # SIGINT and SIGTERM, one or a burst, stop the run (docs/faults.md)
    lost: LearnerLost | None = None
    try:
        if plan.serial:
            code = run_serial(plan, monitor, progress, hook, stop)
        else:
            code = run_ray(plan, monitor, progress, hook, stop)
    except LearnerLost as err:
        progress.end_line()
        if restartable:
            lost = err
        else:
            code = _end_in_error(plan, monitor, err)
    except Exception as err:
        progress.end_line()
        code = _end_in_error(plan, monitor, err)
    finally:
        stop.ending()
        monitor.close()
        if not stop.count:  # no stop signal: the handlers before the run are back for what comes next
            StopSignals.release_current()
    if lost is not None:
        raise lost
    if monitor.last is not None:
        progress.show(monitor.last, force=True)
    progress.end_line()
    print(f"run folder {plan.run_dir}  exit {code}", flush=True)
    code = code if code is not None else EXIT_OK
    if stop.count and after is not None:  # stopped by a signal: the process ends (main puts the handlers back)
        print(
            f"({stop.first}: nothing runs after the stopped run; `python -m foxhunt_ray.evaluate {plan.run_dir}` "
            "evaluates it)",
            file=sys.stderr,
            flush=True,
        )
        return code
    return _after_the_run(plan, code, after) if after is not None else code


def _after_the_run(plan: Plan, code: int, after: Callable[[Plan, int], int]) -> int:
    """`after(plan, code)` (foxhunt_ray.local's held-out evaluation), which a Ctrl-C or SIGTERM ends with one line:
    the run is whole by then, and the exit code stays the run's (before: a KeyboardInterrupt traceback, or SIGTERM's
    default end, 143, with no word)."""
    previous = _sigterm_as_interrupt()
    try:
        return after(plan, code)
    except KeyboardInterrupt:
        for sig in (signal.SIGINT, signal.SIGTERM):  # the rest of a burst, while this ends
            signal.signal(sig, signal.SIG_IGN)
        print(
            f"\ninterrupted after the run, in what follows it: the run is whole in {plan.run_dir} (exit {code}); "
            f"`python -m foxhunt_ray.evaluate {plan.run_dir}` evaluates it",
            file=sys.stderr,
            flush=True,
        )
        return code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _end_in_error(plan: Plan, monitor, err: Exception) -> int:
    """A run that raised: summary.json 'error' and EXIT_ERROR. A full disk gets one line (what happened, what is
    kept, what to do) instead of a traceback, and its temporary files are removed first: they may free the few
    bytes summary.json needs; when even that fails, the message says so and the previous summary stays."""
    full = disk_full(err)
    last = monitor.last["step"] if getattr(monitor, "last", None) else plan.resume_step
    if full is None and (refused := refused_file(err)) is not None:  # a link planted after the lock's check
        message = (
            f"{refused} (it appeared in the run folder while the run wrote it): the run stopped after update {last}; "
            f"diag.jsonl ends with whole lines and the kept checkpoints are whole; resume with --resume {plan.run_dir}"
        )
        print(f"error: {message}", file=sys.stderr, flush=True)
    elif full is None:
        traceback.print_exc()
        message = f"{type(err).__name__}: {err}"
    else:
        remove_tmp_files(plan.run_dir)
        what = {
            errno.EDQUOT: f"the disk quota for {plan.run_dir} is used up",
            errno.EFBIG: f"a file in {plan.run_dir} reached the size this process may write (ulimit -f)",
        }.get(full.errno, f"the disk holding {plan.run_dir} is full")
        message = (
            f"{what} ({full.strerror or full}): the run stopped after update {last}; diag.jsonl ends with whole "
            f"lines and the kept checkpoints are whole; free some space, then resume with --resume {plan.run_dir}"
        )
        print(f"error: {message}", file=sys.stderr, flush=True)
    try:
        return monitor.finish("error", message)
    except Exception as again:
        if disk_full(again) is None and refused_file(again) is None:
            raise
        why = "the disk is still full" if disk_full(again) is not None else str(refused_file(again))
        print(
            f"error: summary.json not written, {why} ({SUMMARY_FILE} keeps what it held before)",
            file=sys.stderr,
            flush=True,
        )
        monitor.exit_code = EXIT_ERROR
        return EXIT_ERROR

"""The driver shared by `python -m foxhunt_ray.local` and `python -m foxhunt_ray.job`.

It resolves the preset and the `--set` overrides into one RunConfig, validates it (every bad value at once),
stamps the code (foxhunt_ray.provenance) and refuses a mismatch with `--expect-code-sha`, creates
`<out>/<code_sha>/<fold>/` with config.json, diag.jsonl, summary.json and checkpoints/, and runs the roles:

- serial (`--serial`): rollout workers, the learner worker and the monitor in this process, no Ray;
- Ray: rollout actors and the learner actor (foxhunt_ray.remote), driven with `ray.wait`; the monitor stays in
  the driver process, which owns the run folder and must hear of a kill at once.

Either way the learner worker checkpoints every `--checkpoint-every` updates; weights go to the rollout workers
every `--broadcast-every` updates (one object, shared by every worker). A kill by a rule keeps a checkpoint and
exits 3; Ctrl-C keeps a checkpoint and exits 0 (status "stopped"); an error exits 1. `--resume RUN_DIR`
continues a run from its newest checkpoint that its diag.jsonl reaches, with the run's own config.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from actors.kill_rules import EXIT_ERROR, EXIT_OK
from actors.learner_worker import LearnerWorker, list_checkpoints
from actors.monitor import DIAG_FILE, DiagFileError, Monitor, load_baseline, read_diag, step_records
from actors.rollout import RolloutWorker
from foxhunt_ray import provenance
from foxhunt_ray.config import ConfigError, RunConfig, apply_overrides, from_dict
from foxhunt_ray.presets import PRESET_NAMES, run_preset
from lobsim_env import N_ACTIONS
from lobsim_env.core import obs_size

CONFIG_FILE = "config.json"
RESUME_SEED_STRIDE = 1_000_003  # a resumed run's rollout workers get fresh books, not the run's first episodes


@dataclass(kw_only=True, frozen=True)
class DriverConfig:
    """How a run is driven (not what is trained): recorded beside the RunConfig in config.json."""

    steps: int = 200
    """Learner updates: the run ends after update `steps` (a resumed run continues to it)."""
    rollout_workers: int = 2
    """Rollout workers (Ray actors, or plain objects in serial mode)."""
    fold: int = 0
    """Walk-forward fold; the run folder is <out>/<code_sha>/<fold>/."""
    broadcast_every: int = 4
    """K: the learner's policy weights go to the rollout workers every K updates."""
    checkpoint_every: int = 100
    """M: the learner worker checkpoints every M updates (and at the end, on a kill and on Ctrl-C)."""
    max_worker_restarts: int = 3
    """Ray restarts of a rollout actor that died (its in-flight sample is retried on the new one)."""

    def errors(self) -> list[str]:
        errs = []
        for name, lo in (
            ("steps", 1),
            ("rollout_workers", 1),
            ("fold", 0),
            ("broadcast_every", 1),
            ("checkpoint_every", 1),
            ("max_worker_restarts", 0),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                errs.append(f"driver.{name}={v!r} must be an int >= {lo}")
        return errs


def parse_args(argv: list[str] | None, prog: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=prog, description="Train foxhunt_ray: rollout workers, learner, monitor.")
    p.add_argument("--preset", choices=PRESET_NAMES, default=None, help="named config (default plan_a_v2)")
    p.add_argument("--steps", type=int, default=None, help="learner updates (default 200)")
    p.add_argument("--rollout-workers", type=int, default=None, help="rollout workers (default 2)")
    p.add_argument("--envs-per-worker", type=int, default=None, help="books per rollout worker (rollout.num_envs)")
    p.add_argument("--fold", type=int, default=None, help="walk-forward fold (default 0)")
    p.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    p.add_argument("--out", default="runs", help="runs root: the run folder is OUT/<code_sha>/<fold>/")
    p.add_argument("--baseline", default=None, metavar="RUN_DIR", help="baseline run for the l_q and pnl rules")
    p.add_argument("--expect-code-sha", default=None, help="refuse to start unless code_sha or content hash is this")
    p.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue this run from its newest checkpoint")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override, e.g. --set learner.lr=1e-4 --set kill.pnl_deficit_usd=1e6 (repeatable)",
    )
    p.add_argument("--serial", action="store_true", help="all roles in this process, no Ray")
    p.add_argument("--broadcast-every", type=int, default=None, help="K: updates between weight broadcasts (4)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="M: updates between checkpoints (100)")
    p.add_argument("--inject-nan-at", type=int, default=None, metavar="STEP", help="test only: NaN loss at STEP")
    p.add_argument("--flip-distill-sign", action="store_true", help="test only: distil pi towards -Q")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


@dataclass(kw_only=True)
class Plan:
    """Everything resolved before a run starts."""

    config: RunConfig
    driver: DriverConfig
    run_dir: Path
    code_sha: str
    baseline: str | None
    resume_step: int = 0
    checkpoint: Path | None = None
    serial: bool = False
    quiet: bool = False


class UsageError(ValueError):
    """A bad flag, config, code_sha or run folder: printed, exit 1, nothing started."""


def resolve(args: argparse.Namespace) -> Plan:
    """Flags -> Plan; raises UsageError (or ConfigError) naming every bad value."""
    sha = provenance.code_sha()
    if args.expect_code_sha is not None:
        ok, sha = provenance.matches(args.expect_code_sha)
        if not ok:
            raise UsageError(
                f"refusing to start: --expect-code-sha={args.expect_code_sha} but this code is {sha} "
                f"({provenance.content_sha()}); check out that commit or drop the flag"
            )
    if args.resume is not None:
        return _resolve_resume(args, sha)
    errs: list[str] = []
    config = run_preset(args.preset or "plan_a_v2")
    sets = list(args.overrides)
    if args.seed is not None:
        sets.append(f"seed={args.seed}")
    if args.envs_per_worker is not None:
        sets.append(f"rollout.num_envs={args.envs_per_worker}")
    if args.inject_nan_at is not None:
        sets.append(f"learner.inject_nan_at={args.inject_nan_at}")
    if args.flip_distill_sign:
        sets.append("learner.flip_distill_sign=true")
    try:
        config = apply_overrides(config, sets)
        errs += config.errors()
    except ConfigError as err:
        errs += err.errors
    driver = DriverConfig(**_driver_flags(args))
    errs += driver.errors()
    if args.baseline is not None:
        try:
            load_baseline(args.baseline)  # read once here so that a bad baseline stops the run before it starts
        except DiagFileError as err:
            errs.append(f"--baseline={args.baseline}: {err}")
    if errs:
        raise ConfigError(errs)
    run_dir = Path(args.out) / sha / str(driver.fold)
    if (run_dir / DIAG_FILE).exists() or (run_dir / CONFIG_FILE).exists():
        raise UsageError(
            f"run folder {run_dir} already holds a run: continue it with --resume {run_dir}, "
            "or pick another --out or --fold"
        )
    return Plan(
        config=config,
        driver=driver,
        run_dir=run_dir,
        code_sha=sha,
        baseline=args.baseline,
        serial=args.serial,
        quiet=args.quiet,
    )


def _driver_flags(args: argparse.Namespace) -> dict:
    names = ("steps", "rollout_workers", "fold", "broadcast_every", "checkpoint_every")
    return {n: getattr(args, n) for n in names if getattr(args, n) is not None}


def _resolve_resume(args: argparse.Namespace, sha: str) -> Plan:
    run_dir = Path(args.resume)
    fixed = [f for f in ("preset", "seed", "envs_per_worker", "fold", "inject_nan_at", "baseline") if getattr(args, f)]
    fixed += ["set"] * bool(args.overrides) + ["flip_distill_sign"] * args.flip_distill_sign
    if fixed:
        raise UsageError(
            f"--resume continues {run_dir} with its own config.json; drop {['--' + f.replace('_', '-') for f in fixed]}"
            " (only --steps, --rollout-workers, --broadcast-every, --checkpoint-every, --serial may change)"
        )
    try:
        saved = json.loads((run_dir / CONFIG_FILE).read_text())
        config = from_dict(RunConfig, saved["run"]).validate()
        driver = from_dict(DriverConfig, {**saved["driver"], **_driver_flags(args)})
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UsageError(f"cannot resume {run_dir}: {CONFIG_FILE} unreadable ({err}); pass a run folder") from None
    if errs := driver.errors():
        raise ConfigError(errs)
    diag_path = run_dir / DIAG_FILE
    last = max((r["step"] for r in step_records(read_diag(diag_path))), default=0) if diag_path.exists() else 0
    # The newest checkpoint the diag file reaches: a crash between a checkpoint and its diag line leaves a
    # checkpoint one step ahead of the file; the one before it is kept for exactly this.
    usable = [(s, p) for s, p in list_checkpoints(run_dir) if s <= last]
    if not usable:
        raise UsageError(f"cannot resume {run_dir}: no checkpoint at or before its last diag step {last}")
    step, ckpt = usable[-1]
    if saved.get("code_sha") != sha:
        print(f"warning: {run_dir} was started by code {saved.get('code_sha')}, resuming with {sha}", file=sys.stderr)
    return Plan(
        config=config,
        driver=driver,
        run_dir=run_dir,
        code_sha=sha,
        baseline=saved.get("baseline"),
        resume_step=step,
        checkpoint=ckpt,
        serial=args.serial,
        quiet=args.quiet,
    )


def write_config(plan: Plan) -> None:
    """config.json: the resolved RunConfig and DriverConfig, code_sha and baseline (atomic write)."""
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "code_sha": plan.code_sha,
        "content_sha": provenance.content_sha(),
        "baseline": plan.baseline,
        "run": plan.config.to_dict(),
        "driver": dataclasses.asdict(plan.driver),
    }
    tmp = plan.run_dir / (CONFIG_FILE + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, plan.run_dir / CONFIG_FILE)


class Progress:
    """The progress line: updates, env steps/s, qpa_ema, pnl; at most one line every `every_s` seconds."""

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
        print(
            f"[{elapsed:7.1f}s] update {rec['step']}/{self.total}  env steps {env:,} "
            f"({(env - self.env0) / elapsed:,.0f}/s)  qpa_ema {rec.get('qpa_ema', float('nan')):+.3f}  "
            f"pnl ${rec.get('pnl_cum_usd', 0.0):,.0f}",
            flush=True,
        )


def worker_seed(plan: Plan) -> int:
    return plan.config.seed + plan.resume_step * RESUME_SEED_STRIDE


def learner_kwargs(plan: Plan) -> dict:
    return dict(
        obs_dim=obs_size(plan.config.market),
        n_actions=int(N_ACTIONS),
        run_dir=str(plan.run_dir),
        seed=plan.config.seed,
        checkpoint_every=plan.driver.checkpoint_every,
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
        RolloutWorker(rollout, cfg.market, worker_index=i, seed=worker_seed(plan), fold=drv.fold, weights=weights)
        for i in range(drv.rollout_workers)
    ]
    code, i = None, 0
    try:
        while learner.step < drv.steps:
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


def run_ray(plan: Plan, monitor: Monitor, progress: Progress, hook: Hook | None = None) -> int:
    """Rollout actors and the learner actor, driven with ray.wait; the monitor stays here."""
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
            cls.remote(cfg.rollout, cfg.market, worker_index=i, seed=worker_seed(plan), fold=drv.fold, weights=weights)
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


def _drive(plan: Plan, monitor: Monitor, progress: Progress, learner, workers: list, hook: Hook | None) -> int:
    import ray

    drv = plan.driver
    samples = {w.sample.remote(): i for i, w in enumerate(workers)}
    updates: list = []  # in submission order; the actor runs them in that order
    dispatched, lost_in_a_row, code = plan.resume_step, 0, None
    while updates or dispatched < drv.steps:
        can_dispatch = dispatched < drv.steps and len(updates) < MAX_UPDATES_IN_FLIGHT
        wait_on = ([*samples] if can_dispatch else []) + updates[:1]
        (ready,), _ = ray.wait(wait_on, num_returns=1)
        if updates and ready == updates[0]:
            updates.pop(0)
            diag = ray.get(ready)  # ready: this does not block
            if diag is None or "lost_sample" in diag:
                dispatched -= 1  # no step: a bad payload (counted in bad_payloads) or a sample a dead actor lost
                lost_in_a_row = lost_in_a_row + 1 if diag is not None else 0
                if lost_in_a_row > MAX_LOST_IN_A_ROW:
                    raise RuntimeError(f"{lost_in_a_row} samples lost in a row: {diag['lost_sample']}")
                continue
            lost_in_a_row = 0
            if (code := _record(monitor, progress, diag)) is not None:
                break
            step = int(diag["step"])
            if hook is not None:
                hook(step, workers)
            if step % drv.broadcast_every == 0:
                weights = learner.policy_weights.remote()
                for w in workers:
                    w.set_weights.remote(weights)
        else:
            i = samples.pop(ready)
            updates.append(learner.update_from.remote([ready]))  # nested: the learner fetches it itself
            dispatched += 1
            samples[workers[i].sample.remote()] = i
    ray.get(learner.checkpoint.remote())
    return code if code is not None else monitor.finish("done")


def _record(monitor: Monitor, progress: Progress, diag: dict) -> int | None:
    decision = monitor.record(diag)
    progress.show(monitor.last, force=decision is not None)
    if decision is not None:
        print(f"killed by rule {decision.rule} at update {decision.step}: {decision.message}", file=sys.stderr)
        return monitor.exit_code
    return None


def _sigterm_as_interrupt():
    """`ray job stop` and schedulers send SIGTERM: treat it as Ctrl-C (checkpoint, summary 'stopped').
    Returns the previous handler, or None where signals cannot be set (not the main thread)."""

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
) -> int:
    """Parse, resolve, run; returns the exit code (0 done or stopped, 3 killed, 1 error)."""
    args = parse_args(argv, prog)
    try:
        plan = resolve(args)
        stamp = {"code_sha": plan.code_sha, "preset": plan.config.preset, "fold": plan.driver.fold}
        resume_at = plan.resume_step if plan.checkpoint is not None else None
        if plan.resume_step == 0:
            write_config(plan)
        monitor = Monitor(plan.run_dir, plan.config.kill, plan.baseline, stamp=stamp, resume_at=resume_at)
    except (UsageError, ValueError, OSError) as err:  # ConfigError and DiagFileError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    progress = Progress(plan)
    mode = "serial" if plan.serial else "ray"
    print(
        f"run folder {plan.run_dir}  ({mode}, preset {plan.config.preset}, code {plan.code_sha}, "
        f"updates {plan.resume_step}..{plan.driver.steps})",
        flush=True,
    )
    previous = _sigterm_as_interrupt()
    try:
        if plan.serial:
            code = run_serial(plan, monitor, progress, hook)
        else:
            import ray

            if not ray.is_initialized():
                (ray_init or ray.init)()
            code = run_ray(plan, monitor, progress, hook)
    except Exception as err:
        traceback.print_exc()
        code = monitor.finish("error", f"{type(err).__name__}: {err}")
    finally:
        monitor.close()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if monitor.last is not None:
        progress.show(monitor.last, force=True)
    print(f"run folder {plan.run_dir}  exit {code}", flush=True)
    return code if code is not None else EXIT_OK

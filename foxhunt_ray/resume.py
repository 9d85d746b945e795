"""A resume's Plan (foxhunt_ray.driver.resolve with --resume; a new run's: foxhunt_ray.resolve), in named steps:
the flags that may not change refused (`refuse_fixed`), the run's config.json read (`read_saved`), checked on this
machine (`check_saved`), and the checkpoint it continues from picked (`resume_point_of`): a run done or killed is
refused unless a checkpoint is chosen. The arguments are read, never written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from actors.diag_file import DIAG_FILE, read_diag, step_records
from actors.envs import EnvSpaces
from actors.files import MAX_TEXT_BYTES, read_bounded
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.cli import UsageError, resumable_flags, run_config_flags
from foxhunt_ray.config import ConfigError, RunConfig
from foxhunt_ray.plan import DriverConfig, Plan
from foxhunt_ray.resolve import _probe, flag_settings
from foxhunt_ray.run_folder import (
    CONFIG_FILE,
    ResumePoint,
    RunFolderError,
    SavedConfig,
    config_changes,
    out_of,
    read_config,
    resume_point,
)


def resolve_resume(args: argparse.Namespace, sha: str) -> Plan:
    """--resume RUN_DIR: the run's own config.json, the driver flags given, from its newest checkpoint."""
    run_dir = Path(args.resume)
    refuse_fixed(args, run_dir)
    record, driver, changes = read_saved(args, run_dir)
    spaces = check_saved(record.run, driver)
    point = resume_point_of(args, run_dir, record, driver, spaces)
    notes = list(point.notes)
    if changes:
        notes.append(
            f"{CONFIG_FILE} changed since the run wrote it, accepted (--allow-config-change): " + "; ".join(changes)
        )
    if record.doc.get("code_sha") != sha:
        print(
            f"warning: {run_dir} was started by code {record.doc.get('code_sha')}, resuming with {sha}", file=sys.stderr
        )
    return Plan(config=record.run, driver=driver, spaces=spaces, run_dir=run_dir, out=out_of(run_dir, driver.name),
                code_sha=sha, baseline=record.doc.get("baseline"), resume_step=point.step, checkpoint=point.checkpoint,
                serial=args.serial, quiet=args.quiet, fresh=False, monitor_resume_at=point.step, notes=tuple(notes),
                config_change=tuple(changes), faults=record.faults)  # fmt: skip


def refuse_fixed(args: argparse.Namespace, run_dir: Path) -> None:
    """UsageError naming the flags given that choose a run's config (the resume has the run's own)."""
    fixed = [f for f in run_config_flags() if getattr(args, f, None)]
    fixed += ["set"] * bool(args.overrides) + ["flip_distill_sign"] * args.flip_distill_sign
    if fixed:
        raise UsageError(
            f"--resume continues {run_dir} with its own config.json; drop {['--' + f.replace('_', '-') for f in fixed]}"
            f" (only {', '.join(resumable_flags())} may change)"
        )


def read_saved(args: argparse.Namespace, run_dir: Path) -> tuple[SavedConfig, DriverConfig, list[str]]:
    """The run's config.json with the driver flags given (its storage the URI it was resumed from), and the fields
    changed since the run wrote it; UsageError when it cannot be read, or was changed without
    --allow-config-change."""
    try:
        record = read_config(run_dir, flag_settings(args))
    except RunFolderError as err:
        raise UsageError(f"cannot resume {run_dir}: {err}") from None
    driver = record.driver
    if getattr(args, "resume_storage", None):  # resumed from a storage URI: it stays the run's storage
        driver = dataclasses.replace(driver, storage=args.resume_storage)
    changes = config_changes(run_dir, record.text) or []
    if changes and not args.allow_config_change:
        raise UsageError(
            f"cannot resume {run_dir}: its {CONFIG_FILE} was changed since the run wrote it: {'; '.join(changes)}; "
            "undo the edit, or pass --allow-config-change to continue the run on the changed config; nothing was "
            "changed"
        )
    return record, driver, changes


def check_saved(config: RunConfig, driver: DriverConfig) -> EnvSpaces:
    """The env's spaces, the driver config and what the run needs in memory checked here (e.g. more
    --rollout-workers than this machine holds); ConfigError naming every bad value."""
    errs = driver.errors()
    spaces = _probe(config, errs)
    if spaces is not None and not errs:
        from foxhunt_ray import memory

        errs += memory.errors(config, driver, spaces)
    if errs or spaces is None:
        raise ConfigError(errs)
    return spaces


def resume_point_of(
    args: argparse.Namespace, run_dir: Path, record: SavedConfig, driver: DriverConfig, spaces: EnvSpaces
) -> ResumePoint:
    """The checkpoint the run continues from: the newest the diag file reaches that this learner loads (a crash
    between a checkpoint and its diag line leaves one a step ahead of the file; the one before it is kept for
    this), or --resume-checkpoint's. UsageError for a run done or killed, or one that would train nothing."""
    diag_path = run_dir / DIAG_FILE
    last = max((r["step"] for r in step_records(read_diag(diag_path))), default=0) if diag_path.exists() else 0
    ended = _ended(run_dir)
    done = ended["step"] if ended and ended["status"] == "done" else None
    if done is not None and done >= driver.steps and args.resume_checkpoint is None:
        raise _nothing_to_train(run_dir, f"is done at update {done} (summary.json)", done, args, driver, record.doc)
    killed = ended if ended and ended["status"] == "killed" else None
    if killed is not None and args.resume_checkpoint is None:
        raise UsageError(
            f"{run_dir} was killed by rule {killed.get('rule')} at update {killed['step']} (summary.json): a resume "
            "would train past the kill and rewrite what the run recorded; start a new run (another --out or "
            "--fold), or pass --resume-checkpoint STEP to continue from that checkpoint on purpose; nothing was "
            "changed"
        )
    lrn = record.run.learner
    point = resume_point(run_dir, last, lrn, spaces.obs_dim, spaces.n_actions, chosen=args.resume_checkpoint)
    if point.step >= driver.steps and not getattr(args, "replacing_learner", False):
        which = "the chosen" if args.resume_checkpoint else "its newest"
        at = f"would resume from update {point.step} ({which} checkpoint)"
        raise _nothing_to_train(run_dir, at, point.step, args, driver, record.doc)
    return point


def _nothing_to_train(run_dir: Path, state: str, reached: int, args, driver: DriverConfig, saved: dict) -> UsageError:
    """The refusal of a resume whose --steps (given, or the run's own) end the run at or before the update it would
    resume from (`state` says where the run is): it would start and end at once. Names the update and the flags
    that train the run further."""
    steps = f"--steps {driver.steps}" if args.steps is not None else f"its own --steps {driver.steps}"
    fix = f"pass a larger --steps, e.g. --steps {2 * max(reached, 1)}"
    own = (saved.get("driver") or {}).get("steps")
    if args.steps is not None and isinstance(own, int) and own > reached:
        fix += f", or leave --steps out to go on towards the run's own {own:,} updates"
    if driver.time_limit_s:
        fix += f" (for at most another {driver.time_limit_s:g} s of training: --time-limit-s S sets another budget)"
    return UsageError(
        f"{run_dir} {state}, and {steps} ends the run there, so the resume would train nothing: {fix}; "
        "nothing was changed"
    )


def _ended(run_dir: Path) -> dict | None:
    """The run's summary.json when it ended 'done' or 'killed' at a whole step; None otherwise (no summary.json: a
    run that crashed, or never reached its first record). UsageError for one that cannot be read: it is what says a
    run was killed, and a resume passing over it would train past the kill."""
    path = run_dir / SUMMARY_FILE
    try:
        summary = json.loads(read_bounded(path, MAX_TEXT_BYTES))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:
        raise UsageError(
            f"cannot resume {run_dir}: {path} cannot be read ({type(err).__name__}: {err}); it says how the run "
            "ended (done, killed, stopped), and a resume without it could train past a kill: put back the run's own "
            f"file (a backup, its --storage copy), or remove it (rm {path}) to resume from the newest checkpoint as "
            "a run that ended without one; nothing was changed"
        ) from None
    ended = isinstance(summary, dict) and summary.get("status") in ("done", "killed")
    return summary if ended and isinstance(summary.get("step"), int) else None

"""The driver shared by `python -m foxhunt_ray.local` and `python -m foxhunt_ray.job`.

It resolves the preset and the `--set` overrides into one RunConfig, validates it (every bad value at once, the
env's too: `--env-id` must name a registered Gymnasium env with a 1-D Box observation and a Discrete action
space, whose spaces size the learner; actors.envs.probe_env),
stamps the code (foxhunt_ray.provenance) and refuses a mismatch with `--expect-code-sha`, creates the run folder
`<out>/<code_sha>/<name>/<fold>/` (the name: `--name`, else preset, env, seed and start time;
foxhunt_ray.run_folder) with config.json, diag.jsonl, summary.json and checkpoints/, points `<out>/latest` at it,
and runs the roles (foxhunt_ray.loops):

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
import tomllib
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from actors.checkpoints import list_checkpoints
from actors.diag_file import DIAG_FILE, DiagFileError, load_baseline, read_diag, step_records
from actors.envs import EnvSpaces, is_market, probe_env
from actors.files import (
    MAX_DIAG_BYTES,
    MAX_TEXT_BYTES,
    disk_full,
    read_bounded,
    refused_file,
    remove_tmp_files,
    write_atomic,
)
from actors.kill_rules import EXIT_ERROR, EXIT_OK
from actors.monitor import SUMMARY_FILE, Monitor
from foxhunt_ray import provenance, run_folder
from foxhunt_ray.config import ConfigError, RunConfig, market_reward_scale, order_fee_usd
from foxhunt_ray.loops import Hook, LearnerLost, Progress, StopSignals, run_serial
from foxhunt_ray.ray_loop import run_ray
from foxhunt_ray.plan import DriverConfig, Plan
from foxhunt_ray.presets import PRESET_NAMES, SETTINGS, SIZING_NAMES, SIZINGS, name_errors, run_preset, with_overrides
from foxhunt_ray.run_folder import (
    CONFIG_FILE,
    RunFolderError,
    RunLock,
    accept_config_change,
    check_name,
    config_changes,
    out_of,
    point_latest,
    read_config,
    record_config,
    resolve_run_dir,
    resume_point,
    run_name,
)
from foxhunt_ray.storage import (
    RunStorage,
    StorageClaimError,
    check_root,
    is_uri,
    root_of,
    stored_copy_uri,
    take_stored_run,
)
from learner.config import RETIRED_FIELDS, FaultInjection
from lobsim_env import ENV_ID
from lobsim_env.validation import InputError


@dataclass(kw_only=True, frozen=True)
class EntryDefaults:
    """What an entry point does with a flag left out: foxhunt_ray.job keeps DriverConfig's and the presets' own
    (plan_a_v2, 200 updates, 2 rollout workers, sizing gpu); foxhunt_ray.local runs phase4_3 for a time budget
    at the size this machine trains (foxhunt_ray.local.LOCAL_DEFAULTS)."""

    preset: str = "plan_a_v2"
    """--preset left out."""
    sizing: str = "gpu"
    """--sizing left out: 'gpu', 'gpu_host', 'cpu', or 'auto' (cpu when torch sees no CUDA device, else gpu_host)."""
    rollout_workers: int = 2
    """--rollout-workers left out."""
    max_payloads_waiting: int | None = None
    """--max-payloads-waiting left out (None: DriverConfig's)."""
    steps: int = 200
    """--steps left out."""
    time_limit_s: float = 0.0
    """--time-limit-s left out, and --steps left out too (a run given its steps has no budget unless asked)."""
    steps_with_a_time_limit: int | None = None
    """--steps left out and --time-limit-s given (None: `steps`): a budget of time asked for runs as long as it says."""


def parse_args(
    argv: list[str] | None,
    prog: str,
    defaults: EntryDefaults | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.Namespace:
    """The driver's flags, and an entry point's own (`parents`, parsed by the entry point) in the same --help."""
    d = defaults or EntryDefaults()
    budget = f"{d.time_limit_s:g} s when --steps is left out, else none" if d.time_limit_s else "none"
    p = argparse.ArgumentParser(
        prog=prog,
        description="Train foxhunt_ray: rollout workers, learner, monitor.",
        epilog=CONFIG_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=list(parents),
    )
    p.add_argument("--preset", choices=PRESET_NAMES, default=None, help=f"named config (default {d.preset})")
    p.add_argument(
        "--settings",
        choices=tuple(SETTINGS),
        default=None,
        help="learning rates and reward scale: learn (default: lr 3e-3, reward_scale from the market's units) or "
        "seed (the seed's lr 2.5e-4, reward_scale 1); foxhunt_ray/presets.py",
    )
    p.add_argument(
        "--sizing",
        choices=("auto", *SIZINGS),
        default=None,
        help="widths and batch shapes: gpu (H 512, the presets' production size, 16 books a worker), gpu_host (H 512, "
        "2,048 books a worker, learner steps of 256: one GPU host) or cpu (H 128, what a 2-core CPU trains); auto: "
        f"cpu when torch sees no CUDA device, else gpu_host (default {d.sizing})",
    )
    p.add_argument(
        "--env-id",
        default=None,
        metavar="ID",
        help=f"Gymnasium env id (default {ENV_ID}, the market): any registered id with a 1-D Box observation and "
        "a Discrete action space, e.g. CartPole-v1; 'module:Id' imports module first",
    )
    unbounded = f"; {d.steps_with_a_time_limit:,} with --time-limit-s" if d.steps_with_a_time_limit else ""
    p.add_argument("--steps", type=int, default=None, help=f"learner updates (default {d.steps:,}{unbounded})")
    p.add_argument("--rollout-workers", type=int, default=None, help=f"rollout workers (default {d.rollout_workers})")
    p.add_argument("--envs-per-worker", type=int, default=None, help="books per rollout worker (rollout.num_envs)")
    p.add_argument(
        "--fold",
        type=int,
        default=None,
        help="walk-forward fold (default 0; with --data: K trains on the cache's dates before the K-th and evaluates "
        "on it, default the last date)",
    )
    p.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help="train on real days: a day cache made by `python -m lobsim_env.data ingest` (docs/data.md); the "
        "market's contract, fees and reward scale come from its days",
    )
    p.add_argument(
        "--days",
        default=None,
        metavar="NAMES",
        help="with --data: the days to draw from, comma-separated (venue/instrument/date, an instrument, a date)",
    )
    p.add_argument(
        "--holdout",
        default=None,
        metavar="NAMES",
        help="with --data: days never trained on, the test of a cross-instrument fold (e.g. GOOG, trained on AAPL "
        "and AMZN)",
    )
    p.add_argument(
        "--blocks",
        type=int,
        default=None,
        metavar="N",
        help="with --data: cut each day into N blocks of equal time, the folds running over them as over days "
        "(e.g. 13: NASDAQ's half hours; the LOBSTER samples hold one day each)",
    )
    p.add_argument("--seed", type=int, default=None, help="base seed (default 0)")
    p.add_argument(
        "--out",
        default="runs",
        help="runs root: the run folder is OUT/<code_sha>/<name>/<fold>/; OUT/latest points there",
    )
    p.add_argument(
        "--name",
        default=None,
        help="the run's name, its folder below <code_sha> (default: <preset>-<env>-s<seed>-<UTC start time>)",
    )
    p.add_argument(
        "--storage",
        default=None,
        metavar="ROOT",
        help="also keep the run folder at ROOT/<code_sha>/<name>/<fold>/: a path or a URI (file://, s3:// with s3fs, "
        "...), copied at the start, after each checkpoint and at the end; --resume and evaluate read it back",
    )
    p.add_argument(
        "--learner-resources",
        default=None,
        metavar="JSON",
        help='Ray mode: custom resources for the learner actor, e.g. \'{"learner_node": 1}\' to place it on the node '
        "started with `ray start --resources '{\"learner_node\": 1}'`",
    )
    p.add_argument("--baseline", default=None, metavar="RUN_DIR", help="baseline run for the l_q and pnl rules")
    p.add_argument("--expect-code-sha", default=None, help="refuse to start unless code_sha or content hash is this")
    p.add_argument(
        "--resume",
        default=None,
        metavar="RUN_DIR",
        help="continue this run from its newest checkpoint (a run folder, OUT/latest, or its --storage URI)",
    )
    p.add_argument(
        "--resume-checkpoint",
        default=None,
        metavar="STEP|PATH",
        help="with --resume: restart from this kept checkpoint (a step or a file; 0: start over from step 0)",
    )
    p.add_argument(
        "--allow-config-change",
        action="store_true",
        help="with --resume: accept a config.json edited since the run wrote it (the changed fields are printed)",
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="RunConfig fields from a TOML or JSON file (a run's config.json too), on top of the preset; --set wins",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config (preset, settings, sizing, --config, --set) as JSON and exit; starts nothing",
    )
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
    p.add_argument(
        "--checkpoint-interval-s", type=float, default=None, metavar="S", help="...and seconds at least (60; 0: none)"
    )
    p.add_argument(
        "--keep-checkpoints", type=int, default=None, metavar="N",
        help="checkpoints the run folder keeps, the newest (2; 0: all, for a pick on a validation day)",
    )  # fmt: skip
    p.add_argument(
        "--max-payloads-waiting", type=int, default=None, help="rollout payloads waiting for the learner, at most "
        f"(default {d.max_payloads_waiting or DriverConfig.max_payloads_waiting})"
    )
    p.add_argument(
        "--max-payloads-per-call", type=int, default=None, metavar="N",
        help="payloads a learner call trains on, at most (0: all that are ready; default 0)",
    )
    p.add_argument(
        "--max-payloads-ahead", type=int, default=None, metavar="N",
        help="payloads being sampled or waiting for the learner, at most (0: no bound but --max-payloads-waiting; "
        "default 0)",
    )
    p.add_argument(
        "--time-limit-s",
        type=float,
        default=None,
        metavar="S",
        help=f"stop starting updates after S seconds of training (0: none; default {budget})",
    )
    p.add_argument(
        "--sample-timeout-s",
        type=float,
        default=None,
        metavar="S",
        help="Ray mode: restart a rollout actor whose sample has not come back in S seconds "
        f"(0: wait for ever; default {DriverConfig.sample_timeout_s:g})",
    )
    p.add_argument(
        "--learner-timeout-s",
        type=float,
        default=None,
        metavar="S",
        help="Ray mode: replace a learner actor that has not answered a call in S seconds "
        f"(0: wait for ever; default {DriverConfig.learner_timeout_s:g})",
    )
    p.add_argument(
        "--monitor-timeout-s",
        type=float,
        default=None,
        metavar="S",
        help="Ray mode: end the run (exit 1, its data kept by the driver) when the monitor actor has not answered in "
        f"S seconds (0: wait for ever; default {DriverConfig.monitor_timeout_s:g})",
    )
    p.add_argument("--inject-nan-at", type=int, default=None, metavar="STEP", help="test only: NaN loss at STEP")
    p.add_argument("--flip-distill-sign", action="store_true", help="test only: distil pi towards -Q")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    args.defaults = d
    return args


class UsageError(InputError):
    """A bad flag, config, code_sha or run folder: printed, exit 1, nothing started."""


CONFIG_HELP = """config (--config FILE, --set section.field=value, --print-config to see the result):
  top level  env_id, env_kwargs, seed
  market     the synthetic market                     lobsim_env/config.py MarketConfig
  learner    network, losses, optimiser, replay        learner/config.py LearnerConfig
  rollout    books per worker, steps per sample, ...   actors/config.py RolloutConfig
  kill       the kill rules' thresholds                actors/kill_rules.py KillConfig
every field is documented where it is defined (its docstring) and in docs/running.md; a preset's values:
  --preset NAME --print-config"""

_CHOICES_IN_A_FILE = ("preset", "settings", "sizing")
"""Top-level keys of a --config file that choose what it starts from, as the flags of the same names do."""


def read_config_file(path: str) -> tuple[dict[str, str], list[str]]:
    """(choices, overrides) of a --config file: `preset`, `settings`, `sizing` as the flags would give them, and
    every other field as a `section.field=<json>` override. TOML (.toml) or JSON; a run's config.json (its "run"
    entry) is accepted as is. UsageError naming the file and the fix when it cannot be read."""
    file = Path(path)
    try:
        text = read_bounded(file, MAX_TEXT_BYTES).decode()  # a FIFO, /dev/zero: named, not read
        doc = tomllib.loads(text) if file.suffix == ".toml" else json.loads(text)
    # JSONDecodeError and TOMLDecodeError are ValueErrors; RecursionError: arrays nested thousands deep
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise UsageError(
            f"--config={path}: cannot read it ({type(err).__name__}: {err}); pass a TOML file (.toml) or a JSON file "
            "of RunConfig fields, e.g. [learner] lr = 3e-3"
        ) from None
    if isinstance(doc, dict) and isinstance(doc.get("run"), dict):  # a run folder's config.json
        doc = doc["run"]
        if isinstance(doc.get("learner"), dict):  # one of older code: its test-only faults are not carried over
            doc = {**doc, "learner": {k: v for k, v in doc["learner"].items() if k not in RETIRED_FIELDS}}
    if not isinstance(doc, dict):
        raise UsageError(f"--config={path}: holds a {type(doc).__name__}, not a table of RunConfig fields")
    choices = {k: doc[k] for k in _CHOICES_IN_A_FILE if doc.get(k) is not None}
    sets = []
    for key, value in doc.items():
        if key in _CHOICES_IN_A_FILE:
            continue
        if isinstance(value, dict) and key != "env_kwargs":  # a section: one override per field
            sets += [f"{key}.{k}={json.dumps(v)}" for k, v in value.items()]
        else:
            sets.append(f"{key}={json.dumps(value)}")
    return choices, sets


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
    if args.resume_checkpoint is not None or args.allow_config_change:
        raise UsageError("--resume-checkpoint and --allow-config-change go with --resume RUN_DIR")
    errs: list[str] = []
    defaults = getattr(args, "defaults", None) or EntryDefaults()
    chosen, from_file = read_config_file(args.config) if getattr(args, "config", None) else ({}, [])
    for key, valid in (("preset", PRESET_NAMES), ("settings", tuple(SETTINGS)), ("sizing", (*SIZING_NAMES, "auto"))):
        if key in chosen and chosen[key] not in valid:  # the flags' own choices are checked by argparse
            raise UsageError(f"--config={args.config}: {key}={chosen[key]!r} is not one of {list(valid)}")
    name = args.preset or chosen.get("preset") or defaults.preset
    asked_sizing = args.sizing or chosen.get("sizing")
    sizing, sizing_reason = _sizing(name, asked_sizing, defaults.sizing)
    try:
        config = run_preset(name, settings=args.settings or chosen.get("settings"), sizing=sizing)
    except ValueError as err:  # a sizing that does not fit the preset (smoke has its own)
        raise UsageError(f"--sizing={asked_sizing}: {err}") from None
    sets = [*from_file, *args.overrides]  # the file first: a --set wins
    data_fold = None
    if getattr(args, "data", None) is not None:
        from_data, data_fold = data_sets(args.data, args.days, args.fold, args.blocks or 1, args.holdout)
        sets = [*from_data, *sets]
    elif any(getattr(args, f, None) is not None for f in ("days", "blocks", "holdout")):
        raise UsageError("--days, --blocks and --holdout pick days of a cache: they go with --data DIR")
    if args.env_id is not None:
        sets.append(f"env_id={json.dumps(args.env_id)}")
    if args.seed is not None:
        sets.append(f"seed={args.seed}")
    if args.envs_per_worker is not None:
        sets.append(f"rollout.num_envs={args.envs_per_worker}")
    faults = FaultInjection(inject_nan_at=args.inject_nan_at, flip_distill_sign=args.flip_distill_sign)
    errs += faults.errors()
    spaces = None
    try:
        config, bad_sets = with_overrides(config, sets)  # a bad --set is left out: the others are checked too
        errs += bad_sets + config.errors() + name_errors(config)
        config = config.resolved()  # reward_scale 'auto' -> the number, from the market as overridden
        spaces = _probe(config, errs)
    except ConfigError as err:
        errs += err.errors
    flags = _driver_flags(args)
    if data_fold is not None:
        flags["fold"] = data_fold
    name = args.name
    if name is None:
        made = run_name(preset=config.preset, env_id=str(config.env_id), seed=config.seed, started=time.time())
        name = _free_name(Path(args.out), sha, made, flags.get("fold", 0))
    elif (why := check_name(name)) is not None:
        errs.append(why)
    flags["name"] = name
    if args.storage is not None:
        if (why := check_root(args.storage, write=not getattr(args, "print_config", False))) is not None:
            errs.append(why)
        flags["storage"] = root_of(args.storage)
    if args.steps is None and "time_limit_s" in flags and defaults.steps_with_a_time_limit is not None:
        flags["steps"] = defaults.steps_with_a_time_limit
    flags.setdefault("steps", defaults.steps)
    flags.setdefault("rollout_workers", defaults.rollout_workers)
    if defaults.max_payloads_waiting is not None:
        flags.setdefault("max_payloads_waiting", defaults.max_payloads_waiting)
    if args.steps is None:
        flags.setdefault("time_limit_s", defaults.time_limit_s)
    driver = DriverConfig(**flags)
    errs += driver.errors()
    if args.baseline is not None:
        args.baseline = str(resolve_run_dir(args.baseline))  # OUT/latest: the run it points at now is recorded
        try:
            baseline = load_baseline(args.baseline)  # read once here: a bad baseline stops the run before it starts
        except DiagFileError as err:
            errs.append(f"--baseline={args.baseline}: {err}")
        else:
            # older runs stamped no env_id: they all trained on the market
            base_env = next(iter(baseline.values())).get("env_id", ENV_ID)
            if spaces is not None and base_env != config.env_id:
                errs.append(
                    f"--baseline={args.baseline} trained on env {base_env!r}, this run on {config.env_id!r}: "
                    "its l_c51 and pnl are no reference here; pick a baseline run of the same env"
                )
    if spaces is not None and not errs:  # what the config needs in memory, before the run folder is made
        from foxhunt_ray import memory

        errs += memory.errors(config, driver, spaces)
    if errs or spaces is None:
        raise ConfigError(errs)
    run_dir = run_folder.run_dir(args.out, sha, driver.name, driver.fold)
    note = check_fresh(run_dir)
    return Plan(
        config=config,
        driver=driver,
        spaces=spaces,
        run_dir=run_dir,
        out=Path(args.out),
        code_sha=sha,
        baseline=args.baseline,
        serial=args.serial,
        quiet=args.quiet,
        sizing_reason=sizing_reason,
        monitor_resume_at=0 if note else None,
        notes=(note,) if note else (),
        faults=faults,
    )


def _free_name(out: Path, sha: str, name: str, fold) -> str:
    """name, or name-2, name-3, ... when a run started in the same second with the same preset, env and seed
    already holds OUT/<code_sha>/<name>/<fold> (a name the user gave is never changed: check_fresh refuses it)."""
    n, free = 1, name
    while run_folder.run_dir(out, sha, free, fold).exists():
        n += 1
        free = f"{name}-{n}"
    return free


def check_fresh(run_dir: Path) -> str | None:
    """None for a folder a new run may take; a note when it holds a run that ended before its first checkpoint
    (nothing there to resume from, so a new run takes its place); UsageError when it holds a run to resume."""
    if not ((run_dir / DIAG_FILE).exists() or (run_dir / CONFIG_FILE).exists()):
        return None
    if list_checkpoints(run_dir):
        raise UsageError(
            f"run folder {run_dir} already holds a run: continue it with --resume {run_dir}, "
            "or pick another --name, --out or --fold"
        )
    diag = run_dir / DIAG_FILE
    n = read_bounded(diag, MAX_DIAG_BYTES).count(b"\n") if diag.exists() else 0
    return (
        f"run folder {run_dir} holds a run that ended before its first checkpoint ({n} diag lines, nothing to "
        "resume from): a new run replaces it"
    )


def _sizing(preset: str, asked: str | None, default: str) -> tuple[str | None, str]:
    """The sizing to build `preset` with (None: the preset's own, smoke's) and why, for the header."""
    if preset == "smoke" and asked in (None, "auto"):
        return None, "the smoke preset's own sizes"
    if asked not in (None, "auto"):
        return asked, f"--sizing {asked}"
    if default != "auto":
        return default, "the default here; --sizing cpu for a 2-core CPU's"
    import torch

    if torch.cuda.is_available():
        return "gpu_host", "torch sees a CUDA device; --sizing cpu for a 2-core CPU's"
    return "cpu", "torch sees no CUDA device; --sizing gpu_host for a GPU host's"


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


def data_sets(
    data: str, days: str | None, fold: int | None, blocks: int = 1, holdout: str | None = None
) -> tuple[list[str], int]:
    """--data DIR [--days NAMES] [--blocks N] [--holdout NAMES] [--fold K] -> the `market.*` settings of the replay
    market (lobsim_env.replay.replay_config: the days, their contract, fees and order size) and the fold, by the
    walk-forward protocol (foxhunt_ray.walkforward, docs/evaluation.md). The periods are the cache's dates in order,
    or with --blocks N each date's N blocks of equal time in order. Fold K (by default the last period) is tested on
    the K-th period (market.eval_days), validated on the one before it (market.val_days: the checkpoint is picked
    and the quoting rule tuned there) and trained on the periods before that; fold 1 has no validation period
    (trained on period 0). One period alone trains on its days and holds none out (the evaluation says so). With
    --holdout, a cross-instrument fold: the days it names are never trained on, the others' periods before the
    validation one are, and the held-out days' (K-1)-th and K-th periods validate and test (with one period: the
    held-out days whole are the test)."""
    from lobsim_env.data.layout import DataError, select_days
    from lobsim_env.replay import replay_config

    if not isinstance(blocks, int) or not 1 <= blocks <= 10_000:
        raise UsageError(f"--blocks={blocks!r} must be an int in 1..10000")
    root = Path(data).expanduser().resolve()

    def split(text: str | None) -> list[str]:
        return [d.strip() for d in text.split(",") if d.strip()] if text else []

    try:
        picked = select_days(root, split(days))
        apart = select_days(root, split(holdout)) if holdout else []
        learn = [m for m in picked if m not in apart]
        if not learn:
            raise UsageError(f"--holdout={holdout} holds out every day picked: nothing is left to train on")
        periods = sorted({(m.date, k) for m in picked + apart for k in range(blocks)})
        shown = [f"{d}#{k}" if blocks > 1 else d for d, k in periods]

        def named(m, k: int) -> str:
            return f"{m.key}#{k}" if blocks > 1 else m.key

        if len(periods) > 1:
            fold = len(periods) - 1 if fold is None else fold
            if not 1 <= fold < len(periods):
                raise UsageError(
                    f"--fold={fold} must be in 1..{len(periods) - 1}: fold K trains on the periods before the "
                    f"(K-1)-th of the {len(periods)} of {root} ({', '.join(shown[:6])}"
                    f"{' ...' if len(shown) > 6 else ''}), validates on the (K-1)-th and tests on the K-th"
                )
            first_held = periods[fold - 1] if fold >= 2 else periods[fold]
            train = [named(m, k) for m in learn for k in range(blocks) if (m.date, k) < first_held]
            tested = apart or picked

            def at(period: tuple[str, int]) -> list[str]:
                return [named(m, k) for m in tested for k in range(blocks) if (m.date, k) == period]

            held, val = at(periods[fold]), at(periods[fold - 1]) if fold >= 2 else []
        else:
            if fold not in (None, 0):
                raise UsageError(f"--fold={fold}: the days picked of {root} are one period ({shown[0]}): fold 0 only")
            fold, train, held, val = 0, [m.key for m in learn], [m.key for m in apart], []
        if not train:
            raise UsageError(f"--fold={fold}: no period of the training days comes before the validation and test ones")
        # the contract and the median price (the reward scale's) from the training days alone: the validation and
        # test days' prices stay out of everything the run is built from
        market = replay_config(root, sorted({name.partition("#")[0] for name in train}), blocks=blocks)
    except DataError as err:
        raise UsageError(f"--data={data}: {err}") from None
    fields = ("source", "data", "tick_size", "usd_per_tick", "maker_fee_usd", "taker_fee_usd", "maker_fee_bps")
    fields += ("taker_fee_bps", "order_size", "position_limit", "size_scale", "events_per_step", "horizon")
    fields += ("queue_model", "reference_price_ticks", "blocks")
    sets = [f"market.{f}={json.dumps(getattr(market, f))}" for f in fields]
    days_set = [f"market.days={json.dumps(train)}", f"market.eval_days={json.dumps(held)}"]
    return [*sets, *days_set, f"market.val_days={json.dumps(val)}"], fold


def _probe(config: RunConfig, errs: list[str]) -> EnvSpaces | None:
    """The env's spaces (one throwaway copy built and checked, as a rollout worker builds it); a problem goes
    into errs with every other bad value, and the run does not start."""
    bad_env = [e for e in errs if e.startswith(("env_id=", "env_kwargs="))]
    if bad_env or (is_market(config.env_id) and any(e.startswith("market.") for e in errs)):
        return None  # already reported: building the env would only repeat it
    try:
        return probe_env(config.env_id, market=config.market, env_kwargs=config.env_kwargs)
    except Exception as err:  # the env's own constructor may raise anything; name the env and stop before the run
        errs.append(str(err) if isinstance(err, ValueError) else f"env_id={config.env_id!r} failed to build: {err!r}")
        return None


def _driver_flags(args: argparse.Namespace) -> dict:
    names = (
        "steps",
        "rollout_workers",
        "fold",
        "broadcast_every",
        "checkpoint_every",
        "checkpoint_interval_s",
        "keep_checkpoints",
        "max_payloads_waiting",
        "max_payloads_per_call",
        "max_payloads_ahead",
        "time_limit_s",
        "sample_timeout_s",
        "learner_timeout_s",
        "monitor_timeout_s",
    )
    flags = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    if getattr(args, "learner_resources", None) is not None:
        flags["learner_resources"] = _resources(args.learner_resources)
    return flags


def _resources(text: str) -> dict:
    """--learner-resources JSON -> a dict (its values are checked by DriverConfig.errors with the others)."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise UsageError(
            f"--learner-resources={text!r} must be a JSON object of custom resources, e.g. '{{\"learner_node\": 1}}'"
        )
    return value


RUN_CONFIG_FLAGS = (
    "preset",
    "settings",
    "sizing",
    "config",
    "env_id",
    "seed",
    "envs_per_worker",
    "fold",
    "data",
    "days",
    "blocks",
    "holdout",
    "inject_nan_at",
    "baseline",
    "name",
    "storage",
)
"""Flags that choose a run's config: a resume takes its config.json instead and refuses them (also --set and
--flip-distill-sign)."""


def _resolve_resume(args: argparse.Namespace, sha: str) -> Plan:
    run_dir = Path(args.resume)
    fixed = [f for f in RUN_CONFIG_FLAGS if getattr(args, f, None)]
    fixed += ["set"] * bool(args.overrides) + ["flip_distill_sign"] * args.flip_distill_sign
    if fixed:
        raise UsageError(
            f"--resume continues {run_dir} with its own config.json; drop {['--' + f.replace('_', '-') for f in fixed]}"
            " (only --steps, --rollout-workers, --broadcast-every, --checkpoint-every, --checkpoint-interval-s,"
            " --keep-checkpoints,"
            " --max-payloads-waiting, --max-payloads-per-call, --max-payloads-ahead, --time-limit-s,"
            " --sample-timeout-s, --learner-timeout-s, --monitor-timeout-s, --learner-resources, "
            "--serial may change)"
        )
    try:
        record = read_config(run_dir, _driver_flags(args))
    except RunFolderError as err:
        raise UsageError(f"cannot resume {run_dir}: {err}") from None
    text, saved, config, driver = record.text, record.doc, record.run, record.driver
    if getattr(args, "resume_storage", None):  # resumed from a storage URI: it stays the run's storage
        driver = dataclasses.replace(driver, storage=args.resume_storage)
    changes = config_changes(run_dir, text) or []
    if changes and not args.allow_config_change:
        raise UsageError(
            f"cannot resume {run_dir}: its {CONFIG_FILE} was changed since the run wrote it: {'; '.join(changes)}; "
            "undo the edit, or pass --allow-config-change to continue the run on the changed config; nothing was "
            "changed"
        )
    errs = driver.errors()
    spaces = _probe(config, errs)
    if spaces is not None and not errs:  # e.g. more --rollout-workers than this machine holds
        from foxhunt_ray import memory

        errs += memory.errors(config, driver, spaces)
    if errs or spaces is None:
        raise ConfigError(errs)
    diag_path = run_dir / DIAG_FILE
    last = max((r["step"] for r in step_records(read_diag(diag_path))), default=0) if diag_path.exists() else 0
    done = _done_at(run_dir)
    if done is not None and done >= driver.steps and args.resume_checkpoint is None:
        raise _nothing_to_train(run_dir, f"is done at update {done} (summary.json)", done, args, driver, saved)
    killed = _ended(run_dir, "killed")
    if killed is not None and args.resume_checkpoint is None:
        raise UsageError(
            f"{run_dir} was killed by rule {killed.get('rule')} at update {killed['step']} (summary.json): a resume "
            "would train past the kill and rewrite what the run recorded; start a new run (another --out or "
            "--fold), or pass --resume-checkpoint STEP to continue from that checkpoint on purpose; nothing was "
            "changed"
        )
    # The newest checkpoint the diag file reaches that this learner loads: a crash between a checkpoint and its
    # diag line leaves a checkpoint one step ahead of the file; the one before it is kept for this.
    point = resume_point(run_dir, last, config.learner, spaces.obs_dim, spaces.n_actions, chosen=args.resume_checkpoint)
    if point.step >= driver.steps and not getattr(args, "replacing_learner", False):
        which = "the chosen" if args.resume_checkpoint else "its newest"
        at = f"would resume from update {point.step} ({which} checkpoint)"
        raise _nothing_to_train(run_dir, at, point.step, args, driver, saved)
    notes = list(point.notes)
    if changes:
        notes.append(
            f"{CONFIG_FILE} changed since the run wrote it, accepted (--allow-config-change): " + "; ".join(changes)
        )
    if saved.get("code_sha") != sha:
        print(f"warning: {run_dir} was started by code {saved.get('code_sha')}, resuming with {sha}", file=sys.stderr)
    return Plan(
        config=config,
        driver=driver,
        spaces=spaces,
        run_dir=run_dir,
        out=out_of(run_dir, driver.name),
        code_sha=sha,
        baseline=saved.get("baseline"),
        resume_step=point.step,
        checkpoint=point.checkpoint,
        serial=args.serial,
        quiet=args.quiet,
        fresh=False,
        monitor_resume_at=point.step,
        notes=tuple(notes),
        config_change=tuple(changes),
        faults=record.faults,
    )


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


def _ended(run_dir: Path, status: str) -> dict | None:
    """The run's summary.json when it ended with `status` ('done', 'killed') at a whole step; None otherwise (or
    when the file says nothing)."""
    try:
        summary = json.loads(read_bounded(run_dir / SUMMARY_FILE, MAX_TEXT_BYTES))
    except (OSError, ValueError):
        return None
    if isinstance(summary, dict) and summary.get("status") == status and isinstance(summary.get("step"), int):
        return summary
    return None


def _done_at(run_dir: Path) -> int | None:
    """The step a run ended 'done' at by its summary.json; None when it did not (or the file says nothing)."""
    summary = _ended(run_dir, "done")
    return summary["step"] if summary else None


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
    args = parse_args(argv, prog, defaults, parents)
    lock: RunLock | None = None
    try:
        if args.resume is not None:
            lock = _take_resumed_folder(args)
        return _main(args, lock, ray_init=ray_init, hook=hook, after=after)
    except (UsageError, ValueError, OSError) as err:  # ConfigError, DiagFileError, RunFolderError are ValueErrors
        print(f"error: {err}", file=sys.stderr)
        return EXIT_ERROR
    finally:
        if lock is not None:
            lock.release()
        StopSignals.release_current()  # a run stopped by a signal kept them to the end (loops.StopSignals)


def _take_resumed_folder(args: argparse.Namespace) -> RunLock | None:
    """For --resume: the run folder behind OUT/latest, or a storage URI copied into OUT/<code_sha>/<name>/<fold>
    (args.resume becomes that folder, args.resume_storage the root); its lock, taken before the folder is read
    (a writer still at it would move it under us) or filled from storage. None when there is no run to lock (the
    resume then fails, naming the folder)."""
    if not is_uri(args.resume):
        args.resume = str(resolve_run_dir(args.resume))
        if (stored := stored_copy_uri(args.resume)) is None:  # a --storage copy: through its claim, as its URI
            return RunLock.acquire(args.resume) if (Path(args.resume) / CONFIG_FILE).is_file() else None
        args.resume = stored
    lock, local, root, told = take_stored_run(args.resume, args.out)  # refused while the claim's run goes on
    print(told, file=sys.stderr, flush=True)
    args.resume, args.resume_storage = str(local), root
    return lock


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
    cleared = {f: None for f in RUN_CONFIG_FLAGS} | {"overrides": [], "flip_distill_sign": False}
    left = plan.driver.time_limit_s
    if left:
        left = max(left - elapsed_s, 1e-3)
    return argparse.Namespace(
        **{
            **vars(args),
            **cleared,
            "resume": str(plan.run_dir),
            "resume_checkpoint": None,
            "allow_config_change": False,
            "replacing_learner": True,  # the run's own resume: its newest checkpoint may be at its last step
            "steps": plan.driver.steps,
            "time_limit_s": left,
        }
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
    """Under the run folder's lock: the folder checked again (another run may have taken it meanwhile), what the
    user must know printed, config.json written (a new run) or a config change recorded, OUT/latest pointed at
    it, the folder copied to the run's storage, and the monitor opened (which cuts diag.jsonl back to the step
    the run restarts from)."""
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

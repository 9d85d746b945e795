"""A new run's Plan from the command line (foxhunt_ray.driver.resolve; a resume's: foxhunt_ray.resume), in named
steps that each return their part: the code checked (`check_code`), the DriverConfig settings asked for
(`driver_settings`), the config chosen (`choose_config`) and checked (`check_config`), the run driven
(`drive_config`), the baseline checked (`check_baseline`) and the run placed (`place_run`). Every bad value is
collected on the way and raised at once (ConfigError); the arguments are read, never written.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

from actors.checkpoints import list_checkpoints
from actors.diag_file import DIAG_FILE, DiagFileError, load_baseline
from actors.envs import EnvSpaces, is_market, probe_env
from actors.files import MAX_DIAG_BYTES, read_bounded
from foxhunt_ray import provenance, run_folder
from foxhunt_ray.cli import ENTRY_DEFAULTS, EntryDefaults, UsageError, driver_fields, read_config_file
from foxhunt_ray.config import ConfigError, RunConfig, from_dict
from foxhunt_ray.flags import flag_name, flagged, given, json_object
from foxhunt_ray.plan import DriverConfig, Plan
from foxhunt_ray.presets import PRESET_NAMES, SETTINGS, SIZING_NAMES, name_errors, run_preset, with_overrides
from foxhunt_ray.run_folder import CONFIG_FILE, check_name, resolve_run_dir, run_name
from foxhunt_ray.storage import check_root, root_of
from learner.config import FaultInjection
from lobsim_env import ENV_ID


def check_code(expected: str | None) -> str:
    """This code's code_sha; UsageError when --expect-code-sha names another."""
    sha = provenance.code_sha()
    if expected is not None:
        ok, sha = provenance.matches(expected)
        if not ok:
            raise UsageError(
                f"refusing to start: --expect-code-sha={expected} but this code is {sha} "
                f"({provenance.content_sha()}); check out that commit or drop the flag"
            )
    return sha


def resolve_new(args: argparse.Namespace, sha: str) -> Plan:
    """A new run's Plan; raises UsageError (or ConfigError) naming every bad value."""
    if args.resume_checkpoint is not None or args.allow_config_change:
        raise UsageError("--resume-checkpoint and --allow-config-change go with --resume RUN_DIR")
    entry = getattr(args, "defaults", None) or ENTRY_DEFAULTS["job"]
    chosen, from_file = read_config_file(args.config) if getattr(args, "config", None) else ({}, [])
    run_sets, driver_sets = split_sets([*from_file, *args.overrides])  # the file first: a --set wins
    asked, errs = driver_settings(args, driver_sets)
    choice = choose_config(args, entry, chosen, run_sets, asked.get("fold"))
    faults = FaultInjection(inject_nan_at=args.inject_nan_at, flip_distill_sign=args.flip_distill_sign)
    config, spaces, bad_config = check_config(choice)
    errs = faults.errors() + errs + bad_config
    driver, bad_driver = drive_config(args, entry, asked, choice, config, sha)
    baseline, bad_baseline = check_baseline(args.baseline, config, spaces)
    errs += bad_driver + bad_baseline
    if spaces is not None and not errs:  # what the config needs in memory, before the run folder is made
        from foxhunt_ray import memory

        errs += memory.errors(config, driver, spaces)
    if errs or spaces is None:
        raise ConfigError(errs)
    run = Plan(config=config, driver=driver, spaces=spaces, run_dir=Path(), out=Path(args.out), code_sha=sha,
               baseline=baseline, serial=args.serial, quiet=args.quiet, sizing_reason=choice.sizing_reason,
               faults=faults)  # fmt: skip
    return place_run(run)


def split_sets(sets: list[str]) -> tuple[list[str], list[str]]:
    """`section.field=value` overrides: (the RunConfig's, the DriverConfig's `driver.field=value`), each in order."""
    driven = [s for s in sets if s.startswith("driver.")]
    return [s for s in sets if not s.startswith("driver.")], driven


def flag_settings(args: argparse.Namespace) -> dict:
    """The DriverConfig fields whose flags were given, as values (a JSON object's text read: --learner-resources)."""
    out = given(args, DriverConfig)
    for name, spec, tp in flagged(DriverConfig):
        if name in out and tp not in (int, float, str):  # a JSON object's: its flag gave its text
            if (value := json_object(out[name])) is None:
                raise UsageError(f"{flag_name(name)}={out[name]!r} must be a JSON object, e.g. '{spec.example}'")
            out[name] = value
    return out


def driver_settings(args: argparse.Namespace, sets: list[str]) -> tuple[dict, list[str]]:
    """The DriverConfig fields asked for, by --config's [driver] and `--set driver.field=value` (in order: a later
    one wins) and the flags (which win), each read as its field's type; and the errors of those that cannot be."""
    fields = driver_fields()
    data, errs = {}, []
    for item in sets:
        key, _, raw = item.partition("=")
        name = key.removeprefix("driver.")
        if name not in fields:
            valid = ", ".join(f"driver.{k}" for k in sorted(fields))  # as an unknown --set key's message says
            errs.append(f"override {key!r} names no config field; valid here: {valid}")
            continue
        try:
            data[name] = json.loads(raw)
        except json.JSONDecodeError:
            data[name] = raw
    try:
        made = from_dict(DriverConfig, data, "driver")
    except ConfigError as err:
        return flag_settings(args), errs + err.errors
    return {**{k: getattr(made, k) for k in data}, **flag_settings(args)}, errs


@dataclass(frozen=True)
class Choice:
    """The config a new run starts from, before its overrides are checked."""

    config: RunConfig
    """The preset, built with its settings and sizing."""
    sets: list[str]
    """Its overrides, in order (a later one wins): --data's, --config's, --set's, the flags'."""
    sizing_reason: str
    """Why the run has its sizing (the header says it)."""
    fold: int | None
    """The fold --data picked (None: no --data)."""


def choose_config(
    args: argparse.Namespace, entry: EntryDefaults, chosen: dict, sets: list[str], fold: int | None
) -> Choice:
    """The preset (--preset, the file's, the entry point's), its settings and sizing, and the overrides: --data's
    market first, then `sets` (the file's and --set's), then the RunConfig flags (--seed, --env-id, ...)."""
    for key, valid in (("preset", PRESET_NAMES), ("settings", tuple(SETTINGS)), ("sizing", (*SIZING_NAMES, "auto"))):
        if key in chosen and chosen[key] not in valid:  # the flags' own choices are checked by argparse
            raise UsageError(f"--config={args.config}: {key}={chosen[key]!r} is not one of {list(valid)}")
    name = args.preset or chosen.get("preset") or entry.preset
    asked_sizing = args.sizing or chosen.get("sizing")
    sizing, sizing_reason = _sizing(name, asked_sizing, entry.sizing)
    try:
        config = run_preset(name, settings=args.settings or chosen.get("settings"), sizing=sizing)
    except ValueError as err:  # a sizing that does not fit the preset (smoke has its own)
        raise UsageError(f"--sizing={asked_sizing}: {err}") from None
    data_fold = None
    if getattr(args, "data", None) is not None:
        from_data, data_fold = data_sets(args.data, args.days, fold, args.blocks or 1, args.holdout)
        sets = [*from_data, *sets]
    elif any(getattr(args, f, None) is not None for f in ("days", "blocks", "holdout")):
        raise UsageError("--days, --blocks and --holdout pick days of a cache: they go with --data DIR")
    sets = [*sets, *(f"{k}={json.dumps(v)}" for k, v in given(args, RunConfig).items())]
    if args.envs_per_worker is not None:
        sets.append(f"rollout.num_envs={args.envs_per_worker}")
    return Choice(config=config, sets=sets, sizing_reason=sizing_reason, fold=data_fold)


def check_config(choice: Choice) -> tuple[RunConfig, EnvSpaces | None, list[str]]:
    """The chosen config with its overrides, resolved (reward_scale 'auto' -> the number, from the market as
    overridden), the env's spaces (None: the env is bad or not built), and every bad value (a bad override is left
    out: the others are checked too)."""
    errs: list[str] = []
    config, spaces = choice.config, None
    try:
        config, bad_sets = with_overrides(config, choice.sets)
        errs += bad_sets + config.errors() + name_errors(config)
        config = config.resolved()
        spaces = _probe(config, errs)
    except ConfigError as err:
        errs += err.errors
    return config, spaces, errs


def drive_config(
    args: argparse.Namespace, entry: EntryDefaults, asked: dict, choice: Choice, config: RunConfig, sha: str
) -> tuple[DriverConfig, list[str]]:
    """The DriverConfig: the fields asked for, the fold --data picked, the run's name (made when not given: free
    under OUT/<code_sha>), its storage root, and the entry point's defaults for the rest; and its bad values."""
    errs, asked = [], dict(asked)
    if choice.fold is not None:
        asked["fold"] = choice.fold
    if asked.get("name") is None:
        made = run_name(preset=config.preset, env_id=str(config.env_id), seed=config.seed, started=time.time())
        asked["name"] = _free_name(Path(args.out), sha, made, asked.get("fold", 0))
    elif (why := check_name(asked["name"])) is not None:
        errs.append(why)
    if asked.get("storage") is not None:
        if (why := check_root(asked["storage"], write=not getattr(args, "print_config", False))) is not None:
            errs.append(why)
        asked["storage"] = root_of(asked["storage"])
    driver = DriverConfig(**{**entry_driver(entry, asked, choice.fold is not None), **asked})
    return driver, errs + driver.errors()


def entry_driver(entry: EntryDefaults, asked: dict, on_data: bool = False) -> dict:
    """The entry point's defaults of the DriverConfig fields (`on_data`: a run on real days, with its with_data):
    its budget of time only when the steps are not asked for (a run given its steps has none unless asked), and its
    steps_with_a_time_limit when a time limit is."""
    out = {**entry.driver, **(entry.with_data if on_data else {})}
    if "steps" in asked:
        out.pop("time_limit_s", None)
    elif "time_limit_s" in asked and entry.steps_with_a_time_limit is not None:
        out["steps"] = entry.steps_with_a_time_limit
    return out


def check_baseline(path: str | None, config: RunConfig, spaces: EnvSpaces | None) -> tuple[str | None, list[str]]:
    """--baseline as the run folder it names now (OUT/latest: the run it points at now is recorded), read once
    here (a bad baseline stops the run before it starts); and what is wrong with it."""
    if path is None:
        return None, []
    path = str(resolve_run_dir(path))
    try:
        baseline = load_baseline(path)
    except DiagFileError as err:
        return path, [f"--baseline={path}: {err}"]
    base_env = next(iter(baseline.values())).get("env_id", ENV_ID)  # older runs stamped none: the market
    if spaces is not None and base_env != config.env_id:
        return path, [
            f"--baseline={path} trained on env {base_env!r}, this run on {config.env_id!r}: its l_c51 and pnl are "
            "no reference here; pick a baseline run of the same env"
        ]
    return path, []


def place_run(plan: Plan) -> Plan:
    """The Plan with its run folder OUT/<code_sha>/<name>/<fold>/: a new one, or one whose run ended before its
    first checkpoint (a note says it is replaced); UsageError when it holds a run to resume."""
    run_dir = run_folder.run_dir(plan.out, plan.code_sha, plan.driver.name, plan.driver.fold)
    note = check_fresh(run_dir)
    return dataclasses.replace(
        plan, run_dir=run_dir, monitor_resume_at=0 if note else None, notes=(note,) if note else ()
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

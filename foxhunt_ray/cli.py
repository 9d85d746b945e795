"""The driver's command line (foxhunt_ray.driver): the flags, the entry points' defaults, a --config file.

Every setting of a run is a field: RunConfig's (foxhunt_ray.config) and DriverConfig's (foxhunt_ray.plan), each with
its type, default, rule and help. A field annotated with a `Flag` is a flag (foxhunt_ray.flags generates it and its
--help line), and every field is a `--set section.field=VALUE` key (`driver.*` for DriverConfig's) and a key of a
--config file (`[driver]` for DriverConfig's): a new setting is one field. The flags here are those that are no
field: what chooses the config (--preset, --data, ...), where a run is read from (--resume), how it runs
(--serial). The entry points differ only in their defaults, the table ENTRY_DEFAULTS.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.files import MAX_TEXT_BYTES, read_bounded
from foxhunt_ray.config import RunConfig
from foxhunt_ray.flags import add_flags, field_default, flag_name, flagged, shown
from foxhunt_ray.plan import DriverConfig
from foxhunt_ray.presets import PRESET_NAMES, SETTINGS, SIZINGS
from learner.config import RETIRED_FIELDS
from lobsim_env.validation import InputError


class UsageError(InputError):
    """A bad flag, config, code_sha or run folder: printed, exit 1, nothing started."""


@dataclass(kw_only=True, frozen=True)
class EntryDefaults:
    """What an entry point does with a setting left out (a row of ENTRY_DEFAULTS). `entry.steps` reads the
    entry's default of any DriverConfig field: its own in `driver`, else DriverConfig's."""

    preset: str = "plan_a_v2"
    """--preset left out."""
    sizing: str = "gpu"
    """--sizing left out: 'gpu', 'gpu_host', 'cpu', or 'auto' (cpu when torch sees no CUDA device, else gpu_host)."""
    driver: Mapping[str, Any] = field(default_factory=dict)
    """DriverConfig fields this entry point defaults otherwise, by name. Its time_limit_s applies only when the
    steps are left out too: a run given its steps has no budget of time unless asked."""
    steps_with_a_time_limit: int | None = None
    """The steps left out and a time limit given (None: the entry's steps): a budget of time asked for runs as long
    as it says."""
    with_data: Mapping[str, Any] = field(default_factory=dict)
    """DriverConfig fields this entry point defaults otherwise for a run on real days (--data), by name."""

    def __getattr__(self, name: str) -> Any:
        own = self.__dict__.get("driver")
        if own is None or name not in driver_fields():
            raise AttributeError(name)
        return own[name] if name in own else field_default(DriverConfig, name)


def driver_fields() -> list[str]:
    """DriverConfig's fields, in order: each is a `--set driver.FIELD=VALUE` key and a key of [driver]."""
    return [f.name for f in dataclasses.fields(DriverConfig)]

ENTRY_DEFAULTS: dict[str, EntryDefaults] = {
    # python -m foxhunt_ray.job, and driver.main: DriverConfig's and the presets' own
    "job": EntryDefaults(),
    # python -m foxhunt_ray.local on a machine without a GPU (foxhunt_ray.local.LOCAL_DEFAULTS says why each)
    "local": EntryDefaults(
        preset="phase4_3",
        sizing="auto",
        driver={"steps": 6_000, "time_limit_s": 900.0, "rollout_workers": 1},
        steps_with_a_time_limit=1_000_000,
        with_data={"keep_checkpoints": 0},  # every checkpoint: the fold's validation period picks one
    ),
    # ... on a GPU host (foxhunt_ray.local.host_defaults, which sets its rollout workers by its cores): 20,000 updates,
    # what its 150-s runs made (0.88-0.90 of the oracle), and 3 payloads waiting at most, not 12: a smaller policy
    # lag, and the agent learned more in the same time (BENCHMARKS.md, "The system on one GPU host")
    "local_gpu_host": EntryDefaults(
        preset="phase4_3",
        sizing="auto",
        driver={"steps": 20_000, "time_limit_s": 900.0, "rollout_workers": 1, "max_payloads_waiting": 3},
        steps_with_a_time_limit=1_000_000,
        with_data={"keep_checkpoints": 0},
    ),
}
"""The entry points' defaults, the only thing in which they differ."""


CONFIG_HELP = """config (--config FILE, --set section.field=value, --print-config to see the result):
  top level  env_id, env_kwargs, seed
  market     the synthetic market                     lobsim_env/config.py MarketConfig
  learner    network, losses, optimiser, replay        learner/config.py LearnerConfig
  rollout    books per worker, steps per sample, ...   actors/config.py RolloutConfig
  kill       the kill rules' thresholds                actors/kill_rules.py KillConfig
  driver     how the run is driven (its flags above)   foxhunt_ray/plan.py DriverConfig
every field is documented where it is defined (its docstring) and in docs/running.md; a preset's values:
  --preset NAME --print-config"""

CHOICE_FLAGS = ("preset", "settings", "sizing", "config", "envs_per_worker", "data", "days", "blocks", "holdout")
"""Flags that are no field and choose a run's config (a resume refuses them, with the run's config flags)."""


def run_config_flags() -> tuple[str, ...]:
    """Flags that choose or place a run: a resume takes its config.json instead and refuses them (also --set and
    --flip-distill-sign)."""
    run = [name for name, _, _ in flagged(RunConfig)]
    placed = [name for name, spec, _ in flagged(DriverConfig) if not spec.resume]
    return (*CHOICE_FLAGS, *run, "inject_nan_at", "baseline", *placed)


def resumable_flags() -> list[str]:
    """The flags a resume may change: DriverConfig's, but those that place the run, and --serial."""
    return [flag_name(name) for name, spec, _ in flagged(DriverConfig) if spec.resume] + ["--serial"]


def _driver_texts(d: EntryDefaults) -> dict[str, str]:
    """The --help defaults that an entry point's rules make: its steps with a time limit, its budget of time, its
    defaults on real days."""
    steps = shown(d.steps) + (f"; {shown(d.steps_with_a_time_limit)} with --time-limit-s" * bool(
        d.steps_with_a_time_limit))  # fmt: skip
    budget = f"{d.time_limit_s:g} s when --steps is left out, else none" if d.time_limit_s else "none"
    on_data = {name: f"{shown(getattr(d, name))}; {shown(v)} with --data" for name, v in d.with_data.items()}
    return {"steps": steps, "time_limit_s": budget, **on_data}


def parse_args(
    argv: list[str] | None,
    prog: str,
    defaults: EntryDefaults | None = None,
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.Namespace:
    """The driver's flags, and an entry point's own (`parents`, parsed by the entry point) in the same --help."""
    d = defaults or ENTRY_DEFAULTS["job"]
    p = argparse.ArgumentParser(
        prog=prog,
        description="Train foxhunt_ray: rollout workers, learner, monitor.",
        epilog=CONFIG_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=list(parents),
    )
    _config_flags(p, d)
    add_flags(p, RunConfig)
    p.add_argument("--envs-per-worker", type=int, default=None, help="books per rollout worker (rollout.num_envs)")
    _data_flags(p)
    driven = p.add_argument_group("how the run is driven (DriverConfig: also --set driver.FIELD=VALUE, [driver])")
    add_flags(driven, DriverConfig, {k: getattr(d, k) for k in driver_fields()}, _driver_texts(d))
    _run_flags(p)
    args = p.parse_args(argv)
    args.defaults = d
    return args


def _config_flags(p: argparse.ArgumentParser, d: EntryDefaults) -> None:
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
        "--config",
        default=None,
        metavar="FILE",
        help="config fields from a TOML or JSON file (a run's config.json too), on top of the preset; --set wins",
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
        help="config override, e.g. --set learner.lr=1e-4 --set kill.pnl_deficit_usd=1e6 --set driver.steps=50 "
        "(repeatable; a flag wins)",
    )


def _data_flags(p: argparse.ArgumentParser) -> None:
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


def _run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        default="runs",
        help="runs root: the run folder is OUT/<code_sha>/<name>/<fold>/; OUT/latest points there",
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
    p.add_argument("--serial", action="store_true", help="all roles in this process, no Ray")
    p.add_argument("--inject-nan-at", type=int, default=None, metavar="STEP", help="test only: NaN loss at STEP")
    p.add_argument("--flip-distill-sign", action="store_true", help="test only: distil pi towards -Q")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


_CHOICES_IN_A_FILE = ("preset", "settings", "sizing")
"""Top-level keys of a --config file that choose what it starts from, as the flags of the same names do."""


def read_config_file(path: str) -> tuple[dict[str, str], list[str]]:
    """(choices, overrides) of a --config file: `preset`, `settings`, `sizing` as the flags would give them, and
    every other field as a `section.field=<json>` override (a [driver] table's: `driver.field=<json>`). TOML
    (.toml) or JSON; a run's config.json (its "run" entry) is accepted as is. UsageError naming the file and the
    fix when it cannot be read."""
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

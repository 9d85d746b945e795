"""The evaluation records of a run folder: their one home (names, writing, reading, what each one is of).

Every `python -m foxhunt_ray.evaluate` keeps its own record, RUN_DIR/evaluations/<name>.json, named after what was
evaluated (market, fold or LOBSTER file, checkpoint step, episodes, horizon, head, a --seed), so an evaluation on a
LOBSTER day never replaces one on the synthetic market; the same evaluation run again replaces its own record.
RUN_DIR/evaluation.json is kept as a copy of the newest *synthetic* record (what foxhunt_ray.local and older
readers read); an evaluation on a LOBSTER day leaves it alone. Every file is written atomically (a temporary file
beside it, then os.replace). Old run folders hold only evaluation.json: it is read as one record, its market taken
from its "market" field ("synthetic" or, from older code, "lobster:<file name>"). The schema: docs/evaluation.md.

Light on purpose (json and pathlib only): the report command reads records without importing torch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.files import MAX_TEXT_BYTES, read_bounded, write_atomic
from lobsim_env.validation import InputError

EVALUATIONS_DIR = "evaluations"
EVALUATION_FILE = "evaluation.json"
"""The newest synthetic record's copy (compatibility: foxhunt_ray.local, run folders of older code)."""
SYNTHETIC, LOBSTER, REPLAY, UNKNOWN = "synthetic", "lobster", "replay", "unknown"
_DAY = re.compile(r"(?P<symbol>[A-Za-z0-9.]+)_(?P<date>\d{4}-\d{2}-\d{2})")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class EvaluationRecordError(InputError):
    """A record that cannot be read or written: the message names the file and the fix."""


@dataclass(frozen=True, kw_only=True)
class Evaluation:
    """One record as read from a run folder."""

    path: Path
    record: dict[str, Any]
    current: bool = False
    """RUN_DIR/evaluation.json holds this record (for a synthetic one: the newest synthetic evaluation)."""

    @property
    def market(self) -> str:
        return market_of(self.record)


# ---- what a record is of -----------------------------------------------------------------------------------


def market_of(record: dict[str, Any]) -> str:
    """'synthetic', 'lobster' (also older code's 'lobster:<file name>'), or 'unknown' (no market field)."""
    market = record.get("market")
    if market in (SYNTHETIC, REPLAY):
        return market
    if isinstance(market, str) and (market == LOBSTER or market.startswith(LOBSTER + ":")):
        return LOBSTER
    return UNKNOWN


def lobster_file(record: dict[str, Any]) -> str | None:
    """The LOBSTER file's name of a lobster record (its `lobster.file`, or older code's 'lobster:<name>')."""
    day = record.get("lobster")
    if isinstance(day, dict) and isinstance(day.get("file"), str):
        return day["file"]
    market = record.get("market")
    if isinstance(market, str) and market.startswith(LOBSTER + ":"):
        return market.partition(":")[2]
    return None


def day_of(record: dict[str, Any]) -> str:
    """Which episodes: 'fold 0 held-out' (or 'seed S + i'), 'AMZN 2012-06-21' for a LOBSTER day, the days of a
    replay ('nasdaq/AMZN/2012-06-21'), '?' unknown."""
    market = market_of(record)
    if market == REPLAY:
        days = record.get(REPLAY, {}).get("days") if isinstance(record.get(REPLAY), dict) else None
        return ", ".join(days) if isinstance(days, list) and days else "?"
    if market == LOBSTER:
        day = record.get("lobster") if isinstance(record.get("lobster"), dict) else {}
        if day.get("symbol") and day.get("date"):
            return f"{day['symbol']} {day['date']}"
        name = lobster_file(record) or "?"
        m = _DAY.search(name)
        return f"{m['symbol']} {m['date']}" if m else name
    if market == SYNTHETIC:
        if record.get("seed_origin") == "--seed":
            return f"seed {record.get('eval_seed')} + i"
        return f"fold {record.get('fold', '?')} held-out"
    return "?"


def short_caveat(record: dict[str, Any]) -> str:
    """The table's caveat cell: '' for the synthetic held-out day, else what the figure is not."""
    market = market_of(record)
    if market == UNKNOWN:
        return "market not recorded: re-run foxhunt_ray.evaluate"
    if market == SYNTHETIC:
        return "" if record.get("held_out", True) else "not held out"
    if market == REPLAY:
        return "⚠ no oracle · real days · " + ("held out" if record.get("held_out") else "in-sample: its training days")
    where = "in-sample: its training day" if record.get("held_out") is False else "outside the training distribution"
    return f"⚠ no oracle · one day · {where}"


def caveat(record: dict[str, Any]) -> str | None:
    """What an evaluation on a real day is not (printed by evaluate, written in the report); None for synthetic."""
    if market_of(record) == REPLAY:
        where = (
            "held out: days this run never trained on"
            if record.get("held_out")
            else "in-sample: the days this run trained on (windows drawn afresh, but not held out)"
        )
        return (
            f"real days {day_of(record)}: no oracle (compare with this evaluation's flat, imbalance, quoting and the "
            f"hindsight bound, which reads the day's future and no agent can reach); {record.get('episodes', '?')} "
            f"windows; {where}. Never compare it with a synthetic figure."
        )
    if market_of(record) != LOBSTER:
        return None
    episodes = record.get("episodes", "?")
    trained = record.get("trained_on")
    if record.get("held_out") is False:
        outside = "in-sample: this is the day the run trained on, so its windows are not even held out"
    elif isinstance(trained, str) and trained.startswith(LOBSTER + ":"):
        outside = (
            f"out of the training distribution: the run trained on another day ({trained.partition(':')[2]}), "
            "and one day is not the market's distribution of days"
        )
    else:
        outside = (
            "out of the training distribution: the agent trained on the synthetic market (another contract, other "
            "price and size scales in its observation), so this is a transfer check"
        )
    return (
        f"LOBSTER day {day_of(record)}: no oracle (a real day has no latent regime to read: no oracle PnL, no "
        f"oracle fraction); one day ({episodes} windows of one trading day: the PnL and its ± sem are this day's, "
        f"not an estimate over days); {outside}. Compare it with this evaluation's own baselines, never with a "
        "synthetic figure."
    )


def record_name(record: dict[str, Any]) -> str:
    """evaluations/<name>: '<market>-<fold K | file stem>-step<step>-<episodes>ep-h<horizon>-<head>[-target][-seed<S>]
    .json' (-target: the target network's weights)."""
    market = market_of(record)
    if market == LOBSTER:
        where = Path(lobster_file(record) or "day").stem
    else:
        where = f"fold{record.get('fold')}"
    name = (
        f"{market}-{where}-step{int(record['checkpoint_step']):08d}-{record['episodes']}ep-h{record['horizon']}-"
        f"{record.get('policy_head', 'pi')}"
    )
    if record.get("weights", "online") == "target":
        name += "-target"
    if record.get("seed_origin") == "--seed":
        name += f"-seed{record['eval_seed']}"
    return _UNSAFE.sub("_", name) + ".json"


# ---- writing -----------------------------------------------------------------------------------------------


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Atomic: a temporary file beside it, then os.replace, so a reader never sees half a file."""
    try:  # never through a link planted at its .tmp name
        write_atomic(path, json.dumps(doc, indent=2, allow_nan=False) + "\n")
    except (OSError, ValueError) as err:
        raise EvaluationRecordError(f"cannot write {path} ({err}); pass a writable --out") from None


def write_record(run_dir: str | Path, record: dict[str, Any]) -> list[Path]:
    """Writes RUN_DIR/evaluations/<record_name>, then, for a synthetic record, its copy RUN_DIR/evaluation.json.
    Returns the paths written. Other records are never touched."""
    folder = Path(run_dir) / EVALUATIONS_DIR
    try:
        folder.mkdir(exist_ok=True)
    except OSError as err:
        raise EvaluationRecordError(
            f"cannot make {folder} ({err}); make it a writable folder, or pass --out PATH to write elsewhere"
        ) from None
    written = [folder / record_name(record)]
    write_json(written[0], record)
    if market_of(record) == SYNTHETIC:
        written.append(Path(run_dir) / EVALUATION_FILE)
        write_json(written[1], record)
        _tensorboard(Path(run_dir), record)
    return written


def _tensorboard(run_dir: Path, record: dict[str, Any]) -> None:
    """The held-out figures as TensorBoard scalars at the checkpoint's step, beside the run's training curves
    (`heldout/<policy>_pnl_usd`, `heldout/fraction_of_oracle`); a LOBSTER day is not a point on that curve."""
    from actors.tensorboard import EventWriter

    policies = record.get("policies")
    step = record.get("checkpoint_step")
    if not isinstance(policies, dict) or isinstance(step, bool) or not isinstance(step, int):
        return
    values = {
        f"heldout/{name}_pnl_usd": figures["pnl_usd_mean"]
        for name, figures in policies.items()
        if isinstance(figures, dict) and isinstance(figures.get("pnl_usd_mean"), int | float)
    }
    if isinstance(record.get("oracle_fraction"), int | float):
        values["heldout/fraction_of_oracle"] = record["oracle_fraction"]
    writer = EventWriter(run_dir)
    try:
        writer.scalars(step, values)
    finally:
        writer.close()


# ---- reading -----------------------------------------------------------------------------------------------


def read_record(path: Path, run_dir: Path) -> dict[str, Any]:
    """One record; EvaluationRecordError naming the file and the fix when it is not a record."""
    fix = (
        f"re-run python -m foxhunt_ray.evaluate {run_dir} with that evaluation's options to rewrite it, or move "
        f"the file out of {path.parent} (the other records are read as they are)"
    )
    try:  # a FIFO or /dev/zero is named, not read
        doc = json.loads(read_bounded(path, MAX_TEXT_BYTES))
    except (OSError, ValueError) as err:
        raise EvaluationRecordError(f"{path}: not a readable evaluation record ({err}); {fix}") from None
    if not isinstance(doc, dict):
        raise EvaluationRecordError(f"{path}: an evaluation record is a JSON object, got {type(doc).__name__}; {fix}")
    policies = doc.get("policies", {})
    if not isinstance(policies, dict) or not all(isinstance(m, dict) for m in policies.values()):
        raise EvaluationRecordError(f"{path}: 'policies' must be an object of policy -> metrics; {fix}")
    if "market" in doc and market_of(doc) == UNKNOWN:
        raise EvaluationRecordError(f"{path}: market={doc['market']!r} is neither 'synthetic' nor 'lobster'; {fix}")
    return doc


def read_evaluations(run_dir: str | Path) -> list[Evaluation]:
    """Every record of a run folder, in name order, then evaluation.json when it is not a copy of one of them
    (a run folder of older code, or a hand-made file)."""
    run_dir = Path(run_dir)
    folder = run_dir / EVALUATIONS_DIR
    paths = sorted(folder.glob("*.json")) if folder.is_dir() else []
    found = [Evaluation(path=p, record=read_record(p, run_dir)) for p in paths]
    legacy = run_dir / EVALUATION_FILE
    if not legacy.is_file():
        return found
    record = read_record(legacy, run_dir)
    same = [i for i, e in enumerate(found) if e.record == record]
    if same:
        found[same[0]] = Evaluation(path=found[same[0]].path, record=record, current=True)
    else:
        found.append(Evaluation(path=legacy, record=record, current=True))
    return found


def newest_synthetic(evaluations: list[Evaluation]) -> Evaluation | None:
    """The run's newest synthetic evaluation: the one evaluation.json holds (evaluate keeps it so), else the
    synthetic record created last."""
    synthetic = [e for e in evaluations if e.market == SYNTHETIC]
    current = [e for e in synthetic if e.current]
    if current or not synthetic:
        return current[0] if current else None
    return max(synthetic, key=lambda e: (str(e.record.get("created", "")), e.path.stat().st_mtime))

"""A run folder's safety: one writer at a time, the config as written, and where a resume may restart.

- **The lock** (`RunLock`, the file `run.lock`): the process that writes a run folder (the driver; in Ray mode
  its monitor and learner actors write for it and die with it) holds an exclusive `flock` on `run.lock` for the
  run's whole life; the OS releases it when that process ends, a crash or `kill -9` included. A second writer
  (a `--resume` of a run still running, a second run into the same folder) is refused with the folder and the
  pid and host holding it, before it writes anything. The file stays (removing it would let a third process lock
  a new file while a second still holds the old one) and names the last holder.
- **config.json** (`read_config`, `read_config_doc`): the one reader of the run's resolved config, for the
  resume, evaluate, report and the benchmarks; a missing or malformed file is named with its fix. A folder that
  holds a run (`RUN_FILES`: a checkpoint, summary.json, the config as written) but no config.json (deleted, or
  copied without it) is refused by every reader, the report too, naming the folder and how to put it back.
- **The config as written**: `config.sha256` (the `sha256sum` line of config.json as the driver wrote it) and
  `config.written.json` (that text) let a resume tell a hand-edited config.json from the one the run started
  with, and name the fields that differ (`config_changes`); an accepted change (`--allow-config-change`) is
  appended to `config_changes.jsonl` and becomes the recorded config.
- **Where a resume restarts** (`resume_point`): the newest kept checkpoint that diag.jsonl reaches and that this
  run's learner can load (read without running any pickled code, its format, step and learner config checked
  before anything in the folder changes), falling back to the older one and saying why; or one the user
  names; or step 0 when the run died before its first checkpoint.
- **Where a run's folder is** (`run_dir`, `run_name`, `check_name`): `OUT/<code_sha>/<name>/<fold>/`, the code's
  sha first (provenance: every run of one commit under it), then the run's name (`--name`, or one made from the
  preset, env, seed and start time: `run_name`), then the fold, so two runs of the same code and fold never
  share a folder. `OUT/latest` points at the run that started last (`point_latest`): a relative symlink, replaced
  atomically, or where the filesystem has no symlinks a one-line file naming the folder; `resolve_run_dir`
  follows either, so `python -m foxhunt_ray.report runs/latest` works on both.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
import re
import socket
import time
from pathlib import Path

from actors.checkpoints import (
    CHECKPOINT_DIR,
    CheckpointError,
    checkpoint_path,
    list_checkpoints,
    load_problem,
    read_checkpoint,
)
from actors.diag_file import DIAG_FILE
from actors.files import (
    MAX_TEXT_BYTES,
    RunFileError,
    kind_of,
    open_run_file,
    read_bounded,
    write_atomic,
)
from actors.monitor import SUMMARY_FILE
from foxhunt_ray.config import RunConfig, from_dict
from foxhunt_ray.plan import DriverConfig
from learner.config import RETIRED_FIELDS, FaultInjection, LearnerConfig, config_differences
from lobsim_env.validation import InputError

CONFIG_FILE = "config.json"
"""The run's resolved config: {"code_sha", "content_sha", "baseline", "run": RunConfig, "driver": DriverConfig,
"faults": FaultInjection}; read it with read_config (or read_config_doc for the bare JSON)."""
LOCK_FILE = "run.lock"
CONFIG_HASH_FILE = "config.sha256"
CONFIG_WRITTEN_FILE = "config.written.json"
CONFIG_CHANGES_FILE = "config_changes.jsonl"
RUN_FILES = (CHECKPOINT_DIR, SUMMARY_FILE, CONFIG_WRITTEN_FILE, CONFIG_HASH_FILE)
"""What a run writes beside config.json (the driver writes config.json before any of them): a folder holding any
of them holds a run, and without config.json nothing can tell what that run trained."""
LATEST = "latest"
"""OUT/latest: the run folder of the run that started last under OUT (a symlink, or a pointer file)."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
"""A run name: one folder name, the same on every filesystem and in a URI (no '/', no spaces, no leading '.')."""


class RunFolderError(InputError):
    """A run folder that cannot be written or resumed as asked; the message names the folder and what to do."""


class RunLock:
    """An exclusive flock on run_dir/run.lock, held until release() or the process ends."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd = -1

    @classmethod
    def acquire(cls, run_dir: str | Path) -> RunLock:
        """Locks run_dir (creating it); raises RunFolderError naming the holder when another process writes it."""
        lock = cls(run_dir)
        lock.path.parent.mkdir(parents=True, exist_ok=True)
        try:  # never through a link: the holder's note would overwrite the file it points at
            fd = open_run_file(lock.path, os.O_RDWR | os.O_CREAT, 0o644)
        except RunFileError as err:
            raise RunFolderError(f"run folder {lock.path.parent}: {err}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if (link := linked_file(lock.path.parent)) is not None:  # checked under the lock: no writer moves it
                raise RunFolderError(
                    f"run folder {lock.path.parent}: {link} is {kind_of(link, follow=False)}: a run folder's files "
                    "must be regular files, not links (the run would write into the file it points at, or read "
                    f"another run's); remove the link (rm {link}) or put the file itself there, then run this "
                    "again; nothing was written"
                )
            if (odd := odd_file(lock.path.parent)) is not None:  # a FIFO or a folder where the run reads and writes
                raise RunFolderError(
                    f"run folder {lock.path.parent}: {odd} is {kind_of(odd, follow=False)}, not a regular file: it "
                    "is not what a run writes there (a FIFO would block its reader); put back the run's own file "
                    f"(a backup, its --storage copy) or remove it (rm -r {odd}), then run this again; nothing was "
                    "written"
                )
        except BlockingIOError:
            os.close(fd)
            raise RunFolderError(
                f"run folder {lock.path.parent} is being written by {lock.holder()}: one process writes a run "
                "folder at a time; wait for that run to end (or stop it), then resume it; nothing was written"
            ) from None
        except BaseException:
            os.close(fd)
            raise
        lock._fd = fd
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:  # in place: a new file (an atomic rename) would be a lock nobody holds
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only the holder's name is missing
        return lock

    def holder(self) -> str:
        """'pid P on host H (since T)' from the lock file, as far as it can be read."""
        try:
            me = json.loads(read_bounded(self.path, follow=False))
            return f"pid {me['pid']} on host {me['host']} (since {me['since']})"
        except (OSError, ValueError, KeyError, TypeError):
            return "another process (its pid is not recorded yet)"

    @property
    def held(self) -> bool:
        return self._fd >= 0

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = -1

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


LINKS_CHECKED_BELOW = (CHECKPOINT_DIR, "evaluations")
"""The folders of a run folder whose files are checked for links too (linked_file)."""


def linked_file(run_dir: str | Path) -> Path | None:
    """The first entry of run_dir (or of its checkpoints/ and evaluations/) that is a symbolic link, other than a
    link to a folder (a checkpoints/ kept on another disk): a link where the run writes would have it write
    through the link (a dangling one would be created where it points). None when there is none."""
    run_dir = Path(run_dir)
    folders = [run_dir, *(run_dir / d for d in LINKS_CHECKED_BELOW)]
    for folder in folders:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            if entry.is_symlink() and not entry.is_dir(follow_symlinks=True):
                return Path(entry.path)
    return None


READ_FILES = (CONFIG_FILE, CONFIG_WRITTEN_FILE, CONFIG_HASH_FILE, SUMMARY_FILE, DIAG_FILE, CONFIG_CHANGES_FILE)
"""The files of a run folder that a resume reads or appends to (odd_file)."""


def odd_file(run_dir: str | Path) -> Path | None:
    """The first of run_dir's READ_FILES that is there but is neither a regular file nor a link (a FIFO, a device,
    a socket, a folder: what no run writes; linked_file finds the links), or None. A resume that skipped such a
    summary.json would not know the run was killed or done."""
    for name in READ_FILES:
        kind = kind_of(Path(run_dir) / name, follow=False)
        if kind not in ("a regular file", "missing") and not kind.startswith("a symbolic link"):
            return Path(run_dir) / name
    return None


# ---- config.json -------------------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True, frozen=True)
class SavedConfig:
    """A run folder's config.json, read: what the run trains, how it is driven, the test-only faults it makes."""

    run: RunConfig
    driver: DriverConfig
    faults: FaultInjection
    doc: dict
    """The whole file as JSON (code_sha, content_sha, baseline, ...), the retired learner fields moved out."""
    text: str
    """The file's text, as a resume compares it with the config the run recorded (config_changes)."""


def read_config_doc(run_dir: str | Path, *, missing_ok: bool = False) -> dict | None:
    """config.json of run_dir as a JSON object. None when missing_ok and there is none in a folder that holds no
    run either (a bare diag.jsonl); a run folder without one raises (missing_config). A file of older code holds
    the test-only faults in its learner section (learner.inject_nan_at, learner.flip_distill_sign): they are
    moved to its "faults" section. Raises RunFolderError naming the file and the fix."""
    return _read_config(Path(run_dir), missing_ok)[0]


def run_files(run_dir: str | Path) -> list[str]:
    """The RUN_FILES that run_dir holds (the checkpoints folder as 'checkpoints/'): none, and it holds no run."""
    return [f"{name}/" if name == CHECKPOINT_DIR else name for name in RUN_FILES if (Path(run_dir) / name).exists()]


def missing_config(run_dir: str | Path) -> RunFolderError:
    """The error for a folder without config.json: where the folder holds a run (run_files), says so and how to
    put the file back (config.written.json beside it, else a backup or --print-config with the run's flags);
    otherwise, what folder to pass instead."""
    run_dir = Path(run_dir)
    path = run_dir / CONFIG_FILE
    held = run_files(run_dir)
    if not held:
        return RunFolderError(
            f"{path} does not exist: pass a run folder OUT/<code_sha>/<name>/<fold>/ written by "
            "`python -m foxhunt_ray.local` or `foxhunt_ray.job` (it holds config.json and checkpoints/), or OUT/latest"
        )
    if (run_dir / CONFIG_WRITTEN_FILE).is_file():
        fix = f"restore it from the copy the run wrote: cp {run_dir / CONFIG_WRITTEN_FILE} {path}"
    else:
        fix = (
            f"copy it back from where this folder came from (a backup, the run's --storage copy), or write it from "
            f"the run's own flags: python -m foxhunt_ray.local <the run's flags> --print-config > {path}"
        )
    return RunFolderError(
        f"run folder {run_dir} holds a run ({', '.join(held)}) but not its {CONFIG_FILE}, the config it ran with "
        f"(deleted, or the folder was copied without it): {fix}, then run this again; nothing was changed"
    )


def not_a_folder(run_dir: str | Path) -> RunFolderError | None:
    """The error for a RUN_DIR that exists but is no folder (a file, a FIFO, /dev/zero or a link to one); None
    for a folder, or a path that does not exist (missing_config names that)."""
    kind = kind_of(run_dir)
    if kind in ("a folder", "missing"):
        return None
    return RunFolderError(
        f"{run_dir} is {kind}, not a run folder: pass a run folder OUT/<code_sha>/<name>/<fold>/ written by "
        "`python -m foxhunt_ray.local` or `foxhunt_ray.job` (it holds config.json and checkpoints/), or OUT/latest"
    )


def read_run_file(path: str | Path, limit: int = MAX_TEXT_BYTES) -> str:
    """The text of a run folder's file (config.json, config.written.json, config.sha256, summary.json, ...),
    read_bounded: RunFolderError when it is not a regular file, is over `limit` or not UTF-8 text, naming the file
    and the fix; FileNotFoundError (and other OSErrors of the open) as they are."""
    fix = "it is not what a run writes there: put back the run's own file (a backup, its --storage copy)"
    try:
        data = read_bounded(path, limit, fix=fix, error=RunFolderError)
        return data.decode()
    except UnicodeDecodeError as err:
        raise RunFolderError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); {fix}") from None


def _read_config(run_dir: Path, missing_ok: bool) -> tuple[dict | None, str]:
    path = run_dir / CONFIG_FILE
    if (bad := not_a_folder(run_dir)) is not None:
        raise bad
    try:
        text = read_run_file(path)
    except FileNotFoundError:
        if missing_ok and not run_files(run_dir):
            return None, ""
        raise missing_config(run_dir) from None
    except OSError as err:
        raise RunFolderError(f"{path} is unreadable ({err.strerror or err}); check its permissions") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:  # RecursionError: arrays nested thousands deep
        doc, why = None, f"not JSON: {err}"
    else:
        why = "" if isinstance(doc, dict) else f"a JSON {type(doc).__name__}, not an object"
    if not why and not isinstance(doc.get("run"), dict):
        why = 'no "run" section'
    if why:
        raise _malformed(path, why)
    learner = doc["run"].get("learner")
    if isinstance(learner, dict) and RETIRED_FIELDS & learner.keys():
        moved = {k: learner[k] for k in sorted(RETIRED_FIELDS & learner.keys())}
        learner = {k: v for k, v in learner.items() if k not in RETIRED_FIELDS}
        doc = {**doc, "run": {**doc["run"], "learner": learner}, "faults": {**moved, **(doc.get("faults") or {})}}
    return doc, text


def _malformed(path: Path, why: str) -> RunFolderError:
    return RunFolderError(
        f"{path} is unreadable ({why}); it is not the config.json a run writes: restore it from "
        f"{CONFIG_WRITTEN_FILE} beside it (the text the run wrote), or pass another run folder"
    )


def read_config(run_dir: str | Path, driver_flags: dict | None = None) -> SavedConfig:
    """config.json of run_dir as the configs it records, validated; driver_flags replace DriverConfig fields (a
    resume's --steps, ...). Raises RunFolderError naming the file and the fix (ConfigError's values, too)."""
    path = Path(run_dir) / CONFIG_FILE
    doc, text = _read_config(Path(run_dir), missing_ok=False)
    if not isinstance(doc.get("driver"), dict):
        raise _malformed(path, 'no "driver" section')
    try:
        run = from_dict(RunConfig, doc["run"]).validate()
        driver = from_dict(DriverConfig, {**doc["driver"], **(driver_flags or {})})
        faults = from_dict(FaultInjection, doc.get("faults") or {})
        if bad := faults.errors():
            raise ValueError("; ".join(bad))
    except (ValueError, TypeError) as err:
        raise RunFolderError(
            f"{path} is unreadable ({err}); it is not the config.json a run of this code writes: restore it from "
            f"{CONFIG_WRITTEN_FILE} beside it, or evaluate and resume the run with the code that wrote it"
        ) from None
    return SavedConfig(run=run, driver=driver, faults=faults, doc=doc, text=text)


# ---- the config as written ------------------------------------------------------------------------------------


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_config(run_dir: str | Path, text: str) -> None:
    """Records config.json's text as written: config.written.json and config.sha256 (`sha256sum -c` reads it)."""
    run_dir = Path(run_dir)
    write_atomic(run_dir / CONFIG_WRITTEN_FILE, text)
    write_atomic(run_dir / CONFIG_HASH_FILE, f"{_sha256(text.encode())}  config.json\n")


def _flat(doc, prefix: str = "") -> dict:
    if isinstance(doc, dict) and doc:
        out = {}
        for k, v in doc.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: doc}


def config_changes(run_dir: str | Path, text: str) -> list[str] | None:
    """How config.json's text differs from the config the run recorded: None when the run recorded none (older
    code), [] when it is the same (or only its layout changed), else one 'field: written -> now' per field."""
    run_dir = Path(run_dir)
    hash_path, written_path = run_dir / CONFIG_HASH_FILE, run_dir / CONFIG_WRITTEN_FILE
    if not os.path.lexists(hash_path):
        if not os.path.lexists(written_path):
            return None
        # config.sha256 deleted, config.written.json kept: compared with that, field by field
        differs = f"config.json differs from {CONFIG_WRITTEN_FILE} ({CONFIG_HASH_FILE} is missing)"
    else:
        try:
            recorded = read_run_file(hash_path).split()[:1]
        except (OSError, ValueError) as err:
            return [f"({CONFIG_HASH_FILE} is unreadable: {err})"]
        if recorded == [_sha256(text.encode())]:
            return []
        differs = f"config.json's hash differs from {CONFIG_HASH_FILE}"
    try:
        written = json.loads(read_run_file(written_path))
    except (OSError, ValueError, RecursionError) as err:
        return [f"({differs}, and {CONFIG_WRITTEN_FILE} is unreadable: {err})"]
    old, new = _flat(written), _flat(json.loads(text))
    missing = object()
    return [
        f"{k}: {json.dumps(old[k]) if k in old else '(absent)'} -> {json.dumps(new[k]) if k in new else '(absent)'}"
        for k in sorted(set(old) | set(new))
        if old.get(k, missing) != new.get(k, missing)
    ]


def accept_config_change(run_dir: str | Path, text: str, step: int, changes: list[str]) -> None:
    """config.json as it is now becomes the recorded config; config_changes.jsonl keeps what changed and when."""
    run_dir = Path(run_dir)
    line = json.dumps({"time": time.time(), "resumed_at_step": step, "changes": changes}) + "\n"
    with open(open_run_file(run_dir / CONFIG_CHANGES_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "a") as f:
        f.write(line)
    record_config(run_dir, text)


# ---- where a resume restarts ------------------------------------------------------------------------------------


def checkpoint_problem(path: Path, learner: LearnerConfig, obs_dim: int, n_actions: int) -> tuple[int, str | None]:
    """(its step, None) for a checkpoint this run's learner can load, else (step or -1, why not). Read by
    actors.checkpoints (no pickled code runs), its learner config and spaces compared, then the whole load tried
    on a throwaway learner: a checkpoint that would fail in the run (a tensor of another shape, a missing key) is
    refused here, before anything in the run folder changes."""
    if (kind := kind_of(path)) != "a regular file":  # a FIFO would block the read, /dev/zero never end it
        return -1, f"{kind}, not a regular file"
    try:
        state = read_checkpoint(path, mmap=True)
    except CheckpointError as err:
        return -1, err.why
    step, saved = state["step"], state["learner"]
    diff = config_differences(learner, saved["config"])
    if diff:
        shown = ", ".join(f"{k}={saved['config'].get(k)!r} (config.json: {getattr(learner, k, None)!r})" for k in diff)
        return step, f"written by another learner: {shown}"
    if (saved.get("obs_dim"), saved.get("n_actions")) != (obs_dim, n_actions):
        return step, (
            f"trained on obs_dim {saved.get('obs_dim')}, {saved.get('n_actions')} actions; this env gives "
            f"{obs_dim}, {n_actions}"
        )
    return step, load_problem(state, learner, obs_dim, n_actions)


@dataclasses.dataclass(kw_only=True, frozen=True)
class ResumePoint:
    step: int
    """The learner step the run restarts from (0: from scratch)."""
    checkpoint: Path | None
    notes: tuple[str, ...] = ()
    """What the user is told: checkpoints passed over and why, a fresh start."""


def resume_point(
    run_dir: str | Path,
    last_step: int,
    learner: LearnerConfig,
    obs_dim: int,
    n_actions: int,
    chosen: str | None = None,
) -> ResumePoint:
    """Where a resume of run_dir restarts, given its diag.jsonl's last step. chosen (--resume-checkpoint): a step
    kept in checkpoints/, a checkpoint file, or '0' (from scratch); None: the newest usable checkpoint at or before
    last_step, else an older one, else step 0 when the run never kept one. Raises RunFolderError when a chosen
    checkpoint is unusable or none of the kept ones is."""
    run_dir = Path(run_dir)
    kept = list_checkpoints(run_dir)
    steps = [s for s, _ in kept]
    if chosen is not None:
        if chosen.strip() == "0":
            return ResumePoint(
                step=0,
                checkpoint=None,
                notes=(
                    f"starting over from step 0 as asked: the {last_step} diag lines are dropped and recorded again",
                ),
            )
        path = checkpoint_path(run_dir, int(chosen)) if chosen.strip().isdigit() else Path(chosen)
        if (kind := kind_of(path)) != "a regular file":
            what = "does not exist" if kind == "missing" else f"is {kind}, not a checkpoint file"
            raise RunFolderError(
                f"--resume-checkpoint={chosen}: {path} {what}; {run_dir} keeps checkpoints at steps {steps} "
                "(or 0: start over)"
            )
        step, why = checkpoint_problem(path, learner, obs_dim, n_actions)
        if why is None and step > last_step:
            why = f"its step {step} is past diag.jsonl's last step {last_step} (the lines in between are lost)"
        if why is not None:
            raise RunFolderError(f"--resume-checkpoint={chosen}: cannot resume {run_dir} from {path}: {why}")
        return ResumePoint(step=step, checkpoint=path)
    if not kept:
        return ResumePoint(
            step=0,
            checkpoint=None,
            notes=(
                f"{run_dir} holds no checkpoint (the run ended before its first): starting over from step 0"
                + (f"; its {last_step} diag lines are dropped and recorded again" if last_step else ""),
            ),
        )
    notes, refused = [], []
    for step, path in reversed(kept):
        if step > last_step:  # a crash between a checkpoint and its diag line: the older one is kept for this
            refused.append(f"{path.name}: past diag.jsonl's last step {last_step}")
            continue
        got, why = checkpoint_problem(path, learner, obs_dim, n_actions)
        if why is None and got != step:
            why = f"it holds step {got}, not {step}"
        if why is not None:
            refused.append(f"{path.name}: {why}")
            notes.append(f"checkpoint {path} cannot be used: {why}")
            continue
        if notes:
            notes.append(
                f"falling back to the older checkpoint {path}: steps {step + 1}..{last_step} are run again "
                f"(their diag lines dropped); --resume-checkpoint STEP|PATH picks another"
            )
        return ResumePoint(step=step, checkpoint=path, notes=tuple(notes))
    raise RunFolderError(
        f"cannot resume {run_dir}: no kept checkpoint can be loaded ({'; '.join(refused)}); name one with "
        "--resume-checkpoint PATH, or --resume-checkpoint 0 to start over from step 0; nothing was changed"
    )


# ---- where a run's folder is ------------------------------------------------------------------------------------


def check_name(name: str) -> str | None:
    """None for a usable run name, else the error naming the value and the fix."""
    if NAME_PATTERN.fullmatch(name) and name != LATEST:
        return None
    why = f"{LATEST!r} is the pointer to the newest run" if name == LATEST else "it must be one folder name"
    return (
        f"--name={name!r}: {why}: 1-100 letters, digits, '.', '_', '+' or '-', starting with a letter or digit "
        "(no '/', no spaces), e.g. --name lr3e-3-wide"
    )


def _component(text: str) -> str:
    """text as part of a folder name: every character outside [A-Za-z0-9._+-] becomes '_'."""
    return re.sub(r"[^A-Za-z0-9._+-]", "_", text).strip("._-") or "run"


def run_name(*, preset: str | None, env_id: str, seed: int, started: float) -> str:
    """The name a run gets without --name: '<preset>-<env>-s<seed>-<UTC start, seconds>', e.g.
    'phase4_3-LOB-v0-s0-20260103T142233Z' (the env's id after its namespace or module: foxhunt/LOB-v0 -> LOB-v0)."""
    env = env_id.rsplit(":", 1)[-1].rsplit("/", 1)[-1]
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    return "-".join([_component(preset or "run"), _component(env), f"s{seed}", when])[:100]


def run_dir(out: str | Path, code_sha: str, name: str, fold: int) -> Path:
    """OUT/<code_sha>/<name>/<fold>: a run's folder."""
    return Path(out) / code_sha / name / str(fold)


def point_latest(out: str | Path, run_folder: str | Path) -> str | None:
    """Points OUT/latest at run_folder (below OUT): a relative symlink made beside it and renamed over it (a
    reader sees the old pointer or the new one, never none). Where the filesystem refuses symlinks, a one-line
    file naming the folder relative to OUT (resolve_run_dir reads it). Returns a note when neither could be
    written (the run goes on: the pointer is a convenience, the folder's own path always works)."""
    out, target = Path(out), Path(run_folder)
    try:
        rel = os.path.relpath(target, out)
    except ValueError:  # another drive (Windows): no relative path
        rel = str(target.resolve())
    latest = out / LATEST
    tmp = out / f".{LATEST}.{os.getpid()}.tmp"
    try:
        if latest.is_dir() and not latest.is_symlink():
            return f"{latest} is a folder, not the pointer to the newest run: left as it is"
        try:
            tmp.unlink(missing_ok=True)
            os.symlink(rel, tmp, target_is_directory=True)
        except (OSError, NotImplementedError):  # no symlinks here (FAT, some network filesystems)
            write_atomic(latest, rel + "\n")
            return None
        os.replace(tmp, latest)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        return f"{latest} not updated ({err.strerror or err}); the run's folder is {target}"
    return None


def resolve_run_dir(path: str | Path) -> Path:
    """The run folder behind path: path itself, or where OUT/latest points (a symlink, or the pointer file of a
    filesystem without symlinks), as a path beside the pointer (runs/latest -> runs/<code_sha>/<name>/<fold>)."""
    path = Path(path)
    if path.is_symlink():
        return Path(os.path.normpath(path.parent / os.readlink(path)))
    if path.name == LATEST and path.is_file() and path.stat().st_size < 4096:
        rel = read_bounded(path, 4096).decode(errors="replace").strip()
        if rel and "\n" not in rel:
            return Path(os.path.normpath(path.parent / rel))
    return path


def out_of(run_folder: str | Path, name: str | None) -> Path | None:
    """OUT of a run folder OUT/<code_sha>/<name>/<fold> whose config.json records its name; None for a folder
    laid out otherwise (an older run's OUT/<code_sha>/<fold>, a copy elsewhere): its OUT/latest is left alone."""
    run_folder = Path(run_folder)
    if name and run_folder.parent.name == name and len(run_folder.parts) >= 4:
        return run_folder.parents[2]
    return None

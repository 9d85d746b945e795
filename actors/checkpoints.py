"""What a run checkpoint is, and the one way to read one.

A run folder keeps its checkpoints as `checkpoints/ckpt_<step>.pt` (eight digits or more), the newest
KEEP_CHECKPOINTS of them. Each is `torch.save` of a dict:

- `format`: RUN_CHECKPOINT_FORMAT (`foxhunt_ray.run/1`);
- `step`: the learner step it was taken at;
- `learner`: `Learner.state_dict()`, of format `learner.config.CHECKPOINT_FORMAT`: its `config` (the
  LearnerConfig as a dict), `obs_dim`, `n_actions`, the networks' flat parameters, Adam and target copies,
  the replay buffer and the on-policy queue, the RNG states;
- `stats`: the episode totals (actors.episode_stats.EpisodeStats), `bad_payloads`: the payloads refused so far.

`read_checkpoint` reads one (a file or its bytes) with `weights_only` (no pickled code ever runs) and checks
these keys; `load_problem` tries the whole load into a throwaway learner of the run's config, so a checkpoint
that reads but would not load (a tensor of another shape, a missing key) is found before a resume changes
anything. Every reader goes through here: the learner worker's `load`, the resume's checks
(foxhunt_ray.run_folder), evaluation (foxhunt_ray.evaluate).
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path

from actors.files import kind_of, write_atomic
from learner.config import CHECKPOINT_FORMAT as LEARNER_FORMAT
from learner.config import LearnerConfig
from lobsim_env.validation import InputError

CHECKPOINT_DIR = "checkpoints"
RUN_CHECKPOINT_FORMAT = "foxhunt_ray.run/1"
KEEP_CHECKPOINTS = 2
"""Checkpoints a run folder keeps: two, since a resume may need the one before a checkpoint whose diag line was
never written."""
KEYS = ("format", "step", "learner", "stats", "bad_payloads")
"""The keys of a run checkpoint."""
_CKPT_NAME = re.compile(r"^ckpt_(\d{8,})\.pt$")


class CheckpointError(InputError):
    """A checkpoint that cannot be read or loaded; the message names the file, `why` says what is wrong alone."""

    def __init__(self, message: str, why: str | None = None):
        super().__init__(message)
        self.why = why or message


@dataclass(kw_only=True, frozen=True)
class Checkpoint:
    """A learner checkpoint in memory: its step and the bytes of ckpt_<step>.pt (torch.save of the state)."""

    step: int
    data: bytes


def checkpoint_path(run_dir: str | Path, step: int) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR / f"ckpt_{step:08d}.pt"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint of a run, oldest first (temporary files are not listed)."""
    folder = Path(run_dir) / CHECKPOINT_DIR
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _CKPT_NAME.match(p.name))]
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> tuple[int, Path] | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def write_checkpoint(run_dir: str | Path, checkpoint: Checkpoint, *, keep: int = KEEP_CHECKPOINTS) -> Path:
    """Writes run_dir/checkpoints/ckpt_<step>.pt whole or not at all (a temporary file, fsync, rename; a failed
    write removes the temporary file) and removes all but the newest `keep` (0: none removed); returns its path."""
    path = checkpoint_path(run_dir, checkpoint.step)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, checkpoint.data, sync=True)
    for _, old in list_checkpoints(run_dir)[:-keep]:
        old.unlink(missing_ok=True)
    return path


def describe(source: str | Path | bytes) -> str:
    """'checkpoint PATH', or 'the checkpoint's N bytes' for one in memory."""
    return f"checkpoint {source}" if not isinstance(source, bytes) else f"the checkpoint's {len(source):,} bytes"


def read_checkpoint(source: str | Path | bytes, *, mmap: bool = False) -> dict:
    """A run checkpoint's dict, read without running pickled code (weights_only), its format, step and learner
    state checked. mmap (a file only): tensors are read when touched, so a caller that needs only the weights
    never reads the replay. Raises CheckpointError naming the file and what is wrong."""
    import torch

    what = describe(source)
    if not isinstance(source, bytes) and (kind := kind_of(source)) not in ("a regular file", "missing"):
        why = f"it is {kind}, not a regular file: nothing was read from it"  # a FIFO would block the load, /dev/zero
        raise CheckpointError(f"cannot read {what}: {why}", why)  # never end it
    if not isinstance(source, bytes) and Path(source).is_file() and Path(source).stat().st_size == 0:
        why = "the file is empty (a write that never finished)"
        raise CheckpointError(f"cannot read {what}: {why}", why)
    try:
        state = torch.load(
            io.BytesIO(source) if isinstance(source, bytes) else source,
            map_location="cpu",
            weights_only=True,
            mmap=mmap and not isinstance(source, bytes),
        )
    except Exception as err:  # torch raises many types: truncated zip, unsafe pickle, not a torch file
        short = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        why = f"{type(err).__name__}{': ' + short if short else ''}"
        raise CheckpointError(f"cannot read {what} ({why})", f"unreadable ({why})") from None
    if not isinstance(state, dict) or state.get("format") != RUN_CHECKPOINT_FORMAT:
        got = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{what} is not a run checkpoint: format={got!r}, expected {RUN_CHECKPOINT_FORMAT!r}",
            f"not a run checkpoint (format {got!r}, expected {RUN_CHECKPOINT_FORMAT!r})",
        )
    learner = state.get("learner")
    if (
        not isinstance(state.get("step"), int)
        or not isinstance(learner, dict)
        or learner.get("format") != LEARNER_FORMAT
        or not isinstance(learner.get("config"), dict)
    ):
        why = f"not a run checkpoint (no step, or no learner state of format {LEARNER_FORMAT!r} with its config)"
        raise CheckpointError(f"{what} is {why}", why)
    return state


def load_problem(state: dict, cfg: LearnerConfig, obs_dim: int, n_actions: int) -> str | None:
    """None when the learner state of `state` (read_checkpoint's) loads whole into a learner of cfg, else why
    not. The load is tried on a throwaway CPU learner, the caller's RNG left alone."""
    import torch

    from learner.learner import Learner
    from learner.network import identity_obs_stats

    # With learner.obs_norm on, the learner is built with the identity standardisation: the checkpoint's own
    # statistics replace it in the load (and a checkpoint without them does not load).
    norm = identity_obs_stats(obs_dim) if cfg.obs_norm != "off" else {}
    try:
        with torch.random.fork_rng(devices=[]):
            Learner(cfg, obs_dim=obs_dim, n_actions=n_actions, **norm).load_state_dict(state["learner"])
    except Exception as err:  # a missing key, a tensor of another shape or dtype, a replay of another size
        return f"it does not load into this run's learner ({type(err).__name__}: {str(err)[:200] or 'no message'})"
    return None

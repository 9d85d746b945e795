"""The learner role: wraps Learner with the receive path, weight broadcasts, episode totals and checkpoints.

A plain class (no Ray; foxhunt_ray.remote wraps it). `update(payload)` decodes one rollout payload with a
counting PayloadDecoder (a bad payload is dropped and counted, the learner keeps going), runs one Learner step and
returns the diag dict the monitor records: the Learner's keys plus the episode totals (EpisodeStats.diag:
env_steps, episodes, return_cum, episode_return_mean and, for the market, pnl_cum_usd) and bad_payloads.
Policy lag comes from the Learner (step - 1 - the batch's policy_version).

Checkpoints go to run_dir/checkpoints/ckpt_<step>.pt, written to a temporary file and renamed, so a crash never
leaves half a checkpoint under the final name; the newest `keep` are kept. A checkpoint holds the Learner's
state (replay included: a resume continues bit-exactly on the learner side), the episode totals and the bad
payload count, so a resumed run's diag continues its cumulative fields.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import torch

from actors.rollout import EpisodeStats
from actors.wire import DEFAULT_LIMITS, PayloadDecoder, WireLimits
from learner.config import LearnerConfig
from learner.learner import Learner

CHECKPOINT_DIR = "checkpoints"
RUN_CHECKPOINT_FORMAT = "foxhunt_ray.run/1"
_CKPT_NAME = re.compile(r"^ckpt_(\d{8,})\.pt$")


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


class LearnerWorker:
    """Learner + PayloadDecoder + EpisodeStats + checkpoints; methods: update, policy_weights, checkpoint, load."""

    def __init__(
        self,
        cfg: LearnerConfig,
        *,
        obs_dim: int,
        n_actions: int,
        run_dir: str | Path,
        seed: int = 0,
        device: str | None = None,
        checkpoint_every: int | None = None,
        limits: WireLimits = DEFAULT_LIMITS,
        keep: int = 2,
        has_pnl: bool = True,
    ):
        """checkpoint_every: M, write a checkpoint after every M-th update (None: only when asked). keep: how
        many checkpoints stay on disk (two: resume may need the one before a checkpoint whose diag line was
        never written). has_pnl: the env reports pnl_usd (the market; EpisodeStats.has_pnl)."""
        errs = []
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            errs.append(f"keep={keep!r} must be an int >= 1 (checkpoints kept on disk)")
        m = checkpoint_every
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            errs.append(f"checkpoint_every={m!r} must be None or an int >= 1")
        if errs:
            raise ValueError("cannot build LearnerWorker:\n  " + "\n  ".join(errs))
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.learner = Learner(cfg, obs_dim=int(obs_dim), n_actions=int(n_actions), device=device, seed=seed)
        self.decoder = PayloadDecoder(limits=limits)
        self.stats = EpisodeStats(has_pnl=has_pnl)
        self.run_dir = Path(run_dir)
        self.keep = keep
        self.checkpoint_every = checkpoint_every

    @property
    def step(self) -> int:
        return self.learner.step

    def update(self, payload: bytes) -> dict | None:
        """One learner step on a wire payload; None (counted in bad_payloads) when the payload is bad."""
        got = self.decoder.decode(payload)
        if got is None:
            return None
        batch, meta = got
        diag = self.learner.update(batch)
        self.stats.add(meta)  # after the update: a batch the Learner refused does not count as trained on
        diag.update(self.stats.diag(), worker_index=int(meta["worker_index"]), **self.decoder.diag())
        if self.checkpoint_every and self.learner.step % self.checkpoint_every == 0:
            self.checkpoint()
        return diag

    def policy_weights(self) -> dict:
        return self.learner.policy_weights()

    def checkpoint(self) -> str:
        """Writes run_dir/checkpoints/ckpt_<step>.pt atomically, prunes to the newest `keep`; returns its path."""
        path = checkpoint_path(self.run_dir, self.learner.step)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": RUN_CHECKPOINT_FORMAT,
            "step": self.learner.step,
            "learner": self.learner.state_dict(),
            "stats": dataclasses.asdict(self.stats),
            "bad_payloads": self.decoder.bad_payloads,
        }
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        for _, old in list_checkpoints(self.run_dir)[: -self.keep]:
            old.unlink(missing_ok=True)
        return str(path)

    def load(self, path: str | Path) -> int:
        """Restores a checkpoint written by `checkpoint`; returns its learner step."""
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch raises several types for a bad file; name the file and the fix
            raise ValueError(f"cannot read checkpoint {path}: {err}; resume from another checkpoint") from None
        if not isinstance(state, dict) or state.get("format") != RUN_CHECKPOINT_FORMAT:
            got = state.get("format") if isinstance(state, dict) else type(state).__name__
            raise ValueError(f"{path} is not a run checkpoint: format={got!r}, expected {RUN_CHECKPOINT_FORMAT!r}")
        self.learner.load_state_dict(state["learner"])
        self.stats = EpisodeStats(**{**state["stats"], "has_pnl": self.stats.has_pnl})
        self.decoder.bad_payloads = int(state["bad_payloads"])
        return self.learner.step

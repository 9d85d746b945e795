"""The learner's checkpoint format: what `Learner.state_dict()` holds and how `Learner.load_state_dict` reads it.

Only tensors, numbers, strings, dicts and lists, so `torch.load(weights_only=True)` loads it. Everything a learner
needs to resume bit-exactly:

    format          CHECKPOINT_FORMAT
    config          dataclasses.asdict(LearnerConfig): a field missing from it loads as its default
    obs_dim         int
    n_actions       int
    step            learner steps done
    nan_abort_step  0, or the first step that was not applied
    main            the main net's part: {"flat": parameters, "target_flat": its target copy's, "opt": Adam's
                    state_dict}, the flat buffers on the CPU
    dueling         the dueling head's part, the same keys (only when LearnerConfig.dueling_mode is not "off")
    rng             the IQN tau generator's state
    replay          ReplayBuffer.state_dict(): its contents, cursor and generator
    queue           OnPolicyQueue.state_dict()
    obs_norm        {"obs_scale", "obs_shift"} of the encoder (only when LearnerConfig.obs_norm is not "off")

A checkpoint loads only into a learner of the same config (the fields of learner.config.EXECUTION_ONLY aside),
obs_dim and n_actions; a refusal names what differs, before anything is loaded. actors/checkpoints.py wraps this
dict in a run checkpoint (its "learner" entry). CHECKPOINT_FORMAT and the config comparison live in learner/config.py,
which imports no torch: a run checkpoint's reader and a RunConfig check them without it.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

import torch

from learner.config import CHECKPOINT_FORMAT, LearnerConfig, config_differences
from learner.network import MainNet, obs_norm_problem
from learner.optim import Trainable
from learner.replay import OnPolicyQueue, ReplayBuffer


class Checkpointed(Protocol):
    """What the checkpoint reads and writes of a learner.learner.Learner."""

    cfg: LearnerConfig
    obs_dim: int
    n_actions: int
    device: torch.device
    step: int
    nan_abort_step: int
    net: MainNet
    main: Trainable
    dueling: Trainable | None
    gen: torch.Generator
    replay: ReplayBuffer
    queue: OnPolicyQueue


def learner_state(lrn: Checkpointed) -> dict:
    """Everything to resume bit-exactly (the layout above)."""
    sd = {
        "format": CHECKPOINT_FORMAT,
        "config": dataclasses.asdict(lrn.cfg),
        "obs_dim": lrn.obs_dim,
        "n_actions": lrn.n_actions,
        "step": lrn.step,
        "nan_abort_step": lrn.nan_abort_step,
        "main": _part_state(lrn.main),
        "rng": lrn.gen.get_state(),
        "replay": lrn.replay.state_dict(),
        "queue": lrn.queue.state_dict(),
    }
    if lrn.dueling is not None:
        sd["dueling"] = _part_state(lrn.dueling)
    if lrn.cfg.obs_norm != "off":
        enc = lrn.net.encoder
        sd["obs_norm"] = {k: getattr(enc, k).detach().cpu().clone() for k in ("obs_scale", "obs_shift")}
    return sd


def load_learner_state(lrn: Checkpointed, sd: dict) -> None:
    """Loads `sd` into lrn, or raises ValueError naming why it does not belong to it: its format, config, sizes
    and obs_norm are checked before anything is loaded."""
    if not isinstance(sd, dict) or sd.get("format") != CHECKPOINT_FORMAT:
        got = sd.get("format") if isinstance(sd, dict) else type(sd).__name__
        raise ValueError(f"not a learner checkpoint: format={got!r}, expected {CHECKPOINT_FORMAT!r}")
    diff = config_differences(lrn.cfg, sd["config"])
    if diff or (sd["obs_dim"], sd["n_actions"]) != (lrn.obs_dim, lrn.n_actions):
        raise ValueError(
            f"checkpoint was written by a different learner: config fields differ {diff}, "
            f"obs_dim/n_actions {sd['obs_dim']}/{sd['n_actions']} vs {lrn.obs_dim}/{lrn.n_actions}; "
            "build the Learner from the checkpoint's own config (its 'config' entry)"
        )
    norm = sd.get("obs_norm") if lrn.cfg.obs_norm != "off" else None
    if lrn.cfg.obs_norm != "off" and (why := obs_norm_problem(norm, lrn.obs_dim)) is not None:
        raise ValueError(f"checkpoint obs_norm: {why}; the checkpoint is damaged or from another learner")
    _load_part(lrn.main, sd["main"], "main")
    if lrn.dueling is not None:
        _load_part(lrn.dueling, sd["dueling"], "dueling")
    lrn.gen.set_state(sd["rng"])
    lrn.replay.load_state_dict(sd["replay"])
    lrn.queue.load_state_dict(sd["queue"], lrn.device)
    lrn.step, lrn.nan_abort_step = int(sd["step"]), int(sd["nan_abort_step"])
    if norm is not None:  # checked above, before anything was loaded; the network was trained with it
        for enc in (lrn.net.encoder, lrn.main.target.encoder):
            enc.load_obs_norm_(norm)


def _part_state(p: Trainable) -> dict:
    return {
        "flat": p.flat.detach().cpu().clone(),
        "target_flat": p.target_flat.detach().cpu().clone(),
        "opt": p.opt.state_dict(),
    }


def _load_part(p: Trainable, state: dict, what: str) -> None:
    for key in ("flat", "target_flat"):
        if tuple(state[key].shape) != tuple(p.flat.shape):
            raise ValueError(
                f"checkpoint {what}.{key} has {tuple(state[key].shape)} parameters, this "
                f"learner has {tuple(p.flat.shape)}: sizes in the config differ"
            )
    with torch.no_grad():
        p.flat.copy_(state["flat"])
        p.target_flat.copy_(state["target_flat"])
    p.load_adam_state(state["opt"])

"""A run's greedy policy alone, for a user to take away: `python -m foxhunt_ray.export RUN_DIR [--out DIR]`.

It writes two files (by default into RUN_DIR/export/):
- `policy.pt2`: the encoder and the policy head as a `torch.export` program, greedy (`obs float32 [B, obs_dim] ->
  int64 [B]`, any B: the argmax of pi's logits, as the evaluation's agent acts), the observation's standardisation
  inside it (learner.obs_norm: the checkpoint's own statistics). Tens to hundreds of KB against a run checkpoint's
  tens of MB (its replay, optimiser and target copies stay behind). `torch.export.load(path).module()` is all a
  user needs to run it (torch >= 2.11; TorchScript is deprecated there).
- `policy.json`: what it expects and where it came from: obs_dim, n_actions, the observation's columns by name
  (lobsim_env.market.obs_index; the 4 x obs_levels book ladders first), the action names, the market config it
  was trained on (its contract, observation levels, depth flow, size scale: the same market builds the same
  observation), the env id, the run folder, checkpoint and step, the run's code and this code's commit.

`load(folder)` returns an `ExportedPolicy` (`.act(obs) -> actions`, `.manifest`), which refuses an observation of
another width by name. Only the policy head is exported: it is what the rollout actors act with and what the
evaluation scores by default (`--head pi`); the Q-ensemble's greedy action samples IQN fractions, so it is not a
fixed function of the observation. The exported policy plays the same actions as the checkpoint's greedy pi
(tests/test_export.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from actors.files import MAX_TEXT_BYTES, RunFileError, kind_of, read_bounded, write_atomic
from foxhunt_ray import provenance
from foxhunt_ray.evaluate import EvaluationError, load_networks, load_run, resolve_checkpoint
from foxhunt_ray.run_folder import resolve_run_dir
from lobsim_env import ENV_ID, N_ACTIONS, Action
from lobsim_env.market import obs_index, obs_size

POLICY_FILE = "policy.pt2"
MANIFEST_FILE = "policy.json"
FORMAT = "foxhunt_ray.policy/1"


class _Greedy(torch.nn.Module):
    def __init__(self, policy: torch.nn.Module):
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(obs).argmax(-1)


def export_run(run_dir: str | Path, *, out: str | Path | None = None, checkpoint: str | int | None = None) -> Path:
    """Writes RUN_DIR's newest checkpoint (or `checkpoint`: a step or a file) as policy.pt and policy.json into `out`
    (default RUN_DIR/export); returns that folder. EvaluationError for a run that cannot be exported."""
    run_dir = resolve_run_dir(run_dir)
    run, driver, saved = load_run(run_dir)
    if run.env_id != ENV_ID:
        raise EvaluationError(f"{run_dir} trained {run.env_id}: the export writes the market's policy with its market")
    ckpt = resolve_checkpoint(run_dir, checkpoint)
    obs_dim, n_actions = obs_size(run.market), N_ACTIONS  # the market's, without building it (its days may be away)
    _, policy, step = load_networks(ckpt, run, obs_dim=obs_dim, n_actions=n_actions, head="pi")
    greedy = _Greedy(policy).eval()
    batch = torch.export.Dim("batch", min=1, max=1 << 24)
    with torch.no_grad():
        program = torch.export.export(greedy, (torch.zeros(4, obs_dim),), dynamic_shapes={"obs": {0: batch}})
    folder = Path(out) if out is not None else run_dir / "export"
    folder.mkdir(parents=True, exist_ok=True)
    manifest = {
        "format": FORMAT,
        "obs_dim": obs_dim,
        "n_actions": n_actions,
        "actions": [a.name for a in Action],
        "book_columns": 4 * run.market.obs_levels,
        "columns": obs_index(run.market),
        "market": asdict(run.market),
        "env_id": run.env_id,
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt),
        "step": step,
        "fold": driver.fold,
        "run_code_sha": saved.get("code_sha"),
        "code_sha": provenance.code_sha(),
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    # each file whole or not at all: written beside, then renamed. The temporary file is made new under a random
    # name (O_EXCL) and written through its descriptor, so a link planted at a name it might take is never written
    # through (a predictable `.policy.pt2.<pid>.pt2` once was).
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{POLICY_FILE}.", suffix=".pt2")
    part = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.export.save(program, f)
            f.flush()
            os.fsync(f.fileno())
        part.replace(folder / POLICY_FILE)
    finally:
        part.unlink(missing_ok=True)
    write_atomic(folder / MANIFEST_FILE, json.dumps(manifest, indent=1) + "\n")  # never through a planted link
    return folder


class ExportedPolicy:
    """An exported greedy policy: `act(obs [B, obs_dim]) -> int64 actions [B]` (lobsim_env.Action values)."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        again = "export the run again (python -m foxhunt_ray.export RUN_DIR --out FOLDER)"
        try:  # a regular file of at most MAX_TEXT_BYTES: a FIFO or /dev/zero there is named, never read
            self.manifest = json.loads(read_bounded(folder / MANIFEST_FILE, MAX_TEXT_BYTES, fix=again))
        except RunFileError as err:
            raise EvaluationError(f"{folder}: {MANIFEST_FILE} cannot be read: {err}") from None
        except (OSError, ValueError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise EvaluationError(f"{folder}: no readable {MANIFEST_FILE} ({err}); {again}") from None
        if not isinstance(self.manifest, dict):
            got = type(self.manifest).__name__
            raise EvaluationError(f"{folder / MANIFEST_FILE}: a JSON {got}, not the export's manifest; {again}")
        if self.manifest.get("format") != FORMAT:
            got = self.manifest.get("format")
            raise EvaluationError(f"{folder / MANIFEST_FILE}: format={got!r}, expected {FORMAT!r}; export it again")
        if (kind := kind_of(folder / POLICY_FILE)) not in ("a regular file", "missing"):  # a FIFO would block the load
            raise EvaluationError(f"{folder / POLICY_FILE} is {kind}, not a regular file: nothing was read; {again}")
        try:
            self.module = torch.export.load(folder / POLICY_FILE).module()
        except (OSError, RuntimeError, ValueError) as err:
            raise EvaluationError(f"{folder / POLICY_FILE}: not a loadable policy ({err}); export it again") from None
        self.obs_dim = int(self.manifest["obs_dim"])

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        x = torch.as_tensor(np.asarray(obs, np.float32))
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(
                f"obs of shape {tuple(x.shape)}: this policy takes [B, {self.obs_dim}] (policy.json's columns; the "
                "market of policy.json's 'market' builds that observation)"
            )
        return self.module(x).numpy().astype(np.int64)


def load(folder: str | Path) -> ExportedPolicy:
    return ExportedPolicy(folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m foxhunt_ray.export", description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run folder OUT/<code_sha>/<name>/<fold>/ or OUT/latest")
    p.add_argument("--checkpoint", default=None, help="a learner step or a checkpoint file (default: the newest)")
    p.add_argument("--out", default=None, metavar="DIR", help="where to write (default RUN_DIR/export)")
    args = p.parse_args(argv)
    checkpoint = int(args.checkpoint) if args.checkpoint and args.checkpoint.isdigit() else args.checkpoint
    try:
        folder = export_run(args.run_dir, out=args.out, checkpoint=checkpoint)
    except (EvaluationError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    size = (folder / POLICY_FILE).stat().st_size
    print(f"wrote {folder / POLICY_FILE} ({size / 1024:.0f} KB) and {folder / MANIFEST_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

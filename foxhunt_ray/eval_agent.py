"""The agent an evaluation plays: a run's config, its checkpoint, the networks it holds and the greedy policy.

`load_run` reads a run folder's config.json (refusing a damaged diag.jsonl and a run of another env than the
market), `resolve_checkpoint` names its newest checkpoint or the one asked for, `load_networks` rebuilds the
checkpoint's main network and its encoder + pi as a PolicyNet (checked against the run's config and the market's
observation), and `load_agent` makes a greedy baselines-style policy of pi or of q_ens. foxhunt_ray.evaluate plays
it; foxhunt_ray.export and the walk-forward use it too. Every bad input raises EvaluationError naming the value
and the fix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from actors.checkpoints import CheckpointError, checkpoint_path, latest_checkpoint, list_checkpoints, read_checkpoint
from actors.diag_file import DIAG_FILE, DiagFileError, read_diag
from foxhunt_ray.config import RunConfig
from foxhunt_ray.plan import DriverConfig
from foxhunt_ray.run_folder import CONFIG_FILE, LATEST, RunFolderError, out_of, read_config
from learner.config import CONFIG_DEFAULTS, LearnerConfig
from learner.network import (
    NET_FIELDS,
    MainNet,
    PolicyNet,
    flatten_parameters_,
    main_net,
    obs_norm_problem,
    policy_from_weights,
    policy_weights,
)
from lobsim_env import ENV_ID, LobVectorEnv
from lobsim_env.baselines import Policy
from lobsim_env.validation import InputError

HEADS = ("pi", "q")
"""The agent acts greedily on: pi (argmax of the policy logits, what the rollout actors sample from) or q
(argmax of q_ens, the ensemble Q the policy is distilled from)."""
WEIGHTS = ("online", "target")
"""online: the parameters the learner trains; target: their Polyak average (learner.polyak_tau per update), the
network the learner bootstraps from."""
_Q_FIELDS = ("v_min", "v_max", "ensemble_w", "iqn_taus")
"""The learner config fields q_ens reads (the C51 support, the ensemble weight, the IQN quantile midpoints), beside
learner.network.NET_FIELDS, those that size the network the checkpoint's parameters fill."""


class EvaluationError(InputError):
    """A bad run folder, checkpoint or option: the message names the value and the fix; nothing is written."""


def load_run(run_dir: str | Path, *, pointer: str | Path | None = None) -> tuple[RunConfig, DriverConfig, dict]:
    """The run's resolved RunConfig and DriverConfig from its config.json, and the whole file. pointer: the OUT/latest
    that named run_dir, when one did (a run of another env is then refused naming it, and the newest market run)."""
    if not Path(run_dir).is_dir():
        raise EvaluationError(f"RUN_DIR={run_dir} is not a folder: pass a run folder OUT/<code_sha>/<name>/<fold>/")
    try:
        record = read_config(run_dir)
    except RunFolderError as err:
        raise EvaluationError(str(err)) from None
    run, driver, saved = record.run, record.driver, record.doc
    if (Path(run_dir) / DIAG_FILE).exists():  # a damaged run (two writers, an edit) is not evaluated as if whole
        try:
            read_diag(Path(run_dir) / DIAG_FILE)
        except DiagFileError as err:
            raise EvaluationError(str(err)) from None
    env_id = str(getattr(run, "env_id", ENV_ID))  # runs of older code stamped no env_id: they all trained on it
    if not _on_the_market(env_id):
        which = f"{pointer} points at the newest run, {run_dir}, which" if pointer is not None else str(run_dir)
        out = Path(pointer).parent if pointer is not None else out_of(run_dir, driver.name)
        market_run = _newest_market_run(out) if out is not None else None
        instead = "(python -m foxhunt_ray.local trains one)"
        if market_run is not None:
            instead = f"e.g. the newest one under {out}, {market_run}"
        raise EvaluationError(
            f"{which} trained on env_id={env_id!r}: this evaluation plays the LOB market ({ENV_ID}) only (its "
            f"baselines and PnL metrics need it); pass a run folder trained on the market, {instead}. The report "
            f"plots this run's episode_return_mean: python -m foxhunt_ray.report {run_dir}"
        )
    return run, driver, saved


def _on_the_market(env_id: str) -> bool:
    return env_id.rpartition(":")[2] == ENV_ID


def _newest_market_run(out: Path, limit: int = 1000) -> Path | None:
    """The run folder under the runs root `out` (OUT/<code_sha>/<name>/<fold>/) that trained on the market and whose
    config.json is newest; None when there is none (of the newest `limit` folders)."""
    try:
        found = sorted(out.glob(f"*/*/*/{CONFIG_FILE}"), key=lambda p: p.stat().st_mtime, reverse=True)[:limit]
    except OSError:
        return None
    for config in found:
        if LATEST in config.relative_to(out).parts:
            continue
        try:
            env_id = read_config(config.parent).run.env_id
        except (RunFolderError, OSError, ValueError):
            continue
        if _on_the_market(str(env_id)):
            return config.parent
    return None


def resolve_checkpoint(run_dir: str | Path, checkpoint: str | Path | int | None) -> Path:
    """The newest checkpoint of the run, or the named one: a learner step (10) or a file path."""
    available = [s for s, _ in list_checkpoints(run_dir)]
    if checkpoint is None:
        found = latest_checkpoint(run_dir)
        if found is None:
            raise EvaluationError(
                f"{Path(run_dir) / 'checkpoints'} holds no checkpoint (ckpt_<step>.pt): train the run past its "
                "first --checkpoint-every updates, or resume it (a finished run always keeps one)"
            )
        return found[1]
    if isinstance(checkpoint, int) or (isinstance(checkpoint, str) and checkpoint.isdigit()):
        path = checkpoint_path(run_dir, int(checkpoint))
    else:
        path = Path(checkpoint)
    if not path.is_file():
        raise EvaluationError(
            f"--checkpoint={checkpoint}: {path} does not exist; this run keeps checkpoints at steps {available} "
            "(name one by its step or its path)"
        )
    return path


def _read_checkpoint(path: Path) -> tuple[int, dict]:
    """(step, the learner's state) of a run checkpoint (actors.checkpoints); mmap: its replay is never read."""
    try:
        state = read_checkpoint(path, mmap=True)
    except CheckpointError as err:
        raise EvaluationError(f"{err}; {_another(path)}") from None
    return state["step"], state["learner"]


def _another(path: Path) -> str:
    """The fix for a checkpoint that cannot be evaluated: name another one."""
    kept = [s for s, _ in list_checkpoints(path.parent.parent)]
    return f"evaluate another one with --checkpoint STEP (this run keeps steps {kept})"


def load_agent(
    path: Path, run: RunConfig, *, obs_dim: int, n_actions: int, head: str = "pi", weights: str = "online"
) -> tuple[Policy, int]:
    """The checkpoint's network as a greedy baselines-style policy, and its learner step.

    Only what acting needs is built: the main network (encoder, C51, IQN, pi, V) from the run's config.json,
    its flat parameters copied in (learner.network.main_net: the network the Learner of that config builds);
    for head 'pi' the encoder + pi as the rollout actors' PolicyNet. weights 'target': the checkpoint's target
    network (main.target_flat, the Polyak average of the trained parameters) instead of the trained ones.
    """
    net, policy, step = load_networks(path, run, obs_dim=obs_dim, n_actions=n_actions, head=head, weights=weights)
    if head == "pi":
        return _greedy_pi(policy), step
    cfg = run.learner
    support = torch.linspace(cfg.v_min, cfg.v_max, cfg.n_atoms)
    return _greedy_q(net, support, cfg.ensemble_w, cfg.iqn_taus), step


def load_networks(
    path: Path, run: RunConfig, *, obs_dim: int, n_actions: int, head: str = "pi", weights: str = "online"
) -> tuple[MainNet, PolicyNet, int]:
    """The checkpoint's main network and its encoder + pi as a PolicyNet, in eval mode on the CPU, and its learner
    step (load_agent's, foxhunt_ray.export's); EvaluationError naming the checkpoint and the fix where they do not
    belong to the run's config or the market's observation."""
    step, learner = _read_checkpoint(path)
    cfg = run.learner
    # Only the fields acting reads: a checkpoint of older code lacks later training-only fields, and that is fine.
    needed = NET_FIELDS + (_Q_FIELDS if head == "q" else ())
    # a field added since the checkpoint was written is absent from its config: it ran with the default
    mine, theirs = dataclasses.asdict(cfg), {**CONFIG_DEFAULTS, **learner.get("config", {})}
    diff = [k for k in needed if mine[k] != theirs.get(k)]
    if diff:
        shown = ", ".join(f"{k}={theirs.get(k)!r} (config.json: {mine[k]!r})" for k in diff)
        raise EvaluationError(
            f"{path} was written by another learner than this run's config.json describes: {shown}; "
            "evaluate it in the run folder it came from"
        )
    if (learner.get("obs_dim"), learner.get("n_actions")) != (obs_dim, n_actions):
        raise EvaluationError(
            f"{path} was trained on obs_dim={learner.get('obs_dim')}, n_actions={learner.get('n_actions')}, but the "
            f"evaluation market gives obs_dim={obs_dim}, n_actions={n_actions}: the observation has changed since "
            "the run (evaluate with the code that trained it, e.g. git checkout its code_sha) or, for --lobster, "
            "the replay market does not build the observation the policy was trained on"
        )
    main = learner.get("main")
    key = "target_flat" if weights == "target" else "flat"
    saved = main.get(key) if isinstance(main, dict) else None
    if not torch.is_tensor(saved) or not saved.is_floating_point():
        raise EvaluationError(f"{path} holds no learner main.{key} parameters (damaged?); {_another(path)}")
    obs_norm = learner.get("obs_norm")
    if cfg.obs_norm != "off" and (why := obs_norm_problem(obs_norm, obs_dim)) is not None:
        raise EvaluationError(f"{path}: {why}; {_another(path)}")
    try:
        net, policy = networks_from_flat(saved, cfg, obs_dim, n_actions, obs_norm=obs_norm)
    except ValueError as err:
        raise EvaluationError(
            f"{path} main.{key}: {err}: the checkpoint does not belong to this config; {_another(path)}"
        ) from None
    return net, policy, step


def networks_from_flat(
    saved: torch.Tensor, cfg: LearnerConfig, obs_dim: int, n_actions: int, *, obs_norm: dict | None = None
) -> tuple[MainNet, PolicyNet]:
    """The main network of `cfg` holding the flat parameters `saved` (a checkpoint's main.flat or target_flat),
    and its encoder + policy head as the rollout actors' PolicyNet, both in eval mode on the CPU; with
    cfg.obs_norm on, the encoder standardises by `obs_norm` (the checkpoint's entry: obs_scale, obs_shift). The
    caller's RNG is left alone. ValueError naming both sizes when `saved` does not fit the network."""
    with torch.random.fork_rng(devices=[]):  # the throwaway initial weights leave the caller's RNG alone
        net = main_net(cfg, obs_dim, n_actions)
    if cfg.obs_norm != "off":
        if (why := obs_norm_problem(obs_norm, obs_dim)) is not None:
            raise ValueError(why)
        net.encoder.load_obs_norm_(obs_norm)
    flat, _ = flatten_parameters_(net)
    if tuple(saved.shape) != tuple(flat.shape):
        raise ValueError(
            f"{tuple(saved.shape)} parameters, but the network of hidden_dim={cfg.hidden_dim}, encoder_layers="
            f"{cfg.encoder_layers}, n_atoms={cfg.n_atoms}, obs_dim={obs_dim} has {tuple(flat.shape)}"
        )
    with torch.no_grad():
        flat.copy_(saved)
    net.eval()
    policy = policy_from_weights(policy_weights(net, cfg, obs_dim, n_actions)).eval()
    return net, policy


def _greedy_pi(policy: PolicyNet) -> Policy:
    def act(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        return policy.act(obs, greedy=True)[0]

    return act


def _greedy_q(net: MainNet, support: torch.Tensor, w: float, n_taus: int) -> Policy:
    @torch.no_grad()
    def act(obs: np.ndarray, env: LobVectorEnv, rng: np.random.Generator) -> np.ndarray:
        h = net.encoder(torch.as_tensor(obs, dtype=torch.float32))
        return net.q_ens(h, support, w, n_taus).argmax(-1).numpy().astype(np.int64)

    return act

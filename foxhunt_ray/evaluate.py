"""`python -m foxhunt_ray.evaluate RUN_DIR`: a run's checkpoint, acting greedily, beside the baselines.

The agent (the run's newest checkpoint, or `--checkpoint`) plays the held-out episodes of the run's fold next
to flat, random, order-book imbalance and, on the synthetic market, the oracle, all through the one loop of
`lobsim_env.baselines.run_episodes` on the same seeds, so every policy meets the same episodes. The synthetic
held-out day of fold k is `lobsim_env.seeds.heldout_seed(k) + i` for book i, checked against every seed the
run's training books had; `--lobster PATH` plays windows of a replayed LOBSTER day instead (no oracle there, one
day, out of the training distribution: the command says so). It prints a table and keeps the evaluation's own
record, RUN_DIR/evaluations/<market>-<fold or file>-step<step>-<episodes>ep-....json, plus, for the synthetic
market, its copy RUN_DIR/evaluation.json (foxhunt_ray/evaluations.py: names, atomic writes, reading); a bad input
exits 1 with the value and the fix, and nothing in the run folder changes. RUN_DIR may be OUT/latest (the newest
run) or a run's storage URI (`--storage`: copied here first, the record copied back: foxhunt_ray.storage). Metrics
and the record's schema: docs/evaluation.md. The agent it plays (the run's config, its checkpoint, the networks and
the greedy policy) is built by foxhunt_ray/eval_agent.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch

from actors.checkpoints import list_checkpoints
from foxhunt_ray import provenance
from foxhunt_ray.config import RunConfig
from foxhunt_ray.eval_agent import (
    HEADS,
    WEIGHTS,
    EvaluationError,
    load_agent,
    load_networks,
    load_run,
    networks_from_flat,
    resolve_checkpoint,
)
from foxhunt_ray.evaluations import (
    EVALUATION_FILE,
    EVALUATIONS_DIR,
    LOBSTER,
    REPLAY,
    SYNTHETIC,
    EvaluationRecordError,
    caveat,
    day_of,
    record_name,
    write_json,
    write_record,
)
from foxhunt_ray.plan import DriverConfig
from foxhunt_ray.run_folder import resolve_run_dir
from foxhunt_ray.storage import StorageError, fetch_to_temp, is_uri
from lobsim_env import LobVectorEnv, MarketConfig, seeds
from lobsim_env.baselines import NEEDS_LATENT_REGIME, POLICIES, REAL_DAY_POLICIES, Policy, run_episodes, tune_quoting
from lobsim_env.config import HORIZON_WHY, MAX_HORIZON
from lobsim_env.lobster.market import lobster_config
from lobsim_env.seeds import HELDOUT_FOLD_STRIDE, RESUME_SEED_STRIDE, heldout_seed
from lobsim_env.stats import paired

__all__ = [  # the agent's loading lives in foxhunt_ray.eval_agent; its names stay importable from here
    "AGENT",
    "COMPARED_ON_REAL_DAYS",
    "DEFAULT_EPISODES",
    "HEADS",
    "METRIC_KEYS",
    "WEIGHTS",
    "EvaluationError",
    "describe",
    "evaluate_run",
    "evaluation_market",
    "format_table",
    "load_agent",
    "load_networks",
    "load_run",
    "main",
    "market_spaces",
    "networks_from_flat",
    "resolve_checkpoint",
    "training_overlap",
    "written_paths",
]

DEFAULT_EPISODES = 64
COMPARED_ON_REAL_DAYS = ("flat", "imbalance", "quoting")
"""The simple rules the agent is set against on a real day, the best of them on the evaluation's own windows
(chosen after the fact: the strongest comparator, which can only make the agent's case harder). Random is no rule,
the hindsight bound no policy."""
AGENT = "agent"
METRIC_KEYS = (
    "pnl_usd_mean",
    "pnl_usd_std",
    "pnl_usd_sem",
    "sharpe",
    "max_drawdown_usd",
    "turnover",
    "fees_usd_mean",
    "fill_rate",
)
"""Keys every policy's entry in an evaluation record has (the report command reads them)."""
_MAX_SEED = 2**62


# ---- the episodes ------------------------------------------------------------------------------------------


def training_overlap(first: int, count: int, run: RunConfig, driver: DriverConfig, last_step: int) -> int | None:
    """The first seed of first .. first+count-1 that a training book of the run may have had; None if none
    (lobsim_env.seeds.training_overlap for the run's seed and books, every resume up to last_step counted)."""
    books = driver.rollout_workers * run.rollout.num_envs
    return seeds.training_overlap(first, count, seed=run.seed, books=books, last_step=last_step)


def evaluation_market(run: RunConfig, lobster_path: str | Path | None, horizon: int | None) -> tuple[MarketConfig, str]:
    """The market of the evaluation and which one it is ('synthetic', 'replay' or 'lobster'). A run on real days
    (--data) plays its fold's held-out days (market.eval_days), or, with none held out, its training days."""
    trained = run.market
    if lobster_path is None and trained.source == "replay":
        days = trained.eval_days or trained.days
        h = trained.horizon if horizon is None else horizon
        market = dataclasses.replace(trained, days=days, eval_days=(), val_days=(), horizon=h, synthetic_share=0.0)
        return market, REPLAY
    if lobster_path is None:
        if trained.source != "synthetic":
            raise EvaluationError(
                f"this run trained on the LOBSTER day {trained.lobster_path}: pass --lobster PATH with the day to "
                "evaluate on (synthetic held-out days are for runs trained on the synthetic market)"
            )
        market = trained if horizon is None else dataclasses.replace(trained, horizon=horizon)
        return market, SYNTHETIC
    path = Path(lobster_path)
    if not path.is_file():
        raise EvaluationError(
            f"--lobster={lobster_path} is not a file: pass a LOBSTER sample zip (message + orderbook)"
        )
    h = trained.horizon if horizon is None else horizon
    if trained.source == "lobster":
        market = dataclasses.replace(trained, lobster_path=str(path), horizon=h)
    else:  # the equity contract of the replay market, the observation sized as the policy was trained
        sized = {"obs_levels": trained.obs_levels, "depth_flow_ticks": trained.depth_flow_ticks}
        market = lobster_config(str(path), horizon=h, **sized)
    return market, LOBSTER


def market_spaces(market: MarketConfig) -> tuple[int, int, dict[str, Any] | None]:
    """(obs_dim, n_actions, the replayed day: file, path, symbol, date, levels, messages; None on synthetic)."""
    try:
        env = LobVectorEnv(1, market)
    except ValueError as err:  # a replay window longer than the day, a file without its orderbook, ...
        raise EvaluationError(f"cannot build the evaluation market: {err} (the horizon is --horizon)") from None
    day = getattr(env.market, "day", None)
    replayed = None
    if market.source == LOBSTER and day is not None:
        replayed = {
            "file": Path(market.lobster_path).name,
            "path": str(market.lobster_path),
            "symbol": day.ticker,
            "date": day.date,
            "levels": day.levels,
            "messages": day.n_messages,
        }
    return int(env.single_observation_space.shape[0]), int(env.single_action_space.n), replayed


def _check_options(episodes: Any, seed: Any, fold: Any, horizon: Any, head: Any, weights: Any = "online") -> None:
    errs = []
    if isinstance(episodes, bool) or not isinstance(episodes, int) or not 1 <= episodes <= HELDOUT_FOLD_STRIDE:
        errs.append(f"--episodes={episodes!r} must be an int in 1..{HELDOUT_FOLD_STRIDE} (one book per episode)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < _MAX_SEED):
        errs.append(f"--seed={seed!r} must be an int in 0..2**62-1 (or leave it out: the fold's held-out seed)")
    if fold is not None and (isinstance(fold, bool) or not isinstance(fold, int) or fold < 0):
        errs.append(f"--fold={fold!r} must be an int >= 0 (or leave it out: the run's own fold)")
    if horizon is not None and (
        isinstance(horizon, bool) or not isinstance(horizon, int) or not 1 <= horizon <= MAX_HORIZON
    ):
        errs.append(
            f"--horizon={horizon!r} must be an int in 1..{MAX_HORIZON} ({HORIZON_WHY}; or leave it out: the run's "
            "market.horizon)"
        )
    if head not in HEADS:
        errs.append(f"--policy={head!r} must be one of {list(HEADS)}")
    if weights not in WEIGHTS:
        errs.append(f"--weights={weights!r} must be one of {list(WEIGHTS)}")
    if errs:
        raise EvaluationError("; ".join(errs))


def evaluate_run(
    run_dir: str | Path,
    *,
    checkpoint: str | Path | int | None = None,
    episodes: int = DEFAULT_EPISODES,
    seed: int | None = None,
    fold: int | None = None,
    lobster_path: str | Path | None = None,
    horizon: int | None = None,
    head: str = "pi",
    weights: str = "online",
    out: str | Path | None = None,
    write: bool = True,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Evaluates a run's checkpoint greedily beside the baselines on the same held-out episodes.

    checkpoint: None (the newest), a learner step or a path. seed: book 0's seed (default: the fold's
    held-out seed, heldout_seed(fold), fold defaulting to the run's). lobster_path: play windows of that
    LOBSTER day instead of synthetic days. horizon: steps per episode (default the run's). head: 'pi' or 'q'.
    weights: 'online' (the trained parameters) or 'target' (their Polyak average).
    When `write`, keeps the result as its own record RUN_DIR/evaluations/<record_name> (and, synthetic, its copy
    RUN_DIR/evaluation.json), or writes it to `out` alone; returns it. Raises EvaluationError on bad input, before
    anything is written.
    """
    _check_options(episodes, seed, fold, horizon, head, weights)
    if is_uri(str(run_dir)):
        return _evaluate_stored(
            str(run_dir),
            dict(checkpoint=checkpoint, episodes=episodes, seed=seed, fold=fold, lobster_path=lobster_path),
            dict(horizon=horizon, head=head, weights=weights, progress=progress),
            out=out,
            write=write,
        )
    given, run_dir = run_dir, resolve_run_dir(run_dir)
    run, driver, saved = load_run(run_dir, pointer=given if Path(given) != run_dir else None)
    ckpt = resolve_checkpoint(run_dir, checkpoint)
    fold = driver.fold if fold is None else fold
    eval_seed = heldout_seed(fold) if seed is None else seed
    market, kind = evaluation_market(run, lobster_path, horizon)
    obs_dim, n_actions, replayed = market_spaces(market)
    agent, step = load_agent(ckpt, run, obs_dim=obs_dim, n_actions=n_actions, head=head, weights=weights)
    held_out = True
    if kind == SYNTHETIC:
        last_step = max(step, driver.steps, *(s for s, _ in list_checkpoints(run_dir)))
        clash = training_overlap(eval_seed, episodes, run, driver, last_step)
        if clash is not None:
            raise EvaluationError(
                f"--seed={eval_seed}: book seed {clash} of the evaluation was a training book of this run (seeds "
                f"{run.seed} + k*{RESUME_SEED_STRIDE} + 0..{driver.rollout_workers * run.rollout.num_envs - 1}); "
                "leave --seed out to use the fold's held-out seed"
            )
    elif kind == REPLAY and not run.market.eval_days:
        held_out = False
        if progress:
            progress(f"warning: {', '.join(market.days)}: the days this run trained on (none held out): not held out")
    elif run.market.source == "lobster" and Path(run.market.lobster_path).name == Path(market.lobster_path).name:
        held_out = False
        if progress:
            progress(f"warning: {Path(market.lobster_path).name} is the day this run trained on: not held out")

    policies: dict[str, Policy] = {AGENT: agent}
    if kind == REPLAY:
        policies.update(REAL_DAY_POLICIES)
        if run.market.val_days:  # the quoting rule's parameters from the fold's validation period, as walk-forward's
            validation = dataclasses.replace(market, days=run.market.val_days)
            policies["quoting"] = tune_quoting(validation, episodes, seeds.validation_seed(fold))[0]
    else:
        policies.update({n: p for n, p in POLICIES.items() if kind == SYNTHETIC or n not in NEEDS_LATENT_REGIME})
    results: dict[str, dict[str, Any]] = {}
    pnl: dict[str, np.ndarray] = {}
    for name, policy in policies.items():
        start = time.perf_counter()
        played = run_episodes(market, policy, episodes, eval_seed)
        metrics = played.metrics()
        results[name], pnl[name] = metrics, played.pnl_usd
        if progress:
            progress(
                f"{name:<10} {episodes} episodes x {market.horizon} steps  pnl ${metrics['pnl_usd_mean']:,.0f} "
                f"± {metrics['pnl_usd_sem']:,.0f}  ({time.perf_counter() - start:.1f} s)"
            )
    oracle = results.get("oracle", {}).get("pnl_usd_mean")
    trained = run.market
    versus = None
    if kind == REPLAY and episodes >= 2:  # a real day: the agent against its strongest simple rule, window by window
        best = max(COMPARED_ON_REAL_DAYS, key=lambda n: results[n]["pnl_usd_mean"])
        versus = {"baseline": best, **paired(pnl[AGENT], pnl[best], seed=eval_seed % 2**32).to_json()}
    result = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "run_dir": str(run_dir),
        "checkpoint": str(ckpt),
        "checkpoint_step": step,
        "market": kind,
        "fold": fold,
        **({LOBSTER: replayed} if replayed is not None else {}),
        **({REPLAY: {"data": market.data, "days": list(market.days)}} if kind == REPLAY else {}),
        **({"quoting_rule": repr(policies["quoting"])} if kind == REPLAY else {}),
        "trained_on": _trained_on(trained),
        "held_out": held_out,
        "episodes": episodes,
        "eval_seed": eval_seed,
        "seed_origin": "heldout_seed(fold)" if seed is None else "--seed",
        "horizon": market.horizon,
        "policy_head": head,
        "weights": weights,
        "run_code_sha": saved.get("code_sha"),
        "code_sha": provenance.code_sha(),
        "policies": results,
        "oracle_fraction": results[AGENT]["pnl_usd_mean"] / oracle if oracle is not None and oracle > 0 else None,
        **({"vs_best_baseline": versus} if versus is not None else {}),
    }
    result["caveat"] = caveat(result)
    if write:
        try:
            write_json(Path(out), result) if out is not None else write_record(run_dir, result)
        except EvaluationRecordError as err:
            raise EvaluationError(str(err)) from None
    return result


def _trained_on(trained: MarketConfig) -> str:
    if trained.source == SYNTHETIC:
        return SYNTHETIC
    if trained.source == REPLAY:
        return f"{REPLAY}:{','.join(trained.days)}"
    return f"{LOBSTER}:{Path(trained.lobster_path).name}"


def _evaluate_stored(uri: str, options: dict, more: dict, *, out, write: bool) -> dict[str, Any]:
    """evaluate_run of a run kept in storage: copied into a temporary folder, evaluated there, its record copied
    back (or written to `out` alone); the result names the URI as its run_dir and checkpoint."""
    try:
        local, store = fetch_to_temp(uri)
    except (StorageError, OSError) as err:
        raise EvaluationError(f"cannot read the run {uri}: {err}") from None
    result = evaluate_run(local, **options, **more, write=False)
    ckpt = Path(result["checkpoint"])
    if ckpt.is_relative_to(local):
        result["checkpoint"] = f"{uri.rstrip('/')}/{ckpt.relative_to(local).as_posix()}"
    result["run_dir"] = uri
    if write:
        try:
            write_json(Path(out), result) if out is not None else write_record(local, result)
        except EvaluationRecordError as err:
            raise EvaluationError(str(err)) from None
        if out is None:
            try:
                store.sync(local)
            except (OSError, ValueError) as err:
                raise EvaluationError(f"the evaluation ran, but copying its record to {uri} failed: {err}") from None
    return result


def written_paths(run_dir: str | Path, result: dict[str, Any], out: str | Path | None = None) -> list[Path | str]:
    """Where evaluate_run(write=True) put `result`: `out`, or its record (and evaluation.json when synthetic); in a
    run's storage (a URI) as URIs."""
    if out is not None:
        return [Path(out)]
    names = [f"{EVALUATIONS_DIR}/{record_name(result)}"] + ([EVALUATION_FILE] if result["market"] == SYNTHETIC else [])
    if is_uri(str(run_dir)):
        return [f"{str(run_dir).rstrip('/')}/{n}" for n in names]
    return [resolve_run_dir(run_dir) / n for n in names]


# ---- the table and the command ----------------------------------------------------------------------------


def format_table(result: dict[str, Any]) -> str:
    """The printed table: one row per policy, the agent first."""

    def num(v: float | None, fmt: str) -> str:
        return "—" if v is None else format(v, fmt)

    lines = [
        f"{'policy':<10} {'pnl_usd mean':>13} {'± sem':>8} {'sharpe':>7} {'max_dd mean':>12} {'max_dd worst':>13} "
        f"{'turnover':>9} {'fees/ep':>9} {'fill_rate':>9}"
    ]
    # whole dollars, or cents where every figure is small (a crypto day's orders of a few tens of USD)
    big = max(abs(m[k]) for m in result["policies"].values() for k in ("pnl_usd_mean", "max_drawdown_usd_worst"))
    usd = ",.0f" if big >= 100 else ",.2f"
    for name, m in result["policies"].items():
        lines.append(
            f"{name:<10} {m['pnl_usd_mean']:>13{usd}} {m['pnl_usd_sem']:>8{usd}} {num(m['sharpe'], '.3f'):>7} "
            f"{m['max_drawdown_usd']:>12{usd}} {m['max_drawdown_usd_worst']:>13{usd}} {m['turnover']:>9.1f} "
            f"{m['fees_usd_mean']:>9,.2f} {num(m['fill_rate'], '.3f'):>9}"
        )
    if result["oracle_fraction"] is not None:
        lines.append(f"oracle fraction (agent / oracle mean pnl): {result['oracle_fraction']:+.3f}")
    if (v := result.get("vs_best_baseline")) is not None:
        lo, hi = v["ci95_usd"]
        lines.append(
            f"agent - {v['baseline']} (the best simple rule here), window by window: {v['mean_usd']:+,.2f} USD, "
            f"95 % interval [{lo:+,.2f}, {hi:+,.2f}], sign-flip p = {v['p_value']:.4f} ({v['windows']} windows)"
        )
    lines.append("— : 0/0 (sharpe: the same pnl in every episode; fill_rate: no passive order posted)")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m foxhunt_ray.evaluate",
        description="A run's checkpoint, greedy, beside flat / random / imbalance / oracle on held-out episodes.",
    )
    p.add_argument(
        "run_dir",
        metavar="RUN_DIR",
        help="a run folder OUT/<code_sha>/<name>/<fold>/, OUT/latest (the newest run), or a run's --storage URI",
    )
    p.add_argument("--checkpoint", default=None, help="a learner step (e.g. 100) or a checkpoint path (default newest)")
    p.add_argument("--episodes", type=int, default=DEFAULT_EPISODES, help=f"episodes per policy ({DEFAULT_EPISODES})")
    p.add_argument("--fold", type=int, default=None, help="held-out day of this fold (default the run's fold)")
    p.add_argument("--seed", type=int, default=None, help="seed of book 0 (default heldout_seed(fold))")
    p.add_argument("--lobster", default=None, metavar="PATH", help="evaluate on windows of this LOBSTER day")
    p.add_argument("--horizon", type=int, default=None, help="steps per episode (default the run's market.horizon)")
    p.add_argument("--policy", choices=HEADS, default="pi", help="act greedily on pi (default) or on q_ens")
    p.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="online",
        help="the trained parameters (online, default) or their Polyak average, the learner's target network",
    )
    p.add_argument(
        "--out",
        default=None,
        metavar="PATH",
        help=f"write the record here only (default: its own file in RUN_DIR/{EVALUATIONS_DIR}/, which the report "
        f"reads, and for the synthetic market RUN_DIR/{EVALUATION_FILE})",
    )
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Exit code 0 done, 1 a bad input (named, with the fix), 2 a usage error (argparse)."""
    args = parse_args(argv)
    torch.set_num_threads(1)  # batches of a few dozen observations: threads only cost here

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        result = evaluate_run(
            args.run_dir,
            checkpoint=args.checkpoint,
            episodes=args.episodes,
            seed=args.seed,
            fold=args.fold,
            lobster_path=args.lobster,
            horizon=args.horizon,
            head=args.policy,
            weights=args.weights,
            out=args.out,
            progress=None if args.quiet else progress,
        )
    except EvaluationError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(describe(result))
    for path in written_paths(args.run_dir, result, args.out):
        print(f"wrote {path}", flush=True)
    if result["market"] == LOBSTER and args.out is None:
        print(f"({result['run_dir']}/{EVALUATION_FILE}, the newest synthetic evaluation, is left as it was)")
    return 0


def describe(result: dict[str, Any]) -> str:
    """What the command prints of an evaluation: the run, checkpoint, market and episodes, the table, and for a
    real day what its figures are not."""
    if result["market"] == LOBSTER:
        episodes = f"market LOBSTER day {day_of(result)} ({result[LOBSTER]['file']}), {result['episodes']} windows"
    elif result["market"] == REPLAY:
        held = "held out" if result.get("held_out") else "its training days, not held out"
        episodes = f"market real days {day_of(result)} ({held}), {result['episodes']} windows"
    else:
        episodes = f"market synthetic, {day_of(result)} day, {result['episodes']} episodes"
    text = (
        f"{result['run_dir']}: checkpoint {Path(result['checkpoint']).name} (step {result['checkpoint_step']}), "
        f"greedy on {result['policy_head']}{' (target weights)' if result.get('weights') == 'target' else ''}"
        f"\n{episodes} x {result['horizon']} steps, books seeded "
        f"{result['eval_seed']} + i\n" + format_table(result)
    )
    return text + (f"\ncaveat: {result['caveat']}" if result.get("caveat") else "")


if __name__ == "__main__":
    sys.exit(main())

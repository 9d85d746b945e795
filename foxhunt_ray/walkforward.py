"""The walk-forward protocol: how runs on real days are scored (docs/evaluation.md, "Walk-forward").

A fold (the driver's --data, --days, --blocks, --holdout, --fold: `driver.data_sets`) has three sets of periods
(days, or blocks of a day): it trains on the periods before its validation one (market.days), picks its checkpoint
and tunes the quoting rule on the validation period (market.val_days), and is scored once on the test period
(market.eval_days). No test window reaches training, the checkpoint's choice or a baseline's parameters.

`score_fold(run_dirs)` scores one fold's runs (one a seed; the same fold and data):
1. each run's checkpoint: every one it kept (`--keep-checkpoints 0`) plays the validation windows greedily; the
   best mean PnL wins (a tie: the newer). A fold with no validation period (fold 1) takes the newest, and says so;
2. the quoting rule's parameters: `lobsim_env.baselines.tune_quoting` on the same validation windows;
3. the test: every test period alone, `episodes` windows of it at random starts (seeded by the fold, the same
   windows for every run and baseline), the agent of each run, flat, imbalance, the tuned quoting rule, and the
   hindsight bound (the ceiling);
4. the figures: each policy's metrics over all its test windows (`EpisodeResults.metrics`: USD, per contract,
   fees and rebates apart, fill rate, turnover, inventory, drawdown), the mean of each period (PnL per day), and
   the agent against each of flat, imbalance and quoting (`lobsim_env.stats.paired_seeds`: the seeds and windows
   resampled); `best_baseline` is the one of those three with the highest test mean, the strictest comparator
   (picked after the fact, which only makes the agent's case harder).

`FoldMarkets.of(market, fold)` (the validation and test markets, with their seeds) and `score_agents(markets,
agents)` (steps 2-4) score agents of any trainer alike. `holm_across(folds)` adds each fold's Holm-adjusted p-values
(over the folds, one family a baseline); `table` prints folds as rows. benchmarks/bench_walkforward.py trains every
fold and seed and calls these.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from actors.checkpoints import list_checkpoints
from foxhunt_ray import provenance
from foxhunt_ray.evaluate import AGENT, COMPARED_ON_REAL_DAYS, EvaluationError, load_agent, load_run, market_spaces
from lobsim_env import MarketConfig
from lobsim_env.baselines import (
    EpisodeResults,
    Policy,
    Quoting,
    flat,
    hindsight,
    imbalance,
    run_episodes,
    tune_quoting,
)
from lobsim_env.replay.market import open_periods
from lobsim_env.seeds import heldout_seed, validation_seed
from lobsim_env.stats import holm, paired_seeds

BASELINES = ("flat", "imbalance", "quoting", "hindsight")


def fold_kind(market: MarketConfig) -> str:
    """What a fold's periods are: 'cross-instrument' (no instrument it tests on is one it trained on: --holdout),
    'blocks of a day' (market.blocks > 1) or 'days' (the cache's dates); a cross-instrument fold of blocks is both."""

    def instruments(names: Sequence[str]) -> set[str]:  # venue/instrument/date[#k] -> venue/instrument
        return {name.partition("#")[0].rsplit("/", 1)[0] for name in names}

    blocks = "blocks of a day" if market.blocks > 1 else "days"
    if not instruments(market.eval_days) & instruments(market.days):
        return "cross-instrument" + (f" ({blocks})" if market.blocks > 1 else "")
    return blocks


def _period(base: MarketConfig, days: Sequence[str]) -> MarketConfig:
    """A validation or test period: real days alone, whatever share of synthetic books the run trained on."""
    return dataclasses.replace(base, days=tuple(days), eval_days=(), val_days=(), synthetic_share=0.0)


TRAIN_ON = ("real", "synthetic", "both")
"""What a fold's runs train on (bench_walkforward --train-on): its training periods' real windows; the synthetic
flow calibrated on those periods alone (lobsim_env.calibrate), in their units (lobsim_env.markets.MixedMarket,
synthetic_share 1); or both, a share of the rollout books synthetic and the rest real windows. The checkpoint is
picked on the real validation period and scored once on the real test period in every mode."""


def calibrate_fold(
    data: str,
    days: str | None,
    fold: int,
    blocks: int,
    holdout: str | None,
    out: Path,
    *,
    share: float = 1.0,
    events_per_step: int | None = None,
) -> dict[str, Any]:
    """Fits the synthetic flow to fold K's training periods alone (driver.data_sets: market.days; never its
    validation or test period) and writes OUT/calibrated/fold<K>.json, a --config file of foxhunt_ray.local that
    makes `share` of the rollout books that flow (market.synthetic_share, synthetic_tick_multiple, synthetic), and
    fold<K>.measured.json beside it. Returns what the record keeps: the file, the periods fitted, K, the fields."""
    from foxhunt_ray import driver
    from lobsim_env import calibrate

    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise EvaluationError(f"share={share!r} must be in (0, 1]: the share of the rollout books that are synthetic")
    sets, got = driver.data_sets(data, days, fold, blocks, holdout)
    market = {k.removeprefix("market."): json.loads(v) for k, v in (kv.split("=", 1) for kv in sets)}
    train, held = list(market["days"]), set(market["val_days"]) | set(market["eval_days"])
    if got != fold or held & set(train):  # data_sets keeps them apart; a change there must not leak a test period
        raise EvaluationError(f"fold {fold}: training periods {train} overlap its validation or test {sorted(held)}")
    e = events_per_step or market["events_per_step"]
    base = MarketConfig(events_per_step=e)  # the flow's rates are per event; a step of the days' messages
    cal = calibrate.calibrate(data, train, blocks=blocks, base=base, steps=max(1, 2000 // e))
    synthetic = dataclasses.asdict(cal.fit.synthetic)
    out = Path(out) / "calibrated"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"fold{fold}.json"
    config = {"market": {"synthetic_share": share, "synthetic_tick_multiple": cal.tick_multiple,
                         "synthetic": synthetic}}  # fmt: skip
    measured = {"days": cal.days, "tick_multiple": cal.tick_multiple, "measured": cal.fit.measured,
                "at_fit": cal.fit.at_fit, "notes": cal.notes}  # fmt: skip
    calibrate.write_together({
        path: json.dumps(config, indent=1) + "\n",
        out / f"fold{fold}.measured.json": json.dumps(measured, indent=1) + "\n",
    })  # fmt: skip
    return {
        "config": str(path),
        "days": cal.days,
        "tick_multiple": cal.tick_multiple,
        "synthetic_share": share,
        "fitted": {k: synthetic[k] for k in calibrate.FITTED},
    }


LARGE_TICK_SHARE = 0.5
"""A test period is large-tick when its spread is one tick in at least this share of its book rows (the queues are
deep and the price rarely moves: the agent's edge is its queue place), else small-tick (reported apart)."""


def tick_regime(market: MarketConfig) -> dict[str, Any]:
    """The test period's spread over its book rows (both sides quoted): its median in ticks, the share at one tick,
    and 'large-tick' or 'small-tick' (LARGE_TICK_SHARE)."""
    spreads = []
    for day, (lo, hi) in zip(*open_periods(market), strict=True):
        rows = day.book[lo:hi]  # LOBSTER's column order: ask price, ask size, bid price, bid size, ...
        quoted = (rows[:, 1] > 0) & (rows[:, 3] > 0)
        spreads.append(rows[quoted, 0] - rows[quoted, 2])
    spread = np.concatenate(spreads) if spreads else np.zeros(0, np.int64)
    one = float(np.mean(spread == 1)) if spread.size else 0.0
    return {
        "spread_ticks_median": float(np.median(spread)) if spread.size else None,
        "one_tick_share": one,
        "regime": "large-tick" if one >= LARGE_TICK_SHARE else "small-tick",
    }


def _concat(results: list[EpisodeResults]) -> EpisodeResults:
    """Several sets of windows as one (their metrics over all of them)."""
    fields = {f.name for f in dataclasses.fields(EpisodeResults)} - {"seed", "steps"}
    joined = {f: np.concatenate([getattr(r, f) for r in results]) for f in fields}
    return EpisodeResults(seed=results[0].seed, steps=results[0].steps, **joined)


def _same_fold(runs: list[tuple[Path, Any, Any]]) -> None:
    first_dir, first, first_drv = runs[0]
    for run_dir, run, drv in runs[1:]:
        a, b = first.market, run.market
        if (a.data, a.days, a.val_days, a.eval_days, a.horizon, a.synthetic_share, a.synthetic, drv.fold) != (
            b.data, b.days, b.val_days, b.eval_days, b.horizon, b.synthetic_share, b.synthetic, first_drv.fold
        ):  # fmt: skip
            raise EvaluationError(
                f"{run_dir} is not a run of {first_dir}'s fold (its data, days, validation or test days, horizon, "
                "synthetic share or flow, or fold differ): score_fold takes the seeds of one fold and one --train-on"
            )


def score_fold(
    run_dirs: Sequence[str | Path],
    *,
    episodes: int = 64,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Scores one fold's runs (one a seed) by the protocol (module docstring); returns its record (JSON-ready)."""
    if not run_dirs:
        raise EvaluationError("score_fold: no run folder given")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 2:
        raise EvaluationError(f"episodes={episodes!r} must be an int >= 2 (windows a test period)")
    say = progress or (lambda line: None)
    runs = [(Path(d), *load_run(d)[:2]) for d in run_dirs]
    try:
        markets = FoldMarkets.of(runs[0][1].market, runs[0][2].fold)
    except EvaluationError as err:
        raise EvaluationError(f"{runs[0][0]} trained on {err}") from None
    _same_fold(runs)
    obs_dim, n_actions, _ = market_spaces(markets.tests[0])

    chosen, agents = [], []
    for run_dir, run, _ in runs:
        kept = list_checkpoints(run_dir)
        if not kept:
            raise EvaluationError(f"{run_dir / 'checkpoints'} holds no checkpoint: the run never reached its first one")
        scores: dict[int, float] = {}
        if markets.validation is None:
            step, path = kept[-1]
            agent, _ = load_agent(path, run, obs_dim=obs_dim, n_actions=n_actions)
            how = "newest (no validation period: fold 1)"
        else:
            candidates = {}
            for step, path in kept:
                candidates[step], _ = load_agent(path, run, obs_dim=obs_dim, n_actions=n_actions)
                scores[step] = markets.validate(candidates[step], episodes)
            step = max(scores, key=lambda s: (scores[s], s))
            agent = candidates[step]
            how = "best mean PnL on the validation windows"
        agents.append(agent)
        chosen.append({"run_dir": str(run_dir), "seed": run.seed, "step": step, "how": how, "validation_usd": scores})
        say(f"{run_dir}: checkpoint {step} ({how}{f': {scores[step]:+.2f} USD' if scores else ''})")
    record = score_agents(markets, agents, episodes=episodes, progress=progress)
    m = runs[0][1].market
    return {**record, "train_on": train_on(m), "synthetic_share": m.synthetic_share,
            "seeds": [run.seed for _, run, _ in runs], "checkpoints": chosen}  # fmt: skip


def train_on(market: MarketConfig) -> str:
    """TRAIN_ON's name of what a run's market trained it on: real, synthetic or both."""
    return "real" if not market.synthetic_share else "synthetic" if market.synthetic_share >= 1 else "both"


def _trained_on(fold: dict[str, Any]) -> str:
    mode = fold.get("train_on", "real")
    return f"both ({fold['synthetic_share']:.0%} synthetic)" if mode == "both" else mode


@dataclasses.dataclass(frozen=True)
class FoldMarkets:
    """A fold's validation market (None for fold 1) and its test markets (one a test period), with their seeds."""

    base: MarketConfig
    fold: int
    validation: MarketConfig | None
    tests: list[MarketConfig]
    val_seed: int
    test_seed: int

    @classmethod
    def of(cls, base: MarketConfig, fold: int) -> FoldMarkets:
        """The fold of a replay market config that names its days, validation days and test days (driver.data_sets)."""
        if base.source != "replay" or not base.eval_days:
            raise EvaluationError(
                f"market.source={base.source!r} with eval_days={list(base.eval_days)}: the walk-forward protocol "
                "scores real days with a test period (--data with two periods or more, or --holdout)"
            )
        validation = _period(base, base.val_days) if base.val_days else None
        tests = [_period(base, (name,)) for name in base.eval_days]
        return cls(base, fold, validation, tests, validation_seed(fold), heldout_seed(fold))

    def validate(self, policy: Policy, episodes: int) -> float:
        """A policy's mean PnL on the validation windows (what picks a checkpoint)."""
        if self.validation is None:
            raise EvaluationError(f"fold {self.fold} has no validation period")
        return float(run_episodes(self.validation, policy, episodes, self.val_seed).pnl_usd.mean())


def score_agents(
    markets: FoldMarkets,
    agents: Sequence[Policy],
    *,
    episodes: int = 64,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Steps 2-4 of the protocol for agents already chosen (one a seed, each picked on the validation windows): the
    quoting rule tuned there, every test period played once by each agent and each rule, the figures and intervals.
    The record of score_fold without its `seeds` and `checkpoints` (any trainer's agents are scored alike)."""
    if not agents:
        raise EvaluationError("score_agents: no agent given")
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes < 2:
        raise EvaluationError(f"episodes={episodes!r} must be an int >= 2 (windows a test period)")
    say = progress or (lambda line: None)
    base, fold, validation, test_seed = markets.base, markets.fold, markets.validation, markets.test_seed
    if validation is not None:
        quoting, quoting_scores = tune_quoting(validation, episodes, markets.val_seed)
    else:
        quoting, quoting_scores = Quoting(), {}
    policies = {"flat": flat, "imbalance": imbalance, "quoting": quoting, "hindsight": hindsight}
    played: dict[str, list[list[EpisodeResults]]] = {AGENT: [[] for _ in agents]} | {n: [[]] for n in policies}
    for market in markets.tests:
        for i, agent in enumerate(agents):
            played[AGENT][i].append(run_episodes(market, agent, episodes, test_seed))
        for name, policy in policies.items():
            played[name][0].append(run_episodes(market, policy, episodes, test_seed))
    pnl = {n: np.array([[r.pnl_usd for r in per_run] for per_run in runs_]) for n, runs_ in played.items()}
    # pnl[name]: [runs, periods, windows]; the baselines' one "run"
    results = {n: _concat([r for per_run in runs_ for r in per_run]).metrics() for n, runs_ in played.items()}
    for name, metrics in results.items():
        metrics["per_period_usd"] = pnl[name].mean(axis=(0, 2)).tolist()
    results[AGENT]["per_seed_usd"] = pnl[AGENT].mean(axis=(1, 2)).tolist()
    versus = {b: paired_seeds(pnl[AGENT], pnl[b][0], seed=test_seed % 2**32).to_json() for b in COMPARED_ON_REAL_DAYS}
    best = max(COMPARED_ON_REAL_DAYS, key=lambda n: results[n]["pnl_usd_mean"])
    say(f"fold {fold}: agent {results[AGENT]['pnl_usd_mean']:+.2f} USD, best rule {best} "
        f"{results[best]['pnl_usd_mean']:+.2f}, gap interval {versus[best]['ci95_usd']}")  # fmt: skip
    return {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "code_sha": provenance.code_sha(),
        "fold": fold,
        "kind": fold_kind(base),
        "data": base.data,
        "blocks": base.blocks,
        "train_days": list(base.days),
        "val_days": list(base.val_days),
        "test_days": list(base.eval_days),
        "tick_regime": tick_regime(_period(base, base.eval_days)),
        "horizon": base.horizon,
        "episodes": episodes,
        "test_seed": test_seed,
        "val_seed": markets.val_seed if validation is not None else None,
        "quoting": {"chosen": repr(quoting), "validation_usd": {k: float(v) for k, v in quoting_scores.items()}},
        "policies": results,
        "versus": versus,
        "best_baseline": best,
        "beats_best_baseline": versus[best]["ci95_usd"][0] > 0,
    }


def holm_across(folds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each fold's `versus[b]["p_holm"]`: its p-value Holm-adjusted over the folds (one family a baseline)."""
    for b in COMPARED_ON_REAL_DAYS:
        for fold, p in zip(folds, holm([f["versus"][b]["p_value"] for f in folds]), strict=True):
            fold["versus"][b]["p_holm"] = p
    return folds


def _regime(fold: dict[str, Any]) -> str:
    t = fold.get("tick_regime")
    return "-" if not t or t["spread_ticks_median"] is None else f"{t['regime']} ({t['spread_ticks_median']:g})"


def table(folds: list[dict[str, Any]], kind: str) -> str:
    """The folds as a Markdown table: each policy's mean test PnL (USD), the gap to the best rule with its
    interval, Holm's p where holm_across ran."""
    rows = [
        f"Walk-forward, folds of {kind}; test PnL in USD per window (mean over seeds, periods and windows)",
        "",
        "| fold | trained on | test | tick regime (median spread) | seeds | agent | flat | imbalance | quoting | "
        "hindsight | best rule | agent - best [95 % CI] | p (Holm) | $/contract agent | fill rate agent | "
        "inventory agent |",
        "|" + "---|" * 16,
    ]
    for f in folds:
        p, best = f["policies"], f["best_baseline"]
        v = f["versus"][best]
        holm_p = f"{v['p_value']:.3f} ({v['p_holm']:.3f})" if "p_holm" in v else f"{v['p_value']:.3f}"
        per_contract, fill = p[AGENT]["usd_per_contract"], p[AGENT]["fill_rate"]
        rows.append(
            f"| {f['fold']} | {_trained_on(f)} | {', '.join(f['test_days'])} | {_regime(f)} | {len(f['seeds'])} | "
            + " | ".join(f"{p[n]['pnl_usd_mean']:+.2f}" for n in (AGENT, *BASELINES))
            + f" | {best} | {v['mean_usd']:+.2f} [{v['ci95_usd'][0]:+.2f}, {v['ci95_usd'][1]:+.2f}] | {holm_p} | "
            + f"{'-' if per_contract is None else f'{per_contract:+.4f}'} | {'-' if fill is None else f'{fill:.2f}'} | "
            + f"{p[AGENT]['inventory_mean']:.1f} |"
        )
    return "\n".join(rows)

"""The walk-forward protocol (foxhunt_ray.walkforward, docs/evaluation.md "Walk-forward"): every fold trains before
its validation period and validates before its test; no test window reaches training, the checkpoint's choice or
the quoting rule's parameters; the intervals are the two-level bootstrap the docs describe; the bench runs every
fold and seed and prints its last line."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from foxhunt_ray import driver, walkforward
from foxhunt_ray.evaluate import EvaluationError, load_agent, load_run, market_spaces
from lobsim_env import MarketConfig
from lobsim_env.baselines import QUOTING_GRID, run_episodes
from lobsim_env.config import MarketConfigError
from lobsim_env.data.layout import open_day
from lobsim_env.stats import paired, paired_seeds
from tests.test_replay import _l2_day

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ["--preset", "smoke", "--quiet", "--serial", "--checkpoint-interval-s", "0", "--set", "market.horizon=40"]


@pytest.fixture(scope="module")
def three_dates(tmp_path_factory):
    root = tmp_path_factory.mktemp("wfcache")
    for i, date in enumerate(("2024-08-08", "2024-08-09", "2024-08-10")):
        _l2_day(root, seed=10 + i, date=date, n=3000)
    return root


def _market(sets: list[str]) -> dict:
    return {k.removeprefix("market."): json.loads(v) for k, v in (s.split("=", 1) for s in sets)}


def _period(name: str) -> tuple[str, int]:
    day, _, block = name.partition("#")
    return day.rsplit("/", 1)[1], int(block or 0)


def test_every_fold_trains_before_it_validates_and_validates_before_it_tests(three_dates):
    for blocks in (1, 2, 3):
        n = 3 * blocks
        for k in range(1, n):
            sets, fold = driver.data_sets(str(three_dates), None, k, blocks)
            m = _market(sets)
            train, val, test = ([_period(d) for d in m[key]] for key in ("days", "val_days", "eval_days"))
            assert fold == k and len(test) == 1 and train
            assert len(val) == (1 if k >= 2 else 0)
            assert max(train) < min(val + test) and (not val or max(val) < min(test))
            assert not set(m["days"]) & set(m["val_days"] + m["eval_days"]) and not set(m["val_days"]) & set(
                m["eval_days"]
            )
            assert len(train) == (k - 1 if k >= 2 else 1)  # every period before the validation one
    # the kind of fold each table names
    assert walkforward.fold_kind(MarketConfig(days=("v/A/d1",), eval_days=("v/A/d2",))) == "days"
    assert walkforward.fold_kind(MarketConfig(days=("v/A/d#0",), eval_days=("v/A/d#2",), blocks=3)) == "blocks of a day"
    crossed = MarketConfig(days=("v/A/d#0",), val_days=("v/B/d#1",), eval_days=("v/B/d#2",), blocks=3)
    assert walkforward.fold_kind(crossed) == "cross-instrument (blocks of a day)"
    with pytest.raises(MarketConfigError, match=r"market.days and market.eval_days share \['a'\]"):
        MarketConfig(days=("a", "b"), eval_days=("a",)).validate()
    with pytest.raises(MarketConfigError, match=r"market.val_days and market.eval_days share \['c'\]"):
        MarketConfig(days=("a",), val_days=("c",), eval_days=("c",)).validate()


@pytest.fixture(scope="module")
def fold_runs(three_dates, tmp_path_factory):
    """Two seeds of fold 2 (train 08-08, validate 08-09, test 08-10), every checkpoint kept (steps 2, 4, 6)."""
    out = tmp_path_factory.mktemp("wfruns")
    flags = [*SMOKE, "--data", str(three_dates), "--fold", "2", "--keep-checkpoints", "0", "--checkpoint-every", "2"]
    for seed in (0, 1):
        assert driver.main([*flags, "--steps", "6", "--seed", str(seed), "--name", f"s{seed}", "--out", str(out)]) == 0
    return [next(out.glob(f"*/s{seed}/2")) for seed in (0, 1)]


def test_a_fold_picks_its_checkpoint_and_quoting_rule_on_validation_and_plays_the_test_once(fold_runs, monkeypatch):
    played: list[tuple[tuple[str, ...], object]] = []
    real = run_episodes

    def logged(config, policy, episodes, seed, **kw):
        played.append((config.days, policy))
        return real(config, policy, episodes, seed, **kw)

    monkeypatch.setattr(walkforward, "run_episodes", logged)
    monkeypatch.setattr("lobsim_env.baselines.run_episodes", logged)  # tune_quoting's calls
    record = walkforward.score_fold(fold_runs, episodes=4)
    val, test = ("test/L2X/2024-08-09",), ("test/L2X/2024-08-10",)
    assert record["val_days"] == list(val) and record["test_days"] == list(test)
    first_test = next(i for i, (days, _) in enumerate(played) if days == test)
    assert {days for days, _ in played[:first_test]} == {val}  # every choice made before the test is played
    assert {days for days, _ in played[first_test:]} == {test}
    assert len(played) - first_test == 2 + 4  # each run's chosen agent and flat, imbalance, quoting, hindsight once
    assert sum(1 for days, p in played[:first_test] if p in QUOTING_GRID) == len(QUOTING_GRID)
    for chosen in record["checkpoints"]:
        scores = {int(s): v for s, v in chosen["validation_usd"].items()}
        assert sorted(scores) == [2, 4, 6]  # every kept checkpoint scored on the validation windows
        assert chosen["step"] == max(scores, key=lambda s: (scores[s], s))
    quoting = record["quoting"]
    assert quoting["validation_usd"][quoting["chosen"]] == max(quoting["validation_usd"].values())
    # the agent's figures are those of the chosen checkpoints on the test windows, the seeds' mean
    per_seed = []
    for run_dir, chosen in zip(fold_runs, record["checkpoints"], strict=True):
        run, _, _ = load_run(run_dir)
        market = dataclasses.replace(run.market, days=test, eval_days=(), val_days=())
        obs_dim, n_actions, _ = market_spaces(market)
        path = run_dir / "checkpoints" / f"ckpt_{chosen['step']:08d}.pt"
        agent, _ = load_agent(path, run, obs_dim=obs_dim, n_actions=n_actions)
        per_seed.append(real(market, agent, 4, record["test_seed"]).pnl_usd.mean())
    policies = record["policies"]
    assert policies["agent"]["per_seed_usd"] == pytest.approx(per_seed)
    assert policies["agent"]["pnl_usd_mean"] == pytest.approx(np.mean(per_seed))
    for b in ("flat", "imbalance", "quoting"):
        v = record["versus"][b]
        assert v["mean_usd"] == pytest.approx(policies["agent"]["pnl_usd_mean"] - policies[b]["pnl_usd_mean"])
        assert v["ci95_usd"][0] <= v["mean_usd"] <= v["ci95_usd"][1] and v["windows"] == 4
    best = max(("flat", "imbalance", "quoting"), key=lambda n: policies[n]["pnl_usd_mean"])
    assert record["best_baseline"] == best
    assert record["beats_best_baseline"] == (record["versus"][best]["ci95_usd"][0] > 0)
    for key in ("usd_per_contract", "taker_fees_usd_mean", "maker_fees_usd_mean", "inventory_mean", "fill_rate"):
        assert key in policies["agent"] and key in policies["quoting"]
    assert policies["flat"]["inventory_mean"] == 0 and policies["flat"]["usd_per_contract"] is None
    # scoring is a function of the checkpoints: the same runs scored again give the same record
    again = walkforward.score_fold(fold_runs, episodes=4)
    assert {k: v for k, v in again.items() if k not in ("created", "code_sha")} == {
        k: v for k, v in record.items() if k not in ("created", "code_sha")
    }
    # the fold's table and Holm's adjustment over folds
    two = walkforward.holm_across([record, json.loads(json.dumps(record))])
    assert two[0]["versus"][best]["p_holm"] == pytest.approx(min(1.0, 2 * record["versus"][best]["p_value"]))
    # the test period's tick regime: its spread over the book rows where both sides are quoted, in ticks
    run, _, _ = load_run(fold_runs[0])
    rows = open_day(next(Path(run.market.data).glob("test/L2X/2024-08-10"))).book
    spread = (rows[:, 0] - rows[:, 2])[(rows[:, 1] > 0) & (rows[:, 3] > 0)]
    regime = record["tick_regime"]
    assert regime["spread_ticks_median"] == np.median(spread) and regime["one_tick_share"] == np.mean(spread == 1)
    assert regime["regime"] == ("large-tick" if np.mean(spread == 1) >= 0.5 else "small-tick")
    cell = f"{regime['regime']} ({regime['spread_ticks_median']:g})"
    assert record["train_on"] == "real" and record["synthetic_share"] == 0
    assert f"| 2 | real | test/L2X/2024-08-10 | {cell} | 2 |" in walkforward.table(two, "days")


def test_runs_of_other_folds_or_of_no_test_period_are_refused(fold_runs, three_dates, tmp_path):
    assert driver.main([*SMOKE, "--data", str(three_dates), "--fold", "1", "--steps", "2", "--out", str(tmp_path)]) == 0
    other = next(tmp_path.glob("*/*/1"))
    with pytest.raises(EvaluationError, match=r"is not a run of .* fold"):
        walkforward.score_fold([fold_runs[0], other], episodes=4)
    with pytest.raises(EvaluationError, match="episodes=1 must be an int >= 2"):
        walkforward.score_fold(fold_runs, episodes=1)
    record = walkforward.score_fold([other], episodes=4)  # fold 1: no validation period, the newest checkpoint
    assert record["checkpoints"][0]["how"].startswith("newest") and record["val_days"] == []


def _two_level_reference(a: np.ndarray, b: np.ndarray, seed: int, resamples: int, chunk: int) -> tuple[float, float]:
    """The bootstrap as docs/evaluation.md words it, loop by loop, drawing as paired_seeds draws."""
    S, P, W = a.shape
    rng = np.random.default_rng(seed)
    means = []
    for lo in range(0, resamples, chunk):
        n = min(chunk, resamples - lo)
        seeds, windows = rng.integers(0, S, (n, S)), rng.integers(0, W, (n, P, W))
        for r in range(n):
            per_period = [
                np.mean([a[s, p, w] - b[p, w] for s in seeds[r] for w in windows[r, p]]) for p in range(P)
            ]  # the seeds drawn, each period's windows drawn: the mean over them, then over periods
            means.append(np.mean(per_period))
    return tuple(np.quantile(means, [0.025, 0.975]))


def test_paired_seeds_resamples_seeds_and_windows_as_documented():
    rng = np.random.default_rng(4)
    a, b = rng.normal(0, 1, (3, 2, 5)), rng.normal(0, 1, (2, 5))
    got = paired_seeds(a, b, seed=7, resamples=300, chunk=100)
    assert got.ci95 == pytest.approx(_two_level_reference(a, b, 7, 300, 100))
    assert got.mean == pytest.approx((a.mean(axis=0) - b).mean()) and got.windows == 10
    # a constant gap has no spread; one seed and one period is the windows' paired bootstrap's figure
    const = paired_seeds(b[None] + 2.0, b, resamples=500)
    assert const.ci95 == pytest.approx((2.0, 2.0)) and const.p_value < 0.01
    one = paired_seeds(a[:1, :1], b[:1], resamples=2000)
    assert one.mean == pytest.approx(paired(a[0, 0], b[0]).mean)
    # seeds that disagree widen the interval beyond the windows' alone
    spread = b[None] + np.array([-3.0, 0.5, 4.0])[:, None, None] + rng.normal(0, 0.1, (3, 2, 5))
    wide = paired_seeds(spread, b, resamples=2000)
    narrow = paired(spread.mean(axis=0).reshape(-1), b.reshape(-1), resamples=2000)
    assert wide.ci95[1] - wide.ci95[0] > 3 * (narrow.ci95[1] - narrow.ci95[0])
    # the p-value agrees with the interval: seeds that disagree (one gains 8, the others lose 1-2) over many windows
    # whose noise is small: a test of the windows alone would call it; the seeds' spread does not
    split = b[None] + np.array([8.0, -1.0, -2.0])[:, None, None] + rng.normal(0, 0.05, (3, 2, 5))
    mixed = paired_seeds(split, b, resamples=4000)
    assert mixed.ci95[0] < 0 < mixed.ci95[1] and mixed.p_value > 0.2
    assert paired(split.mean(axis=0).reshape(-1), b.reshape(-1)).p_value < 0.01
    for gap in (-3.0, -0.3, 0.0, 0.3, 3.0):
        got = paired_seeds(spread + gap - 0.5, b, resamples=2000)
        assert (got.p_value < 0.05) == (got.ci95[0] > 0 or got.ci95[1] < 0), (gap, got)
    with pytest.raises(ValueError, match=r"agent \[seeds, periods, windows\]"):
        paired_seeds(a[0], b)


LAST = re.compile(
    r"folds=1 seeds=1 agent_usd=(-?[\d.]+) flat_usd=0\.00 imbalance_usd=(-?[\d.]+) quoting_usd=(-?[\d.]+) "
    r"beats_best_baseline=([01])/1 train_on=real"
)


@pytest.mark.slow
def test_the_bench_trains_every_seed_of_a_fold_and_prints_the_table_and_its_last_line(three_dates, tmp_path):
    """One seed (a run is a process of its own: each seed more costs its start); score_fold's tests cover several."""
    cmd = [sys.executable, "benchmarks/bench_walkforward.py", "--data", str(three_dates), "--folds", "2"]
    cmd += ["--seeds", "1", "--train-s", "0", "--steps", "4", "--episodes", "4", "--parallel", "1", "--preset", "smoke"]
    cmd += ["--checkpoint-every", "2", "--checkpoint-interval-s", "0", "--set", "market.horizon=40"]
    out = subprocess.run([*cmd, "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert LAST.fullmatch(lines[-1]), lines[-1]
    assert "Walk-forward, folds of days" in out.stdout
    assert re.search(r"\| 2 \| real \| test/L2X/2024-08-10 \| \S+-tick", out.stdout)
    doc = json.loads((tmp_path / "walkforward.json").read_text())
    assert doc["kind"] == "days" and [f["fold"] for f in doc["folds"]] == [2]
    assert [c["seed"] for c in doc["folds"][0]["checkpoints"]] == [0]
    assert (tmp_path / "walkforward.png").stat().st_size > 0 and (tmp_path / "walkforward.md").exists()
    again = subprocess.run([*cmd, "--out", str(tmp_path), "--score-only"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 0 and "scored the runs already there" in again.stdout, again.stderr[-2000:]
    assert again.stdout.strip().splitlines()[-1] == lines[-1]  # the chosen checkpoints kept: the same figures
    bad = subprocess.run([*cmd[:4], "--folds", "1", "--out", str(tmp_path / "x")], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 2 and "the folds with a validation period here are [2]" in bad.stderr


def test_synthetic_training_is_calibrated_on_the_folds_training_periods_alone(three_dates, tmp_path, monkeypatch):
    """--train-on synthetic or both: calibrate is given fold K's training periods, never its validation or test one,
    and the --config file it leaves makes that share of the books the flow fitted there."""
    from lobsim_env import calibrate

    given: list[tuple[list[str], int]] = []
    real = calibrate.calibrate

    def recorded(cache, names, **kw):
        given.append((list(names), kw["blocks"]))
        return real(cache, names, **{**kw, "books": 8, "steps": 10})  # a tiny fit: what it reads is the point

    monkeypatch.setattr(calibrate, "calibrate", recorded)
    for fold, share in ((2, 1.0), (5, 0.5)):  # 3 dates x 2 blocks: fold 5 tests on the last date's second half
        rec = walkforward.calibrate_fold(str(three_dates), None, fold, 2, None, tmp_path, share=share)
        m = _market(driver.data_sets(str(three_dates), None, fold, 2)[0])
        names, blocks = given[-1]
        assert names == m["days"] == rec["days"] and blocks == 2
        assert not set(names) & set(m["val_days"] + m["eval_days"])
        assert max(map(_period, names)) < min(map(_period, m["val_days"] + m["eval_days"]))
        written = json.loads(Path(rec["config"]).read_text())["market"]
        assert written["synthetic_share"] == share and written["synthetic_tick_multiple"] == rec["tick_multiple"]
        assert json.loads(Path(rec["config"]).with_suffix(".measured.json").read_text())["days"] == names
    with pytest.raises(EvaluationError, match=r"share=0 must be in \(0, 1\]"):
        walkforward.calibrate_fold(str(three_dates), None, 2, 2, None, tmp_path, share=0)


def test_a_mixed_market_plays_synthetic_and_real_books_in_the_days_units(three_dates):
    """The same network plays both markets: one observation layout, prices in venue ticks, sizes and positions in the
    days' lots, USD a tick and unit from the days' contract; validation and test periods stay real."""
    from lobsim_env import Action
    from lobsim_env.market import obs_index, obs_size
    from lobsim_env.markets import MixedMarket, make_market, synthetic_part
    from lobsim_env.replay.market import ReplayMarket
    from lobsim_env.synthetic.market import SyntheticMarket

    m = _market(driver.data_sets(str(three_dates), None, 2, 1)[0])
    m = {k: tuple(v) if isinstance(v, list) else v for k, v in m.items()}
    k = 3
    cfg = MarketConfig(**{**m, "horizon": 40, "depth_flow_ticks": 2}, synthetic_share=0.5, synthetic_tick_multiple=k)
    lots, at = cfg.order_size, obs_index(cfg)
    syn = synthetic_part(cfg)
    assert (syn.order_size, syn.position_limit) == (1, cfg.position_limit // lots)
    assert syn.size_scale == cfg.size_scale / lots
    assert syn.usd_per_tick == pytest.approx(cfg.usd_per_tick * lots * k) and syn.depth_flow_ticks == 1
    price = cfg.reference_price_ticks * cfg.usd_per_tick  # a lot at the days' median price: its bps fee per unit
    assert syn.taker_fee_usd == pytest.approx((cfg.taker_fee_usd + cfg.taker_fee_bps * 1e-4 * price) * lots) != 0

    mixed = make_market(cfg)
    assert isinstance(mixed, MixedMarket)
    alone = [SyntheticMarket(syn), ReplayMarket(dataclasses.replace(cfg, synthetic_share=0.0))]
    keys = np.array([11, 12, 13, 14], np.uint64)
    state, states = mixed.new_state(4), [a.new_state(2) for a in alone]
    mixed.reset_rows(state, np.arange(4), keys)
    for a, st, kk in zip(alone, states, (keys[:2], keys[2:]), strict=True):
        a.reset_rows(st, np.arange(2), kk)
    buy = np.array([Action.MARKET_BUY, Action.JOIN_BID] * 2)
    for t in range(5):
        act = buy if t == 0 else np.full(4, Action.HOLD)
        res = mixed.step(state, act)
        parts = [a.step(st, act[:2]) for a, st in zip(alone, states, strict=True)]
        np.testing.assert_allclose(res.reward, np.concatenate([p.reward for p in parts]))
    obs, own = mixed.observe(state), [a.observe(st) for a, st in zip(alone, states, strict=True)]
    L = cfg.obs_levels
    prices = [*range(L), *range(2 * L, 3 * L), at["spread"], at["own_bid_offset"], at["own_ask_offset"]]
    scaled = own[0].copy()
    scaled[:, prices] *= k  # synthetic ticks of k venue ticks read in venue ticks
    np.testing.assert_array_equal(obs, np.concatenate([scaled, own[1]]))
    assert obs.shape[1] == obs_size(cfg)
    assert state.position[0] == states[0].position[0] * lots == lots  # one order bought: the days' order in lots
    assert obs[0, at["position"]] == pytest.approx(1 / syn.position_limit)  # one order of the limit, as on the days
    fold = walkforward.FoldMarkets.of(cfg, 2)
    for period in (fold.validation, *fold.tests):
        assert period.synthetic_share == 0 and isinstance(make_market(period), ReplayMarket)
    with pytest.raises(MarketConfigError, match=r"synthetic_share=0.5 goes with source='replay'"):
        MarketConfig(synthetic_share=0.5).validate()


def test_the_bench_refuses_a_synthetic_share_without_both(three_dates, tmp_path, capsys):
    from benchmarks import bench_walkforward

    for argv in (["--train-on", "real", "--synthetic-share", "0.3"], ["--train-on", "both", "--synthetic-share", "1"]):
        with pytest.raises(SystemExit) as exc:
            bench_walkforward.main(["--data", str(three_dates), *argv, "--out", str(tmp_path)])
        assert exc.value.code == 2 and "--synthetic-share=" in capsys.readouterr().err


def test_the_sim_to_real_table_sets_each_mode_beside_real_on_the_same_folds(tmp_path, capsys):
    from benchmarks import sim_to_real_table

    def doc(mode: str | None, agent: float, folds=(4,)) -> Path:
        fold = {"test_days": ["v/A/d#4"], "seeds": [0, 1], "best_baseline": "quoting", "synthetic_share": 0.5,
                "policies": {"agent": {"pnl_usd_mean": agent, "per_seed_usd": [agent - 1, agent + 1]},
                             "quoting": {"pnl_usd_mean": 2.0}, "hindsight": {"pnl_usd_mean": 9.0}},
                "versus": {"quoting": {"mean_usd": agent - 2.0, "ci95_usd": [agent - 3.0, agent - 1.0]}}}  # fmt: skip
        path = tmp_path / f"{mode}-{agent}-{len(folds)}.json"
        folds_ = [{**fold, "fold": k, **({"train_on": mode} if mode else {})} for k in folds]
        path.write_text(json.dumps({"folds": folds_}))
        return path

    real, syn, both = doc(None, 5.0), doc("synthetic", 1.0), doc("both", 4.5)  # no train_on: made before the flag
    assert sim_to_real_table.main([str(both), str(real), str(syn)]) == 0
    text = capsys.readouterr().out
    assert "| real | 4 | d#4 | 2 | +5.00 | quoting +2.00 | +3.00 [+2.00, +4.00] | yes | +9.00 |" in text
    assert "| synthetic | 4 | d#4 | 2 | +1.00 | quoting +2.00 | -1.00 [-2.00, +0.00] | no | +9.00 |" in text
    assert "| both (50% synthetic) | 4 |" in text and "| synthetic | 1 | +1.00 | +2.00 | -1.00 | 0/1 |" in text
    assert "| 4 | -4.00 (seeds +0.0 +2.0; real +4.0 +6.0) | -0.50 (seeds +3.5 +5.5; real +4.0 +6.0) |" in text
    more = doc("synthetic", 1.0, (4, 8))  # fold 8 only there: the comparison keeps fold 4 and says so
    assert sim_to_real_table.main([str(real), str(more)]) == 0
    text = capsys.readouterr().out
    assert "| synthetic | 1 | +1.00 |" in text and f"{more}: fold(s) [8] left out" in text
    for bad, said in (([real, doc("real", 3.0)], "a second file of --train-on real"),
                      ([real, doc("synthetic", 1.0, (8,))], "no fold in every file")):  # fmt: skip
        with pytest.raises(SystemExit, match=said):
            sim_to_real_table.main([str(p) for p in bad])

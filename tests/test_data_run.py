"""Real days from the command line (docs/data.md): `--data DIR [--days] [--fold]` trains on a cache's days with the
contract, fees and reward scale of its manifests, names them in the header and config.json, and scores its fold by
the walk-forward protocol beside flat, imbalance, quoting and the hindsight bound; `--demo --data` prints those
yardsticks; `python -m lobsim_env.data ingest | check | ls` on LOBSTER samples."""

from __future__ import annotations

import dataclasses
import json
import re

import numpy as np
import pytest

from foxhunt_ray import driver, local
from foxhunt_ray.evaluate import evaluate_run
from lobsim_env import LobVectorEnv
from lobsim_env.baselines import QUOTING_GRID, Quoting, evaluate_policy, run_episodes, tune_quoting
from lobsim_env.data import lobster as lobster_source
from lobsim_env.data.__main__ import main as data_main
from lobsim_env.data.layout import DataError
from lobsim_env.lobster.samples import sample_zip
from lobsim_env.replay import ReplayMarket, replay_config
from tests.test_replay import _l2_day

SMOKE = ["--preset", "smoke", "--quiet", "--serial", "--checkpoint-interval-s", "0"]


@pytest.fixture(scope="module")
def two_dates(tmp_path_factory):
    root = tmp_path_factory.mktemp("l2cache")
    for i, date in enumerate(("2024-08-08", "2024-08-09", "2024-08-10")):
        _l2_day(root, seed=i, date=date, n=3000)
    return root


def test_a_run_on_real_days_trains_before_its_validation_day_and_evaluates_on_the_fold(two_dates, tmp_path, capsys):
    flags = [*SMOKE, "--data", str(two_dates), "--out", str(tmp_path), "--set", "market.horizon=40"]
    code = local.main([*flags, "--steps", "12", "--eval-episodes", "4", "--settings", "learn"])
    assert code == 0
    out = capsys.readouterr().out
    run_dir = next(tmp_path.glob("*/*/2"))  # the default fold: the last of the 3 dates
    config = json.loads((run_dir / "config.json").read_text())
    market = config["run"]["market"]
    assert market["source"] == "replay" and market["data"] == str(two_dates.resolve())
    assert market["days"] == ["test/L2X/2024-08-08"] and market["val_days"] == ["test/L2X/2024-08-09"]
    assert market["eval_days"] == ["test/L2X/2024-08-10"] and config["driver"]["fold"] == 2
    assert market["usd_per_tick"] == pytest.approx(1e-4) and market["taker_fee_bps"] == 5.0
    assert market["order_size"] == 2 and market["position_limit"] == 10
    assert config["run"]["learner"]["reward_scale"] == pytest.approx(2 / (1e-4 * 10))
    assert (
        "market real days test/L2X/2024-08-08 (fold 2: tests on test/L2X/2024-08-10, validates on test/L2X/2024-08-09)"
        in out
    )
    details, last = out.strip().splitlines()[-2:]
    assert re.fullmatch(
        r"heldout_pnl_usd=(-?[\d.]+) flat_usd=0.00 imbalance_usd=(-?[\d.]+) quoting_usd=(-?[\d.]+) "
        r"hindsight_usd=(-?[\d.]+) held_out=true",
        details,
    ), details
    m = re.fullmatch(r"heldout_pnl_usd=(-?[\d.]+) best_baseline_usd=(-?[\d.]+) ci95_low_usd=(-?[\d.]+) "
                     r"ci95_high_usd=(-?[\d.]+)", last)  # fmt: skip
    assert m and float(m[3]) <= float(m[1]) - float(m[2]) <= float(m[4]), last
    # the main job scores its fold as the walk-forward protocol does: the checkpoint and the quoting rule picked on
    # the validation day (every checkpoint kept for it), the table, the record
    assert "walk-forward scoring of fold 2 (4 windows; the checkpoint picked on test/L2X/2024-08-09)" in out
    assert "Walk-forward, folds of days" in out
    assert re.search(r"\| 2 \| real \| test/L2X/2024-08-10 \| \S+-tick \([\d.]+\) \| 1 \|", out)
    assert config["driver"]["keep_checkpoints"] == 0
    days = "test/L2X/2024-08-08,test/L2X/2024-08-09,test/L2X/2024-08-10"
    data = f"--data {two_dates.resolve()} --days {days} --set market.horizon=40"
    assert f"benchmarks/bench_walkforward.py {data} --seeds 5" in out  # the next commands: the protocol's other folds
    assert f"-m foxhunt_ray.local {data} --fold 2 --time-limit-s 1800" in out
    doc = json.loads((run_dir / "walkforward.json").read_text())
    record = doc["folds"][0]
    assert doc["kind"] == "days" and record["test_days"] == ["test/L2X/2024-08-10"] and record["episodes"] == 4
    assert set(record["policies"]) == {"agent", "flat", "imbalance", "quoting", "hindsight"}
    best = max(("flat", "imbalance", "quoting"), key=lambda n: record["policies"][n]["pnl_usd_mean"])
    assert record["best_baseline"] == best and float(m[2]) == pytest.approx(
        record["policies"][best]["pnl_usd_mean"], abs=0.01
    )
    assert [float(m[3]), float(m[4])] == pytest.approx(record["versus"][best]["ci95_usd"], abs=0.01)
    # `evaluate` on the run plays the same test windows with the rule tuned on the same validation windows
    evaluated = evaluate_run(run_dir, checkpoint=record["checkpoints"][0]["step"], episodes=4, write=False)
    assert evaluated["market"] == "replay" and evaluated["replay"]["days"] == ["test/L2X/2024-08-10"]
    assert evaluated["quoting_rule"] == record["quoting"]["chosen"] and evaluated["held_out"] is True
    for name in ("agent", "quoting", "hindsight"):
        assert evaluated["policies"][name]["pnl_usd_mean"] == pytest.approx(record["policies"][name]["pnl_usd_mean"])
    assert not (run_dir / "evaluation.json").exists()  # that copy is the synthetic market's alone
    # fold 1 trains on the first date alone and has no validation day; a fold past the dates, --days without
    # --data, and a resume that tries to change the days are refused by name
    fold1 = [*SMOKE, "--data", str(two_dates), "--fold", "1", "--steps", "3", "--set", "market.horizon=40"]
    assert driver.main([*fold1, "--out", str(tmp_path)]) == 0
    one = json.loads(next(tmp_path.glob("*/*/1/config.json")).read_text())["run"]["market"]
    assert one["days"] == ["test/L2X/2024-08-08"] and one["eval_days"] == ["test/L2X/2024-08-09"]
    assert one["val_days"] == []
    capsys.readouterr()
    assert driver.main([*SMOKE, "--data", str(two_dates), "--fold", "3", "--out", str(tmp_path)]) == 1
    assert "--fold=3 must be in 1..2" in capsys.readouterr().err
    assert driver.main([*SMOKE, "--days", "L2X", "--out", str(tmp_path)]) == 1
    assert "--days, --blocks and --holdout pick days of a cache: they go with --data DIR" in capsys.readouterr().err
    assert driver.main(["--resume", str(run_dir), "--days", "L2X"]) == 1
    assert "drop ['--days']" in capsys.readouterr().err
    assert driver.main([*SMOKE, "--data", str(tmp_path / "nothing"), "--out", str(tmp_path)]) == 1
    assert "not a folder; make a cache with python -m lobsim_env.data ingest" in capsys.readouterr().err


def test_blocks_of_a_day_are_periods_of_their_own_for_the_folds_and_the_windows(two_dates, tmp_path):
    """--blocks 3 cuts each day into 3 blocks of equal time: the folds run over (date, block), a window never leaves
    its block, and the run's held-out block is the fold's."""
    flags = [*SMOKE, "--data", str(two_dates), "--days", "2024-08-09", "--blocks", "3", "--out", str(tmp_path)]
    assert driver.main([*flags, "--steps", "3", "--set", "market.horizon=20"]) == 0
    market = json.loads(next(tmp_path.glob("*/*/2/config.json")).read_text())["run"]["market"]
    assert market["blocks"] == 3 and market["eval_days"] == ["test/L2X/2024-08-09#2"]
    assert market["days"] == ["test/L2X/2024-08-09#0"] and market["val_days"] == ["test/L2X/2024-08-09#1"]
    cfg = replay_config(two_dates, ["2024-08-09"], horizon=20, blocks=3)
    m = ReplayMarket(cfg)
    ts = m.days[0].events["ts"]
    edges = [ts[0] + (ts[-1] - ts[0]) * j // 3 for j in range(4)]
    state = m.new_state(300)
    m.reset_rows(state, np.arange(300), np.random.default_rng(1).integers(0, 2**63, 300).astype(np.uint64))
    assert set(state.day.tolist()) == {0, 1, 2}
    for b in range(3):
        starts, ends = state.start[state.day == b], state.start[state.day == b] + 20 * cfg.events_per_step
        assert (ts[starts - 1] >= edges[b]).all() and (ts[ends] <= edges[b + 1]).all()
    with pytest.raises(DataError, match=r"names block 3, and market.blocks=3"):
        ReplayMarket(dataclasses.replace(cfg, days=("test/L2X/2024-08-09#3",)))


def test_the_hindsight_bound_is_above_every_baseline_and_demo_prints_the_yardsticks(two_dates, capsys):
    cfg = replay_config(two_dates, [], horizon=60)
    pnl = {p: evaluate_policy(cfg, p, 24, 0)["pnl_usd_mean"] for p in ("flat", "random", "imbalance", "hindsight")}
    assert pnl["hindsight"] > 0 and pnl["hindsight"] > max(pnl[p] for p in ("flat", "random", "imbalance")), pnl
    assert local.main(["--demo", "--data", str(two_dates), "--episodes", "4", "--set", "market.horizon=40"]) == 0
    out = capsys.readouterr().out
    assert "real days test/L2X/2024-08-08, test/L2X/2024-08-09, test/L2X/2024-08-10" in out
    assert [line.split()[0] for line in out.splitlines()[2:]] == ["flat", "random", "imbalance", "quoting", "hindsight"]


def test_the_quoting_rule_rests_on_both_sides_skews_its_inventory_and_is_tuned_on_the_validation_day(two_dates):
    """Quoting joins both best quotes while flat, stops quoting the side that would grow its inventory past `skew`
    orders (a fill of the quote in flight can add one more), flattens at the window's end; its passive orders fill.
    tune_quoting picks the grid entry with the best mean PnL on the day it is given."""
    validation, test = (replay_config(two_dates, [d], horizon=60) for d in ("2024-08-09", "2024-08-10"))
    for skew in (1, 3):
        env = LobVectorEnv(32, test)
        obs, _ = env.reset(seed=5)
        policy, rng, most = Quoting(skew=skew, flatten_at=0.1), np.random.default_rng(0), 0
        for _ in range(59):
            obs, _, _, _, info = env.step(policy(obs, env, rng))
            most = max(most, int(np.abs(info["position"]).max()))
        assert most <= (skew + 1) * test.order_size, (skew, most)
        assert (info["position"] == 0).all()  # flattened in the window's last tenth
    assert most > 2 * test.order_size  # a wider skew holds more
    result = run_episodes(test, Quoting(), 16, 0).metrics()
    assert result["fill_rate"] > 0.2 and result["passive_filled_mean"] > 0
    best, scores = tune_quoting(validation, 8, 3)
    assert set(scores) == {repr(q) for q in QUOTING_GRID} and scores[repr(best)] == max(scores.values())


@pytest.mark.skipif(not sample_zip("AMZN", 5).exists(), reason="no LOBSTER samples")
def test_a_cross_instrument_fold_never_trains_on_the_held_out_ticker(tmp_path):
    """--holdout GOOG with --days AAPL,AMZN: GOOG is the test, never a training day; with --blocks 13 --fold 12 the
    others' first eleven half hours train, GOOG's twelfth validates and its last tests."""
    lobster_source.ingest([sample_zip("AAPL", 1), sample_zip("AMZN", 5), sample_zip("GOOG", 10)], tmp_path)

    def market(*args) -> dict:
        sets, fold = driver.data_sets(str(tmp_path), *args)
        return {k.removeprefix("market."): json.loads(v) for k, v in (s.split("=", 1) for s in sets)} | {"fold": fold}

    whole = market("AAPL,AMZN", None, 1, "GOOG")
    assert whole["days"] == ["nasdaq/AAPL/2012-06-21", "nasdaq/AMZN/2012-06-21"] and whole["fold"] == 0
    assert whole["eval_days"] == ["nasdaq/GOOG/2012-06-21"]
    halves = market("AAPL,AMZN", 12, 13, "GOOG")
    assert halves["eval_days"] == ["nasdaq/GOOG/2012-06-21#12"] and len(halves["days"]) == 22
    assert halves["val_days"] == ["nasdaq/GOOG/2012-06-21#11"] and whole["val_days"] == []
    assert not [d for d in halves["days"] if "GOOG" in d or d.endswith(("#11", "#12"))]
    with pytest.raises(driver.UsageError, match="holds out every day picked"):
        market("GOOG", None, 1, "GOOG")


@pytest.mark.skipif(not sample_zip("AMZN", 5).exists(), reason="no LOBSTER samples")
def test_ingest_check_and_ls_on_the_lobster_samples(tmp_path, capsys):
    folder = sample_zip("AMZN", 5).parent
    assert data_main(["ingest", str(folder), "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert "nasdaq/GOOG/2012-06-21: 147,916 messages, L3 10 levels, written" in out
    assert "skipped LOBSTER_SampleFile_GOOG_2012-06-21_1.zip: GOOG 2012-06-21 is also in" in err
    m = re.search(r"^days=3 messages=422348 messages_per_s=(\d+)$", out, re.M)
    assert m, out
    assert data_main(["ingest", str(folder), "--out", str(tmp_path)]) == 0
    assert out.count("written") == 3 and capsys.readouterr().out.count("already in the cache (same files)") == 3
    assert data_main(["check", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "days=3 rows=422348 unexplained=0"
    assert data_main(["ls", str(tmp_path)]) == 0
    assert "nasdaq/AMZN/2012-06-21" in capsys.readouterr().out
    # a cached row changed: check names it and exits 1
    book = tmp_path / "nasdaq" / "AMZN" / "2012-06-21" / "book.npy"
    rows = np.load(book)
    rows[1000, 1] += 7
    np.save(book, rows)
    assert data_main(["check", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    # the changed row, and the next (the replay carries the file's row into the message after it)
    assert "row 1001: message" in out and out.strip().endswith("unexplained=2")
    assert data_main(["ingest", str(tmp_path / "none.zip"), "--out", str(tmp_path)]) == 2
    assert "none.zip: no such file or folder" in capsys.readouterr().err

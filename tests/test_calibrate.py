"""python -m lobsim_env.calibrate (docs/market.md, "Calibrating the synthetic market to real days"): the fit finds a
synthetic market's own rates again from its recorded flow, the config it writes is one foxhunt_ray.local reads, and a
bad input is named with its fix and writes nothing. No Ray, no training; each test takes about a second."""

from __future__ import annotations

import itertools
import json
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pytest

from foxhunt_ray import driver
from lobsim_env import calibrate
from lobsim_env.config import MarketConfig, SyntheticConfig
from lobsim_env.data import layout
from lobsim_env.data import lobster as lobster_source
from lobsim_env.data.layout import Manifest
from lobsim_env.lobster.samples import sample_zip

TRUE = SyntheticConfig(
    limit_rate=0.46, market_rate=0.07, cancel_rate=0.47, level_decay=0.6, levels=4, signal_strength=0.5, base_depth=4
)
SMALL_FIT = ["--sim-books", "128", "--sim-steps", "50"]  # 51,200 simulated events a round: enough for the tolerances
AMZN5 = sample_zip("AMZN", 5)


def synthetic_cache(root: Path, cfg: SyntheticConfig = TRUE, *, days: int = 64, steps: int = 50, seed: int = 1) -> Path:
    """`days` books of the synthetic market with `cfg` (an episode's first `steps` steps each), each recorded as an L3
    day of the cache (layout.py), dated one after the other from 2024-01-01."""
    rec = calibrate.synthetic_flow(MarketConfig(synthetic=cfg), n_books=days, n_steps=steps, seed=seed)
    starts = [*np.flatnonzero(rec.first).tolist(), len(rec.events)]
    for d in range(days):
        lo, hi = starts[d], starts[d + 1]
        m = Manifest(
            venue="synthetic", instrument="SYN", date=str(date(2024, 1, 1) + timedelta(days=d)), source="synthetic",
            depth="L3",
            levels=1, tick_size=0.25, lot_size=1.0, order_lots=1, n_events=hi - lo, first_ts=lo, last_ts=hi - 1,
        )  # fmt: skip
        layout.write_day(root, m, rec.events[lo:hi], rec.book[lo:hi])
    return root


@pytest.fixture(scope="module")
def synthetic_days(tmp_path_factory) -> Path:
    return synthetic_cache(tmp_path_factory.mktemp("cache"))


def test_the_fit_finds_the_synthetic_markets_own_flow_again(synthetic_days):
    """64 books of 400 events (about 22,000 that change a book). The shares a day shows are off the rates by 0.07-0.1 (a
    cancel attempt that finds nothing leaves no trace); the simulated correction must close that gap. Over 12 seeds of
    this data the fitted rates were off by 0.0035 (sd) and 0.009 at most, the decay by 0.005 and 0.011, the loose
    signal_strength by 0.036 +- 0.033: the tolerances are 4-5 of those sds, and a rate's a quarter of the naive gap. The
    true market opens at its own steady queue (base_depth=4), as a real day is: base_depth is read from the queue."""
    cal = calibrate.calibrate(synthetic_days, books=256, steps=50)
    s, shares = cal.fit.synthetic, cal.fit.measured["shares"]
    assert cal.tick_multiple == 1 and len(cal.days) == 64  # a large-tick market is measured in its own ticks
    assert shares["cancel"] < TRUE.cancel_rate - 0.05  # what a naive fit would take for the cancel rate
    for name in ("limit_rate", "market_rate", "cancel_rate"):
        assert getattr(s, name) == pytest.approx(getattr(TRUE, name), abs=0.02), name
    assert s.levels == TRUE.levels  # 0.6**d over 4 levels: 3 hold 91 %, 4 all of it (coverage 0.95)
    assert s.level_decay == pytest.approx(TRUE.level_decay, abs=0.03)
    assert s.max_limit_size == 1 and s.base_depth == TRUE.base_depth
    assert s.signal_strength == pytest.approx(TRUE.signal_strength, abs=0.15)
    MarketConfig(synthetic=s).validate()


@pytest.mark.parametrize("suffix", ["toml", "json"])
def test_the_written_config_is_what_foxhunt_ray_local_reads(synthetic_days, tmp_path, capsys, suffix):
    out = tmp_path / f"syn.{suffix}"
    assert calibrate.main([str(synthetic_days), "--days", "SYN", "--out", str(out), *SMALL_FIT]) == 0
    printed = capsys.readouterr().out.splitlines()
    last = dict(kv.split("=", 1) for kv in printed[-1].split())
    assert last["calibrated"] == str(out) and last["days"] == "64"
    assert sum(float(last[k]) for k in ("limit_rate", "market_rate", "cancel_rate")) == pytest.approx(1.0)
    assert any(line.startswith("limit share") for line in printed)  # the measured-vs-fitted table
    sidecar = json.loads((tmp_path / "syn.measured.json").read_text())
    assert len(sidecar["days"]) == 64 and sidecar["measured"]["shares"] and sidecar["at_fit"]["spread"]
    assert sidecar["fitted"]["limit_rate"] == float(last["limit_rate"])

    code = driver.main(["--preset", "smoke", "--serial", "--quiet", "--out", str(tmp_path / "runs"), "--print-config",
                        "--config", str(out)])  # fmt: skip
    assert code == 0
    market = json.loads(capsys.readouterr().out)["run"]["market"]
    assert market["source"] == "synthetic" and market["synthetic"] == {**market["synthetic"], **sidecar["fitted"]}
    MarketConfig(synthetic=SyntheticConfig(**market["synthetic"])).validate()
    assert not list(tmp_path.glob(".*.tmp"))


def test_bad_input_is_named_with_its_fix_and_writes_nothing(synthetic_days, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "x.toml"
    cases = [
        ([str(tmp_path / "empty"), "--out", str(out)], "a cache with no days"),
        ([str(tmp_path / "nope"), "--out", str(out)], "not a folder"),
        ([str(synthetic_days), "--days", "MSFT", "--out", str(out)], "--days 'MSFT' matches no day"),
        ([str(synthetic_days), "--out", str(tmp_path / "missing" / "x.toml")], "mkdir -p"),
        ([str(synthetic_days), "--out", str(tmp_path / "x.yaml")], "must end in .toml or .json"),
        ([str(synthetic_days), "--out", str(out), "--tick-multiple", "0"], "--tick-multiple=0 must be"),
        ([str(synthetic_days), "--out", str(out), "--name", "a b"], "--name='a b' must be"),
        ([str(synthetic_days), "--days", "2024-01-01#2", "--blocks", "2", "--out", str(out)],
         "names block '2', and --blocks=2 (blocks 0..1)"),
        ([str(synthetic_days), "--days", "2024-01-01#1", "--out", str(out)], "--blocks=1"),
        ([str(synthetic_days), "--blocks", "0", "--out", str(out)], "--blocks=0 must be an int in 1..10000"),
    ]
    for argv, said in cases:
        assert calibrate.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and said in err, (argv, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]  # nothing written, not even a temporary file


def test_two_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    target = tmp_path / "a.toml"
    target.write_text("old\n")
    real = calibrate.os.replace
    calls = []

    def fail_second(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError("disk full")
        real(src, dst)

    monkeypatch.setattr(calibrate.os, "replace", fail_second)
    with pytest.raises(OSError, match="disk full"):
        calibrate.write_together({tmp_path / "b.json": "{}\n", target: "new\n"})
    assert not list(tmp_path.glob(".*.tmp")) and target.read_text() == "old\n"


def test_the_level_decay_is_the_truncated_geometrics_maximum_likelihood():
    rng = np.random.default_rng(0)
    p = 0.7 ** np.arange(6)
    counts = np.bincount(rng.choice(6, 200_000, p=p / p.sum()), minlength=6)
    assert calibrate.decay_mle(counts) == pytest.approx(0.7, abs=0.01)
    assert calibrate.decay_mle(np.array([5, 5, 5])) == 1.0  # flat: the uniform, decay 1
    assert calibrate.choose_levels(np.array([50, 30, 15, 4, 1]), 0.95, 16) == (3, 0.95)


def test_l2_trades_explain_the_decrease_they_caused_not_a_cancel():
    """A trade of 3 lots at the best bid, then the depth update: the level falls by 5 (3 the trade's, 2 a cancel)."""
    ev = np.zeros(4, layout.EVENT_DTYPE)
    ev[0] = (0, layout.LEVEL, 1, 100, 10, 10, 0, -1)  # the opening snapshot
    ev[1] = (5, layout.TRADE, 1, 100, 3, 0, 0, -1)
    ev[2] = (6, layout.LEVEL, 1, 100, 5, -5, 0, -1)
    ev[3] = (7, layout.LEVEL, 1, 99, 4, 4, 0, -1)
    flow, lots = calibrate.flow_of_l2(ev)
    assert flow.tolist() == [calibrate.NONE, calibrate.MARKET, calibrate.CANCELLED, calibrate.LIMIT]
    assert lots.tolist() == [10, 3, 2, 4]


@pytest.mark.skipif(not AMZN5.exists(), reason=f"no LOBSTER sample at {AMZN5}")
def test_amzns_sample_day_calibrates_to_a_small_tick_market_with_a_few_percent_of_trades(tmp_path, capsys):
    lobster_source.ingest([AMZN5], tmp_path / "cache")
    out = tmp_path / "amzn.toml"
    assert calibrate.main([str(tmp_path / "cache"), "--out", str(out), *SMALL_FIT]) == 0
    sidecar = json.loads((tmp_path / "amzn.measured.json").read_text())
    fitted, measured = sidecar["fitted"], sidecar["measured"]
    assert sum(fitted[k] for k in ("limit_rate", "market_rate", "cancel_rate")) == pytest.approx(1.0)
    assert 0.01 < measured["shares"]["market"] < 0.1  # AMZN's trades: a few percent of its messages
    assert 0.4 < measured["shares"]["limit"] < 0.6 and 0.35 < measured["shares"]["cancel"] < 0.55
    assert sidecar["tick_multiple"] > 5  # a cent tick on a $220 share: the spread is many ticks wide
    assert sidecar["per_day"]["nasdaq/AMZN/2012-06-21"]["venue_spread"]["one_tick_share"] < 0.05
    assert 0 < measured["hidden_share_of_executions"] < 0.5
    assert any("first 5 level" in note for note in sidecar["notes"])
    MarketConfig(synthetic=SyntheticConfig(**fitted)).validate()  # the rest at their defaults


def test_a_days_blocks_partition_its_flow_and_a_name_key_k_reads_block_k_alone(synthetic_days):
    """--blocks N (the walk-forward's periods): block k's tally is its own events', and the blocks together are the
    day's (nothing read twice, nothing left out), so a fold's fit sees its training blocks and no other."""
    from lobsim_env.replay.market import block_range

    manifests, days, spans, keys = calibrate.periods(synthetic_days, ["2024-01-02"], 3)
    assert keys == [f"synthetic/SYN/2024-01-02#{b}" for b in range(3)]
    assert spans == [block_range(days[0], b, 3) for b in range(3)] and spans[0][0] == 0
    assert spans[-1][1] == manifests[0].n_events and all(a[1] == b[0] for a, b in itertools.pairwise(spans))
    whole, _ = calibrate.tally_day(days[0], 1)
    parts = [calibrate.tally_day(days[0], 1, span)[0] for span in spans]
    np.testing.assert_array_equal(sum(p.flow for p in parts), whole.flow)
    assert sum(p.limit_units.size for p in parts) == whole.limit_units.size
    _, _, one, named = calibrate.periods(synthetic_days, ["2024-01-02#1"], 3)
    assert one == [spans[1]] and named == [keys[1]]

"""benchmarks/ablation_table.py: the replayed kill verdicts and the table read the runs correctly."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from actors.kill_rules import KillConfig
from benchmarks import ablation_table


def _run(tmp: Path, preset: str, qpa, pnl, status="done", rule=None) -> dict:
    """A run folder with one step line per (qpa, pnl) pair, as the monitor writes them."""
    run_dir = tmp / preset / "sha" / "0"
    run_dir.mkdir(parents=True)
    kill = {"qpa_ema_min": -0.3, "qpa_ema_decay": 0.9, "qpa_warmup_steps": 5, "pnl_deficit_usd": 100.0}
    (run_dir / "config.json").write_text(json.dumps({"run": {"kill": kill}}))
    ema, lines = None, []
    for step, (q, p) in enumerate(zip(qpa, pnl, strict=True), start=1):
        ema = q if ema is None else 0.9 * ema + 0.1 * q
        lines.append(json.dumps({"step": step, "qpa": q, "qpa_ema": ema, "pnl_cum_usd": p, "l_c51": 3.0}))
    (run_dir / "diag.jsonl").write_text("".join(line + "\n" for line in lines))
    return {
        "preset": preset, "seed": 0, "run_dir": str(run_dir), "status": status, "rule": rule,
        "agent_pnl_usd": 10.0, "agent_pnl_sem": 1.0, "oracle_fraction": 0.5, "beats_every_baseline": True,
    }  # fmt: skip


def test_replay_finds_the_first_rule_and_its_step(tmp_path):
    """A qpa that turns to -1 at step 11 crosses -0.3 in the EMA a few steps later (exactly where the monitor's
    own rule would); a run that trails the baseline by more than the deficit is stopped by the pnl rule."""
    healthy = [0.9] * 30
    collapsed = [0.9] * 10 + [-1.0] * 20
    base = _run(tmp_path, "plan_a_v2", healthy, [10.0 * s for s in range(30)])
    bad_qpa = _run(tmp_path, "phase3_1", collapsed, [10.0 * s for s in range(30)])
    behind = _run(tmp_path, "phase2_v2", healthy, [0.0] * 30)
    learning = tmp_path / "learning.json"
    learning.write_text(json.dumps({"runs": [base, bad_qpa, behind]}))
    out, curves = tmp_path / "rows.json", tmp_path / "curves.csv"
    argv = [str(learning), "--steps", "5,20,40", "--json", str(out), "--curves", str(curves), "--every", "10"]
    assert ablation_table.main(argv) == 0
    lines = curves.read_text().splitlines()
    assert lines[0] == "preset,seed,step,qpa,qpa_ema,pnl_cum_usd,l_c51,l_iqn"
    assert [ln.split(",")[2] for ln in lines[1:5]] == ["1", "10", "20", "30"]  # first line of each 10 updates
    rows = {r["preset"]: r for r in json.loads(out.read_text())}

    assert rows["plan_a_v2"]["replayed"] is None  # the baseline is not replayed against itself
    ema, abs_diff, step = 0.9, 0.0, 10  # the rule's bound: qpa_ema + 2 x qpa_noise (actors/kill_rules.py)
    while step <= 10 or ema + 2 * math.sqrt(math.pi) / 2 * abs_diff >= -0.3:
        jump = 1.9 if step == 10 else 0.0
        ema, abs_diff, step = 0.9 * ema + 0.1 * -1.0, 0.9 * abs_diff + 0.1 * jump, step + 1
    assert rows["phase3_1"]["replayed"]["rule"] == "qpa_collapse"
    assert rows["phase3_1"]["replayed"]["step"] == step
    assert rows["phase3_1"]["qpa_ema_min"]["step"] == 30
    # pnl rule: the baseline leads by 10 * step, > 100 USD first at step 12 (baseline 110 at step 12: 10*(12-1))
    assert rows["phase2_v2"]["replayed"]["rule"] == "pnl_deficit"
    assert rows["phase2_v2"]["replayed"]["step"] == 12
    # values at steps: the last line at or before the step, None beyond the run's end
    assert rows["plan_a_v2"]["pnl_cum_usd"] == {"5": 40.0, "20": 190.0, "40": None}
    assert rows["phase3_1"]["qpa_ema"]["40"] is None


def test_replay_uses_the_monitor_rules_unchanged():
    """Without a baseline only the qpa and non-finite rules can fire (what bench_learning armed live)."""
    recs = [{"step": s, "qpa": -0.9, "pnl_cum_usd": -1e9, "l_c51": 1.0} for s in range(1, 300)]
    got = ablation_table.replay(recs, KillConfig(), None)
    assert got["rule"] == "qpa_collapse" and got["step"] == 201  # the first step past the 200-step warm-up
    fine = [{"step": s, "qpa": 0.9, "pnl_cum_usd": -1e9, "l_c51": 1.0} for s in range(1, 300)]
    fine[250]["l_c51"] = float("nan")
    assert ablation_table.replay(fine, KillConfig(), None) == {
        "rule": "non_finite", "step": 251, "message": "non-finite ['l_c51'] at step 251 (nan_abort_step=0.0)"
    }  # fmt: skip


def test_a_run_that_never_trained_is_named(tmp_path):
    run = _run(tmp_path, "phase3_2", [], [])
    with pytest.raises(SystemExit, match="no step lines"):
        ablation_table.summarize(run, None, (5,))

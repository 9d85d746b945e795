"""actors.monitor + actors.diag_file + actors.kill_rules: one line per step, resume and tail repair, each kill rule
fired by a crafted diag sequence, summary.json, and Ray gauges that stay out of the way without Ray."""

from __future__ import annotations

import json
import math
import re

import pytest

from actors.diag_file import DiagFileError, load_baseline, read_diag, step_records
from actors.kill_rules import EXIT_KILLED, EXIT_OK, KillConfig, KillRules
from actors.monitor import GAUGE_NAMES, Monitor, RayGauges

STAMP = {"code_sha": "abc123", "preset": "smoke", "fold": 0}
KILL = KillConfig(qpa_warmup_steps=3, qpa_ema_decay=0.5)


def healthy(step: int, **over) -> dict:
    d = {
        "step": float(step),
        "qpa": 0.2,
        "l_c51": 2.0,
        "l_iqn": 0.5,
        "l_pi": 0.1,
        "l_v": 1.0,
        "l_distill": 0.3,
        "l_dueling": 0.4,
        "nan_abort_step": 0.0,
        "env_steps": 100 * step,
        "pnl_cum_usd": 1000.0 * step,
    }
    return {**d, **over}


def lines(run_dir) -> list[dict]:
    """Every line parsed strictly: a NaN/Infinity token would make json.loads fail here."""

    def refuse(token):
        raise AssertionError(f"non-JSON token {token} in diag.jsonl")

    text = (run_dir / "diag.jsonl").read_text()
    assert text.endswith("\n")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def summary(run_dir) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_one_complete_line_per_step(tmp_path):
    with Monitor(tmp_path, KILL, stamp=STAMP) as m:
        for s in range(1, 6):
            assert m.record(healthy(s, qpa=0.1 * s)) is None
    recs = lines(tmp_path)
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5]
    assert all(r["code_sha"] == "abc123" and r["preset"] == "smoke" and "time" in r for r in recs)
    assert recs[0]["qpa_ema"] == pytest.approx(0.1)
    assert recs[1]["qpa_ema"] == pytest.approx(0.5 * 0.1 + 0.5 * 0.2)  # the EMA, and the raw qpa beside it
    assert recs[1]["qpa"] == pytest.approx(0.2)
    assert recs[1]["env_steps_per_s"] > 0 and recs[1]["updates_per_s"] > 0


def test_step_must_advance_and_values_must_be_json(tmp_path):
    m = Monitor(tmp_path, KILL)
    m.record(healthy(1))
    with pytest.raises(ValueError, match="diag step 1 does not follow the last recorded step 1"):
        m.record(healthy(1))
    with pytest.raises(ValueError, match="diag step 3 does not follow the last recorded step 1"):
        m.record(healthy(3))  # a gap
    with pytest.raises(ValueError, match=r"diag\['step'\]=2.5 must be a whole number"):
        m.record({**healthy(2), "step": 2.5})
    with pytest.raises(ValueError, match=r"diag\['bad'\]=.*object is not JSON"):
        m.record(healthy(2, bad=object()))
    m.record(healthy(2))
    assert [r["step"] for r in lines(tmp_path)] == [1, 2]  # the refused records left no trace


def test_resume_continues_without_gaps_and_repairs_a_torn_tail(tmp_path):
    qpas = [0.3, -0.1, 0.25, 0.05, -0.2, 0.15, 0.0, 0.1]
    ref_dir = tmp_path / "uninterrupted"
    with Monitor(ref_dir, KILL) as ref:
        for s, q in enumerate(qpas, 1):
            ref.record(healthy(s, qpa=q))
    run = tmp_path / "run"
    with Monitor(run, KILL) as m:
        for s, q in enumerate(qpas[:5], 1):
            m.record(healthy(s, qpa=q))
    with open(run / "diag.jsonl", "ab") as f:  # the crash: half of step 6's line
        f.write(b'{"step":6,"time":17.0,"qpa":0.1')
    assert [r["step"] for r in read_diag(run / "diag.jsonl")] == [1, 2, 3, 4, 5]  # readers skip the torn tail
    m = Monitor(run, KILL)
    assert m.repaired_bytes == len(b'{"step":6,"time":17.0,"qpa":0.1') and m.last_step == 5
    for s, q in enumerate(qpas[5:], 6):
        m.record(healthy(s, qpa=q))
    m.close()
    got, want = lines(run), lines(ref_dir)
    assert [r["step"] for r in got] == list(range(1, 9))
    assert [r["qpa_ema"] for r in got] == [r["qpa_ema"] for r in want]  # EMA restored exactly


def test_resume_at_a_checkpoint_drops_the_lines_after_it(tmp_path):
    qpas = [0.3, -0.1, 0.25, 0.05, -0.2, 0.15, 0.0, 0.1]
    ref_dir = tmp_path / "uninterrupted"
    with Monitor(ref_dir, KILL) as ref:
        for s, q in enumerate(qpas, 1):
            ref.record(healthy(s, qpa=q))
    run = tmp_path / "run"
    with Monitor(run, KILL) as m:
        for s, q in enumerate(qpas[:6], 1):  # checkpoint at step 4, crash after step 6
            m.record(healthy(s, qpa=q))
    with pytest.raises(DiagFileError, match=r"ends at step 6, before the checkpoint's step 7"):
        Monitor(run, KILL, resume_at=7)
    with pytest.raises(ValueError, match=r"resume_at=-1 must be an int >= 0"):
        Monitor(run, KILL, resume_at=-1)
    with pytest.raises(DiagFileError, match="does not exist but the run resumes at step 4"):
        Monitor(tmp_path / "elsewhere", KILL, resume_at=4)
    m = Monitor(run, KILL, resume_at=4)
    assert m.dropped_lines == 2 and m.last_step == 4
    for s, q in enumerate(qpas[4:], 5):  # the learner, restored at step 4, produces steps 5.. again
        m.record(healthy(s, qpa=q))
    m.close()
    got, want = lines(run), lines(ref_dir)
    assert [r["step"] for r in got] == list(range(1, 9))
    assert [r["qpa_ema"] for r in got] == [r["qpa_ema"] for r in want]


def test_bad_line_in_the_middle_is_named(tmp_path):
    with Monitor(tmp_path, KILL) as m:
        m.record(healthy(1))
        m.record(healthy(2))
    text = (tmp_path / "diag.jsonl").read_text().splitlines()
    (tmp_path / "diag.jsonl").write_text(text[0] + "\n{oops\n" + text[1] + "\n")
    with pytest.raises(DiagFileError, match=r"diag.jsonl:2: not valid JSON.*fix or delete that line"):
        Monitor(tmp_path, KILL)
    with pytest.raises(DiagFileError, match=r"diag.jsonl:2: not valid JSON"):
        read_diag(tmp_path / "diag.jsonl")
    (tmp_path / "diag.jsonl").write_text('{"step":1}\n[1, 2]\n')
    with pytest.raises(DiagFileError, match=r"diag.jsonl:2: a diag line must be a JSON object"):
        load_baseline(tmp_path)
    with pytest.raises(DiagFileError, match="cannot read diag file"):
        load_baseline(tmp_path / "missing")


def assert_killed(run_dir, m: Monitor, decision, rule: str, step: int) -> dict:
    assert decision is not None and decision.rule == rule and decision.step == step
    assert m.exit_code == EXIT_KILLED == decision.exit_code
    recs = lines(run_dir)
    final = recs[-1]
    assert final["event"] == "kill" and final["rule"] == rule and final["step"] == step
    assert [r["step"] for r in step_records(recs)][-1] == step  # the step line is written before the kill line
    s = summary(run_dir)
    assert s["status"] == "killed" and s["rule"] == rule and s["step"] == step and s["exit_code"] == 3
    with pytest.raises(RuntimeError, match="after the run ended"):
        m.record(healthy(step + 1))
    assert m.finish("done") == EXIT_KILLED and summary(run_dir)["status"] == "killed"
    return final


def test_nan_abort_step_kills(tmp_path):
    m = Monitor(tmp_path, KILL, stamp=STAMP)
    assert m.record(healthy(1)) is None
    d = m.record(healthy(2, nan_abort_step=2.0))
    final = assert_killed(tmp_path, m, d, "non_finite", 2)
    assert final["values"]["nan_abort_step"] == 2.0
    assert summary(tmp_path)["code_sha"] == "abc123"


def test_nan_qpa_is_not_hidden_by_the_ema(tmp_path):
    m = Monitor(tmp_path, KILL)
    m.record(healthy(1))
    d = m.record(healthy(2, qpa=math.nan))  # before the warm-up, and the EMA alone would read NaN < x as False
    final = assert_killed(tmp_path, m, d, "non_finite", 2)
    step_line = lines(tmp_path)[-2]
    assert step_line["qpa"] == "nan" and step_line["qpa_ema"] == "nan"  # recorded, as valid JSON
    assert final["values"]["qpa"] == "nan"
    assert math.isnan(read_diag(tmp_path / "diag.jsonl")[-2]["qpa"])  # and read back as a float


def test_inf_loss_kills(tmp_path):
    m = Monitor(tmp_path, KILL)
    d = m.record(healthy(1, l_iqn=math.inf))
    assert_killed(tmp_path, m, d, "non_finite", 1)
    assert lines(tmp_path)[0]["l_iqn"] == "inf"


def test_qpa_ema_collapse_kills_after_warmup_only(tmp_path):
    m = Monitor(tmp_path, KILL)  # warm-up 3 steps, decay 0.5
    for s in (1, 2, 3):
        assert m.record(healthy(s, qpa=-0.95)) is None  # collapsed already, but inside the warm-up
    d = m.record(healthy(4, qpa=-0.95))
    final = assert_killed(tmp_path, m, d, "qpa_collapse", 4)
    assert final["values"]["qpa_ema"] == pytest.approx(-0.95) and final["values"]["threshold"] == -0.3


def test_qpa_ema_smooths_a_single_dip(tmp_path):
    m = Monitor(tmp_path, KillConfig(qpa_warmup_steps=0, qpa_ema_decay=0.9))
    for s in range(1, 4):
        assert m.record(healthy(s, qpa=0.3)) is None
    assert m.record(healthy(4, qpa=-0.9)) is None  # ema 0.9 * 0.3 + 0.1 * -0.9 = 0.18
    assert lines(tmp_path)[-1]["qpa_ema"] == pytest.approx(0.18)


def test_dueling_explosion_against_own_running_mean(tmp_path):
    m = Monitor(tmp_path, KILL)
    # before C51 trains (l_c51 = 0) there is no reference: no kill whatever l_dueling reads
    assert m.record(healthy(1, l_c51=0.0, l_dueling=5.0)) is None
    assert m.record(healthy(2, l_c51=2.0, l_dueling=150.0)) is None  # 150 < 100 x 2
    assert m.record(healthy(3, l_c51=1e-4, l_dueling=95.0)) is None  # one tiny l_c51 does not sink the mean
    d = m.record(healthy(4, l_c51=2.0, l_dueling=250.0))  # mean (2 + 1e-4 + 2) / 3 = 1.33: limit 133
    final = assert_killed(tmp_path, m, d, "dueling_explosion", 4)
    assert final["values"]["reference"] == pytest.approx((4 + 1e-4) / 3)
    assert final["values"]["reference_source"] == "own running mean of l_c51"


def write_baseline(run_dir, n: int, **values) -> None:
    with Monitor(run_dir, KillConfig()) as m:
        for s in range(1, n + 1):
            m.record(healthy(s, **values))


def test_dueling_explosion_against_baseline_file(tmp_path):
    write_baseline(tmp_path / "base", 4, l_c51=0.01)
    m = Monitor(tmp_path / "run", KILL, baseline_diag=tmp_path / "base")
    assert m.record(healthy(1, l_c51=2.0, l_dueling=0.9)) is None  # 0.9 < 100 x 0.01 (the run's own would be 200)
    d = m.record(healthy(2, l_c51=2.0, l_dueling=1.5))
    final = assert_killed(tmp_path / "run", m, d, "dueling_explosion", 2)
    assert final["values"]["reference"] == pytest.approx(0.01)
    assert final["values"]["reference_source"] == "baseline l_c51 at this step"


def test_pnl_deficit_against_baseline_file(tmp_path):
    write_baseline(tmp_path / "base", 3, pnl_cum_usd=6e6)
    (tmp_path / "base" / "diag.jsonl").open("ab").write(b'{"step":4,"pnl')  # a crashed baseline still reads
    m = Monitor(tmp_path / "run", KILL, baseline_diag=tmp_path / "base" / "diag.jsonl")
    assert m.record(healthy(1, pnl_cum_usd=1.5e6)) is None  # 4.5M behind: within $5M
    d = m.record(healthy(2, pnl_cum_usd=0.5e6))
    final = assert_killed(tmp_path / "run", m, d, "pnl_deficit", 2)
    assert final["values"] == {"pnl_cum_usd": 0.5e6, "baseline_pnl_cum_usd": 6e6, "deficit_max_usd": 5e6}
    m2 = Monitor(tmp_path / "beyond", KILL, baseline_diag=tmp_path / "base")
    for s in range(1, 4):
        m2.record(healthy(s, pnl_cum_usd=6e6))
    assert m2.record(healthy(4, pnl_cum_usd=-1e9)) is None  # the baseline has no step 4: nothing to compare


def test_finish_writes_summary(tmp_path):
    m = Monitor(tmp_path, KILL, stamp=STAMP)
    m.record(healthy(1))
    m.record(healthy(2))
    with pytest.raises(ValueError, match=r"finish\(status='weird'\)"):
        m.finish("weird")
    assert m.finish("done") == EXIT_OK
    s = summary(tmp_path)
    assert s["status"] == "done" and s["exit_code"] == 0 and s["rule"] is None and s["step"] == 2
    assert s["last"]["step"] == 2 and s["preset"] == "smoke"
    assert not (tmp_path / "summary.json.tmp").exists()


def test_kill_config_errors():
    assert KillConfig().errors() == []
    errs = KillConfig(qpa_ema_min=-2.0, qpa_ema_decay=1.0, qpa_warmup_steps=-1, pnl_deficit_usd=math.nan).errors()
    assert errs == [
        "kill.qpa_ema_min=-2.0 must be in [-1, 1] (qpa is a correlation)",
        "kill.qpa_ema_decay=1.0 must be in [0, 1)",
        "kill.qpa_warmup_steps=-1 must be an int >= 0",
        "kill.pnl_deficit_usd=nan must be a finite number",
    ]
    with pytest.raises(ValueError, match="invalid kill config"):
        KillRules(KillConfig(dueling_ratio_max=0.0))


def test_gauges_without_ray_and_their_names(tmp_path):
    assert not RayGauges.active()
    m = Monitor(tmp_path, KILL)
    m.record(healthy(1))  # no Ray initialised: the gauges stay unbuilt and nothing fails
    assert m.gauges._gauges is None
    assert GAUGE_NAMES == (
        "foxhunt_qpa",
        "foxhunt_qpa_ema",
        "foxhunt_pnl_cum_usd",
        "foxhunt_l_c51",
        "foxhunt_l_iqn",
        "foxhunt_l_pi",
        "foxhunt_l_v",
        "foxhunt_l_distill",
        "foxhunt_l_dueling",
        "foxhunt_env_steps_per_s",
        "foxhunt_updates_per_s",
    )
    assert all(re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", n) for n in GAUGE_NAMES)  # Prometheus metric names


def test_the_grafana_dashboard_graphs_every_gauge_by_run():
    """foxhunt_ray/grafana_dashboard.json (docs/running.md): one panel per gauge, its Prometheus name
    (ray_foxhunt_*, as Ray exports a ray.util.metrics Gauge), selected by the run variable."""
    import json
    from pathlib import Path

    dash = json.loads((Path(__file__).resolve().parents[1] / "foxhunt_ray" / "grafana_dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert sorted(exprs) == sorted(f'ray_{name}{{run=~"$run"}}' for name in GAUGE_NAMES)
    (run,) = [v for v in dash["templating"]["list"] if v["name"] == "run"]
    assert run["definition"] == "label_values(ray_foxhunt_qpa, run)" and run["includeAll"]

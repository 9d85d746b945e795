"""What a new user sees from a fresh clone: the progress bar of a time-budgeted run and the throughput plot of a
starved run beside a healthy one."""

from __future__ import annotations

import io
import re
import types
from pathlib import Path

import numpy as np
import pytest

from actors.kill_rules import KillConfig
from actors.monitor import Monitor
from foxhunt_ray import report
from foxhunt_ray.loops import Progress
from foxhunt_ray.plan import DriverConfig

# ------------------------------------------------------------------------------------------------- the progress bar


def progress_line(steps: int, time_limit_s: float, elapsed_s: float, step: int) -> str:
    plan = types.SimpleNamespace(quiet=False, resume_step=0)
    plan.driver = DriverConfig(steps=steps, time_limit_s=time_limit_s)
    log = io.StringIO()
    bar = Progress(plan, every_s=0.0, stream=log)
    bar.start -= elapsed_s
    bar.show({"step": step, "env_steps": 64 * step, "qpa_ema": 0.5, "pnl_cum_usd": -1.0})
    return log.getvalue()


def test_progress_bar_counts_a_time_budget_in_seconds_and_a_step_budget_in_updates():
    """The bare `python -m foxhunt_ray.local` runs 240 s with an update cap of 1,000,000 that it never reaches: its
    bar reads '50% of 240 s  update 2052', not 'update 2052/1000000'. With --steps N and no budget the bar counts
    updates; with both, whichever ends the run first."""
    main_job = progress_line(1_000_000, 240.0, 120.0, 2052)
    assert "[##########          ]  50% of 240 s  update 2052  env steps" in main_job, main_job
    assert "1000000" not in main_job and "ETA 2m00s" in main_job
    steps_only = progress_line(5000, 0.0, 10.0, 2500)
    assert " 50% update 2500/5000  env steps" in steps_only and "ETA 10s" in steps_only, steps_only
    assert " 50% update 500/1000  env steps" in progress_line(1000, 240.0, 24.0, 500)  # the steps end it first
    assert " 75% of 240 s  update 100  env steps" in progress_line(1000, 240.0, 180.0, 100)  # the time does


# ---------------------------------------------------------------------------------------------- the throughput plot


def record_run(folder: Path, updates_per_s: float, lines_per_answer: int, seconds: float, monkeypatch) -> Path:
    """A run folder whose diag.jsonl the real Monitor writes, on a fake clock: the learner trains `updates_per_s`,
    and its answers (one every lines_per_answer / updates_per_s seconds) each carry `lines_per_answer` step lines,
    which the monitor writes 50 microseconds apart (as it writes the lines of one answer in a loop)."""
    clock = types.SimpleNamespace(now=1_800_000_000.0)
    monkeypatch.setattr("actors.monitor.time", types.SimpleNamespace(time=lambda: clock.now))
    monitor = Monitor(folder, KillConfig(), stamp={"preset": "phase4_3"})
    step, gap = 0, lines_per_answer / updates_per_s
    while clock.now < 1_800_000_000.0 + seconds:
        clock.now += gap - 50e-6 * (lines_per_answer - 1)
        for k in range(lines_per_answer):
            clock.now += 50e-6 * (k > 0)
            step += 1
            monitor.record({"step": step, "qpa": 0.5, "l_c51": 1.0, "env_steps": 1024 * step, "pnl_cum_usd": 0.0})
    monitor.close()
    monkeypatch.undo()
    return folder


def test_throughput_plot_draws_a_starved_run_below_a_healthy_one(tmp_path, monkeypatch):
    """A healthy run (28.9 updates/s, one line per learner answer) and a starved one (9.2 updates/s, its payloads
    arriving in clumps: four lines an answer). The plot drew the trailing mean of the lines' own updates_per_s,
    each over the time since the line before: the starved run's lines of one answer are microseconds apart, so it
    plotted at thousands a second, far above the healthy run. Each line is now the count's growth over a window of
    wall time (and the legend the run's own rate), so the healthy run is drawn above, both at their true rates."""
    healthy = record_run(tmp_path / "healthy" / "0", 28.9, 1, 120.0, monkeypatch)
    starved = record_run(tmp_path / "starved" / "0", 9.2, 4, 120.0, monkeypatch)
    runs = [report.load_run(healthy), report.load_run(starved)]
    runs[0].label, runs[1].label = "healthy", "starved"
    per_line = [float(np.nanmean(r.columns["updates_per_s"])) for r in runs]
    assert per_line[1] > 50 * per_line[0]  # what the old plot averaged: the starved run way on top
    fig = report.plot_throughput(runs)
    for key, per_update in (("updates_per_s", 1), ("env_steps_per_s", 1024)):
        drawn = {}
        (panel,) = [ax for ax in fig.axes if ax.get_title().startswith(key)]
        labels = {}
        for line in panel.lines:
            name = line.get_label().split(" ")[0]
            if name in ("healthy", "starved"):
                drawn[name] = float(np.nanmedian(np.asarray(line.get_ydata(), float)))
                labels[name] = line.get_label()
        assert drawn["healthy"] > 2.5 * drawn["starved"], (key, drawn)
        for name, true in (("healthy", 28.9 * per_update), ("starved", 9.2 * per_update)):
            assert drawn[name] == pytest.approx(true, rel=0.05), (key, name)
            overall = re.search(r"\(([\d,.]+)/s over the run\)", labels[name])
            assert overall and float(overall[1].replace(",", "")) == pytest.approx(true, rel=0.01), labels[name]
    assert report.overall_rate(runs[1], "updates_per_s") == pytest.approx(9.2, rel=0.01)

"""What a new user sees from a fresh clone: the progress bar of a time-budgeted run."""

from __future__ import annotations

import io
import types

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

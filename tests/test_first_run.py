"""What a new user sees from a fresh clone: the progress bar of a time-budgeted run, the throughput plot of a
starved run beside a healthy one, a CartPole run's report and next commands, a resume that would train nothing,
`evaluate` handed OUT/latest that points at a run of another env. The log of a Ray run (no error-level line, no
token warning) is tests/test_network.py's run."""

from __future__ import annotations

import io
import json
import re
import types
from pathlib import Path

import numpy as np
import pytest

from actors.diag_file import read_diag, step_records
from actors.kill_rules import EXIT_KILLED, EXIT_OK, KillConfig
from actors.monitor import Monitor
from foxhunt_ray import driver, local, report
from foxhunt_ray.loops import Progress
from foxhunt_ray.plan import DriverConfig
from lobsim_env import ENV_ID, MarketConfig

ROOT = Path(__file__).resolve().parents[1]
CARTPOLE = [
    "--env-id", "CartPole-v1", "--preset", "smoke", "--serial", "--rollout-workers", "2", "--envs-per-worker", "8",
    "--set", "rollout.steps_per_sample=32", "--set", "learner.reward_scale=0.1", "--set", "learner.lr=2e-3",
]  # fmt: skip
"""The README's CartPole command, shortened by its --steps."""


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
    """`python -m foxhunt_ray.local --time-limit-s 240` runs 240 s with an update cap of 1,000,000 that it never
    reaches: its bar reads '50% of 240 s  update 2052', not 'update 2052/1000000'. With --steps N and no budget the
    bar counts updates; with both (the bare command's 6,000 updates and 900-s cap), whichever ends the run first."""
    main_job = progress_line(1_000_000, 240.0, 120.0, 2052)
    assert "[##########          ]  50% of 240 s  update 2052  env steps" in main_job, main_job
    assert "1000000" not in main_job and "ETA 2m00s" in main_job
    steps_only = progress_line(5000, 0.0, 10.0, 2500)
    assert " 50% update 2500/5000  env steps" in steps_only and "ETA 10s" in steps_only, steps_only
    assert " 50% update 500/1000  env steps" in progress_line(1000, 240.0, 24.0, 500)  # the steps end it first
    assert " 75% of 240 s  update 100  env steps" in progress_line(1000, 240.0, 180.0, 100)  # the time does


def test_a_run_cut_short_by_its_time_cap_says_it_is_undertrained(tmp_path, capsys):
    """The bare command's budget is 6,000 updates, 900 s of training only a cap: a busy machine that reaches the
    cap first has an agent that trained too little, and the run says so plainly, with the resume that trains it to
    its budget. A run that made its updates, or whose budget was the time asked for, says nothing of it."""
    (tmp_path / "summary.json").write_text(json.dumps({"step": 2144, "status": "done"}))
    plan = types.SimpleNamespace(driver=DriverConfig(steps=6_000, time_limit_s=900.0), run_dir=tmp_path)
    line = local.undertrained(plan)
    assert line.startswith("warning: undertrained: the run reached its 900-s cap at update 2,144 of its 6,000")
    assert f"foxhunt_ray.local --resume {tmp_path} --steps 6000" in line
    local._say_undertrained(line)
    assert line in capsys.readouterr().err
    assert local.LOCAL_DEFAULTS.steps == 6_000 and local.LOCAL_DEFAULTS.time_limit_s == 900.0
    (tmp_path / "summary.json").write_text(json.dumps({"step": 6000, "status": "done"}))
    assert local.undertrained(plan) is None  # it made its updates
    (tmp_path / "summary.json").write_text(json.dumps({"step": 2144, "status": "stopped"}))
    assert local.undertrained(plan) is None  # Ctrl-C or ray job stop: a stop asked for, not the cap
    (tmp_path / "summary.json").write_text(json.dumps({"step": 2144, "status": "done"}))
    plan.driver = DriverConfig(steps=1_000_000, time_limit_s=240.0)  # --time-limit-s 240 alone: time was the budget
    assert local.undertrained(plan) is None
    plan.driver = DriverConfig(steps=6_000, time_limit_s=0.0)  # --steps alone: no cap
    assert local.undertrained(plan) is None


def test_the_bare_commands_budget_is_updates_and_a_time_limit_alone_is_a_budget_of_time(tmp_path):
    """What the flags resolve to under local's defaults: none (6,000 updates, 900-s cap), --time-limit-s alone
    (that many seconds, updates unbounded), --steps alone (those updates, no cap)."""

    def budget(*flags: str) -> tuple[int, float]:
        args = driver.parse_args(["--preset", "smoke", "--out", str(tmp_path), *flags], "t", local.LOCAL_DEFAULTS)
        args.defaults = local.LOCAL_DEFAULTS
        d = driver.resolve(args).driver
        return d.steps, d.time_limit_s

    assert budget() == (6_000, 900.0)
    assert budget("--time-limit-s", "60") == (1_000_000, 60.0)
    assert budget("--steps", "300") == (300, 0.0)
    assert budget("--steps", "300", "--time-limit-s", "60") == (300, 60.0)


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


# ------------------------------------------------------------------------ another env: its report, its next commands


def test_a_cartpole_run_gets_a_return_plot_its_own_hints_and_evaluate_says_where_latest_points(tmp_path, capsys):
    """A run of CartPole: its next commands name its own folder and none is about the market (no held-out
    evaluation, oracle or phase4_3); its report plots and tables episode_return_mean; and `evaluate OUT/latest`,
    OUT/latest now pointing at it, says so and names the newest market run instead."""
    out = tmp_path / "runs"
    assert local.main(["--preset", "smoke", "--serial", "--steps", "3", "--quiet", "--no-eval", "--out", str(out)]) == 0
    (market_run,) = out.glob("*/smoke-LOB-v0-*/0")
    capsys.readouterr()
    assert local.main([*CARTPOLE, "--steps", "40", "--quiet", "--out", str(out)]) == 0
    stdout = capsys.readouterr().out
    (run,) = out.glob("*/smoke-CartPole-v1-*/0")
    assert "no held-out evaluation: foxhunt_ray.evaluate plays the market only" in stdout
    hints = stdout[stdout.index("next:") :].splitlines()[1:]
    assert len(hints) == 3 and all(str(run) in h for h in hints), hints
    assert not any(word in h for h in hints for word in ("evaluate", "oracle", "phase4_3", "latest", "cluster"))
    assert re.search(rf"-m foxhunt_ray\.report {re.escape(str(run))}$", hints[0]), hints[0]
    assert hints[1].endswith(f"-m foxhunt_ray.local --resume {run} --steps 80"), hints[1]
    again = hints[2].split("-m foxhunt_ray.local ", 1)[1].split()
    assert again[:4] == ["--config", f"{run}/config.json", "--seed", "1"], again
    assert local.main([*again, "--quiet", "--no-eval"]) == 0  # the command runs as printed: the next seed
    (seed1,) = out.glob("*/smoke-CartPole-v1-s1-*/0")
    seed1_config = json.loads((seed1 / "config.json").read_text())
    assert seed1_config["run"]["env_id"] == "CartPole-v1" and seed1_config["run"]["learner"]["lr"] == 2e-3
    assert seed1_config["driver"]["steps"] == 40 and seed1_config["driver"]["rollout_workers"] == 2

    capsys.readouterr()
    assert report.main([str(run), "--out", str(tmp_path / "report")]) == 0
    stdout = capsys.readouterr().out
    assert f"wrote {tmp_path / 'report' / 'episode_return_mean.png'}" in stdout
    assert "trained on CartPole-v1" in stdout
    table = stdout[stdout.index("| run |") :]
    assert "episode_return_mean@40" in table and "pnl_cum_usd" not in table
    loaded = [report.load_run(run)]
    report.label_runs(loaded)
    (ax,) = report.plot_returns(loaded).axes
    lines = step_records(read_diag(run / "diag.jsonl"))
    want = [(r["step"], r["episode_return_mean"]) for r in lines if "episode_return_mean" in r]
    assert list(zip(ax.lines[0].get_xdata(), ax.lines[0].get_ydata(), strict=True)) == want

    assert (out / "latest").resolve() == seed1.resolve()
    from foxhunt_ray import evaluate

    assert evaluate.main([str(out / "latest"), "--episodes", "2"]) == 1
    err = capsys.readouterr().err
    assert f"{out / 'latest'} points at the newest run, {seed1}, which trained on env_id='CartPole-v1'" in err, err
    assert f"the newest one under {out}, {market_run}" in err and "foxhunt_ray.report" in err


def test_no_resume_command_after_a_kill_and_no_market_commands_elsewhere():
    """A killed run's resume is refused (it would train past the kill), so the next commands leave it out; every
    command names the run's own folder, never OUT/latest (the next run moves it)."""
    plan = types.SimpleNamespace(
        driver=DriverConfig(steps=1_000_000, time_limit_s=240.0, rollout_workers=1),
        run_dir=Path("runs/abc/phase4_3-LOB-v0-s0-20261203T101500Z/0"),
        config=types.SimpleNamespace(env_id=ENV_ID, seed=0, market=MarketConfig()),
        serial=False,
        out=Path("runs"),
    )
    done = local.next_commands(plan, EXIT_OK)
    assert f"--resume {plan.run_dir} --time-limit-s 480" in done and "latest" not in done
    assert f"foxhunt_ray.evaluate {plan.run_dir} --episodes 256" in done
    assert "--steps 1000000" not in done  # local's placeholder cap is no part of a command to type
    assert "--resume" not in local.next_commands(plan, EXIT_KILLED)
    # the default budget of updates (the time only a cap): train further is more updates
    plan.driver = DriverConfig(steps=6_000, time_limit_s=900.0, rollout_workers=1)
    assert f"--resume {plan.run_dir} --steps 12000" in local.next_commands(plan, EXIT_OK)


# ----------------------------------------------------------------------------------- a resume that would train nothing


def run_serial(out: Path, *flags: str, hook=None) -> tuple[int, Path]:
    code = driver.main(["--preset", "smoke", "--serial", "--quiet", "--out", str(out), *flags], hook=hook)
    return code, next(out.glob("*/*/0"))


def folder_state(run_dir: Path) -> dict[str, bytes]:
    """Every file of the run folder but its lock (which names whoever held it last)."""
    files = [p for p in run_dir.rglob("*") if p.is_file() and p.name != "run.lock"]
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in files}


def test_resume_to_steps_already_trained_says_so_and_changes_nothing(tmp_path, capsys):
    """--resume RUN --steps N with N at or below the update the run would resume from: refused, naming that update
    and the fix, whether the run is done, stopped (Ctrl-C) or was given a time budget; before, a stopped run
    started, trained nothing and was marked done."""

    def interrupt_at_25(step, workers):
        if step >= 25:
            raise KeyboardInterrupt

    code, stopped = run_serial(tmp_path / "stopped", "--steps", "40", "--checkpoint-every", "5", hook=interrupt_at_25)
    assert code == EXIT_OK and json.loads((stopped / "summary.json").read_text())["status"] == "stopped"
    before = folder_state(stopped)
    capsys.readouterr()
    assert driver.main(["--resume", str(stopped), "--steps", "20", "--serial", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert (
        f"error: {stopped} would resume from update 25 (its newest checkpoint), and --steps 20 ends the run there, "
        "so the resume would train nothing: pass a larger --steps, e.g. --steps 50, or leave --steps out to go on "
        "towards the run's own 40 updates; nothing was changed"
    ) in err, err
    assert folder_state(stopped) == before

    code, done = run_serial(tmp_path / "done", "--steps", "30")
    assert code == EXIT_OK
    assert driver.main(["--resume", str(done), "--serial", "--quiet"]) == 1
    assert f"{done} is done at update 30 (summary.json), and its own --steps 30 ends the run there" in (
        capsys.readouterr().err
    )

    code = local.main(["--preset", "smoke", "--serial", "--quiet", "--no-eval", "--time-limit-s", "1", "--out",
                       str(tmp_path / "budget")])  # fmt: skip
    budget = next((tmp_path / "budget").glob("*/*/0"))
    reached = json.loads((budget / "summary.json").read_text())["step"]
    assert code == EXIT_OK and reached >= 1  # how many a second makes is the machine's business
    capsys.readouterr()
    assert local.main(["--resume", str(budget), "--steps", str(reached), "--serial", "--quiet", "--no-eval"]) == 1
    err = capsys.readouterr().err
    assert f"is done at update {reached} (summary.json), and --steps {reached} ends the run there" in err, err
    assert (
        "or leave --steps out to go on towards the run's own 1,000,000 updates (for at most another 1 s of training: "
        "--time-limit-s S sets another budget)"
    ) in err, err

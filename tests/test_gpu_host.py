"""benchmarks.gpu_host, the GPU host's steps: every command it runs exists and takes the flags it is given, the runner
keeps each job's output, figures and time limit and hands back three files, and the bundle is found and unpacked."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from benchmarks.gpu_host import runner as runner_mod
from benchmarks.gpu_host.runner import Runner, step_env
from benchmarks.gpu_host.steps import (
    CUDA_TESTS,
    STEPS,
    Job,
    Plan,
    last_kv_line,
    plan_steps,
    pytest_counts,
    sanitizer_counts,
    thin_curve,
    update_table,
)

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def test_every_step_runs_a_command_of_this_tree_with_flags_it_takes():
    jobs = plan_steps(list(STEPS), Plan(seeds=(0, 3), python=PY))
    assert {j.step for j in jobs} == set(STEPS)
    scripts: dict[str, set[str]] = {}
    for job in jobs:
        argv = list(job.argv)
        if argv[0] == "compute-sanitizer":
            argv = argv[argv.index(PY):]
        assert argv[0] == PY, job
        if argv[1] == "-m" and argv[2] == "pytest":
            files = [a for a in argv[3:] if a.startswith("tests/")]
            assert files == list(CUDA_TESTS) and all((ROOT / f).is_file() for f in files)
            continue
        target = argv[2] if argv[1] == "-m" else argv[1]
        rest = argv[3:] if argv[1] == "-m" else argv[2:]
        if argv[1] != "-m":
            assert (ROOT / target).is_file(), target
        scripts.setdefault(target, set()).update(a for a in rest if a.startswith("--"))
        if target == "benchmarks/gpu_check.py":
            scripts[target].add(rest[0])  # the stage: one of its choices
    # each target's --help, in one process: every flag and stage a step passes is one it declares
    probe = textwrap.dedent("""
        import contextlib, io, json, runpy, sys
        out = {}
        for target in json.loads(sys.argv[1]):
            sys.argv = [target, "--help"]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
                if target.endswith(".py"):
                    runpy.run_path(target, run_name="__main__")
                else:
                    runpy.run_module(target, run_name="__main__", alter_sys=True)
            out[target] = buf.getvalue()
        print(json.dumps(out))
    """)
    res = subprocess.run([PY, "-c", probe, json.dumps(sorted(scripts))], cwd=ROOT, capture_output=True, text=True,
                         timeout=240)
    helps = json.loads(res.stdout.strip().splitlines()[-1])
    for target, flags in scripts.items():
        for flag in flags:
            assert flag in helps[target], f"{target} --help does not mention {flag}"


def test_per_seed_steps_make_one_job_a_seed_and_budget_by_their_training_time():
    plan = Plan(seeds=(4, 5, 6), learn_seconds=90, system_seconds=20, python=PY)
    learn = STEPS["learn"](plan)
    assert [j.label for j in learn] == ["seed4", "seed5", "seed6"]
    assert ["--seed", "5"] == list(learn[1].argv[learn[1].argv.index("--seed"):][:2])
    assert "90" in learn[0].argv and learn[0].expect_s < learn[0].timeout_s
    assert all(j.needs_rllib for j in STEPS["rllib"](plan))
    assert "20" in STEPS["system"](plan)[0].argv


def test_the_walkforward_step_runs_one_bench_a_ticker_and_mode_of_walk_train_on():
    plan = Plan(seeds=(0, 1), walk_days="AMZN,GOOG", walk_train_on="real,synthetic,both", python=PY)
    jobs = [j for j in STEPS["walkforward"](plan) if "bench_walkforward.py" in " ".join(j.argv)]
    labels = [j.label for j in jobs]
    assert labels == ["amzn_blocks", "amzn_blocks_synthetic", "amzn_blocks_both", "goog_blocks",
                      "goog_blocks_synthetic", "goog_blocks_both"]  # fmt: skip
    modes = [j.argv[j.argv.index("--train-on") + 1] for j in jobs]
    assert modes == ["real", "synthetic", "both"] * 2
    assert jobs[1].timeout_s > jobs[0].timeout_s  # a calibration a fold before the training
    from benchmarks.gpu_host.__main__ import parse_args

    assert parse_args(["walkforward", "--walk-train-on", "synthetic,both"]).walk_train_on == "synthetic,both"
    with pytest.raises(SystemExit):
        parse_args(["walkforward", "--walk-train-on", "sim"])


def _job(code: str, label: str = "a", timeout_s: float = 60, expect_s: float = 1, collect=None) -> Job:
    return Job(step="fake", label=label, argv=(PY, "-c", code), timeout_s=timeout_s, expect_s=expect_s,
               env={"WHERE": "{dir}"}, collect=collect)


def test_runner_keeps_output_figures_and_hands_back_three_files(tmp_path, monkeypatch):
    monkeypatch.setattr(runner_mod, "has_modules", lambda python, names: True)
    out = tmp_path / "out"

    def collect(dir, tmp, output):
        assert (dir / "made.txt").read_text() == "x"
        return last_kv_line(output)

    write = "import os, pathlib; pathlib.Path(os.environ['WHERE'], 'made.txt').write_text('x'); "
    jobs = [
        _job(write + "print('noise'); print('env_steps_per_s=12 learner_busy=0.5')", "ok", collect=collect),
        _job("import sys; print('boom'); sys.exit(3)", "fails"),
        _job("import time; time.sleep(30)", "slow", timeout_s=1),
        Job(step="fake", label="missing", argv=("no-such-program-here",), timeout_s=5, expect_s=1),
        _job("print('never')", "over_budget", expect_s=10_000),
    ]
    rc = Runner(out=out, repo=ROOT, python=PY, budget_s=5_000).run(jobs)
    assert rc == 1
    assert sorted(p.name for p in out.iterdir()) == ["gpu_host.log", "gpu_host.tar.gz", "summary.json"]
    summary = {j["job"]: j for j in json.loads((out / "summary.json").read_text())["jobs"]}
    assert summary["fake/ok"]["rc"] == 0 and summary["fake/ok"]["figures"] == {"env_steps_per_s": 12,
                                                                             "learner_busy": 0.5}
    assert summary["fake/fails"]["rc"] == 3
    assert summary["fake/slow"]["rc"] == 124
    assert summary["fake/missing"]["rc"] == 127
    assert summary["fake/over_budget"] == {"job": "fake/over_budget", "skipped": "budget"}
    log = (out / "gpu_host.log").read_text()
    assert "boom" in log and "rc=124 (timed out)" in log and "FAILED fake/fails fake/slow fake/missing" in log
    with tarfile.open(out / "gpu_host.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"fake/ok/output.log", "fake/ok/made.txt", "fake/fails/output.log"} <= names


def test_dry_run_prints_every_command_and_runs_nothing(tmp_path):
    res = subprocess.run([PY, "-m", "benchmarks.gpu_host", "build", "learn", "--seeds", "7", "--dry-run",
                          "--out", str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "benchmarks/gpu_check.py build" in res.stdout and "foxhunt_ray.local" in res.stdout
    assert "--seed 7" in res.stdout
    assert not (tmp_path / "o").exists()
    bad = subprocess.run([PY, "-m", "benchmarks.gpu_host", "nosuch"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "unknown step(s) nosuch" in bad.stderr


def _tar(path: Path, files: dict[str, str]) -> None:
    src = path.parent / (path.name + ".src")
    for name, text in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    with tarfile.open(path, "w") as tar:
        for name in files:
            tar.add(src / name, arcname=name)


def test_step_env_unpacks_the_bundle_only_where_this_python_lacks_ray(tmp_path):
    repo = tmp_path / "repo"
    (repo / ".devbundle").mkdir(parents=True)
    _tar(repo / ".devbundle/site.tar.xz", {"ray/__init__.py": "", "bin/ray": ""})
    _tar(repo / ".devbundle/rllib.tar.xz", {"rlray/rllib/__init__.py": "", "rlsite/gymnasium/__init__.py": ""})
    site = tmp_path / "t" / "site"
    env, notes = step_env(repo, PY, needs_rllib=False, site=site, have=lambda p, n: True)
    assert env["PYTHONPATH"].split(":")[0] == str(repo) and not notes and not site.exists()
    env, notes = step_env(repo, PY, needs_rllib=True, site=site, have=lambda p, n: False)
    paths = env["PYTHONPATH"].split(":")
    assert paths[:3] == [str(repo), str(tmp_path / "t" / "rl" / "rlsite"), str(site)]
    assert (site / "ray" / "rllib" / "__init__.py").is_file()  # RLlib copied into the bundle's ray
    assert env["PATH"].startswith(str(site / "bin")) and len(notes) == 2
    _, notes = step_env(tmp_path / "empty", PY, needs_rllib=False, site=tmp_path / "s2", have=lambda p, n: False)
    assert "python3 -m benchmarks.gpu_host.bundle" in notes[0]


def test_output_parsers():
    assert last_kv_line("x=1 y\nheldout_pnl_usd=908 oracle_pnl_usd=1471 fraction_of_oracle=0.617\nbye") == {
        "heldout_pnl_usd": 908, "oracle_pnl_usd": 1471, "fraction_of_oracle": 0.617}
    assert pytest_counts("....\n160 passed, 1 skipped in 80.2s\n") == {"passed": 160, "skipped": 1}
    assert pytest_counts("1 failed, 3 passed") == {"failed": 1, "passed": 3}
    text = "========= ERROR SUMMARY: 0 errors\n========= RACECHECK SUMMARY: 2 hazards displayed"
    assert sanitizer_counts(text) == {"memcheck_errors": 0, "racecheck_hazards": 2}


def test_update_table_pairs_the_custom_path_with_the_reference_ops(tmp_path):
    rows = [{"T": 64, "B": 128, "ops": ops, "matmul": mm, "graph_ms": ms, "kernels": k}
            for ops, mm, ms, k in (("cuda", "highest", 1.7, 171), ("reference", "highest", 3.4, 827),
                                   ("cuda", "high", 1.2, 166))]
    (tmp_path / "u.json").write_text(json.dumps({"rows": rows}))
    table = update_table(tmp_path / "u.json")
    assert table["64x128 float32"] == {"custom_ms": 1.7, "custom_kernels": 171, "reference_ms": 3.4,
                                       "reference_kernels": 827, "reference_over_custom": 2.0}
    assert "reference_over_custom" not in table["64x128 TF32"]


def test_learn_collect_keeps_the_small_files_of_a_run_and_thins_its_curve(tmp_path):
    run = tmp_path / "tmp" / "runs" / "sha" / "name" / "0"
    (run / "evaluations").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt_00000500.pt").write_bytes(b"0" * 1000)
    for name in ("config.json", "summary.json", "timings.json"):
        (run / name).write_text("{}")
    (run / "evaluations" / "synthetic-fold0-step00000500-256ep-h1000-pi.json").write_text("{}")
    lines = [json.dumps({"step": s, "time": float(s), "env_steps": 100 * s, "qpa_ema": 0.5}) for s in range(1, 501)]
    (run / "diag.jsonl").write_text("\n".join(lines) + "\n")
    dir = tmp_path / "dir"
    dir.mkdir()
    figures = STEPS["learn"](Plan(seeds=(0,)))[0].collect(dir, tmp_path / "tmp", "fraction_of_oracle=0.9 a=1\n")
    assert figures["fraction_of_oracle"] == 0.9 and figures["updates"] == 500
    assert figures["env_steps_per_s"] == 100 and figures["updates_per_s"] == 1.0
    assert sorted(p.name for p in dir.iterdir()) == [
        "config.json", "curve.tsv", "summary.json", "synthetic-fold0-step00000500-256ep-h1000-pi.json", "timings.json"]
    curve = (dir / "curve.tsv").read_text().splitlines()
    assert curve[0].startswith("step\t") and 55 <= len(curve) <= 70 and curve[-1].startswith("500\t")


def test_thin_curve_skips_lines_that_are_not_step_records(tmp_path):
    diag = tmp_path / "diag.jsonl"
    diag.write_text('{"event": "start"}\n{"step": 1, "qpa_ema": 0.1}\n\n{"step": 2, "qpa_ema": 0.2}\n')
    thin_curve(diag, tmp_path / "c.tsv", rows=60)
    rows = (tmp_path / "c.tsv").read_text().splitlines()
    assert [r.split("\t")[0] for r in rows[1:]] == ["1", "2"]


@pytest.mark.parametrize("step", sorted(STEPS))
def test_every_step_is_documented_in_the_package_table(step):
    import benchmarks.gpu_host as pkg

    assert f"\n- {step}: " in pkg.__doc__

"""The GPU host's steps as data: each a command with its time limit, and what to keep and read from its output.

A step is one or more jobs (one per seed for system, learn and rllib). A job's argv may name `{dir}` (the job's own
folder, packed at the end) and `{tmp}` (scratch that is not packed: run folders with their checkpoints);
`collect(dir, tmp, output)` copies what backs a figure out of the scratch into `dir` and returns the figures for
summary.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

CUDA_TESTS = (
    "tests/test_kernels_cuda.py",
    "tests/test_learner_cuda.py",
    "tests/test_ops_library.py",
    "tests/test_ops_reference.py",
    "tests/test_cuda_compile.py",
)
"""Every kernel against its reference, the CUDA learner against eager and its TF32 tolerances, the op library and
the kernels compiled with warnings as errors."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Plan:
    """What the per-seed steps run: seeds, training seconds, and the Python that runs every step."""

    seeds: tuple[int, ...] = (0, 1)
    system_seconds: float = 40.0
    learn_seconds: float = 150.0
    walk_seconds: float = 90.0
    """Training seconds of each walk-forward run (a run a fold and seed, five at once, inside one remote call)."""
    walk_folds: str = "4,8,12"
    """The walk-forward step's folds of each sample day's 13 half hours."""
    walk_days: str = "AMZN"
    """The LOBSTER sample days (tickers) the walk-forward step runs on, one bench run each."""
    walk_train_on: str = "real"
    """What the walk-forward runs train on (bench_walkforward --train-on), comma-separated, one bench run a ticker and
    mode: real, synthetic (the flow calibrated on each fold's training blocks), both (half the books synthetic)."""
    python: str = "python3"


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    step: str
    label: str
    argv: tuple[str, ...]
    timeout_s: float
    expect_s: float
    """Typical wall time, for the budget: a job that could not end inside it is skipped, not started."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    needs_rllib: bool = False
    collect: Callable[[Path, Path, str], dict] | None = None


def last_kv_line(output: str) -> dict:
    """The last line of `key=value` pairs a benchmark prints, as numbers where they parse."""
    for line in reversed(output.splitlines()):
        pairs = re.findall(r"(\w+)=(\S+)", line)
        if len(pairs) >= 2 and line.split()[0].count("=") == 1:
            return {k: _number(v) for k, v in pairs}
    return {}


def _number(text: str):
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


def pytest_counts(output: str) -> dict:
    """'160 passed, 1 skipped in 80s' -> {'passed': 160, 'skipped': 1}."""
    for line in reversed(output.splitlines()):
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", line)
        if found:
            return {word: int(n) for n, word in found}
    return {}


def sanitizer_counts(output: str) -> dict:
    """compute-sanitizer's closing lines: memcheck's errors and racecheck's hazards."""
    out = {}
    for tool, pattern in (("memcheck_errors", r"ERROR SUMMARY: (\d+) error"),
                          ("racecheck_hazards", r"RACECHECK SUMMARY: (\d+) hazard")):
        found = re.findall(pattern, output)
        if found:
            out[tool] = int(found[-1])
    return out


def update_table(path: Path) -> dict:
    """gpu_check.py update's rows as {"64x128 float32": {custom_ms, reference_ms, reference_over_custom}}."""
    rows = json.loads(path.read_text())["rows"]
    table: dict[str, dict] = {}
    for r in rows:
        key = f"{r['T']}x{r['B']} {'float32' if r['matmul'] == 'highest' else 'TF32'}"
        table.setdefault(key, {})[f"{'custom' if r['ops'] == 'cuda' else 'reference'}_ms"] = round(r["graph_ms"], 3)
        table[key][f"{'custom' if r['ops'] == 'cuda' else 'reference'}_kernels"] = int(r["kernels"])
    for v in table.values():
        if "custom_ms" in v and "reference_ms" in v:
            v["reference_over_custom"] = round(v["reference_ms"] / v["custom_ms"], 2)
    return table


def _json_collector(name: str, read: Callable[[Path], dict] | None = None):
    def collect(dir: Path, tmp: Path, output: str) -> dict:
        path = dir / name
        if not path.is_file():
            return {"missing": name}
        return read(path) if read else {"json": name}
    return collect


def _system_collect(dir: Path, tmp: Path, output: str) -> dict:
    figures = last_kv_line(output)
    report = dir / "system.json"
    if report.is_file():
        r = json.loads(report.read_text())
        figures.update({k: r.get(k) for k in ("policy_lag_mean", "policy_lag_max", "gpu_util_mean",
                                              "rollout_workers_reported", "updates")})
    return figures


def thin_curve(diag: Path, dest: Path, rows: int = 60) -> None:
    """Every ~1/rows-th update's step line of diag.jsonl as a TSV (the whole file is 10-100 MB a run)."""
    keys = ("step", "time", "env_steps", "qpa_ema", "pnl_cum_usd", "l_dueling", "policy_lag", "entropy",
            "approx_kl", "l_distill")
    recs = [json.loads(line) for line in diag.read_text().splitlines() if line.strip()]
    steps = [r for r in recs if "step" in r and "qpa_ema" in r]
    kept = steps[:: max(1, len(steps) // rows)]
    if steps and kept[-1] is not steps[-1]:
        kept.append(steps[-1])
    with dest.open("w") as f:
        f.write("\t".join(keys) + "\n")
        for r in kept:
            f.write("\t".join(f"{r[k]:.5g}" if isinstance(r.get(k), float) else str(r.get(k)) for k in keys) + "\n")


def _learn_collect(dir: Path, tmp: Path, output: str) -> dict:
    figures = last_kv_line(output)
    runs = sorted(tmp.glob("runs/*/*/*[0-9]"))  # the fold's folder: 0 on the synthetic market
    if not runs:
        return {**figures, "missing": "run folder"}
    run = runs[0]
    for name in ("config.json", "summary.json", "timings.json"):
        if (run / name).is_file():
            shutil.copy(run / name, dir / name)
    for record in sorted((run / "evaluations").glob("*.json")):
        shutil.copy(record, dir / record.name)
    if (run / "diag.jsonl").is_file():
        thin_curve(run / "diag.jsonl", dir / "curve.tsv")
        steps = [json.loads(line) for line in (run / "diag.jsonl").read_text().splitlines() if '"env_steps"' in line]
        steps = [r for r in steps if "step" in r and "time" in r and r.get("event") is None]
        if len(steps) > 2:
            a, b = steps[len(steps) // 2], steps[-1]
            dt = max(b["time"] - a["time"], 1e-9)
            figures.update(updates=b["step"], env_steps=b["env_steps"],
                           env_steps_per_s=round((b["env_steps"] - a["env_steps"]) / dt),
                           updates_per_s=round((b["step"] - a["step"]) / dt, 1))
    return figures


def _walkforward_collect(dir: Path, tmp: Path, output: str) -> dict:
    """bench_walkforward's table, plot and records (without the runs) into the job's folder; its last line."""
    for name in ("walkforward.json", "walkforward.md", "walkforward.png"):
        if (tmp / "walkforward" / name).is_file():
            shutil.copy(tmp / "walkforward" / name, dir / name)
    return last_kv_line(output)


def _kv_collect(dir: Path, tmp: Path, output: str) -> dict:
    return last_kv_line(output)


def _pytest_collect(dir: Path, tmp: Path, output: str) -> dict:
    return pytest_counts(output)


def _sanitizer_collect(dir: Path, tmp: Path, output: str) -> dict:
    return sanitizer_counts(output)


def plan_steps(steps: list[str], plan: Plan) -> list[Job]:
    """The jobs of the named steps, in order."""
    jobs: list[Job] = []
    for step in steps:
        jobs += STEPS[step](plan)
    return jobs


def _gpu_check(plan: Plan, stage: str, *extra: str) -> tuple[str, ...]:
    return (plan.python, "benchmarks/gpu_check.py", stage, *extra)


def _build(plan: Plan) -> list[Job]:
    return [Job(step="build", label="build", argv=_gpu_check(plan, "build"), timeout_s=300, expect_s=90)]


def _checks(plan: Plan) -> list[Job]:
    return [Job(
        step="checks", label="cuda_tests",
        argv=(plan.python, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *CUDA_TESTS),
        # a GPU test skipped for want of a GPU fails instead; every check's error and the TF32 gaps as JSON
        env={"FOXHUNT_REQUIRE_CUDA": "1", "FOXHUNT_KERNEL_REPORT": "{dir}/checks.json",
             "FOXHUNT_TF32_REPORT": "{dir}/tf32.json"},
        timeout_s=360, expect_s=120, collect=_pytest_collect,
    )]


def _sanitize(plan: Plan) -> list[Job]:
    workload = _gpu_check(plan, "sanitize")
    return [
        # no caching allocator under memcheck, so an out-of-bounds access hits unallocated memory and is caught
        Job(step="sanitize", label="memcheck", env={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"},
            argv=("compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "9", "--print-limit", "20",
                  *workload), timeout_s=300, expect_s=60, collect=_sanitizer_collect),
        Job(step="sanitize", label="racecheck",
            argv=("compute-sanitizer", "--tool", "racecheck", "--racecheck-report", "all", "--error-exitcode", "9",
                  "--print-limit", "20", "--kernel-name", "kns=foxhunt", *workload),
            timeout_s=300, expect_s=60, collect=_sanitizer_collect),
    ]


def _ops(plan: Plan) -> list[Job]:
    return [Job(step="ops", label="ops", argv=_gpu_check(plan, "ops", "--json", "{dir}/ops.json"),
                timeout_s=180, expect_s=40, collect=_json_collector("ops.json"))]


def _update(plan: Plan) -> list[Job]:
    return [Job(step="update", label="update", argv=_gpu_check(plan, "update", "--json", "{dir}/update.json"),
                timeout_s=180, expect_s=30, collect=_json_collector("update.json", update_table))]


def _profile(plan: Plan) -> list[Job]:
    return [
        Job(step="profile", label="kernels", argv=_gpu_check(plan, "kernels", "--json", "{dir}/kernels.json"),
            timeout_s=120, expect_s=25, collect=_json_collector("kernels.json")),
        Job(step="profile", label="regions64",
            argv=_gpu_check(plan, "regions", "--shapes", "--T", "64", "--json", "{dir}/regions64.json"),
            timeout_s=150, expect_s=40, collect=_json_collector("regions64.json")),
    ]


def _census(plan: Plan) -> list[Job]:
    return [Job(step="census", label="census",
                argv=_gpu_check(plan, "census", "--T", "64", "--json", "{dir}/census.json"),
                timeout_s=300, expect_s=30, collect=_json_collector("census.json"))]


def _system(plan: Plan) -> list[Job]:
    return [Job(
        step="system", label=f"seed{s}",
        argv=(plan.python, "benchmarks/bench_system.py", "--gpu", "--seconds", f"{plan.system_seconds:g}",
              "--seed", str(s), "--json", "{dir}/system.json"),
        timeout_s=plan.system_seconds + 150, expect_s=plan.system_seconds + 45, collect=_system_collect,
    ) for s in plan.seeds]


PYTHON = "python3"
REAL_CACHE = "{tmp}/../cache"
"""The real-day steps' cache: one folder beside their jobs' own, made by their first jobs."""


def _real_days(step: str) -> list[Job]:
    """lobsim_env's C modules built in place, and the LOBSTER samples (FOXHUNT_LOBSTER_DATA, else the sample folder
    beside the checkout) ingested into REAL_CACHE: the first jobs of a step on real days."""
    samples = os.environ.get("FOXHUNT_LOBSTER_DATA") or str(Path(__file__).resolve().parents[3] / "shared/data/lobster")
    return [
        Job(step=step, label="build_c", argv=(PYTHON, "-m", "benchmarks.gpu_host.build_c"), timeout_s=120, expect_s=10),
        Job(step=step, label="ingest", argv=(PYTHON, "-m", "lobsim_env.data", "ingest", samples, "--out", REAL_CACHE),
            timeout_s=120, expect_s=10, collect=lambda dir, tmp, output: last_kv_line(output)),
    ]  # fmt: skip


def _system_real(plan: Plan) -> list[Job]:
    """The whole system on real days: bench_system.py --gpu --data on the LOBSTER samples' cache."""
    prepare = [dataclasses.replace(j, argv=(plan.python, *j.argv[1:])) for j in _real_days("system_real")]
    return prepare + [Job(
        step="system_real", label=f"seed{s}",
        argv=(plan.python, "benchmarks/bench_system.py", "--gpu", "--seconds", f"{plan.system_seconds:g}",
              "--seed", str(s), "--data", REAL_CACHE, "--json", "{dir}/system.json"),
        timeout_s=plan.system_seconds + 150, expect_s=plan.system_seconds + 45, collect=_system_collect,
    ) for s in plan.seeds]


def _learn_real(plan: Plan) -> list[Job]:
    """The main job on a real day, one run a seed: the AMZN sample in 13 half-hour blocks, trained on 09:30-15:00,
    validated on 15:00-15:30 and tested on 15:30-16:00 (its fold, 12) beside flat, random, imbalance, quoting and the
    hindsight bound."""
    prepare = [dataclasses.replace(j, argv=(plan.python, *j.argv[1:])) for j in _real_days("learn_real")]
    return prepare + [Job(
        step="learn_real", label=f"seed{s}",
        argv=(plan.python, "-m", "foxhunt_ray.local", "--data", REAL_CACHE, "--days", "AMZN", "--blocks", "13",
              "--set", "market.horizon=200", "--time-limit-s", f"{plan.learn_seconds:g}", "--eval-episodes", "256",
              "--seed", str(s), "--out", "{tmp}/runs"),
        timeout_s=plan.learn_seconds + 150, expect_s=plan.learn_seconds + 28, collect=_learn_collect,
    ) for s in plan.seeds]


def _walkforward(plan: Plan) -> list[Job]:
    """The walk-forward protocol on a LOBSTER sample day's 13 half hours (benchmarks/bench_walkforward.py), one bench
    run a ticker of walk_days (AMZN): walk_folds (4, 8 and 12), a run a seed of each (serial roles, the runs sharing
    the GPU, five at once), walk_seconds of training; one bench run a mode of walk_train_on too (real: label
    <ticker>_blocks; synthetic, both: <ticker>_blocks_<mode>, each fold's flow calibrated on its training blocks
    first, a minute a fold at most)."""
    prepare = [dataclasses.replace(j, argv=(plan.python, *j.argv[1:])) for j in _real_days("walkforward")]
    folds = len(plan.walk_folds.split(","))
    rounds = -(-folds * len(plan.seeds) // 5)
    return [*prepare, *(Job(
        step="walkforward", label=f"{ticker.lower()}_blocks" + ("" if mode == "real" else f"_{mode}"),
        argv=(plan.python, "benchmarks/bench_walkforward.py", "--data", REAL_CACHE, "--days", ticker, "--blocks", "13",
              "--folds", plan.walk_folds, "--seeds", str(len(plan.seeds)), "--train-s", f"{plan.walk_seconds:g}",
              "--parallel", "5", "--gpus", "1", "--episodes", "256", "--set", "market.horizon=200",
              "--train-on", mode, "--out", "{tmp}/walkforward"),
        timeout_s=rounds * (plan.walk_seconds + 90) + 120 + (60 * folds if mode != "real" else 0),
        expect_s=rounds * (plan.walk_seconds + 45) + 60 + (25 * folds if mode != "real" else 0),
        collect=_walkforward_collect,
    ) for ticker in plan.walk_days.split(",") for mode in plan.walk_train_on.split(","))]  # fmt: skip


def _learn(plan: Plan) -> list[Job]:
    return [Job(
        step="learn", label=f"seed{s}",
        argv=(plan.python, "-m", "foxhunt_ray.local", "--time-limit-s", f"{plan.learn_seconds:g}",
              "--eval-episodes", "256", "--seed", str(s), "--out", "{tmp}/runs"),
        timeout_s=plan.learn_seconds + 150, expect_s=plan.learn_seconds + 28, collect=_learn_collect,
    ) for s in plan.seeds]


def _rllib(plan: Plan) -> list[Job]:
    return [Job(
        step="rllib", label=f"seed{s}",
        argv=(plan.python, "benchmarks/bench_rllib.py", "--sizing", "gpu_host", "--seconds",
              f"{plan.learn_seconds:g}", "--env-runners", "14", "--envs-per-runner", "256", "--fragment", "64",
              "--epochs", "4", "--minibatch", "4096", "--seed", str(s), "--json", "{dir}/rllib.json"),
        timeout_s=plan.learn_seconds + 150, expect_s=plan.learn_seconds + 40, needs_rllib=True,
        collect=_kv_collect,
    ) for s in plan.seeds]


STEPS: dict[str, Callable[[Plan], list[Job]]] = {
    "build": _build,
    "checks": _checks,
    "sanitize": _sanitize,
    "ops": _ops,
    "update": _update,
    "profile": _profile,
    "system": _system,
    "system_real": _system_real,
    "learn": _learn,
    "learn_real": _learn_real,
    "walkforward": _walkforward,
    "rllib": _rllib,
    "census": _census,
}

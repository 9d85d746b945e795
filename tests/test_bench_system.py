"""benchmarks/bench_system.py --quick: the whole Ray system on the CPU for a few seconds, its per-role table and its
last line (what CI and the build box run; `--gpu` is the same code at the GPU settings)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAST = re.compile(r"^env_steps_per_s=(\d+) updates_per_s=([\d.]+) learner_busy=([\d.]+)$")


def quick_run(tmp_path: Path) -> subprocess.CompletedProcess:
    # 150 updates, the time limit only a guard: a slow Ray start on a loaded box leaves the run its updates (a 10-s
    # budget could end before the first, and a second run with 20 s cost the suite 50 s)
    cmd = [sys.executable, "benchmarks/bench_system.py", "--quick", "--steps", "150", "--seconds", "120"]
    return subprocess.run([*cmd, "--json", str(tmp_path / "r.json")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip


@pytest.mark.slow
def test_quick_mode_reports_every_role_and_the_last_line(tmp_path):
    out = quick_run(tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    m = LAST.match(lines[-1])
    assert m, lines[-1]
    steps_per_s, updates_per_s, busy = float(m[1]), float(m[2]), float(m[3])
    assert steps_per_s > 0 and updates_per_s > 0 and 0 < busy <= 1
    assert steps_per_s == pytest.approx(updates_per_s * 64, rel=0.01)  # smoke: 4 books x 16 steps an update
    table = "\n".join(lines)
    for row in ("| learner | idle between calls", "| learner | device: the captured", "| rollout (mean of 2) |"):
        assert row in table
    assert "| monitor |" in table and "| driver | wait_s |" in table


@pytest.mark.slow
def test_profile_learner_times_every_part_of_the_learners_host_path(tmp_path):
    """benchmarks/profile_learner.py (the learner role without Ray, payloads always ready) on the CPU at the `cpu`
    sizing: one timed run per payloads-a-call setting, every step counted, the profiles printed, the last lines."""
    cmd = [sys.executable, "benchmarks/profile_learner.py", "--sizing", "cpu", "--calls", "3", "--samples", "2"]
    out = subprocess.run(
        [*cmd, "--per-call", "1,2", "--set", "learner.q_batch_size=128", "--json", str(tmp_path / "p.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    import json

    report = json.loads((tmp_path / "p.json").read_text())
    per_payload = report["steps_per_payload"]
    assert report["overrides"] == ["learner.q_batch_size=128"]
    for k in (1, 2):
        t = report[f"timed_{k}_per_call"]
        assert t["updates"] == 3 * k * per_payload  # every payload's every step, the last drained
        assert t["updates_per_s"] > 0 and 0 < t["learner_busy"] <= 1.05  # the CPU learner's steps are its wall
        assert t["stage_ms_per_step"] > 0 and t["decode_ms_per_step"] > 0
    assert "Self CPU time total" in report["torch_profile_top"]
    assert "function calls" in out.stdout  # cProfile's table
    assert re.match(r"^per_call=2 updates_per_s=[\d.]+ learner_busy=[\d.]+", out.stdout.strip().splitlines()[-1])

"""benchmarks/learning_sweep.py: one trial of a learning sweep (a serial RolloutWorker + LearnerWorker loop) prints a
JSON line per held-out score, at every `eval_every` learner steps, with minibatch steps counted one by one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_trial_scores_the_greedy_policy_every_eval_every_steps():
    spec = {
        "name": "t", "preset": "phase4_3", "settings": "learn", "sizing": "cpu", "steps": 6, "eval_every": 2,
        "episodes": 3, "sets": ["rollout.num_envs=8", "learner.minibatch_envs=4"],  # 2 learner steps a sample
    }
    out = subprocess.run(
        [sys.executable, "benchmarks/learning_sweep.py", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [x["step"] for x in lines] == [2, 4, 6] and {x["name"] for x in lines} == {"t"}
    for x in lines:
        assert set(x) == {"name", "step", "t", "pnl", "sem", "qpa_ema", "l_c51", "ent"}
        assert -1 <= x["qpa_ema"] <= 1 and 0 < x["ent"] <= 1.95  # ln 7: the market's seven actions

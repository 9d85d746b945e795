"""This session's table in BENCHMARKS.md ("The new default on every seed"), per run: the steady env steps/s and
updates/s (the curve's rows from a quarter into the run to its end), the updates, env steps and training seconds,
the policy lag over the second half of the updates (median / p95 / max), the sampled policy's entropy (mean after
update 3,000), and the held-out evaluation (greedy on pi, 256 episodes): the agent's PnL +- s.e. and its fraction
of the oracle's, beside imbalance's.

cd benchmarks/results/gpu_session23_20261206 && python table.py > table.txt
"""

from __future__ import annotations

import csv
import glob
import json
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    print("run\tenv_steps_per_s\tupdates_per_s\tupdates\tenv_steps_M\ttrain_s\tlag_median\tlag_p95\tlag_max\t"
          "entropy_after_3000\tagent_usd\tagent_sem\toracle_usd\tfraction\timbalance_fraction")
    for path in sorted(glob.glob(str(HERE / "call*" / "*_curve.tsv")), key=lambda p: Path(p).name):
        name = Path(path).name.split("_")[0]
        rows = list(csv.DictReader(open(path), delimiter="\t"))
        step, t, env = (np.array([float(r[k]) for r in rows]) for k in ("step", "seconds", "env_steps"))
        q = int(np.searchsorted(t, t[0] + (t[-1] - t[0]) / 4))
        rate_env, rate_upd = (env[-1] - env[q]) / (t[-1] - t[q]), (step[-1] - step[q]) / (t[-1] - t[q])
        u = np.genfromtxt(Path(path).with_name(f"{name}_updates.tsv.gz"), names=True, delimiter="\t")
        lag = u["policy_lag"][len(u) // 2 :]
        ent = float(np.mean(u["entropy"][u["step"] > 3000]))
        ev = json.load(open(glob.glob(str(Path(path).with_name(f"{name}_synthetic-*-pi.json")))[0]))["policies"]
        a, o, imb = ev["agent"], ev["oracle"]["pnl_usd_mean"], ev["imbalance"]["pnl_usd_mean"]
        print(f"{name}\t{rate_env:.0f}\t{rate_upd:.1f}\t{step[-1]:.0f}\t{env[-1] / 1e6:.0f}\t{t[-1] - t[0]:.0f}\t"
              f"{np.median(lag):.0f}\t{np.percentile(lag, 95):.0f}\t{lag.max():.0f}\t{ent:.3f}\t"
              f"{a['pnl_usd_mean']:.0f}\t{a['pnl_usd_sem']:.0f}\t{o:.0f}\t{a['pnl_usd_mean'] / o:.3f}\t{imb / o:.3f}")


if __name__ == "__main__":
    main()

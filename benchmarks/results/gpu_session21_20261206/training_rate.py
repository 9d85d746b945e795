"""When the sampled policy's training PnL stops rising, per run of session 21: from NAME_curve.tsv (about 60 rows a
run), the cumulative training PnL's rate per 1,000 env steps between rows, the run's final rate (the median of the
last 15 intervals) and the first row from which the rate is 90 % of it. The sampled policy is not the greedy one the
evaluation plays; this dates the learning, it does not score it. BENCHMARKS.md, "The observation standardised on
the GPU host", reads its output (training_rate.txt). A folder as the argument reads that folder's runs instead
(session 23: ../gpu_session23_20261206/training_rate.txt). A curve row whose env steps did not advance (a run's last
update can share its payload's count with the row before) is left out.

cd benchmarks/results/gpu_session21_20261206 && python training_rate.py > training_rate.txt
cd benchmarks/results/gpu_session21_20261206 && python training_rate.py ../gpu_session23_20261206 > ../gpu_session23_20261206/training_rate.txt
"""

from __future__ import annotations

import csv
import glob
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    print("run\tfinal_usd_per_1000_env_steps\tupdate_at_90pct\tenv_steps_at_90pct_M")
    folder = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE
    for path in sorted(glob.glob(str(folder / "call*" / "*_curve.tsv")), key=lambda p: Path(p).name):
        rows = list(csv.DictReader(open(path), delimiter="\t"))
        step, pnl, env = (np.array([float(r[k]) for r in rows]) for k in ("step", "pnl_cum_usd", "env_steps"))
        new = np.r_[True, np.diff(env) > 0]
        step, pnl, env = step[new], pnl[new], env[new]
        rate = np.diff(pnl) / np.diff(env) * 1000
        final = float(np.median(rate[-15:]))
        first = int(np.argmax(rate >= 0.9 * final)) + 1
        print(f"{Path(path).name.split('_')[0]}\t{final:.1f}\t{step[first]:.0f}\t{env[first] / 1e6:.0f}")


if __name__ == "__main__":
    main()

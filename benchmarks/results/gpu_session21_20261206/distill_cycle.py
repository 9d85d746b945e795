"""The distillation loss's cycle against the policy lag, in every GPU-host run whose per-update diagnostics are kept
(sessions 17, 18, 20, 21, 22 and 23). Per run, from update 3,000 on: the median policy lag, the lag (in updates, 40-400) at
which the autocorrelation of l_distill peaks once a 501-update moving average is taken off, that peak's height, the
detrended l_distill's standard deviation (the cycle's amplitude), the updates above 0.2 (the spikes that
learning_cycles.py counts), and an actor's round: the median updates from one payload of a rollout actor to its
next (a payload's steps carry its worker_index, which session 17 did not keep; a new payload starts where it
changes). BENCHMARKS.md, "The observation standardised on the GPU host", reads its output (distill_cycle.txt).

cd benchmarks/results/gpu_session21_20261206 && python distill_cycle.py > distill_cycle.txt
"""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent.parent
RUNS = (
    "gpu_session17_20261205/call3/r/*_updates.tsv.gz",
    "gpu_session18_20261206/call*/r/*_updates.tsv.gz",
    "gpu_session20_20261206/call*/*_updates.tsv.gz",
    "gpu_session21_20261206/call*/*_updates.tsv.gz",
    "gpu_session22_20261206/call*/*_updates.tsv.gz",
    "gpu_session23_20261206/call*/*_updates.tsv.gz",
)
FROM_UPDATE, TREND, LAGS = 3000, 501, range(40, 401)


def actor_round(worker: np.ndarray) -> float:
    starts = np.flatnonzero(np.diff(worker) != 0) + 1
    gaps = [np.diff(starts[worker[starts] == w]) for w in np.unique(worker[starts])]
    return float(np.median(np.concatenate(gaps)))


def cycle(path: str) -> tuple[float, int, float, float, int, float]:
    u = np.genfromtxt(path, names=True, delimiter="\t")
    keep = u["step"] > FROM_UPDATE
    y = u["l_distill"][keep]
    x = (y - np.convolve(y, np.ones(TREND) / TREND, mode="same"))[TREND // 2 : -(TREND // 2)]
    acf = {k: float(np.dot(x[:-k], x[k:]) / np.dot(x, x)) for k in LAGS}
    peak = max(acf, key=acf.get)
    lag = float(np.median(u["policy_lag"][keep]))
    rnd = actor_round(u["worker_index"][keep]) if "worker_index" in u.dtype.names else float("nan")
    return lag, peak, acf[peak], float(x.std()), int((y > 0.2).sum()), rnd


def main() -> None:
    print(
        "run\tpolicy_lag_median\tcycle_updates\tacf_at_cycle\tl_distill_sd_detrended\tupdates_above_0.2\tactor_round_updates"
    )
    for pattern in RUNS:
        for path in sorted(glob.glob(str(RESULTS / pattern))):
            lag, peak, r, sd, above, rnd = cycle(path)
            name = f"{Path(path).relative_to(RESULTS).parts[0]}/{Path(path).name.split('_')[0]}"
            print(f"{name}\t{lag:.0f}\t{peak}\t{r:.2f}\t{sd:.4f}\t{above}\t{rnd:.0f}")


if __name__ == "__main__":
    main()

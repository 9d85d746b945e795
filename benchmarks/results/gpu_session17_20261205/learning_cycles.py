"""Session 17's two readings of a run's per-update diagnostics (diag.jsonl, or the per-update .tsv(.gz) that
s17_stagger.sh keeps on the GPU host):

- `phase FILE... --period P`: the share of the variance of entropy and l_distill (second half of the run) that the
  update's phase in a cycle of P updates explains (P = 62.5 on the box's cpu sizing: one rollout worker of 64 books
  x 16 steps and 1,000-step episodes, so one episode every 62.5 updates);
- `spikes FILE...`: the updates whose l_distill exceeds 0.2 (the GPU host's runs sit near 0.12), grouped into
  spikes (gaps <= 50 updates), their spacing, the policy lag inside and outside them, and where the run's last
  update (its newest checkpoint) falls.

python benchmarks/results/gpu_session17_20261205/learning_cycles.py spikes benchmarks/results/gpu_session17_20261205/call3/r/S*_updates.tsv.gz
"""

from __future__ import annotations

import argparse
import json

import numpy as np

KEYS = ("step", "entropy", "l_distill", "policy_lag")


def load(path: str) -> dict[str, np.ndarray]:
    if path.endswith((".tsv", ".tsv.gz")):
        a = np.genfromtxt(path, names=True, delimiter="\t")
        return {k: np.asarray(a[k], float) for k in KEYS}
    rows = [json.loads(line) for line in open(path) if line.strip()]
    rows = [r for r in rows if "step" in r and "l_distill" in r]
    return {k: np.array([r[k] for r in rows], float) for k in KEYS}


def phase(paths: list[str], period: float) -> None:
    for path in paths:
        d = load(path)
        half = len(d["step"]) // 2
        ph = ((d["step"][half:] % period) / period * 10).astype(int)
        out = []
        for key in ("entropy", "l_distill"):
            x = d[key][half:]
            means = np.array([x[ph == k].mean() for k in range(10)])
            out.append(f"{key} {means.var() / x.var():.3f}")
        print(f"{path}: {len(d['step'])} updates; variance explained by the phase in {period} updates: " + ", ".join(out))


def spikes(paths: list[str]) -> None:
    for path in paths:
        d = load(path)
        st, ld, lag = d["step"], d["l_distill"], d["policy_lag"]
        late = st > 3000
        hot = late & (ld > 0.2)
        groups: list[list[float]] = []
        for x in st[hot]:
            if groups and x - groups[-1][-1] <= 50:
                groups[-1].append(x)
            else:
                groups.append([x])
        gaps = np.diff([g[0] for g in groups])
        regular = gaps[gaps < 300]
        calm = late & (ld < 0.15)
        print(
            f"{path}: {len(st)} updates; {len(groups)} spikes after update 3,000 ({hot.sum()} updates with l_distill"
            f" > 0.2), spaced {np.median(regular):.0f} updates (median of the gaps < 300; {len(regular)} of"
            f" {len(gaps)}); policy lag median {np.median(lag[hot]):.0f} in them, {np.median(lag[calm]):.0f} outside;"
            f" the last update: l_distill {ld[-1]:.3f}, entropy {d['entropy'][-1]:.3f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("phase", "spikes"))
    ap.add_argument("files", nargs="+")
    ap.add_argument("--period", type=float, default=62.5)
    a = ap.parse_args()
    phase(a.files, a.period) if a.what == "phase" else spikes(a.files)


if __name__ == "__main__":
    main()

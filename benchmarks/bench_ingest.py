"""Ingest speed on one core: every LOBSTER sample file and every Binance capture into a fresh cache.

    python benchmarks/bench_ingest.py [--repeats 3] [--json PATH]

Each LOBSTER zip is ingested alone (`lobsim_env.data.lobster.ingest`: load and validate, convert, hash, write),
each Binance market and symbol with its files together, as the CLI does (a capture across midnight is one stream);
the figure is the best of `--repeats` wall-clock runs into a new temporary cache, the process pinned to one core.
The targets (issue 39): at least 2M LOBSTER messages/s per core; every Binance file of the shared captures in
under 2 s. The last line: `lobster_msgs_per_s_min=<x> lobster_msgs_per_s_max=<y> binance_max_file_s=<z>`, the
Binance figure being the largest of each group's seconds divided by its files.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from lobsim_env.data import binance, lobster  # noqa: E402
from lobsim_env.lobster.samples import data_dir  # noqa: E402

BINANCE = Path(os.environ.get("FOXHUNT_BINANCE_DATA") or data_dir().parent / "binance")


def best_of(repeats: int, ingest, paths: list[Path]) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            done = ingest(paths, Path(tmp))
            best = min(best, time.perf_counter() - t)
            n = sum(m.n_events for m, _ in done)
    return best, n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    rows = []
    for p in sorted(data_dir().glob("LOBSTER_SampleFile_*.zip")):
        s, n = best_of(args.repeats, lobster.ingest, [p])
        rows.append({"source": "lobster", "files": [p.name], "messages": n, "seconds": s})
    groups: dict[str, list[Path]] = {}
    for p in sorted(BINANCE.glob("*.gz")):
        groups.setdefault(p.name.rsplit("_", 1)[0], []).append(p)
    for paths in groups.values():
        s, n = best_of(args.repeats, binance.ingest, paths)
        rows.append({"source": "binance", "files": [p.name for p in paths], "messages": n, "seconds": s})
    print(f"{'files':<58} {'messages':>10} {'seconds':>8} {'messages/s':>11}")
    for r in rows:
        r["msgs_per_s"] = r["messages"] / r["seconds"]
        r["seconds_per_file"] = r["seconds"] / len(r["files"])
        print(f"{' + '.join(r['files']):<58} {r['messages']:>10,} {r['seconds']:>8.3f} {r['msgs_per_s']:>11,.0f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    lob = [r["msgs_per_s"] for r in rows if r["source"] == "lobster"]
    bn = [r["seconds_per_file"] for r in rows if r["source"] == "binance"]
    nan = float("nan")
    print(
        f"lobster_msgs_per_s_min={min(lob, default=nan):.0f} lobster_msgs_per_s_max={max(lob, default=nan):.0f} "
        f"binance_max_file_s={max(bn, default=nan):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

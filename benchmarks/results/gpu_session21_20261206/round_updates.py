"""Rewrites per-update diagnostic files (NAME_updates.tsv.gz, kept by spike_check.sh) with every float at 4
significant digits and integers as integers, gzip level 9: about 3.5x smaller, so that the repository's working tree
and the device bundle still fit the 64 MiB that may travel to the GPU machine. Session 21 applied it to its own files
and to sessions 18 and 20's (the full-precision originals are in git history, before commit that did so).

python benchmarks/results/gpu_session21_20261206/round_updates.py FILE.tsv.gz ...
"""

from __future__ import annotations

import gzip
import os
import sys


def rounded(value: str) -> str:
    try:
        x = float(value)
    except ValueError:
        return value  # the header's names, or "None"
    return str(int(x)) if x.is_integer() and abs(x) < 1e9 else f"{x:.4g}"


def main(paths: list[str]) -> None:
    for path in paths:
        with gzip.open(path, "rt") as f:
            rows = f.read().splitlines()
        out = [rows[0]] + ["\t".join(rounded(v) for v in row.split("\t")) for row in rows[1:]]
        before = os.path.getsize(path)
        tmp = path + ".tmp"
        with gzip.open(tmp, "wt", compresslevel=9) as f:
            f.write("\n".join(out) + "\n")
        os.replace(tmp, path)
        print(f"{path}: {before:,} -> {os.path.getsize(path):,} bytes, {len(out) - 1:,} updates")


if __name__ == "__main__":
    main(sys.argv[1:])

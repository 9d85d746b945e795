"""python -m lobsim_env.data ingest PATH... --out DIR | check DIR | ls DIR (docs/data.md).

- ingest: every file (or every file under a folder) that a source claims, into the cache DIR: one folder a day,
  written whole or not at all; a day already there from the same files is left alone. Several LOBSTER files of
  one day (the samples give AMZN and GOOG at 1, 5 and 10 levels): the deepest is kept, the others named. Last
  line: `days=<n> messages=<m> messages_per_s=<x>`.
- check: every day replayed and its rebuilt book compared with the source's own (LOBSTER's orderbook rows;
  Binance's bookTicker and the depth after each diff; Tardis and Databento: the book rebuilt from the events).
  Last line: `days=<n> rows=<r> unexplained=<u>`; exit 1 when a row differs for a reason not documented.
- ls: the days of a cache, one line each.
Exit codes: 0 fine; 1 check found unexplained rows; 2 bad input (the message names the file and the fix).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

from lobsim_env.data import layout
from lobsim_env.data.layout import DataError
from lobsim_env.validation import InputError

SOURCES = ("lobster", "binance", "tardis", "databento")
"""The source modules (lobsim_env.data.<name>), each with claims(path), ingest(paths, out, levels=) and check(day)."""


def source(name: str):
    return importlib.import_module(f"lobsim_env.data.{name}")


def _files(paths: list[str]) -> tuple[dict[str, list[Path]], list[Path]]:
    """The files of `paths` by source, and the files under a folder that no source claims (skipped). A file given
    by name that no source claims is a DataError."""
    by_source: dict[str, list[Path]] = {}
    skipped = []
    for given in paths:
        p = Path(given)
        if not p.exists():
            raise DataError(f"{p}: no such file or folder")
        found = sorted(q for q in p.rglob("*") if q.is_file()) if p.is_dir() else [p]
        for f in found:
            name = next((s for s in SOURCES if source(s).claims(f)), None)
            if name is None:
                if not p.is_dir():
                    raise DataError(
                        f"{f}: no source reads this file (LOBSTER zip or *_message_<L>.csv; Binance capture "
                        "<market>_<symbol>_<YYYYMMDD>.gz; Tardis incremental_book_L2 / trades CSV; Databento .dbn)"
                    )
                skipped.append(f)
                continue
            by_source.setdefault(name, []).append(f)
    return by_source, skipped


def ingest(args: argparse.Namespace) -> int:
    out = Path(args.out)
    start = time.perf_counter()
    by_source, skipped = _files(args.paths)
    if not by_source:
        raise DataError(f"no source file among {args.paths}; docs/data.md lists what each source reads")
    for f in skipped:
        print(f"skipped {f}: no source reads it", file=sys.stderr)
    done = []
    for name, files in by_source.items():
        mod = source(name)
        if name == "lobster":
            files, left_out = mod.deepest_per_day(files)
            for line in left_out:
                print(f"skipped {line}", file=sys.stderr)
        kwargs = {"levels": args.levels} if args.levels is not None else {}
        if name in ("tardis", "databento"):  # the sources that do not give their contract
            kwargs |= {k: v for k in ("tick_size", "lot_size") if (v := getattr(args, k)) is not None}
        for m, written in mod.ingest(files, out, **kwargs):
            done.append(m)
            what = "written" if written else "already in the cache (same files)"
            repairs = f", repaired {m.repairs}" if m.repairs else ""
            print(f"{m.key}: {m.n_events:,} messages, {m.depth} {m.levels} levels, {what}{repairs}", flush=True)
    seconds = time.perf_counter() - start
    n = sum(m.n_events for m in done)
    print(f"days={len(done)} messages={n} messages_per_s={n / max(seconds, 1e-9):.0f}")
    return 0


def check(args: argparse.Namespace) -> int:
    days = layout.list_days(args.dir)
    if not days:
        raise DataError(f"{args.dir}: a cache with no days; python -m lobsim_env.data ingest PATH... --out DIR")
    rows = unexplained = 0
    for m in days:
        day = layout.open_day(layout.day_dir(args.dir, m))
        rep = source(m.source).check(day)
        rows += rep.rows
        unexplained += rep.unexplained
        explained = ", ".join(f"{k} {v:,}" for k, v in rep.explained.items()) or "none"
        print(
            f"{m.key}: {rep.rows:,} rows, {rep.matched:,} match, explained: {explained}, "
            f"unexplained {rep.unexplained:,}",
            flush=True,
        )
        for line in rep.first:
            print(f"  {line}")
    print(f"days={len(days)} rows={rows} unexplained={unexplained}")
    return 1 if unexplained else 0


def ls(args: argparse.Namespace) -> int:
    days = layout.list_days(args.dir)
    head = f"{'day':<40} {'source':<9} {'depth':<5} {'levels':>6} {'messages':>10} {'tick':>8} {'lot':>8}"
    print(f"{head}  first - last (UTC)")
    for m in days:
        first, last = (time.strftime("%H:%M:%S", time.gmtime(t / 1e9)) for t in (m.first_ts, m.last_ts))
        print(
            f"{m.key:<40} {m.source:<9} {m.depth:<5} {m.levels:>6} {m.n_events:>10,} {m.tick_size:>8g} "
            f"{m.lot_size:>8g}  {first} - {last}{'  (continues ' + m.continues + ')' if m.continues else ''}"
        )
    print(f"days={len(days)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lobsim_env.data", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("ingest", help="source files into a cache of days")
    i.add_argument("paths", nargs="+", metavar="PATH", help="files, or folders to search")
    i.add_argument("--out", required=True, metavar="DIR", help="the cache (made if missing)")
    i.add_argument(
        "--levels", type=int, default=None, help="book levels a side to keep (default: the source's; 10 for L2)"
    )
    for flag in ("--tick-size", "--lot-size"):
        i.add_argument(flag, type=float, default=None, help="Tardis, Databento: the contract's (default: inferred)")
    c = sub.add_parser("check", help="replay every day against the source's own book")
    c.add_argument("dir", metavar="DIR")
    s = sub.add_parser("ls", help="list the days of a cache")
    s.add_argument("dir", metavar="DIR")
    args = p.parse_args(argv)
    if getattr(args, "levels", None) is not None and args.levels < 1:
        print(f"error: --levels={args.levels} must be >= 1", file=sys.stderr)
        return 2
    for k in ("tick_size", "lot_size"):
        if (v := getattr(args, k, None)) is not None and not (v > 0 and v < float("inf")):
            print(f"error: --{k.replace('_', '-')}={v} must be a number > 0", file=sys.stderr)
            return 2
    try:
        return {"ingest": ingest, "check": check, "ls": ls}[args.command](args)
    except (InputError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Rebuild LOBSTER's visible book from its message file, and check it against the paired orderbook file.

Usage: `python -m lobsim_env.lobster.reconstruct PATH [--check]` (PATH a LOBSTER zip or *_message_<L>.csv). Prints
messages per second; with --check the match statistics. Exit 0 when every difference is a documented
exception, 1 when some row differs for any other reason, 2 on a malformed file. Semantics: docs/lobster.md.

Each message changes at most one visible level by a signed size: a submission (type 1) adds shares, a partial
cancel, delete or visible execution (2, 3, 4) removes them, a hidden execution (5), a cross (6, an auction
trade whose executions the file holds already) or a halt (7) changes nothing. A new price inserts a level
(the deepest one drops out of view); a level emptied to zero is removed and everything behind it moves up
one place, so the deepest visible level becomes whatever rested just beyond the file's depth. That one price
and size is the only thing the messages cannot tell, because the file holds only events inside the visible
range; it is taken from the orderbook file and flagged.

`replay` applies message k to the book after message k-1 for every k independently, using the orderbook
file's row k-1 as that book: vectorised in numpy, or one C loop over the rows where the optional compiled
module is built (lobsim_env/lobster/_lobster_fast.c; identical results, tests/test_lobster_fast.py).
`replay_sequential` carries its own state from the opening book, one message at a time, and is the plain
reference; where no row differs for an unexplained reason the two are identical row by row
(tests/test_lobster_reconstruct.py), since by induction every state the sequential replay carries equals the file's row.
"""

from __future__ import annotations

import argparse
import statistics
import struct
import sys
import time
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lobsim_env.lobster import files
from lobsim_env.lobster.files import DUMMY_ASK_PRICE, DUMMY_BID_PRICE, LobsterDay, LobsterFormatError, load_day

# What message k did to the visible book (ReplayResult.effect).
NO_EFFECT = 0  # hidden execution, cross (type 6), halt
SIZE_UP = 1  # submission at a visible price
INSERT = 2  # submission at a new price inside the visible range
SIZE_DOWN = 3  # cancel / delete / execution leaving shares at the level
REMOVE = 4  # ... emptying the level: levels behind move up, the deepest is revealed from beyond the depth
BEYOND_DEPTH = 5  # submission or removal at a price behind the deepest visible level: invisible
INCONSISTENT = 6  # removal of more shares than the level shows, or at a price with no visible level

# Documented exception kinds (CheckReport.exceptions); docs/lobster.md says why each cannot be determined.
OPENING_ROW = "opening_row"
REVEALED_LEVEL = "revealed_level"


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """The visible book after every message, rebuilt from the messages."""

    book: np.ndarray
    """int64[M, 4*levels], LOBSTER's layout (ask_p1, ask_s1, bid_p1, bid_s1, ask_p2, ...)."""
    undetermined: np.ndarray
    """bool[M, 4*levels]: entries the messages cannot determine (the level revealed from beyond the depth
    after a level empties; all of row 0, the opening book). They hold the orderbook file's values."""
    effect: np.ndarray
    """int8[M]: what each message did to the visible book (NO_EFFECT, SIZE_UP, INSERT, ... above)."""
    level: np.ndarray
    """int8[M]: 0-based level of the message's side it touched in the book before it; -1 for none."""


@dataclass(frozen=True, kw_only=True)
class RowDifference:
    row: int
    """1-based, as the line number in the orderbook file."""
    message: tuple[int, ...]
    """The message of that row: (time_ns, type, order_id, size, price, direction)."""
    replayed: tuple[int, ...]
    file: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """Replay against the orderbook file. A level is one (row, side, depth) price-and-size pair."""

    rows: int
    levels: int
    rows_matched: int
    """Rows whose every entry was determined by the messages and equals the file."""
    levels_matched: int
    exceptions: dict[str, int]
    """Documented exception kind -> rows whose only differences-in-principle are of that kind."""
    exception_levels: dict[str, int]
    unexplained_rows: int
    unexplained_levels: int
    first_unexplained: list[RowDifference] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.unexplained_rows == 0


def _require_book(day: LobsterDay) -> np.ndarray:
    if day.book is None:
        raise LobsterFormatError(
            f"{day.source}: no orderbook file was loaded; the replay needs it for the opening book and the "
            "levels revealed from beyond the depth (put the *_orderbook_<L>.csv beside the message file)"
        )
    return day.book


# ---------------------------------------------------------------------------------------- sequential replay


def _apply(
    prices: list[int], sizes: list[int], worse: int, kind: int, price: int, size: int, levels: int
) -> tuple[int, int]:
    """Apply one message to one side (lists, best first, only occupied levels). Returns (effect, level).

    `worse` is +1 on the ask side (higher is worse), -1 on the bid side.
    """
    if kind not in (1, 2, 3, 4):
        return NO_EFFECT, -1
    key = price * worse
    j = 0
    while j < len(prices) and prices[j] * worse < key:
        j += 1
    here = j < len(prices) and prices[j] == price
    if kind == 1:
        if here:
            sizes[j] += size
            return SIZE_UP, j
        if j >= levels:
            return BEYOND_DEPTH, -1
        prices.insert(j, price)
        sizes.insert(j, size)
        del prices[levels:], sizes[levels:]
        return INSERT, j
    if not here:
        return (BEYOND_DEPTH, -1) if j >= levels else (INCONSISTENT, -1)
    if sizes[j] > size:
        sizes[j] -= size
        return SIZE_DOWN, j
    if sizes[j] < size:
        return INCONSISTENT, -1
    del prices[j], sizes[j]
    return REMOVE, j


def _side_lists(row: np.ndarray, levels: int) -> tuple[list[int], list[int], list[int], list[int]]:
    ap, asz, bp, bsz = ([int(v) for v in row[c::4]] for c in range(4))
    na = sum(p != DUMMY_ASK_PRICE for p in ap)
    nb = sum(p != DUMMY_BID_PRICE for p in bp)
    return ap[:na], asz[:na], bp[:nb], bsz[:nb]


def _write_row(out: np.ndarray, ap: list[int], asz: list[int], bp: list[int], bsz: list[int]) -> None:
    levels = out.shape[0] // 4
    out[0::4] = ap + [DUMMY_ASK_PRICE] * (levels - len(ap))
    out[1::4] = asz + [0] * (levels - len(asz))
    out[2::4] = bp + [DUMMY_BID_PRICE] * (levels - len(bp))
    out[3::4] = bsz + [0] * (levels - len(bsz))


def opening_book(day: LobsterDay) -> tuple[np.ndarray, np.ndarray]:
    """The visible book before message 1: the file's row 1 with message 1 undone.

    Returns (row int64[4L], unknown bool[4L]); undoing a submission that filled the last visible place, or
    a removal that emptied a level, leaves the deepest level of that side unknown (shown as empty).
    """
    book = _require_book(day)
    levels = day.levels
    row = book[0].copy()
    unknown = np.zeros(4 * levels, bool)
    kind, price, size, d = int(day.event_type[0]), int(day.price[0]), int(day.size[0]), int(day.direction[0])
    if kind not in (1, 2, 3, 4):
        return row, unknown
    ap, asz, bp, bsz = _side_lists(row, levels)
    prices, sizes, worse, col = (ap, asz, 1, 0) if d == -1 else (bp, bsz, -1, 2)
    full = len(prices) == levels
    if kind == 1:  # undo a submission: take its shares away again
        if price in prices:
            j = prices.index(price)
            sizes[j] -= size
            if sizes[j] <= 0:
                del prices[j], sizes[j]
                unknown[col + 4 * (levels - 1) : col + 4 * (levels - 1) + 2] = full
    else:  # undo a removal: put its shares back
        if price in prices:
            sizes[prices.index(price)] += size
        else:
            j = sum(p * worse < price * worse for p in prices)
            if j < levels:
                prices.insert(j, price)
                sizes.insert(j, size)
                del prices[levels:], sizes[levels:]
    _write_row(row, ap, asz, bp, bsz)
    return row, unknown


def replay_sequential(day: LobsterDay, *, stop: int | None = None) -> ReplayResult:
    """Reference replay, one message at a time from the opening book, over the first `stop` messages.

    Its own state is carried forward; only a level revealed from beyond the depth is read from the file.
    """
    book = _require_book(day)
    levels = day.levels
    m = day.n_messages if stop is None else min(stop, day.n_messages)
    out = np.empty((m, 4 * levels), np.int64)
    undetermined = np.zeros((m, 4 * levels), bool)
    effect = np.zeros(m, np.int8)
    touched = np.full(m, -1, np.int8)
    row0, _ = opening_book(day)
    ap, asz, bp, bsz = _side_lists(row0, levels)
    kinds, prices_, sizes_, dirs = (a.tolist() for a in (day.event_type, day.price, day.size, day.direction))
    for k in range(m):
        ask = dirs[k] == -1
        prices, sizes = (ap, asz) if ask else (bp, bsz)
        e, j = _apply(prices, sizes, 1 if ask else -1, kinds[k], prices_[k], sizes_[k], levels)
        effect[k], touched[k] = e, j
        if e == REMOVE and len(prices) == levels - 1:
            # The deepest place was full before: what moves into it rests beyond the depth, so read it.
            col = (0 if ask else 2) + 4 * (levels - 1)
            undetermined[k, col : col + 2] = True
            p, s = int(book[k, col]), int(book[k, col + 1])
            if s > 0:
                prices.append(p)
                sizes.append(s)
        _write_row(out[k], ap, asz, bp, bsz)
    undetermined[0] = True
    return ReplayResult(book=out, undetermined=undetermined, effect=effect, level=touched)


# ---------------------------------------------------------------------------------------- vectorised replay


def replay(day: LobsterDay) -> ReplayResult:
    """Rebuild the book after every message, each from the file's row before it (see the module docstring).

    The compiled loop where it is built, else numpy: identical results (tests/test_lobster_fast.py)."""
    return _replay_numpy(day) if files._C is None else _replay_compiled(day)


def _replay_compiled(day: LobsterDay) -> ReplayResult:
    """_replay_numpy's rule, message k applied to file row k-1, as one C loop over the rows (faster: each row is
    copied once and changed in place, where numpy makes a dozen passes over [M, L])."""
    book = np.ascontiguousarray(_require_book(day))
    m, levels = day.n_messages, day.levels
    out = np.empty_like(book)
    undetermined = np.zeros(book.shape, bool)
    effect, touched = np.empty(m, np.int8), np.empty(m, np.int8)
    opening, _ = opening_book(day)
    kind, direction = (np.ascontiguousarray(a, np.int8) for a in (day.event_type, day.direction))
    price, size = (np.ascontiguousarray(a, np.int64) for a in (day.price, day.size))
    files._C.replay(m, levels, book, opening, kind, price, size, direction, out, undetermined, effect, touched)
    return ReplayResult(book=out, undetermined=undetermined, effect=effect, level=touched)


def _replay_numpy(day: LobsterDay) -> ReplayResult:
    """For every k at once: message k applied to the orderbook file's row k-1 (the opening book for k = 0)."""
    book = _require_book(day)
    m, levels = day.n_messages, day.levels
    width = 4 * levels
    out = np.empty((m, width), np.int64)
    out[0], _ = opening_book(day)
    out[1:] = book[:-1]  # the book before each message; rewritten in place into the book after it
    flat = out.reshape(-1)

    kind, price, size = day.event_type, day.price, day.size
    ask = day.direction == -1
    # Flat index of the message side's best price in its row; level i is 4*i further on.
    base = np.arange(0, m * width, width) + np.where(ask, 0, 2)
    # Occupied levels strictly better than the message's price (lower asks, higher bids). Levels are
    # ordered and empty levels' dummy prices lie beyond every real one, so the comparisons of a row read
    # True...True False...False: count them eight at a time with popcount.
    better = np.zeros((m, -(-levels // 8) * 8), bool)
    np.greater(out[:, 2::4], price[:, None], out=better[:, :levels])
    np.copyto(better[:, :levels], out[:, 0::4] < price[:, None], where=ask[:, None])
    ahead = np.bitwise_count(better.view(np.uint64)).sum(axis=1, dtype=np.int64)
    at = np.minimum(ahead, levels - 1)
    at_idx = base + 4 * at
    here = (ahead < levels) & (np.take(flat, at_idx) == price)
    size_at = np.take(flat, at_idx + 1)
    last_occupied = np.take(flat, base + (4 * (levels - 1) + 1)) > 0

    adds = kind == 1
    dels = (kind >= 2) & (kind <= 4)
    effect = np.zeros(m, np.int8)
    effect[adds & here] = SIZE_UP
    effect[adds & ~here] = INSERT
    effect[dels & here] = SIZE_DOWN
    effect[dels & here & (size_at == size)] = REMOVE
    effect[dels & (~here | (size_at < size))] = INCONSISTENT
    effect[(adds | dels) & (ahead >= levels)] = BEYOND_DEPTH  # behind every level of a full side
    touched = np.where((effect >= SIZE_UP) & (effect <= REMOVE), at, -1).astype(np.int8)

    # Size changes in place (a zero change on every other row keeps this one unmasked pass).
    delta = np.where(effect == SIZE_UP, size, 0) - np.where(effect == SIZE_DOWN, size, 0)
    flat[at_idx + 1] += delta

    # Inserted and removed levels: each level behind the touched one takes its neighbour's price and size
    # (after an insert from the level in front, after a removal from the level behind). Only those
    # (row, level) cells move: row r moves levels - 1 - at[r] of them.
    shift = np.flatnonzero((effect == INSERT) | (effect == REMOVE))
    ins = effect[shift] == INSERT
    count = levels - 1 - at[shift]
    starts = np.cumsum(count) - count
    rows = np.repeat(np.arange(shift.size), count)
    k = np.arange(rows.size) - starts[rows]  # 0, 1, ... within a row
    lvl = np.where(ins[rows], levels - 1 - k, at[shift][rows] + k)  # insert: back to front
    cells = base[shift][rows] + 4 * lvl
    src = cells + np.where(ins[rows], -4, 4)
    moved_p, moved_s = np.take(flat, src), np.take(flat, src + 1)
    np.put(flat, cells, moved_p)
    np.put(flat, cells + 1, moved_s)
    inserted = shift[ins]
    np.put(flat, at_idx[inserted], price[inserted])
    np.put(flat, at_idx[inserted] + 1, size[inserted])
    # After a removal the deepest place holds what rested just beyond the depth: unknown to the messages
    # (read from the file) when that place was occupied before; empty when it was not.
    removed = shift[~ins]
    reveal = removed[last_occupied[removed]]
    emptied = removed[~last_occupied[removed]]
    deep_col = np.where(ask, 0, 2) + 4 * (levels - 1)
    np.put(flat, base[reveal] + 4 * (levels - 1), book[reveal, deep_col[reveal]])
    np.put(flat, base[reveal] + 4 * (levels - 1) + 1, book[reveal, deep_col[reveal] + 1])
    np.put(flat, base[emptied] + 4 * (levels - 1), np.where(ask[emptied], DUMMY_ASK_PRICE, DUMMY_BID_PRICE))
    np.put(flat, base[emptied] + 4 * (levels - 1) + 1, 0)

    undetermined = np.zeros((m, width), bool)
    undetermined[reveal, deep_col[reveal]] = True
    undetermined[reveal, deep_col[reveal] + 1] = True
    undetermined[0] = True
    return ReplayResult(book=out, undetermined=undetermined, effect=effect, level=touched)


# ------------------------------------------------------------------------------------------------ the check


def check(day: LobsterDay, result: ReplayResult | None = None, *, show: int = 5) -> CheckReport:
    """Compare the replayed book with the orderbook file, row by row and level by level."""
    book = _require_book(day)
    res = replay(day) if result is None else result
    m, levels = book.shape[0], day.levels
    differs = res.book != book
    # Per level: a (price, size) pair; undetermined if either entry is.
    lvl_diff = differs[:, 0::2] | differs[:, 1::2]
    lvl_und = res.undetermined[:, 0::2] | res.undetermined[:, 1::2]
    bad_lvl = lvl_diff & ~lvl_und
    bad_row = bad_lvl.any(axis=1)
    und_row = lvl_und.any(axis=1)
    opening = np.zeros(m, bool)
    opening[:1] = True
    revealed = und_row & ~bad_row & ~opening
    exceptions = {OPENING_ROW: int((opening & ~bad_row).sum()), REVEALED_LEVEL: int(revealed.sum())}
    exception_levels = {
        OPENING_ROW: int(lvl_und[:1].sum()),
        REVEALED_LEVEL: int((lvl_und & ~opening[:, None]).sum()),
    }
    first = []
    for k in np.flatnonzero(bad_row)[:show]:
        first.append(
            RowDifference(
                row=int(k) + 1,
                message=(
                    int(day.time_ns[k]),
                    int(day.event_type[k]),
                    int(day.order_id[k]),
                    int(day.size[k]),
                    int(day.price[k]),
                    int(day.direction[k]),
                ),
                replayed=tuple(int(v) for v in res.book[k]),
                file=tuple(int(v) for v in book[k]),
            )
        )
    return CheckReport(
        rows=m,
        levels=m * 2 * levels,
        rows_matched=int((~bad_row & ~und_row).sum()),
        levels_matched=int((~lvl_diff & ~lvl_und).sum()),
        exceptions=exceptions,
        exception_levels=exception_levels,
        unexplained_rows=int(bad_row.sum()),
        unexplained_levels=int(bad_lvl.sum()),
        first_unexplained=first,
    )


# ------------------------------------------------------------------------------------------ throughput + CLI


def throughput(path: str | Path, *, repeats: int = 3) -> float:
    """Messages per second of load_day + replay on `path` (the median of `repeats` runs, one thread)."""
    rates = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        day = load_day(path)
        replay(day)
        rates.append(day.n_messages / (time.perf_counter() - t0))
    return statistics.median(rates)


def profile(path: str | Path, *, repeats: int = 5) -> dict[str, float]:
    """Median seconds of each stage of load_day + replay on `path`, over `repeats` runs (one thread).

    Keys: files.LOAD_STAGES (timed inside load_day itself), "replay", "total" (load_day + replay, timed
    whole), and for a zip "inflate": zlib alone on the members' compressed bytes, without zipfile's CRC
    check, the floor under the "read" stage. Shares between stages of one run are steadier than absolute
    times on a shared machine."""
    runs: list[dict[str, float]] = []
    for _ in range(max(1, repeats)):
        stages: dict[str, float] = {}
        t0 = time.perf_counter()
        day = load_day(path, stage_seconds=stages)
        t1 = time.perf_counter()
        replay(day)
        t2 = time.perf_counter()
        stages["replay"], stages["total"] = t2 - t1, t2 - t0
        if Path(path).suffix.lower() == ".zip":
            stages["inflate"] = _inflate_seconds(Path(path))
        runs.append(stages)
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def _inflate_seconds(path: Path) -> float:
    """Seconds the inflater load_day uses takes on every deflated member of the zip, and nothing else:
    libdeflate with its CRC-32 check where the compiled module finds it, else zlib without one."""
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        members = [i for i in zf.infolist() if i.compress_type == zipfile.ZIP_DEFLATED]
    streams = []
    for info in members:
        # The local header (30 bytes, then name and extra field) precedes the compressed stream.
        name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
        start = info.header_offset + 30 + name_len + extra_len
        streams.append((raw[start : start + info.compress_size], info))
    fast = files._fast_inflate()
    t0 = time.perf_counter()
    for stream, info in streams:
        if fast:
            files._C.inflate(stream, np.empty(info.file_size, np.uint8), info.CRC)
        else:
            zlib.decompress(stream, -15)
    return time.perf_counter() - t0


def _profile_report(stages: dict[str, float], n_messages: int) -> str:
    total = stages["total"]
    lines = [f"{'stage':<20}{'ms':>9}{'share':>8}"]
    for name, seconds in stages.items():
        lines.append(f"{name:<20}{seconds * 1e3:9.1f}{seconds / total:8.1%}")
    lines.append(f"messages/s (median total): {n_messages / total:,.0f}")
    return "\n".join(lines)


def _report(rep: CheckReport) -> str:
    pct = 100.0 / max(rep.rows, 1)
    lines = [
        f"rows     {rep.rows}: matched {rep.rows_matched} ({rep.rows_matched * pct:.2f}%), "
        f"documented exceptions {sum(rep.exceptions.values())}, unexplained {rep.unexplained_rows}",
        f"levels   {rep.levels}: matched {rep.levels_matched}, "
        f"documented exceptions {sum(rep.exception_levels.values())}, unexplained {rep.unexplained_levels}",
    ]
    for kind, n in rep.exceptions.items():
        lines.append(f"  exception {kind}: {n} rows, {rep.exception_levels[kind]} levels")
    for d in rep.first_unexplained:
        lines.append(f"  row {d.row} differs; message (time_ns, type, id, size, price, dir) {d.message}")
        lines.append(f"    replayed {d.replayed}")
        lines.append(f"    file     {d.file}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lobsim_env.lobster.reconstruct",
        description="Replay a LOBSTER day from its messages; with --check compare to its orderbook file.",
    )
    parser.add_argument("path", help="a LOBSTER zip, or a *_message_<L>.csv with its orderbook CSV beside it")
    parser.add_argument("--check", action="store_true", help="print match statistics against the orderbook")
    parser.add_argument("--levels", type=int, default=None, help="replay only the top LEVELS levels")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also print the median time of each stage over N runs"
    )
    args = parser.parse_args(argv)
    try:
        t0 = time.perf_counter()
        day = load_day(args.path, levels=args.levels)
        result = replay(day)
        seconds = time.perf_counter() - t0
    except (LobsterFormatError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(
        f"{day.ticker} {day.date} levels={day.levels}: {day.n_messages} messages in {seconds:.3f} s "
        f"(load + replay): {day.n_messages / seconds:,.0f} messages/s "
        f"({files.backend()})"
    )
    if args.profile > 0:
        print(_profile_report(profile(args.path, repeats=args.profile), day.n_messages))
    if not args.check:
        return 0
    rep = check(day, result)
    print(_report(rep))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Rebuild LOBSTER's visible book from its message file, and check it against the paired orderbook file.

Usage: `python -m lobsim_env.replay PATH [--check]` (PATH a LOBSTER zip or *_message_<L>.csv). Prints
messages per second; with --check the match statistics. Exit 0 when every difference is a documented
exception, 1 when some row differs for any other reason, 2 on a malformed file. Semantics: docs/lobster.md.

Each message changes at most one visible level by a signed size: a submission (type 1) adds shares, a partial
cancel, delete or visible execution (2, 3, 4) removes them, a hidden execution (5) or halt (7) changes
nothing. A new price inserts a level (the deepest one drops out of view); a level emptied to zero is removed
and everything behind it moves up one place, so the deepest visible level becomes whatever rested just
beyond the file's depth. That one price and size is the only thing the messages cannot tell, because the
file holds only events inside the visible range; it is taken from the orderbook file and flagged.

`replay` is vectorised: it applies message k to the book after message k-1 for every k at once, using the
orderbook file's row k-1 as that book. `replay_sequential` carries its own state from the opening book, one
message at a time, and is the plain reference; where no row differs for an unexplained reason the two are
identical row by row (tests/test_replay.py), since by induction every state the sequential replay carries
equals the file's row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lobsim_env.lobster import DUMMY_ASK_PRICE, DUMMY_BID_PRICE, LobsterDay, LobsterFormatError

# What message k did to the visible book (ReplayResult.effect).
NO_EFFECT = 0  # hidden execution, halt
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
        return INCONSISTENT, j
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
    """Rebuild the book after every message, all messages at once (see the module docstring)."""
    book = _require_book(day)
    m, levels = day.n_messages, day.levels
    row0, _ = opening_book(day)
    prev = np.empty_like(book)
    prev[0] = row0
    prev[1:] = book[:-1]

    ask = day.direction == -1
    # Order both sides the same way: key = price * worse grows away from the touch (empty levels last).
    worse = np.where(ask, 1, -1)[:, None]
    sp = np.where(ask[:, None], prev[:, 0::4], prev[:, 2::4])
    ss = np.where(ask[:, None], prev[:, 1::4], prev[:, 3::4])
    key = sp * worse
    mkey = (day.price[:, None] * worse)[:, 0]
    kind = day.event_type
    visible = (kind >= 1) & (kind <= 4)
    adds = kind == 1
    dels = visible & ~adds

    ahead = (key < mkey[:, None]).sum(axis=1)  # occupied levels better than the message's price
    at = np.minimum(ahead, levels - 1)
    here = (ahead < levels) & (np.take_along_axis(key, at[:, None], axis=1)[:, 0] == mkey)
    size_at = np.take_along_axis(ss, at[:, None], axis=1)[:, 0]
    occupied = (ss > 0).sum(axis=1)
    left = size_at - day.size

    effect = np.zeros(m, np.int8)
    effect[adds & here] = SIZE_UP
    effect[adds & ~here & (ahead < levels)] = INSERT
    effect[dels & here & (left > 0)] = SIZE_DOWN
    effect[dels & here & (left == 0)] = REMOVE
    beyond = ahead >= levels  # behind every visible level of a full side
    effect[visible & beyond] = BEYOND_DEPTH
    effect[dels & ((here & (left < 0)) | (~here & ~beyond))] = INCONSISTENT
    touched = np.where(np.isin(effect, (SIZE_UP, INSERT, SIZE_DOWN, REMOVE)), at, -1).astype(np.int8)

    # New side: out[i] = side[src[i]], shifted behind an inserted or removed level.
    idx = np.arange(levels)[None, :]
    ins = (effect == INSERT)[:, None]
    rem = (effect == REMOVE)[:, None]
    src = idx - (ins & (idx > at[:, None])) + (rem & (idx >= at[:, None]))
    src = np.minimum(src, levels - 1)
    new_p = np.take_along_axis(sp, src, axis=1)
    new_s = np.take_along_axis(ss, src, axis=1)
    rows = np.arange(m)
    up = np.isin(effect, (SIZE_UP, SIZE_DOWN))
    new_s[rows[up], at[up]] += np.where(adds[up], day.size[up], -day.size[up])
    new_p[rows[effect == INSERT], at[effect == INSERT]] = day.price[effect == INSERT]
    new_s[rows[effect == INSERT], at[effect == INSERT]] = day.size[effect == INSERT]
    # After a removal the deepest place comes from beyond the depth: from the file when the side was full,
    # else it must be empty.
    reveal = (effect == REMOVE) & (occupied == levels)
    gone = (effect == REMOVE) & (occupied < levels)
    col = np.where(ask, 0, 2) + 4 * (levels - 1)
    new_p[reveal, levels - 1] = book[reveal, col[reveal]]
    new_s[reveal, levels - 1] = book[reveal, col[reveal] + 1]
    new_p[gone, levels - 1] = np.where(ask[gone], DUMMY_ASK_PRICE, DUMMY_BID_PRICE)
    new_s[gone, levels - 1] = 0

    out = prev.copy()
    changed = effect != NO_EFFECT
    a = ask & changed
    b = ~ask & changed
    out[a, 0::4] = new_p[a]
    out[a, 1::4] = new_s[a]
    out[b, 2::4] = new_p[b]
    out[b, 3::4] = new_s[b]
    undetermined = np.zeros_like(book, dtype=bool)
    undetermined[reveal, col[reveal]] = True
    undetermined[reveal, col[reveal] + 1] = True
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
    lvl_diff = (differs[:, 0::2] | differs[:, 1::2])
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
                    int(day.time_ns[k]), int(day.event_type[k]), int(day.order_id[k]),
                    int(day.size[k]), int(day.price[k]), int(day.direction[k]),
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

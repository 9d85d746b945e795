"""Tardis (tardis.dev) CSV datasets in: a day's `incremental_book_L2` file and its `trades` file -> a day of the cache.

Tardis's CSV datasets, gzipped or plain, one file per exchange, data type, symbol and UTC day (its downloader names
them `<exchange>_<data type>_<YYYY-MM-DD>_<symbol>.csv.gz`; the name is not needed here, the header and rows say
what a file is):

    incremental_book_L2: exchange,symbol,timestamp,local_timestamp,is_snapshot,side,price,amount
    trades:              exchange,symbol,timestamp,local_timestamp,id,side,price,amount

`timestamp` is the exchange's time of the message, `local_timestamp` the time Tardis received it, both in
microseconds since the epoch; rows are in `local_timestamp` order. A book row sets the level (`side` bid or ask,
`price`) to `amount` (0 removes it); each book file opens with a snapshot (rows with `is_snapshot` true), and a
later block of snapshot rows means the venue re-sent its book. A trade row's `side` is the aggressor's (buy, sell,
unknown).

A day is one exchange + symbol + date: its book file and, optionally, its trades file, passed to `ingest`
together. Its events: a LEVEL per book row (`size` the level's new size, `delta` the change), a TRADE per trade
row (`side` the resting side it hit: a buy hit the asks, -1; unknown: 0), merged by time, book rows first at
equal times. The event time is the exchange's `timestamp` (in ns); where it is before the previous row's of the
same file (the exchange's clocks are not the file's order), it is raised to it and counted in the manifest's
`repairs` (`exchange_time_backwards`). A `local_timestamp` that goes backwards is an error: the file is not in
Tardis's order. The day's date is the UTC date of the first `local_timestamp` (the day Tardis filed the rows
under); every row of both files must be on it.

A snapshot block after the first rebuilds the book: the levels it does not list are removed first (LEVEL events
of size 0, added at the block's first time), then its rows set the levels it lists; counted in `repairs`
(`book_resnapshots`), the added events in `notes`.

Units. Tardis gives neither the tick nor the lot: each is inferred as the decimal gcd of the prices (of the
amounts) of both files, unless the caller passes `tick_size=` / `lot_size=`; every price (amount) must then be a
multiple of it. The gcd of a day's prices is a multiple of the venue's tick (with thousands of distinct prices,
the tick itself); the manifest's notes say which was used. Decimal text is parsed exactly (no float). Fees:
Tardis files imply none (maker and taker fees 0); contract terms neither (contract_multiplier 1, linear).

Parsing is numpy over the whole file: the offsets of every newline and comma, then each column's fields as a
fixed-width byte matrix (8 bytes a load) read in a few vectorised passes; a malformed row is named by its line
number, column and value.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
import gzip
import re
import zlib
from array import array
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from lobsim_env.data.l2book import ASK, BID, L2Book
from lobsim_env.data.layout import (
    EVENT_DTYPE,
    LEVEL,
    TRADE,
    CheckReport,
    DataError,
    Day,
    Manifest,
    day_dir,
    is_current,
    read_manifest,
    source_file,
    write_day,
)

BOOK_COLUMNS = ("exchange", "symbol", "timestamp", "local_timestamp", "is_snapshot", "side", "price", "amount")
TRADES_COLUMNS = ("exchange", "symbol", "timestamp", "local_timestamp", "id", "side", "price", "amount")
_BOOK, _TRADES = "incremental_book_L2", "trades"
_FILE_NAME = re.compile(r"^[a-z0-9-]+_(incremental_book_L2|trades)_\d{4}-\d{2}-\d{2}_[^/]+\.csv(\.gz)?$")
"""Tardis's downloader's file names: <exchange>_<data type>_<YYYY-MM-DD>_<symbol>.csv.gz."""
_HEADERS = {",".join(BOOK_COLUMNS): _BOOK, ",".join(TRADES_COLUMNS): _TRADES}
_US_MIN, _US_MAX = 946_684_800_000_000, 4_102_444_800_000_000  # 2000-01-01 .. 2100-01-01 in microseconds
_POW10 = [10**k for k in range(19)]
_MAX_WIDTH = 40  # bytes of one field: a longer one is not a Tardis value


@dataclass(frozen=True, kw_only=True)
class _File:
    """One parsed Tardis CSV file; prices and amounts exact, as integers in units of 10**-price_exp (amount_exp)."""

    path: Path
    kind: str
    """_BOOK or _TRADES."""
    exchange: str
    symbol: str
    date: str
    ts: np.ndarray
    """int64 µs: the exchange's timestamp, as in the file."""
    snapshot: np.ndarray
    """bool: is_snapshot (book), all False (trades)."""
    side: np.ndarray
    """int8: book: +1 bid, -1 ask; trades: the resting side hit (buy -> -1, sell -> +1, unknown -> 0)."""
    price: np.ndarray
    price_exp: int
    amount: np.ndarray
    amount_exp: int

    @property
    def rows(self) -> int:
        return self.ts.shape[0]

    @property
    def columns(self) -> tuple[str, ...]:
        return BOOK_COLUMNS if self.kind == _BOOK else TRADES_COLUMNS


# ---------------------------------------------------------------------------------------------------- public API


def claims(path: Path) -> bool:
    """True for a Tardis `incremental_book_L2` or `trades` CSV (plain or gzipped): a .csv / .csv.gz name whose
    first line is one of the two headers. A file with a Tardis downloader's name is claimed even where its head
    does not read, so that ingest names what is wrong with it."""
    path = Path(path)
    if not (path.name.endswith(".csv") or path.name.endswith(".csv.gz")) or not path.is_file():
        return False
    try:
        return _header_kind(_first_line(path)) is not None
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError):
        return _FILE_NAME.match(path.name) is not None


def ingest(
    paths: list[Path],
    out: Path,
    *,
    levels: int = 10,
    tick_size: float | None = None,
    lot_size: float | None = None,
) -> list[tuple[Manifest, bool]]:
    """Writes each day of these Tardis files into the cache `out` (one book file, and at most one trades file, per
    exchange + symbol + date); returns (manifest, written) per day, by date, written False where the cache already
    holds the day from the same files with the same levels and units (a no-op). `tick_size` / `lot_size` set the
    units of every day (else inferred per day, module docstring). DataError names the file, line and value of bad
    input; a day is written whole or not at all."""
    _check_args(levels, tick_size, lot_size)
    days = _pair([Path(p) for p in paths])
    results = []
    for (exchange, symbol, date), (book_path, trades_path) in sorted(days.items(), key=lambda kv: kv[0][::-1]):
        files = tuple(source_file(p) for p in (book_path, trades_path) if p is not None)
        key_only = Manifest(
            venue=exchange, instrument=symbol, date=date, source="tardis", depth="L2", levels=levels,
            tick_size=1.0, lot_size=1.0, n_events=1, first_ts=0, last_ts=0, files=files,
        )  # fmt: skip
        _check_names(key_only, book_path)
        if is_current(out, key_only):
            old = read_manifest(day_dir(out, key_only))
            same_units = (tick_size is None or old.tick_size == tick_size) and (
                lot_size is None or old.lot_size == lot_size
            )
            if old.levels == levels and same_units:
                results.append((old, False))
                continue
        book = _parse(book_path)
        trades = _parse(trades_path) if trades_path is not None else None
        m, events, rows = _build_day(book, trades, levels=levels, tick_size=tick_size, lot_size=lot_size)
        m = dataclasses.replace(m, files=files)
        write_day(out, m, events, rows)
        results.append((m, True))
    return results


def check(day: Day) -> CheckReport:
    """Replays the day's LEVEL events from an empty book (L2Book) and compares every book.npy row with the replay.
    A row where the replayed book is crossed after the last event of its timestamp is `explained`
    ('crossed_in_source') when book.npy holds that very book (the source's own levels cross there); every other
    difference is unexplained, the first five named."""
    rep = CheckReport(day=day.key)
    ev, book_rows = day.events, day.book
    n, width = book_rows.shape
    replay = L2Book(day.manifest.levels)
    kinds, sides = ev["kind"].tolist(), ev["side"].tolist()
    prices, sizes, deltas, ts = ev["price"].tolist(), ev["size"].tolist(), ev["delta"].tolist(), ev["ts"].tolist()
    chunk = 1 << 15
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        rebuilt = np.zeros((hi - lo, width), np.int64)
        crossed = np.zeros(hi - lo, bool)
        bad_event: dict[int, str] = {}
        for k in range(lo, hi):
            if kinds[k] == LEVEL:
                if sides[k] not in (BID, ASK) or prices[k] <= 0 or sizes[k] < 0:
                    bad_event[k] = f"side {sides[k]}, price {prices[k]}, size {sizes[k]} is not a level"
                else:
                    d = replay.set(sides[k], prices[k], sizes[k])
                    if d != deltas[k]:
                        bad_event[k] = f"delta {deltas[k]}, the replay changes the level by {d}"
            elif kinds[k] != TRADE:
                bad_event[k] = f"kind {kinds[k]} in an L2 day (LEVEL or TRADE only)"
            elif deltas[k]:
                bad_event[k] = f"a TRADE with delta {deltas[k]} (a trade print does not change the book)"
            replay.row(rebuilt[k - lo])
            if (k + 1 == n or ts[k + 1] != ts[k]) and replay.crossed():
                crossed[k - lo] = True
        rep.count_rows(lo, rebuilt, book_rows, crossed, bad_event)
    return rep


# ---------------------------------------------------------------------------------------------- files and days


def _check_args(levels: int, tick_size: float | None, lot_size: float | None) -> None:
    if not isinstance(levels, int) or isinstance(levels, bool) or levels < 1:
        raise DataError(f"levels={levels!r} must be an int >= 1")
    for name, v in (("tick_size", tick_size), ("lot_size", lot_size)):
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or not np.isfinite(v) or v <= 0):
            raise DataError(f"{name}={v!r} must be a number > 0 (or None: inferred from the files)")


def _check_names(m: Manifest, path: Path) -> None:
    try:
        m.check(str(path))
    except DataError as err:
        raise DataError(f"{err}: the exchange and symbol name the day's folder in the cache") from None


def _open(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb")


def _first_line(path: Path) -> str:
    with _open(path) as f:
        return f.readline(4096).decode("utf-8")


def _header_kind(line: str) -> str | None:
    return _HEADERS.get(line.strip().lstrip("\ufeff"))


def _peek(path: Path) -> tuple[str, str, str, str]:
    """(kind, exchange, symbol, date) from a file's header and first row; DataError for a file that is not a Tardis
    book or trades CSV."""
    try:
        with _open(path) as f:
            header = f.readline(4096).decode("utf-8")
            first = f.readline(4096).decode("utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as err:
        raise DataError(f"{path}: not a readable Tardis CSV ({err})") from None
    kind = _header_kind(header)
    if kind is None:
        raise DataError(f"{path}, line 1: {_header_problem(header)}")
    fields = first.rstrip("\r\n").split(",")
    if len(fields) != 8:
        hint = "; a day without trades: pass its book file alone" if kind == _TRADES else ""
        raise DataError(f"{path}: no data rows after the header{hint}")
    try:
        local_us = int(fields[3])
    except ValueError:
        raise DataError(f"{path}, line 2, column 4 (local_timestamp): value {fields[3]!r} is not an integer") from None
    return kind, fields[0], fields[1], _utc_date(local_us)


def _header_problem(header: str) -> str:
    got = header.strip().lstrip("\ufeff").split(",")
    best = min((BOOK_COLUMNS, TRADES_COLUMNS), key=lambda cols: len(set(cols) - set(got)))
    missing = [c for c in best if c not in got]
    what = f"missing columns {missing}" if missing else f"columns {got} in another order or with extra ones"
    return (
        f"header {header.strip()[:200]!r}: {what}; expected a Tardis CSV dataset header, "
        f"{','.join(BOOK_COLUMNS)!r} (incremental_book_L2) or {','.join(TRADES_COLUMNS)!r} (trades)"
    )


def _utc_date(us: int) -> str:
    return dt.datetime.fromtimestamp(us / 1e6, dt.UTC).date().isoformat()


def _pair(paths: list[Path]) -> dict[tuple[str, str, str], tuple[Path, Path | None]]:
    """exchange, symbol, date -> (book file, trades file or None); DataError for two files of one kind and day, or
    a trades file with no book file of its exchange, symbol and day."""
    books: dict[tuple[str, str, str], Path] = {}
    trades: dict[tuple[str, str, str], Path] = {}
    for p in paths:
        kind, exchange, symbol, date = _peek(p)
        into = books if kind == _BOOK else trades
        key = (exchange, symbol, date)
        if key in into:
            raise DataError(
                f"{p} and {into[key]}: two {kind} files of {exchange} {symbol} on {date}; pass one file per day"
            )
        into[key] = p
    for key, p in trades.items():
        if key not in books:
            have = ", ".join(" ".join(k) for k in sorted(books)) or "none"
            raise DataError(
                f"{p}: a trades file of {' '.join(key)} (exchange, symbol, UTC date of its first row), but no "
                f"incremental_book_L2 file of that exchange, symbol and day was given (book files: {have}); pass "
                "the book file of the same day with it"
            )
    return {key: (p, trades.get(key)) for key, p in books.items()}


# ---------------------------------------------------------------------------------------------- parsing (numpy)


def _read_bytes(path: Path) -> bytes:
    try:
        with _open(path) as f:
            return f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(f"{path}: cannot read it ({err}); a truncated download? fetch the file again") from None


def _parse(path: Path) -> _File:
    """Parses and validates a whole Tardis book or trades file (module docstring); DataError names line, column and
    value of the first bad row."""
    data = _read_bytes(path)
    head_end = data.find(b"\n")
    header = data[: head_end if head_end >= 0 else len(data)].decode("utf-8", "replace")
    kind = _header_kind(header)
    if kind is None:
        raise DataError(f"{path}, line 1: {_header_problem(header)}")
    columns = BOOK_COLUMNS if kind == _BOOK else TRADES_COLUMNS
    body = data[head_end + 1 :].rstrip(b"\r\n")
    if not body:
        raise DataError(f"{path}: no data rows after the header")
    buf = np.frombuffer(body + b"\n" + bytes(8), np.uint8)  # 8 zero bytes: every field's 8-byte load is in range
    del data, body
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    commas = np.flatnonzero(buf == 44)
    n_commas = np.searchsorted(commas, ends) - np.searchsorted(commas, starts)
    bad = np.flatnonzero(n_commas != 7)
    if bad.size:
        i = int(bad[0])
        line = bytes(buf[starts[i] : ends[i]]).decode("utf-8", "replace")
        raise DataError(
            f"{path}, line {i + 2}: {n_commas[i] + 1} fields in {line[:200]!r}, expected 8 ({','.join(columns)}); "
            f"{bad.size} such lines"
        )
    line_end = ends - (buf[np.maximum(ends - 1, 0)] == 13)  # a CRLF line's \r is not part of its last field
    col = _Columns(path, buf, starts, commas.reshape(-1, 7), line_end, columns)

    exchange, symbol = col.constant(0), col.constant(1)
    ts = col.integer(2)
    local = col.integer(3)
    for j, v in ((2, ts), (3, local)):
        out = np.flatnonzero((v < _US_MIN) | (v >= _US_MAX))
        if out.size:
            col.fail(j, int(out[0]), "is not microseconds since the epoch (a date in 2000-2099: 16 digits)", out.size)
    back = np.flatnonzero(local[1:] < local[:-1])
    if back.size:
        i = int(back[0]) + 1
        col.fail(
            3, i, f"is before the previous row's {local[i - 1]}: rows must be in local_timestamp order (Tardis's "
            "order); was the file sorted or concatenated?", back.size
        )  # fmt: skip
    date = _utc_date(int(local[0]))
    if _utc_date(int(local[-1])) != date:
        i = int(np.searchsorted(local, _day_end_us(date)))
        col.fail(3, i, f"is on {_utc_date(int(local[i]))}, the file's first row on {date}: a day is one file", 1)
    if kind == _BOOK:
        snapshot = col.choice(4, {b"true": True, b"false": False}, np.bool_)
        side = col.choice(5, {b"bid": BID, b"ask": ASK}, np.int8)
        if not snapshot[0]:
            raise DataError(
                f"{path}, line 2: is_snapshot is false; a Tardis incremental_book_L2 file opens with the book's "
                "snapshot (is_snapshot true rows): pass the whole day's file"
            )
    else:
        snapshot = np.zeros(ts.shape[0], np.bool_)
        side = col.choice(5, {b"buy": ASK, b"sell": BID, b"unknown": 0}, np.int8)
    price, price_exp = col.decimal(6)
    amount, amount_exp = col.decimal(7)
    bad = np.flatnonzero(price <= 0)
    if bad.size:
        col.fail(6, int(bad[0]), "is not a price > 0", bad.size)
    bad = np.flatnonzero(amount < 0 if kind == _BOOK else amount <= 0)
    if bad.size:
        col.fail(7, int(bad[0]), "is not an amount >= 0" if kind == _BOOK else "is not a trade amount > 0", bad.size)
    return _File(
        path=path, kind=kind, exchange=exchange, symbol=symbol, date=date, ts=ts, snapshot=snapshot, side=side,
        price=price, price_exp=price_exp, amount=amount, amount_exp=amount_exp,
    )  # fmt: skip


def _day_end_us(date: str) -> int:
    d = dt.datetime.fromisoformat(date).replace(tzinfo=dt.UTC) + dt.timedelta(days=1)
    return int(d.timestamp()) * 1_000_000


_BYTE_MASKS = np.array([(1 << (8 * v)) - 1 for v in range(8)] + [(1 << 64) - 1], np.uint64)


class _Columns:
    """The fields of a parsed file's rows: row i runs from starts[i] to line_end[i], its 7 commas at cut[i]; column j
    is the text between comma j - 1 (or the line's start) and comma j (or the line's end)."""

    def __init__(
        self,
        path: Path,
        buf: np.ndarray,
        starts: np.ndarray,
        cut: np.ndarray,
        line_end: np.ndarray,
        names: tuple[str, ...],
    ):
        self.path, self.buf, self.starts, self.cut, self.line_end, self.names = path, buf, starts, cut, line_end, names
        # buf's bytes as overlapping little-endian uint64 words, one starting at each byte: an unaligned 8-byte load
        self.words = np.ndarray((buf.shape[0] - 7,), "<u8", buffer=buf, strides=(1,))

    def bounds(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        start = self.starts if j == 0 else self.cut[:, j - 1] + 1
        end = self.cut[:, j] if j < self.cut.shape[1] else np.maximum(self.line_end, self.cut[:, -1] + 1)
        return start, end

    def fail(self, j: int, i: int, what: str, count: int) -> None:
        start, end = self.bounds(j)
        value = bytes(self.buf[start[i] : end[i]]).decode("utf-8", "replace")
        others = f" ({count} such rows)" if count > 1 else ""
        raise DataError(f"{self.path}, line {i + 2}, column {j + 1} ({self.names[j]}): value {value!r} {what}{others}")

    def matrix(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Column j as a uint8[n, W] matrix (W a multiple of 8), each field left-aligned and zero-padded, and the
        fields' widths: 8 bytes a load, the bytes past a field's end masked off."""
        s, e = self.bounds(j)
        width = e - s
        w = int(width.max())
        if w > _MAX_WIDTH:
            self.fail(j, int(np.argmax(width)), f"is longer than {_MAX_WIDTH} characters", 1)
        nq = max(1, -(-w // 8))
        m = np.empty((s.shape[0], nq), np.uint64)
        last = self.words.shape[0] - 1
        for q in range(nq):
            valid = np.clip(width - 8 * q, 0, 8)
            m[:, q] = self.words[np.minimum(s + 8 * q, last)] & _BYTE_MASKS[valid]
        return m.view(np.uint8), width

    def strings(self, j: int) -> np.ndarray:
        m, _ = self.matrix(j)
        return m.view(f"S{m.shape[1]}").ravel()

    def constant(self, j: int) -> str:
        s = self.strings(j)
        bad = np.flatnonzero(s != s[0])
        if bad.size:
            first = s[0].decode("utf-8", "replace")
            self.fail(j, int(bad[0]), f"differs from the file's first row's {first!r}: a file is one instrument", 1)
        if not s[0]:
            self.fail(j, 0, "is empty", 1)
        return s[0].decode("utf-8", "replace")

    def choice(self, j: int, values: dict[bytes, int | bool], dtype: type) -> np.ndarray:
        s = self.strings(j)
        out = np.zeros(s.shape[0], dtype)
        known = np.zeros(s.shape[0], bool)
        for text, v in values.items():
            hit = s == text
            out[hit] = v
            known |= hit
        bad = np.flatnonzero(~known)
        if bad.size:
            self.fail(j, int(bad[0]), f"is not one of {', '.join(v.decode() for v in values)}", bad.size)
        return out

    def integer(self, j: int) -> np.ndarray:
        v, exp = self.decimal(j)
        if exp:
            frac = np.flatnonzero(v % _POW10[exp])
            if frac.size:
                self.fail(j, int(frac[0]), "is not an integer", frac.size)
            v = v // _POW10[exp]
        return v

    def decimal(self, j: int) -> tuple[np.ndarray, int]:
        """Column j's exact values as int64 in units of 10**-exp, exp the most decimals of any field: plain decimal
        text in one numpy pass per character column (Horner), anything else (an exponent, a sign) via Decimal."""
        m, width = self.matrix(j)
        n, w = m.shape
        digit = (m >= 48) & (m <= 57)
        dot = m == 46
        pad = np.arange(w) >= width[:, None]
        plain = (digit | dot | pad).all(axis=1) & (dot.sum(axis=1) <= 1) & digit.any(axis=1)
        if not plain.all():
            return self._decimal_slow(j, m)
        has_dot = dot.any(axis=1)
        pos = np.where(has_dot, dot.argmax(axis=1), width)
        decimals = np.where(has_dot, width - pos - 1, 0)
        exp = int(decimals.max())
        if int(pos.max()) + exp > 18:
            i = int(np.argmax(pos + exp))
            self.fail(j, i, f"has more than 18 digits once written with the column's {exp} decimals", 1)
        value = np.zeros(n, np.int64)
        for k in range(w):
            c = m[:, k]
            d = digit[:, k]
            value = np.where(d, value * 10 + (c.astype(np.int64) - 48), value)
        return value * np.array(_POW10, np.int64)[exp - decimals], exp

    def _decimal_slow(self, j: int, m: np.ndarray) -> tuple[np.ndarray, int]:
        s = m.view(f"S{m.shape[1]}").ravel()
        uniq, inverse = np.unique(s, return_inverse=True)
        parsed = []
        for k, text in enumerate(uniq.tolist()):
            try:
                v = Decimal(text.decode("ascii"))
            except (InvalidOperation, UnicodeDecodeError):
                v = None
            if v is None or not v.is_finite():
                self.fail(j, int(np.flatnonzero(inverse == k)[0]), "is not a number", int((inverse == k).sum()))
            parsed.append(v)
        exp = max(0, max(-int(v.as_tuple().exponent) for v in parsed))
        ints = [int(v.scaleb(exp)) for v in parsed]
        if max(abs(v) for v in ints) >= 10**18:
            k = int(np.argmax([abs(v) for v in ints]))
            self.fail(j, int(np.flatnonzero(inverse == k)[0]), f"has more than 18 digits with {exp} decimals", 1)
        return np.array(ints, np.int64)[inverse], exp


# ---------------------------------------------------------------------------------------------- units and events


def _unit(
    values: list[tuple[_File, np.ndarray]], exp: int, given: float | None, name: str, column: str
) -> tuple[int, float, str]:
    """The unit (tick or lot) of these exact values (each file's in units of 10**-exp): (unit in 10**-exp, unit,
    how it was chosen). Given: every value must be a multiple of it; else the gcd of the values (> 0)."""
    if given is not None:
        unit = int(Decimal(repr(float(given))).scaleb(exp))  # exp covers the given unit's decimals (_build_day)
        for f, v in values:
            off = np.flatnonzero(v % unit)
            if off.size:
                i = int(off[0])
                raise DataError(
                    f"{f.path}, line {i + 2}, column {f.columns.index(column) + 1} ({column}): value "
                    f"{Decimal(int(v[i])).scaleb(-exp)} is not a multiple of {name}={given!r} ({off.size} such rows); "
                    f"pass the venue's {name}, or none to infer it"
                )
        return unit, float(given), f"{name} {given!r} as given"
    nonzero = [v[v != 0] for _, v in values]
    allv = np.concatenate(nonzero) if nonzero else np.zeros(0, np.int64)
    if not allv.size:
        return _POW10[exp], 1.0, f"{name} 1 (no nonzero {column}s to infer it from)"
    unit = int(np.gcd.reduce(allv))
    size = float(Decimal(unit).scaleb(-exp))
    distinct = np.unique(allv).size
    return (
        unit,
        size,
        (
            f"{name} {size!r} inferred: the decimal gcd of the day's {distinct} distinct {column}s (a multiple of the "
            f"venue's {name}; pass {name}= to set it)"
        ),
    )


def _decimals(v: float | None) -> int:
    """Decimals of a unit the caller gave (0.01 -> 2), 0 for None."""
    return 0 if v is None else max(0, -int(Decimal(repr(float(v))).normalize().as_tuple().exponent))


def _scaled(f: _File, values: np.ndarray, exp: int, to_exp: int) -> np.ndarray:
    """Values in units of 10**-exp rewritten in units of 10**-to_exp (to_exp >= exp), exactly."""
    if to_exp - exp > 18 or (values.size and int(np.abs(values).max()) >= 10 ** (18 - (to_exp - exp))):
        raise DataError(f"{f.path}: values of more than 18 digits once written with {to_exp} decimals")
    return values * _POW10[to_exp - exp]


def _build_day(
    book: _File, trades: _File | None, *, levels: int, tick_size: float | None, lot_size: float | None
) -> tuple[Manifest, np.ndarray, np.ndarray]:
    """The day's manifest (without its files), events and book rows from its parsed book and trades files."""
    parts = [book] + ([trades] if trades is not None else [])
    pexp = max([f.price_exp for f in parts] + [_decimals(tick_size)])
    aexp = max([f.amount_exp for f in parts] + [_decimals(lot_size)])
    prices = [(f, _scaled(f, f.price, f.price_exp, pexp)) for f in parts]
    amounts = [(f, _scaled(f, f.amount, f.amount_exp, aexp)) for f in parts]
    tick, tick_size, tick_note = _unit(prices, pexp, tick_size, "tick_size", "price")
    lot, lot_size, lot_note = _unit(amounts, aexp, lot_size, "lot_size", "amount")
    repairs: dict[str, int] = {}

    n_b = book.rows
    n_t = trades.rows if trades is not None else 0
    ts_parts, backwards = [], 0
    for f in parts:
        raised = np.maximum.accumulate(f.ts)
        backwards += int((raised != f.ts).sum())
        ts_parts.append(raised * 1000)
    if backwards:
        repairs["exchange_time_backwards"] = backwards
    ts = np.concatenate(ts_parts)
    order = np.argsort(ts, kind="stable")  # book rows come first: at equal times they stay before the trades
    ts = ts[order]
    is_trade = order >= n_b
    side = np.concatenate([f.side for f in parts])[order]
    price = (np.concatenate([v for _, v in prices]) // tick)[order]
    size = (np.concatenate([v for _, v in amounts]) // lot)[order]
    snapshot = np.concatenate([book.snapshot, np.zeros(n_t, bool)])[order]

    # snapshot blocks after the first, in merged positions: the book rows of each
    book_pos = np.flatnonzero(~is_trade)
    snap_b = snapshot[book_pos]
    block_start = np.flatnonzero(snap_b & np.r_[True, ~snap_b[:-1]])
    block_end = np.r_[np.flatnonzero(snap_b[:-1] & ~snap_b[1:]) + 1, n_b] if n_b else np.zeros(0, np.int64)
    block_end = block_end[np.searchsorted(block_end, block_start, side="right")]
    resnapshots = {int(book_pos[s]): book_pos[s:e] for s, e in zip(block_start[1:], block_end[1:], strict=True)}
    if resnapshots:
        repairs["book_resnapshots"] = len(resnapshots)

    src, delta, row_ids, rows, extra = _replay(side, price, size, is_trade, resnapshots, levels)
    n = len(src)
    events = np.zeros(n, EVENT_DTYPE)
    src_a = np.array(src, np.int64)
    from_src = src_a >= 0
    take = src_a[from_src]
    events["ts"][from_src] = ts[take]
    events["kind"][from_src] = np.where(is_trade[take], TRADE, LEVEL)
    events["side"][from_src] = side[take]
    events["price"][from_src] = price[take]
    events["size"][from_src] = size[take]
    added = np.flatnonzero(~from_src)
    if added.size:
        ex = np.array(extra, np.int64).reshape(-1, 3)  # (source row it precedes, side, price)
        events["ts"][added] = ts[ex[:, 0]]
        events["kind"][added] = LEVEL
        events["side"][added] = ex[:, 1]
        events["price"][added] = ex[:, 2]
    events["delta"] = delta
    events["first_seen"] = -1
    book_rows = np.frombuffer(b"".join(rows), np.int64).reshape(-1, 4 * levels)[np.array(row_ids, np.int64)]

    notes = [
        "L2: queue places come from the queue model",
        f"ts: the exchange's timestamp (µs -> ns); date: the UTC date of the first local_timestamp ({book.date})",
        tick_note,
        lot_note,
        "fees: Tardis files imply none (maker and taker fees 0): set the venue's fees where a run needs them",
        "contract terms: not in Tardis files (contract_multiplier 1, linear); an inverse contract's USD figures need "
        "its terms",
    ]
    if backwards:
        notes.append(f"{backwards} rows' exchange timestamp was before the previous row's of its file: raised to it")
    if resnapshots:
        notes.append(
            f"{len(resnapshots)} snapshot blocks after the first: the book was rebuilt from each ({added.size} LEVEL "
            "events of size 0 added for the levels a new snapshot does not list)"
        )
    if trades is None:
        notes.append("no trades file: no TRADE events; order_lots 1")
    trade_sizes = size[is_trade]
    order_lots = max(1, round(float(np.median(trade_sizes)))) if trade_sizes.size else 1
    m = Manifest(
        venue=book.exchange, instrument=book.symbol, date=book.date, source="tardis", depth="L2", levels=levels,
        tick_size=tick_size, lot_size=lot_size, order_lots=order_lots, n_events=n, first_ts=int(events["ts"][0]),
        last_ts=int(events["ts"][-1]), repairs=repairs, notes=tuple(notes),
    )  # fmt: skip
    return m, events, book_rows


def _replay(
    side: np.ndarray,
    price: np.ndarray,
    size: np.ndarray,
    is_trade: np.ndarray,
    resnapshots: dict[int, np.ndarray],
    levels: int,
) -> tuple[list[int], list[int], list[int], list[array], list[int]]:
    """Applies the merged rows to a full-depth book. Returns per event: its source row (-1: a level removal added
    before a snapshot block), its delta, the id of its book row; the distinct book rows; and the added removals as
    flat (source row, side, price) triples.

    Why it is fast enough in Python: an event below a side's levels-th price leaves the row as it was (the row id
    repeats); a new size at a level that stays is one cell of a copy of the row; only a level added or removed
    within the top rewrites that side's cells."""
    book = L2Book(levels)
    bid_p, ask_p = book.prices[BID], book.prices[ASK]
    lv = levels
    cur = array("q", bytes(8 * 4 * lv))
    rows = [cur]
    src: list[int] = []
    delta: list[int] = []
    row_ids: list[int] = []
    extra: list[int] = []
    sides, prices, sizes, trade = side.tolist(), price.tolist(), size.tolist(), is_trade.tolist()
    for i in range(len(sides)):
        if trade[i]:
            src.append(i)
            delta.append(0)
            row_ids.append(len(rows) - 1)
            continue
        block = resnapshots.get(i)
        if block is not None:
            listed = {(sides[r], prices[r]) for r in block.tolist()}
            for s, p, q in book.levels_now():
                if (s, p) not in listed:
                    book.set(s, p, 0)
                    src.append(-1)
                    delta.append(-q)
                    extra += (i, s, p)
                    cur = array("q", cur)
                    book.write_side(cur, s, lv)
                    rows.append(cur)
                    row_ids.append(len(rows) - 1)
        s, p, q = sides[i], prices[i], sizes[i]
        if s == BID:
            top = len(bid_p) < lv or p >= bid_p[-lv]
        else:
            top = len(ask_p) < lv or p <= ask_p[lv - 1]
        d = book.set(s, p, q)
        src.append(i)
        delta.append(d)
        if d and top:
            cur = array("q", cur)
            if q and q != d:  # the level was there before and stays: its size cell
                if s == BID:
                    cur[4 * (len(bid_p) - 1 - bisect.bisect_left(bid_p, p)) + 3] = q
                else:
                    cur[4 * bisect.bisect_left(ask_p, p) + 1] = q
            else:
                book.write_side(cur, s, lv)
            rows.append(cur)
        row_ids.append(len(rows) - 1)
    return src, delta, row_ids, rows, extra

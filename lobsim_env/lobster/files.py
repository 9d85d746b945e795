"""Load and validate one LOBSTER day (message file + orderbook file) into integer numpy arrays.

The format is LOBSTER's own (LOBSTER_SampleFiles_ReadMe.txt in the sample folder, lobsim_env.lobster.samples);
the validation rules and their error messages are written out in docs/lobster.md.

Two parsers, with the same arrays and the same errors (tests/test_lobster_fast.py). Where the optional
compiled module is built (lobsim_env/lobster/_lobster_fast.c; `pip install -e .` builds it where a C compiler exists),
it parses each file in one pass and checks the orderbook rules in that pass, and it inflates zip members with
libdeflate where the system has that library (several times faster than zlib; checked against the zip's size
and CRC-32). It accepts only plain integer text in the expected shape: anything else, and every file where it
is not built, goes to the numpy path.

The numpy path is vectorised: each zip member is read into memory (no extraction to disk), newlines become
commas with a sentinel value appended to every line, and `np.fromstring` parses the whole file at once. A line
with a missing or extra field shifts the sentinel out of its column, so field counts are checked exactly
without a per-line Python loop. Whenever it sees anything it does not expect, a plain line-by-line parser
takes over: it either parses the file exactly (e.g. a timestamp without a decimal point) or raises
`LobsterFormatError` naming file, row, column and value.

Message files have six columns (the 2012 samples) or seven (recent LOBSTER versions), the same on every row. The
seventh is kept as text, uninterpreted (LobsterDay.extra): a vectorised split takes it off, and the first six
columns go through the parsers above exactly as a six-column file's do, so both paths give the same arrays.
"""

from __future__ import annotations

import os
import re
import struct
import time
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lobsim_env.validation import InputError

TICK = 100
"""LOBSTER prices are dollars * 10000; US equities trade on a one-cent grid, i.e. multiples of 100."""
DUMMY_ASK_PRICE = 9_999_999_999
DUMMY_BID_PRICE = -9_999_999_999
MAX_SIZE = 10**12
"""Sizes at or above this are rejected (np.fromstring saturates overflowing integers; this catches them)."""
EVENT_TYPES = (1, 2, 3, 4, 5, 6, 7)
CROSS = 6
"""Event type of a cross trade (an auction: opening, closing, halt or IPO cross). LOBSTER adds it for the record;
the executions it aggregates are in the file already, so it changes nothing in the book."""
MESSAGE_COLUMNS = ("time", "type", "order_id", "size", "price", "direction")
EXTRA_COLUMN = "extra"
"""The name errors give the seventh column of the message files that recent LOBSTER versions write."""
MAX_EXTRA_BYTES = 32
"""The longest value of the seventh column kept (LobsterDay.extra); a longer one is an error naming its row."""

# A value that is invalid in every column of the orderbook file (prices are positive multiples of 100 or dummies,
# sizes >= 0), appended to each of its lines so that field-count errors become visible.
_SENTINEL = -7
_SENTINEL_TEXT = b",-7,"
_MAX_DECIMALS = 18  # beyond 9 only float-print noise; 18 keeps the fraction inside int64
_TIME_AND_LINES_TO_COMMAS = bytes.maketrans(b".\n", b",,")
_INT64_LIMITS = (np.iinfo(np.int64).min, np.iinfo(np.int64).max)
_NAME = re.compile(
    r"^(?P<ticker>[^_]+)_(?P<date>\d{4}-\d{2}-\d{2})_(?P<start>\d+)_(?P<end>\d+)_"
    r"(?P<kind>message|orderbook)_(?P<levels>\d+)\.csv$"
)


try:  # the optional compiled parser (pyproject.toml builds it where a C compiler exists)
    from lobsim_env.lobster import _lobster_fast as _C
except ImportError:  # not built: the numpy path parses and validates everything, with the same results
    _C = None
_API = 2
"""The version of lobsim_env/lobster/_lobster_fast.c's functions that this file calls (its API constant)."""
if _C is not None and getattr(_C, "API", None) != _API:
    warnings.warn(
        f"{_C.__file__} was built from another version of lobsim_env/lobster/_lobster_fast.c (API "
        f"{getattr(_C, 'API', None)}, this code needs {_API}); using the numpy path. Rebuild it: pip install -e .",
        stacklevel=1,
    )
    _C = None
_VALID, _INVALID, _FALLBACK = 0, 1, 2
"""The compiled parser's statuses: parsed and valid; parsed, some rule broken (the numpy validator names it);
not parsed (the numpy parser takes over)."""
_UNCHECKED = -1
"""Parsed by the numpy path: the rules are still to be checked."""


class LobsterFormatError(InputError):
    """A LOBSTER file that does not follow the format; the message names file, row, column and value."""


# ---------------------------------------------------------------------------------------------- input limits

MAX_BYTES_ENV = "FOXHUNT_LOBSTER_MAX_BYTES"
"""Environment variable: the most bytes of text (both files together) a load may read, instead of the limit
derived from the machine's memory (docs/input-limits.md)."""
MEMORY_SHARE = 0.5
"""Of the memory available when a day is loaded, the share its parse may use at its peak."""
PARSE_BYTES_PER_TEXT_BYTE = 4
"""Peak memory of a load per byte of text: the GOOG level-10 sample (40 MB of text) peaks at 2.45 bytes a byte
on the compiled path and 3.2 on the numpy path (tracemalloc), rounded up."""
MAX_COMPRESSION_RATIO = 250
"""A member larger than RATIO_CHECK_BYTES that inflates more than this many times its compressed size is refused
as a zip bomb: the LOBSTER samples inflate 2.7-28 times (GOOG level-10 orderbook: 27.8)."""
RATIO_CHECK_BYTES = 16 * 2**20
_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2"}
_METHODS[zipfile.ZIP_LZMA] = "lzma"


def available_memory() -> int:
    """Bytes of memory available to a new allocation now: MemAvailable of /proc/meminfo (Linux), else the free
    physical pages (os.sysconf), else 4 GiB when the system says neither."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 4 * 2**30


def max_text_bytes() -> tuple[int, str]:
    """(the most bytes of text a load may read, where that figure comes from): FOXHUNT_LOBSTER_MAX_BYTES when set,
    else MEMORY_SHARE of the available memory over PARSE_BYTES_PER_TEXT_BYTE."""
    raw = os.environ.get(MAX_BYTES_ENV)
    if raw:
        try:
            value = int(float(raw))
        except ValueError:
            raise LobsterFormatError(f"{MAX_BYTES_ENV}={raw!r} must be a number of bytes, e.g. 8e9") from None
        if value >= 1:
            return value, f"{MAX_BYTES_ENV}={raw}"
    avail = available_memory()
    limit = int(avail * MEMORY_SHARE / PARSE_BYTES_PER_TEXT_BYTE)
    why = (
        f"{MEMORY_SHARE:g} of the {_gib(avail)} of memory available over {PARSE_BYTES_PER_TEXT_BYTE} bytes a byte "
        "of text at the parse's peak"
    )
    return limit, why


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**27 else f"{n / 2**20:.1f} MiB"


def _too_big(path: Path, what: str, size: int, total: int, limit: int, why: str) -> LobsterFormatError:
    return LobsterFormatError(
        f"{path}: {what} is {size:,} bytes ({total:,} bytes of text to load with its pair), over the {limit:,} "
        f"bytes this machine can load ({why}): free memory, load it on a machine with more, or set "
        f"{MAX_BYTES_ENV} to the bytes you mean to allow"
    )


def day_text_bytes(path: str | Path) -> int:
    """Bytes of text load_day(path) reads, from the zip's directory or the files' sizes (nothing inflated);
    0 when the path names nothing readable (load_day then names the problem)."""
    path = Path(path)
    try:
        if path.suffix.lower() == ".zip":
            with zipfile.ZipFile(path) as zf:
                return sum(zf.getinfo(n).file_size for n in _zip_members(zf, path))
        ob = path.with_name(path.name.replace("_message_", "_orderbook_"))
        return path.stat().st_size + (ob.stat().st_size if "_message_" in path.name and ob.is_file() else 0)
    except (OSError, ValueError, zipfile.BadZipFile):
        return 0


@dataclass(frozen=True, kw_only=True)
class LobsterDay:
    """One ticker-day of LOBSTER data, all integers. Row k of `book` is the visible book after message k."""

    ticker: str
    date: str
    """Trading day, YYYY-MM-DD."""
    levels: int
    """Visible levels per side in `book` (and the depth the message file was cut to)."""
    time_ns: np.ndarray
    """int64[M]: nanoseconds after midnight, parsed exactly from the decimal seconds."""
    event_type: np.ndarray
    """int8[M]: 1 submit, 2 partial cancel, 3 delete, 4 visible execution, 5 hidden execution, 6 cross (an
    auction trade; it repeats the previous book), 7 halt."""
    order_id: np.ndarray
    """int64[M]: >= 0, but for crosses (type 6): LOBSTER's pseudo ids, -1 opening, -2 closing, -3 / -4 others."""
    size: np.ndarray
    """int64[M]: shares (0 for halts, and may be 0 for a cross that matched nothing)."""
    price: np.ndarray
    """int64[M]: dollars * 10000."""
    direction: np.ndarray
    """int8[M]: +1 buy order (bid side), -1 sell order (ask side); a cross (type 6) may also hold 0."""
    book: np.ndarray | None
    """int64[M, 4*levels]: ask_p1, ask_s1, bid_p1, bid_s1, ask_p2, ...; None without an orderbook file.
    Empty levels hold price DUMMY_BID_PRICE / DUMMY_ASK_PRICE and size 0."""
    source: Path
    """The zip or message CSV this day was loaded from."""
    extra: np.ndarray | None = None
    """bytes[M] (numpy `S<w>`, w the longest value, at least 1): the message file's seventh column, each value
    as the file writes it (surrounding whitespace stripped), uninterpreted; None for a file of six columns.
    Nothing in the replay reads it."""

    @property
    def n_messages(self) -> int:
        return int(self.time_ns.shape[0])


def load_day(
    path: str | Path, *, levels: int | None = None, stage_seconds: dict[str, float] | None = None
) -> LobsterDay:
    """Load a LOBSTER sample zip, or a message CSV (its orderbook CSV beside it is used when present).

    `levels` defaults to the depth in the file name; a smaller value keeps only the top `levels` of the
    orderbook (the replay then treats messages beyond that depth as invisible). Raises LobsterFormatError
    for anything malformed, FileNotFoundError for a missing path. `stage_seconds`, when given, receives the
    wall-clock seconds of each stage (LOAD_STAGES), added to any value already there: a profile of this very
    code path, for lobsim_env.lobster.reconstruct.profile.
    """
    lap = _Laps(stage_seconds)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file; pass a LOBSTER zip or a *_message_<L>.csv file")
    if not path.is_file():
        raise LobsterFormatError(f"{path}: a folder, not a file; pass a LOBSTER zip or a *_message_<L>.csv file")
    if path.suffix.lower() == ".zip":
        msg_name, msg_text, ob_name, ob_text = _read_zip(path)
    elif path.suffix.lower() == ".csv":
        msg_name, ob_name = path.name, None
        ob_path = path.with_name(path.name.replace("_message_", "_orderbook_"))
        has_ob = "_message_" in path.name and ob_path.exists()
        sizes = [p.stat().st_size for p in ([path, ob_path] if has_ob else [path])]
        limit, why = max_text_bytes()
        if sum(sizes) > limit:
            big = int(sizes[-1] > sizes[0])
            raise _too_big([path, ob_path][big], "the file", sizes[big], sum(sizes), limit, why)
        msg_text = _read_file(path)
        ob_text = None
        if has_ob:
            ob_name, ob_text = ob_path.name, _read_file(ob_path)
    else:
        raise LobsterFormatError(f"{path}: expected a LOBSTER .zip or a *_message_<L>.csv file")
    lap("read")
    meta = _name_fields(msg_name, "message", where=str(path))
    file_levels = int(meta["levels"])
    if levels is None:
        levels = file_levels
    if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= file_levels:
        raise LobsterFormatError(f"{path}: levels={levels!r} must be an integer in 1..{file_levels} (the file's depth)")
    label = _label(path, msg_name)
    time_ns, event_type, order_id, size, price, direction, extra = _parse_messages(msg_text, label)
    lap("parse_messages")
    _validate_messages(label, time_ns, event_type, order_id, size, price, direction)
    lap("validate_messages")
    book = None
    if ob_text is not None:
        ob_label = _label(path, ob_name)
        book, checked = _parse_table(ob_text, file_levels, ob_label, time_ns.shape[0])
        lap("parse_orderbook")
        if checked != _VALID:
            _validate_book(ob_label, book, file_levels)
            if checked == _INVALID:
                raise RuntimeError(
                    f"{ob_label}: the compiled parser found a broken rule that files._validate_book does not; "
                    "this is a bug in lobsim_env/lobster/_lobster_fast.c "
                    "(the numpy path alone: lobsim_env.lobster.files._C = None)"
                )
        if levels < file_levels:
            book = np.ascontiguousarray(book[:, : 4 * levels])
        lap("validate_orderbook")
    return LobsterDay(
        ticker=meta["ticker"],
        date=meta["date"],
        levels=levels,
        time_ns=time_ns,
        event_type=event_type,
        order_id=order_id,
        size=size,
        price=price,
        direction=direction,
        book=book,
        source=path,
        extra=extra,
    )


LOAD_STAGES = ("read", "parse_messages", "validate_messages", "parse_orderbook", "validate_orderbook")
"""load_day's stages, in order: read (file, or zip member with inflate and CRC check), parse (text to
integers), validate (the rules of docs/lobster.md). The orderbook stages are absent without an orderbook."""


class _Laps:
    """Adds the seconds since the previous lap to `into[name]`; does nothing when `into` is None."""

    def __init__(self, into: dict[str, float] | None) -> None:
        self.into, self.last = into, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.into is not None:
            now = time.perf_counter()
            self.into[name] = self.into.get(name, 0.0) + now - self.last
            self.last = now


def _label(path: Path, member: str) -> str:
    return f"{member} (in {path.name})" if path.suffix.lower() == ".zip" else str(path.with_name(member))


def _name_fields(name: str, kind: str, *, where: str) -> dict[str, str]:
    m = _NAME.match(Path(name).name)
    if m is None or m["kind"] != kind:
        raise LobsterFormatError(
            f"{where}: file name {name!r} is not a LOBSTER {kind} file name; expected "
            f"TICKER_YYYY-MM-DD_START_END_{kind}_LEVELS.csv (ticker, date and depth are read from it)"
        )
    return m.groupdict()


def backend() -> str:
    """What load_day and replay run on here, e.g. 'compiled parser, libdeflate inflate' (for benchmarks)."""
    parser = "compiled parser" if _C is not None else "numpy parser (no usable compiled module)"
    return f"{parser}, {'libdeflate' if _fast_inflate() else 'zlib'} inflate"


def _fast_inflate() -> bool:
    """Whether zip members are inflated by libdeflate (the compiled module found it on this system)."""
    return _C is not None and _C.fast_inflate()


def _read_zip(path: Path) -> tuple[str, bytes | np.ndarray, str, bytes | np.ndarray]:
    """The message and orderbook members' names and bytes, checked to be one pair, each member checked (size
    against max_text_bytes, compression ratio, method, encryption) before a byte of it is inflated; any damage
    that only shows while reading (a bad CRC, a broken stream, a size that lies) is a LobsterFormatError too."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError) as e:
        raise LobsterFormatError(f"{path}: not a readable zip archive ({type(e).__name__}: {e})") from None
    with zf:
        msg, ob = _zip_members(zf, path)
        infos = [zf.getinfo(msg), zf.getinfo(ob)]
        limit, why = max_text_bytes()
        total = sum(i.file_size for i in infos)
        for info in infos:
            _check_member(path, info)
        if total > limit:
            big = max(infos, key=lambda i: i.file_size)
            what = f"member {big.filename!r} (its size as the zip's directory declares it)"
            raise _too_big(path, what, big.file_size, total, limit, why)
        for info in infos:
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > RATIO_CHECK_BYTES and ratio > MAX_COMPRESSION_RATIO:
                raise LobsterFormatError(
                    f"{path}: member {info.filename!r} declares {info.file_size:,} bytes from {info.compress_size:,} "
                    f"compressed ({ratio:,.0f} times; LOBSTER files inflate at most about 30, this code allows "
                    f"{MAX_COMPRESSION_RATIO}): a zip bomb or a damaged directory; get the file again from its source"
                )
        return msg, _read_member(zf, path, msg), ob, _read_member(zf, path, ob)


def _check_member(path: Path, info: zipfile.ZipInfo) -> None:
    """Refuses, before reading it, a member this code cannot or must not inflate."""
    where = f"member {info.filename!r}"
    if info.flag_bits & 1:
        raise LobsterFormatError(f"{path}: {where} is encrypted; unzip it with its password and pass the CSV files")
    if info.compress_type not in _METHODS:
        raise LobsterFormatError(
            f"{path}: {where} uses compression method {info.compress_type}, which zipfile cannot read (it reads "
            f"{', '.join(_METHODS.values())}); re-zip it with deflate (zip -9) or pass the CSV files"
        )


def _read_file(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise LobsterFormatError(f"{path}: cannot read it ({type(e).__name__}: {e})") from None


def _zip_members(zf: zipfile.ZipFile, path: Path) -> tuple[str, str]:
    """The names of the message and orderbook members, checked to be one pair."""
    names = zf.namelist()
    found = {}
    for kind in ("message", "orderbook"):
        hits = [n for n in names if (hit := _NAME.match(Path(n).name)) and hit["kind"] == kind]
        if len(hits) != 1:
            raise LobsterFormatError(
                f"{path}: expected exactly one *_{kind}_<L>.csv member, found {len(hits)} among {names}; "
                "a LOBSTER zip holds one message file and its orderbook file"
            )
        found[kind] = hits[0]
    msg, ob = _NAME.match(Path(found["message"]).name), _NAME.match(Path(found["orderbook"]).name)
    if msg.group("ticker", "date", "start", "end", "levels") != ob.group("ticker", "date", "start", "end", "levels"):
        raise LobsterFormatError(
            f"{path}: members {found['message']!r} and {found['orderbook']!r} are not a pair "
            "(ticker, date, window and levels must agree)"
        )
    return found["message"], found["orderbook"]


def _read_member(zf: zipfile.ZipFile, path: Path, name: str) -> bytes | np.ndarray:
    """A zip member's bytes: inflated by libdeflate where it is found (checked against the zip's size and
    CRC-32), else by zipfile (zlib; also what names a corrupt member).

    libdeflate's output goes to a numpy array, whose memory numpy asks for in 2 MB pages: a large member as a
    bytes object costs several times more in 4 KB page faults (BENCHMARKS.md, "LOBSTER replay: messages per
    second")."""
    info = zf.getinfo(name)
    if _fast_inflate() and info.compress_type == zipfile.ZIP_DEFLATED and not info.flag_bits & 1:  # not encrypted
        with open(path, "rb") as f:
            f.seek(info.header_offset)
            header = f.read(30)  # the local header, then the name and extra field, then the stream
            if len(header) == 30 and header[:4] == b"PK\x03\x04":
                name_len, extra_len = struct.unpack("<HH", header[26:30])
                f.seek(info.header_offset + 30 + name_len + extra_len)
                text = np.empty(info.file_size, np.uint8)
                if _C.inflate(f.read(info.compress_size), text, info.CRC):
                    return text
    try:  # zipfile stops at the declared size and checks the CRC: a member that holds more fails here
        with zf.open(info) as member:
            data = member.read(info.file_size + 1)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError, ValueError) as e:
        raise LobsterFormatError(
            f"{path}: member {name!r} is damaged ({type(e).__name__}: {e}); get the file again from its source"
        ) from None
    if len(data) != info.file_size:
        raise LobsterFormatError(
            f"{path}: member {name!r} inflates to {len(data):,}{'+' * (len(data) > info.file_size)} bytes, its "
            f"header says {info.file_size:,}: damaged; get the file again from its source"
        )
    return data


# --------------------------------------------------------------------------------------------------- parsing


def _normalise(text: bytes) -> bytes:
    """LF line ends, exactly one after the last line (trailing blank lines are not rows)."""
    if b"\r" in text:
        text = text.replace(b"\r\n", b"\n")
    if text.endswith(b"\n\n") or not text.endswith(b"\n"):
        text = text.rstrip(b"\n") + b"\n" if text.strip() else b""
    return text


def _lines_array(text: bytes) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The (normalised) text, and the start and end (newline) offsets of each line."""
    buf = np.frombuffer(text, np.uint8)
    ends = np.flatnonzero(buf == 10)
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    return text, starts, ends


def _fast_ints(text: bytes, ncols: int, nrows: int, *, saturation: bool = True) -> np.ndarray | None:
    """Parse `nrows` lines of exactly `ncols` plain integers, or None if the text is anything else.

    np.fromstring saturates out-of-range integers instead of failing: with `saturation` such values send
    the text to the slow path, which names them; without it the caller's range checks must reject them."""
    if nrows == 0:
        return np.zeros((0, ncols), np.int64)
    text = text.replace(b"\n", _SENTINEL_TEXT)
    # Every value, the sentinel included, is now followed by exactly one comma: if the commas are as many as
    # the values expected, np.fromstring can be told the count (see _read_exactly).
    count = nrows * (ncols + 1)
    if np.count_nonzero(np.frombuffer(text, np.uint8) == ord(",")) != count:
        return None
    flat = _read_exactly(text, count)
    if flat is None:
        return None
    table = flat.reshape(nrows, ncols + 1)
    if not (table[:, ncols] == _SENTINEL).all():
        return None
    values = table[:, :ncols]
    if saturation and ((values == _INT64_LIMITS[0]).any() or (values == _INT64_LIMITS[1]).any()):
        return None
    return values


def _read_exactly(text: bytes, count: int) -> np.ndarray | None:
    """np.fromstring(sep=",") of a text holding exactly `count` comma-terminated values; None if one of them
    is not an integer.

    With the count it allocates once instead of growing its output as it reads (a quarter to a third of its
    time on an orderbook file). The caller must have counted: given a count larger than the text holds,
    np.fromstring returns uninitialised memory for the rest without an error; given a smaller one it stops
    early. A value that does not parse raises (-> None) before either can happen."""
    try:
        return np.fromstring(text, dtype=np.int64, count=count, sep=",")
    except ValueError:
        return None


def _parse_table(text: bytes | np.ndarray, levels: int, label: str, nrows: int) -> tuple[np.ndarray, int]:
    """The orderbook file: `nrows` lines of 4 * `levels` integers, and whether _validate_book's rules were
    checked on them (_VALID, _INVALID: by the compiled parser) or are still to be (_UNCHECKED)."""
    if (parsed := _compiled_table(text, levels, nrows)) is not None:
        return parsed
    text = _normalise(bytes(text))  # then maybe the compiled parser after all (e.g. CRLF line ends)
    if (parsed := _compiled_table(text, levels, nrows)) is not None:
        return parsed
    ncols = 4 * levels
    values = _fast_ints(text, ncols, nrows, saturation=False)
    if values is None and (found := text.count(b"\n")) != nrows:
        raise LobsterFormatError(
            f"{label}: {found} rows but the message file has {nrows}; "
            "row k of the orderbook file must be the book after message k (use the matching pair)"
        )
    # The fast path returns a view that skips the sentinel column; copying it would cost more than the
    # strided access does downstream.
    return (values if values is not None else _slow_table(text, ncols, label)), _UNCHECKED


def _compiled_table(text: bytes | np.ndarray, levels: int, nrows: int) -> tuple[np.ndarray, int] | None:
    """The compiled parser's rows and verdict (_VALID / _INVALID); None where it is not built, or the text is
    anything but `nrows` lines of 4 * `levels` plain integers, each ending in a newline (a text it takes is
    one that _normalise leaves as it is)."""
    if _C is None:
        return None
    values = np.empty((nrows, 4 * levels), np.int64)
    status, rows = _C.parse_book(text, values, levels)
    return (values, status) if status != _FALLBACK and rows == nrows else None


def _parse_messages(
    text: bytes | np.ndarray, label: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """The six columns (time_ns int64, type int8, order_id, size, price int64, direction int8) and the seventh
    (LobsterDay.extra; None for a file of six columns)."""
    cols, extra = _compiled_messages(text), None
    if cols is None:  # normalised, the compiled parser may take it after all (e.g. CRLF line ends)
        text = _normalise(bytes(text))
        if not text:
            raise LobsterFormatError(f"{label}: the message file is empty; expected one message per line")
        cols = _compiled_messages(text)
    if cols is None and text.count(b",", 0, text.find(b"\n")) == 6 and (split := _split_extra(text)) is not None:
        # Seven plain columns: the first six are parsed as a six-column file's, by the same parsers.
        text, extra = split
        cols = _compiled_messages(text)
    if cols is None:
        cols = _fast_messages(*_lines_array(text))
    if cols is None:
        time_ns, table, slow_extra = _slow_messages(text, label)
        cols, extra = (time_ns, table), (extra if extra is not None else slow_extra)
    time_ns, table = cols
    return (
        time_ns,
        _narrow(table[:, 0], np.int8, label, 2),
        table[:, 1].copy(),
        table[:, 2].copy(),
        table[:, 3].copy(),
        _narrow(table[:, 4], np.int8, label, 6),
        extra,
    )


def _split_extra(text: bytes) -> tuple[bytes, np.ndarray] | None:
    """A normalised message text of exactly seven fields a line whose seventh is a plain token (at most
    MAX_EXTRA_BYTES bytes, each printable ASCII other than a space: `_slow_messages` keeps it as it is): the
    text of the first six fields of each line, and the tokens (as LobsterDay.extra); else None.

    Vectorised: as many commas as six a line, the first and the sixth of each six inside the same line, pin
    every line to seven fields; the tokens are read one byte position at a time (at most MAX_EXTRA_BYTES
    passes over [M])."""
    buf = np.frombuffer(text, np.uint8)
    ends = np.flatnonzero(buf == 10)
    commas = np.flatnonzero(buf == 44)
    m = ends.size
    if m == 0 or commas.size != 6 * m:
        return None
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 0, ends[:-1] + 1
    sixth = commas[5::6]
    # Sorted positions: with the first comma of group k after line k's start and the sixth before its end,
    # all six lie in line k.
    if not ((commas[0::6] >= starts).all() and (sixth < ends).all()):
        return None
    first = sixth + 1
    lengths = ends - first
    longest = int(lengths.max())
    if longest > MAX_EXTRA_BYTES:
        return None
    width = max(longest, 1)
    tokens = np.zeros((m, width), np.uint8)
    keep = np.ones(buf.size, bool)  # the bytes of the first six fields and the newlines
    keep[sixth] = False
    last = ends - 1  # a token's last byte, or the sixth comma where the token is empty
    for j in range(longest):
        at = np.minimum(first + j, last)  # past a token's end: its last byte again, dropped already
        tokens[:, j] = buf[at]
        keep[at] = False
    inside = np.arange(width) < lengths[:, None]
    tokens *= inside
    if (inside & ((tokens < 0x21) | (tokens > 0x7E))).any():
        return None  # a space, a control or a non-ASCII byte: the slow path strips or names it
    return buf[keep].tobytes(), tokens.view(f"S{width}").reshape(m)


def _compiled_messages(text: bytes | np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The compiled parser's columns (time_ns, then [M, 5] type ... direction); None where it is not built
    or the text is anything but `S.F,t,i,s,p,d` lines of plain integers (1-6 and 1-18 digits in the time),
    each ending in a newline (a text it takes is one that _normalise leaves as it is)."""
    if _C is None or (m := _C.lines(text)) == 0:
        return None
    out = np.empty((6, m), np.int64)
    if _C.parse_messages(text, m, out) != _VALID:
        return None
    return out[0], out[1:].T


def _fast_messages(text: bytes, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Every line `S.F,type,id,size,price,dir` with one decimal point in the time field; else None."""
    m = starts.size
    buf = np.frombuffer(text, np.uint8)
    dots = np.flatnonzero(buf == 46)
    if dots.size != m:
        return None
    commas = np.flatnonzero(buf == 44)
    if commas.size != 5 * m:
        return None
    commas = commas.reshape(m, 5)
    # Sorted positions, as many dots as lines and five commas a line: if each dot and its five commas fall
    # inside line k, in that order, every line is exactly one time field with a dot and five more fields.
    if not ((dots > starts).all() and (commas[:, 0] > dots + 1).all() and (commas[:, 4] < ends).all()):
        return None
    if m > 1 and not (commas[:-1, 4] < starts[1:]).all():
        return None
    # The fraction's digit count comes from positions, so it must be digits only at both ends (np.fromstring
    # would skip a space or a sign there, and one inside fails the parse below).
    first, last = buf[dots + 1], buf[commas[:, 0] - 1]
    if not (((first >= 48) & (first <= 57)).all() and ((last >= 48) & (last <= 57)).all()):
        return None
    frac_digits = commas[:, 0] - dots - 1
    if frac_digits.max() > _MAX_DECIMALS:
        return None
    # The positions above pin every line to `S.F,t,i,s,p,d`: seven fields once '.' and '\n' read ',', each
    # followed by one comma (the text ends in a newline), so the count is known.
    values = _read_exactly(text.translate(_TIME_AND_LINES_TO_COMMAS), 7 * m)
    if values is None:
        return None
    values = values.reshape(m, 7)
    if (values == _INT64_LIMITS[0]).any() or (values == _INT64_LIMITS[1]).any():
        return None  # np.fromstring saturates overflowing integers: let the slow path name them
    seconds, frac = values[:, 0], values[:, 1]
    if (seconds < 0).any() or (frac < 0).any() or (dots - starts > 6).any():
        return None  # signs or absurd magnitudes: the slow path names them
    return seconds * 1_000_000_000 + _frac_to_ns(frac, frac_digits), values[:, 2:]


def _frac_to_ns(frac: np.ndarray, digits: np.ndarray) -> np.ndarray:
    """Decimal fraction (integer value, digit count) to nanoseconds, rounding beyond the 9th decimal.

    LOBSTER files carry at most 9 meaningful decimals, but some rows were printed through a binary float
    (AMZN 2012-06-21 level 5, row 67823: 43002.632812672004); round those to the nearest nanosecond."""
    ns = frac * 10 ** np.maximum(9 - digits, 0)
    long = digits > 9
    if long.any():
        scale = 10 ** (digits[long] - 9)
        ns[long] = (frac[long] + scale // 2) // scale
    return ns


def _narrow(col: np.ndarray, dtype: type, label: str, column: int) -> np.ndarray:
    info = np.iinfo(dtype)
    bad = np.flatnonzero((col < info.min) | (col > info.max))
    if bad.size:
        i = int(bad[0])
        raise LobsterFormatError(
            f"{label}: row {i + 1}, column {column} ({MESSAGE_COLUMNS[column - 1]}): value {col[i]} "
            f"is out of range; expected {_EXPECT[column - 1]}"
        )
    return col.astype(dtype)


_EXPECT = (
    f"non-negative decimal seconds after midnight (at most 6 integer digits, {_MAX_DECIMALS} decimals)",
    f"an event type in {EVENT_TYPES}",
    "a non-negative integer order id (negative only on a cross, type 6)",
    f"a positive integer number of shares below {MAX_SIZE:.0e} (0 for a halt, type 7, or a cross, type 6)",
    f"a price in dollars*10000, a positive multiple of {TICK} ({TICK // 2} for a hidden execution, type 5)",
    "a direction of 1 (buy) or -1 (sell)",
)


def _row_error(label: str, row: int, column: int, value: object, expected: str) -> LobsterFormatError:
    return LobsterFormatError(f"{label}: row {row}, column {column}: value {value!r}; expected {expected}")


def _slow_table(text: bytes, ncols: int, label: str) -> np.ndarray:
    out = np.empty((text.count(b"\n"), ncols), np.int64)
    for i, line in enumerate(text.split(b"\n")[:-1]):
        fields = line.split(b",")
        if len(fields) != ncols:
            raise LobsterFormatError(
                f"{label}: row {i + 1} has {len(fields)} columns, expected {ncols}: {line[:120]!r}"
            )
        for j, f in enumerate(fields):
            out[i, j] = _int_field(f, label, i + 1, j + 1, "an integer")
    return out


def _int_field(field: bytes, label: str, row: int, column: int, expected: str) -> int:
    s = field.strip()
    if not re.fullmatch(rb"[+-]?\d+", s):
        raise _row_error(label, row, column, field.decode(errors="replace"), expected)
    v = int(s)
    if not _INT64_LIMITS[0] < v < _INT64_LIMITS[1]:
        raise _row_error(label, row, column, field.decode(errors="replace"), expected + " (fits in int64)")
    return v


def _slow_messages(text: bytes, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Line by line: (time_ns, [M, 5] type ... direction, the seventh column or None). Every line has as many
    columns as the first, 6 or 7 (6 when the first has any other count); the first row that does not is named."""
    lines = text.split(b"\n")[:-1]
    time_ns = np.empty(len(lines), np.int64)
    table = np.empty((len(lines), 5), np.int64)
    ncols = 7 if lines and lines[0].count(b",") == 6 else 6
    names = ", ".join(MESSAGE_COLUMNS + (EXTRA_COLUMN,) * (ncols == 7))
    tokens: list[bytes] = []
    for i, line in enumerate(lines):
        fields = line.split(b",")
        if len(fields) != ncols:
            same = " (every row as many as row 1: 6, or 7 with a seventh column)" if len(fields) in (6, 7) else ""
            raise LobsterFormatError(
                f"{label}: row {i + 1} has {len(fields)} columns, expected {ncols}{same} ({names}): {line[:120]!r}"
            )
        t = fields[0].strip()
        m = re.fullmatch(rb"(\d{1,6})(?:\.(\d{0,%d}))?" % _MAX_DECIMALS, t)
        if m is None:
            raise _row_error(label, i + 1, 1, fields[0].decode(errors="replace"), _EXPECT[0])
        frac = m.group(2) or b"0"
        ns = _frac_to_ns(np.array([int(frac)]), np.array([len(frac)]))[0]
        time_ns[i] = int(m.group(1)) * 1_000_000_000 + int(ns)
        for j in range(5):
            table[i, j] = _int_field(fields[j + 1], label, i + 1, j + 2, _EXPECT[j + 1])
        if ncols == 7:
            token = fields[6].strip()
            if not re.fullmatch(rb"[\x21-\x7e]{0,%d}" % MAX_EXTRA_BYTES, token):
                raise LobsterFormatError(
                    f"{label}: row {i + 1}, column 7 ({EXTRA_COLUMN}): value {fields[6].decode(errors='replace')!r}; "
                    f"expected at most {MAX_EXTRA_BYTES} printable ASCII characters without spaces or commas "
                    "(LOBSTER's seventh column, kept as text)"
                )
            tokens.append(token)
    if ncols == 6:
        return time_ns, table, None
    return time_ns, table, np.array(tokens, f"S{max(1, max(map(len, tokens)))}")


# ------------------------------------------------------------------------------------------------ validation


def _first(label: str, bad: np.ndarray, column: int, values: np.ndarray, expected: str) -> None:
    idx = np.flatnonzero(bad)
    if idx.size:
        i = int(idx[0])
        more = f" ({idx.size - 1} more rows like it)" if idx.size > 1 else ""
        raise LobsterFormatError(
            f"{label}: row {i + 1}, column {column} ({MESSAGE_COLUMNS[column - 1]}): value {values[i]}; "
            f"expected {expected}{more}"
        )


def _validate_messages(
    label: str,
    time_ns: np.ndarray,
    event_type: np.ndarray,
    order_id: np.ndarray,
    size: np.ndarray,
    price: np.ndarray,
    direction: np.ndarray,
) -> None:
    _first(label, ~np.isin(event_type, EVENT_TYPES), 2, event_type, _EXPECT[1])
    halt, cross = event_type == 7, event_type == CROSS
    _first(label, ~cross & (order_id < 0), 3, order_id, _EXPECT[2])
    _first(label, ~halt & ~cross & ((size <= 0) | (size >= MAX_SIZE)), 4, size, _EXPECT[3])
    _first(label, halt & (size != 0), 4, size, "size 0 on a halt message (type 7)")
    cross_size = f"a number of shares in 0..{MAX_SIZE - 1} on a cross (type 6; 0 where it matched nothing)"
    _first(label, cross & ((size < 0) | (size >= MAX_SIZE)), 4, size, cross_size)
    _first(label, ~cross & (direction != 1) & (direction != -1), 6, direction, _EXPECT[5])
    cross_direction = "a direction of 1, -1 or 0 on a cross (type 6: an auction trade has no side)"
    _first(label, cross & ((direction < -1) | (direction > 1)), 6, direction, cross_direction)
    visible = (event_type >= 1) & (event_type <= 4)
    _first(label, visible & ((price <= 0) | (price % TICK != 0)), 5, price, _EXPECT[4])
    hidden = event_type == 5
    _first(label, hidden & ((price <= 0) | (price % (TICK // 2) != 0)), 5, price, _EXPECT[4])
    cross_price = f"a non-negative multiple of {TICK // 2} on a cross (type 6; 0 where it matched nothing)"
    _first(label, cross & ((price < 0) | (price % (TICK // 2) != 0)), 5, price, cross_price)
    halt_price = "-1 (halt), 0 (quoting) or 1 (resume) on a type 7 message"
    _first(label, halt & ((price < -1) | (price > 1)), 5, price, halt_price)
    back = np.flatnonzero(time_ns[1:] < time_ns[:-1])
    if back.size:
        i = int(back[0]) + 1
        raise LobsterFormatError(
            f"{label}: row {i + 1}, column 1 (time): {_secs(time_ns[i])} is before the previous row's "
            f"{_secs(time_ns[i - 1])}; expected non-decreasing times (rows in file order)"
        )


def _shown(v: np.integer) -> str:
    return f"{v} (the int64 limit: the text overflows it)" if int(v) in _INT64_LIMITS else str(v)


def _secs(ns: int) -> str:
    return f"{int(ns) // 1_000_000_000}.{int(ns) % 1_000_000_000:09d}"


def _validate_book(label: str, book: np.ndarray, levels: int) -> None:
    """Every check is one or two passes over [M, levels] strided views; rows are located only on failure."""

    def fail(bad: np.ndarray, first_col: int, expected: str) -> None:
        if not bad.any():
            return
        rows = np.flatnonzero(bad.any(axis=1))
        i = int(rows[0])
        c = first_col + 4 * int(np.flatnonzero(bad[i])[0])
        lv, what = c // 4 + 1, ("ask_price", "ask_size", "bid_price", "bid_size")[c % 4]
        more = f" ({rows.size - 1} more rows like it)" if rows.size > 1 else ""
        raise LobsterFormatError(
            f"{label}: row {i + 1}, column {c + 1} ({what}_{lv}): value {_shown(book[i, c])}; expected {expected}{more}"
        )

    for side, dummy in ((0, DUMMY_ASK_PRICE), (2, DUMMY_BID_PRICE)):
        p, s = book[:, side::4], book[:, side + 1 :: 4]
        empty = p == dummy
        # One unsigned compare keeps real prices in [TICK, DUMMY_ASK_PRICE) (negatives wrap to huge).
        off_grid = ((p - TICK).view(np.uint64) >= np.uint64(DUMMY_ASK_PRICE - TICK)) | (p % TICK != 0)
        fail(off_grid & ~empty, side, f"a positive multiple of {TICK} or the empty-level value {dummy}")
        fail(s.view(np.uint64) >= np.uint64(MAX_SIZE), side + 1, f"a size in 0..{MAX_SIZE - 1}")
        fail((s == 0) != empty, side + 1, "size 0 exactly on empty levels (dummy price), > 0 elsewhere")
        if levels > 1:
            # Strictly away from the touch; dummies (the extreme values) can only follow occupied levels.
            ordered = (p[:, 1:] > p[:, :-1]) if side == 0 else (p[:, 1:] < p[:, :-1])
            fail(
                ~(ordered | empty[:, 1:]),
                side + 4,
                "levels ordered away from the best price, empty levels only after occupied ones",
            )
    # With prices validated, dummies can never cross: a dummy ask is above and a dummy bid below every price.
    crossed = np.flatnonzero(book[:, 2] >= book[:, 0])
    if crossed.size:
        i = int(crossed[0])
        raise LobsterFormatError(
            f"{label}: row {i + 1}: crossed book, best bid {book[i, 2]} >= best ask {book[i, 0]} "
            f"({crossed.size} such rows); expected best bid < best ask where both sides exist"
        )

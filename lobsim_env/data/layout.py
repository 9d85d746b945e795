"""The day cache: one folder per day, memory-mappable arrays in one event layout, and a manifest.

A day is one instrument on one venue on one date. `python -m lobsim_env.data ingest` writes each day once, from
whatever source it came from (LOBSTER, Binance, Tardis, Databento), as

    DIR/<venue>/<instrument>/<date>/
        manifest.json   what the day is: the Manifest below
        events.npy      EVENT_DTYPE[n]: every message of the day, in order
        book.npy        int64[n, 4 * levels]: the visible book after each message
        reference.npy   int64[r, 5], where the source has quotes of its own: (event index, bid price, bid size,
                        ask price, ask size), the venue's own best quotes after that event (Binance's
                        bookTicker), which `check` compares with the rebuilt book

`.npy` files open with `numpy.load(..., mmap_mode="r")`: N processes on one host that replay the same days share
one copy in the page cache, and a process's memory does not grow with the days it can draw from.

The book's columns are LOBSTER's order, in the day's integer units: ask_price_1, ask_size_1, bid_price_1,
bid_size_1, ask_price_2, ...; prices in ticks (price / tick_size), sizes in lots (quantity / lot_size); an empty
level is price 0 and size 0. Row k is the book after message k.

Event kinds (EVENT_KINDS). `side` is the resting side a message touches: +1 bid, -1 ask (0 where none):
- ADD, CANCEL (partial), DELETE, EXECUTE (a visible resting order filled), HIDDEN (a hidden order filled),
  CROSS (an auction cross), HALT: LOBSTER's types 1-7 (L3: each carries its order_id; `first_seen` is the
  index of that order's ADD, -1 when the order rested before the file opened);
- LEVEL: an L2 price level set to `size` lots (`delta` is the change; 0 lots removes the level);
- TRADE: an L2 trade print of `size` lots at `price`, `side` the resting side it hit (a buyer's market order
  hits the asks: side -1), as a venue's trade stream reports it; it does not change the book by itself, the
  venue's depth messages do.
`delta` is, for every kind, the change of the displayed size at `price` on `side` that the message made (0 for
HIDDEN, CROSS, HALT, TRADE and for messages beyond the book's depth).

A day is written whole or not at all (a temporary folder renamed into place), and writing the same source
files again is a no-op (the manifest keeps their SHA-256), unless the source's rules changed since (`ingest`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lobsim_env.validation import InputError

LAYOUT_VERSION = "foxhunt.day/1"
MANIFEST = "manifest.json"
EVENTS = "events.npy"
BOOK = "book.npy"
REFERENCE = "reference.npy"

ADD, CANCEL, DELETE, EXECUTE, HIDDEN, CROSS, HALT, LEVEL, TRADE = 1, 2, 3, 4, 5, 6, 7, 8, 9
EVENT_KINDS = {
    ADD: "add",
    CANCEL: "cancel",
    DELETE: "delete",
    EXECUTE: "execute",
    HIDDEN: "hidden",
    CROSS: "cross",
    HALT: "halt",
    LEVEL: "level",
    TRADE: "trade",
}
EVENT_DTYPE = np.dtype(
    [
        ("ts", "<i8"),  # ns since the Unix epoch, UTC (the venue's own event time where it gives one)
        ("kind", "u1"),
        ("side", "i1"),
        ("price", "<i8"),  # ticks
        ("size", "<i8"),  # lots (LEVEL: the level's new size)
        ("delta", "<i8"),  # lots: the change of displayed size at (price, side)
        ("order_id", "<i8"),  # L3 only, else 0
        ("first_seen", "<i8"),  # L3: index of the order's ADD in this day, -1 if it rested before; L2: -1
    ],
    align=True,  # C's layout (lobsim_env/replay/_replay_fast.c reads the rows in place): 56 bytes a row
)
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class DataError(InputError):
    """Bad market data (a file, a cache, a day): the message names the file, the value and the fix."""


@dataclass(kw_only=True, frozen=True)
class SourceFile:
    """A file a day was built from."""

    name: str
    sha256: str
    bytes: int


@dataclass(kw_only=True, frozen=True)
class Manifest:
    """What a day of the cache is (manifest.json)."""

    layout: str = LAYOUT_VERSION
    venue: str
    """e.g. 'nasdaq', 'binance-usdm', 'binance-coinm', 'binance-spot' (Tardis: its exchange name)."""
    instrument: str
    """The venue's symbol: 'AMZN', 'BTCUSDT', 'BTCUSD_PERP'."""
    date: str
    """YYYY-MM-DD: the trading date of the day's messages (UTC for crypto, New York for NASDAQ; Databento: of its
    median message, its files being cut at UTC midnight)."""
    source: str
    """'lobster', 'binance', 'tardis' or 'databento'."""
    ingest: str = ""
    """The version of the source module's rules that built the day's events (Binance: 'binance/2'), where the
    source records one ('' otherwise, and for a day written before it did): ingest rewrites a day of another
    version even from the same files, so a cache never mixes days built by two sets of rules."""
    depth: str
    """'L3' (each order: the agent's exact queue place) or 'L2' (price levels: a queue model places it)."""
    levels: int
    """Book levels per side in book.npy."""
    tick_size: float
    """Price of one tick in the quote currency."""
    lot_size: float
    """Quantity of one lot (shares, coins or contracts)."""
    contract_multiplier: float = 1.0
    """Quote currency per unit of quantity per unit of price: 1 for shares and linear contracts. For an inverse
    contract (COIN-M), its face value in USD (100 for BTCUSD_PERP)."""
    inverse: bool = False
    """True for inverse contracts (COIN-M: quantity in USD face value, PnL in the coin)."""
    quote_usd: float = 1.0
    """USD per unit of the quote currency (USDT taken at 1)."""
    maker_fee_bps: float = 0.0
    """Fee of a passive fill in basis points of the notional (negative: a rebate), where the source implies one."""
    taker_fee_bps: float = 0.0
    maker_fee_per_lot: float = 0.0
    """Fee per lot in the quote currency (NASDAQ: per share), added to the bps fee."""
    taker_fee_per_lot: float = 0.0
    order_lots: int = 1
    """A natural order size in lots: the median trade of the day (at least 1)."""
    n_events: int
    first_ts: int
    """ns since the Unix epoch, UTC."""
    last_ts: int
    files: tuple[SourceFile, ...] = ()
    continues: str | None = None
    """The day (venue/instrument/date) whose last book this day started from, for a capture without a snapshot
    of its own; None when it opens from its own snapshot or file."""
    repairs: dict = field(default_factory=dict)
    """What ingest repaired, counted by kind (e.g. {'stale_depth_messages': 3}); empty when nothing was."""
    notes: tuple[str, ...] = ()
    """What the source cannot tell (e.g. 'L2: queue places come from the queue model')."""

    @property
    def key(self) -> str:
        return f"{self.venue}/{self.instrument}/{self.date}"

    @property
    def usd_per_tick_lot(self) -> float:
        """USD a one-tick move is worth on one lot held (a linear contract; for an inverse one, at the price 1)."""
        return self.tick_size * self.lot_size * self.contract_multiplier * self.quote_usd

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["files"] = [dataclasses.asdict(f) for f in self.files]
        return d

    @classmethod
    def from_json(cls, d: dict, where: str) -> Manifest:
        if not isinstance(d, dict) or d.get("layout") != LAYOUT_VERSION:
            got = d.get("layout") if isinstance(d, dict) else type(d).__name__
            raise DataError(
                f"{where}: layout={got!r}, this code reads {LAYOUT_VERSION!r}; ingest the source files again "
                "(python -m lobsim_env.data ingest PATH... --out DIR)"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise DataError(f"{where}: unknown manifest keys {unknown}; ingest the source files again")
        try:
            files = tuple(SourceFile(**f) for f in d.get("files", ()))
            m = cls(**{**d, "files": files, "notes": tuple(d.get("notes", ()))})
        except TypeError as err:
            raise DataError(f"{where}: {err}; ingest the source files again") from None
        m.check(where)
        return m

    def check(self, where: str) -> None:
        bad = []
        for name in ("venue", "instrument"):
            if not isinstance(getattr(self, name), str) or not _SAFE.match(getattr(self, name)):
                bad.append(f"{name}={getattr(self, name)!r} must be 1-64 of A-Z a-z 0-9 . _ -")
        if not isinstance(self.date, str) or not _DATE.match(self.date):
            bad.append(f"date={self.date!r} must be YYYY-MM-DD")
        if self.depth not in ("L2", "L3"):
            bad.append(f"depth={self.depth!r} must be 'L2' or 'L3'")
        for name in ("tick_size", "lot_size", "contract_multiplier", "quote_usd"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not np.isfinite(v) or v <= 0:
                bad.append(f"{name}={v!r} must be a number > 0")
        for name in ("levels", "n_events", "order_lots"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                bad.append(f"{name}={v!r} must be an int >= 1")
        if bad:
            raise DataError(f"{where}: " + "; ".join(bad))


@dataclass(kw_only=True)
class CheckReport:
    """What `python -m lobsim_env.data check` found for one day: rows compared between the rebuilt book and the
    source's own (a LOBSTER orderbook row, a Binance bookTicker quote or depth row), how many matched, how many
    differ for a documented reason (`explained`, by reason), and the first few that differ for no known reason."""

    day: str
    rows: int = 0
    matched: int = 0
    explained: dict = field(default_factory=dict)
    unexplained: int = 0
    first: list = field(default_factory=list)
    """Up to 5 lines naming an unexplained row: event index, what the source says, what the rebuild says."""

    @property
    def ok(self) -> bool:
        return self.unexplained == 0

    def count_rows(
        self, lo: int, rebuilt: np.ndarray, cached: np.ndarray, crossed: np.ndarray, bad: dict[int, str]
    ) -> None:
        """Counts the rows lo .. lo + len(rebuilt) - 1 of a replay from the events: a row matches where the replay's
        book is the cached one and its event broke no rule (`bad`: event index -> why); a matching row whose book is
        crossed at the end of its timestamp is explained (`crossed_in_source`: the source showed it so); every other
        row is unexplained, the first five named."""
        same = (rebuilt == cached[lo : lo + len(rebuilt)]).all(axis=1)
        for j in range(len(rebuilt)):
            k = lo + j
            self.rows += 1
            if same[j] and k not in bad:
                if crossed[j]:
                    self.explained["crossed_in_source"] = self.explained.get("crossed_in_source", 0) + 1
                else:
                    self.matched += 1
                continue
            self.unexplained += 1
            if len(self.first) < 5:
                why = bad.get(k) or f"book.npy {cached[k].tolist()}, the replay {rebuilt[j].tolist()}"
                self.first.append(f"event {k}: {why}")


@dataclass(kw_only=True, frozen=True)
class Day:
    """A day of the cache, its arrays memory-mapped (read only)."""

    manifest: Manifest
    events: np.ndarray
    """EVENT_DTYPE[n]."""
    book: np.ndarray
    """int64[n, 4 * levels]."""
    path: Path
    reference: np.ndarray | None = None
    """int64[r, 5] (REFERENCE), or None where the source has no quotes of its own."""

    @property
    def key(self) -> str:
        return self.manifest.key


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def source_file(path: str | Path) -> SourceFile:
    p = Path(path)
    return SourceFile(name=p.name, sha256=sha256_of(p), bytes=p.stat().st_size)


def day_dir(root: str | Path, m: Manifest) -> Path:
    return Path(root) / m.venue / m.instrument / m.date


def read_manifest(folder: str | Path) -> Manifest:
    path = Path(folder) / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DataError(f"{folder}: no {MANIFEST}; not a day of a cache (python -m lobsim_env.data ls DIR)") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: not JSON ({err}); ingest the source files again") from None
    return Manifest.from_json(d, str(path))


def is_current(root: str | Path, m: Manifest) -> bool:
    """True when the cache already holds this day built from the same source files by the same version of the
    source's rules (`Manifest.ingest`): ingest skips it."""
    folder = day_dir(root, m)
    try:
        old = read_manifest(folder)
    except DataError:
        return False
    same = old.files == m.files and old.ingest == m.ingest
    return same and (folder / EVENTS).is_file() and (folder / BOOK).is_file()


def write_day(
    root: str | Path, m: Manifest, events: np.ndarray, book: np.ndarray, reference: np.ndarray | None = None
) -> Path:
    """Writes a day whole or not at all: a temporary folder beside it, fsynced, renamed into place (a day of the
    same key there before is replaced only once the new one is complete). Returns its folder."""
    m.check(f"day {m.key}")
    if events.dtype != EVENT_DTYPE or events.ndim != 1:
        raise ValueError(f"events must be EVENT_DTYPE[n], got {events.dtype}{events.shape}")
    if book.dtype != np.int64 or book.shape != (events.shape[0], 4 * m.levels):
        raise ValueError(f"book must be int64[{events.shape[0]}, {4 * m.levels}], got {book.dtype}{book.shape}")
    if m.n_events != events.shape[0]:
        raise ValueError(f"manifest n_events={m.n_events} but {events.shape[0]} events")
    if reference is not None and (reference.dtype != np.int64 or reference.ndim != 2 or reference.shape[1] != 5):
        raise ValueError(f"reference must be int64[r, 5], got {reference.dtype}{reference.shape}")
    final = day_dir(root, m)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{m.date}.", suffix=".tmp", dir=final.parent))
    try:
        arrays = [(EVENTS, events), (BOOK, book)] + ([(REFERENCE, reference)] if reference is not None else [])
        for name, arr in arrays:
            with open(tmp / name, "wb") as f:
                np.save(f, np.ascontiguousarray(arr), allow_pickle=False)
                f.flush()
                os.fsync(f.fileno())
        with open(tmp / MANIFEST, "w") as f:
            json.dump(m.to_json(), f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        old = None
        if final.exists():
            old = final.with_name(f".{m.date}.old-{os.getpid()}")
            os.rename(final, old)
        os.rename(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        with contextlib.suppress(OSError):  # the rename reaches the disk with its folder's entry
            fd = os.open(final.parent, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def open_day(folder: str | Path) -> Day:
    """A day's manifest and its arrays, memory-mapped read-only; DataError naming what is wrong otherwise."""
    folder = Path(folder)
    m = read_manifest(folder)
    arrays = {}
    for name in (EVENTS, BOOK):
        try:
            arrays[name] = np.load(folder / name, mmap_mode="r", allow_pickle=False)
        except FileNotFoundError:
            raise DataError(f"{folder}: no {name}; ingest the source files again") from None
        except (ValueError, OSError) as err:
            raise DataError(f"{folder / name}: not a readable .npy ({err}); ingest the source files again") from None
    events, book = arrays[EVENTS], arrays[BOOK]
    if events.dtype != EVENT_DTYPE or events.shape != (m.n_events,):
        raise DataError(
            f"{folder / EVENTS}: {events.dtype}{events.shape}, the manifest says {m.n_events} events of layout "
            f"{LAYOUT_VERSION}; ingest the source files again"
        )
    if book.dtype != np.int64 or book.shape != (m.n_events, 4 * m.levels):
        raise DataError(
            f"{folder / BOOK}: {book.dtype}{book.shape}, expected int64[{m.n_events}, {4 * m.levels}]; "
            "ingest the source files again"
        )
    reference = None
    if (folder / REFERENCE).exists():
        try:
            reference = np.load(folder / REFERENCE, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as err:
            why = f"not a readable .npy ({err}); ingest the source files again"
            raise DataError(f"{folder / REFERENCE}: {why}") from None
        if reference.dtype != np.int64 or reference.ndim != 2 or reference.shape[1] != 5:
            raise DataError(f"{folder / REFERENCE}: {reference.dtype}{reference.shape}, expected int64[r, 5]")
    return Day(manifest=m, events=events, book=book, path=folder, reference=reference)


def list_days(root: str | Path) -> list[Manifest]:
    """Every day of a cache, by date, then venue and instrument; DataError for a root that is not a cache."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a folder; make a cache with python -m lobsim_env.data ingest PATH... --out DIR")
    found = [read_manifest(p.parent) for p in sorted(root.glob(f"*/*/*/{MANIFEST}")) if p.parent.name[0] != "."]
    return sorted(found, key=lambda m: (m.date, m.venue, m.instrument))


def select_days(root: str | Path, names: list[str] | tuple[str, ...] | None = None) -> list[Manifest]:
    """The days of a cache that `names` picks (None or empty: all). A name is a key (venue/instrument/date), a venue,
    an instrument, a date, venue/instrument or instrument/date; DataError naming one that matches nothing."""
    days = list_days(root)
    if not days:
        raise DataError(f"{root}: a cache with no days; python -m lobsim_env.data ingest PATH... --out {root}")
    if not names:
        return days
    picked: list[Manifest] = []
    for name in names:
        hits = [
            m
            for m in days
            if name in (m.key, m.venue, m.instrument, m.date, f"{m.instrument}/{m.date}", f"{m.venue}/{m.instrument}")
        ]
        if not hits:
            listed = ", ".join(m.key for m in days[:8]) + (" ..." if len(days) > 8 else "")
            raise DataError(f"--days {name!r} matches no day of {root} (it has: {listed})")
        picked += [m for m in hits if m not in picked]
    return sorted(picked, key=lambda m: (m.date, m.venue, m.instrument))

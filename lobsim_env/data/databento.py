"""Databento MBO (market by order, L3) files in: each instrument of a `.dbn` / `.dbn.zst` file -> a day of the cache.

A DBN file is Databento's binary encoding: a metadata header (dataset, schema, symbology) and fixed-size records,
plain or zstd-compressed. Reading one needs the optional `databento-dbn` package (`pip install databento-dbn`);
without it `claims` still recognises the files (by name and first bytes) and `ingest` says what to install.

An MBO record (rtype 160) is one order event: `ts_event` (the matching engine's time, ns), `ts_recv` (Databento's
capture time; the file's order), `order_id`, `price` (fixed point, 1e-9 units), `size`, `flags`, `action` and
`side` (A ask / B bid / N none). The actions, and the cache's L3 events each becomes (layout.EVENT_KINDS):

- A add: ADD; the order's `first_seen` is this event's index in the day.
- C cancel, `size` the quantity cancelled: CANCEL, or DELETE where it takes the order's whole rest.
- M modify, giving the order's new price and size: a new price or a larger size loses queue priority (DELETE,
  then ADD with a new `first_seen`); a smaller size keeps it (CANCEL of the difference); a modify of an order
  the file never added is an add (Databento's own rule).
- F fill, a resting order filled: EXECUTE, taking the filled size off the order. Databento's book does not change
  on an F: each fill comes with a C (or an M) of the same order that takes the size off. That record is folded
  into the EXECUTE (no event of its own; counted in the notes) up to the filled size; the rest of it, if any, is
  a cancel of its own.
- T trade, the aggressing side: TRADE, `side` the resting side it hit (a buy aggressor, B, hit the asks: -1; N:
  0); the book does not change.
- R clear book: every resting order DELETEd (counted in `repairs`, `book_clears`: a snapshot opens with one).
- N none: no event (counted).

An order the file never added (it rested before the file opened, where the file has no snapshot) is not in the
book: its C and F events carry `first_seen` -1 and `delta` 0, counted in the notes. Every other order's events
must match its side and price, and no order may be cancelled or filled beyond its size (DataError; records are
numbered from 0 among the file's MBO records).

Records of other types (status, system, symbol mapping) are skipped, counted. One file may hold several
instruments (and, in a multi-venue dataset, several publishers): each (publisher, instrument) is a day. Its venue
is the dataset's venue code (XNAS.ITCH -> 'xnas'; with several publishers, 'dbeq-p40' and so on), its instrument
the symbol the metadata's symbology maps the instrument id to (the instrument id itself where it has none), its
date that of its median message (snapshot records aside), in New York for the US datasets, UTC for the others:
Databento splits files by UTC day, so a US winter day's file opens with the evening before (19:00-20:00 New York);
a file of more than 36 hours of messages is refused. The event time is `ts_event` (on a snapshot record, whose
`ts_event` is the order's original time, `ts_recv`: the snapshot's time), raised to the previous event's where it
goes back (`repairs`: `ts_event_backwards`); `ts_recv` going back is an error, except on records flagged
F_BAD_TS_RECV.

Units: prices in ticks of `tick_size`, inferred as the gcd of the day's prices unless the caller passes one; sizes
in lots of `lot_size` (default 1: DBN sizes are whole shares or contracts). Fees: not in DBN files (0).
Top-of-book-only MBO (records flagged F_TOB: IEX TOPS, NYSE National) is refused: it is not an order book.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

import numpy as np

from lobsim_env.data.l2book import ASK, BID, L2Book
from lobsim_env.data.layout import (
    ADD,
    CANCEL,
    DELETE,
    EVENT_DTYPE,
    EXECUTE,
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

INSTALL = "pip install databento-dbn (the project's extra: pip install 'foxhunt-ray[databento]')"
DBN_MAGIC = b"DBN"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
PRICE_SCALE = 1_000_000_000
UNDEF_PRICE = 2**63 - 1
F_LAST, F_TOB, F_SNAPSHOT, F_BAD_TS_RECV = 0x80, 0x40, 0x20, 0x08
MBO_DTYPE = np.dtype(
    [
        ("length", "u1"),  # record length in 4-byte words: 14
        ("rtype", "u1"),
        ("publisher_id", "<u2"),
        ("instrument_id", "<u4"),
        ("ts_event", "<u8"),
        ("order_id", "<u8"),
        ("price", "<i8"),
        ("size", "<u4"),
        ("flags", "u1"),
        ("channel_id", "u1"),
        ("action", "S1"),
        ("side", "S1"),
        ("ts_recv", "<u8"),
        ("ts_in_delta", "<i4"),
        ("sequence", "<u4"),
    ]
)
"""DBN's MBO record (versions 1-3 alike), 56 bytes."""
_NEW_YORK = {
    "XNAS", "XBOS", "XPSX", "XNYS", "ARCX", "XASE", "XCHI", "XCIS", "BATS", "BATY", "EDGA", "EDGX", "IEXG",
    "MEMX", "EPRL", "XMIO", "DBEQ", "EQUS", "OPRA", "XNDX", "FINN", "FINY", "FINC",
}  # fmt: skip
"""Dataset venue codes whose day is New York's (US equities and options)."""
_ACTIONS = b"ACMRTFN"
_MAX_SPAN_NS = 36 * 3600 * 10**9  # a session with its pre- and post-market, not two days


@dataclass(kw_only=True)
class DbnFile:
    """The MBO records of one DBN file and what its metadata says."""

    path: Path
    dataset: str
    records: np.ndarray
    """MBO_DTYPE[n], in the file's order."""
    symbols: dict[int, list[tuple[str, str, str]]] = field(default_factory=dict)
    """instrument_id -> (first date, end date exclusive, symbol) from the metadata's mappings (or the stream's
    symbol mapping records)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Records that are not MBO, by type."""


# ---------------------------------------------------------------------------------------------------- public API


def claims(path: Path) -> bool:
    """True for a DBN file (name .dbn or .dbn.zst; it opens with 'DBN', or zstd's magic for .dbn.zst). Needs no
    databento-dbn."""
    path = Path(path)
    name = path.name
    if not (name.endswith(".dbn") or name.endswith(".dbn.zst")) or not path.is_file():
        return False
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:3] == DBN_MAGIC or (name.endswith(".zst") and head == ZSTD_MAGIC)


def ingest(
    paths: list[Path],
    out: Path,
    *,
    levels: int = 10,
    tick_size: float | None = None,
    lot_size: float | None = None,
) -> list[tuple[Manifest, bool]]:
    """Writes each day (publisher, instrument) of these DBN MBO files into the cache `out`; returns (manifest,
    written) per day, by date, written False where the cache already holds it from the same file with the same
    levels and units (a no-op). DataError names the file, record and value of bad input (and what to install
    where databento-dbn is missing); a day is written whole or not at all."""
    if not isinstance(levels, int) or isinstance(levels, bool) or levels < 1:
        raise DataError(f"levels={levels!r} must be an int >= 1")
    for name, v in (("tick_size", tick_size), ("lot_size", lot_size)):
        if v is not None and (not isinstance(v, int | float) or isinstance(v, bool) or not np.isfinite(v) or v <= 0):
            raise DataError(f"{name}={v!r} must be a number > 0 (or None: tick inferred, lot 1)")
    results: list[tuple[Manifest, bool]] = []
    seen: dict[str, Path] = {}
    for path in [Path(p) for p in paths]:
        dbn = read_dbn(path)
        files = (source_file(path),)
        for key, idx in _groups(dbn.records):
            venue, symbol, date = _day_key(dbn, key, dbn.records[idx])
            where = f"{path} (instrument {key[1]}, publisher {key[0]})"
            key_only = Manifest(
                venue=venue, instrument=symbol, date=date, source="databento", depth="L3", levels=levels,
                tick_size=1.0, lot_size=1.0, n_events=1, first_ts=0, last_ts=0, files=files,
            )  # fmt: skip
            try:
                key_only.check(where)
            except DataError as err:
                raise DataError(f"{err}: the venue and symbol name the day's folder in the cache") from None
            if key_only.key in seen:
                raise DataError(
                    f"{path} and {seen[key_only.key]} both hold {key_only.key}: ingest one file per instrument and day"
                )
            seen[key_only.key] = path
            if is_current(out, key_only):
                old = read_manifest(day_dir(out, key_only))
                if old.levels == levels and tick_size in (None, old.tick_size) and lot_size in (None, old.lot_size):
                    results.append((old, False))
                    continue
            m, events, book = day_from_records(
                dbn.records[idx], dataset=dbn.dataset, venue=venue, instrument=symbol, date=date, levels=levels,
                tick_size=tick_size, lot_size=lot_size, where=where, record_index=idx,
            )  # fmt: skip
            notes = m.notes + tuple(f"skipped {v} {k} records of the file" for k, v in sorted(dbn.skipped.items()))
            m = dataclasses.replace(m, files=files, notes=notes)
            write_day(out, m, events, book)
            results.append((m, True))
    return sorted(results, key=lambda r: (r[0].date, r[0].venue, r[0].instrument))


def check(day: Day) -> CheckReport:
    """Replays the day's L3 events from an empty book (each order by its id, levels in an L2Book) and compares
    every book.npy row with the replay; also that each CANCEL, DELETE and EXECUTE of an order the day added
    matches its side, price and first_seen and takes no more than rests (a DELETE all of it), that an order the
    day never added carries first_seen -1 and changes nothing, and that each event's delta is the change it made.
    A row where the replayed book is crossed after the last event of its timestamp is `explained`
    ('crossed_in_source') when book.npy holds that very book; every other difference is unexplained."""
    rep = CheckReport(day=day.key)
    ev, rows = day.events, day.book
    n, width = rows.shape
    book = L2Book(day.manifest.levels)
    orders: dict[int, list[int]] = {}
    cols = [ev[c].tolist() for c in ("kind", "side", "price", "size", "delta", "order_id", "first_seen", "ts")]
    kinds, sides, prices, sizes, deltas, oids, seen, ts = cols
    chunk = 1 << 15
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        rebuilt = np.zeros((hi - lo, width), np.int64)
        crossed = np.zeros(hi - lo, bool)
        bad: dict[int, str] = {}
        for k in range(lo, hi):
            why = _replay_one(book, orders, k, kinds[k], sides[k], prices[k], sizes[k], deltas[k], oids[k], seen[k])
            if why:
                bad[k] = why
            book.row(rebuilt[k - lo])
            if (k + 1 == n or ts[k + 1] != ts[k]) and book.crossed():
                crossed[k - lo] = True
        rep.count_rows(lo, rebuilt, rows, crossed, bad)
    return rep


def _replay_one(
    book: L2Book, orders: dict[int, list[int]], k: int, kind: int, s: int, p: int, q: int, d: int, oid: int, fs: int
) -> str:
    """Applies event k to the check's book; returns what is wrong with it ('' where nothing is)."""
    if kind == TRADE:
        return f"a TRADE with delta {d} (a trade does not change the book)" if d else ""
    if kind == ADD:
        if oid in orders:
            return f"ADD of order {oid}, which rests since event {orders[oid][3]}"
        if fs != k or s not in (BID, ASK) or p <= 0 or q <= 0 or d != q:
            return f"ADD of order {oid}: first_seen {fs}, side {s}, price {p}, size {q}, delta {d}"
        orders[oid] = [s, p, q, k]
        book.set(s, p, book.size[s].get(p, 0) + q)
        return ""
    if kind not in (CANCEL, DELETE, EXECUTE):
        return f"kind {kind} in an L3 day"
    o = orders.get(oid)
    name = {CANCEL: "CANCEL", DELETE: "DELETE", EXECUTE: "EXECUTE"}[kind]
    if o is None:
        if fs != -1 or d:
            return f"{name} of order {oid}, which does not rest (first_seen {fs}, delta {d})"
        return ""
    if fs != o[3] or s != o[0] or p != o[1]:
        return (
            f"{name} of order {oid} at side {s}, price {p}, first_seen {fs}; it rests at side {o[0]}, price {o[1]} "
            f"since event {o[3]}"
        )
    if q <= 0 or q > o[2] or (kind == DELETE and q != o[2]):
        return f"{name} of {q} of order {oid}, which has {o[2]}"
    if d != -q:
        return f"{name} of {q} with delta {d}"
    o[2] -= q
    if not o[2]:
        del orders[oid]
    book.set(s, p, book.size[s].get(p, 0) - q)
    return ""


# ------------------------------------------------------------------------------------------------------ reading


def _dbn_module():
    try:
        import databento_dbn
    except ImportError:
        raise DataError(f"reading Databento DBN files needs the databento-dbn package: {INSTALL}") from None
    return databento_dbn


def read_dbn(path: Path) -> DbnFile:
    """Decodes a DBN file (plain or zstd) into its MBO records; DataError for a file that is not DBN, is truncated,
    or holds no MBO records."""
    dbn = _dbn_module()
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as err:
        raise DataError(f"{path}: cannot read it ({err})") from None
    compression = dbn.Compression.ZSTD if head == ZSTD_MAGIC else dbn.Compression.NONE
    if head[:3] != DBN_MAGIC and head != ZSTD_MAGIC:
        raise DataError(f"{path}: not a DBN file (it opens with {head!r}, a DBN file with b'DBN' or zstd's magic)")
    decoder = dbn.DBNDecoder(compression=compression)
    meta = None
    parts: list[bytes] = []
    skipped: dict[str, int] = {}
    stream_symbols: dict[int, list[tuple[str, str, str]]] = {}
    mbo, mapping = dbn.MBOMsg, dbn.SymbolMappingMsg
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 22):
                decoder.write(block)
                these = []  # one bytes object per 4 MB block, not per record
                for r in decoder.decode():
                    if type(r) is mbo:
                        these.append(bytes(r))
                    elif isinstance(r, dbn.Metadata):
                        meta = r
                    else:
                        if isinstance(r, mapping):
                            span = ("", "9999-12-31", r.stype_in_symbol)
                            stream_symbols.setdefault(r.instrument_id, []).append(span)
                        name = type(r).__name__
                        skipped[name] = skipped.get(name, 0) + 1
                if these:
                    size = len(these[0])
                    if size < MBO_DTYPE.itemsize or any(len(b) != size for b in these):
                        raise DataError(f"{path}: MBO records of {sorted({len(b) for b in these})} bytes, expected "
                                        f"{MBO_DTYPE.itemsize} (or {MBO_DTYPE.itemsize + 8} with ts_out)")  # fmt: skip
                    parts.append(b"".join(these))
        left = len(decoder.buffer())
    except dbn.DBNError as err:
        raise DataError(f"{path}: not a readable DBN file ({err}); a corrupt download? fetch it again") from None
    if left:
        raise DataError(f"{path}: truncated: {left} bytes after the last whole record; fetch the file again")
    if meta is None:
        raise DataError(f"{path}: no DBN metadata header")
    if meta.schema is not None and meta.schema != dbn.Schema.MBO:
        raise DataError(f"{path}: schema {meta.schema}; this reads MBO (market by order) files: download schema='mbo'")
    if not parts:
        raise DataError(f"{path}: no MBO records")
    records = np.frombuffer(b"".join(parts), MBO_DTYPE if size == MBO_DTYPE.itemsize else _padded(size))
    symbols: dict[int, list[tuple[str, str, str]]] = {}
    if meta.stype_out == dbn.SType.INSTRUMENT_ID and meta.stype_in == dbn.SType.RAW_SYMBOL:
        for raw, intervals in (meta.mappings or {}).items():
            for iv in intervals:
                try:
                    iid = int(iv["symbol"])
                except ValueError:
                    continue
                symbols.setdefault(iid, []).append((str(iv["start_date"]), str(iv["end_date"]), raw))
    for iid, spans in stream_symbols.items():
        symbols.setdefault(iid, spans)
    return DbnFile(path=path, dataset=meta.dataset, records=records, symbols=symbols, skipped=skipped)


def _padded(size: int) -> np.dtype:
    """MBO_DTYPE in a record of `size` bytes (a file with ts_out: 8 more after the MBO fields)."""
    fields = MBO_DTYPE.fields
    return np.dtype(
        {
            "names": list(MBO_DTYPE.names),
            "formats": [fields[n][0] for n in MBO_DTYPE.names],
            "offsets": [fields[n][1] for n in MBO_DTYPE.names],
            "itemsize": size,
        }
    )


def _groups(records: np.ndarray) -> list[tuple[tuple[int, int], np.ndarray]]:
    """(publisher_id, instrument_id) -> the indices of its records, in the file's order."""
    key = records["publisher_id"].astype(np.int64) << 32 | records["instrument_id"].astype(np.int64)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    cuts = np.flatnonzero(sk[1:] != sk[:-1]) + 1
    bounds = zip(np.r_[0, cuts].tolist(), np.r_[cuts, sk.size].tolist(), strict=True)
    return [((int(sk[a]) >> 32, int(sk[a]) & 0xFFFFFFFF), order[a:b]) for a, b in bounds]


def _zone(dataset: str) -> ZoneInfo:
    return ZoneInfo("America/New_York" if dataset.split(".")[0].upper() in _NEW_YORK else "UTC")


def _event_times(rec: np.ndarray) -> np.ndarray:
    """ns per record: ts_event, or ts_recv on snapshot records (their ts_event is the order's original time)."""
    snap = (rec["flags"] & F_SNAPSHOT) != 0
    return np.where(snap, rec["ts_recv"], rec["ts_event"]).astype(np.int64)


def _day_key(dbn: DbnFile, key: tuple[int, int], rec: np.ndarray) -> tuple[str, str, str]:
    publisher, iid = key
    code = dbn.dataset.split(".")[0].lower()
    many = np.unique(dbn.records["publisher_id"]).size > 1
    venue = f"{code}-p{publisher}" if many else code
    snap = (rec["flags"] & F_SNAPSHOT) != 0
    t = _event_times(rec)
    market = t[~snap] if (~snap).any() else t
    middle = int(np.sort(market)[market.size // 2])
    date = dt.datetime.fromtimestamp(middle / 1e9, _zone(dbn.dataset)).date().isoformat()
    if int(market.max()) - int(market.min()) > _MAX_SPAN_NS:
        first, last = (
            dt.datetime.fromtimestamp(int(v) / 1e9, dt.UTC).isoformat() for v in (market.min(), market.max())
        )
        raise DataError(
            f"{dbn.path} (instrument {iid}): messages from {first} to {last}: a day of the cache is one date; "
            "download one file a day (Databento's split_duration='day')"
        )
    spans = dbn.symbols.get(iid, [])
    covering = [sym for start, end, sym in spans if not start or start <= date < end]
    if covering:
        symbol = covering[0]
    elif len({sym for _, _, sym in spans}) == 1:  # one symbol for this id, dated by UTC days around the day's
        symbol = spans[0][2]
    else:
        symbol = str(iid)
    return venue, symbol, date


# ------------------------------------------------------------------------------------------------------- events


def day_from_records(
    rec: np.ndarray,
    *,
    dataset: str,
    venue: str,
    instrument: str,
    date: str,
    levels: int,
    tick_size: float | None = None,
    lot_size: float | None = None,
    where: str = "records",
    record_index: np.ndarray | None = None,
) -> tuple[Manifest, np.ndarray, np.ndarray]:
    """One instrument's MBO records (MBO_DTYPE, in the file's order) -> the day's manifest (without its files),
    events and book rows. `record_index` numbers the records in DataError messages (their place in the file)."""
    n = rec.shape[0]
    index = np.arange(n) if record_index is None else np.asarray(record_index)

    def fail(i: int, what: str, count: int = 1) -> None:
        others = f" ({count} such records)" if count > 1 else ""
        raise DataError(f"{where}, record {int(index[i])}: {what}{others}")

    action = rec["action"].view(np.uint8)
    side_b = rec["side"].view(np.uint8)
    flags = rec["flags"]
    bad = np.flatnonzero(~np.isin(action, np.frombuffer(_ACTIONS, np.uint8)))
    if bad.size:
        fail(int(bad[0]), f"action {bytes([action[bad[0]]])!r} is not one of A C M R T F N", bad.size)
    order_action = np.isin(action, np.frombuffer(b"ACMF", np.uint8))
    bad = np.flatnonzero(order_action & ~np.isin(side_b, np.frombuffer(b"AB", np.uint8)))
    if bad.size:
        i = int(bad[0])
        fail(i, f"side {bytes([side_b[i]])!r} on an {bytes([action[i]]).decode()} record; expected A (ask) or B (bid)")
    bad = np.flatnonzero((action == ord("T")) & ~np.isin(side_b, np.frombuffer(b"ABN", np.uint8)))
    if bad.size:
        fail(int(bad[0]), f"side {bytes([side_b[bad[0]]])!r} on a trade; expected A, B or N", bad.size)
    bad = np.flatnonzero((flags & F_TOB) != 0)
    if bad.size:
        fail(
            int(bad[0]),
            "flagged F_TOB: top-of-book-only MBO (e.g. IEX TOPS, NYSE National) is not an order book; use a "
            "dataset with full depth",
            bad.size,
        )
    price = rec["price"]
    priced = (order_action | (action == ord("T"))) & ~((action == ord("M")) & (rec["size"] == 0))  # M to 0: no price
    bad = np.flatnonzero(priced & ((price <= 0) | (price == UNDEF_PRICE)))
    if bad.size:
        fail(int(bad[0]), f"price {int(price[bad[0]])} (1e-9 units) is not a price > 0", bad.size)
    bad = np.flatnonzero(np.isin(action, np.frombuffer(b"ACFT", np.uint8)) & (rec["size"] == 0))
    if bad.size:
        fail(int(bad[0]), f"size 0 on an {bytes([action[bad[0]]]).decode()} record", bad.size)
    recv = rec["ts_recv"].astype(np.int64)
    good_recv = np.flatnonzero((flags & F_BAD_TS_RECV) == 0)
    back = np.flatnonzero(recv[good_recv][1:] < recv[good_recv][:-1])
    if back.size:
        i = int(good_recv[back[0] + 1])
        fail(i, f"ts_recv {recv[i]} is before the previous record's: records must be in ts_recv order", back.size)

    tick, tick_size, tick_note = _tick(price[priced], tick_size, where, index[priced])
    lot = 1 if lot_size is None else int(lot_size)
    if lot_size is not None and lot != lot_size:
        raise DataError(f"lot_size={lot_size!r} must be a whole number of units (DBN sizes are whole units)")
    lots_off = np.flatnonzero(rec["size"] % lot)
    if lots_off.size:
        i = int(lots_off[0])
        fail(i, f"size {rec['size'][i]} is not a multiple of lot_size={lot_size!r}", lots_off.size)

    t = _event_times(rec)
    raised = np.maximum.accumulate(t)
    backwards = int((raised != t).sum())
    state = _Replay(levels)
    state.run(
        action.tolist(), np.where(side_b == ord("B"), BID, np.where(side_b == ord("A"), ASK, 0)).tolist(),
        np.where(priced, price // tick, 0).tolist(), (rec["size"] // lot).astype(np.int64).tolist(),
        rec["order_id"].view(np.int64).tolist(), raised.tolist(), fail,
    )  # fmt: skip
    events = state.events()
    if not events.size:
        raise DataError(f"{where}: no order book events (only {', '.join(sorted(set(rec['action'].astype(str))))})")
    book = np.frombuffer(b"".join(state.rows), np.int64).reshape(-1, 4 * levels)[np.array(state.row_ids, np.int64)]

    repairs = {}
    if state.clears:
        repairs["book_clears"] = state.clears
    if backwards:
        repairs["ts_event_backwards"] = backwards
    notes = [
        "L3: each order's queue place is the venue's (Databento MBO)",
        f"ts: ts_event (snapshot records: ts_recv); date: that of the median message (snapshot records aside) in "
        f"{_zone(dataset).key}",
        tick_note,
        "lot_size 1: DBN sizes are whole units (shares or contracts)" if lot_size is None else f"lot_size {lot}",
        "fees: not in DBN files (maker and taker fees 0): set the venue's fees where a run needs them",
        f"F (fill) records are EXECUTE events; {state.folded} C/M records that took a fill's size off Databento's "
        "book were folded into them",
    ]
    if state.clears:
        notes.append(f"{state.clears} R (clear book) records: each resting order DELETEd")
    if backwards:
        notes.append(f"{backwards} records' ts_event was before the previous event's: raised to it")
    if state.unknown:
        notes.append(
            f"{state.unknown} C/F records of orders the file never added (they rested before it opened): not in the "
            "book, first_seen -1, delta 0"
        )
    if state.modify_as_add:
        notes.append(f"{state.modify_as_add} M records of orders the file never added: ADDed (Databento's rule)")
    for what, count in (("N (none)", state.none), ("M records that changed nothing", state.unchanged)):
        if count:
            notes.append(f"{count} {what} records: no event")
    trades = events["size"][events["kind"] == TRADE]
    if not trades.size:
        trades = events["size"][events["kind"] == EXECUTE]
    order_lots = max(1, round(float(np.median(trades)))) if trades.size else 1
    m = Manifest(
        venue=venue, instrument=instrument, date=date, source="databento", depth="L3", levels=levels,
        tick_size=tick_size, lot_size=float(lot), order_lots=order_lots, n_events=int(events.size),
        first_ts=int(events["ts"][0]), last_ts=int(events["ts"][-1]), repairs=repairs, notes=tuple(notes),
    )  # fmt: skip
    return m, events, book


def _tick(prices: np.ndarray, given: float | None, where: str, index: np.ndarray) -> tuple[int, float, str]:
    """(tick in 1e-9 units, tick_size, how it was chosen)."""
    if given is None:
        g = int(np.gcd.reduce(prices)) if prices.size else PRICE_SCALE
        size = float(Decimal(g).scaleb(-9))
        return g, size, (
            f"tick_size {size!r} inferred: the gcd of the day's {np.unique(prices).size} distinct prices (a multiple "
            "of the venue's tick; pass tick_size= to set it)"
        )  # fmt: skip
    exact = Decimal(repr(float(given))).scaleb(9)
    if exact != exact.to_integral_value():
        raise DataError(f"tick_size={given!r} has more than 9 decimals: DBN prices are in 1e-9 units")
    g = int(exact)
    off = np.flatnonzero(prices % g)
    if off.size:
        i = int(off[0])
        raise DataError(
            f"{where}, record {int(index[i])}: price {Decimal(int(prices[i])).scaleb(-9)} is not a multiple of "
            f"tick_size={given!r} ({off.size} such records); pass the venue's tick, or none to infer it"
        )
    return g, float(given), f"tick_size {given!r} as given"


class _Replay:
    """The MBO records of one instrument -> L3 events and their book rows (module docstring: what each action
    becomes). Orders: order_id -> [side, price, size, first_seen]; `pending`: order_id -> filled size that
    Databento's book has not yet taken off (the C or M that comes with each F folds into it); `added`: the orders
    this day added since its last clear (a later C or F of one no longer resting is an error, not an unknown order)."""

    def __init__(self, levels: int):
        self.levels = levels
        self.book = L2Book(levels)
        self.cols: list[list[int]] = [[] for _ in range(8)]  # ts, kind, side, price, size, delta, order_id, first_seen
        self.rows = [array("q", bytes(8 * 4 * levels))]
        self.row_ids: list[int] = []
        self.orders: dict[int, list[int]] = {}
        self.pending: dict[int, int] = {}
        self.added: set[int] = set()
        self.folded = self.unknown = self.modify_as_add = self.clears = self.none = self.unchanged = 0

    def emit(self, t: int, kind: int, s: int, p: int, q: int, d: int, oid: int, fs: int) -> None:
        c = self.cols
        c[0].append(t)
        c[1].append(kind)
        c[2].append(s)
        c[3].append(p)
        c[4].append(q)
        c[5].append(d)
        c[6].append(oid)
        c[7].append(fs)
        if d:
            book, lv = self.book, self.levels
            prices = book.prices[s]
            top = len(prices) < lv or (p >= prices[-lv] if s == BID else p <= prices[lv - 1])
            old = book.size[s].get(p, 0)
            new = old + d
            book.set(s, p, new)
            if top:
                cur = array("q", self.rows[-1])
                if old and new:  # the level stays: its size cell
                    if s == BID:
                        cur[4 * (len(prices) - 1 - bisect.bisect_left(prices, p)) + 3] = new
                    else:
                        cur[4 * bisect.bisect_left(prices, p) + 1] = new
                else:
                    book.write_side(cur, s, lv)
                self.rows.append(cur)
        self.row_ids.append(len(self.rows) - 1)

    def run(
        self,
        action: list[int],
        side: list[int],
        price: list[int],
        size: list[int],
        oid: list[int],
        ts: list[int],
        fail: Callable[..., None],
    ) -> None:
        """Applies the records (columns as lists: action byte, side +1/-1/0, price in ticks, size in lots, order id,
        event time); `fail(i, what)` raises the DataError naming record i."""
        orders, pending, emit = self.orders, self.pending, self.emit
        A, C, M, R, T, F = (ord(x) for x in "ACMRTF")
        for i in range(len(action)):
            a, s, p, q, o_id, t = action[i], side[i], price[i], size[i], oid[i], ts[i]
            if a == A:
                o = orders.get(o_id)
                if o is not None:
                    fail(i, f"order {o_id} added again while it rests (since event {o[3]})")
                k = len(self.row_ids)
                orders[o_id] = [s, p, q, k]
                self.added.add(o_id)
                emit(t, ADD, s, p, q, q, o_id, k)
            elif a == C:
                fill = pending.get(o_id, 0)
                if fill:
                    took = min(fill, q)
                    if took == fill:
                        del pending[o_id]
                    else:
                        pending[o_id] = fill - took
                    q -= took
                    if not q:
                        self.folded += 1
                        continue
                o = orders.get(o_id)
                if o is None:
                    self._unknown(o_id, i, "cancels", fail)
                    emit(t, CANCEL, s, p, q, 0, o_id, -1)
                    continue
                self._same(o, o_id, s, p, i, "C", fail)
                if q > o[2]:
                    fail(i, f"cancels {q} of order {o_id}, which has {o[2]} resting")
                o[2] -= q
                if o[2]:
                    emit(t, CANCEL, s, p, q, -q, o_id, o[3])
                else:
                    del orders[o_id]
                    emit(t, DELETE, s, p, q, -q, o_id, o[3])
            elif a == F:
                o = orders.get(o_id)
                pending[o_id] = pending.get(o_id, 0) + q
                if o is None:
                    self._unknown(o_id, i, "fills", fail)
                    emit(t, EXECUTE, s, p, q, 0, o_id, -1)
                    continue
                self._same(o, o_id, s, p, i, "F", fail)
                if q > o[2]:
                    fail(i, f"fills {q} of order {o_id}, which has {o[2]} resting")
                o[2] -= q
                if not o[2]:
                    del orders[o_id]
                emit(t, EXECUTE, s, p, q, -q, o_id, o[3])
            elif a == M:
                fill = pending.pop(o_id, 0)
                o = orders.get(o_id)
                if o is None:
                    if q:
                        self.modify_as_add += 1
                        k = len(self.row_ids)
                        orders[o_id] = [s, p, q, k]
                        self.added.add(o_id)
                        emit(t, ADD, s, p, q, q, o_id, k)
                    else:
                        self.folded += bool(fill)
                    continue
                if s != o[0]:
                    fail(i, f"modifies order {o_id} to side {'bid' if s == BID else 'ask'}; it rests on the other")
                if p == o[1] and q <= o[2]:
                    if q == o[2]:
                        self.folded += bool(fill)
                        self.unchanged += not fill
                    elif q:
                        emit(t, CANCEL, s, p, o[2] - q, q - o[2], o_id, o[3])
                        o[2] = q
                    else:
                        del orders[o_id]
                        emit(t, DELETE, s, p, o[2], -o[2], o_id, o[3])
                    continue
                # a new price, or more than rests (a size increase, which loses priority): DELETE, then ADD
                del orders[o_id]
                emit(t, DELETE, s, o[1], o[2], -o[2], o_id, o[3])
                if q:
                    k = len(self.row_ids)
                    orders[o_id] = [s, p, q, k]
                    emit(t, ADD, s, p, q, q, o_id, k)
            elif a == T:
                emit(t, TRADE, -s, p, q, 0, o_id, -1)  # the aggressor's side; the resting side it hit is the other
            elif a == R:
                self.clears += 1
                for o_id2, o in list(orders.items()):
                    emit(t, DELETE, o[0], o[1], o[2], -o[2], o_id2, o[3])
                orders.clear()
                pending.clear()
                self.added.clear()
            else:
                self.none += 1

    def _unknown(self, o_id: int, i: int, what: str, fail: Callable[..., None]) -> None:
        if o_id in self.added:
            fail(i, f"{what} order {o_id}, which no longer rests (it was filled, cancelled or modified away)")
        self.unknown += 1

    @staticmethod
    def _same(o: list[int], o_id: int, s: int, p: int, i: int, what: str, fail: Callable[..., None]) -> None:
        if s != o[0] or p != o[1]:
            fail(
                i,
                f"{what} of order {o_id} at side {'bid' if s == BID else 'ask'}, price {p} ticks; it rests at side "
                f"{'bid' if o[0] == BID else 'ask'}, price {o[1]} ticks",
            )

    def events(self) -> np.ndarray:
        c = self.cols
        ev = np.zeros(len(c[0]), EVENT_DTYPE)
        for j, name in enumerate(("ts", "kind", "side", "price", "size", "delta", "order_id", "first_seen")):
            ev[name] = c[j]
        return ev

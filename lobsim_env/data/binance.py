"""Binance websocket captures in: depth diffs synced to a REST snapshot, trades, and the bookTicker as a reference.

A capture is a gzip file `<market>_<symbol>_<YYYYMMDD>.gz` (market usdm: USD-M futures, cm: COIN-M futures, spot),
one message a line: the receive time in ns, a space, then the JSON the websocket sent, `{"stream": ..., "data":
...}`, for the streams `<sym>@depth@0ms` (or `@100ms`, depth diffs), `<sym>@trade` and `<sym>@bookTicker`. A file
that opens a capture holds one REST depth snapshot line (`{"lastUpdateId": .., "bids": .., "asks": ..}`) some lines
in; the next day's file continues the same streams with no snapshot of its own.

What a day holds (lobsim_env.data.layout):
- events: the snapshot's levels as LEVEL events (bids from the best down, then asks from the best up: a day
  replays from an empty book), then each depth diff's levels as LEVEL events, removals first (so no row shows a
  crossed book the venue never showed), and each trade as a TRADE event (side: the resting side hit, m true -> bid);
  diffs and trades merged by the venue's time. A trade is at its trade time T. A futures (USD-M, COIN-M) depth
  update is at its transaction time T, as hftbacktest stamps it: its event time E, when the venue sent it, is a
  few to tens of ms later, and at E the book would lag the trades it follows (an order could join a quote already
  gone). A spot depth update carries no T: it is at E. A futures capture whose depth updates carry no T is stamped
  with E (the manifest's notes say which), one that mixes both is refused. On a tie (one ms) a trade comes first: a
  depth update holds the book change of its own ms's trades (on the USD-M BTCUSDT capture, 72 % of the trades that
  share a ms with a depth update are at a price among that update's levels, 26 % among the previous one's); trades
  keep their id order and depth updates their update id order. A day that continues the previous file's opens with
  that file's last full book as LEVEL events at its own first event's time (as hftbacktest does).
- book.npy: the top `levels` after each event.
- reference.npy: each bookTicker quote whose update id `u` is a depth diff's last id `u`, placed at that diff's last
  event, where the rebuilt book is in the very state the venue quoted; a quote whose `u` falls inside a diff (the
  venue's state between two of the diff's updates) has no exact row and is counted, not kept.

Syncing (Binance's documented way to keep a local book): the diffs are buffered, the snapshot's lastUpdateId L
taken; futures drop u < L, the first applied has U <= L <= u, each later one has pu == the previous u; spot drops
u <= L, the first has U <= L + 1 <= u, each later U == previous u + 1. The snapshot line arrives after the diffs
that bridge it (the REST call returns while the stream runs), so diffs on lines before it are buffered, not lost.
A gap after the sync is a DataError. Prices and quantities are decimal strings, converted exactly to ticks and lots.
"""

from __future__ import annotations

import bisect
import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from itertools import compress
from math import gcd
from operator import itemgetter, not_
from pathlib import Path

import numpy as np

from lobsim_env.data import layout
from lobsim_env.data.l2book import ASK, BID, BookRows, L2Book
from lobsim_env.data.layout import LEVEL, TRADE, CheckReport, DataError, Day, Manifest

SOURCE = "binance"
INGEST_VERSION = "binance/2"
"""The rules this module builds a day's events by, kept in each manifest (Manifest.ingest): ingest rewrites a day of
another version, and check refuses one. Version 2 stamps futures depth updates with T; '' (a day written before
versions were kept) stamped them with E. Raise it with any change of the events a capture gives."""
VENUES = {"usdm": "binance-usdm", "cm": "binance-coinm", "spot": "binance-spot"}
FILE_NAME = re.compile(r"^(usdm|cm|spot)_([a-z0-9_]+)_(\d{8})\.gz$")
EXCHANGE_INFO = {
    # (market, symbol): (PRICE_FILTER tickSize, LOT_SIZE stepSize) of Binance's exchangeInfo on 2024-08-08
    ("usdm", "BTCUSDT"): ("0.10", "0.001"),
    ("usdm", "ETHUSDT"): ("0.01", "0.001"),
    ("cm", "BTCUSD_PERP"): ("0.1", "1"),
    ("spot", "BTCUSDT"): ("0.01", "0.00001"),
    ("spot", "ETHUSDT"): ("0.01", "0.0001"),
}
FEES_BPS = {"usdm": (2.0, 5.0), "cm": (2.0, 5.0), "spot": (10.0, 10.0)}
"""(maker, taker) of Binance's VIP 0 schedule, without the BNB discount."""
_NS_PER_MS = 1_000_000
_DECIMAL = re.compile(r"^\d+(?:\.\d+)?$")
_PAIR = re.compile(r'\["([^"]*)","([^"]*)"\]')
_QUOTED = re.compile(r'"([^"]*)"')


def claims(path: Path) -> bool:
    """True for a Binance capture: a name `<usdm|cm|spot>_<symbol>_<YYYYMMDD>.gz` and gzip's magic bytes (a file
    whose head does not inflate is still claimed, so that ingest names what is wrong with it)."""
    path = Path(path)
    if not FILE_NAME.match(path.name) or not path.is_file():
        return False
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            return False
    try:
        with gzip.open(path, "rb") as f:
            head = f.read(32)
    except (OSError, EOFError, zlib.error):
        return True
    return re.match(rb"^\d+ \{", head) is not None


# --- parsing a file -------------------------------------------------------------------------------------------


@dataclass
class _Capture:
    """One file's messages, checked for shape and time order, not yet synced: values stay decimal strings."""

    path: Path
    market: str
    symbol: str
    """The stream's symbol, upper-case: BTCUSDT, BTCUSD_PERP."""
    file_date: str
    snapshot: tuple | None = None
    """(line, lastUpdateId, venue time in ms or None (spot's REST snapshot has none), bids, asks)."""
    diffs: list = field(default_factory=list)
    """(line, time in ms, U, u, pu or None, bids, asks): bids/asks a list of [price, qty] or (line text, start, end);
    the time is `depth_clock`'s."""
    depth_clock: str = "E"
    """What the depth updates are stamped with: 'T' (futures: the transaction time) or 'E' (spot, or a futures
    capture whose updates carry no T: the event time)."""
    trades: list = field(default_factory=list)
    """(line, T, trade id, price, qty, buyer is maker)."""
    tickers: list = field(default_factory=list)
    """(line, u, bid price, bid qty, ask price, ask qty)."""
    ignored: dict = field(default_factory=dict)
    """Other streams of the symbol (e.g. aggTrade): messages counted by stream, not used."""


@dataclass
class _Clock:
    """The last receive time, depth time (`depth_clock`: T or E), trade T and trade id seen, carried from a file to
    the one that continues it: time going backwards across the two is refused like time going backwards inside one,
    and so is a depth clock that changes."""

    recv: int = 0
    depth_clock: str | None = None
    depth_ms: int = 0
    trade_ms: int = 0
    trade_id: int = -1
    where: str = ""


def _read_text(path: Path) -> str:
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as err:
        raise DataError(
            f"{path}: not a whole gzip file ({err}); copy the capture again (a truncated file cannot be ingested)"
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: byte {err.start} of the inflated text is not UTF-8; copy the capture again") from None


def _fast_patterns(symbol: str) -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """Regexes for the three streams' messages as Binance writes them (key order included), matched right after
    the stream's prefix `{"stream":"<sym>@`; a line they do not match takes the slow path (json.loads)."""
    s = re.escape(symbol)
    depth = re.compile(
        r'depth(@\d+ms)?","data":\{"e":"depthUpdate","E":(\d+),(?:"T":(\d+),)?"s":"' + s + r'",(?:"ps":"[A-Z0-9_]+",)?'
        r'"U":(\d+),"u":(\d+),(?:"pu":(-?\d+),)?"b":\['
    )
    ticker = re.compile(
        r'bookTicker","data":\{(?:"e":"bookTicker",)?"u":(\d+),(?:"e":"bookTicker",)?"s":"' + s + r'",'
        r'(?:"ps":"[A-Z0-9_]+",)?"b":"([\d.]+)","B":"([\d.]+)","a":"([\d.]+)","A":"([\d.]+)"(?:,"T":\d+,"E":\d+)?\}\}$'
    )
    trade = re.compile(
        r'trade","data":\{"e":"trade","E":\d+,(?:"T":(\d+),)?"s":"' + s + r'","t":(\d+),"p":"([^"]*)","q":"([^"]*)",'
        r'(?:"T":(\d+),)?(?:"X":"[A-Z_]+",)?"m":(true|false)(?:,"M":(?:true|false))?\}\}$'
    )
    return depth, ticker, trade


def _need(d: dict, keys: str, types: tuple, where: str, what: str) -> list:
    got = []
    for key in keys.split():
        v = d.get(key)
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            raise DataError(f"{where}: {what} has {key}={v!r}, expected {' or '.join(t.__name__ for t in types)}")
        got.append(v)
    return got


def _slow(cap: _Capture, text: str, path: Path, line: int, stream_sym: str) -> tuple[str, tuple]:
    """A line the fast patterns did not take: parsed whole; ('depth' | 'trade' | 'ticker' | 'snapshot' | 'other',
    its record); DataError for a JSON that is not one of the four messages."""
    where = f"{path}:{line}"
    try:
        msg = json.loads(text)
    except ValueError as err:
        raise DataError(f"{where}: not '<receive ns> <json>' ({err}): {text[:80]!r}; copy the capture again") from None
    if not isinstance(msg, dict):
        raise DataError(f"{where}: the JSON is a {type(msg).__name__}, expected an object: {text[:80]!r}")
    if "stream" not in msg:
        if "lastUpdateId" not in msg:
            keys = sorted(msg)[:8]
            raise DataError(
                f"{where}: a JSON without 'stream' or 'lastUpdateId' (keys {keys}): neither a stream message nor a "
                "REST depth snapshot"
            )
        (last_id,) = _need(msg, "lastUpdateId", (int,), where, "the snapshot")
        bids, asks = _need(msg, "bids asks", (list,), where, "the snapshot")
        ts = msg.get("T", msg.get("E"))
        return "snapshot", (line, last_id, ts if isinstance(ts, int) else None, bids, asks)
    stream, data = msg.get("stream"), msg.get("data")
    if not isinstance(stream, str) or not isinstance(data, dict):
        raise DataError(f"{where}: 'stream' must be a string and 'data' an object, got {text[:80]!r}")
    sym, _, kind = stream.partition("@")
    if sym != stream_sym:
        raise DataError(
            f"{where}: stream {stream!r} is not of {stream_sym!r}, the symbol the file's name gives; a capture file "
            "holds one symbol"
        )
    if kind.startswith("depth"):
        e_ms, first, last = _need(data, "E U u", (int,), where, stream)
        t_ms = data.get("T")
        if t_ms is not None and (not isinstance(t_ms, int) or isinstance(t_ms, bool)):
            raise DataError(f"{where}: {stream} has T={t_ms!r}, expected int")
        pu = data.get("pu")
        if cap.market != "spot" and not isinstance(pu, int):
            raise DataError(f"{where}: {stream} has pu={pu!r}; a futures depth update carries pu (previous u)")
        bids, asks = _need(data, "b a", (list,), where, stream)
        return "depth", (line, e_ms, t_ms, first, last, pu if cap.market != "spot" else None, bids, asks)
    if kind == "trade":
        t_ms, trade_id = _need(data, "T t", (int,), where, stream)
        price, qty = _need(data, "p q", (str,), where, stream)
        (maker,) = _need(data, "m", (bool,), where, stream)
        return "trade", (line, t_ms, trade_id, price, qty, maker)
    if kind == "bookTicker":
        (u,) = _need(data, "u", (int,), where, stream)
        return "ticker", (line, u, *_need(data, "b B a A", (str,), where, stream))
    return "other", (stream,)


def _parse(path: Path, market: str, symbol: str, file_date: str, clock: _Clock) -> _Capture:
    """Reads one capture: every line's shape, receive times, depth times (T or E: `_Capture.depth_clock`), trade T
    and trade ids in order (DataError naming the file and line otherwise); at most one snapshot.

    The bookTicker lines (most of a file) are read in one findall over the text; the loop over lines only counts
    them, and where the count differs (a line the pattern does not take) they are read line by line instead."""
    cap = _Capture(path=path, market=market, symbol=symbol.upper(), file_date=file_date)
    text = _read_text(path)
    depth_re, ticker_re, trade_re = _fast_patterns(cap.symbol)
    prefix = '{"stream":"' + symbol + "@"
    ticker_prefix = prefix + 'bookTicker"'
    bulk = re.compile(re.escape(prefix) + ticker_re.pattern[:-1] + r"(?=\n|\Z)").findall(text)
    lines = text.split("\n")
    del text
    if lines and lines[-1] == "":
        lines.pop()
    k = len(prefix)
    diffs, trades = cap.diffs, cap.trades
    recv_last, depth_last, trade_last, tid_last = clock.recv, clock.depth_ms, clock.trade_ms, clock.trade_id
    depth_clock = clock.depth_clock
    depth_stream = None
    futures = market != "spot"
    ticker_lines: list[int] = []
    for ln, line in enumerate(lines, 1):
        sp = line.find(" ", 0, 24)
        head = line[:sp]
        if sp <= 0 or not head.isdigit():
            raise DataError(f"{path}:{ln}: not '<receive ns> <json>': {line[:60]!r}; copy the capture again")
        recv = int(head)
        if recv < recv_last:
            raise DataError(
                f"{path}:{ln}: receive time {recv} ns is before the previous line's {recv_last} ns{clock.where}: time "
                "goes backwards; lines of a capture are in the order they were received (the file is reordered or "
                "spliced)"
            )
        recv_last = recv
        if line.startswith(ticker_prefix, sp + 1):
            ticker_lines.append(ln)
            continue
        rec = None
        if line.startswith(prefix, sp + 1):
            c = line[sp + 1 + k : sp + 2 + k]
            if c == "d":
                m = depth_re.match(line, sp + 1 + k)
                if m is not None:
                    speed, e_ms, t_ms, first, last, pu = m.groups()
                    mid = line.find('],"a":[', m.end())
                    if mid >= 0 and line.endswith("]}}") and futures is (pu is not None):
                        src = (line, m.end(), mid), (line, mid + 7, len(line) - 3)
                        t_ms = int(t_ms) if t_ms is not None else None
                        rec = "depth", (ln, int(e_ms), t_ms, int(first), int(last), int(pu) if futures else None, *src)
                        if depth_stream is None:
                            depth_stream = speed
                        elif depth_stream != speed:
                            raise DataError(
                                f"{path}:{ln}: depth stream @depth{speed or ''} after @depth{depth_stream or ''}; a "
                                "capture holds one depth stream of a symbol"
                            )
            elif c == "t":
                m = trade_re.match(line, sp + 1 + k)
                if m is not None:
                    t1, tid, price, qty, t2, maker = m.groups()
                    if (t1 is None) != (t2 is None):
                        rec = "trade", (ln, int(t1 or t2), int(tid), price, qty, maker == "true")
        if rec is None:
            rec = _slow(cap, line[sp + 1 :], path, ln, symbol)
        kind, r = rec
        if kind == "depth":
            _, e_ms, t_ms, *rest = r
            name = "T" if futures and t_ms is not None else "E"
            if depth_clock is None:
                depth_clock = name
            elif name != depth_clock:
                has = "carries" if name == "T" else "lacks"
                raise DataError(
                    f"{path}:{ln}: this depth update {has} a transaction time T, unlike the ones before it"
                    f"{clock.where}: the capture mixes two recorders' formats (depth at T where given, else at E, "
                    "would be two clocks in one stream); record it again in one format"
                )
            ms = t_ms if name == "T" else e_ms
            if ms < depth_last:
                raise DataError(
                    f"{path}:{ln}: depth update {name}={ms} ms is before the previous update's {name}={depth_last} ms"
                    f"{clock.where}: time goes backwards in the depth stream; the capture is reordered or spliced"
                )
            depth_last = ms
            diffs.append((ln, ms, *rest))
        elif kind == "trade":
            if r[1] < trade_last:
                raise DataError(
                    f"{path}:{ln}: trade T={r[1]} ms is before the previous trade's T={trade_last} ms{clock.where}: "
                    "time goes backwards in the trade stream; the capture is reordered or spliced"
                )
            if r[2] <= tid_last:
                raise DataError(
                    f"{path}:{ln}: trade id {r[2]} after trade id {tid_last}{clock.where}: a repeated or reordered "
                    "trade; the capture is reordered or spliced"
                )
            trade_last, tid_last = r[1], r[2]
            trades.append(r)
        elif kind == "ticker":
            cap.tickers.append(r)
        elif kind == "snapshot":
            if cap.snapshot is not None:
                raise DataError(
                    f"{path}:{ln}: a second REST depth snapshot (the first is on line {cap.snapshot[0]}); a capture "
                    "opens from one snapshot: split the file there"
                )
            cap.snapshot = r
        else:
            cap.ignored[r[0]] = cap.ignored.get(r[0], 0) + 1
    if len(bulk) == len(ticker_lines):
        cap.tickers += [(ln, int(u), b, bq, a, aq) for ln, (u, b, bq, a, aq) in zip(ticker_lines, bulk, strict=True)]
    else:
        for ln in ticker_lines:
            line = lines[ln - 1]
            sp = line.find(" ")
            m = ticker_re.match(line, sp + 1 + k)
            if m is not None:
                u, b, bq, a, aq = m.groups()
                cap.tickers.append((ln, int(u), b, bq, a, aq))
                continue
            kind, r = _slow(cap, line[sp + 1 :], path, ln, symbol)
            if kind != "ticker":
                raise DataError(f"{path}:{ln}: a bookTicker stream message that is not a bookTicker")
            cap.tickers.append(r)
        cap.tickers.sort()
    if not diffs:
        raise DataError(f"{path}: no {symbol}@depth update in {len(lines)} lines; a capture must hold the depth stream")
    clock.recv, clock.depth_ms, clock.trade_ms, clock.trade_id = recv_last, depth_last, trade_last, tid_last
    clock.depth_clock = cap.depth_clock = depth_clock
    clock.where = f" (the last of {path.name})"
    return cap


# --- units ----------------------------------------------------------------------------------------------------


class _Units:
    """Decimal strings to integer ticks and lots, exactly (integer arithmetic on the digits, no float), with a
    cache per string: a day repeats its prices and sizes, so each distinct string is converted once."""

    def __init__(self, tick: str, lot: str, origin: str):
        self.tick, self.lot, self.origin = Decimal(tick).normalize(), Decimal(lot).normalize(), origin
        self.prices: dict[str, int] = {}
        self.sizes: dict[str, int] = {}
        self.level_sizes: dict[str, int] = {}
        """A depth level's size: lots, or -(lots rounded down, at least 1) for a size finer than the lot."""
        self._tick = _as_int_scaled(self.tick)
        self._lot = _as_int_scaled(self.lot)

    def _units(self, s: object, unit: tuple[int, int], what: str, where: str) -> tuple[int, bool]:
        """(whole units, exact): s, ASCII digits with at most one inner '.', as a multiple of unit = m * 10**-e,
        rounded down where not exact."""
        if isinstance(s, str):
            dot = s.find(".")
            if dot < 0:
                digits, places = s, 0
            elif 0 < dot < len(s) - 1:
                digits, places = s[:dot] + s[dot + 1 :], len(s) - dot - 1
            else:
                digits, places = "", 0
            if digits.isdigit() and digits.isascii():
                m, e = unit
                v, rest = int(digits), 0
                if places > e:
                    v, rest = divmod(v, 10 ** (places - e))
                else:
                    v *= 10 ** (e - places)
                n, rest2 = divmod(v, m)
                return n, not (rest or rest2)
        raise DataError(f"{where}: {what} {s!r} is not a decimal number")

    def price(self, s: str, where: str) -> int:
        ticks, exact = self._units(s, self._tick, "price", where)
        if not exact or not ticks:
            raise DataError(
                f"{where}: price {s} is not a positive multiple of the tick size {self.tick} ({self.origin}); a "
                "corrupt file, or the symbol's tick changed: fix EXCHANGE_INFO in lobsim_env/data/binance.py"
            )
        self.prices[s] = ticks
        return ticks

    def size(self, s: str, where: str) -> int:
        lots, exact = self._units(s, self._lot, "quantity", where)
        if not exact:
            raise DataError(
                f"{where}: quantity {s} is not a multiple of the lot size {self.lot} ({self.origin}); a corrupt file, "
                "or the symbol's step size changed: fix EXCHANGE_INFO in lobsim_env/data/binance.py"
            )
        self.sizes[s] = lots
        return lots

    def level_size(self, s: str, where: str) -> int:
        lots, exact = self._units(s, self._lot, "quantity", where)
        v = lots if exact else -max(lots, 1)
        self.level_sizes[s] = v
        return v


def _as_int_scaled(unit: Decimal) -> tuple[int, int]:
    """(m, e) with unit == m * 10**-e, m an int: 0.10 -> (1, 1), 0.00001 -> (1, 5), 1 -> (1, 0), 100 -> (100, 0)."""
    e = max(0, -unit.as_tuple().exponent)
    return int(unit.scaleb(e)), e


def _units(caps: list[_Capture]) -> tuple[_Units, list[str]]:
    """The tick and lot of a symbol: Binance's exchangeInfo where known, else the gcd of every price and every
    nonzero quantity the files hold (a coarser value than the venue's when the files never use its finest)."""
    cap = caps[0]
    known = EXCHANGE_INFO.get((cap.market, cap.symbol))
    if known is not None:
        origin = f"Binance exchangeInfo for {VENUES[cap.market]} {cap.symbol} on 2024-08-08"
        note = (
            f"tick_size {known[0]} and lot_size {known[1]}: Binance's exchangeInfo (PRICE_FILTER tickSize, LOT_SIZE "
            "stepSize) on 2024-08-08; every price and quantity of the files is a multiple (but depth level sizes "
            "counted in repairs as sub_lot_level_sizes)"
        )
        return _Units(known[0], known[1], origin), [note]
    prices: set[str] = set()
    sizes: set[str] = set()
    for c in caps:
        if c.snapshot is not None:
            for p, q in c.snapshot[3] + c.snapshot[4]:
                prices.add(p)
                sizes.add(q)
        for d in c.diffs:
            for src in (d[5], d[6]):
                for p, q in src if isinstance(src, list) else _PAIR.findall(*src):
                    prices.add(p)
                    sizes.add(q)
        for t in c.trades:
            prices.add(t[3])
            sizes.add(t[4])
        for t in c.tickers:
            prices.update((t[2], t[4]))
            sizes.update((t[3], t[5]))
    tick, lot = _gcd_of(prices, cap.path), _gcd_of(sizes, cap.path)
    note = (
        f"tick_size {tick} and lot_size {lot}: {cap.symbol} is not in this module's exchangeInfo table, so they are "
        "the gcd of every price and every nonzero quantity in the files (coarser than the venue's where the files "
        "never use its finest step)"
    )
    return _Units(str(tick), str(lot), "inferred from the files"), [note]


def _gcd_of(values: set[str], path: Path) -> Decimal:
    decs = []
    for s in values:
        if not isinstance(s, str) or not _DECIMAL.match(s):
            raise DataError(f"{path}: value {s!r} is not a decimal number")
        d = Decimal(s)
        if d:
            decs.append(d)
    if not decs:
        raise DataError(f"{path}: no nonzero price or quantity to infer the tick or lot size from")
    exp = max(-d.as_tuple().exponent for d in decs)
    g = 0
    for d in decs:
        g = gcd(g, int(d.scaleb(exp)))
    return (Decimal(g).scaleb(-exp)).normalize()


# --- building a day -------------------------------------------------------------------------------------------


@dataclass
class _State:
    """Where a day left the book: what the next file's day continues from."""

    book: L2Book
    last_u: int
    where: str
    key: str


@dataclass
class _Built:
    events: np.ndarray
    book: np.ndarray
    reference: np.ndarray
    state: _State
    first_ts: int
    repairs: dict
    tickers: dict
    """bookTicker quotes counted: 'reference', 'inside' (u inside a diff), 'outside' (u outside the day's diffs)."""
    trade_lots: np.ndarray


def _build(cap: _Capture, prev: _State | None, units: _Units, levels: int, venue: str) -> _Built:
    """Syncs the capture's diffs to its snapshot (or to `prev`), merges them with the trades by venue time (a diff
    at its `depth_clock` time, a trade at T, the trade first on a tie), and rebuilds the book: the day's events,
    book rows and bookTicker references."""
    path, spot = cap.path, cap.market == "spot"
    diffs, trades = cap.diffs, cap.trades
    repairs: dict[str, int] = {}
    if cap.snapshot is not None:
        snap_line, last_id, snap_ms, bids, asks = cap.snapshot
        k = 0
        while k < len(diffs) and (diffs[k][3] <= last_id if spot else diffs[k][3] < last_id):
            k += 1
        if k == len(diffs):
            raise DataError(
                f"{path}:{snap_line}: no depth update after the snapshot's lastUpdateId={last_id} (the last has "
                f"u={diffs[-1][3]}); the capture ends before the stream reaches its snapshot"
            )
        ln, d_ms, first, last = diffs[k][:4]
        if not (first <= last_id + spot <= last):
            want = "U <= lastUpdateId + 1 <= u" if spot else "U <= lastUpdateId <= u"
            raise DataError(
                f"{path}:{ln}: the first depth update after the snapshot (line {snap_line}, lastUpdateId={last_id}) "
                f"has U={first} u={last}, not {want}: updates between the snapshot and the stream are missing; "
                "re-record with the stream opened before the snapshot is fetched"
            )
        if k:
            repairs["depth_updates_before_snapshot"] = k
        ts0 = min(snap_ms, d_ms) if snap_ms is not None else d_ms  # trades before it are in the snapshot
        opening = [(BID, p, q) for p, q in bids] + [(ASK, p, q) for p, q in asks]
        opening_where = f"{path}:{snap_line}"
        last_u, last_where = None, ""
    else:
        if prev is None:
            raise AssertionError("a continuation is built with the previous day's state")
        k = 0
        first_ms = diffs[0][1] if not trades else min(diffs[0][1], trades[0][1])
        ts0 = first_ms
        opening = prev.book.levels_now()
        opening_where = f"{prev.where} (its last book)"
        last_u, last_where = prev.last_u, prev.where
    ts0 *= _NS_PER_MS
    t0 = 0
    while t0 < len(trades) and trades[t0][1] * _NS_PER_MS < ts0:
        t0 += 1
    if t0:
        repairs["trades_before_snapshot"] = t0

    book = L2Book(levels)
    rows = BookRows(book)
    bsz, bpx, asz, apx = book.size[BID], book.prices[BID], book.size[ASK], book.prices[ASK]
    ev_side: list[int] = []
    ev_price: list[int] = []
    ev_size: list[int] = []
    ev_delta: list[int] = []
    msg_ts: list[int] = []
    msg_n: list[int] = []
    msg_kind: list[int] = []
    prices, level_sizes = units.prices, units.level_sizes
    price_of, level_size_of, find_quoted = prices.__getitem__, level_sizes.__getitem__, _QUOTED.findall
    bisect_left, delta_append, changed = bisect.bisect_left, ev_delta.append, rows.changed
    top_n = levels
    sub_lot = 0

    def side_levels(side: int, src: list | tuple, ln: int) -> tuple[list[int], list[int]]:
        """One side's levels of a message as (prices in ticks, sizes in lots). `src` is the JSON's list of pairs
        (slow path) or a span of the line that must read ["p","q"],["p","q"],... (its length and brackets add up)."""
        nonlocal sub_lot
        if isinstance(src, tuple):
            text, a, b = src
            flat = find_quoted(text, a, b)
            n = len(flat) >> 1
            if len(flat) & 1 or text.count("[", a, b) != n or b - a != sum(map(len, flat)) + 8 * n - (n > 0):
                raise DataError(
                    f"{path}:{ln}: a depth level list that is not [[price, quantity], ...]: {text[a : a + 60]!r}"
                )
        else:
            if not all(isinstance(pair, list) and len(pair) == 2 for pair in src):
                raise DataError(f"{path}:{ln}: a depth level that is not [price, quantity]: {str(src)[:80]}")
            flat = [x for pair in src for x in pair]
        try:
            ps, qs = list(map(price_of, flat[0::2])), list(map(level_size_of, flat[1::2]))
        except (KeyError, TypeError):
            where = f"{path}:{ln}"
            for v in flat[0::2]:
                if not isinstance(v, str) or v not in prices:
                    units.price(v, where)
            for v in flat[1::2]:
                if not isinstance(v, str) or v not in level_sizes:
                    units.level_size(v, where)
            ps, qs = list(map(price_of, flat[0::2])), list(map(level_size_of, flat[1::2]))
        if qs and min(qs) < 0:
            for k_, q in enumerate(qs):
                if q < 0:
                    if book.in_top(side, ps[k_]):
                        raise DataError(
                            f"{path}:{ln}: level {flat[2 * k_]} holds {flat[2 * k_ + 1]}, not a multiple of the lot "
                            f"size {units.lot} ({units.origin}), within the top {levels} levels; a corrupt file or a "
                            "wrong lot size: fix EXCHANGE_INFO in lobsim_env/data/binance.py"
                        )
                    qs[k_] = -q
                    sub_lot += 1
        return ps, qs

    def apply_levels(bps: list[int], bqs: list[int], aps: list[int], aqs: list[int]) -> int:
        """A message's levels as LEVEL events, removals first (so no row shows a crossed book the venue never
        showed), then bids before asks; the count of events. A removal of a price the book lacks is an event that
        changes nothing. The top of a side changed where the level's rank (from the bisect) is within `levels`."""
        n0 = i = len(ev_price)
        bgone = agone = ()
        if 0 in bqs:
            bgone, bps, bqs = list(compress(bps, map(not_, bqs))), list(compress(bps, bqs)), list(filter(None, bqs))
        if 0 in aqs:
            agone, aps, aqs = list(compress(aps, map(not_, aqs))), list(compress(aps, aqs)), list(filter(None, aqs))
        for side, gone, sizes, px in ((BID, bgone, bsz, bpx), (ASK, agone, asz, apx)):
            if not gone:
                continue
            ev_side.extend([side] * len(gone))
            ev_price.extend(gone)
            ev_size.extend([0] * len(gone))
            bid = side == BID
            for p in gone:
                old = sizes.pop(p, 0)
                delta_append(-old)
                if old:
                    j = bisect_left(px, p)
                    top = j >= len(px) - top_n if bid else j < top_n
                    del px[j]
                    if top:
                        changed(i, side)
                i += 1
        for side, ps, qs, sizes, px in ((BID, bps, bqs, bsz, bpx), (ASK, aps, aqs, asz, apx)):
            if not ps:
                continue
            ev_side.extend([side] * len(ps))
            ev_price.extend(ps)
            ev_size.extend(qs)
            bid = side == BID
            for p, q in zip(ps, qs, strict=True):
                old = sizes.get(p, 0)
                delta_append(q - old)
                if q != old:
                    sizes[p] = q
                    if old:
                        if len(px) <= top_n or (p >= px[-top_n] if bid else p <= px[top_n - 1]):
                            changed(i, side)
                    else:
                        j = bisect_left(px, p)
                        px.insert(j, p)
                        if (j >= len(px) - top_n) if bid else (j < top_n):
                            changed(i, side)
                i += 1
        return i - n0

    # the opening book: the snapshot, or the previous day's last book
    if cap.snapshot is not None:
        n_open = apply_levels(*side_levels(BID, bids, snap_line), *side_levels(ASK, asks, snap_line))
    else:
        n_open = apply_levels(
            [p for s_, p, _ in opening if s_ == BID],
            [q for s_, _, q in opening if s_ == BID],
            [p for s_, p, _ in opening if s_ == ASK],
            [q for s_, _, q in opening if s_ == ASK],
        )
    msg_ts.append(ts0)
    msg_n.append(n_open)
    msg_kind.append(LEVEL)
    if book.crossed():
        raise DataError(
            f"{opening_where}: the opening book is crossed: best bid {book.best()[0]} >= best ask "
            f"{book.best()[1]} ticks; a corrupt snapshot"
        )

    # the diffs and trades, merged by venue time
    applied_at: list[int] = []  # the event index after each applied diff
    applied_u: list[int] = []
    applied_first: list[int] = []
    nd, nt = len(diffs), len(trades)
    di, ti = k, t0
    trade_price, trade_size = units.prices, units.sizes
    last_ln = 0
    while di < nd or ti < nt:
        if ti < nt and (di >= nd or trades[ti][1] <= diffs[di][1]):  # a tie: the trade first
            ln, t_ms, _, ps, qs, maker = trades[ti]
            ti += 1
            p = trade_price.get(ps)
            if p is None:
                p = units.price(ps, f"{path}:{ln}")
            q = trade_size.get(qs)
            if q is None:
                q = units.size(qs, f"{path}:{ln}")
            if not q:
                raise DataError(f"{path}:{ln}: a trade of quantity {qs}; a trade has a positive quantity")
            ev_side.append(BID if maker else ASK)
            ev_price.append(p)
            ev_size.append(q)
            ev_delta.append(0)
            msg_ts.append(t_ms * _NS_PER_MS)
            msg_n.append(1)
            msg_kind.append(TRADE)
            continue
        ln, d_ms, first, last, pu, bsrc, asrc = diffs[di]
        di += 1
        if last_u is not None and ((first != last_u + 1) if spot else (pu != last_u)):
            got = f"U={first}" if spot else f"pu={pu}"
            want = f"U == {last_u + 1}" if spot else f"pu == {last_u}"
            raise DataError(
                f"{path}:{ln}: depth update {got} u={last} does not follow the previous update u={last_u} "
                f"({last_where or f'{path}:{last_ln}'}; want {want}): updates are missing from the capture; "
                "re-record it, or ingest the part before the gap as its own day"
            )
        last_u, last_ln, last_where = last, ln, ""
        msg_n.append(apply_levels(*side_levels(BID, bsrc, ln), *side_levels(ASK, asrc, ln)))
        msg_ts.append(d_ms * _NS_PER_MS)
        msg_kind.append(LEVEL)
        if bpx and apx and bpx[-1] >= apx[0]:
            raise DataError(
                f"{path}:{ln}: the book is crossed after depth update u={last}: best bid {bpx[-1]} >= best ask "
                f"{apx[0]} ticks (of {units.tick}); the updates before it do not add up to the venue's book: the "
                "capture lost or reordered messages"
            )
        applied_at.append(len(ev_price) - 1)
        applied_first.append(first)
        applied_u.append(last)
    if sub_lot:
        repairs["sub_lot_level_sizes"] = sub_lot

    n = len(ev_price)
    events = np.zeros(n, dtype=layout.EVENT_DTYPE)
    counts = np.array(msg_n, dtype=np.int64)
    events["ts"] = np.repeat(np.array(msg_ts, dtype=np.int64), counts)
    events["kind"] = np.repeat(np.array(msg_kind, dtype=np.uint8), counts)
    events["side"] = np.array(ev_side, dtype=np.int8)
    events["price"] = np.array(ev_price, dtype=np.int64)
    events["size"] = np.array(ev_size, dtype=np.int64)
    events["delta"] = np.array(ev_delta, dtype=np.int64)
    events["first_seen"] = -1
    book_rows = rows.array(n)

    reference, counted = _references(cap, units, applied_first, applied_u, applied_at)

    date = datetime.fromtimestamp(ts0 // 1_000_000_000, UTC).strftime("%Y-%m-%d")
    state = _State(book=book, last_u=last_u, where=f"{path}:{last_ln}", key=f"{venue}/{cap.symbol}/{date}")
    trade_lots = events["size"][events["kind"] == TRADE]
    return _Built(events, book_rows, reference, state, ts0, repairs, counted, trade_lots)


def _references(
    cap: _Capture, units: _Units, applied_first: list[int], applied_u: list[int], applied_at: list[int]
) -> tuple[np.ndarray, dict]:
    """reference.npy from the bookTicker quotes: (event index, bid price, bid size, ask price, ask size) for each
    quote whose u is an applied diff's last id, at that diff's last event; and the quotes counted by where their u
    falls (reference, inside a diff, outside the day's diffs). Every quote's values must be whole ticks and lots."""
    tickers = cap.tickers
    for col, convert, cache in (
        (2, units.price, units.prices),
        (3, units.size, units.sizes),
        (4, units.price, units.prices),
        (5, units.size, units.sizes),
    ):
        for v in set(map(itemgetter(col), tickers)):
            if v not in cache:
                try:
                    convert(v, "")
                except DataError as err:
                    ln = next(t[0] for t in tickers if t[col] == v)
                    raise DataError(f"{cap.path}:{ln}{err}") from None
    tu = np.fromiter(map(itemgetter(1), tickers), dtype=np.int64, count=len(tickers))
    au = np.asarray(applied_u, dtype=np.int64)  # increasing: each diff follows the one before
    j = np.searchsorted(au, tu)
    jc = np.minimum(j, len(au) - 1)
    exact = (j < len(au)) & (au[jc] == tu)
    inside = ~exact & (j < len(au)) & (np.asarray(applied_first, dtype=np.int64)[jc] <= tu)
    at = np.asarray(applied_at, dtype=np.int64)[jc[exact]]
    rows = []
    for i in np.flatnonzero(exact).tolist():
        _, _, bp, bq, ap, aq = tickers[i]
        rows.append((units.prices[bp], units.sizes[bq], units.prices[ap], units.sizes[aq]))
    reference = np.empty((len(rows), 5), dtype=np.int64)
    reference[:, 0] = at
    reference[:, 1:] = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    reference = reference[np.argsort(reference[:, 0], kind="stable")]
    n_exact, n_inside = int(exact.sum()), int(inside.sum())
    return reference, {"reference": n_exact, "inside": n_inside, "outside": len(tickers) - n_exact - n_inside}


# --- ingest ---------------------------------------------------------------------------------------------------


def _previous_date(yyyymmdd: str) -> str:
    d = datetime.strptime(yyyymmdd, "%Y%m%d").toordinal() - 1
    return datetime.fromordinal(d).strftime("%Y%m%d")


_DEPTH_AT = {  # (spot, depth_clock): where a day's depth updates are, in the manifest's notes
    (False, "T"): "a depth update's levels at its transaction time T (its event time E, when the venue sent it, is a "
    "few to tens of ms later)",
    (False, "E"): "a depth update's levels at its event time E (this capture's futures depth updates carry no "
    "transaction time T: the book lags the trades by the venue's delay from T to E)",
    (True, "E"): "a depth update's levels at its event time E (spot depth updates carry no transaction time)",
}


def _notes(cap: _Capture, built: _Built, unit_notes: list[str], levels: int, prev: _State | None) -> tuple[str, ...]:
    market = cap.market
    maker, taker = FEES_BPS[market]
    notes = [
        "L2: price levels only; an agent's queue place comes from the queue model",
        f"Timestamps: {_DEPTH_AT[cap.market == 'spot', cap.depth_clock]}, a trade at its trade time T (ms, as ns); "
        "depth updates and trades are merged by that time, a trade first on a tie (a depth update holds the book "
        "change of its own ms's trades); the capture's receive times are not kept",
        *unit_notes,
        f"fees: Binance's VIP 0 schedule without the BNB discount, maker {maker:g} bps, taker {taker:g} bps",
        f"reference.npy: {built.tickers['reference']} bookTicker quotes at a depth update's last id u (exact "
        f"state); {built.tickers['inside']} fall inside a depth update and {built.tickers['outside']} outside "
        "this day's synced updates: no exact state, not references",
    ]
    if market == "cm":
        notes.append(
            "COIN-M: inverse contracts; quantity in contracts of contract_multiplier USD face value, PnL in the coin"
        )
    elif cap.symbol.endswith("USDT"):
        notes.append("quote_usd 1: USDT taken at 1 USD")
    if cap.snapshot is not None:
        first = f"the first applied update's {cap.depth_clock}"
        ts_of = f"its own time T, or {first} if earlier" if cap.snapshot[2] is not None else first
        notes.append(
            f"Opens from the REST snapshot (line {cap.snapshot[0]}, lastUpdateId {cap.snapshot[1]}) at {ts_of}, synced "
            "as Binance documents it; the diffs on lines before the snapshot line are buffered, those it already "
            "holds dropped (repairs: depth_updates_before_snapshot), trades before its time dropped "
            "(trades_before_snapshot)"
        )
    else:
        notes.append(
            f"Continues {prev.key}: opens with its last full book as LEVEL events at this day's first event time "
            "(the file has no snapshot of its own); files lists that day's file too"
        )
    if "sub_lot_level_sizes" in built.repairs:
        notes.append(
            f"{built.repairs['sub_lot_level_sizes']} depth level sizes finer than the lot (resting orders from "
            "before Binance raised the step size, seen far from the touch) rounded down to whole lots, at least "
            f"1 (repairs: sub_lot_level_sizes); never within the top {levels} levels (a DataError there)"
        )
    if cap.ignored:
        notes.append(f"streams not used: {dict(sorted(cap.ignored.items()))} messages")
    return tuple(notes)


def _day_manifest(
    cap: _Capture,
    built: _Built,
    units: _Units,
    unit_notes: list[str],
    levels: int,
    files: tuple[layout.SourceFile, ...],
    prev: _State | None,
) -> Manifest:
    market = cap.market
    maker, taker = FEES_BPS[market]
    lots = np.sort(built.trade_lots)
    order_lots = max(1, int(lots[(len(lots) - 1) // 2])) if len(lots) else 1
    multiplier = 1.0
    if market == "cm":
        multiplier = 100.0 if cap.symbol.startswith("BTCUSD_") else 10.0
    ev = built.events
    return Manifest(
        venue=VENUES[market],
        instrument=cap.symbol,
        date=datetime.fromtimestamp(built.first_ts // 1_000_000_000, UTC).strftime("%Y-%m-%d"),
        source=SOURCE,
        ingest=INGEST_VERSION,
        depth="L2",
        levels=levels,
        tick_size=float(units.tick),
        lot_size=float(units.lot),
        contract_multiplier=multiplier,
        inverse=market == "cm",
        quote_usd=1.0,
        maker_fee_bps=maker,
        taker_fee_bps=taker,
        order_lots=order_lots,
        n_events=len(ev),
        first_ts=int(ev["ts"][0]),
        last_ts=int(ev["ts"][-1]),
        files=files,
        continues=prev.key if prev is not None else None,
        repairs=dict(built.repairs),
        notes=_notes(cap, built, unit_notes, levels, prev),
    )


def ingest(paths: list[Path], out: Path, *, levels: int = 10) -> list[tuple[Manifest, bool]]:
    """Writes each day of these captures into the cache `out` (layout.write_day); returns (manifest, written) per
    day, written False where layout.is_current says the cache already holds it from the same files (a no-op).

    Files of one market and symbol are read together, in date order: a file without a snapshot continues the
    previous date's file, which must be among `paths` (DataError naming it otherwise). Every file of a symbol is
    read and checked before any of its days is written, so a bad file leaves none of them half done."""
    if not isinstance(levels, int) or isinstance(levels, bool) or levels < 1:
        raise DataError(f"levels={levels!r} must be an int >= 1")
    groups: dict[tuple[str, str], dict[str, Path]] = {}
    for p in map(Path, paths):
        m = FILE_NAME.match(p.name)
        if m is None:
            raise DataError(f"{p}: not a Binance capture name; expected <usdm|cm|spot>_<symbol>_<YYYYMMDD>.gz")
        if not p.is_file():
            raise DataError(f"{p}: no such file")
        files = groups.setdefault((m.group(1), m.group(2)), {})
        if m.group(3) in files:
            raise DataError(f"{p}: given twice, or beside {files[m.group(3)]} of the same market, symbol and date")
        files[m.group(3)] = p
    results = []
    for (market, symbol), by_date in sorted(groups.items()):
        results += _ingest_symbol(market, symbol, [by_date[d] for d in sorted(by_date)], Path(out), levels)
    return results


def _ingest_symbol(market: str, symbol: str, paths: list[Path], out: Path, levels: int) -> list[tuple[Manifest, bool]]:
    clock = _Clock()
    caps: list[_Capture] = []
    for i, p in enumerate(paths):
        file_date = FILE_NAME.match(p.name).group(3)
        cap = _parse(p, market, symbol, file_date, clock)
        if cap.snapshot is None:
            want = _previous_date(file_date)
            if i == 0 or caps[-1].file_date != want:
                raise DataError(
                    f"{p}: no REST depth snapshot, so it continues {market}_{symbol}_{want}.gz: ingest both files "
                    "in one call"
                )
        caps.append(cap)
    units, unit_notes = _units(caps)
    venue = VENUES[market]
    days: list[tuple[Manifest, _Built]] = []
    prev: _State | None = None
    prev_files: tuple[layout.SourceFile, ...] = ()
    while caps:
        cap = caps.pop(0)  # its lines go once its day is built
        chained = prev if cap.snapshot is None else None
        built = _build(cap, chained, units, levels, venue)
        files = (*prev_files, layout.source_file(cap.path)) if chained is not None else (layout.source_file(cap.path),)
        m = _day_manifest(cap, built, units, unit_notes, levels, files, chained)
        if days and days[-1][0].key == m.key:
            raise DataError(
                f"{cap.path}: its first event is on {m.date}, the date of {days[-1][0].files[-1].name}'s day too; a "
                "day is one UTC date"
            )
        days.append((m, built))
        prev, prev_files = built.state, (files[-1],)
    results = []
    for m, built in days:
        if layout.is_current(out, m):
            results.append((m, False))
            continue
        layout.write_day(out, m, built.events, built.book, built.reference)
        results.append((m, True))
    return results


# --- check ----------------------------------------------------------------------------------------------------


def check(day: Day, *, show: int = 5) -> CheckReport:
    """Replays the cached day and compares it with the source's own view.

    (1) The day's LEVEL events replayed from an empty L2Book: each event that changed the top `levels` must have
    the replay's row in book.npy, each other event the row before it; a LEVEL event's delta must be the change it
    made. (2) Each reference.npy quote (a bookTicker at an exact update id) must equal the best bid and ask of the
    book.npy row it names. `rows` counts book rows plus references. Nothing here differs for a documented reason
    (the explained dict stays empty); the first `show` differences are named. A day built by other rules than
    this module's (Manifest.ingest is not INGEST_VERSION) is refused: ingest it again."""
    m, ev, book = day.manifest, day.events, day.book
    if m.ingest != INGEST_VERSION:
        raise DataError(
            f"{day.path}: built by Binance ingest {m.ingest or 'of no version (futures depth at E)'}, this code's is "
            f"{INGEST_VERSION} (futures depth at T): ingest its files again (python -m lobsim_env.data ingest PATH... "
            "--out DIR rewrites it)"
        )
    n, nl = len(ev), m.levels
    rep = CheckReport(day=day.key)
    lb = L2Book(nl)
    kinds = np.asarray(ev["kind"])
    idx = np.flatnonzero(kinds == LEVEL)
    sides, prices, sizes = ev["side"][idx].tolist(), ev["price"][idx].tolist(), ev["size"][idx].tolist()
    deltas = ev["delta"][idx].tolist()
    touched, rebuilt, bad_delta = [], [], []
    row = np.zeros(4 * nl, dtype=np.int64)
    for i, s, p, q, d in zip(idx.tolist(), sides, prices, sizes, deltas, strict=True):
        top = lb.in_top(s, p)
        change = lb.set(s, p, q)
        if change != d:
            bad_delta.append(i)
        if change and top:
            row[:] = 0
            lb.row(row)
            touched.append(i)
            rebuilt.append(row.copy())
    same = np.empty(n, dtype=bool)
    if n:
        same[0] = not book[0].any()
        same[1:] = (book[1:] == book[:-1]).all(axis=1)
    bad = ~same  # an event that left the top alone must repeat the row before it
    t = np.asarray(touched, dtype=np.int64)
    replay = np.stack(rebuilt) if rebuilt else np.zeros((0, 4 * nl), dtype=np.int64)
    bad[t] = (np.asarray(book[t]) != replay).any(axis=1)
    bad[bad_delta] = True
    first = []
    for i in np.flatnonzero(bad)[:show].tolist():
        j = int(np.searchsorted(t, i))
        if j < len(t) and t[j] == i:
            want = f"the replay's {replay[j][:4].tolist()}"
        else:
            before = np.asarray(book[i - 1][:4]).tolist() if i else [0, 0, 0, 0]
            want = f"the row before's {before} (the event leaves the top alone)"
        e = ev[i]
        first.append(
            f"event {i} ({layout.EVENT_KINDS[int(e['kind'])]} side={int(e['side'])} price={int(e['price'])} "
            f"size={int(e['size'])} delta={int(e['delta'])}): book.npy top {np.asarray(book[i][:4]).tolist()}, "
            f"expected {want}" + (f"; the replay's delta is not {int(e['delta'])}" if i in bad_delta else "")
        )
    rep.rows, rep.unexplained = n, int(bad.sum())
    ref = day.reference
    if ref is not None and len(ref):
        ref = np.asarray(ref)
        at = ref[:, 0]
        in_range = (at >= 0) & (at < n)
        quoted = np.zeros((len(ref), 4), dtype=np.int64)
        quoted[in_range] = np.asarray(book)[at[in_range]][:, [2, 3, 0, 1]]
        differs = ~in_range | (quoted != ref[:, 1:]).any(axis=1)
        rep.rows += len(ref)
        rep.unexplained += int(differs.sum())
        for j in np.flatnonzero(differs)[: max(0, show - len(first))].tolist():
            first.append(
                f"reference {j} at event {int(at[j])}: bookTicker bid {int(ref[j, 1])} x {int(ref[j, 2])}, ask "
                f"{int(ref[j, 3])} x {int(ref[j, 4])}; book.npy bid {int(quoted[j, 0])} x {int(quoted[j, 1])}, ask "
                f"{int(quoted[j, 2])} x {int(quoted[j, 3])}"
            )
    rep.matched = rep.rows - rep.unexplained
    rep.first = first
    return rep

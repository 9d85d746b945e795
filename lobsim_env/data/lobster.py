"""LOBSTER days into the cache: a zip, or a `*_message_<L>.csv` with its `*_orderbook_<L>.csv` beside it.

The files are read and validated by lobsim_env.lobster.files.load_day (docs/lobster.md); this module turns the
day into the cache's layout (lobsim_env.data.layout):
- events: LOBSTER's message types map one to one onto ADD .. HALT; `side` is the direction (+1 bid, -1 ask; 0 for a
  halt, whose price keeps LOBSTER's -1 halt / 0 quotes resume / 1 trading resumes); prices in ticks of one cent
  where every visible price (messages of types 1-4 and the orderbook) is on the cent grid, else of their gcd
  (said in notes); a hidden execution or a cross off that grid (a midpoint fill at half a cent) is rounded down
  to it and counted in `repairs` (neither ever touches the visible book or the agent); sizes in shares (one lot
  = one share),
  `first_seen` the index of the order's submission (-1: it rested before the file's window), `delta` the change
  of the displayed size at the message's price on its side, read from the orderbook rows around it;
- ts: LOBSTER's seconds after midnight in New York, as ns since the Unix epoch (UTC);
- book: the orderbook file's rows (the source's own visible book), in ticks, an empty level 0 / 0;
- fees: NASDAQ's per-share schedule of the time as the sample's market used it: a taker pays $0.0030 a share, a
  passive fill earns a $0.0020 rebate (lobsim_env.lobster.market.lobster_config's values);
- order_lots: the median visible execution's size (100 shares on the samples).
`check` rebuilds the visible book from the cached messages with lobsim_env.lobster.reconstruct (the compiled or
numpy replay) and compares it with the cached orderbook rows, as `python -m lobsim_env.lobster.reconstruct
--check` does with the files.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from pathlib import Path

import numpy as np

from lobsim_env.data import layout
from lobsim_env.data.layout import EVENT_DTYPE, CheckReport, DataError, Day, Manifest
from lobsim_env.lobster import reconstruct
from lobsim_env.lobster.files import DUMMY_ASK_PRICE, DUMMY_BID_PRICE, TICK, LobsterDay, load_day

VENUE = "nasdaq"
NEW_YORK = zoneinfo.ZoneInfo("America/New_York")
TAKER_FEE_PER_SHARE = 0.003
MAKER_FEE_PER_SHARE = -0.002
_UNITS = 10_000  # LOBSTER prices are dollars * 10000


def claims(path: Path) -> bool:
    name = path.name
    return (name.startswith("LOBSTER_") and name.endswith(".zip")) or ("_message_" in name and name.endswith(".csv"))


def _tick_units(day: LobsterDay) -> int:
    """LOBSTER price units of one tick: 100 (a cent) when every visible price is on the cent grid, else their gcd."""
    prices = [day.price[np.isin(day.event_type, (1, 2, 3, 4))]]
    if day.book is not None:
        p = day.book[:, 0::2]
        prices.append(p[(p != DUMMY_ASK_PRICE) & (p != DUMMY_BID_PRICE)])
    allp = np.concatenate(prices)
    if allp.size == 0 or not (allp % TICK).any():
        return TICK
    return int(np.gcd.reduce(allp))


def _displayed(book: np.ndarray, price: np.ndarray, side: np.ndarray) -> np.ndarray:
    """The displayed size at (price, side) in each row of `book` (LOBSTER units), 0 where that price shows no level."""
    ask = np.where(book[:, 0::4] == price[:, None], book[:, 1::4], 0).sum(axis=1)
    bid = np.where(book[:, 2::4] == price[:, None], book[:, 3::4], 0).sum(axis=1)
    return np.where(side > 0, bid, np.where(side < 0, ask, 0))


def to_cache(day: LobsterDay, files: tuple[layout.SourceFile, ...]) -> tuple[Manifest, np.ndarray, np.ndarray]:
    """The manifest, events and book of a loaded LOBSTER day."""
    if day.book is None:
        why = "the cache needs both (LOBSTER gives both)"
        raise DataError(f"{day.source}: no orderbook file beside the messages; {why}")
    n = day.n_messages
    if n < 2:
        raise DataError(f"{day.source}: {n} message(s); a day needs at least 2")
    tick = _tick_units(day)
    kind = day.event_type.astype(np.uint8)
    side = np.where(kind == 7, 0, day.direction).astype(np.int8)
    events = np.zeros(n, EVENT_DTYPE)
    midnight = dt.datetime.fromisoformat(day.date).replace(tzinfo=NEW_YORK)
    events["ts"] = int(midnight.timestamp()) * 1_000_000_000 + day.time_ns
    events["kind"] = kind
    events["side"] = side
    events["price"] = np.where(kind == 7, day.price, day.price // tick)  # a halt keeps LOBSTER's -1 / 0 / 1
    off_grid = int(((day.price % tick) != 0)[kind != 7].sum())
    events["size"] = day.size
    events["order_id"] = day.order_id
    events["first_seen"] = _first_add_index(day.event_type, day.order_id)
    after = _displayed(day.book, day.price, side)
    before = np.zeros(n, np.int64)
    before[1:] = _displayed(day.book[:-1], day.price[1:], side[1:])
    before[0] = after[0]  # the book before the first message is not in the file
    events["delta"] = np.where(np.isin(kind, (1, 2, 3, 4)), after - before, 0)
    book = np.array(day.book, np.int64)
    prices = book[:, 0::2]
    empty = (prices == DUMMY_ASK_PRICE) | (prices == DUMMY_BID_PRICE)
    book[:, 0::2] = np.where(empty, 0, prices // tick)
    executions = day.size[day.event_type == 4]
    notes = [
        "L3: every order's queue place is in the messages (the agent joins behind the displayed size at its price)",
        "ts: LOBSTER's seconds after midnight in New York, as UTC ns",
        "fees: NASDAQ per share of the time: taker $0.0030, passive fill rebate $0.0020",
    ]
    if tick != TICK:
        notes.append(f"prices off the cent grid: one tick is {tick} LOBSTER units (${tick / _UNITS:g})")
    m = Manifest(
        venue=VENUE,
        instrument=day.ticker,
        date=day.date,
        source="lobster",
        depth="L3",
        levels=day.levels,
        tick_size=tick / _UNITS,
        lot_size=1.0,
        maker_fee_per_lot=MAKER_FEE_PER_SHARE,
        taker_fee_per_lot=TAKER_FEE_PER_SHARE,
        order_lots=max(1, int(np.median(executions))) if executions.size else 100,
        n_events=n,
        first_ts=int(events["ts"][0]),
        last_ts=int(events["ts"][-1]),
        files=files,
        repairs={"hidden_or_cross_price_rounded_to_the_tick": off_grid} if off_grid else {},
        notes=tuple(notes),
    )
    return m, events, book


def _first_add_index(event_type: np.ndarray, order_id: np.ndarray) -> np.ndarray:
    """For each message, the index of the submission (type 1) of its order id; -1 if never seen added."""
    from lobsim_env.lobster.market import _first_add_index as first

    return first(event_type, order_id)


def deepest_per_day(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The files to ingest when several are one day (LOBSTER's samples give AMZN and GOOG at 1, 5 and 10 levels):
    the deepest of each ticker and date, and a line for each file left out. Two files of one day and one depth are
    a DataError naming both."""
    by_day: dict[tuple[str, str], list[tuple[int, Path]]] = {}
    for p in paths:
        name = p.name.replace("LOBSTER_SampleFile_", "")
        parts = name.rsplit(".", 1)[0].split("_")
        if len(parts) < 3:
            by_day.setdefault((name, ""), []).append((0, p))
            continue
        ticker, date, depth = parts[0], parts[1], parts[-1]
        by_day.setdefault((ticker, date), []).append((int(depth) if depth.isdigit() else 0, p))
    keep, skipped = [], []
    for (ticker, date), found in by_day.items():
        found.sort(key=lambda x: x[0])
        depths = [d for d, _ in found]
        if len(set(depths)) != len(depths):
            same = [str(p) for d, p in found if depths.count(d) > 1]
            raise DataError(f"{' and '.join(same)} are one day ({ticker} {date}) at one depth: pass one of them")
        deepest, kept = found[-1]
        keep.append(kept)
        skipped += [f"{p.name}: {ticker} {date} is also in {kept.name}, at {deepest} levels" for _, p in found[:-1]]
    return keep, skipped


def ingest(paths: list[Path], out: Path, *, levels: int | None = None) -> list[tuple[Manifest, bool]]:
    """Each LOBSTER zip or message CSV as one day of the cache `out` (for several files of one day, pass
    `deepest_per_day`'s choice). `levels` (default: the file's depth) keeps the top levels of the orderbook. A day
    already in the cache from the same files is left alone."""
    done = []
    keys: dict[str, Path] = {}
    for path in paths:
        files = [path]
        if path.suffix.lower() == ".csv":
            ob = path.with_name(path.name.replace("_message_", "_orderbook_"))
            files += [ob] if ob.exists() else []
        sources = tuple(layout.source_file(p) for p in files)
        day = load_day(path, levels=levels)
        m, events, book = to_cache(day, sources)
        if m.key in keys:
            raise DataError(
                f"{path} and {keys[m.key]} are both {m.key}: one day has one file; ingest them into separate caches"
            )
        keys[m.key] = path
        if layout.is_current(out, m):
            done.append((m, False))
            continue
        layout.write_day(out, m, events, book)
        done.append((m, True))
    return done


def _as_lobster(day: Day) -> LobsterDay:
    m = day.manifest
    tick = round(m.tick_size * _UNITS)
    ev = day.events
    book = np.array(day.book, np.int64)
    p, s = book[:, 0::2], book[:, 1::2]
    asks = np.zeros_like(p, bool)
    asks[:, 0::2] = True
    book[:, 0::2] = np.where(s > 0, p * tick, np.where(asks, DUMMY_ASK_PRICE, DUMMY_BID_PRICE))
    kind = ev["kind"].astype(np.int8)
    return LobsterDay(
        ticker=m.instrument,
        date=m.date,
        levels=m.levels,
        time_ns=ev["ts"] - ev["ts"][0] + 0,
        event_type=kind,
        order_id=np.ascontiguousarray(ev["order_id"]),
        size=np.ascontiguousarray(ev["size"]),
        price=np.where(kind == 7, ev["price"], ev["price"] * tick),
        direction=np.where(kind == 7, -1, ev["side"]).astype(np.int8),
        book=book,
        source=day.path,
    )


def check(day: Day) -> CheckReport:
    """The cached messages replayed (lobsim_env.lobster.reconstruct) against the cached orderbook rows."""
    rep = reconstruct.check(_as_lobster(day))
    first = [
        f"row {d.row}: message {d.message}: replayed {d.replayed[:4]}..., the file {d.file[:4]}..."
        for d in rep.first_unexplained
    ]
    explained = {k: v for k, v in rep.exceptions.items() if v}
    return CheckReport(
        day=day.key,
        rows=rep.rows,
        matched=rep.rows_matched,
        explained=explained,
        unexplained=rep.unexplained_rows,
        first=first,
    )

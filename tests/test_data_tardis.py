"""Tardis CSV ingest (lobsim_env.data.tardis): files written here in Tardis's documented format, from a seeded
random book whose own top of book (a plain dict model, not L2Book) is what every book.npy row must equal."""

from __future__ import annotations

import gzip
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.data import layout, tardis
from lobsim_env.data.layout import LEVEL, TRADE, DataError, open_day

BOOK_HEADER = "exchange,symbol,timestamp,local_timestamp,is_snapshot,side,price,amount"
TRADES_HEADER = "exchange,symbol,timestamp,local_timestamp,id,side,price,amount"
T0 = 1_709_251_200_000_000  # 2024-03-01T00:00:00Z in µs
LEVELS = 5


def _num(x: int, decimals: int) -> str:
    """An integer count of 10**-decimals as Tardis writes a number: shortest decimal text ('30000.1', '2', '0.013')."""
    s = f"{x / 10**decimals:.{decimals}f}"
    return s.rstrip("0").rstrip(".") if "." in s else s


@dataclass
class Gen:
    """A seeded day: book rows and trades in time order, and the model's book top after each merged event."""

    seed: int = 0
    exchange: str = "binance-futures"
    symbol: str = "BTCUSDT"
    book: list[str] = field(default_factory=list)
    trades: list[str] = field(default_factory=list)
    expected: list[list[int]] = field(default_factory=list)
    """The top LEVELS of each side after each merged event (book.npy's row), prices in ticks of 0.1, sizes in lots
    of 0.001."""
    kinds: list[int] = field(default_factory=list)
    trade_sides: list[int] = field(default_factory=list)

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.bids: dict[int, int] = {}
        self.asks: dict[int, int] = {}
        self.t = T0

    def row(self) -> list[int]:
        r = [0] * (4 * LEVELS)
        for i, p in enumerate(sorted(self.asks)[:LEVELS]):
            r[4 * i : 4 * i + 2] = [p, self.asks[p]]
        for i, p in enumerate(sorted(self.bids, reverse=True)[:LEVELS]):
            r[4 * i + 2 : 4 * i + 4] = [p, self.bids[p]]
        return r

    def level(self, side: str, price: int, lots: int, *, snapshot: bool = False, ts: int | None = None) -> None:
        book = self.bids if side == "bid" else self.asks
        if lots:
            book[price] = lots
        else:
            book.pop(price, None)
        t = self.t if ts is None else ts
        snap = "true" if snapshot else "false"
        self.book.append(f"{self.exchange},{self.symbol},{t - 50},{t},{snap},{side},{_num(price, 1)},{_num(lots, 3)}")
        self.expected.append(self.row())
        self.kinds.append(LEVEL)

    def trade(self, side: str, price: int, lots: int) -> None:
        n = len(self.trades)
        t = self.t
        self.trades.append(f"{self.exchange},{self.symbol},{t - 50},{t},{n},{side},{_num(price, 1)},{_num(lots, 3)}")
        self.expected.append(self.expected[-1])
        self.kinds.append(TRADE)
        self.trade_sides.append(-1 if side == "buy" else 1 if side == "sell" else 0)

    def snapshot(self, mid: int, depth: int = 12) -> None:
        self.bids.clear()
        self.asks.clear()
        for k in range(depth):
            self.level("bid", mid - 1 - k, self.rng.randint(1, 5000), snapshot=True)
        for k in range(depth):
            self.level("ask", mid + k, self.rng.randint(1, 5000), snapshot=True)

    def updates(self, n: int, trade_every: int = 9) -> None:
        rng = self.rng
        for k in range(n):
            self.t += rng.choice((0, 0, 1, 7, 150))  # equal times are common
            if k % trade_every == trade_every - 1 and self.bids and self.asks:
                if rng.random() < 0.5:
                    self.trade("buy", min(self.asks), rng.randint(1, 900))
                else:
                    self.trade(rng.choice(("sell", "unknown")), max(self.bids), rng.randint(1, 900))
                self.t += 1  # a book row never follows a trade at its time (book rows come first at equal times)
                continue
            side = rng.choice(("bid", "ask"))
            book = self.bids if side == "bid" else self.asks
            if book and rng.random() < 0.25:
                price = rng.choice(sorted(book)[:: 1 if side == "ask" else -1][:8])
                self.level(side, price, 0)
                continue
            if side == "bid":
                top = max(self.bids) if self.bids else min(self.asks) - 1
                price = min(top + rng.randint(-20, 1), min(self.asks) - 1 if self.asks else top + 1)
            else:
                top = min(self.asks) if self.asks else max(self.bids) + 1
                price = max(top + rng.randint(-1, 20), max(self.bids) + 1 if self.bids else top - 1)
            self.level(side, price, rng.randint(1, 40000))

    def write(self, folder: Path, *, gz_book: bool = True, date: str = "2024-03-01") -> tuple[Path, Path]:
        book = folder / (f"{self.exchange}_incremental_book_L2_{date}_{self.symbol}.csv" + (".gz" if gz_book else ""))
        text = "\n".join([BOOK_HEADER, *self.book]) + "\n"
        if gz_book:
            book.write_bytes(gzip.compress(text.encode()))
        else:
            book.write_text(text)
        trades = folder / f"{self.exchange}_trades_{date}_{self.symbol}.csv"
        trades.write_text("\n".join([TRADES_HEADER, *self.trades]) + "\n")
        return book, trades


def _day(seed: int = 0, n: int = 1500) -> Gen:
    g = Gen(seed=seed)
    g.snapshot(300_000)
    g.updates(n)
    return g


def _only_day(out: Path) -> layout.Day:
    (m,) = layout.list_days(out)
    return open_day(layout.day_dir(out, m))


def test_the_day_rebuilds_the_sources_book_row_by_row(tmp_path):
    g = _day()
    book, trades = g.write(tmp_path)
    ((m, written),) = tardis.ingest([trades, book], tmp_path / "cache", levels=LEVELS)
    assert written
    assert (m.venue, m.instrument, m.date, m.source, m.depth, m.levels) == (
        "binance-futures", "BTCUSDT", "2024-03-01", "tardis", "L2", LEVELS,
    )  # fmt: skip
    assert (m.tick_size, m.lot_size) == (0.1, 0.001)
    assert any("tick_size 0.1 inferred" in n for n in m.notes) and any("fees" in n for n in m.notes)
    assert m.maker_fee_bps == m.taker_fee_bps == 0 and m.repairs == {}
    day = _only_day(tmp_path / "cache")
    assert day.events.shape[0] == len(g.expected) == m.n_events
    np.testing.assert_array_equal(day.book, np.array(g.expected))
    np.testing.assert_array_equal(day.events["kind"], g.kinds)
    trade_rows = day.events[day.events["kind"] == TRADE]
    np.testing.assert_array_equal(trade_rows["side"], g.trade_sides)  # a buy hit the asks: -1
    assert (trade_rows["delta"] == 0).all()
    assert m.order_lots == round(float(np.median(trade_rows["size"])))
    lv = day.events[day.events["kind"] == LEVEL]
    assert (np.diff(day.events["ts"]) >= 0).all() and day.events["ts"][0] == (T0 - 50) * 1000
    assert (lv["first_seen"] == -1).all() and (lv["order_id"] == 0).all()
    # delta is the change of the level: summed per (side, price) it is the level's final size
    final = {}
    for e in lv:
        final[(e["side"], e["price"])] = final.get((e["side"], e["price"]), 0) + e["delta"]
    assert final[(1, g.expected[-1][2])] == g.expected[-1][3] and final[(-1, g.expected[-1][0])] == g.expected[-1][1]
    rep = tardis.check(day)
    assert rep.ok and rep.rows == rep.matched == m.n_events, rep


def test_ingesting_twice_is_a_noop_and_other_levels_rewrite(tmp_path):
    book, trades = _day(1, 300).write(tmp_path)
    out = tmp_path / "cache"
    ((m1, w1),) = tardis.ingest([book, trades], out, levels=LEVELS)
    folder = layout.day_dir(out, m1)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    ((m2, w2),) = tardis.ingest([book, trades], out, levels=LEVELS)
    assert (w1, w2) == (True, False) and m2 == m1
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    ((m3, w3),) = tardis.ingest([book, trades], out, levels=LEVELS + 1)
    assert w3 and m3.levels == LEVELS + 1 and _only_day(out).book.shape[1] == 4 * (LEVELS + 1)


def test_a_resent_snapshot_clears_and_rebuilds_the_book(tmp_path):
    g = _day(2, 400)
    g.t += 1000
    g.snapshot(300_050, depth=6)  # the venue re-sends a smaller book, 5 ticks higher
    after = g.expected[-1]
    g.updates(100)
    book, trades = g.write(tmp_path, gz_book=False)
    ((m, _),) = tardis.ingest([book, trades], tmp_path / "cache", levels=LEVELS)
    assert m.repairs == {"book_resnapshots": 1}
    day = _only_day(tmp_path / "cache")
    added = m.n_events - len(g.expected)
    assert added > 0 and any(f"{added} LEVEL events of size 0 added" in n for n in m.notes)
    rows = [r.tolist() for r in day.book]
    assert after in rows  # the book once the new snapshot is read is that snapshot, nothing of the old one
    np.testing.assert_array_equal(day.book[-100:], np.array(g.expected[-100:]))
    assert tardis.check(day).ok


def test_given_units_and_a_unit_the_prices_are_not_multiples_of(tmp_path):
    book, trades = _day(3, 200).write(tmp_path)
    ((m, _),) = tardis.ingest([book, trades], tmp_path / "a", levels=LEVELS, tick_size=0.05, lot_size=0.0005)
    assert (m.tick_size, m.lot_size) == (0.05, 0.0005) and "tick_size 0.05 as given" in m.notes
    day = _only_day(tmp_path / "a")
    g = _day(3, 200)
    np.testing.assert_array_equal(day.book[:, 0::2], np.array(g.expected)[:, 0::2] * 2)  # prices in ticks of 0.05
    np.testing.assert_array_equal(day.book[:, 1::2], np.array(g.expected)[:, 1::2] * 2)  # sizes in lots of 0.0005
    with pytest.raises(DataError, match=r"line \d+, column 7 \(price\): value \S+ is not a multiple of tick_size=0.3"):
        tardis.ingest([book, trades], tmp_path / "b", levels=LEVELS, tick_size=0.3)
    assert not (tmp_path / "b").exists() or not layout.list_days(tmp_path / "b")


def test_exchange_time_before_the_previous_rows_is_raised_and_counted(tmp_path):
    g = _day(4, 50)
    fields = g.book[30].split(",")
    fields[2] = str(int(fields[2]) - 10_000)  # the exchange's clock steps back 10 ms; the file's order holds
    g.book[30] = ",".join(fields)
    book, trades = g.write(tmp_path)
    ((m, _),) = tardis.ingest([book, trades], tmp_path / "cache", levels=LEVELS)
    assert m.repairs == {"exchange_time_backwards": 1}
    day = _only_day(tmp_path / "cache")
    assert (np.diff(day.events["ts"]) >= 0).all()
    np.testing.assert_array_equal(day.book, np.array(g.expected))


def _corrupt(g: Gen, which: str, line: int, column: int, value: str) -> None:
    rows = g.book if which == "book" else g.trades
    fields = rows[line - 2].split(",")
    fields[column - 1] = value
    rows[line - 2] = ",".join(fields)


@pytest.mark.parametrize(
    ("which", "line", "column", "value", "message"),
    [
        ("book", 40, 6, "buy", r"line 40, column 6 \(side\): value 'buy' is not one of bid, ask"),
        ("book", 41, 8, "-1.5", r"line 41, column 8 \(amount\): value '-1.5' is not an amount >= 0"),
        ("book", 42, 7, "abc", r"line 42, column 7 \(price\): value 'abc' is not a number"),
        ("book", 43, 4, str(T0 - 10**6), r"line 43, column 4 \(local_timestamp\): value '\d+' is before the previous"),
        ("book", 44, 2, "ETHUSDT", r"line 44, column 2 \(symbol\): value 'ETHUSDT' differs from the file's first"),
        ("book", 45, 3, "1709251200", r"line 45, column 3 \(timestamp\): value '1709251200' is not microseconds"),
        ("book", 2, 5, "false", r"line 2: is_snapshot is false"),
        ("trades", 5, 6, "bid", r"line 5, column 6 \(side\): value 'bid' is not one of buy, sell, unknown"),
        ("trades", 6, 8, "0", r"line 6, column 8 \(amount\): value '0' is not a trade amount > 0"),
        ("trades", 2, 4, str(T0 + 86_400_000_000), r"trades file of binance-futures BTCUSDT 2024-03-02"),
        ("trades", 2, 2, "ETHUSDT", r"trades file of binance-futures ETHUSDT 2024-03-01 .* but no incremental_book_L2"),
    ],
)
def test_bad_input_names_the_file_line_and_value_and_writes_nothing(tmp_path, which, line, column, value, message):
    g = _day(5, 300)
    _corrupt(g, which, line, column, value)
    book, trades = g.write(tmp_path)
    out = tmp_path / "cache"
    with pytest.raises(DataError, match=message) as err:
        tardis.ingest([book, trades], out, levels=LEVELS)
    assert (book.name if which == "book" else trades.name) in str(err.value)
    assert not out.exists() or not any(out.rglob("*.npy"))  # the day is written whole or not at all


def test_malformed_files(tmp_path):
    g = _day(6, 50)
    book, trades = g.write(tmp_path, gz_book=False)
    text = book.read_text().splitlines()
    book.write_text("\n".join([text[0].replace(",is_snapshot", ""), *text[1:]]) + "\n")
    with pytest.raises(DataError, match=r"line 1: header .*missing columns \['is_snapshot'\]"):
        tardis.ingest([book, trades], tmp_path / "c", levels=LEVELS)
    book.write_text("\n".join([text[0], *text[1:20], text[20].rsplit(",", 1)[0], *text[21:]]) + "\n")
    with pytest.raises(DataError, match=r"line 21: 7 fields in .* expected 8"):
        tardis.ingest([book, trades], tmp_path / "c", levels=LEVELS)
    gz = tmp_path / "cut.csv.gz"
    gz.write_bytes(gzip.compress("\n".join(text).encode())[:-30])
    with pytest.raises(DataError, match=r"cut\.csv\.gz: cannot read it"):
        tardis.ingest([gz], tmp_path / "c", levels=LEVELS)
    book.write_text("\n".join(text) + "\n")
    copy = book.with_name("copy.csv")
    copy.write_text(book.read_text())
    with pytest.raises(DataError, match="two incremental_book_L2 files"):
        tardis.ingest([book, copy], tmp_path / "c", levels=LEVELS)
    with pytest.raises(DataError, match=r"levels=0 must be an int >= 1"):
        tardis.ingest([book], tmp_path / "c", levels=0)


def test_crossed_book_in_the_source_is_explained_and_a_changed_row_is_not(tmp_path):
    g = _day(7, 200)
    g.t += 5
    best_ask = min(g.asks)
    g.level("bid", best_ask + 2, 700)  # the venue's levels cross (a stale ask it never removed)
    g.t += 5
    g.updates(40)
    book, trades = g.write(tmp_path)
    tardis.ingest([book, trades], tmp_path / "cache", levels=LEVELS)
    day = _only_day(tmp_path / "cache")
    rep = tardis.check(day)
    assert rep.ok and rep.explained.get("crossed_in_source", 0) >= 1
    assert rep.matched + sum(rep.explained.values()) == rep.rows == day.events.shape[0]
    bad = np.array(day.book)
    bad[123, 1] += 1  # ask_size_1 of one row
    rep = tardis.check(layout.Day(manifest=day.manifest, events=day.events, book=bad, path=day.path))
    assert not rep.ok and rep.unexplained == 1 and rep.first[0].startswith("event 123:")


def test_a_failed_write_leaves_the_previous_day_whole(tmp_path, monkeypatch):
    book, trades = _day(8, 100).write(tmp_path)
    out = tmp_path / "cache"
    ((m, _),) = tardis.ingest([book, trades], out, levels=LEVELS)
    folder = layout.day_dir(out, m)
    old = (folder / "book.npy").read_bytes()
    saves = []

    def failing_save(f, arr, **kw):
        saves.append(1)
        if len(saves) == 2:
            raise OSError("disk full")
        return np.lib.format.write_array(f, np.asanyarray(arr), allow_pickle=False)

    monkeypatch.setattr(layout.np, "save", failing_save)
    with pytest.raises(OSError, match="disk full"):
        tardis.ingest([book, trades], out, levels=LEVELS + 2)
    assert (folder / "book.npy").read_bytes() == old and layout.read_manifest(folder).levels == LEVELS
    assert sorted(os.listdir(folder.parent)) == [folder.name]  # no temporary folder left beside it


def test_claims(tmp_path):
    book, trades = _day(9, 20).write(tmp_path)
    assert tardis.claims(book) and tardis.claims(trades)
    other = tmp_path / "x.csv"
    other.write_text("time,type,order_id\n1,2,3\n")
    junk = tmp_path / "y.csv.gz"
    junk.write_bytes(b"\x1f\x8bnot gzip")
    dbn = tmp_path / "z.dbn"
    dbn.write_bytes(b"DBN\x03")
    assert not any(tardis.claims(p) for p in (other, junk, dbn, tmp_path / "missing.csv"))
    broken = tmp_path / "bybit_trades_2024-03-01_BTCUSDT.csv.gz"  # a Tardis name: claimed, and ingest says why not
    broken.write_bytes(b"\x1f\x8bnot gzip")
    assert tardis.claims(broken)
    with pytest.raises(DataError, match=r"BTCUSDT.csv.gz: not a readable Tardis CSV"):
        tardis.ingest([broken], tmp_path / "cache")

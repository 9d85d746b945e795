"""Binance captures into the day cache (lobsim_env.data.binance): the real captures of ../shared/data/binance ingest
and rebuild the venue's own bookTicker quotes exactly, a next-day file continues its previous day's book, and each
kind of bad capture (written here, small) is refused with an error naming the file and line, leaving no day."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.data import binance, layout
from lobsim_env.data.l2book import ASK, BID, L2Book
from lobsim_env.data.layout import LEVEL, TRADE, DataError

DATA = Path(os.environ.get("FOXHUNT_BINANCE_DATA") or Path(__file__).parents[2] / "shared" / "data" / "binance")
needs_data = pytest.mark.skipif(
    not DATA.is_dir(), reason=f"no Binance captures at {DATA} (set FOXHUNT_BINANCE_DATA to their folder)"
)
REAL = {
    "usdm_btcusdt": ["usdm_btcusdt_20240808.gz"],
    "usdm_ethusdt": ["usdm_ethusdt_20240808.gz"],
    "cm_btcusd_perp": ["cm_btcusd_perp_20240808.gz", "cm_btcusd_perp_20240809.gz"],
    "spot_btcusdt": ["spot_btcusdt_20240808.gz", "spot_btcusdt_20240809.gz"],
    "spot_ethusdt": ["spot_ethusdt_20240808.gz", "spot_ethusdt_20240809.gz"],
}
UNITS = {  # key -> (tick, lot, contract_multiplier, inverse, maker bps, taker bps)
    "binance-usdm/BTCUSDT": (0.1, 0.001, 1.0, False, 2.0, 5.0),
    "binance-usdm/ETHUSDT": (0.01, 0.001, 1.0, False, 2.0, 5.0),
    "binance-coinm/BTCUSD_PERP": (0.1, 1.0, 100.0, True, 2.0, 5.0),
    "binance-spot/BTCUSDT": (0.01, 0.00001, 1.0, False, 10.0, 10.0),
    "binance-spot/ETHUSDT": (0.01, 0.0001, 1.0, False, 10.0, 10.0),
}


def levels_of(events: np.ndarray) -> list[tuple[int, int, int]]:
    """Events as (side, price, size)."""
    return list(zip(events["side"].tolist(), events["price"].tolist(), events["size"].tolist(), strict=True))


def replay_levels(events: np.ndarray, levels: int) -> L2Book:
    """The book after a day's LEVEL events, replayed from empty."""
    book = L2Book(levels)
    lv = events[events["kind"] == LEVEL]
    for s, p, q in zip(lv["side"].tolist(), lv["price"].tolist(), lv["size"].tolist(), strict=True):
        book.set(s, p, q)
    return book


# --- the real captures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Every real capture ingested once into one cache: (cache, {key: manifest}). Its speed is a benchmark's
    (benchmarks/bench_ingest.py), not a test's."""
    if not DATA.is_dir():
        pytest.skip(f"no Binance captures at {DATA} (set FOXHUNT_BINANCE_DATA to their folder)")
    out = tmp_path_factory.mktemp("binance-cache")
    days = {}
    for names in REAL.values():
        res = binance.ingest([DATA / n for n in names], out)
        assert [w for _, w in res] == [True] * len(names)
        days.update({m.key: m for m, _ in res})
    return out, days


@needs_data
def test_every_real_file_ingests_and_checks(real):
    out, days = real
    assert sorted(days) == sorted(
        [f"{k}/2024-08-08" for k in UNITS] + [f"{k}/2024-08-09" for k in UNITS if "usdm" not in k]
    )
    for key, m in days.items():
        tick, lot, mult, inverse, maker, taker = UNITS[key.rsplit("/", 1)[0]]
        assert (m.tick_size, m.lot_size, m.contract_multiplier, m.inverse) == (tick, lot, mult, inverse), key
        assert (m.maker_fee_bps, m.taker_fee_bps, m.source, m.depth, m.quote_usd) == (maker, taker, "binance", "L2", 1)
        assert m.order_lots >= 1 and m.n_events > 100_000
        day = layout.open_day(layout.day_dir(out, m))
        rep = binance.check(day)
        assert rep.unexplained == 0, (key, rep.first)
        assert rep.rows == m.n_events + len(day.reference) and rep.matched == rep.rows
        ts = np.asarray(day.events["ts"])
        assert (np.diff(ts) >= 0).all() and ts[0] == m.first_ts and ts[-1] == m.last_ts
        book = np.asarray(day.book)
        both = (book[:, 0] > 0) & (book[:, 2] > 0)
        assert (book[both, 0] > book[both, 2]).all(), f"{key}: a row shows a crossed book"


@needs_data
def test_real_book_ticker_matches_rebuilt_book(real):
    """Every bookTicker quote at an exact update id equals the rebuilt book's best bid and ask, size included:
    several hundred quotes a day, each placed by its update id alone."""
    out, days = real
    for key, m in days.items():
        day = layout.open_day(layout.day_dir(out, m))
        ref = np.asarray(day.reference)
        assert len(ref) >= 400, key
        top = np.asarray(day.book)[ref[:, 0]][:, [2, 3, 0, 1]]
        np.testing.assert_array_equal(top, ref[:, 1:], err_msg=key)
        # the row is the book after a depth update: a LEVEL event, never a trade
        assert (np.asarray(day.events["kind"])[ref[:, 0]] == LEVEL).all()


@needs_data
def test_real_next_day_continues_the_previous_book(real):
    out, days = real
    for key in ("binance-coinm/BTCUSD_PERP", "binance-spot/BTCUSDT", "binance-spot/ETHUSDT"):
        first, second = days[f"{key}/2024-08-08"], days[f"{key}/2024-08-09"]
        assert first.continues is None and second.continues == first.key
        assert [f.name for f in second.files] == [first.files[0].name, second.files[-1].name]
        d1 = layout.open_day(layout.day_dir(out, first))
        d2 = layout.open_day(layout.day_dir(out, second))
        end = replay_levels(np.asarray(d1.events), first.levels).levels_now()
        opening = np.asarray(d2.events[: len(end)])
        assert (opening["kind"] == LEVEL).all() and (opening["ts"] == second.first_ts).all()
        assert levels_of(opening) == end
        np.testing.assert_array_equal(d2.book[len(end) - 1], d1.book[-1])


@needs_data
def test_real_ingest_twice_writes_nothing(real):
    out, _ = real
    names = REAL["spot_ethusdt"]
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    res = binance.ingest([DATA / n for n in names], out)
    assert [w for _, w in res] == [False, False]
    assert [m.key for m, _ in res] == ["binance-spot/ETHUSDT/2024-08-08", "binance-spot/ETHUSDT/2024-08-09"]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before


# --- hand-made captures ---------------------------------------------------------------------------------------

T0 = 1723161300000  # 2024-08-08 23:55:00 UTC, ms


def depth(
    recv: int, e: int, first: int, last: int, prev: int | None, bids=(), asks=(), sym="btcusdt", t: int | None = None
) -> str:
    """A depth update sent at E = T0 + e; futures (`prev`, its pu, given) carry T = T0 + t (t: e unless given)."""
    data = {"e": "depthUpdate", "E": T0 + e, "T": T0 + (e if t is None else t), "s": sym.upper(), "U": first, "u": last}
    if prev is None:  # spot: no T, no pu
        del data["T"]
    else:
        data["pu"] = prev
    data |= {"b": [list(x) for x in bids], "a": [list(x) for x in asks]}
    speed = "@100ms" if prev is None else "@0ms"
    return f"{recv} " + json.dumps({"stream": f"{sym}@depth{speed}", "data": data}, separators=(",", ":"))


def snapshot(recv: int, last_id: int, bids, asks, e: int | None = 0) -> str:
    d = {"lastUpdateId": last_id} | ({"E": T0 + e, "T": T0 + e} if e is not None else {})
    d |= {"bids": [list(x) for x in bids], "asks": [list(x) for x in asks]}
    return f"{recv} " + json.dumps(d, separators=(",", ":"))


def trade(recv: int, t: int, tid: int, p: str, q: str, maker: bool, sym="btcusdt") -> str:
    d = {"e": "trade", "E": T0 + t, "T": T0 + t, "s": sym.upper(), "t": tid, "p": p, "q": q, "X": "MARKET", "m": maker}
    return f"{recv} " + json.dumps({"stream": f"{sym}@trade", "data": d}, separators=(",", ":"))


def ticker(recv: int, u: int, b: str, bq: str, a: str, aq: str, sym="btcusdt") -> str:
    d = {"e": "bookTicker", "u": u, "s": sym.upper(), "b": b, "B": bq, "a": a, "A": aq, "T": T0, "E": T0}
    return f"{recv} " + json.dumps({"stream": f"{sym}@bookTicker", "data": d}, separators=(",", ":"))


def write(path: Path, lines: list[str]) -> Path:
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


def usdm_day(path: Path) -> Path:
    """USD-M BTCUSDT (tick 0.10, lot 0.001): a stale diff and a bridging diff before the snapshot line (buffered,
    as Binance's procedure keeps them), a trade from before the snapshot's time, then diffs, trades and tickers."""
    return write(
        path,
        [
            depth(1, 1, 90, 95, 89, bids=[("99.0", "5.000")]),  # u < lastUpdateId: stale, dropped
            depth(2, 2, 96, 102, 95, bids=[("100.0", "1.500")], asks=[("100.2", "0.000")]),  # bridges 100
            trade(3, 1, 7, "100.1", "0.250", False),  # before the snapshot's time T0+2: dropped
            snapshot(4, 100, [("100.0", "1.000"), ("99.9", "2.000")], [("100.1", "1.500"), ("100.2", "3.000")], e=2),
            trade(5, 3, 8, "100.1", "0.500", False),  # a buyer lifted the ask: side -1
            depth(6, 4, 103, 105, 102, bids=[("100.0", "0.000"), ("99.8", "4.000")], asks=[("100.0", "2.000")]),
            ticker(7, 105, "99.9", "2.000", "100.0", "2.000"),  # exact: a reference
            ticker(8, 104, "99.9", "2.000", "100.0", "2.000"),  # inside 103..105: not one
            trade(9, 5, 9, "99.9", "1.000", True),  # a seller hit the bid: side +1
            depth(10, 6, 106, 110, 105, bids=[("99.9", "1.000")]),
            ticker(11, 110, "99.9", "1.000", "100.0", "2.000"),
        ],
    )


def test_handmade_day_syncs_and_rebuilds(tmp_path):
    src = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    ((m, written),) = binance.ingest([src], tmp_path / "cache")
    assert written and m.key == "binance-usdm/BTCUSDT/2024-08-08" and m.continues is None
    assert m.repairs == {"depth_updates_before_snapshot": 1, "trades_before_snapshot": 1}
    day = layout.open_day(layout.day_dir(tmp_path / "cache", m))
    ev = np.asarray(day.events)
    rows = [(k, *x) for k, x in zip(ev["kind"].tolist(), levels_of(ev), strict=True)]
    assert rows == [
        (LEVEL, BID, 1000, 1000), (LEVEL, BID, 999, 2000), (LEVEL, ASK, 1001, 1500), (LEVEL, ASK, 1002, 3000),
        (LEVEL, ASK, 1002, 0), (LEVEL, BID, 1000, 1500),  # the buffered bridging diff: its removal first
        (TRADE, ASK, 1001, 500),
        (LEVEL, BID, 1000, 0), (LEVEL, BID, 998, 4000), (LEVEL, ASK, 1000, 2000),
        (TRADE, BID, 999, 1000),
        (LEVEL, BID, 999, 1000),
    ]  # fmt: skip
    assert ev["delta"].tolist() == [1000, 2000, 1500, 3000, -3000, 500, 0, -1500, 4000, 2000, 0, -1000]
    assert ev["ts"][0] == (T0 + 2) * 1_000_000 and ev["ts"][-1] == (T0 + 6) * 1_000_000
    np.testing.assert_array_equal(day.reference, [[9, 999, 2000, 1000, 2000], [11, 999, 1000, 1000, 2000]])
    assert day.book[9][:4].tolist() == [1000, 2000, 999, 2000]
    assert any("1 fall inside a depth update" in n for n in m.notes)
    assert m.order_lots == 500  # the lower median of 500 and 1000 lots
    assert binance.check(day).ok


def test_handmade_removals_come_first(tmp_path):
    """A bid moves up to the best ask's price in the diff that removes that ask: in the message's order (bids, then
    asks) a row would show bid == ask; removals first, no row is crossed."""
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000"), ("100.2", "2.000")]),
            depth(2, 1, 99, 101, 98, bids=[("100.1", "3.000")], asks=[("100.1", "0.000")]),
        ],
    )
    ((m, _),) = binance.ingest([src], tmp_path / "cache")
    book = np.asarray(layout.open_day(layout.day_dir(tmp_path / "cache", m)).book)
    both = (book[:, 0] > 0) & (book[:, 2] > 0)
    assert both.sum() == len(book) - 1 and (book[both, 0] > book[both, 2]).all()
    assert book[-1][:4].tolist() == [1002, 2000, 1001, 3000]


def test_handmade_spot_sync_rule(tmp_path):
    """Spot drops u <= lastUpdateId and needs U <= lastUpdateId + 1 <= u: a diff ending at the snapshot's id is
    stale (futures would apply it), and the chain is U == previous u + 1."""
    lines = [
        depth(1, 1, 95, 100, None, bids=[("50.00", "9.00000")]),  # u == lastUpdateId: already in the snapshot
        snapshot(2, 100, [("100.00", "1.00000")], [("100.01", "1.00000")], e=None),
        depth(3, 2, 101, 104, None, bids=[("100.00", "2.00000")]),
        depth(4, 3, 105, 105, None, asks=[("100.02", "1.00000")]),
    ]
    src = write(tmp_path / "spot_btcusdt_20240808.gz", lines)
    ((m, _),) = binance.ingest([src], tmp_path / "cache")
    assert m.repairs == {"depth_updates_before_snapshot": 1} and m.first_ts == (T0 + 2) * 1_000_000
    assert (m.tick_size, m.lot_size, m.maker_fee_bps) == (0.01, 0.00001, 10.0)
    bad = [*lines[:3], depth(4, 3, 106, 107, None, asks=[("100.02", "1.00000")])]
    with pytest.raises(DataError, match=r"spot_btcusdt_20240808\.gz:4: depth update U=106 u=107 .*u=104"):
        binance.ingest([write(tmp_path / "spot_btcusdt_20240808.gz", bad)], tmp_path / "cache2")


def test_handmade_next_day_continues(tmp_path):
    first = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    second = write(
        tmp_path / "usdm_btcusdt_20240809.gz",
        [
            trade(20, 400_000, 10, "100.0", "0.100", False),  # 2024-08-09 00:01:40
            depth(21, 400_001, 111, 111, 110, asks=[("100.3", "1.000")]),
        ],
    )
    res = binance.ingest([second, first], tmp_path / "cache")  # any order: the dates order them
    (m1, _), (m2, _) = res
    assert m2.key == "binance-usdm/BTCUSDT/2024-08-09" and m2.continues == m1.key
    d1 = layout.open_day(layout.day_dir(tmp_path / "cache", m1))
    d2 = layout.open_day(layout.day_dir(tmp_path / "cache", m2))
    end = replay_levels(np.asarray(d1.events), 10).levels_now()
    ev = np.asarray(d2.events)
    opening = ev[: len(end)]
    assert levels_of(opening) == end
    assert (ev["ts"][: len(end)] == (T0 + 400_000) * 1_000_000).all() and ev["kind"][len(end)] == TRADE
    assert binance.check(d2).ok


# --- venue times: depth at T (futures) or E (spot), a trade first on a tie -----------------------------------


def day_events(src: Path, out: Path) -> tuple[layout.Manifest, np.ndarray]:
    ((m, _),) = binance.ingest([src], out)
    day = layout.open_day(layout.day_dir(out, m))
    assert binance.check(day).ok
    return m, np.asarray(day.events)


def kinds_at(ev: np.ndarray) -> list[tuple[int, int, int]]:
    """Events as (kind, price, ms after T0)."""
    ms = (ev["ts"] // 1_000_000 - T0).tolist()
    return list(zip(ev["kind"].tolist(), ev["price"].tolist(), ms, strict=True))


def test_futures_depth_update_is_at_its_transaction_time(tmp_path):
    """A USD-M update that took the ask at T0+4 and was sent at E = T0+10: its levels are at T0+4, so the trade of
    T0+7 on the new ask follows it (at E it would come before the book it traded on)."""
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]),
            trade(2, 7, 2, "100.2", "0.500", False),  # received before the depth update that shows its book
            depth(3, 10, 99, 101, 98, asks=[("100.1", "0.000"), ("100.2", "1.000")], t=4),
        ],
    )
    m, ev = day_events(src, tmp_path / "cache")
    assert kinds_at(ev)[2:] == [(LEVEL, 1001, 4), (LEVEL, 1002, 4), (TRADE, 1002, 7)]
    assert m.ingest == binance.INGEST_VERSION
    assert any(n.startswith("Timestamps: a depth update's levels at its transaction time T") for n in m.notes)


def test_spot_depth_update_is_at_its_event_time(tmp_path):
    """Spot depth updates carry no T: at E = T0+10, after a trade of T0+7 (the day opens at the first update's E,
    the REST snapshot of spot having no time)."""
    src = write(
        tmp_path / "spot_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.00", "1.00000")], [("100.01", "1.00000")], e=None),
            depth(2, 2, 101, 101, None, bids=[("99.99", "1.00000")]),
            depth(3, 10, 102, 103, None, asks=[("100.01", "0.00000"), ("100.02", "1.00000")]),
            trade(4, 7, 1, "100.01", "1.00000", False),
        ],
    )
    m, ev = day_events(src, tmp_path / "cache")
    assert kinds_at(ev)[3:] == [(TRADE, 10001, 7), (LEVEL, 10001, 10), (LEVEL, 10002, 10)]
    assert any(n.startswith("Timestamps: a depth update's levels at its event time E (spot") for n in m.notes)


@pytest.mark.parametrize("market", ["usdm", "spot"])
@pytest.mark.parametrize("trade_line_first", [True, False])
def test_a_trade_comes_before_a_depth_update_of_its_ms(tmp_path, market, trade_line_first):
    """The tie rule: a trade and a depth update of one ms (futures: the update's T, its E 3 ms later; spot: its E)
    are the trade, then the update, whichever line came first."""
    spot = market == "spot"
    bid, ask, next_ask = ("100.00", "100.01", "100.02") if spot else ("100.0", "100.1", "100.2")
    qty = "1.00000" if spot else "1.000"
    if spot:
        update = depth(3, 5, 101, 102, None, asks=[(ask, "0"), (next_ask, qty)])
    else:
        update = depth(3, 8, 99, 101, 98, asks=[(ask, "0"), (next_ask, qty)], t=5)
    lines = [update, trade(3, 5, 1, ask, qty, False)]
    if trade_line_first:
        lines.reverse()
    opening = snapshot(1, 100, [(bid, qty)], [(ask, qty)], e=None if spot else 0)
    _, ev = day_events(write(tmp_path / f"{market}_btcusdt_20240808.gz", [opening, *lines]), tmp_path / "cache")
    tick = 10001 if spot else 1001
    assert kinds_at(ev)[2:] == [(TRADE, tick, 5), (LEVEL, tick, 5), (LEVEL, tick + 1, 5)]


def test_refuses_futures_depth_updates_with_and_without_t(tmp_path):
    no_t = json.loads(depth(3, 2, 102, 102, 101).split(" ", 1)[1])
    del no_t["data"]["T"]
    lines = [snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]), depth(2, 1, 99, 101, 98)]
    lines.append("3 " + json.dumps(no_t, separators=(",", ":")))
    src = write(tmp_path / "usdm_btcusdt_20240808.gz", lines)
    refused(tmp_path, [src], r":3: this depth update lacks a transaction time T, unlike the ones before it")


def test_reingest_rewrites_a_day_of_an_older_ingest(tmp_path):
    """A day written before ingest versions were kept (futures depth at E; its manifest has no 'ingest'): still
    readable, refused by check with the fix, and rewritten by ingesting the same files again."""
    src = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    ((m, _),) = binance.ingest([src], tmp_path / "cache")
    folder = layout.day_dir(tmp_path / "cache", m)
    new_events = np.load(folder / layout.EVENTS)
    old = json.loads((folder / layout.MANIFEST).read_text())
    del old["ingest"]
    (folder / layout.MANIFEST).write_text(json.dumps(old))
    events = new_events.copy()
    events["ts"][6:] += 1_000_000  # depth at E: a ms later (the stamps alone; check reads the order)
    np.save(folder / layout.EVENTS, events)
    day = layout.open_day(folder)
    assert day.manifest.ingest == "" and day.manifest.files == m.files
    with pytest.raises(DataError, match=r"ingest of no version .*this code's is binance/2 .*ingest its files again"):
        binance.check(day)
    ((m2, written),) = binance.ingest([src], tmp_path / "cache")
    assert written and m2 == m and layout.read_manifest(folder) == m
    np.testing.assert_array_equal(np.load(folder / layout.EVENTS), new_events)
    assert binance.check(layout.open_day(folder)).ok
    ((_, again),) = binance.ingest([src], tmp_path / "cache")
    assert not again


# --- refusals -------------------------------------------------------------------------------------------------


def refused(tmp_path: Path, paths: list[Path], match: str) -> DataError:
    out = tmp_path / "cache"
    with pytest.raises(DataError, match=match) as err:
        binance.ingest(paths, out)
    assert not out.exists() or not [p for p in out.rglob("*") if p.is_file()], "a refused ingest wrote something"
    return err.value


def test_refuses_an_update_id_gap(tmp_path):
    lines = usdm_day(tmp_path / "x.gz").read_bytes()
    text = gzip.decompress(lines).decode().splitlines()
    text[9] = depth(10, 6, 107, 110, 106, bids=[("99.9", "1.000")])  # pu 106, the previous u was 105
    src = write(tmp_path / "usdm_btcusdt_20240808.gz", text)
    refused(tmp_path, [src], r"usdm_btcusdt_20240808\.gz:10: depth update pu=106 u=110 does not follow .*u=105")


def test_refuses_a_snapshot_the_stream_does_not_reach(tmp_path):
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]), depth(2, 1, 103, 105, 102)],
    )
    refused(tmp_path, [src], r":2: the first depth update after the snapshot .*lastUpdateId=100.* U=103 u=105")


def test_refuses_a_continuation_without_its_previous_file(tmp_path):
    src = write(tmp_path / "usdm_btcusdt_20240809.gz", [depth(1, 400_000, 111, 111, 110)])
    refused(tmp_path, [src], r"usdm_btcusdt_20240809\.gz: no REST depth snapshot.*usdm_btcusdt_20240808\.gz")


@pytest.mark.parametrize(
    ("line", "match"),
    [
        (ticker(3, 1, "1", "1", "1", "1"), r":4: receive time 3 ns is before the previous line's 4 ns"),
        (depth(5, 1, 103, 105, 102), r":4: depth update T=1723161300001 ms is before .*T=1723161300002 ms"),
    ],
)
def test_refuses_time_going_backwards(tmp_path, line, match):
    lines = [
        snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]),
        depth(2, 1, 99, 101, 98),
        depth(4, 2, 102, 102, 101),
    ]
    lines.append(line)
    refused(tmp_path, [write(tmp_path / "usdm_btcusdt_20240808.gz", lines)], match)


def test_refuses_a_price_off_the_tick(tmp_path):
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]),
            depth(2, 1, 99, 101, 98, bids=[("100.05", "1")]),
        ],
    )
    refused(
        tmp_path, [src], r"usdm_btcusdt_20240808\.gz:2: price 100\.05 is not a positive multiple of the tick size 0\.1"
    )


def test_refuses_a_trade_size_off_the_lot(tmp_path):
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]),
            trade(2, 1, 1, "100.1", "0.0005", False),
            depth(3, 2, 99, 101, 98),
        ],
    )
    refused(tmp_path, [src], r":2: quantity 0\.0005 is not a multiple of the lot size 0\.001")


def test_refuses_a_truncated_gzip(tmp_path):
    whole = usdm_day(tmp_path / "x.gz").read_bytes()
    src = tmp_path / "usdm_btcusdt_20240808.gz"
    src.write_bytes(whole[: len(whole) * 2 // 3])
    refused(tmp_path, [src], r"usdm_btcusdt_20240808\.gz: not a whole gzip file")


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("1723161300 not json", r":2: not '<receive ns> <json>'"),
        ('x {"stream":"btcusdt@trade"}', r":2: not '<receive ns> <json>'"),
        ('2 {"stream":"btcusdt@trade","data":{"e":"trade","T":1}}', r":2: btcusdt@trade has t=None, expected int"),
        ('2 {"id":1,"result":null}', r":2: a JSON without 'stream' or 'lastUpdateId'"),
        ('2 {"stream":"ethusdt@trade","data":{}}', r":2: stream 'ethusdt@trade' is not of 'btcusdt'"),
        (snapshot(2, 100, [], []), r":2: a second REST depth snapshot \(the first is on line 1\)"),
    ],
)
def test_refuses_malformed_lines(tmp_path, line, match):
    lines = [snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]), line, depth(3, 1, 99, 101, 98)]
    refused(tmp_path, [write(tmp_path / "usdm_btcusdt_20240808.gz", lines)], match)


def test_refuses_a_crossed_book(tmp_path):
    src = write(
        tmp_path / "usdm_btcusdt_20240808.gz",
        [
            snapshot(1, 100, [("100.0", "1.000")], [("100.1", "1.000")]),
            depth(2, 1, 99, 101, 98, bids=[("100.2", "1.000")]),  # a bid above the ask the venue never removed
        ],
    )
    refused(tmp_path, [src], r":2: the book is crossed after depth update u=101: best bid 1002 >= best ask 1001")


def test_failure_midway_leaves_no_day(tmp_path):
    """A gap in the next day's file: neither day is written (a symbol's files are all read first), and no
    temporary folder is left behind."""
    first = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    second = write(
        tmp_path / "usdm_btcusdt_20240809.gz",
        [depth(20 + i, 400_000 + i, 111 + i, 111 + i, 110 + i) for i in range(50)]
        + [depth(99, 400_100, 200, 201, 199)],
    )
    refused(tmp_path, [first, second], r"usdm_btcusdt_20240809\.gz:51: depth update pu=199")


def test_ingest_twice_writes_nothing(tmp_path):
    src = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    ((m, written),) = binance.ingest([src], tmp_path / "cache")
    folder = layout.day_dir(tmp_path / "cache", m)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    ((m2, again),) = binance.ingest([src], tmp_path / "cache")
    assert written and not again and m2 == m
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    assert sorted(p.name for p in folder.parent.iterdir()) == [m.date]  # no temporary folder left


def test_slow_path_reads_a_line_as_the_fast_path_does(tmp_path):
    """Keys in another order (another recorder) miss the fast patterns; json.loads reads them to the same day."""
    fast = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    lines = gzip.decompress(fast.read_bytes()).decode().splitlines()
    reordered = []
    for line in lines:
        recv, text = line.split(" ", 1)
        msg = json.loads(text)
        if "data" in msg:
            msg = {"data": dict(reversed(list(msg["data"].items()))), "stream": msg["stream"]}
        reordered.append(f"{recv} {json.dumps(msg)}")
    (tmp_path / "slow").mkdir()
    slow = write(tmp_path / "slow" / "usdm_btcusdt_20240808.gz", reordered)
    ((a, _),) = binance.ingest([fast], tmp_path / "a")
    ((b, _),) = binance.ingest([slow], tmp_path / "b")
    da, db = layout.open_day(layout.day_dir(tmp_path / "a", a)), layout.open_day(layout.day_dir(tmp_path / "b", b))
    assert np.array_equal(da.events, db.events) and np.array_equal(da.book, db.book)
    assert np.array_equal(da.reference, db.reference)


def test_unknown_symbol_infers_tick_and_lot(tmp_path):
    src = write(
        tmp_path / "usdm_solusdt_20240808.gz",
        [
            snapshot(1, 100, [("150.10", "2.5"), ("150.05", "1.0")], [("150.20", "0.5")]),
            depth(2, 1, 99, 101, 98, bids=[("150.15", "1.5")], sym="solusdt"),
        ],
    )
    ((m, _),) = binance.ingest([src], tmp_path / "cache")
    assert (m.instrument, m.tick_size, m.lot_size) == ("SOLUSDT", 0.05, 0.5)
    assert any("gcd" in n for n in m.notes)


def test_claims(tmp_path):
    src = usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")
    assert binance.claims(src)
    assert not binance.claims(tmp_path / "usdm_btcusdt_20240809.gz")  # no such file
    other = tmp_path / "btcusdt_20240808.gz"
    other.write_bytes(src.read_bytes())
    assert not binance.claims(other)
    plain = tmp_path / "spot_btcusdt_20240808.gz"
    plain.write_text("not gzip")
    assert not binance.claims(plain)


def test_check_names_rows_that_differ(tmp_path):
    """check compares every book row with the replay and every reference with its row: a row changed where the
    top did not change, a row changed where it did, and a reference that disagrees are each named."""
    ((m, _),) = binance.ingest([usdm_day(tmp_path / "usdm_btcusdt_20240808.gz")], tmp_path / "cache")
    day = layout.open_day(layout.day_dir(tmp_path / "cache", m))
    assert binance.check(day).ok
    book = np.array(day.book)
    book[6, 1] += 1  # a trade's row: must repeat the row before it
    book[9, 0] -= 1  # the row after a diff that changed the top
    ref = np.array(day.reference)
    ref[1, 4] += 1
    rep = binance.check(dataclasses.replace(day, book=book, reference=ref))
    # rows 6 and 9, row 10 (a trade: it must repeat row 9), reference 0 (it reads row 9) and reference 1
    assert not rep.ok and rep.unexplained == 5 and rep.rows == 12 + 2
    assert [line.split(":")[0] for line in rep.first] == [
        "event 6 (trade side=-1 price=1001 size=500 delta=0)",
        "event 9 (level side=-1 price=1000 size=2000 delta=2000)",
        "event 10 (trade side=1 price=999 size=1000 delta=0)",
        "reference 0 at event 9",
        "reference 1 at event 11",
    ]
    assert "expected the replay's [1000, 2000, 999, 2000]" in rep.first[1]

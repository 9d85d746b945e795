"""Databento MBO ingest (lobsim_env.data.databento): DBN files written here with databento-dbn's own encoder
(Metadata.encode, bytes(MBOMsg); zstd through its Transcoder), from handwritten records and from a seeded random
order book whose own top of book, kept the way Databento's book is (a fill changes nothing, its cancel does), is
what book.npy must hold at the end of each event (the F_LAST record)."""

from __future__ import annotations

import datetime as dt
import io
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.data import databento, layout
from lobsim_env.data.layout import ADD, CANCEL, DELETE, EXECUTE, TRADE, DataError, open_day

T0 = 1_709_303_400_000_000_000  # 2024-03-01T14:30:00Z (09:30 in New York), ns
MIDNIGHT = 1_709_251_200_000_000_000  # 2024-03-01T00:00:00Z: 2024-02-29 19:00 in New York
CENT = 10_000_000  # $0.01 in DBN's 1e-9 units
F_LAST, F_SNAPSHOT, F_BAD_TS_RECV, F_TOB = 0x80, 0x20, 0x08, 0x40
LEVELS = 5


@pytest.fixture
def dbn():
    return pytest.importorskip("databento_dbn")


def _encode(recs: list[tuple], *, symbols: dict[int, str]) -> bytes:
    """DBN bytes: metadata mapping each raw symbol to its instrument id, then the records, each (action, side,
    price in cents, size, order_id, ts_event, flags[, ts_recv[, instrument_id]])."""
    import databento_dbn as d

    start = min(r[5] for r in recs)
    day = dt.date(2024, 3, 1)

    @dataclass
    class Interval:
        start_date: dt.date
        end_date: dt.date
        symbol: str

    @dataclass
    class Mapping:
        raw_symbol: str
        intervals: list

    maps = [Mapping(s, [Interval(day, day + dt.timedelta(days=1), str(i))]) for i, s in symbols.items()]
    meta = d.Metadata(
        dataset="XNAS.ITCH", start=start, stype_in=d.SType.RAW_SYMBOL, stype_out=d.SType.INSTRUMENT_ID,
        schema=d.Schema.MBO, symbols=list(symbols.values()), mappings=maps,
    )  # fmt: skip
    out = [meta.encode()]
    for r in recs:
        action, side, cents, size, oid, ts, flags = r[:7]
        recv = r[7] if len(r) > 7 and r[7] is not None else ts + 1000
        iid = r[8] if len(r) > 8 else next(iter(symbols))
        price = 2**63 - 1 if cents is None else cents * CENT
        msg = d.MBOMsg(
            publisher_id=2, instrument_id=iid, ts_event=ts, order_id=oid, price=price, size=size,
            action=d.Action.from_str(action), side=d.Side.from_str(side), ts_recv=recv, flags=flags,
        )  # fmt: skip
        out.append(bytes(msg))
    return b"".join(out)


def _write(path: Path, recs: list[tuple], *, symbols: dict[int, str] | None = None, zst: bool = False) -> Path:
    raw = _encode(recs, symbols=symbols or {38: "AAPL"})
    if zst:
        import databento_dbn as d

        buf = io.BytesIO()
        t = d.Transcoder(file=buf, encoding=d.Encoding.DBN, compression=d.Compression.ZSTD)
        t.write(raw)
        t.flush()
        raw = buf.getvalue()
    path.write_bytes(raw)
    return path


@dataclass
class Gen:
    """A seeded MBO day: an opening snapshot (R, then A records flagged F_SNAPSHOT), then events of one or more
    records (the last flagged F_LAST): adds, cancels, modifies, trades (T, F, C), N records and a mid-day clear."""

    seed: int = 0
    recs: list[tuple] = field(default_factory=list)
    checkpoints: list[tuple[int, list[int]]] = field(default_factory=list)
    """(events emitted so far, the venue's top of book) after each F_LAST record."""

    def __post_init__(self):
        self.rng = random.Random(self.seed)
        self.orders: dict[int, list] = {}  # oid -> [side 'B'/'A', cents, size]
        self.n_events = 0
        self.next_oid = 1000
        self.t = T0

    def top(self) -> list[int]:
        lv: dict[tuple[str, int], int] = {}
        for s, p, q in self.orders.values():
            lv[(s, p)] = lv.get((s, p), 0) + q
        r = [0] * (4 * LEVELS)
        asks = sorted(p for s, p in lv if s == "A")[:LEVELS]
        bids = sorted((p for s, p in lv if s == "B"), reverse=True)[:LEVELS]
        for i, p in enumerate(asks):
            r[4 * i : 4 * i + 2] = [p, lv[("A", p)]]
        for i, p in enumerate(bids):
            r[4 * i + 2 : 4 * i + 4] = [p, lv[("B", p)]]
        return r

    def rec(self, action, side, cents, size, oid, *, last=True, flags=0, events=1, ts=None, recv=None):
        t = self.t if ts is None else ts
        self.recs.append((action, side, cents, size, oid, t, flags | (F_LAST if last else 0), recv))
        self.n_events += events
        if last:
            self.checkpoints.append((self.n_events, self.top()))

    def best(self, side: str) -> int | None:
        ps = [p for s, p, _ in self.orders.values() if s == side]
        return (max(ps) if side == "B" else min(ps)) if ps else None

    def add(self, side: str, cents: int, size: int, *, last=True, flags=0, ts=None, recv=None) -> int:
        oid = self.next_oid
        self.next_oid += self.rng.randint(1, 3)
        self.orders[oid] = [side, cents, size]
        self.rec("A", side, cents, size, oid, last=last, flags=flags, ts=ts, recv=recv)
        return oid

    def snapshot(self, mid: int = 10_000, n: int = 30, at: int = MIDNIGHT) -> None:
        self.rec("R", "N", None, 0, 0, last=False, flags=F_SNAPSHOT | F_BAD_TS_RECV, events=len(self.orders),
                 ts=at - 7, recv=at)  # fmt: skip
        self.orders.clear()
        for k in range(n):
            side = "B" if k % 2 else "A"
            price = mid - 1 - self.rng.randint(0, 8) if side == "B" else mid + self.rng.randint(0, 8)
            self.add(side, price, self.rng.randint(1, 9) * 100, last=k == n - 1, flags=F_SNAPSHOT | F_BAD_TS_RECV,
                     ts=at - 10**12 + k, recv=at)  # fmt: skip

    def step(self) -> None:
        rng = self.rng
        self.t += rng.choice((1, 10, 1000, 50_000))
        u = rng.random()
        bid, ask = self.best("B"), self.best("A")
        if u < 0.35 or not self.orders or bid is None or ask is None:
            side = rng.choice("AB")
            if side == "B":
                price = (ask or 10_001) - 1 - rng.randint(0, 6)
            else:
                price = (bid or 9_999) + 1 + rng.randint(0, 6)
            self.add(side, price, rng.randint(1, 20) * 10)
        elif u < 0.6:
            oid = rng.choice(list(self.orders))
            s, p, q = self.orders[oid]
            cut = q if rng.random() < 0.6 else rng.randint(1, q - 1) if q > 1 else q
            self.orders[oid][2] -= cut
            if not self.orders[oid][2]:
                del self.orders[oid]
            self.rec("C", s, p, cut, oid)
        elif u < 0.75:
            oid = rng.choice(list(self.orders))
            s, p, q = self.orders[oid]
            kind = rng.choice(("price", "up", "down", "same"))
            if kind == "price":
                p2 = p + rng.choice((-1, 1))
                if (s == "B" and p2 >= ask) or (s == "A" and p2 <= bid):
                    p2 = p - 1 if s == "B" else p + 1
                self.orders[oid] = [s, p2, q]
                self.rec("M", s, p2, q, oid, events=2)
            elif kind == "up":
                self.orders[oid][2] = q + 10
                self.rec("M", s, p, q + 10, oid, events=2)
            elif kind == "down" and q > 1:
                self.orders[oid][2] = q - 1
                self.rec("M", s, p, q - 1, oid)
            else:
                self.rec("M", s, p, q, oid, events=0)
        elif u < 0.95:
            hit = rng.choice("AB")  # the resting side
            price = ask if hit == "A" else bid
            queue = [o for o, (s, p, _) in self.orders.items() if s == hit and p == price]
            oid = queue[0]
            q = self.orders[oid][2]
            fill = q if rng.random() < 0.5 else rng.randint(1, q)
            self.rec("T", "B" if hit == "A" else "A", price, fill, 0, last=False)
            self.rec("F", hit, price, fill, oid, last=False)
            self.orders[oid][2] -= fill
            if not self.orders[oid][2]:
                del self.orders[oid]
            self.rec("C", hit, price, fill, oid, events=0)  # Databento's cancel that goes with the fill: folded
        else:
            self.rec("N", "N", None, 0, 0, events=0)


def _day(seed: int, n: int, *, clear_at: int | None = None) -> Gen:
    g = Gen(seed=seed)
    g.snapshot()
    for k in range(n):
        if k == clear_at:
            g.t += 1000
            g.snapshot(mid=10_020, n=12, at=g.t)
        g.step()
    return g


def _only_day(out: Path) -> layout.Day:
    (m,) = layout.list_days(out)
    return open_day(layout.day_dir(out, m))


def _at_checkpoints(day: layout.Day, g: Gen) -> tuple[np.ndarray, np.ndarray]:
    idx = [k - 1 for k, _ in g.checkpoints if k]
    want = [row for k, row in g.checkpoints if k]
    return np.asarray(day.book)[idx], np.array(want)


def test_the_day_rebuilds_databentos_book_at_every_event(tmp_path, dbn):
    g = _day(0, 1500, clear_at=900)
    path = _write(tmp_path / "xnas-itch-20240301.mbo.dbn", g.recs)
    ((m, written),) = databento.ingest([path], tmp_path / "cache", levels=LEVELS)
    assert written
    assert (m.venue, m.instrument, m.date, m.source, m.depth) == ("xnas", "AAPL", "2024-03-01", "databento", "L3")
    assert (m.tick_size, m.lot_size) == (0.01, 1.0) and any("tick_size 0.01 inferred" in n for n in m.notes)
    assert m.repairs == {"book_clears": 2}  # the opening snapshot's R and the mid-day one
    day = _only_day(tmp_path / "cache")
    assert m.n_events == g.n_events == day.events.shape[0]
    got, want = _at_checkpoints(day, g)
    np.testing.assert_array_equal(got, want)
    ev = day.events
    assert ev["ts"][0] == MIDNIGHT and (np.diff(ev["ts"]) >= 0).all()  # snapshot records at their ts_recv
    adds = np.flatnonzero(ev["kind"] == ADD)
    np.testing.assert_array_equal(ev["first_seen"][adds], adds)
    assert (ev["first_seen"][ev["kind"] == TRADE] == -1).all() and (ev["delta"][ev["kind"] == TRADE] == 0).all()
    folded = sum(1 for r in g.recs if r[0] == "C") - int((ev["kind"] == CANCEL).sum() + (ev["kind"] == DELETE).sum())
    assert folded > 0
    rep = databento.check(day)
    assert rep.ok and rep.rows == rep.matched == m.n_events, rep


def test_each_action_becomes_the_documented_events(tmp_path, dbn):
    snap = F_SNAPSHOT | F_BAD_TS_RECV
    recs = [
        ("R", "N", None, 0, 0, MIDNIGHT - 9, snap, MIDNIGHT),
        ("A", "B", 10_000, 300, 1, MIDNIGHT - 10**14, snap, MIDNIGHT),  # rested for days: its ts_event is old
        ("A", "B", 10_000, 200, 2, MIDNIGHT - 10**13, snap | F_LAST, MIDNIGHT),
        ("A", "A", 10_005, 100, 3, T0, F_LAST),
        ("M", "B", 10_000, 100, 1, T0 + 1, F_LAST),  # smaller: keeps its place, CANCEL 200
        ("M", "B", 10_000, 500, 2, T0 + 2, F_LAST),  # larger: loses it, DELETE + ADD
        ("M", "B", 10_001, 100, 1, T0 + 3, F_LAST),  # new price: DELETE + ADD
        ("T", "B", 10_005, 60, 0, T0 + 4, 0),  # a buyer hit the asks
        ("F", "A", 10_005, 60, 3, T0 + 4, 0),
        ("C", "A", 10_005, 60, 3, T0 + 4, F_LAST),  # goes with the fill: folded
        ("C", "B", 10_000, 100, 2, T0 + 5, F_LAST),
        ("F", "A", 10_005, 40, 3, T0 + 6, 0),  # the rest of order 3
        ("C", "A", 10_005, 50, 3, T0 + 6, F_LAST),  # 40 folded; 10 more than rested: an error, tested below
        ("C", "A", 10_010, 10, 9, T0 + 7, F_LAST),  # order 9 rested before the file opened
        ("N", "N", None, 0, 0, T0 + 8, F_LAST),
        ("R", "N", None, 0, 0, T0 + 9, F_LAST),
    ]
    bad = _write(tmp_path / "bad.dbn", recs)
    with pytest.raises(DataError, match=r"bad.dbn \(instrument 38, publisher 2\), record 12: cancels order 3, which"):
        databento.ingest([bad], tmp_path / "c0", levels=LEVELS)
    recs[12] = ("C", "A", 10_005, 40, 3, T0 + 6, F_LAST)
    path = _write(tmp_path / "day.dbn", recs)
    ((m, _),) = databento.ingest([path], tmp_path / "cache", levels=LEVELS)
    ev = _only_day(tmp_path / "cache").events
    assert m.date == "2024-03-01"  # the first message that is not a snapshot record, in New York
    want = [  # kind, side, price (ticks of $0.01), size, delta, order_id, first_seen
        (ADD, 1, 10_000, 300, 300, 1, 0),
        (ADD, 1, 10_000, 200, 200, 2, 1),
        (ADD, -1, 10_005, 100, 100, 3, 2),
        (CANCEL, 1, 10_000, 200, -200, 1, 0),
        (DELETE, 1, 10_000, 200, -200, 2, 1),
        (ADD, 1, 10_000, 500, 500, 2, 5),
        (DELETE, 1, 10_000, 100, -100, 1, 0),
        (ADD, 1, 10_001, 100, 100, 1, 7),
        (TRADE, -1, 10_005, 60, 0, 0, -1),
        (EXECUTE, -1, 10_005, 60, -60, 3, 2),
        (CANCEL, 1, 10_000, 100, -100, 2, 5),
        (EXECUTE, -1, 10_005, 40, -40, 3, 2),
        (CANCEL, -1, 10_010, 10, 0, 9, -1),
        (DELETE, 1, 10_000, 400, -400, 2, 5),
        (DELETE, 1, 10_001, 100, -100, 1, 7),
    ]
    cols = ("kind", "side", "price", "size", "delta", "order_id", "first_seen")
    assert [tuple(int(e[c]) for c in cols) for e in ev] == want
    assert ev["ts"][:2].tolist() == [MIDNIGHT, MIDNIGHT] and ev["ts"][2] == T0
    assert m.repairs == {"book_clears": 2}
    notes = " | ".join(m.notes)
    assert "2 C/M records that took a fill's size off" in notes and "1 C/F records of orders the file never" in notes
    assert "1 N (none) records" in notes
    day = _only_day(tmp_path / "cache")
    assert (day.book[-1] == 0).all() and day.book[9, :2].tolist() == [10_005, 40]
    assert databento.check(day).ok


def test_zstd_file_gives_the_same_day_and_both_are_claimed(tmp_path, dbn):
    g = _day(1, 300)
    plain = _write(tmp_path / "a.dbn", g.recs)
    zst = _write(tmp_path / "b.dbn.zst", g.recs, zst=True)
    assert zst.read_bytes()[:4] == databento.ZSTD_MAGIC
    assert databento.claims(plain) and databento.claims(zst)
    databento.ingest([plain], tmp_path / "p", levels=LEVELS)
    databento.ingest([zst], tmp_path / "z", levels=LEVELS)
    a, b = _only_day(tmp_path / "p"), _only_day(tmp_path / "z")
    np.testing.assert_array_equal(a.events, b.events)
    np.testing.assert_array_equal(a.book, b.book)


def test_ingesting_twice_is_a_noop(tmp_path, dbn):
    path = _write(tmp_path / "a.dbn", _day(2, 200).recs)
    out = tmp_path / "cache"
    ((m1, w1),) = databento.ingest([path], out, levels=LEVELS)
    folder = layout.day_dir(out, m1)
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    ((m2, w2),) = databento.ingest([path], out, levels=LEVELS)
    assert (w1, w2) == (True, False) and m1 == m2
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    ((m3, w3),) = databento.ingest([path], out, levels=LEVELS, tick_size=0.005)
    assert w3 and m3.tick_size == 0.005 and _only_day(out).book[0, 0] % 2 == 0


def test_two_instruments_of_one_file_are_two_days(tmp_path, dbn):
    a, b = _day(3, 150), _day(4, 150)
    recs = sorted([(*r[:8], 38) for r in a.recs] + [(*r[:8], 39) for r in b.recs], key=lambda r: r[7] or r[5] + 1000)
    path = _write(tmp_path / "two.dbn", recs, symbols={38: "AAPL", 39: "MSFT"})
    res = databento.ingest([path], tmp_path / "cache", levels=LEVELS)
    assert sorted(m.instrument for m, _ in res) == ["AAPL", "MSFT"]
    for m, _ in res:
        day = open_day(layout.day_dir(tmp_path / "cache", m))
        got, want = _at_checkpoints(day, a if m.instrument == "AAPL" else b)
        np.testing.assert_array_equal(got, want)


def _base() -> list[tuple]:
    return [
        ("A", "B", 10_000, 300, 1, T0, F_LAST),
        ("A", "A", 10_002, 100, 2, T0 + 1, F_LAST),
        ("C", "B", 10_000, 100, 1, T0 + 2, F_LAST),
        ("T", "B", 10_002, 50, 0, T0 + 3, 0),
        ("F", "A", 10_002, 50, 2, T0 + 3, 0),
        ("C", "A", 10_002, 50, 2, T0 + 3, F_LAST),
    ]


@pytest.mark.parametrize(
    ("index", "record", "message"),
    [
        (2, ("C", "B", 10_000, 500, 1, T0 + 2, F_LAST), r"record 2: cancels 500 of order 1, which has 300 resting"),
        (4, ("F", "B", 10_002, 50, 2, T0 + 3, 0), r"record 4: F of order 2 at side bid, .* it rests at side ask"),
        (2, ("C", "B", 10_001, 100, 1, T0 + 2, F_LAST), r"record 2: C of order 1 at side bid, price 10001 ticks"),
        (4, ("F", "A", 10_002, 500, 2, T0 + 3, 0), r"record 4: fills 500 of order 2, which has 100 resting"),
        (1, ("A", "A", 10_002, 100, 1, T0 + 1, F_LAST), r"record 1: order 1 added again while it rests"),
        (1, ("A", "A", -5, 100, 2, T0 + 1, F_LAST), r"record 1: price -50000000 \(1e-9 units\) is not a price > 0"),
        (1, ("A", "A", 10_002, 0, 2, T0 + 1, F_LAST), r"record 1: size 0 on an A record"),
        (1, ("A", "N", 10_002, 100, 2, T0 + 1, F_LAST), r"record 1: side b'N' on an A record"),
        (1, ("A", "A", 10_002, 100, 2, T0 + 1, F_LAST | F_TOB), r"record 1: flagged F_TOB"),
        (2, ("C", "B", 10_000, 100, 1, T0 + 2, F_LAST, T0 - 5), r"record 2: ts_recv \d+ is before the previous"),
    ],
)
def test_bad_records_name_the_file_and_record_and_write_nothing(tmp_path, dbn, index, record, message):
    recs = _base()
    recs[index] = record
    path = _write(tmp_path / "bad.dbn", recs)
    out = tmp_path / "cache"
    with pytest.raises(DataError, match=message) as err:
        databento.ingest([path], out, levels=LEVELS)
    assert "bad.dbn" in str(err.value)
    assert not out.exists() or not any(out.rglob("*.npy"))


def test_bad_bytes_and_files(tmp_path, dbn):
    raw = bytearray(_encode(_base(), symbols={38: "AAPL"}))
    meta_len = len(raw) - 56 * len(_base())
    raw[meta_len + 56 * 3 + 38] = ord("X")  # record 3's action
    path = tmp_path / "x.dbn"
    path.write_bytes(bytes(raw))
    with pytest.raises(DataError, match=r"record 3: action b'X' is not one of A C M R T F N"):
        databento.ingest([path], tmp_path / "c", levels=LEVELS)
    path.write_bytes(_encode(_base(), symbols={38: "AAPL"})[:-20])
    with pytest.raises(DataError, match=r"x.dbn: truncated: 36 bytes after the last whole record"):
        databento.ingest([path], tmp_path / "c", levels=LEVELS)
    path.write_bytes(b"DBN\x03" + (2**31).to_bytes(4, "little") + bytes(100))
    with pytest.raises(DataError, match=r"x.dbn: (not a readable DBN file|truncated)"):
        databento.ingest([path], tmp_path / "c", levels=LEVELS)
    path.write_bytes(b"PK\x03\x04 a zip")
    with pytest.raises(DataError, match=r"x.dbn: not a DBN file \(it opens with b'PK"):
        databento.ingest([path], tmp_path / "c", levels=LEVELS)


def test_check_finds_an_order_cancelled_beyond_its_size_and_a_changed_row(tmp_path, dbn):
    path = _write(tmp_path / "a.dbn", _day(5, 300).recs)
    databento.ingest([path], tmp_path / "cache", levels=LEVELS)
    day = _only_day(tmp_path / "cache")
    ev = np.array(day.events)
    k = int(np.flatnonzero(ev["kind"] == CANCEL)[0])
    ev["size"][k] += 10_000
    ev["delta"][k] -= 10_000
    rep = databento.check(layout.Day(manifest=day.manifest, events=ev, book=day.book, path=day.path))
    assert not rep.ok and rep.first[0].startswith(f"event {k}: CANCEL of {int(ev['size'][k])} of order")
    ev = np.array(day.events)
    ev["price"][k] += 1
    rep = databento.check(layout.Day(manifest=day.manifest, events=ev, book=day.book, path=day.path))
    assert not rep.ok and "it rests at side" in rep.first[0]
    book = np.array(day.book)
    book[77, 3] += 1
    rep = databento.check(layout.Day(manifest=day.manifest, events=day.events, book=book, path=day.path))
    assert rep.unexplained == 1 and rep.first[0].startswith("event 77: book.npy")


def test_without_databento_dbn_claims_still_work_and_ingest_says_what_to_install(tmp_path, monkeypatch):
    path = tmp_path / "a.dbn"
    path.write_bytes(b"DBN\x03" + bytes(60))
    zst = tmp_path / "a.dbn.zst"
    zst.write_bytes(databento.ZSTD_MAGIC + bytes(60))
    other = tmp_path / "a.csv"
    other.write_text("DBN")
    monkeypatch.setitem(sys.modules, "databento_dbn", None)  # import databento_dbn raises ImportError
    assert databento.claims(path) and databento.claims(zst) and not databento.claims(other)
    with pytest.raises(DataError, match=r"needs the databento-dbn package: pip install databento-dbn"):
        databento.ingest([path], tmp_path / "cache")


def test_a_file_of_several_days_is_refused(tmp_path, dbn):
    recs = [*_base(), ("A", "B", 9_990, 100, 7, T0 + 3 * 86_400 * 10**9, F_LAST)]
    path = _write(tmp_path / "week.dbn", recs)
    with pytest.raises(DataError, match=r"week.dbn \(instrument 38\): messages from 2024-03-01T14:30.* 2024-03-04T14"):
        databento.ingest([path], tmp_path / "cache", levels=LEVELS)


def test_the_date_is_new_yorks_trading_day_though_the_file_opens_the_evening_before(tmp_path, dbn):
    evening = MIDNIGHT + 30 * 60 * 10**9  # 00:30 UTC: 19:30 in New York on 2024-02-29, the post-market before
    recs = [("A", "B", 9_990, 100, 7, evening, F_LAST), *_base()]
    ((m, _),) = databento.ingest([_write(tmp_path / "a.dbn", recs)], tmp_path / "cache", levels=LEVELS)
    assert m.date == "2024-03-01" and m.first_ts == evening

"""The compiled fast path (lobsim_env/lobster/_lobster_fast.c) against the numpy path it stands in for.

Both must give bit-identical arrays and the very same LobsterFormatError messages on every input: the
compiled parser only ever accepts plain integer text (anything else goes to the numpy parser), and where it
finds a broken rule the numpy validator names it. Zip members are inflated by libdeflate where the module
finds it, else by zlib. tests/test_lobster.py runs each of its cases on both paths; this file compares them on
all six sample files (load with either inflater, and full replay), on a sample given a seventh column and
crosses, on corrupt members, and on random valid and broken files of six or seven columns (hypothesis).
"""

from __future__ import annotations

import dataclasses
import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lobsim_env.lobster import files, reconstruct
from lobsim_env.lobster.files import (
    DUMMY_ASK_PRICE,
    DUMMY_BID_PRICE,
    MAX_SIZE,
    LobsterDay,
    LobsterFormatError,
    load_day,
)
from tests.test_lobster import (
    BOOK,
    DATA,
    GOOG_1,
    MESSAGES,
    STEM,
    needs_data,
    sample_members,
    seventh_column_tokens,
    with_seventh_column,
    write_pair_zip,
)
from tests.test_lobster_reconstruct import EXPECTED, random_day, small_day, with_crosses

pytestmark = pytest.mark.skipif(
    files._C is None, reason="the compiled parser is not built (pip install -e . without a C compiler)"
)
DAY_FIELDS = [f.name for f in dataclasses.fields(LobsterDay) if f.name != "source"]


def load_both(path: Path, **kwargs) -> tuple[LobsterDay | str, LobsterDay | str]:
    """load_day on the compiled and the numpy path: each a LobsterDay or its LobsterFormatError message."""
    out = []
    for compiled in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            if not compiled:
                mp.setattr(files, "_C", None)
            try:
                out.append(load_day(path, **kwargs))
            except LobsterFormatError as e:
                out.append(str(e))
    return out[0], out[1]


def assert_same(a: LobsterDay | str, b: LobsterDay | str) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, str):
        assert a == b
        return
    for name in DAY_FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), name
        else:
            assert x == y, name


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def sample_pair(request: pytest.FixtureRequest) -> tuple[LobsterDay, LobsterDay]:
    path = DATA / f"LOBSTER_SampleFile_{request.param}.zip"
    if not path.exists():
        pytest.skip(f"LOBSTER sample file {path} not found")
    return load_both(path)


@needs_data
def test_sample_files_load_identically(
    sample_pair: tuple[LobsterDay, LobsterDay], monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled, numpy_day = sample_pair
    assert_same(compiled, numpy_day)
    assert compiled.book.flags.c_contiguous  # the compiled parser writes rows in place
    monkeypatch.setattr(files, "_fast_inflate", lambda: False)  # zlib
    assert_same(load_day(compiled.source), numpy_day)


@needs_data
def test_sample_files_replay_identically(sample_pair: tuple[LobsterDay, LobsterDay]) -> None:
    day = sample_pair[0]
    fast, ref = reconstruct._replay_compiled(day), reconstruct._replay_numpy(day)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f
        assert getattr(fast, f).dtype == getattr(ref, f).dtype, f


@needs_data
def test_replay_identical_on_a_corrupted_book_and_fewer_levels(sample_pair: tuple[LobsterDay, LobsterDay]) -> None:
    day = sample_pair[0]
    book = day.book.copy()
    book[1000:1010, 1] += 1  # sizes no message explains: both rules replay from the file's row k-1
    book[2000, 0] -= 100
    days = [dataclasses.replace(day, book=book)]
    if day.levels > 1:
        days.append(dataclasses.replace(day, levels=1, book=np.ascontiguousarray(day.book[:, :4])))
    for d in days:
        fast, ref = reconstruct._replay_compiled(d), reconstruct._replay_numpy(d)
        for f in ("book", "undetermined", "effect", "level"):
            assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("seed", range(8))
def test_random_days_replay_identically(seed: int, levels: int) -> None:
    day = random_day(seed, levels)
    fast, ref = reconstruct._replay_compiled(day), reconstruct._replay_numpy(day)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


@needs_data
def test_seven_columns_and_crosses_load_and_replay_identically(tmp_path: Path) -> None:
    msg, msg_text, ob, ob_text = sample_members(GOOG_1)
    msg_text, ob_text, crosses = with_crosses(msg_text, ob_text, [1, 100, 20000, 49482])
    msg_text = with_seventh_column(msg_text, seventh_column_tokens(msg_text.count(b"\n")))
    path = write_pair_zip(tmp_path / GOOG_1.name, msg, msg_text, ob, ob_text)
    compiled, numpy_day = load_both(path)
    assert_same(compiled, numpy_day)
    assert compiled.extra is not None and (compiled.event_type[crosses] == 6).all()
    fast, ref = reconstruct._replay_compiled(compiled), reconstruct._replay_numpy(compiled)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


def test_inconsistent_and_halted_messages_replay_identically() -> None:
    b = [101, 15, 100, 9, 102, 4, 98, 6]
    msgs = [(5, 1, 100, 1), (4, 20, 100, 1), (2, 1, 99, 1), (7, 0, -1, -1), (1, 3, 110, -1), (3, 9, 100, 1)]
    msgs += [(6, 300, 100, 0), (6, 0, 0, -1)]  # crosses, one without a side
    day = small_day(msgs, [b] * len(msgs))
    fast, ref = reconstruct._replay_compiled(day), reconstruct._replay_numpy(day)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f), getattr(ref, f)), f


def write_zip(folder: Path, messages: str | bytes, book: str | bytes, *, levels: int = 2) -> Path:
    path = folder / f"LOBSTER_SampleFile_TEST_2012-06-21_{levels}.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{STEM}_message_{levels}.csv", messages)
        zf.writestr(f"{STEM}_orderbook_{levels}.csv", book)
    return path


def test_corrupt_member_is_reported_as_before(tmp_path: Path) -> None:
    # libdeflate's output must match the zip's size and CRC-32, else zipfile reads the member and names it.
    path = write_zip(tmp_path, "\n".join(MESSAGES) + "\n", "\n".join(BOOK * 50) + "\n")
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(f"{STEM}_orderbook_2.csv")
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + info.compress_size // 2] ^= 0x55
    path.write_bytes(bytes(raw))
    errors = []
    for fast in (True, False):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(files, "_fast_inflate", lambda fast=fast: fast)
            with pytest.raises(LobsterFormatError, match=r"member .*_orderbook_2.csv' is damaged") as info:
                load_day(path)  # issue 14: a LobsterFormatError (exit 2 in the CLI), no longer BadZipFile
            errors.append((type(info.value), str(info.value)))
    assert errors[0] == errors[1]


@pytest.mark.skipif(files._C is None or not files._C.fast_inflate(), reason="libdeflate is not on this system")
def test_libdeflate_inflate_checks_size_and_crc() -> None:
    text = b"5801000,50,5800000,100\n" * 1000
    stream = zlib.compress(text)[2:-4]  # the raw DEFLATE stream, as in a zip
    crc = zlib.crc32(text)
    out = np.empty(len(text), np.uint8)
    assert files._C.inflate(stream, out, crc) and out.tobytes() == text
    assert not files._C.inflate(stream, out, crc ^ 1)
    assert not files._C.inflate(stream, out[:-1], crc)
    assert not files._C.inflate(stream, np.empty(len(text) + 1, np.uint8), crc)
    assert not files._C.inflate(stream[:-5], out, crc)


def test_compiled_functions_check_their_buffers() -> None:
    out = np.empty((2, 4), np.int64)
    with pytest.raises(ValueError, match="parse_book"):
        files._C.parse_book(b"1,2,3,4\n", np.empty((2, 3), np.int64), 1)
    assert files._C.parse_book(b"1,2,3,4\n", out, 1) == (files._INVALID, 1)  # ask price 1: off the grid
    assert files._C.parse_book(b"1,2,3,4\n" * 3, out, 1)[0] == files._FALLBACK  # more lines than rows
    assert files._C.parse_book(b"1,2,3\n", out, 1)[0] == files._FALLBACK
    with pytest.raises(ValueError, match="out"):
        files._C.parse_messages(b"1.5,1,1,1,100,1\n", 1, np.empty(5, np.int64))
    cols = np.empty(6, np.int64)
    assert files._C.parse_messages(b"1.5,1,1,1,100,1\n", 1, cols) == files._VALID
    assert cols.tolist() == [1_500_000_000, 1, 1, 1, 100, 1]
    assert files._C.parse_messages(b"1.5,1,1,1,100,1", 1, cols) == files._FALLBACK  # no final newline
    # A seventh column: the compiled parser does not take it (files._split_extra gives it the first six).
    assert files._C.parse_messages(b"1.5,1,1,1,100,1,7\n", 1, cols) == files._FALLBACK
    assert files._C.parse_messages(b"1.5,1,1,1,100,1,\n", 1, cols) == files._FALLBACK
    assert files._C.parse_messages(np.frombuffer(b"1.5,1,1,1,100,1\n1.5,", np.uint8), 1, cols) == files._FALLBACK
    assert files._C.lines(b"a\nb\n\n") == 3 and files._C.lines(np.zeros(5, np.uint8)) == 0


# ------------------------------------------------------------------------------------- random files (fuzz)

# Values at and around every boundary of the rules, and of the parsers (digit counts 1-20, signs, zeros).
EDGE_VALUES = [
    0,
    1,
    -1,
    50,
    99,
    100,
    101,
    5800000,
    5800050,
    -5800000,
    DUMMY_ASK_PRICE,
    DUMMY_BID_PRICE,
    DUMMY_ASK_PRICE - 100,
    DUMMY_ASK_PRICE + 1,
    DUMMY_BID_PRICE + 100,
    MAX_SIZE - 1,
    MAX_SIZE,
    12345678,
    123456789,
    10**17,
    10**18 - 1,
    10**18,
    2**63 - 1,
    -(2**63),
    10**19,
    -(10**19),
]
TOKENS = ["", " 5", "5 ", "+5", "0007", "-0", "5.0", "x", "--5", "5-", "1e3", "\t1"]
# Values of a seventh column: kept as text when printable ASCII without spaces, up to 32 bytes (after stripping).
EXTRA_TOKENS = ["", "0", "NSDQ", "-12", "1.5", "x" * 32, "x" * 33, " GSCO", "GSCO\t", "N SDQ", "\u00e9", "\x00", "a;b"]
MUTATION_BYTES = b",\n-+ .0\r\tx"


@st.composite
def book_text(draw: st.DrawFn, levels: int, rows: int) -> bytes:
    """Orderbook lines: a valid book per row, then maybe one value at a boundary and one byte mutated."""
    lines = []
    for _ in range(rows):
        best_bid = 5_800_000 - 100 * draw(st.integers(0, 5))
        ask_steps = np.cumsum(draw(st.lists(st.integers(1, 3), min_size=levels, max_size=levels)))
        bid_steps = np.cumsum(draw(st.lists(st.integers(1, 3), min_size=levels, max_size=levels)))
        na, nb = draw(st.integers(0, levels)), draw(st.integers(0, levels))
        row = []
        for i in range(levels):
            row += [best_bid + 100 * int(ask_steps[i]), draw(st.integers(1, 999))] if i < na else [DUMMY_ASK_PRICE, 0]
            bid = best_bid - 100 * int(bid_steps[i] - bid_steps[0])
            row += [bid, draw(st.integers(1, 999))] if i < nb else [DUMMY_BID_PRICE, 0]
        lines.append([str(v) for v in row])
    if draw(st.booleans()):
        r, c = draw(st.integers(0, rows - 1)), draw(st.integers(0, 4 * levels - 1))
        lines[r][c] = draw(st.sampled_from([str(v) for v in EDGE_VALUES] + TOKENS))
    text = bytearray("".join(",".join(line) + "\n" for line in lines).encode())
    if draw(st.booleans()):
        i = draw(st.integers(0, len(text) - 1))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from(MUTATION_BYTES))
        if op == "replace":
            text[i] = byte
        elif op == "insert":
            text.insert(i, byte)
        else:
            del text[i]
    return bytes(text)


@st.composite
def message_text(draw: st.DrawFn, rows: int) -> bytes:
    """Valid message lines (times of 1-18 decimals; submissions and crosses; six columns or seven), then maybe
    one field replaced, one row's seventh column left out, and one byte mutated."""
    lines, seconds = [], 34200
    seven = draw(st.booleans())
    for k in range(rows):
        seconds += draw(st.integers(0, 1))
        frac = "".join(draw(st.lists(st.sampled_from("0123456789"), min_size=1, max_size=18)))
        size = str(draw(st.integers(1, 10**6)))
        if draw(st.integers(0, 4)) == 0:  # a cross: pseudo order id, any side
            line = [f"{seconds}.{frac}", "6", str(-1 - k % 4), size, "5800050", draw(st.sampled_from("10"))]
        else:
            line = [f"{seconds}.{frac}", "1", str(k), size, "5800000", "1"]
        lines.append(line + ([draw(st.sampled_from(EXTRA_TOKENS[:5]))] if seven else []))
    if draw(st.booleans()):
        r, c = draw(st.integers(0, rows - 1)), draw(st.integers(0, 5 + seven))
        tokens = [str(v) for v in EDGE_VALUES] + TOKENS
        if c == 0:
            tokens += ["34200", "34200.", ".5", "1234567.1", "34200.1234567890123456789", "34200.0999999996"]
        if c == 6:
            tokens = EXTRA_TOKENS
        lines[r][c] = draw(st.sampled_from(tokens))
    if seven and draw(st.integers(0, 4)) == 0:
        del lines[draw(st.integers(0, rows - 1))][6]  # six columns among seven
    text = bytearray("".join(",".join(line) + "\n" for line in lines).encode())
    if draw(st.booleans()):
        text[draw(st.integers(0, len(text) - 1))] = draw(st.sampled_from(MUTATION_BYTES))
    return bytes(text)


def write_texts(folder: Path, messages: bytes, book: bytes, levels: int) -> list[Path]:
    """The two files beside each other, and in a zip (whose members libdeflate inflates where it is found)."""
    msg = folder / f"{STEM}_message_{levels}.csv"
    msg.write_bytes(messages)
    (folder / f"{STEM}_orderbook_{levels}.csv").write_bytes(book)
    return [msg, write_zip(folder, messages, book, levels=levels)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), levels=st.integers(1, 3), rows=st.integers(1, 12))
def test_random_orderbook_files_agree(tmp_path: Path, data: st.DataObject, levels: int, rows: int) -> None:
    messages = "".join(f"34200.{k:09d},1,{k},1,5800000,1\n" for k in range(rows)).encode()
    for path in write_texts(tmp_path, messages, data.draw(book_text(levels, rows)), levels):
        assert_same(*load_both(path))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), rows=st.integers(1, 12))
def test_random_message_files_agree(tmp_path: Path, data: st.DataObject, rows: int) -> None:
    book = b"5801000,50,5800000,100\n" * rows
    for path in write_texts(tmp_path, data.draw(message_text(rows)), book, 1):
        assert_same(*load_both(path))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), levels=st.integers(1, 3), rows=st.integers(1, 12))
def test_compiled_validation_is_exactly_the_numpy_rules(data: st.DataObject, levels: int, rows: int) -> None:
    # Where the text parses, the compiled verdict (valid / some rule broken) must be _validate_book's.
    text = data.draw(book_text(levels, rows))
    out = np.empty((rows, 4 * levels), np.int64)
    status, n = files._C.parse_book(text, out, levels)
    if status == files._FALLBACK or n != rows:
        return
    try:
        files._validate_book("x", out, levels)
        valid = True
    except LobsterFormatError:
        valid = False
    assert valid == (status == files._VALID)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), rows=st.integers(1, 12))
def test_the_seventh_column_split_is_the_line_parser(data: st.DataObject, rows: int) -> None:
    # Both paths take a seventh column off with files._split_extra; where it takes a text, its result must be what
    # the line-by-line parser (the one it stands in for) makes of the whole text: the same arrays or error.
    text = files._normalise(data.draw(message_text(rows)))
    split = files._split_extra(text) if text else None
    if split is None:
        return
    six, extra = split

    def slow(t: bytes) -> tuple[list, ...] | str:
        try:
            time_ns, table, kept = files._slow_messages(t, "x")
        except LobsterFormatError as e:
            return str(e)
        return time_ns.tolist(), table.tolist(), None if kept is None else (kept.dtype, kept.tolist())

    whole, first_six = slow(text), slow(six)
    if isinstance(whole, str):
        assert whole == first_six
    else:
        assert first_six[2] is None and whole == (*first_six[:2], (extra.dtype, extra.tolist()))

"""LOBSTER loading: exact parsing of the sample files, and one named error per kind of malformed input, each
on the compiled parser and on the numpy path (the `parser` fixture). The newer format (a seventh message column,
cross trades of type 6) is tested on a sample file given a seventh column here."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.lobster import files, samples
from lobsim_env.lobster.files import DUMMY_ASK_PRICE, DUMMY_BID_PRICE, LobsterFormatError, load_day

DATA = samples.data_dir()
GOOG_1 = samples.sample_zip("GOOG", 1)
AMZN_5 = samples.sample_zip("AMZN", 5)
needs_data = pytest.mark.skipif(not GOOG_1.exists(), reason=f"LOBSTER sample files not found in {DATA}")

STEM = "TEST_2012-06-21_34200000_57600000"
# A consistent two-level day: the book after each message, in LOBSTER's layout.
MESSAGES = [
    "34200.015105074,1,11,100,5800000,1",
    "34200.1,1,12,50,5801000,-1",
    "34200.100000001,5,0,7,5800500,1",
    "34201,3,11,100,5800000,1",
]
BOOK = [
    "5802300,100,5800000,100,5803000,10,5799000,20",
    "5801000,50,5800000,100,5802300,100,5799000,20",
    "5801000,50,5800000,100,5802300,100,5799000,20",
    "5801000,50,5799000,20,5802300,100,5798000,30",
]


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both paths: the compiled parser, and the numpy one it falls back to."""
    if request.param == "compiled" and files._C is None:
        pytest.skip("the compiled parser is not built (pip install -e . without a C compiler)")
    if request.param == "numpy":
        monkeypatch.setattr(files, "_C", None)
    return request.param


def write_day(folder: Path, messages: list[str], book: list[str] | None, *, levels: int = 2) -> Path:
    msg = folder / f"{STEM}_message_{levels}.csv"
    msg.write_text("".join(line + "\n" for line in messages))
    if book is not None:
        (folder / f"{STEM}_orderbook_{levels}.csv").write_text("\n".join(book) + "\n")
    return msg


def replaced(lines: list[str], row: int, line: str) -> list[str]:
    out = list(lines)
    out[row - 1] = line
    return out


def sample_members(path: Path) -> tuple[str, bytes, str, bytes]:
    """A LOBSTER zip's message member (name, text) and orderbook member (name, text)."""
    with zipfile.ZipFile(path) as zf:
        msg, ob = (next(n for n in zf.namelist() if f"_{kind}_" in n) for kind in ("message", "orderbook"))
        return msg, zf.read(msg), ob, zf.read(ob)


def write_pair_zip(path: Path, msg: str, msg_text: bytes, ob: str, ob_text: bytes) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(msg, msg_text)
        zf.writestr(ob, ob_text)
    return path


def seventh_column_tokens(n: int) -> list[bytes]:
    """Values of several kinds and widths for a seventh column: integers of 1 to 9 digits, an MPID-like token,
    a negative number, and an empty field."""
    out = []
    for k in range(n):
        if k % 11 == 0:
            out.append(b"")
        elif k % 7 == 0:
            out.append(b"NSDQ")
        elif k % 13 == 0:
            out.append(b"-%d" % k)
        else:
            out.append(b"%d" % (k * 7919 % 10 ** (1 + k % 9)))
    return out


def with_seventh_column(text: bytes, tokens: list[bytes]) -> bytes:
    lines = text.split(b"\n")[:-1]
    assert len(lines) == len(tokens)
    return b"".join(line + b"," + token + b"\n" for line, token in zip(lines, tokens, strict=True))


# --------------------------------------------------------------------------------------------- sample files


@needs_data
def test_sample_zip_parses_exactly() -> None:
    day = load_day(GOOG_1)
    assert (day.ticker, day.date, day.levels, day.source) == ("GOOG", "2012-06-21", 1, GOOG_1)
    assert day.n_messages == 49482 and day.book.shape == (49482, 4)
    assert day.time_ns.dtype == np.int64
    assert day.event_type.dtype == np.int8 and day.direction.dtype == np.int8
    # First lines of the files: 34200.015105074,4,15818974,4,5794000,1 | 5802300,100,5794000,496
    assert day.time_ns[0] == 34_200_015_105_074
    assert day.time_ns[1] == 34_200_059_901_970  # "34200.05990197": 8 decimals, scaled not shifted
    assert (day.event_type[0], day.order_id[0], day.size[0], day.price[0], day.direction[0]) == (
        4,
        15818974,
        4,
        5794000,
        1,
    )
    assert day.book[0].tolist() == [5802300, 100, 5794000, 496]
    assert set(np.unique(day.event_type).tolist()) == {1, 2, 3, 4, 5}
    assert (np.diff(day.time_ns) >= 0).all()


@needs_data
def test_float_printed_timestamp_rounds_to_the_nanosecond() -> None:
    # Row 67823 of the AMZN level-5 message file reads 43002.632812672004 (12 decimals).
    day = load_day(AMZN_5)
    assert day.time_ns[67822] == 43_002_632_812_672
    assert day.book.shape == (155935, 20)


@needs_data
def test_fewer_levels_keep_the_top_of_the_book() -> None:
    full, top2 = load_day(AMZN_5), load_day(AMZN_5, levels=2)
    assert top2.levels == 2 and np.array_equal(top2.book, full.book[:, :8])
    assert np.array_equal(top2.price, full.price)


# ------------------------------------------------------------------------------------------ our small files


def test_message_csv_finds_its_orderbook_beside_it(tmp_path: Path) -> None:
    day = load_day(write_day(tmp_path, MESSAGES, BOOK))
    assert (day.ticker, day.levels, day.n_messages) == ("TEST", 2, 4)
    assert day.time_ns.tolist() == [34200_015105074, 34200_100000000, 34200_100000001, 34201_000000000]
    assert day.book[3].tolist() == [5801000, 50, 5799000, 20, 5802300, 100, 5798000, 30]


def test_message_csv_without_orderbook_has_no_book(tmp_path: Path) -> None:
    day = load_day(write_day(tmp_path, MESSAGES, None))
    assert day.book is None and day.n_messages == 4


def test_zip_is_read_without_extracting(tmp_path: Path) -> None:
    z = tmp_path / "LOBSTER_SampleFile_TEST_2012-06-21_2.zip"
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{STEM}_message_2.csv", "\r\n".join(MESSAGES))  # CRLF, no final newline
        zf.writestr(f"{STEM}_orderbook_2.csv", "\r\n".join(BOOK))
    day = load_day(z)
    assert day.n_messages == 4 and day.book.shape == (4, 8)
    assert [p.name for p in tmp_path.iterdir()] == [z.name]


def test_dummy_levels_are_accepted(tmp_path: Path) -> None:
    book = replaced(BOOK, 1, f"5802300,100,5800000,100,{DUMMY_ASK_PRICE},0,{DUMMY_BID_PRICE},0")
    assert load_day(write_day(tmp_path, MESSAGES, book)).book[0, 4] == DUMMY_ASK_PRICE


def test_time_without_decimals_and_sub_nanosecond_digits(tmp_path: Path) -> None:
    msgs = replaced(MESSAGES, 2, "34200.0999999996,1,12,50,5801000,-1")  # the slow path handles both rows
    day = load_day(write_day(tmp_path, msgs, BOOK))
    assert day.time_ns[1] == 34_200_100_000_000 and day.time_ns[3] == 34_201_000_000_000


@pytest.mark.parametrize("time", ["34200.1 ", " 34200.1"])
def test_padded_time_is_parsed_exactly(tmp_path: Path, time: str) -> None:
    msgs = replaced(MESSAGES, 2, f"{time},1,12,50,5801000,-1")
    assert load_day(write_day(tmp_path, msgs, BOOK)).time_ns[1] == 34_200_100_000_000


@pytest.mark.parametrize("time", ["34200. 1", "34200.+1", "34200.-1"])
def test_signs_or_spaces_inside_time_are_errors(tmp_path: Path, time: str) -> None:
    msgs = replaced(MESSAGES, 2, f"{time},1,12,50,5801000,-1")
    with pytest.raises(LobsterFormatError, match=r"row 2, column 1: value"):
        load_day(write_day(tmp_path, msgs, BOOK))


def test_halt_messages_are_valid(tmp_path: Path) -> None:
    msgs = replaced(MESSAGES, 3, "34200.2,7,0,0,-1,-1")
    assert load_day(write_day(tmp_path, msgs, BOOK)).event_type[2] == 7


@pytest.mark.parametrize(
    "line",
    [
        "34200.1,6,-1,12000,5800500,1",  # opening cross (pseudo id -1) at a half-cent price
        "34200.1,6,-2,0,0,-1",  # a cross that matched nothing
        "34200.1,6,-3,700,5800000,0",  # no side
    ],
)
def test_cross_messages_are_valid(tmp_path: Path, line: str) -> None:
    # Row 3 of BOOK repeats row 2, as LOBSTER writes it after a message that leaves the book as it was.
    day = load_day(write_day(tmp_path, replaced(MESSAGES, 3, line), BOOK))
    fields = [int(v) for v in line.split(",")[1:]]
    assert [int(a[2]) for a in (day.event_type, day.order_id, day.size, day.price, day.direction)] == fields
    assert day.extra is None


# ------------------------------------------------------------------------------------- seven-column files


@needs_data
def test_seven_column_sample_loads_like_the_six_column_one(tmp_path: Path) -> None:
    msg, msg_text, ob, ob_text = sample_members(GOOG_1)
    tokens = seventh_column_tokens(msg_text.count(b"\n"))
    six = load_day(GOOG_1)
    seven = load_day(write_pair_zip(tmp_path / GOOG_1.name, msg, with_seventh_column(msg_text, tokens), ob, ob_text))
    for name in ("time_ns", "event_type", "order_id", "size", "price", "direction", "book"):
        a, b = getattr(six, name), getattr(seven, name)
        assert a.dtype == b.dtype and np.array_equal(a, b), name
    assert (seven.ticker, seven.date, seven.levels) == (six.ticker, six.date, six.levels)
    assert seven.extra.dtype == np.dtype("S9") and seven.extra.tolist() == tokens
    # The same, as CSV files with CRLF line ends (normalised before the seventh column is split off).
    crlf = with_seventh_column(msg_text, tokens).replace(b"\n", b"\r\n")
    (tmp_path / msg).write_bytes(crlf)
    (tmp_path / ob).write_bytes(ob_text)
    again = load_day(tmp_path / msg)
    assert again.extra.tolist() == tokens and np.array_equal(again.time_ns, six.time_ns)


def test_an_empty_seventh_column_is_kept_empty(tmp_path: Path) -> None:
    day = load_day(write_day(tmp_path, [line + "," for line in MESSAGES], BOOK))  # a trailing comma on every line
    assert day.extra.dtype == np.dtype("S1") and day.extra.tolist() == [b""] * 4
    assert day.time_ns.tolist() == [34200_015105074, 34200_100000000, 34200_100000001, 34201_000000000]


def test_seventh_column_values_are_stripped(tmp_path: Path) -> None:
    msgs = [line + ",NSDQ" for line in MESSAGES]
    msgs[1] = msgs[1].replace("NSDQ", " GSCO\t")  # whitespace around a value: the line-by-line parser strips it
    day = load_day(write_day(tmp_path, msgs, BOOK))
    assert day.extra.tolist() == [b"NSDQ", b"GSCO", b"NSDQ", b"NSDQ"]


@pytest.mark.parametrize(
    ("token", "error"),
    [
        ("NS DQ", r"row 2, column 7 \(extra\): value 'NS DQ'; expected at most 32 printable"),
        ("x" * 33, r"row 2, column 7 \(extra\): value 'x{33}'"),
        ("\u00e9", r"row 2, column 7 \(extra\): value '\u00e9'"),
    ],
)
def test_malformed_seventh_column_is_named(tmp_path: Path, token: str, error: str) -> None:
    msgs = [line + ",1" for line in MESSAGES]
    msgs[1] = f"{MESSAGES[1]},{token}"
    with pytest.raises(LobsterFormatError, match=error):
        load_day(write_day(tmp_path, msgs, BOOK))


@pytest.mark.parametrize(
    ("rows", "error"),
    [
        ({2: ",7"}, r"row 2 has 7 columns, expected 6 \(every row as many as row 1"),
        ({1: ",7", 2: ",7", 4: ",7"}, r"row 3 has 6 columns, expected 7 \(every row as many as row 1"),
        ({1: ",7", 3: ",7,8"}, r"row 2 has 6 columns, expected 7"),  # the first row that differs is named
    ],
)
def test_mixed_six_and_seven_columns_are_refused(tmp_path: Path, rows: dict[int, str], error: str) -> None:
    msgs = [line + rows.get(k + 1, "") for k, line in enumerate(MESSAGES)]
    with pytest.raises(LobsterFormatError, match=error) as info:
        load_day(write_day(tmp_path, msgs, BOOK))
    assert f"{STEM}_message_2.csv" in str(info.value)


@needs_data
def test_a_sample_mixing_six_and_seven_columns_is_refused(tmp_path: Path) -> None:
    msg, msg_text, ob, ob_text = sample_members(GOOG_1)
    lines = with_seventh_column(msg_text, seventh_column_tokens(msg_text.count(b"\n"))).split(b"\n")
    lines[29999] = lines[29999].rsplit(b",", 1)[0]  # row 30000 without its seventh column
    path = write_pair_zip(tmp_path / GOOG_1.name, msg, b"\n".join(lines), ob, ob_text)
    with pytest.raises(LobsterFormatError, match=r"row 30000 has 6 columns, expected 7 \(every row as many as row 1"):
        load_day(path)


# ------------------------------------------------------------------------------------------------ malformed

BAD_MESSAGES = [
    ("34200.1,1,12,50,5801000", r"row 2 has 5 columns, expected 6"),
    (
        "34200.1,8,12,50,5801000,-1",
        r"row 2, column 2 \(type\): value 8; expected an event type in \(1, 2, 3, 4, 5, 6, 7\)",
    ),
    ("34200.1,1,-12,50,5801000,-1", r"row 2, column 3 \(order_id\): value -12; expected a non-negative integer"),
    ("34200.1,6,-1,-5,5801000,-1", r"row 2, column 4 \(size\): value -5; expected a number of shares in 0\.\."),
    ("34200.1,6,-1,5,5801010,-1", r"row 2, column 5 \(price\): value 5801010; expected a non-negative multiple of 50"),
    ("34200.1,6,-1,5,-100,-1", r"row 2, column 5 \(price\): value -100; expected a non-negative multiple of 50"),
    ("34200.1,6,-1,5,5801000,2", r"row 2, column 6 \(direction\): value 2; expected a direction of 1, -1 or 0"),
    ("34200.1,1,12,50,5801000,0,7", r"row 2 has 7 columns, expected 6"),
    ("34200.0,1,12,50,5801000,-1", r"row 2, column 1 \(time\): 34200.000000000 is before the previous row's"),
    ("34200.1,1,12,0,5801000,-1", r"row 2, column 4 \(size\): value 0; expected a positive integer"),
    ("34200.1,1,12,-5,5801000,-1", r"row 2, column 4 \(size\): value -5"),
    ("34200.1,1,12,1000000000000,5801000,-1", r"row 2, column 4 \(size\): value 1000000000000"),
    ("34200.1,1,12,50,5801050,-1", r"row 2, column 5 \(price\): value 5801050; expected .*multiple of 100"),
    ("34200.1,1,12,50,5801000,0", r"row 2, column 6 \(direction\): value 0; expected a direction of 1"),
    ("34200.1,1,12,abc,5801000,-1", r"row 2, column 4: value 'abc'"),
    ("34200.1,1,99999999999999999999,50,5801000,-1", r"row 2, column 3: value '99999999999999999999'"),
    ("34200.1234567890123456789,1,12,50,5801000,-1", r"row 2, column 1: value '34200.1234567890123456789'"),
    ("9:30,1,12,50,5801000,-1", r"row 2, column 1: value '9:30'"),
    ("34200.2,7,0,0,5,-1", r"row 2, column 5 \(price\): value 5; expected -1 \(halt\)"),
]


@pytest.mark.parametrize(("line", "error"), BAD_MESSAGES)
def test_malformed_message_row_is_named(tmp_path: Path, line: str, error: str) -> None:
    path = write_day(tmp_path, replaced(MESSAGES, 2, line), BOOK)
    with pytest.raises(LobsterFormatError, match=error) as info:
        load_day(path)
    assert f"{STEM}_message_2.csv" in str(info.value)


def test_hidden_execution_may_print_at_half_a_tick(tmp_path: Path) -> None:
    assert load_day(write_day(tmp_path, MESSAGES, BOOK)).price[2] == 5800500  # type 5 at 580.05 is legal
    bad = replaced(MESSAGES, 3, "34200.100000001,5,0,7,5800510,1")
    with pytest.raises(LobsterFormatError, match=r"row 3, column 5 \(price\): value 5800510"):
        load_day(write_day(tmp_path, bad, BOOK))


BAD_BOOK = [
    ("5801000,50,5800000,100,5802300,100,5799000", r"row 2 has 7 columns, expected 8"),
    ("5801000,50,5801000,100,5802300,100,5799000,20", r"row 2: crossed book, best bid 5801000 >= best ask"),
    ("5801000,50,5800000,100,5802350,100,5799000,20", r"row 2, column 5 \(ask_price_2\): value 5802350"),
    (f"5801000,50,5800000,100,{DUMMY_ASK_PRICE},3,5799000,20", r"row 2, column 6 \(ask_size_2\): value 3"),
    ("5801000,0,5800000,100,5802300,100,5799000,20", r"row 2, column 2 \(ask_size_1\): value 0"),
    ("5801000,50,5800000,100,5800900,100,5799000,20", r"column 5 \(ask_price_2\): value 5800900; .*order"),
    ("5801000,50,5800000,100,5802300,100,5799000,2x", r"row 2, column 8: value '2x'"),
    ("5801000,50,5800000,1" + "0" * 20 + ",5802300,100,5799000,20", r"column 4 \(bid_size_1\): .*overflows"),
    ("5801000,50,-" + "9" * 20 + ",100,5802300,100,5799000,20", r"column 3 \(bid_price_1\): .*overflows"),
]


@pytest.mark.parametrize(("line", "error"), BAD_BOOK)
def test_malformed_orderbook_row_is_named(tmp_path: Path, line: str, error: str) -> None:
    path = write_day(tmp_path, MESSAGES, replaced(BOOK, 2, line))
    with pytest.raises(LobsterFormatError, match=error) as info:
        load_day(path)
    assert f"{STEM}_orderbook_2.csv" in str(info.value)


LAST_ROW = "5801000,50,5799000,20,5802300,100,5798000"  # BOOK's row 4 without its last field


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (LAST_ROW, r"row 4 has 7 columns, expected 8"),
        (LAST_ROW + ",30,5", r"row 4 has 9 columns, expected 8"),
        ("5801000,50,,20,5802300,100,5798000,30", r"row 4, column 3: value ''"),
    ],
)
def test_malformed_last_orderbook_row_after_a_good_load(tmp_path: Path, line: str, error: str) -> None:
    # The fast parser tells np.fromstring how many values to read, and np.fromstring fills a short text's
    # remainder with whatever memory it got, e.g. the same-sized book freed by the load before: a row
    # missing at the end must still be named, never read from that memory.
    good = tmp_path / "good"
    good.mkdir()
    load_day(write_day(good, MESSAGES, BOOK))
    with pytest.raises(LobsterFormatError, match=error):
        load_day(write_day(tmp_path, MESSAGES, replaced(BOOK, 4, line)))


def test_row_count_mismatch(tmp_path: Path) -> None:
    with pytest.raises(LobsterFormatError, match=r"3 rows but the message file has 4"):
        load_day(write_day(tmp_path, MESSAGES, BOOK[:3]))


def test_zip_without_orderbook_member(tmp_path: Path) -> None:
    z = tmp_path / "day.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(f"{STEM}_message_2.csv", "\n".join(MESSAGES))
        zf.writestr("README.txt", "hello")
    with pytest.raises(LobsterFormatError, match=r"exactly one \*_orderbook_<L>.csv member, found 0"):
        load_day(z)


def test_zip_members_must_pair(tmp_path: Path) -> None:
    z = tmp_path / "day.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(f"{STEM}_message_2.csv", "\n".join(MESSAGES))
        zf.writestr(f"{STEM}_orderbook_5.csv", "\n".join(BOOK))
    with pytest.raises(LobsterFormatError, match="are not a pair"):
        load_day(z)


def test_not_a_zip(tmp_path: Path) -> None:
    z = tmp_path / "day.zip"
    z.write_bytes(b"not a zip")
    with pytest.raises(LobsterFormatError, match="not a readable zip archive"):
        load_day(z)


def test_unrecognised_file_name(tmp_path: Path) -> None:
    path = tmp_path / "messages.csv"
    path.write_text("\n".join(MESSAGES))
    with pytest.raises(LobsterFormatError, match=r"'messages.csv' is not a LOBSTER message file name"):
        load_day(path)


def test_empty_message_file(tmp_path: Path) -> None:
    with pytest.raises(LobsterFormatError, match="message file is empty"):
        load_day(write_day(tmp_path, [], None))


@pytest.mark.parametrize("levels", [0, 3, True])
def test_levels_out_of_range(tmp_path: Path, levels: int) -> None:
    with pytest.raises(LobsterFormatError, match=rf"levels={levels!r} must be an integer in 1..2"):
        load_day(write_day(tmp_path, MESSAGES, BOOK), levels=levels)


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_day(tmp_path / "nope.zip")


def test_the_sample_days_folder_has_one_home(monkeypatch, tmp_path):
    monkeypatch.setenv(samples.DATA_ENV, str(tmp_path))
    assert samples.data_dir() == tmp_path
    assert samples.sample_zip("AMZN", 5) == tmp_path / "LOBSTER_SampleFile_AMZN_2012-06-21_5.zip"
    monkeypatch.delenv(samples.DATA_ENV)
    beside = Path(samples.__file__).resolve().parents[3] / "shared" / "data" / "lobster"
    assert samples.data_dir() in (beside, samples.TEAM_DIR)
    assert samples.data_dir() == beside or not beside.is_dir()  # beside the checkout first

"""LOBSTER replay: reproduces the orderbook files row by row, up to exactly the documented exceptions."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lobsim_env.lobster.files import (
    DUMMY_ASK_PRICE,
    DUMMY_BID_PRICE,
    LOAD_STAGES,
    LobsterDay,
    LobsterFormatError,
    load_day,
)
from lobsim_env.lobster.reconstruct import (
    BEYOND_DEPTH,
    INCONSISTENT,
    INSERT,
    NO_EFFECT,
    OPENING_ROW,
    REMOVE,
    REVEALED_LEVEL,
    SIZE_DOWN,
    SIZE_UP,
    check,
    main,
    opening_book,
    profile,
    replay,
    replay_sequential,
)
from tests.test_lobster import (
    BOOK,
    DATA,
    MESSAGES,
    needs_data,
    replaced,
    sample_members,
    seventh_column_tokens,
    with_seventh_column,
    write_day,
    write_pair_zip,
)

ROOT = Path(__file__).resolve().parents[1]

# Measured on the LOBSTER sample files (docs/lobster.md): (rows fully matched, rows with a revealed level).
EXPECTED = {
    "AAPL_2012-06-21_1": (118497, 88425, 30071),
    "AMZN_2012-06-21_1": (57515, 43561, 13953),
    "AMZN_2012-06-21_5": (155935, 122094, 33840),
    "GOOG_2012-06-21_1": (49482, 38274, 11207),
    "GOOG_2012-06-21_5": (112673, 80769, 31903),
    "GOOG_2012-06-21_10": (147916, 103464, 44451),
}


@pytest.fixture(scope="module", params=sorted(EXPECTED))
def sample(request: pytest.FixtureRequest) -> tuple[str, LobsterDay]:
    path = DATA / f"LOBSTER_SampleFile_{request.param}.zip"
    if not path.exists():
        pytest.skip(f"LOBSTER sample file {path} not found")
    return request.param, load_day(path)


@needs_data
def test_replay_reproduces_the_orderbook_file(sample: tuple[str, LobsterDay]) -> None:
    name, day = sample
    rows, matched, revealed = EXPECTED[name]
    rep = check(day)
    assert rep.unexplained_rows == 0 and rep.unexplained_levels == 0 and rep.first_unexplained == []
    assert rep.rows == rows and rep.rows_matched == matched
    assert rep.exceptions == {OPENING_ROW: 1, REVEALED_LEVEL: revealed}
    # One revealed level per row, exactly where a message emptied a level of a full side.
    assert rep.exception_levels == {OPENING_ROW: 2 * day.levels, REVEALED_LEVEL: revealed}
    assert rep.levels_matched == rows * 2 * day.levels - 2 * day.levels - revealed
    assert rep.ok


@needs_data
def test_vectorised_equals_sequential_replay(sample: tuple[str, LobsterDay]) -> None:
    _, day = sample
    n = 20_000
    fast, slow = replay(day), replay_sequential(day, stop=n)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f)[:n], getattr(slow, f)), f


@needs_data
def test_hidden_executions_never_touch_the_visible_book(sample: tuple[str, LobsterDay]) -> None:
    _, day = sample
    res = replay(day)
    hidden = np.flatnonzero(day.event_type == 5)
    hidden = hidden[hidden > 0]
    assert hidden.size > 1000
    assert (res.effect[hidden] == NO_EFFECT).all()
    assert np.array_equal(res.book[hidden], res.book[hidden - 1])
    assert np.array_equal(day.book[hidden], day.book[hidden - 1])


@needs_data
def test_orders_resting_before_the_window_are_executed(sample: tuple[str, LobsterDay]) -> None:
    # Ids never seen added (they rested before 9:30) are cancelled and executed like any other.
    _, day = sample
    res = replay(day)
    added = set(day.order_id[day.event_type == 1].tolist())
    removals = np.flatnonzero((day.event_type >= 2) & (day.event_type <= 4))
    unseen = np.array([k for k in removals.tolist() if int(day.order_id[k]) not in added])
    assert unseen.size > 100
    assert np.isin(res.effect[unseen], (SIZE_DOWN, REMOVE)).all()


@needs_data
def test_a_corrupted_row_is_unexplained(sample: tuple[str, LobsterDay]) -> None:
    _, day = sample
    book = day.book.copy()
    book[1000, 1] += 1  # best ask size of row 1001
    rep = check(dataclasses.replace(day, book=book))
    assert not rep.ok and rep.first_unexplained[0].row == 1001
    first = rep.first_unexplained[0]
    assert first.file[1] == first.replayed[1] + 1 and first.message[1] == int(day.event_type[1000])


@needs_data
def test_fewer_levels_replay_the_top_of_a_deeper_file() -> None:
    # The level-5 file cut to one level must tell the same story as the level-1 file of that day.
    day = load_day(DATA / "LOBSTER_SampleFile_AMZN_2012-06-21_5.zip", levels=1)
    rep = check(day)
    assert rep.ok and rep.exceptions[REVEALED_LEVEL] == EXPECTED["AMZN_2012-06-21_1"][2]
    assert (replay(day).effect == BEYOND_DEPTH).sum() == 155935 - 57515


def with_crosses(msg_text: bytes, ob_text: bytes, after: list[int]) -> tuple[bytes, bytes, list[int]]:
    """The message and orderbook texts with a cross (type 6) after each 1-based row of `after`, its orderbook row
    repeating the one before it as LOBSTER writes it: at that row's time and best bid, LOBSTER's pseudo order
    ids (-1 opening, -2 closing, -3 / -4 others), every direction (1, -1 and 0). Also the crosses' 0-based rows."""
    msgs, books = msg_text.split(b"\n")[:-1], ob_text.split(b"\n")[:-1]
    out_msgs, out_books, rows = [], [], []
    for k, (msg, book) in enumerate(zip(msgs, books, strict=True)):
        out_msgs.append(msg)
        out_books.append(book)
        if k + 1 in after:
            n = len(rows)
            time, best_bid = msg.split(b",")[0], book.split(b",")[2]
            out_msgs.append(b"%s,6,%d,%d,%s,%d" % (time, -1 - n % 4, 1000 + n, best_bid, (1, -1, 0)[n % 3]))
            out_books.append(book)
            rows.append(len(out_msgs) - 1)
    return b"\n".join(out_msgs) + b"\n", b"\n".join(out_books) + b"\n", rows


@needs_data
@pytest.mark.parametrize("name", ["GOOG_2012-06-21_1", "AMZN_2012-06-21_5"])
def test_crosses_in_a_seven_column_file_change_nothing(tmp_path: Path, name: str) -> None:
    # The newer LOBSTER format on a sample day: a seventh column and cross trades (type 6).
    rows, matched, revealed = EXPECTED[name]
    msg, msg_text, ob, ob_text = sample_members(DATA / f"LOBSTER_SampleFile_{name}.zip")
    msg_text, ob_text, crosses = with_crosses(msg_text, ob_text, [1, 2, 500, 501, 7000, 15000, 30000, rows])
    msg_text = with_seventh_column(msg_text, seventh_column_tokens(rows + len(crosses)))
    day = load_day(write_pair_zip(tmp_path / f"LOBSTER_SampleFile_{name}.zip", msg, msg_text, ob, ob_text))
    assert day.n_messages == rows + 8 and np.flatnonzero(day.event_type == 6).tolist() == crosses
    assert day.order_id[crosses].tolist() == [-1, -2, -3, -4] * 2 and day.extra.size == day.n_messages
    res = replay(day)
    assert (res.effect[crosses] == NO_EFFECT).all() and (res.level[crosses] == -1).all()
    assert np.array_equal(res.book[crosses], res.book[np.array(crosses) - 1])
    rep = check(day, res)
    assert rep.ok and rep.rows_matched == matched + 8
    assert rep.exceptions == {OPENING_ROW: 1, REVEALED_LEVEL: revealed}
    slow = replay_sequential(day, stop=20_000)  # the reference agrees where five of the crosses lie
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(res, f)[:20_000], getattr(slow, f)), f


# --------------------------------------------------------------------------------- hand-built small cases


def small_day(messages: list[tuple[int, ...]], book: list[list[int]], levels: int = 2) -> LobsterDay:
    """messages: (type, size, price, direction); book rows in LOBSTER's layout."""
    m = len(messages)
    kind, size, price, direction = (np.array(c, np.int64) for c in zip(*messages, strict=True))
    return LobsterDay(
        ticker="T",
        date="2012-06-21",
        levels=levels,
        time_ns=np.arange(m, dtype=np.int64),
        event_type=kind.astype(np.int8),
        order_id=np.arange(m),
        size=size,
        price=price,
        direction=direction.astype(np.int8),
        book=np.array(book, np.int64).reshape(m, 4 * levels),
        source=Path("small"),
    )


A, B = DUMMY_ASK_PRICE, DUMMY_BID_PRICE


def test_every_transition_kind_by_hand() -> None:
    msgs = [
        (1, 5, 101, -1),  # size up at the best ask
        (1, 7, 99, 1),  # new 2nd bid: the old 2nd bid (98) drops out of view
        (2, 3, 102, -1),  # partial cancel at the 2nd ask
        (4, 5, 99, 1),  # partial execution
        (3, 2, 99, 1),  # delete empties the 2nd bid: 98 is revealed from beyond the depth
        (5, 1, 100, 1),  # hidden execution: nothing
        (7, 0, -1, -1),  # halt: the row repeats
        (1, 4, 110, -1),  # behind a full ask side: invisible
        (3, 9, 100, 1),  # best bid gone: 98 moves up, and the file shows nothing beyond (revealed empty)
        (3, 6, 98, 1),  # the side was not full: nothing can move up, the bid side is empty
    ]
    book = [
        [101, 15, 100, 9, 102, 4, 98, 6],
        [101, 15, 100, 9, 102, 4, 99, 7],
        [101, 15, 100, 9, 102, 1, 99, 7],
        [101, 15, 100, 9, 102, 1, 99, 2],
        [101, 15, 100, 9, 102, 1, 98, 6],
        [101, 15, 100, 9, 102, 1, 98, 6],
        [101, 15, 100, 9, 102, 1, 98, 6],
        [101, 15, 100, 9, 102, 1, 98, 6],
        [101, 15, 98, 6, 102, 1, B, 0],
        [101, 15, B, 0, 102, 1, B, 0],
    ]
    day = small_day(msgs, book)
    for res in (replay(day), replay_sequential(day)):
        assert res.effect.tolist() == [
            SIZE_UP,
            INSERT,
            SIZE_DOWN,
            SIZE_DOWN,
            REMOVE,
            NO_EFFECT,
            NO_EFFECT,
            BEYOND_DEPTH,
            REMOVE,
            REMOVE,
        ]
        assert res.level.tolist() == [0, 1, 1, 1, 1, -1, -1, -1, 0, 0]
        assert res.book.tolist() == book
        assert np.flatnonzero(res.undetermined[1:].any(axis=1)).tolist() == [3, 7]  # rows 5 and 9
    rep = check(day)
    assert rep.ok and rep.exceptions == {OPENING_ROW: 1, REVEALED_LEVEL: 2} and rep.rows_matched == 7


def test_opening_book_undoes_the_first_message() -> None:
    day = small_day([(1, 5, 101, -1)], [[101, 15, 100, 9, 102, 4, 98, 6]])
    assert opening_book(day)[0].tolist() == [101, 10, 100, 9, 102, 4, 98, 6]
    day = small_day([(3, 9, 99, 1)], [[101, 15, 100, 9, 102, 4, 98, 6]])
    assert opening_book(day)[0].tolist() == [101, 15, 100, 9, 102, 4, 99, 9]
    day = small_day([(1, 5, 99, 1)], [[101, 15, 99, 5, 102, 4, 98, 6]])
    row, unknown = opening_book(day)
    assert row.tolist() == [101, 15, 98, 6, 102, 4, B, 0] and unknown.tolist() == [0, 0, 0, 0, 0, 0, 1, 1]


def test_a_cross_changes_nothing_by_hand() -> None:
    b = [101, 15, 100, 9, 102, 4, 98, 6]
    msgs = [(6, 500, 100, 0), (1, 5, 101, -1), (6, 0, 0, 1), (6, 300, 10050, -1)]
    book = [b, [101, 20, 100, 9, 102, 4, 98, 6], [101, 20, 100, 9, 102, 4, 98, 6], [101, 20, 100, 9, 102, 4, 98, 6]]
    day = small_day(msgs, book)
    assert opening_book(day)[0].tolist() == b  # a first message that is a cross: nothing to undo
    for res in (replay(day), replay_sequential(day)):
        assert res.effect.tolist() == [NO_EFFECT, SIZE_UP, NO_EFFECT, NO_EFFECT]
        assert res.level.tolist() == [-1, 0, -1, -1] and res.book.tolist() == book
    rep = check(day)
    assert rep.ok and rep.rows_matched == 3
    # A file whose row after a cross differs from the row before it is not explained by the cross.
    changed = [*book[:2], [101, 20, 100, 8, 102, 4, 98, 6], book[3]]
    assert check(small_day(msgs, changed)).first_unexplained[0].row == 3


def test_removing_more_than_is_shown_is_inconsistent() -> None:
    day = small_day([(5, 1, 100, 1), (4, 20, 100, 1), (2, 1, 99, 1)], [[101, 15, 100, 9, 102, 4, 98, 6]] * 3)
    for res in (replay(day), replay_sequential(day)):
        assert res.effect.tolist() == [NO_EFFECT, INCONSISTENT, INCONSISTENT]  # too much; no level at 99
        assert res.level.tolist() == [-1, -1, -1] and (res.book == day.book).all()
    assert check(day).ok  # the file agrees that nothing visible changed; the effect flags the message


def test_replay_needs_the_orderbook(tmp_path: Path) -> None:
    day = load_day(write_day(tmp_path, MESSAGES, None))
    with pytest.raises(LobsterFormatError, match="no orderbook file was loaded"):
        replay(day)


def test_dummy_prices_round_trip() -> None:
    day = small_day([(1, 3, 105, -1)], [[105, 3, B, 0, A, 0, B, 0]])
    res = replay(day)
    assert res.book.tolist() == [[105, 3, B, 0, A, 0, B, 0]] and check(day).ok


# -------------------------------------------------------------------------------------------------- the CLI


def test_cli_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for sub in ("good", "differs", "malformed"):
        (tmp_path / sub).mkdir()
    good = write_day(tmp_path / "good", MESSAGES, BOOK)
    assert main([str(good), "--check"]) == 0
    out = capsys.readouterr().out
    assert "messages/s" in out and "unexplained 0" in out and "exception revealed_level: 1 rows" in out

    bad_row = "5801000,50,5800000,100,5802300,100,5799000,25"  # row 2 shows a bid size no message made
    differs = write_day(tmp_path / "differs", MESSAGES, replaced(BOOK, 2, bad_row))
    assert main([str(differs)]) == 0  # without --check nothing is compared
    assert main([str(differs), "--check"]) == 1
    assert "row 2 differs" in capsys.readouterr().out

    malformed = write_day(tmp_path / "malformed", replaced(MESSAGES, 3, "34200.1,1,12,50,5801000,2"), BOOK)
    assert main([str(malformed), "--check"]) == 2
    assert "row 3, column 6 (direction): value 2" in capsys.readouterr().err


@needs_data
def test_cli_runs_as_a_module() -> None:
    path = DATA / "LOBSTER_SampleFile_GOOG_2012-06-21_1.zip"
    proc = subprocess.run(
        [sys.executable, "-m", "lobsim_env.lobster.reconstruct", str(path), "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "49482 messages" in proc.stdout and "exception revealed_level: 11207 rows" in proc.stdout


# -------------------------------------------------------------------------------------------- the profile


@needs_data
def test_profile_times_every_stage_of_one_load_and_replay(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "LOBSTER_SampleFile_GOOG_2012-06-21_1.zip"
    stages = profile(path, repeats=1)
    assert list(stages) == [*LOAD_STAGES, "replay", "total", "inflate"]
    assert all(v > 0 for v in stages.values())
    # One run: the stages are laps of the clock that times the total, so they add up to at most it.
    assert sum(stages[k] for k in (*LOAD_STAGES, "replay")) <= stages["total"]
    assert main([str(path), "--profile", "1"]) == 0
    out = capsys.readouterr().out
    assert "parse_orderbook" in out and "inflate" in out and "messages/s (median total)" in out


def test_stage_seconds_without_an_orderbook(tmp_path: Path) -> None:
    stages = {"read": 1.0}
    load_day(write_day(tmp_path, MESSAGES, None), stage_seconds=stages)
    assert list(stages) == ["read", "parse_messages", "validate_messages"]
    assert stages["read"] > 1.0  # added to what was there, so repeated loads accumulate


# ----------------------------------------------------------------------- random days from a full-depth book


def random_day(seed: int, levels: int, n: int = 400) -> LobsterDay:
    """A LOBSTER-like day cut to `levels` from a deeper book: messages only inside the visible range."""
    rng = np.random.default_rng(seed)
    asks = {100 + i: int(rng.integers(1, 5)) for i in range(1, rng.integers(1, 2 * levels + 2))}
    bids = {100 - i: int(rng.integers(1, 5)) for i in range(0, rng.integers(1, 2 * levels + 2))}
    msgs, rows = [], []

    def top(side: dict[int, int], worse: int) -> list[int]:
        return sorted(side, key=lambda p: p * worse)[:levels]

    def row() -> list[int]:
        out = []
        ta, tb = top(asks, 1), top(bids, -1)
        for i in range(levels):
            out += [ta[i], asks[ta[i]]] if i < len(ta) else [A, 0]
            out += [tb[i], bids[tb[i]]] if i < len(tb) else [B, 0]
        return out

    while len(msgs) < n:
        d = int(rng.choice([-1, 1]))
        side, worse = (asks, 1) if d == -1 else (bids, -1)
        other = bids if d == -1 else asks
        r = rng.random()
        if r < 0.05:
            msgs.append((5, 1, 100, d))  # hidden execution
        elif r < 0.5 or not side:
            # A submission that never crosses: at or behind the opposite best.
            edge = (max(other) + 1) if (d == -1 and other) else (min(other) - 1) if other else 100
            p = edge + worse * int(rng.integers(0, 2 * levels + 2))
            s = int(rng.integers(1, 5))
            visible = sum(q * worse < p * worse for q in side) < levels
            side[p] = side.get(p, 0) + s
            if not visible:
                continue  # LOBSTER leaves out what happens behind the depth
            msgs.append((1, s, p, d))
        else:
            p = int(rng.choice(top(side, worse)))
            s = int(rng.integers(1, side[p] + 1))
            msgs.append((int(rng.choice([2, 3, 4])) if s == side[p] else 2, s, p, d))
            side[p] -= s
            if side[p] == 0:
                del side[p]
        rows.append(row())
    return small_day(msgs, rows, levels=levels)


@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("seed", range(8))
def test_random_days_replay_exactly(seed: int, levels: int) -> None:
    day = random_day(seed, levels)
    fast, slow = replay(day), replay_sequential(day)
    for f in ("book", "undetermined", "effect", "level"):
        assert np.array_equal(getattr(fast, f), getattr(slow, f)), f
    rep = check(day, fast)
    assert rep.ok and rep.rows_matched + sum(rep.exceptions.values()) == rep.rows
    revealed = (fast.effect[1:] == REMOVE) & fast.undetermined[1:].any(axis=1)
    assert rep.exceptions[REVEALED_LEVEL] == int(revealed.sum())
    # Cut to fewer levels, the same day still replays exactly; what lay behind becomes BEYOND_DEPTH.
    if levels > 1:
        cut = dataclasses.replace(day, levels=levels - 1, book=day.book[:, : 4 * (levels - 1)])
        assert check(cut).ok

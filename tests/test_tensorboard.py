"""TensorBoard event files beside diag.jsonl (actors/tensorboard.py): the framing and the protocol buffers read
back by a reader written here from the format's definition (and by tensorboard's own reader where it is
installed), and what a run writes: every step's numbers, and after a resume the marker that makes TensorBoard drop
what the cut-back steps had recorded."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from actors import tensorboard as tb
from tests.test_driver import run

DATA = Path(__file__).resolve().parent / "data"


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, i


def _fields(buf: bytes) -> list[tuple[int, object]]:
    """(field number, value) of a protocol buffer: varints, 64- and 32-bit fields as raw bytes, length-delimited."""
    out, i = [], 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, kind = key >> 3, key & 7
        if kind == 0:
            value, i = _varint(buf, i)
        elif kind == 1:
            value, i = buf[i : i + 8], i + 8
        elif kind == 5:
            value, i = buf[i : i + 4], i + 4
        elif kind == 2:
            n, i = _varint(buf, i)
            value, i = buf[i : i + n], i + n
        else:
            raise AssertionError(f"wire type {kind}")
        out.append((number, value))
    return out


def read_events(path: Path) -> list[dict]:
    """Every record's CRCs checked; each Event as {'step', 'wall_time', 'scalars', 'file_version', 'start'}."""
    data, i, events = path.read_bytes(), 0, []
    while i < len(data):
        length = data[i : i + 8]
        (n,) = struct.unpack("<Q", length)
        assert struct.unpack("<I", data[i + 8 : i + 12])[0] == tb._masked(tb.crc32c(length))
        body = data[i + 12 : i + 12 + n]
        assert struct.unpack("<I", data[i + 12 + n : i + 16 + n])[0] == tb._masked(tb.crc32c(body))
        i += 16 + n
        ev = {"step": 0, "scalars": {}, "file_version": None, "start": False}
        for number, value in _fields(body):
            if number == 1:
                ev["wall_time"] = struct.unpack("<d", value)[0]
            elif number == 2:
                ev["step"] = value
            elif number == 3:
                ev["file_version"] = value.decode()
            elif number == 5:
                for _, v in _fields(value):
                    parts = dict(_fields(v))
                    ev["scalars"][parts[1].decode()] = struct.unpack("<f", parts[2])[0]
            elif number == 7:
                ev["start"] = dict(_fields(value)).get(1) == 1
        events.append(ev)
    return events


def test_crc32c_and_the_records_read_back():
    assert tb.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert tb.crc32c(b"") == 0


def test_a_writer_writes_scalars_at_their_steps_and_leaves_out_what_cannot_be_plotted(tmp_path):
    w = tb.EventWriter(tmp_path)
    for step in (1, 2, 300):
        w.scalars(step, {"qpa": 0.25 * step, "grad_norm/total": 2.0, "bad": float("nan")})
    w.close()
    (path,) = tmp_path.glob(tb.EVENTS_PREFIX + ".*")
    events = read_events(path)
    assert events[0]["file_version"] == "brain.Event:2"
    assert [(e["step"], e["scalars"]) for e in events[1:]] == [
        (1, {"qpa": 0.25, "grad_norm/total": 2.0}),
        (2, {"qpa": 0.5, "grad_norm/total": 2.0}),
        (300, {"qpa": 75.0, "grad_norm/total": 2.0}),
    ]


def test_tensorboards_own_reader_reads_them(tmp_path):
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    w = tb.EventWriter(tmp_path)
    for step in range(1, 11):
        w.scalars(step, {"qpa": step / 10})
    w.close()
    resumed = tb.EventWriter(tmp_path, restart_at=6)
    resumed.scalars(7, {"qpa": -0.7})
    resumed.close()
    acc = accumulator.EventAccumulator(str(tmp_path))
    acc.Reload()
    assert [(e.step, round(e.value, 3)) for e in acc.Scalars("qpa")] == [(s, s / 10) for s in range(1, 7)] + [(7, -0.7)]


def test_a_run_writes_every_step_and_a_resume_marks_its_restart(tmp_path):
    code, run_dir = run(tmp_path, "--steps", "30", "--checkpoint-every", "20", "--checkpoint-interval-s", "0")
    assert code == 0
    (first,) = run_dir.glob(tb.EVENTS_PREFIX + ".*")
    steps = [e for e in read_events(first) if e["scalars"]]
    assert [e["step"] for e in steps] == list(range(1, 31))
    assert {"qpa", "qpa_ema", "l_c51", "l_dueling", "pnl_cum_usd", "env_steps"} <= set(steps[-1]["scalars"])
    assert "fold" not in steps[-1]["scalars"] and "time" not in steps[-1]["scalars"]
    from foxhunt_ray import driver

    assert driver.main(["--resume", str(run_dir), "--steps", "40", "--serial", "--quiet"]) == 0  # from ckpt 30
    (second,) = set(run_dir.glob(tb.EVENTS_PREFIX + ".*")) - {first}
    events = read_events(second)
    assert any(e["start"] and e["step"] == 31 for e in events)
    assert [e["step"] for e in events if e["scalars"]] == list(range(31, 41))


def test_a_synthetic_evaluation_is_a_point_on_the_runs_curves_and_a_lobster_day_is_not(tmp_path):
    import json

    from foxhunt_ray import evaluations

    kept = DATA / "synthetic-fold0-step00014019-64ep-h1000-pi.json"
    record = json.loads(kept.read_text())  # a real record: the H200 run of 2026-12-03 (commit a43ff48), 0.780
    evaluations.write_record(tmp_path, record)
    (path,) = tmp_path.glob(tb.EVENTS_PREFIX + ".*")
    (ev,) = [e for e in read_events(path) if e["scalars"]]
    assert ev["step"] == 14019
    assert ev["scalars"]["heldout/agent_pnl_usd"] == pytest.approx(record["policies"]["agent"]["pnl_usd_mean"])
    assert ev["scalars"]["heldout/fraction_of_oracle"] == pytest.approx(0.780, abs=1e-3)
    day = tmp_path / "day"
    day.mkdir()
    evaluations.write_record(day, {**record, "market": "lobster", "lobster": {"file": "AMZN_2012-06-21.zip"}})
    assert not list(day.glob(tb.EVENTS_PREFIX + ".*"))

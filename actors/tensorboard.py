"""TensorBoard scalars for a run: `tensorboard --logdir runs` shows every run's diag beside its diag.jsonl.

The event file format written by hand (standard library only: tensorboard itself is needed to view, not to write):
a file `events.out.tfevents.<time>.<host>` of records, each `uint64 length, uint32 masked crc32c(length), data,
uint32 masked crc32c(data)`; the data an `Event` protocol buffer (wall_time = 1: double, step = 2: int64,
file_version = 3: string, summary = 5: Summary, session_log = 7), a Summary a list of `Value`s (tag = 1: string,
simple_value = 2: float). The first event names the file version, as TensorFlow's writer does. Tests read the
files back with tensorboard's own reader where it is installed.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import struct
import time
from pathlib import Path

EVENTS_PREFIX = "events.out.tfevents"
_FILES = itertools.count()


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of TFRecord files."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    n &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes a negative step
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _bytes_field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def event(wall_time: float, step: int = 0, *, scalars: dict[str, float] | None = None, file_version: str = "") -> bytes:
    """One serialized Event."""
    out = bytes([1 << 3 | 1]) + struct.pack("<d", wall_time)
    if step:
        out += _varint(2 << 3) + _varint(step)
    if file_version:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(
            _bytes_field(1, _bytes_field(1, tag.encode()) + bytes([2 << 3 | 5]) + struct.pack("<f", value))
            for tag, value in scalars.items()
        )
        out += _bytes_field(5, values)
    return out


def session_start(wall_time: float, step: int) -> bytes:
    """An Event holding SessionLog(status=START) at `step`: TensorBoard then drops what earlier files hold at that
    step and after it (a resumed run recorded them again from its checkpoint)."""
    return bytes([1 << 3 | 1]) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step) + _bytes_field(
        7, _varint(1 << 3) + _varint(1)  # Event.session_log = 7, SessionLog.status = 1 (START)
    )


def record(data: bytes) -> bytes:
    """A TFRecord: length, its masked crc, the data, its masked crc."""
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", _masked(crc32c(length))) + data + struct.pack("<I", _masked(crc32c(data)))


class EventWriter:
    """Appends scalar events to a new event file in `log_dir` (one file per writer: a resumed run starts another,
    and TensorBoard reads them together)."""

    def __init__(self, log_dir: str | Path, *, restart_at: int | None = None):
        """restart_at: the step the run continues from (a resume): earlier files' events after it are dropped."""
        name = f"{EVENTS_PREFIX}.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(_FILES)}"
        self.path = Path(log_dir) / name  # one file per writer, even two in one process and second
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "xb")  # a new file (never through a link); held for the writer's life
        self._file.write(record(event(time.time(), file_version="brain.Event:2")))
        if restart_at is not None:
            self._file.write(record(session_start(time.time(), restart_at + 1)))
        self._file.flush()

    def scalars(self, step: int, values: dict[str, float], wall_time: float | None = None) -> None:
        """One event at `step` holding every finite value (a NaN or inf cannot be plotted and is left out)."""
        finite = {k: float(v) for k, v in values.items() if math.isfinite(v)}
        if finite:
            self._file.write(record(event(time.time() if wall_time is None else wall_time, step, scalars=finite)))
            self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

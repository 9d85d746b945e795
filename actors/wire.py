"""The wire format of a rollout batch: a msgpack header, then the arrays as raw little-endian bytes (never pickle).

A payload (wire version 2) is one contiguous buffer:
  - 8 bytes: MAGIC (b"FXW2") and the header's length in bytes (uint32, little-endian);
  - the header, one msgpack map: the scalars wire_version, policy_version, fold, worker_index, env_steps (ints)
    and "arrays": {key: [dtype string, shape, offset]} for each key of ARRAYS;
  - each array's bytes (C order) at its offset, ARRAY_ALIGN-aligned, in ARRAYS order, the last one ending the
    payload. Time-major: obs[T+1, B, D], the [T, B] step columns, env_ids[B], pnl_usd[B] and the episodes that
    ended in the batch, episode_env[E] / episode_pnl_usd[E] (E may be 0).
The arrays sit outside the msgpack map so that `decode` can hand out numpy views of the payload instead of
copies: `encode` returns a numpy uint8 array, which Ray keeps in its object store and hands to a reader on the
same node without a copy, so a learner reads a rollout of tens of megabytes in place (wire version 1 copied
each array three times on the way: tobytes, msgpack's bin field, the decoder's copy).
`decode` trusts nothing: it checks the magic, the version, every key, dtypes, shapes (one T, B, D, E across
keys), offsets and lengths against the buffer, the size limits, that floats are finite and that values keep their
meaning (env_steps = T x B, book seeds the worker's, log-probabilities <= 0, counters bounded: SCALAR_BOUNDS), and
raises WireError naming what is wrong and the fix. The learner actor wraps it in `PayloadDecoder`, which counts a
bad payload (diag `bad_payloads`) and keeps going. Spec with examples: docs/system.md.
"""

from __future__ import annotations

import logging
import math
import re
import struct
import time
from dataclasses import dataclass
from typing import Annotated

import msgpack
import numpy as np

from actors.config import MAX_ROLLOUT_WORKERS
from lobsim_env.validation import InputError, Int, Number, field_errors

WIRE_VERSION = 2
"""Bump on any change of keys, dtypes, layout or meaning; a decoder refuses every other version."""

MAGIC = b"FXW2"
PREFIX = struct.Struct("<4sI")  # MAGIC, header length
ARRAY_ALIGN = 64
"""Every array starts at a multiple of this many bytes from the payload's start (cache lines, SIMD loads)."""
MAX_HEADER_BYTES = 64 * 1024
"""A real header is a few hundred bytes; anything longer is refused before it is unpacked."""

SCALARS: tuple[str, ...] = ("wire_version", "policy_version", "fold", "worker_index", "env_steps")

MAX_COUNTER = 2**53
"""The largest policy_version, fold or env_steps a payload may carry: diag.jsonl writes numbers as JSON doubles,
exact only up to 2**53 (env_steps must also be the batch's T x B, policy_version at most the learner's step)."""
SCALAR_BOUNDS: dict[str, tuple[int, str]] = {
    "policy_version": (MAX_COUNTER, "a learner step; diag.jsonl's numbers are exact to 2**53"),
    "fold": (MAX_COUNTER, "a walk-forward fold; diag.jsonl's numbers are exact to 2**53"),
    "worker_index": (
        MAX_ROLLOUT_WORKERS - 1,
        f"a run has at most {MAX_ROLLOUT_WORKERS:,} rollout workers, actors.config.MAX_ROLLOUT_WORKERS",
    ),
    "env_steps": (MAX_COUNTER, "the batch's T x B env steps"),
}
"""Each scalar's largest value and what it is: `decode` refuses a larger one."""
LOGP_SLACK = 1e-6
"""behaviour_logp is a log-probability, <= 0; float32 rounding of a near-certain action's log-softmax may leave it
a hair above 0, so `decode` refuses values above this (a probability over 1, e.g. +5, is no rounding)."""

# key -> (dtype string, shape in symbols, must be finite). T1 = T + 1.
ARRAYS: dict[str, tuple[str, tuple[str, ...], bool]] = {
    "obs": ("<f4", ("T1", "B", "D"), True),
    "actions": ("<i8", ("T", "B"), False),
    "rewards": ("<f4", ("T", "B"), True),
    "terminated": ("|b1", ("T", "B"), False),
    "truncated": ("|b1", ("T", "B"), False),
    "valid": ("|b1", ("T", "B"), False),
    "behaviour_logp": ("<f4", ("T", "B"), True),
    "env_ids": ("<i8", ("B",), False),
    "pnl_usd": ("<f8", ("B",), True),
    "episode_env": ("<i8", ("E",), False),
    "episode_pnl_usd": ("<f8", ("E",), True),
}

LEARNER_KEYS: tuple[str, ...] = (
    "obs",
    "actions",
    "rewards",
    "terminated",
    "truncated",
    "behaviour_logp",
    "valid",
    "policy_version",
)
"""Exactly what Learner.update accepts; everything else in a payload is metadata for the driver."""


class WireError(InputError):
    """A payload that cannot be encoded or decoded; the message names the problem and the fix."""


MAX_BAD_IN_A_ROW = 64
"""A run ends (exit 1, summary 'error') after this many rollout payloads in a row were bad or refused..."""
MAX_BAD_SECONDS = 120.0
"""...or when bad ones have kept arriving for this many seconds without a good one (docs/input-limits.md)."""


@dataclass(kw_only=True, frozen=True)
class WireLimits:
    """Upper bounds a decoder enforces before it allocates anything, and how long a PayloadDecoder takes bad
    payloads before it says the run is starved. Not part of a run's config (nor of its checkpoints): the driver
    always uses these defaults; a test, or code that builds a LearnerWorker itself, passes its own
    (`LearnerWorker(limits=...)`), e.g. a starvation window of seconds instead of minutes."""

    max_payload_bytes: Annotated[int, Int(ge=1)] = 512 * 2**20
    """Largest accepted payload (512 MiB); a batch of T=64, B=4096, D=32 is about 40 MiB."""
    max_elements: Annotated[int, Int(ge=1)] = 128 * 2**20
    """Largest element count of any one array."""
    max_bad_in_a_row: Annotated[int, Int(ge=1)] = MAX_BAD_IN_A_ROW
    """PayloadDecoder.starved: this many bad or refused payloads in a row end the run..."""
    max_bad_seconds: Annotated[float, Number(gt=0, why="seconds")] = MAX_BAD_SECONDS
    """...as do bad ones arriving for this long without a good one (at least two of them)."""

    def errors(self) -> list[str]:
        """Every problem as 'wire.field=value must ...'; empty when the limits are usable."""
        return list(field_errors(self, "wire").values())


DEFAULT_LIMITS = WireLimits()


def _align(n: int) -> int:
    return -(-n // ARRAY_ALIGN) * ARRAY_ALIGN


def encode(batch: dict) -> np.ndarray:
    """Packs a batch dict (the scalars and arrays above; wire_version is added) into one payload, a 1-D numpy
    uint8 array (bytes(payload) is the same payload as bytes).

    Arrays must already have their wire dtype: a silent cast here would hide a producer bug. Shapes and values
    are checked by `decode`, on the side that must not trust the sender.
    """
    want = set(SCALARS) - {"wire_version"} | set(ARRAYS)
    missing = sorted(want - set(batch))
    extra = sorted(set(batch) - want - {"wire_version"})
    if missing or extra:
        raise WireError(f"encode: missing keys {missing}, unexpected keys {extra}; a batch has exactly {sorted(want)}")
    header: dict = {"wire_version": WIRE_VERSION}
    for key in SCALARS[1:]:
        header[key] = int(batch[key])
    for key, (dtype, _, _) in ARRAYS.items():
        a = batch[key]
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype):
            got = a.dtype.str if isinstance(a, np.ndarray) else type(a).__name__
            raise WireError(f"encode: {key} has dtype {got}, the wire needs {dtype}: cast it in the producer")
    # Offsets depend on the header's length and the header holds the offsets: pack with placeholders of the
    # largest msgpack int width (uint64: 9 bytes), so the real offsets can only make the header shorter.
    arrays = {key: [dtype, list(batch[key].shape), 2**63] for key, (dtype, _, _) in ARRAYS.items()}
    header["arrays"] = arrays
    offset = _align(PREFIX.size + len(msgpack.packb(header, use_bin_type=True)))
    for key in ARRAYS:
        arrays[key][2] = offset
        offset = _align(offset + batch[key].nbytes) if key != "episode_pnl_usd" else offset + batch[key].nbytes
    packed = msgpack.packb(header, use_bin_type=True)
    out = np.empty(offset, np.uint8)  # every byte is written below: the padding as zeros, never stale memory
    PREFIX.pack_into(out, 0, MAGIC, len(packed))
    gap = PREFIX.size + len(packed)
    out[PREFIX.size : gap] = np.frombuffer(packed, np.uint8)
    for key, (dtype, _, _) in ARRAYS.items():
        start, a = arrays[key][2], batch[key]
        out[gap:start] = 0
        out[start : start + a.nbytes].view(dtype).reshape(a.shape)[...] = a
        gap = start + a.nbytes
    return out


def _buffer(payload) -> memoryview:
    """The payload's bytes as a flat memoryview (no copy), or WireError for anything that is not a payload."""
    if isinstance(payload, np.ndarray):
        if payload.dtype != np.uint8 or payload.ndim != 1 or not payload.flags.c_contiguous:
            raise WireError(
                f"payload must be a 1-D contiguous uint8 array from actors.wire.encode, got dtype {payload.dtype} "
                f"shape {payload.shape}"
            )
        return memoryview(payload)
    if isinstance(payload, bytes | bytearray | memoryview):
        view = memoryview(payload)
        return view.cast("B") if view.format != "B" or view.ndim != 1 else view
    raise WireError(f"payload must be bytes or a uint8 array from actors.wire.encode, got {type(payload).__name__}")


def decode(payload, *, limits: WireLimits = DEFAULT_LIMITS) -> dict:
    """Checks a payload and returns {scalar: int, array key: numpy array}; raises WireError.

    The arrays are views of the payload, not copies: read-only when the payload is (bytes, or an array from
    Ray's object store); copy one before writing to it.
    """
    buf = _buffer(payload)
    size = buf.nbytes
    if size > limits.max_payload_bytes:
        raise WireError(
            f"payload of {size} bytes exceeds max_payload_bytes={limits.max_payload_bytes}: "
            "sample fewer steps or books per batch or raise the limit"
        )
    if size < PREFIX.size or bytes(buf[:4]) != MAGIC:
        first = bytes(buf[:4])
        hint = (
            "a msgpack map: a wire version 1 payload; run the same code version on the rollout and learner sides"
            if (first[:1] and 0x80 <= first[0] <= 0x8F) or first[:1] in (b"\xde", b"\xdf")
            else "truncated, corrupted in transport, or not made by actors.wire.encode"
        )
        raise WireError(f"payload of {size} bytes does not start with {MAGIC!r} (got {first!r}): {hint}")
    _, header_len = PREFIX.unpack_from(buf, 0)
    if header_len > min(MAX_HEADER_BYTES, size - PREFIX.size):
        raise WireError(
            f"payload header claims {header_len} bytes, the payload has {size - PREFIX.size} after its prefix "
            f"(at most {MAX_HEADER_BYTES}): truncated or corrupted in transport"
        )
    try:
        msg = msgpack.unpackb(
            buf[PREFIX.size : PREFIX.size + header_len],
            raw=False,
            strict_map_key=True,
            max_bin_len=0,
            max_str_len=64,
            max_array_len=64,
            max_map_len=64,
        )
    except Exception as err:  # msgpack raises several unrelated types for corrupt input
        raise WireError(
            f"payload header ({header_len} bytes) is not a complete msgpack message ({type(err).__name__}: {err}); "
            "it was truncated or corrupted in transport, or not made by actors.wire.encode"
        ) from None
    if not isinstance(msg, dict):
        raise WireError(f"payload header is a msgpack {type(msg).__name__}, not a map: not made by actors.wire.encode")
    version = msg.get("wire_version")
    if version != WIRE_VERSION:
        raise WireError(
            f"payload wire_version={version!r}, this decoder reads {WIRE_VERSION}: "
            "run the same code version on the rollout and learner sides"
        )
    want = {*SCALARS, "arrays"}
    missing = sorted(want - set(msg))
    extra = sorted(set(msg) - want)
    if missing or extra:
        raise WireError(
            f"payload header keys: missing {missing}, unexpected {extra}; wire version {WIRE_VERSION} has "
            f"{sorted(want)}"
        )
    out: dict = {"wire_version": version}
    for key, (most, what) in SCALAR_BOUNDS.items():
        v = msg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise WireError(f"payload {key}={v!r} must be an int >= 0")
        if v > most:
            raise WireError(
                f"payload {key}={v} must be an int in 0..{most} ({what}): corrupted in transport, or not made by "
                "actors.rollout.RolloutWorker; run the same code version on the rollout and learner sides"
            )
        out[key] = v
    arrays = msg["arrays"]
    if not isinstance(arrays, dict):
        raise WireError(f"payload arrays must be a map of key -> [dtype, shape, offset], got {type(arrays).__name__}")
    missing = sorted(set(ARRAYS) - set(arrays))
    extra = sorted(set(arrays) - set(ARRAYS))
    if missing or extra:
        raise WireError(
            f"payload arrays: missing {missing}, unexpected {extra}; wire version {WIRE_VERSION} has {sorted(ARRAYS)}"
        )
    dims: dict[str, int] = {}
    end = PREFIX.size + header_len
    for key, (dtype, symbols, finite) in ARRAYS.items():
        out[key], end = _array(key, arrays[key], dtype, symbols, finite, dims, limits, buf, end)
    if end != size:
        raise WireError(
            f"payload has {size - end} bytes after its last array (episode_pnl_usd ends at {end}): "
            "corrupted in transport, or not made by actors.wire.encode"
        )
    if dims["T1"] < 2 or dims["B"] < 1 or dims["D"] < 1:
        raise WireError(f"payload obs shape {list(out['obs'].shape)} must be [T+1, B, D] with T >= 1, B >= 1, D >= 1")
    bad = out["episode_env"][(out["episode_env"] < 0) | (out["episode_env"] >= dims["B"])]
    if bad.size:
        raise WireError(f"payload episode_env holds {bad[:5].tolist()}, outside the batch's books 0..{dims['B'] - 1}")
    _check_meaning(out, dims["T1"] - 1, dims["B"])
    return out


def _check_meaning(out: dict, t_len: int, b: int) -> None:
    """The values a well-formed payload may still hold outside their meaning: env_steps other than T x B, book
    seeds that are not the worker's (negative, or not consecutive), a log-probability above 0. WireError naming
    the value, its range and the fix."""
    if out["env_steps"] != t_len * b:
        raise WireError(
            f"payload env_steps={out['env_steps']} must be T x B = {t_len} x {b} = {t_len * b} (the batch's env "
            "steps, autoreset steps included): corrupted in transport, or not made by actors.rollout.RolloutWorker"
        )
    ids, w = out["env_ids"], out["worker_index"]
    # non-negative first: then a difference of neighbours cannot wrap around int64
    if int(ids.min()) < w * b or (b > 1 and bool((np.diff(ids) != 1).any())):
        shown = ids[:5].tolist() + (["..."] if b > 5 else [])
        raise WireError(
            f"payload env_ids {shown} are not worker {w}'s book seeds: book i of worker w is seeded s + w x B + i "
            f"for a base seed s >= 0, so they must be consecutive ints from at least {w} x {b} = {w * b} "
            "(lobsim_env.seeds.book_seed): corrupted in transport, or not made by actors.rollout.RolloutWorker"
        )
    logp = out["behaviour_logp"]
    if float(logp.max()) > LOGP_SLACK:
        where = np.argwhere(logp > LOGP_SLACK)[0].tolist()
        raise WireError(
            f"payload behaviour_logp holds {float(logp[tuple(where)]):g} (first at index {where}): a log-probability "
            "must be <= 0 (a probability <= 1; finite): the producer's policy or its log_softmax is broken, or the "
            "payload was corrupted in transport"
        )


def all_finite(a: np.ndarray) -> bool:
    """Whether every element of a float array is finite, in one pass without a temporary where it can: a float
    sum is finite exactly when no element is NaN or inf, unless finite elements overflow it (then look again)."""
    return bool(np.isfinite(a.sum())) or bool(np.isfinite(a).all())


def _array(key, item, dtype, symbols, finite, dims, limits, buf, prev_end) -> tuple[np.ndarray, int]:
    if not isinstance(item, list) or len(item) != 3:
        raise WireError(f"payload {key} must be [dtype, shape, offset]")
    got_dtype, shape, offset = item
    if got_dtype != dtype:
        raise WireError(f"payload {key} has dtype {got_dtype!r}, wire version {WIRE_VERSION} needs {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise WireError(f"payload {key} shape {shape!r} must be a list of ints >= 0")
    if len(shape) != len(symbols):
        raise WireError(f"payload {key} shape {shape} must have {len(symbols)} dims [{', '.join(symbols)}]")
    n = math.prod(shape)
    if n > limits.max_elements:
        raise WireError(f"payload {key} shape {shape} has {n} elements, over max_elements={limits.max_elements}")
    for sym, length in zip(symbols, shape, strict=True):
        expect = dims.setdefault(sym, length)
        if sym == "T" and "T1" in dims:
            expect = dims["T1"] - 1
        if length != expect:
            raise WireError(
                f"payload {key} shape {shape} disagrees with the other arrays on {sym}={expect} "
                "(obs is [T+1, B, D], step columns [T, B], env_ids/pnl_usd [B], episode_* [E])"
            )
    nbytes = n * np.dtype(dtype).itemsize
    if isinstance(offset, bool) or not isinstance(offset, int) or offset % ARRAY_ALIGN or offset < prev_end:
        raise WireError(
            f"payload {key} offset {offset!r} must be a multiple of {ARRAY_ALIGN} at or after {prev_end} "
            "(arrays follow the header in order, without overlap)"
        )
    if offset + nbytes > buf.nbytes:
        raise WireError(
            f"payload {key} needs bytes {offset}..{offset + nbytes} (shape {shape} of {dtype}), the payload has "
            f"{buf.nbytes}: truncated in transport"
        )
    a = np.frombuffer(buf, dtype=dtype, count=n, offset=offset).reshape(shape)
    if dtype == "|b1" and n and a.view(np.uint8).max() > 1:  # numpy would read any byte as a bool; torch would not
        raise WireError(f"payload {key} holds bytes other than 0 and 1: not booleans; corrupted in transport")
    if finite and not all_finite(a):
        where = np.argwhere(~np.isfinite(a))[0].tolist()
        raise WireError(
            f"payload {key} holds NaN or inf (first at index {where}): the producer's env or policy diverged"
        )
    return a, offset + nbytes


def split(decoded: dict) -> tuple[dict, dict]:
    """(learner_batch, meta): exactly the keys Learner.update accepts, and everything else."""
    learner_batch = {k: decoded[k] for k in LEARNER_KEYS}
    meta = {k: v for k, v in decoded.items() if k not in LEARNER_KEYS}
    return learner_batch, meta


_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


class PayloadDecoder:
    """decode() that counts bad payloads instead of raising, for the learner actor's receive loop.

    Each distinct fault (its message with the numbers taken out) is logged once in full, then again only at its
    10th, 100th, ... occurrence: a worker that sends nothing but bad payloads does not flood the log. `good()`
    (the learner trained on a payload) ends a streak of bad ones; `starved()` says when a streak has gone on too
    long for the run to go on (limits.max_bad_in_a_row, limits.max_bad_seconds: MAX_BAD_IN_A_ROW and
    MAX_BAD_SECONDS by default)."""

    def __init__(self, *, limits: WireLimits = DEFAULT_LIMITS, log: logging.Logger | None = None):
        if errs := limits.errors():
            raise ValueError("invalid wire limits:\n  " + "\n  ".join(errs))
        self.limits = limits
        self.bad_payloads = 0
        self.last_error: str | None = None
        self.bad_in_a_row = 0
        self.bad_since: float | None = None  # time.monotonic() of the first bad payload since the last good one
        self.faults: dict[str, list] = {}  # fault kind -> [count, what, its first message]
        self._log = log or logging.getLogger(__name__)

    def decode(self, payload) -> tuple[dict, dict] | None:
        """(learner_batch, meta), or None for a bad payload (counted, logged with its reason)."""
        try:
            return split(decode(payload, limits=self.limits))
        except WireError as err:
            self.count_bad(str(err))
            return None

    def count_bad(self, reason: str, *, what: str = "bad rollout payload") -> None:
        """Counts a dropped payload (also one that decoded but that the learner refused), keeps why, and logs it
        when it is the first of its kind (or its 10th, 100th, ...)."""
        self.bad_payloads += 1
        self.last_error = reason
        self.bad_in_a_row += 1
        if self.bad_since is None:
            self.bad_since = time.monotonic()
        key = what + ": " + _NUMBERS.sub("#", reason)[:400]
        entry = self.faults.setdefault(key, [0, what, reason])
        entry[0] += 1
        n = entry[0]
        if n == 1:
            once = "%s #%d dropped (each kind of fault is logged once, then counted): %s"
            self._log.warning(once, what, self.bad_payloads, reason)
        elif math.log10(n).is_integer():
            again = "%s: the same fault %d times so far (%d bad payloads in all): %s"
            self._log.warning(again, what, n, self.bad_payloads, reason)

    def good(self) -> None:
        """A payload was trained on: the streak of bad ones is over."""
        self.bad_in_a_row, self.bad_since = 0, None

    def starved(
        self, *, max_in_a_row: int | None = None, max_seconds: float | None = None, now: float | None = None
    ) -> str | None:
        """Why the run cannot go on (every recent payload bad), or None: the message names the streak and each
        distinct fault with its count. The bounds default to this decoder's limits."""
        if not self.bad_in_a_row:
            return None
        max_in_a_row = self.limits.max_bad_in_a_row if max_in_a_row is None else max_in_a_row
        max_seconds = self.limits.max_bad_seconds if max_seconds is None else max_seconds
        waited = (time.monotonic() if now is None else now) - (self.bad_since or 0.0)
        if self.bad_in_a_row < max_in_a_row and (self.bad_in_a_row < 2 or waited < max_seconds):
            return None
        return (
            f"no good rollout payload in the last {self.bad_in_a_row} ({waited:.0f} s; the run ends after "
            f"{max_in_a_row} in a row or {max_seconds:g} s): {self.summary()}; fix the rollout side (same code "
            "version and config on every worker) and resume the run"
        )

    def summary(self) -> str:
        """Each distinct fault, most frequent first: 'N x what: its first message'."""
        kinds = sorted(self.faults.values(), key=lambda e: -e[0])
        return "; ".join(f"{n} x {what}: {reason}" for n, what, reason in kinds)

    def diag(self) -> dict[str, float]:
        return {"bad_payloads": float(self.bad_payloads)}

"""The wire format of a rollout batch: one msgpack map, arrays as raw little-endian bytes (never pickle).

A payload is a msgpack map of
  - scalars: wire_version, policy_version, fold, worker_index, env_steps (ints);
  - arrays: {"dtype": numpy dtype string, "shape": [ints], "data": raw bytes, C order}, for each key of
    ARRAYS, time-major: obs[T+1, B, D], the [T, B] step columns, env_ids[B], pnl_usd[B] and the episodes
    that ended in the batch, episode_env[E] / episode_pnl_usd[E] (E may be 0).
`decode` trusts nothing: it checks the version, every key, dtypes, shapes (one T, B, D, E across keys), the
size limits and that floats are finite, and raises WireError naming what is wrong and the fix. The learner
actor wraps it in `PayloadDecoder`, which counts a bad payload (diag `bad_payloads`) and keeps going.
Spec with examples: docs/system.md.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import msgpack
import numpy as np

WIRE_VERSION = 1
"""Bump on any change of keys, dtypes or meaning; a decoder refuses every other version."""

SCALARS: tuple[str, ...] = ("wire_version", "policy_version", "fold", "worker_index", "env_steps")

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


class WireError(ValueError):
    """A payload that cannot be encoded or decoded; the message names the problem and the fix."""


@dataclass(kw_only=True, frozen=True)
class WireLimits:
    """Upper bounds a decoder enforces before it allocates anything."""

    max_payload_bytes: int = 512 * 2**20
    """Largest accepted payload (512 MiB); a batch of T=256, B=1024, D=64 float32 obs is 64 MiB."""
    max_elements: int = 128 * 2**20
    """Largest element count of any one array."""

    def errors(self) -> list[str]:
        errs = []
        for name in ("max_payload_bytes", "max_elements"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                errs.append(f"wire.{name}={v!r} must be an int >= 1")
        return errs


DEFAULT_LIMITS = WireLimits()


def encode(batch: dict) -> bytes:
    """Packs a batch dict (the scalars and arrays above; wire_version is added) into one payload.

    Arrays must already have their wire dtype: a silent cast here would hide a producer bug. Shapes and values
    are checked by `decode`, on the side that must not trust the sender.
    """
    want = set(SCALARS) - {"wire_version"} | set(ARRAYS)
    missing = sorted(want - set(batch))
    extra = sorted(set(batch) - want - {"wire_version"})
    if missing or extra:
        raise WireError(f"encode: missing keys {missing}, unexpected keys {extra}; a batch has exactly {sorted(want)}")
    out: dict = {"wire_version": WIRE_VERSION}
    for key in SCALARS[1:]:
        out[key] = int(batch[key])
    for key, (dtype, _, _) in ARRAYS.items():
        a = batch[key]
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype):
            got = a.dtype.str if isinstance(a, np.ndarray) else type(a).__name__
            raise WireError(f"encode: {key} has dtype {got}, the wire needs {dtype}: cast it in the producer")
        out[key] = {"dtype": dtype, "shape": list(a.shape), "data": np.ascontiguousarray(a).tobytes()}
    return msgpack.packb(out, use_bin_type=True)


def decode(payload: bytes, *, limits: WireLimits = DEFAULT_LIMITS) -> dict:
    """Checks and unpacks a payload into {scalar: int, array key: writable numpy array}; raises WireError."""
    if not isinstance(payload, bytes | bytearray | memoryview):
        raise WireError(f"payload must be bytes from actors.wire.encode, got {type(payload).__name__}")
    size = len(payload)
    if size > limits.max_payload_bytes:
        raise WireError(
            f"payload of {size} bytes exceeds max_payload_bytes={limits.max_payload_bytes}: "
            "sample fewer steps per batch or raise the limit"
        )
    try:
        msg = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            max_bin_len=limits.max_payload_bytes,
            max_array_len=64,
            max_map_len=64,
        )
    except Exception as err:  # msgpack raises several unrelated types for corrupt input
        raise WireError(
            f"payload of {size} bytes is not a complete msgpack message ({type(err).__name__}: {err}); "
            "it was truncated or corrupted in transport, or not made by actors.wire.encode"
        ) from None
    if not isinstance(msg, dict):
        raise WireError(f"payload is a msgpack {type(msg).__name__}, not a map: not made by actors.wire.encode")
    version = msg.get("wire_version")
    if version != WIRE_VERSION:
        raise WireError(
            f"payload wire_version={version!r}, this decoder reads {WIRE_VERSION}: "
            "run the same code version on the rollout and learner sides"
        )
    want = set(SCALARS) | set(ARRAYS)
    missing = sorted(want - set(msg))
    extra = sorted(set(msg) - want)
    if missing or extra:
        raise WireError(
            f"payload keys: missing {missing}, unexpected {extra}; wire version {WIRE_VERSION} has {sorted(want)}"
        )
    out: dict = {}
    for key in SCALARS:
        v = msg[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise WireError(f"payload {key}={v!r} must be an int >= 0")
        out[key] = v
    dims: dict[str, int] = {}
    for key, (dtype, symbols, finite) in ARRAYS.items():
        out[key] = _array(key, msg[key], dtype, symbols, finite, dims, limits)
    if dims["T1"] < 2 or dims["B"] < 1 or dims["D"] < 1:
        raise WireError(f"payload obs shape {list(out['obs'].shape)} must be [T+1, B, D] with T >= 1, B >= 1, D >= 1")
    bad = out["episode_env"][(out["episode_env"] < 0) | (out["episode_env"] >= dims["B"])]
    if bad.size:
        raise WireError(f"payload episode_env holds {bad[:5].tolist()}, outside the batch's books 0..{dims['B'] - 1}")
    return out


def _array(key, item, dtype, symbols, finite, dims, limits) -> np.ndarray:
    if not isinstance(item, dict) or set(item) != {"dtype", "shape", "data"}:
        raise WireError(f"payload {key} must be a map with exactly dtype, shape, data")
    if item["dtype"] != dtype:
        raise WireError(f"payload {key} has dtype {item['dtype']!r}, wire version {WIRE_VERSION} needs {dtype!r}")
    shape = item["shape"]
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
    data = item["data"]
    itemsize = np.dtype(dtype).itemsize
    if not isinstance(data, bytes) or len(data) != n * itemsize:
        got = len(data) if isinstance(data, bytes) else type(data).__name__
        raise WireError(f"payload {key} data has {got} bytes, shape {shape} of {dtype} needs {n * itemsize}")
    # A copy: frombuffer over the message is read-only, and torch warns on (and must not write to) such arrays.
    a = np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    if finite and not np.isfinite(a).all():
        where = np.argwhere(~np.isfinite(a))[0].tolist()
        raise WireError(
            f"payload {key} holds NaN or inf (first at index {where}): the producer's env or policy diverged"
        )
    return a


def split(decoded: dict) -> tuple[dict, dict]:
    """(learner_batch, meta): exactly the keys Learner.update accepts, and everything else."""
    learner_batch = {k: decoded[k] for k in LEARNER_KEYS}
    meta = {k: v for k, v in decoded.items() if k not in LEARNER_KEYS}
    return learner_batch, meta


class PayloadDecoder:
    """decode() that counts bad payloads instead of raising, for the learner actor's receive loop."""

    def __init__(self, *, limits: WireLimits = DEFAULT_LIMITS, log: logging.Logger | None = None):
        if errs := limits.errors():
            raise ValueError("invalid wire limits:\n  " + "\n  ".join(errs))
        self.limits = limits
        self.bad_payloads = 0
        self.last_error: str | None = None
        self._log = log or logging.getLogger(__name__)

    def decode(self, payload: bytes) -> tuple[dict, dict] | None:
        """(learner_batch, meta), or None for a bad payload (counted, logged with its reason)."""
        try:
            return split(decode(payload, limits=self.limits))
        except WireError as err:
            self.bad_payloads += 1
            self.last_error = str(err)
            self._log.warning("bad rollout payload #%d dropped: %s", self.bad_payloads, err)
            return None

    def diag(self) -> dict[str, float]:
        return {"bad_payloads": float(self.bad_payloads)}

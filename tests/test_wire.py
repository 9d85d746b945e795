"""actors.wire: exact round trip, and each kind of bad payload rejected with a message naming it."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors import wire


def make_batch(T: int = 5, B: int = 3, D: int = 4, E: int = 2, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "policy_version": 7,
        "fold": 2,
        "worker_index": 1,
        "env_steps": T * B,
        "obs": rng.normal(size=(T + 1, B, D)).astype(np.float32),
        "actions": rng.integers(0, 7, size=(T, B)).astype(np.int64),
        "rewards": rng.normal(size=(T, B)).astype(np.float32),
        "terminated": rng.random((T, B)) < 0.2,
        "truncated": rng.random((T, B)) < 0.2,
        "valid": rng.random((T, B)) < 0.8,
        "behaviour_logp": -rng.random((T, B)).astype(np.float32),
        "env_ids": np.arange(10, 10 + B, dtype=np.int64),
        "pnl_usd": rng.normal(size=B) * 1e3,
        "episode_env": rng.integers(0, B, size=E).astype(np.int64),
        "episode_pnl_usd": rng.normal(size=E) * 1e3,
    }


def parts(payload) -> tuple[dict, dict]:
    """(header, {key: raw bytes}) of a payload, for crafting bad ones with `assemble`."""
    buf = bytes(payload)
    _, n = wire.PREFIX.unpack_from(buf, 0)
    header = msgpack.unpackb(buf[wire.PREFIX.size : wire.PREFIX.size + n], raw=False)
    blobs = {}
    for key, (dtype, shape, offset) in header["arrays"].items():
        blobs[key] = buf[offset : offset + int(np.prod(shape)) * np.dtype(dtype).itemsize]
    return header, blobs


def assemble(header: dict, blobs: dict, magic: bytes = wire.MAGIC) -> bytes:
    """A payload laid out as encode lays it out, from a header and raw blobs as they are (lengths not checked)."""
    arrays = header["arrays"]
    for key in arrays:
        arrays[key][2] = 2**63
    start = wire._align(wire.PREFIX.size + len(msgpack.packb(header)))
    layout = []
    for key in arrays:
        arrays[key][2] = start
        layout.append((start, blobs.get(key, b"")))
        start = wire._align(start + len(blobs.get(key, b"")))
    packed = msgpack.packb(header)
    out = bytearray(magic + wire.PREFIX.pack(magic, len(packed))[4:] + packed)
    for offset, blob in layout:
        out += bytes(offset - len(out)) + blob
    return bytes(out)


def repack(payload, edit) -> bytes:
    """A payload with its header and blobs edited in place by `edit(header, blobs)`."""
    header, blobs = parts(payload)
    edit(header, blobs)
    return assemble(header, blobs)


def test_round_trip_is_exact():
    batch = make_batch()
    payload = wire.encode(batch)
    assert isinstance(payload, np.ndarray) and payload.dtype == np.uint8 and payload.ndim == 1
    assert assemble(*parts(payload)) == bytes(payload)  # the test helpers lay a payload out as encode does
    for form in (payload, bytes(payload), bytearray(payload), memoryview(bytes(payload))):
        out = wire.decode(form)
        assert out["wire_version"] == wire.WIRE_VERSION
        assert set(out) == set(wire.SCALARS) | set(wire.ARRAYS)
        for key, value in batch.items():
            if isinstance(value, np.ndarray):
                assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
                np.testing.assert_array_equal(out[key], value, err_msg=key)
            else:
                assert out[key] == value
    # views of the payload, not copies: writable only where the payload is
    assert wire.decode(payload)["obs"].base is not None and wire.decode(payload)["obs"].flags.writeable
    assert not wire.decode(bytes(payload))["obs"].flags.writeable
    # every array starts aligned; the padding is zeros (no stale memory leaves the process)
    header, _ = parts(payload)
    assert all(off % wire.ARRAY_ALIGN == 0 for _, _, off in header["arrays"].values())
    assert bytes(wire.encode(batch)) == bytes(payload)
    # no episode ended: E = 0 round-trips too
    empty = wire.decode(wire.encode(make_batch(E=0)))
    assert empty["episode_env"].shape == (0,) and empty["episode_pnl_usd"].dtype == np.float64


def test_split_gives_exactly_the_learner_keys():
    learner_batch, meta = wire.split(wire.decode(wire.encode(make_batch())))
    assert tuple(learner_batch) == wire.LEARNER_KEYS
    assert learner_batch["policy_version"] == 7
    assert not set(meta) & set(learner_batch)
    assert {"fold", "worker_index", "env_ids", "pnl_usd", "episode_pnl_usd", "env_steps"} <= set(meta)


def test_encode_refuses_wrong_dtype_and_keys():
    batch = make_batch()
    batch["rewards"] = batch["rewards"].astype(np.float64)
    with pytest.raises(wire.WireError, match=r"rewards has dtype <f8, the wire needs <f4"):
        wire.encode(batch)
    batch = make_batch()
    del batch["valid"]
    with pytest.raises(wire.WireError, match=r"missing keys \['valid'\]"):
        wire.encode(batch)


def test_truncated_bytes():
    payload = bytes(wire.encode(make_batch()))
    with pytest.raises(wire.WireError, match=r"episode_pnl_usd needs bytes .* truncated in transport"):
        wire.decode(payload[:-1])
    with pytest.raises(wire.WireError, match=r"truncated in transport"):
        wire.decode(payload[: len(payload) // 2])
    with pytest.raises(wire.WireError, match=r"header claims \d+ bytes.*truncated or corrupted"):
        wire.decode(payload[:20])
    with pytest.raises(wire.WireError, match=r"does not start with b'FXW2'"):
        wire.decode(payload[:3])
    with pytest.raises(wire.WireError, match=r"\d+ bytes after its last array"):
        wire.decode(payload + b"\0")


def test_non_payload_garbage():
    with pytest.raises(wire.WireError, match=r"does not start with b'FXW2'.*not made by actors\.wire\.encode"):
        wire.decode(b"\xc1\xff\x00garbage" * 10)
    with pytest.raises(wire.WireError, match="not a complete msgpack message"):
        wire.decode(wire.MAGIC + wire.PREFIX.pack(wire.MAGIC, 3)[4:] + b"\xc1\xff\x00" + bytes(64))
    header = msgpack.packb([1, 2, 3])
    with pytest.raises(wire.WireError, match="not a map"):
        wire.decode(wire.PREFIX.pack(wire.MAGIC, len(header)) + header)
    with pytest.raises(wire.WireError, match="must be bytes or a uint8 array"):
        wire.decode("a string")
    with pytest.raises(wire.WireError, match="1-D contiguous uint8 array"):
        wire.decode(np.zeros(100, np.float32))


def test_a_version_1_payload_is_named():
    v1 = msgpack.packb({"wire_version": 1, "obs": {"dtype": "<f4", "shape": [1], "data": bytes(4)}})
    with pytest.raises(wire.WireError, match=r"wire version 1 payload; run the same code version"):
        wire.decode(v1)


def test_wrong_version():
    bad = repack(wire.encode(make_batch()), lambda h, b: h.__setitem__("wire_version", 99))
    with pytest.raises(wire.WireError, match=r"wire_version=99, this decoder reads 2.*same code version"):
        wire.decode(bad)


def test_missing_key():
    bad = repack(wire.encode(make_batch()), lambda h, b: h["arrays"].pop("behaviour_logp"))
    with pytest.raises(wire.WireError, match=r"arrays: missing \['behaviour_logp'\]"):
        wire.decode(bad)
    bad = repack(wire.encode(make_batch()), lambda h, b: h.pop("fold"))
    with pytest.raises(wire.WireError, match=r"header keys: missing \['fold'\]"):
        wire.decode(bad)


def test_unexpected_key():
    bad = repack(wire.encode(make_batch()), lambda h, b: h.__setitem__("extra", 1))
    with pytest.raises(wire.WireError, match=r"unexpected \['extra'\]"):
        wire.decode(bad)


def test_wrong_dtype():
    def edit(h, b):
        h["arrays"]["actions"][0] = "<i4"
        b["actions"] = b["actions"][: len(b["actions"]) // 2]

    with pytest.raises(wire.WireError, match=r"actions has dtype '<i4'.*needs '<i8'"):
        wire.decode(repack(wire.encode(make_batch()), edit))


def test_offsets_must_be_aligned_in_order_and_inside():
    payload = wire.encode(make_batch())
    header, _ = parts(payload)

    def with_offset(key, offset):
        h, _ = parts(payload)
        h["arrays"][key][2] = offset
        packed = msgpack.packb(h)
        buf = bytearray(bytes(payload))
        old = wire.PREFIX.unpack_from(buf, 0)[1]
        assert len(packed) <= old + 8  # room enough: the original layout keeps its offsets
        return bytes(buf[:4]) + wire.PREFIX.pack(wire.MAGIC, len(packed))[4:] + packed + bytes(buf[8 + len(packed) :])

    first = header["arrays"]["obs"][2]
    with pytest.raises(wire.WireError, match=rf"obs offset {first + 4} must be a multiple of 64"):
        wire.decode(with_offset("obs", first + 4))
    with pytest.raises(wire.WireError, match=r"actions offset 0 must be a multiple of 64 at or after"):
        wire.decode(with_offset("actions", 0))  # overlaps the header and obs
    with pytest.raises(wire.WireError, match=r"env_ids needs bytes .* truncated"):
        wire.decode(with_offset("env_ids", 2**40))


def test_shape_mismatch():
    batch = make_batch(T=5, B=3)
    batch["rewards"] = np.zeros((4, 3), np.float32)  # T=4 against obs T+1=6
    with pytest.raises(wire.WireError, match=r"rewards shape \[4, 3\] disagrees .* on T=5"):
        wire.decode(wire.encode(batch))
    batch = make_batch(B=3)
    batch["pnl_usd"] = np.zeros(2)
    with pytest.raises(wire.WireError, match=r"pnl_usd shape \[2\] disagrees .* on B=3"):
        wire.decode(wire.encode(batch))
    batch = make_batch(E=2)
    batch["episode_pnl_usd"] = np.zeros(3)
    with pytest.raises(wire.WireError, match=r"episode_pnl_usd shape \[3\] disagrees .* on E=2"):
        wire.decode(wire.encode(batch))


def test_data_length_must_match_shape():
    def shorter(key, n):
        return lambda h, b: b.__setitem__(key, b[key][:-n])

    # obs [6, 3, 4] is 288 bytes; 64 fewer and actions (the next cache line) would start inside obs's shape
    with pytest.raises(
        wire.WireError, match=r"actions offset (\d+) must be a multiple of 64 at or after \d+ \(arrays follow"
    ):
        wire.decode(repack(wire.encode(make_batch(T=5, B=3, D=4)), shorter("obs", 64)))
    with pytest.raises(wire.WireError, match=r"episode_pnl_usd needs bytes .* truncated"):
        wire.decode(repack(wire.encode(make_batch()), shorter("episode_pnl_usd", 4)))


def test_oversize_payload_and_array():
    payload = wire.encode(make_batch())
    with pytest.raises(wire.WireError, match=r"exceeds max_payload_bytes=100"):
        wire.decode(payload, limits=wire.WireLimits(max_payload_bytes=100))
    with pytest.raises(wire.WireError, match=r"obs shape \[6, 3, 4\] has 72 elements, over max_elements=50"):
        wire.decode(payload, limits=wire.WireLimits(max_elements=50))


def test_nan_in_obs():
    batch = make_batch()
    batch["obs"][2, 1, 3] = np.nan
    with pytest.raises(wire.WireError, match=r"obs holds NaN or inf \(first at index \[2, 1, 3\]\)"):
        wire.decode(wire.encode(batch))


def test_inf_in_rewards():
    batch = make_batch()
    batch["rewards"][0, 0] = np.inf
    with pytest.raises(wire.WireError, match="rewards holds NaN or inf"):
        wire.decode(wire.encode(batch))


def test_episode_env_out_of_range_and_negative_scalar():
    batch = make_batch(B=3)
    batch["episode_env"][0] = 3
    with pytest.raises(wire.WireError, match=r"episode_env holds \[3\], outside the batch's books 0..2"):
        wire.decode(wire.encode(batch))
    bad = repack(wire.encode(make_batch()), lambda h, b: h.__setitem__("policy_version", -1))
    with pytest.raises(wire.WireError, match=r"policy_version=-1 must be an int >= 0"):
        wire.decode(bad)


def test_payload_decoder_counts_bad_payloads_and_keeps_going():
    dec = wire.PayloadDecoder()
    good = wire.encode(make_batch())
    assert dec.decode(good) is not None
    assert dec.decode(good[:10]) is None
    assert dec.decode(b"junk") is None
    out = dec.decode(good)
    assert out is not None and tuple(out[0]) == wire.LEARNER_KEYS
    assert dec.bad_payloads == 2 and dec.diag() == {"bad_payloads": 2.0}
    assert "FXW2" in dec.last_error


def test_wire_limits_errors():
    assert wire.WireLimits().errors() == []
    errs = wire.WireLimits(max_payload_bytes=0, max_elements=-1).errors()
    assert errs == ["wire.max_payload_bytes=0 must be an int >= 1", "wire.max_elements=-1 must be an int >= 1"]
    with pytest.raises(ValueError, match="max_payload_bytes=0"):
        wire.PayloadDecoder(limits=wire.WireLimits(max_payload_bytes=0))


@settings(max_examples=40, deadline=None)
@given(T=st.integers(1, 6), B=st.integers(1, 5), D=st.integers(1, 7), E=st.integers(0, 4), seed=st.integers(0, 99))
def test_round_trip_any_shape(T, B, D, E, seed):
    batch = make_batch(T=T, B=B, D=D, E=E, seed=seed)
    out = wire.decode(wire.encode(batch))
    for key, value in batch.items():
        np.testing.assert_array_equal(out[key], value, err_msg=key)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_corrupted_payload_raises_only_wire_error(data):
    """Any truncation or byte flip either still decodes to a consistent batch or raises WireError, never
    another exception type that would crash the learner's receive loop."""
    payload = bytearray(bytes(wire.encode(make_batch(T=3, B=2, D=3, E=1))))
    cut = data.draw(st.integers(0, len(payload)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)), max_size=4))
    for pos, byte in flips:
        payload[pos] = byte
    try:
        out = wire.decode(bytes(payload[:cut] if data.draw(st.booleans()) else payload))
    except wire.WireError:
        return
    assert out["obs"].shape[0] == out["rewards"].shape[0] + 1


def test_booleans_must_be_zero_or_one():
    def edit(h, b):
        b["valid"] = bytes([2]) + b["valid"][1:]

    with pytest.raises(wire.WireError, match=r"valid holds bytes other than 0 and 1"):
        wire.decode(repack(wire.encode(make_batch()), edit))

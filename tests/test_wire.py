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


def repack(payload: bytes, edit) -> bytes:
    """A payload with its msgpack map edited in place by `edit` (for crafting bad payloads)."""
    msg = msgpack.unpackb(payload, raw=False)
    edit(msg)
    return msgpack.packb(msg, use_bin_type=True)


def test_round_trip_is_exact():
    batch = make_batch()
    out = wire.decode(wire.encode(batch))
    assert out["wire_version"] == wire.WIRE_VERSION
    assert set(out) == set(wire.SCALARS) | set(wire.ARRAYS)
    for key, value in batch.items():
        if isinstance(value, np.ndarray):
            assert out[key].dtype == value.dtype and out[key].shape == value.shape, key
            np.testing.assert_array_equal(out[key], value, err_msg=key)
            assert out[key].flags.writeable
        else:
            assert out[key] == value
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
    payload = wire.encode(make_batch())
    with pytest.raises(wire.WireError, match=r"not a complete msgpack message.*truncated"):
        wire.decode(payload[: len(payload) // 2])


def test_non_msgpack_garbage():
    with pytest.raises(wire.WireError, match="not a complete msgpack message"):
        wire.decode(b"\xc1\xff\x00garbage" * 10)
    with pytest.raises(wire.WireError, match="not a map"):
        wire.decode(msgpack.packb([1, 2, 3]))
    with pytest.raises(wire.WireError, match="must be bytes"):
        wire.decode("a string")


def test_wrong_version():
    bad = repack(wire.encode(make_batch()), lambda m: m.__setitem__("wire_version", 99))
    with pytest.raises(wire.WireError, match=r"wire_version=99, this decoder reads 1.*same code version"):
        wire.decode(bad)


def test_missing_key():
    bad = repack(wire.encode(make_batch()), lambda m: m.pop("behaviour_logp"))
    with pytest.raises(wire.WireError, match=r"missing \['behaviour_logp'\]"):
        wire.decode(bad)


def test_unexpected_key():
    bad = repack(wire.encode(make_batch()), lambda m: m.__setitem__("extra", 1))
    with pytest.raises(wire.WireError, match=r"unexpected \['extra'\]"):
        wire.decode(bad)


def test_wrong_dtype():
    def edit(m):
        m["actions"]["dtype"] = "<i4"
        m["actions"]["data"] = m["actions"]["data"][: len(m["actions"]["data"]) // 2]

    with pytest.raises(wire.WireError, match=r"actions has dtype '<i4'.*needs '<i8'"):
        wire.decode(repack(wire.encode(make_batch()), edit))


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
    def edit(m):
        m["obs"]["data"] = m["obs"]["data"][:-4]

    with pytest.raises(wire.WireError, match=r"obs data has \d+ bytes, shape \[6, 3, 4\] of <f4 needs 288"):
        wire.decode(repack(wire.encode(make_batch()), edit))


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
    bad = repack(wire.encode(make_batch()), lambda m: m.__setitem__("policy_version", -1))
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
    assert "msgpack" in dec.last_error


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
    payload = bytearray(wire.encode(make_batch(T=3, B=2, D=3, E=1)))
    cut = data.draw(st.integers(0, len(payload)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(payload) - 1), st.integers(0, 255)), max_size=4))
    for pos, byte in flips:
        payload[pos] = byte
    try:
        out = wire.decode(bytes(payload[:cut] if data.draw(st.booleans()) else payload))
    except wire.WireError:
        return
    assert out["obs"].shape[0] == out["rewards"].shape[0] + 1

"""The key codec: round trip, prefix-freeness, order, and fixed bytes (the format is stored on disk)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from explorer.errors import SerializationError
from explorer.format.keycodec import decode_key, encode_key, prefix_successor

VALUES = [
    None, True, False, 0, 1, -1, 2**63 - 1, -(2**63), 0.0, -0.0, 1.5, -2.25, math.inf, -math.inf,
    "", "a", "a\x00b", "\x00", "\x00\x01", "日本", b"", b"\x00", b"\x00\xff\x00\x01", b"plain",
    (), (1,), (1, "a"), (None, (b"x", 2.0), ()), ("nested", ("deeper", ("deepest",))),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_round_trip_keeps_value_and_type(value):
    raw = encode_key(value)
    got, pos = decode_key(raw + b"\x07trailing", 0)
    assert got == value and type(got) is type(value)
    assert pos == len(raw)
    if isinstance(value, float):
        assert math.copysign(1, got) == math.copysign(1, value)  # -0.0 stays -0.0


def test_prefix_free_concatenations_split_back():
    rng = random.Random(7)
    for _ in range(500):
        parts = [rng.choice(VALUES) for _ in range(rng.randint(1, 4))]
        raw = b"".join(encode_key(p) for p in parts)
        pos, back = 0, []
        while pos < len(raw):
            v, pos = decode_key(raw, pos)
            back.append(v)
        assert back == parts
    encodings = [encode_key(v) for v in VALUES]
    for a in encodings:
        for b in encodings:
            assert a == b or not b.startswith(a), (a, b)


@pytest.mark.parametrize(
    "values",
    [
        [-(2**63), -5, -1, 0, 1, 7, 2**40, 2**63 - 1],
        [-math.inf, -1e300, -2.5, -1e-300, 0.0, 1e-300, 2.5, 1e300, math.inf],
        ["", "\x00", "\x00\x00", "a", "a\x00", "a\x00b", "ab", "b", "é"],
        [b"", b"\x00", b"\x00\xff", b"\x01", b"\xff"],
        [(), (0,), (0, 0), (0, "a"), (1,), (1, None)],
    ],
)
def test_byte_order_is_value_order_within_a_type(values):
    shuffled = values[:]
    random.Random(1).shuffle(shuffled)
    assert sorted(shuffled, key=encode_key) == values


def test_encoding_is_fixed():
    """These bytes are on disk in RocksDB instances and native checkpoints: never change them."""
    assert encode_key(None) == b"\x01"
    assert encode_key(False) == b"\x02" and encode_key(True) == b"\x03"
    assert encode_key(1) == b"\x04\x80\x00\x00\x00\x00\x00\x00\x01"
    assert encode_key(-1) == b"\x04\x7f\xff\xff\xff\xff\xff\xff\xff"
    assert encode_key(1.0) == b"\x05\xbf\xf0\x00\x00\x00\x00\x00\x00"
    assert encode_key(b"a\x00") == b"\x06a\x00\xff\x00\x01"
    assert encode_key("hé") == b"\x07h\xc3\xa9\x00\x01"
    assert encode_key((1, None)) == b"\x08\x04\x80\x00\x00\x00\x00\x00\x00\x01\x01\x00"


def test_equal_python_values_of_different_types_stay_apart():
    assert len({encode_key(v) for v in (1, 1.0, True)}) == 3


def test_numpy_scalars_encode_as_python_numbers():
    assert encode_key(np.int64(5)) == encode_key(5)
    assert encode_key(np.float64(2.5)) == encode_key(2.5)


def _id(value) -> str:
    """The repr of a case, without the address of a bare object() (the same id in every xdist worker)."""
    return "object()" if type(value) is object else repr(value)


@pytest.mark.parametrize("bad", [[1], {"a": 1}, object(), 2**63, -(2**63) - 1, (1, [2])], ids=_id)
def test_unsupported_keys_are_refused(bad):
    with pytest.raises(SerializationError):
        encode_key(bad)


@pytest.mark.parametrize("raw", [b"", b"\x04\x00", b"\x07abc", b"\x07a\x00\x05", b"\x08\x01", b"\x2a"], ids=repr)
def test_corrupt_input_is_reported(raw):
    with pytest.raises(SerializationError):
        decode_key(raw, 0)


def test_prefix_successor_bounds_every_extension():
    assert prefix_successor(b"\x01\x02") == b"\x01\x03"
    assert prefix_successor(b"\x01\xff") == b"\x02"
    assert prefix_successor(b"\xff\xff") is None
    p = b"\x05" + encode_key("k")
    hi = prefix_successor(p)
    for tail in (b"", b"\x00", b"\xff" * 8, encode_key(3.5)):
        assert p <= p + tail < hi

"""explorer.keygroups against Apache Flink's own KeyGroupRangeAssignment.

The vectors in tests/data/flink_keygroup_vectors.json were printed by Flink
(tests/tooling/flink_keygroups/generate.sh); nothing here is hard-coded.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np
import pytest

from explorer.errors import KeyGroupError, KeyTypeError
from explorer.keygroups import (
    JavaInt,
    assign_key_groups,
    assign_to_key_group,
    check_parallelism,
    compute_default_max_parallelism,
    java_hash_code,
    key_group_range_for_operator,
    operator_index_for_key_group,
    operator_indices_for_key_groups,
)

VECTORS_PATH = Path(__file__).parent / "data" / "flink_keygroup_vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
MAX_PARALLELISMS: list[int] = VECTORS["max_parallelisms"]


def to_python(desc):
    """Rebuild the Python key that stands for the Java value Flink hashed."""
    if desc is None:
        return None
    t = desc["t"]
    if t == "string":
        return desc["v"]
    if t == "long":
        return int(desc["v"])
    if t == "int":
        return JavaInt(int(desc["v"]))
    if t == "boolean":
        return bool(desc["v"])
    if t == "double":
        bits = int(desc["bits"], 16)
        return struct.unpack(">d", bits.to_bytes(8, "big"))[0]
    if t == "tuple":
        return tuple(to_python(f) for f in desc["f"])
    raise AssertionError(f"unknown key description {desc!r}")


KEYS = [(to_python(row["key"]), row) for row in VECTORS["keys"]]


def _types(desc) -> set[str]:
    return {desc["t"]} | ({t for f in desc["f"] if f for t in _types(f)} if desc["t"] == "tuple" else set())


def test_vectors_cover_every_key_type():
    kinds = {row["key"]["t"] for row in VECTORS["keys"]}
    assert kinds == {"string", "long", "int", "boolean", "double", "tuple"}
    strings = [k for k, _ in KEYS if isinstance(k, str)]
    assert "" in strings
    assert any(any(ord(c) > 0xFFFF for c in s) for s in strings), "no surrogate pair in the vectors"
    assert any(any(0x4E00 <= ord(c) <= 0x9FFF for c in s) for s in strings), "no CJK in the vectors"
    floats = [k for k, _ in KEYS if isinstance(k, float)]
    assert any(math.isnan(f) for f in floats) and any(math.isinf(f) for f in floats)
    assert any(f == 0.0 and math.copysign(1, f) < 0 for f in floats)
    assert any(isinstance(k, tuple) and None in k for k, _ in KEYS)
    assert len(KEYS) >= 300


@pytest.mark.parametrize("key,row", KEYS, ids=[str(i) for i in range(len(KEYS))])
def test_scalar_matches_flink(key, row):
    assert java_hash_code(key) == row["hash_code"]
    got = [assign_to_key_group(key, m) for m in MAX_PARALLELISMS]
    assert got == row["key_groups"]


@pytest.mark.parametrize("max_parallelism", MAX_PARALLELISMS)
def test_vectorised_matches_flink_on_mixed_keys(max_parallelism):
    j = MAX_PARALLELISMS.index(max_parallelism)
    keys = [k for k, _ in KEYS]
    expected = np.array([row["key_groups"][j] for _, row in KEYS])
    np.testing.assert_array_equal(assign_key_groups(keys, max_parallelism), expected)


@pytest.mark.parametrize("max_parallelism", MAX_PARALLELISMS)
@pytest.mark.parametrize("kind", ["long", "double", "boolean", "string", "tuple"])
def test_vectorised_matches_flink_per_type(kind, max_parallelism):
    j = MAX_PARALLELISMS.index(max_parallelism)
    rows = [(k, row) for k, row in KEYS if row["key"]["t"] == kind]
    assert rows, kind
    expected = np.array([row["key_groups"][j] for _, row in rows])
    keys = [k for k, _ in rows]
    if kind == "long":
        arrays = [np.array(keys, dtype=np.int64), keys]
    elif kind == "double":
        arrays = [np.array(keys, dtype=np.float64), keys]
    elif kind == "boolean":
        arrays = [np.array(keys, dtype=bool), keys]
    else:
        arrays = [keys]
    for arr in arrays:
        np.testing.assert_array_equal(assign_key_groups(arr, max_parallelism), expected)


def test_vectorised_accepts_arrow_and_pandas_columns():
    pa = pytest.importorskip("pyarrow")
    pd = pytest.importorskip("pandas")
    rows = [(k, row) for k, row in KEYS if row["key"]["t"] in ("long", "string")]
    for kind in ("long", "string"):
        sel = [(k, r) for k, r in rows if r["key"]["t"] == kind]
        keys = [k for k, _ in sel]
        for j, m in enumerate(MAX_PARALLELISMS):
            expected = np.array([r["key_groups"][j] for _, r in sel])
            np.testing.assert_array_equal(assign_key_groups(pa.array(keys), m), expected)
            np.testing.assert_array_equal(assign_key_groups(pd.Series(keys), m), expected)


@pytest.mark.parametrize(
    "case", VECTORS["operator_ranges"], ids=lambda c: f"M{c['max_parallelism']}-p{c['parallelism']}"
)
def test_operator_ranges_match_flink(case):
    m, p = case["max_parallelism"], case["parallelism"]
    got = [key_group_range_for_operator(m, p, i).to_list() for i in range(p)]
    assert got == case["ranges"]
    for kg, owner in case["owners"]:
        assert operator_index_for_key_group(m, p, kg) == owner
    kgs = np.array([kg for kg, _ in case["owners"]])
    np.testing.assert_array_equal(
        operator_indices_for_key_groups(m, p, kgs), np.array([o for _, o in case["owners"]])
    )


@pytest.mark.parametrize("p,expected", VECTORS["default_max_parallelism"])
def test_default_max_parallelism_matches_flink(p, expected):
    assert compute_default_max_parallelism(p) == expected


# --- properties of the range rules ------------------------------------------------------


@pytest.mark.parametrize("m", [1, 2, 7, 128, 1000, 4096, 32768])
@pytest.mark.parametrize("p", [1, 2, 3, 7, 64, 100, 1000])
def test_every_key_group_has_exactly_one_owner(m, p):
    if p > m:
        with pytest.raises(KeyGroupError):
            key_group_range_for_operator(m, p, 0)
        return
    ranges = [key_group_range_for_operator(m, p, i) for i in range(p)]
    # contiguous, in order, non-empty, covering 0..m-1 exactly once
    assert ranges[0].start == 0 and ranges[-1].end == m - 1
    for a, b in zip(ranges, ranges[1:]):
        assert b.start == a.end + 1
    assert all(len(r) >= 1 for r in ranges)
    assert sum(len(r) for r in ranges) == m
    owners = operator_indices_for_key_groups(m, p, np.arange(m))
    for i, r in enumerate(ranges):
        assert set(np.flatnonzero(owners == i)) == set(r)
    # range sizes differ by at most one
    sizes = {len(r) for r in ranges}
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(
    "p,m,fragment",
    [
        (0, 128, "parallelism must be a positive integer, found 0"),
        (-3, 128, "found -3"),
        (4, 0, "max parallelism must be in 1..32768, found 0"),
        (4, 32769, "found 32769"),
        (200, 128, "parallelism 200 is larger than max parallelism 128"),
    ],
)
def test_check_parallelism_errors_are_clear(p, m, fragment):
    with pytest.raises(KeyGroupError, match=fragment):
        check_parallelism(p, m)


def test_key_group_and_index_bounds_are_checked():
    with pytest.raises(KeyGroupError, match="key group 128 is outside 0..127"):
        operator_index_for_key_group(128, 4, 128)
    with pytest.raises(KeyGroupError, match="subtask index 4 is outside 0..3"):
        key_group_range_for_operator(128, 4, 4)
    with pytest.raises(KeyGroupError, match="max parallelism"):
        assign_to_key_group("a", 0)
    with pytest.raises(KeyGroupError, match="max parallelism"):
        assign_key_groups(["a"], 40000)


def test_unreproducible_keys_are_refused():
    with pytest.raises(KeyTypeError, match="does not fit in a Java long"):
        java_hash_code(1 << 63)
    with pytest.raises(KeyTypeError, match="None"):
        java_hash_code(None)
    with pytest.raises(KeyTypeError, match="empty tuple"):
        java_hash_code(())
    with pytest.raises(KeyTypeError, match="bytes"):
        java_hash_code(b"x")
    with pytest.raises(KeyTypeError, match="32-bit"):
        JavaInt(1 << 31)


@pytest.mark.parametrize("max_parallelism", MAX_PARALLELISMS)
def test_key_groups_for_hash_codes_matches_flink(max_parallelism):
    from explorer.keygroups import key_groups_for_hash_codes

    j = MAX_PARALLELISMS.index(max_parallelism)
    codes = np.array([row["hash_code"] for _, row in KEYS], dtype=np.int64)
    expected = np.array([row["key_groups"][j] for _, row in KEYS])
    np.testing.assert_array_equal(key_groups_for_hash_codes(codes, max_parallelism), expected)
    np.testing.assert_array_equal(key_groups_for_hash_codes(codes.astype(np.int32), max_parallelism), expected)

"""The sliced key join and the per-key sums of a Snapshot diff (explorer.analysis.diff) give the
answers of exact lookups and of the DataFrame path, whatever the key order, groups and hashes."""

import importlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import explorer
from explorer.analysis._keys import KeyValues
from explorer.analysis._hashing import string_hash64
from explorer.analysis.diff import _joint_by_hash, _joint_by_lookup, _side_keys, diff

from benchmarks.bench_explorer import build_savepoint

diff_module = importlib.import_module("explorer.analysis.diff")


def _keys(ids, width: int = 8) -> list[str]:
    return [f"k-{i:0{width}d}" for i in ids]


def _join(a_keys, b_keys, ga=None, gb=None):
    kva, kvb = KeyValues([pa.array(a_keys)]), KeyValues([pa.array(b_keys)])
    got = _joint_by_hash(kva, kvb, ga, gb)
    want = _joint_by_lookup(kva, kvb)
    return got, want


def _groups(ids, m: int = 16) -> np.ndarray:
    return (np.asarray(ids) * 7 % m).astype(np.int32)


def _grouped(ids, m: int = 16):
    """ids sorted by group (stable), and their groups: keys written key group by key group."""
    g = _groups(ids, m)
    order = np.argsort(g, kind="stable")
    return [ids[i] for i in order], g[order]


@pytest.fixture(autouse=True)
def small_slices(monkeypatch):
    monkeypatch.setattr(diff_module, "_SLICE_KEYS", 64)  # slice joins of a few hundred keys too


@pytest.mark.parametrize("width", [4, 8, 13, 30])  # padded word, one word, overlapping words, many words
def test_sliced_join_equals_lookup(width):
    rng = np.random.default_rng(width)
    ids_a = list(range(0, 3000))
    ids_b = [i for i in range(40, 3200) if i % 17]  # removed, added, and holes
    a, ga = _grouped(ids_a)
    b, gb = _grouped(ids_b)
    got, want = _join(_keys(a, width), _keys(b, width), ga, gb)
    assert (got == want).all() and (got >= 0).sum() > 2000
    # within each group b lists its keys in another order: still every key found
    perm = np.concatenate([rng.permutation(np.flatnonzero(gb == g)) for g in np.unique(gb)])
    got, want = _join(_keys(a, width), _keys([b[i] for i in perm], width), ga, gb[perm])
    assert (got == want).all()


def test_groups_that_differ_between_the_sides_never_change_the_answer():
    a, ga = _grouped(list(range(2000)))
    b, gb = _grouped(list(range(100, 2100)))
    shifted = (gb + 5).astype(np.int32)  # every key of b in another slice than in a
    got, want = _join(_keys(a), _keys(b), ga, shifted)
    assert (got == want).all() and (got >= 0).sum() == 1900
    falling = ga[::-1].copy()  # groups that do not rise with the codes: one join of everything
    got, want = _join(_keys(a), _keys(b), falling, gb)
    assert (got == want).all()


def _shuffled_in_groups(keys, groups, seed=5):
    rng = np.random.default_rng(seed)
    perm = np.concatenate([rng.permutation(np.flatnonzero(groups == g)) for g in np.unique(groups)])
    return [keys[i] for i in perm], groups[perm]


@pytest.mark.parametrize("shuffled", [False, True])  # b in a's order (next-key guesses) or not (the hash table)
@pytest.mark.parametrize("weak", ["constant", "three_values", "low_bits"])
@pytest.mark.parametrize("width", [5, 13])
def test_collisions_never_match_different_keys(monkeypatch, weak, width, shuffled):
    real = KeyValues.hash64

    def colliding(self):  # still equal for equal keys, but shared by many
        h = real(self)
        return {"constant": np.zeros_like(h), "three_values": h % np.uint64(3), "low_bits": h & np.uint64(0xFF)}[weak]

    monkeypatch.setattr(KeyValues, "hash64", colliding)
    monkeypatch.setattr(diff_module, "_PROBE_BUDGET", 1 << 20)  # long chains: still the kernel's answer
    a, ga = _grouped(list(range(600)))
    b, gb = _grouped(list(range(50, 700)))
    if shuffled:
        b, gb = _shuffled_in_groups(b, gb)
    got, want = _join(_keys(a, width), _keys(b, width), ga, gb)
    assert got is not None and (got == want).all() and (got >= 0).sum() == 550


def test_chains_past_the_budget_fall_back_to_exact_lookup(monkeypatch):
    real = KeyValues.hash64
    monkeypatch.setattr(KeyValues, "hash64", lambda self: np.zeros_like(real(self)))  # one chain of every key
    monkeypatch.setattr(diff_module, "_PROBE_BUDGET", 0)
    a, ga = _grouped(list(range(3000)))
    b, gb = _shuffled_in_groups(*_grouped(list(range(50, 3100))))
    kva, kvb = KeyValues([pa.array(_keys(a))]), KeyValues([pa.array(_keys(b))])
    assert _joint_by_hash(kva, kvb, ga, gb) is None  # the hash join gave up ...
    got, _ = diff_module._joint_codes_of(kva, kvb, ga, gb)  # ... and the diff looked the keys up instead
    want = _joint_by_lookup(kva, kvb)
    assert (got[want >= 0] == want[want >= 0]).all() and (got[want < 0] >= len(a)).all()


@pytest.mark.parametrize("key_type", [pa.int64(), pa.int32(), pa.binary(), pa.large_string()])
def test_join_of_other_key_types_equals_lookup(key_type):
    ids_a, ids_b = list(range(0, 900)), [i for i in range(100, 1000) if i % 7]

    def arr(ids):
        if pa.types.is_integer(key_type):
            return pa.array([i * 7919 - 5000 for i in ids], key_type)
        return pa.array([f"k{i}".encode() if key_type == pa.binary() else f"k{i}" for i in ids], key_type)
    kva, kvb = KeyValues([arr(ids_a)]), KeyValues([arr(ids_b[::-1])])
    got = _joint_by_hash(kva, kvb)
    assert got is not None and (got == _joint_by_lookup(kva, kvb)).all()
    assert (got >= 0).sum() == len(set(ids_a) & set(ids_b))


def test_kernels_refuse_offsets_and_rows_out_of_range():
    from explorer.analysis import _diff_kernels as kernels

    h = np.zeros(2, dtype=np.uint64)
    data = np.frombuffer(b"abcdabcd", dtype=np.uint8)
    good = np.array([0, 4, 8], dtype=np.int64)
    bad = np.array([0, 4, 80], dtype=np.int64)  # the second key ends past the data
    slices = np.array([[0, 2, 0, 2]], dtype=np.int64)
    tr, found = np.full(2, -1, dtype=np.int64), np.zeros(2, dtype=bool)
    assert kernels.join_slices(h, h, good, data, good, data, slices, tr, found, 1000) == kernels.OK
    assert tr.tolist() == [0, 1]
    tr[:] = -1
    assert kernels.join_slices(h, h, good, data, bad, data, slices, tr, found, 1000) == kernels.BAD_OFFSETS
    wide = np.array([[0, 3, 0, 2]], dtype=np.int64)  # a slice past a's keys
    assert kernels.join_slices(h, h, good, data, good, data, wide, tr, found, 1000) == kernels.BAD_OFFSETS
    assert not kernels.gather_strings(np.array([1]), 2, bad, data, good, data, np.zeros(0, np.int64))[2]
    assert not kernels.gather_strings(np.array([5]), 2, good, data, good, data, np.zeros(0, np.int64))[2]
    codes, fp = np.array([0, 1], dtype=np.int64), np.zeros(2, dtype=np.uint64)
    assert not kernels.side_sums(codes, fp, codes, np.array([[0, 3]]), 2, codes[:0])[5]
    assert not kernels.side_sums(codes, fp, codes, np.array([[0, 2]]), 1, codes[:0])[5]  # code 1 of 1 code
    assert kernels.rising(codes, np.array([[0, 2]]), 1) == -1
    assert len(kernels.b_order(codes, np.array([[0, 2]]), np.array([0]), 2, np.zeros(0, np.int32))) == 0


@pytest.mark.parametrize("width", [5, 13, 20])
def test_two_keys_of_one_hash_are_not_matched(monkeypatch, width):
    """Keys that differ only in their last byte hash alike: each such pair (one key per side)
    is a run of two in the sort, which only an exact comparison can turn down."""
    def last_byte_ignored(self):
        seg = self.segments[0]
        return string_hash64(pc.utf8_slice_codeunits(seg, 0, -1))

    monkeypatch.setattr(KeyValues, "hash64", last_byte_ignored)
    ids_a = [i for i in range(0, 800, 2)]  # even ids; b: the odd neighbour of most, and some of the same
    ids_b = [i + 1 for i in ids_a if i % 10] + [i for i in ids_a if i % 10 == 0]
    a, ga = _grouped(ids_a)
    b, gb = _grouped(ids_b)
    got, want = _join(_keys(a, width), _keys(b, width), ga, gb)
    assert (got == want).all() and (got >= 0).sum() == 80


def _reference_sums(codes, h, size):
    df = pd.DataFrame({"c": codes, "h": h, "s": size})
    g = df.groupby("c", sort=True)
    fp = g["h"].apply(lambda x: np.add.reduce(x.to_numpy(), dtype=np.uint64)).to_numpy(dtype=np.uint64)
    return g.size().index.to_numpy(), g.size().to_numpy(), g["s"].sum().to_numpy(), fp


@pytest.mark.parametrize("spans", [False, True])
@pytest.mark.parametrize("layout", ["one_per_key", "runs", "scattered"])
def test_per_key_sums_of_every_layout(layout, spans):
    rng = np.random.default_rng(3)
    keys = np.sort(rng.choice(5000, 800, replace=False))
    if layout == "one_per_key":
        codes = keys
    else:
        codes = np.repeat(keys, rng.integers(1, 6, len(keys)))
        if layout == "scattered":
            codes = rng.permutation(codes)
    h = rng.integers(0, 2**63, len(codes), dtype=np.uint64) * np.uint64(2)
    size = rng.integers(1, 100, len(codes))
    rows = [(0, len(codes) // 3), (len(codes) // 3, len(codes))] if spans else slice(0, len(codes))
    got = _side_keys(codes, rows, h, size, 5000)
    want = _reference_sums(codes, h, size)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w))


@pytest.fixture(scope="module")
def bench_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-diff")
    return build_savepoint(root / "a", 3000), build_savepoint(root / "b", 3000, variant=True)


@pytest.mark.parametrize("halves", [False, True])  # each state merged whole, or in two halves on two threads
@pytest.mark.parametrize("unchanged", [True, False])
def test_engine_savepoints_diff_like_their_frames(bench_pair, unchanged, halves, monkeypatch):
    if halves:
        monkeypatch.setattr(diff_module, "_HALF_KEYS", 16)
    a, b = (explorer.open(p) for p in bench_pair)
    fast = diff(a, b, unchanged=unchanged)  # fixed-width keys, key groups in order: sliced join, word compare
    slow = diff(a.keyed_state(), b.keyed_state(), unchanged=unchanged)
    pd.testing.assert_frame_equal(fast, slow)
    # the variant: ids 0..14 gone, 3000..3014 new, ids ending in 07 counted once more
    count = fast[fast["state"] == "count"]
    by = {s: set(count.loc[count["status"] == s, "key"]) for s in ("added", "removed", "changed")}
    assert by["removed"] == {f"user-{i:08d}" for i in range(15)}
    assert by["added"] == {f"user-{i:08d}" for i in range(3000, 3015)}
    assert by["changed"] == {f"user-{i:08d}" for i in range(15, 3000) if i % 100 == 7}


def test_string_keys_are_arrow_backed_on_both_paths_and_merge_with_keyed_state(bench_pair):
    from explorer.analysis.diff import KEY_STRINGS

    a, b = (explorer.open(p) for p in bench_pair)
    for d in (diff(a, b), diff(a.keyed_state(), b.keyed_state()), diff(a, b, unchanged=False)):
        assert d["key"].dtype == KEY_STRINGS and d["key"].array._pa_array.type in (pa.string(), pa.large_string())
    d = diff(a, b)
    ks = b.keyed_state(state="count")[["key", "value"]]  # keys as Python objects
    assert ks["key"].dtype == object
    merged = d[d["state"] == "count"].merge(ks, on="key", how="left")
    in_b = merged["status"] != "removed"
    assert len(merged) == (d["state"] == "count").sum()
    assert merged.loc[in_b, "value"].notna().all() and merged.loc[~in_b, "value"].isna().all()
    back = ks.merge(d[["key", "status"]].drop_duplicates("key"), on="key")  # and the other way round
    assert len(back) == len(ks)


def test_integer_keys_stay_python_objects_on_both_paths(tmp_path):
    a = explorer.open(build_savepoint(tmp_path / "a", 400, key_type="int"))
    b = explorer.open(build_savepoint(tmp_path / "b", 400, key_type="int", variant=True))
    fast, slow = diff(a, b), diff(a.keyed_state(), b.keyed_state())
    assert fast["key"].dtype == object and isinstance(fast["key"].iloc[0], int)
    pd.testing.assert_frame_equal(fast, slow)


def test_a_diff_that_lists_nothing_has_the_same_columns_on_both_paths(bench_pair):
    a = explorer.open(bench_pair[0])
    fast, slow = diff(a, a, unchanged=False), diff(a.keyed_state(), a.keyed_state(), unchanged=False)
    assert len(fast) == 0
    pd.testing.assert_frame_equal(fast, slow)

"""The sliced key join and the per-key sums of a Snapshot diff (explorer.analysis.diff) give the
answers of exact lookups and of the DataFrame path, whatever the key order, groups and hashes."""

import importlib

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import explorer
from explorer.analysis._columns import KeyValues
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


@pytest.mark.parametrize("weak", ["constant", "three_values", "low_bits"])
@pytest.mark.parametrize("width", [5, 13])
def test_collisions_never_match_different_keys(monkeypatch, weak, width):
    real = KeyValues.hash64

    def colliding(self):  # still equal for equal keys, but shared by many
        h = real(self)
        return {"constant": np.zeros_like(h), "three_values": h % np.uint64(3), "low_bits": h & np.uint64(0xFF)}[weak]

    monkeypatch.setattr(KeyValues, "hash64", colliding)
    a, ga = _grouped(list(range(600)))
    b, gb = _grouped(list(range(50, 700)))
    got, want = _join(_keys(a, width), _keys(b, width), ga, gb)
    assert (got == want).all() and (got >= 0).sum() == 550


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


@pytest.mark.parametrize("layout", ["one_per_key", "runs", "scattered"])
def test_per_key_sums_of_every_layout(layout):
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
    got = _side_keys(codes, slice(0, len(codes)), h, size, 5000)
    want = _reference_sums(codes, h, size)
    for g, w in zip(got, want):
        assert np.array_equal(np.asarray(g), np.asarray(w))


@pytest.fixture(scope="module")
def bench_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("bench-diff")
    return build_savepoint(root / "a", 3000), build_savepoint(root / "b", 3000, variant=True)


@pytest.mark.parametrize("unchanged", [True, False])
def test_engine_savepoints_diff_like_their_frames(bench_pair, unchanged):
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

"""The cached analysis columns: keys as Arrow dictionary codes, turned back into keys on demand."""

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import explorer
from explorer.analysis._columns import arrow_hash, cached_frame, row_hashes
from explorer.analysis._keys import KeyValues, key_codes
from explorer.keygroups import key_groups_of
from explorer.keygroups import assign_key_groups


def test_key_values_over_arrow_segments():
    kv = KeyValues([pa.array(["a", "b", "c"]), pa.array([10, 20], pa.int64())])
    assert len(kv) == 5
    assert kv.take([2, 0, 4, 3]).tolist() == ["c", "a", 20, 10]
    assert kv.codes_of(["b", 20, "zz", 99]).tolist() == [1, 4, -1, -1]
    assert kv.key_groups(128).tolist() == assign_key_groups(["a", "b", "c"], 128).tolist() + \
        assign_key_groups([10, 20], 128).tolist()
    import copy

    assert copy.deepcopy(kv) is kv  # shared through DataFrame.attrs, never copied


def test_key_values_over_python_objects():
    keys = np.empty(2, dtype=object)
    keys[0], keys[1] = ("a", 1), ("b", 2)
    kv = KeyValues.from_objects(keys)
    assert kv.codes_of([("b", 2), ("a", 1), ("c", 3)]).tolist() == [1, 0, -1]
    assert kv.take([1]).tolist() == [("b", 2)]


def test_key_codes_of_a_plain_frame():
    df = pd.DataFrame({"key": ["x", "y", "x"]})
    codes, kv = key_codes(df)
    assert kv.take(codes).tolist() == ["x", "y", "x"]


def test_ascii_key_groups_match_flink():
    keys = ["", "a", "user-00000001", "hot-a", "x" * 64, "Zürich"]
    assert key_groups_of(np.array(keys, dtype=object), 128).tolist() == assign_key_groups(keys, 128).tolist()
    assert key_groups_of(pa.array(keys[:5]), 4096).tolist() == assign_key_groups(keys[:5], 4096).tolist()


@pytest.mark.parametrize("arr", [pa.array([1, None, 1]), pa.array(["x", None, "x"]),
                                 pa.array([{"a": 1, "b": "q"}, None, {"a": 1, "b": "q"}]),
                                 pa.array([[1, 2], None, [1, 2]])])
def test_arrow_hash_equal_values_equal_hashes(arr):
    h = arrow_hash(arr)
    assert h.dtype == np.uint64 and h[0] == h[2] and h[0] != h[1]


def test_cached_frame_matches_keyed_state(planted_job):
    snap = explorer.open(planted_job.savepoint)
    cf = cached_frame(snap)
    ks = snap.keyed_state()
    assert len(cf) == len(ks)
    codes, kv = key_codes(cf)
    assert kv.take(codes).tolist() == ks["key"].tolist()
    for c in ("key_group", "subtask", "size_bytes"):
        assert (cf[c].to_numpy() == ks[c].to_numpy()).all()
    assert cf["state"].astype(str).tolist() == ks["state"].tolist()
    assert cached_frame(snap) is cf  # loaded once per Snapshot
    ev = cached_frame(snap, state="events")
    assert (ev["state"] == "events").all() and len(ev) == 1500
    assert len(row_hashes(snap)) == len(cf)
    snap.drop_analysis_cache()
    assert cached_frame(snap) is not cf


def test_entries_are_hashed_while_loading_only_when_arrow_can(planted_job):
    from explorer.analysis._columns import _hashed_in_arrow

    assert _hashed_in_arrow(pa.int64()) and _hashed_in_arrow(pa.string())
    assert _hashed_in_arrow(pa.struct([("a", pa.int64()), ("b", pa.string())]))
    assert not _hashed_in_arrow(pa.list_(pa.int64()))
    assert not _hashed_in_arrow(pa.struct([("a", pa.map_(pa.string(), pa.int64()))]))
    snap = explorer.open(planted_job.savepoint)
    cached_frame(snap)
    kept = snap.analysis_cache.row_hashes  # hashed while loading
    snap.analysis_cache.row_hashes = None
    assert (row_hashes(snap) == kept).all()  # the same as reading the entries again

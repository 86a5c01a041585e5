"""The cache's byte ranges: a ranged read fetches only the gaps the cache does not hold, keeps them,
checks each kept piece's CRC-32 before serving it, drops the ranges of a changed object, becomes the
whole-file entry once the pieces cover the object, and counts against the LRU bound. Then on the real
S3 server: a second key-group question (Parquet row groups, Flink key-group spans) fetches nothing."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.errors import StorageError
from explorer.storage import FileCache, fetch_stats, reset_fetch_stats

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
_n = itertools.count()
BLOB = bytes(range(256)) * 64  # 16 KiB


class Remote:
    """An object's bytes and every fetch asked of it."""

    def __init__(self, data: bytes = BLOB) -> None:
        self.data, self.calls = data, []

    def __call__(self, start: int, n: int) -> bytes:
        self.calls.append((start, n))
        return self.data[start:start + n]


def _read(cache, remote, offset, n, mtime=1, url="s3://b/x"):
    return cache.read_range(FileCache.key("s", url), url, len(remote.data), mtime, offset, n, remote)


def test_only_the_gaps_are_fetched_and_a_repeat_fetches_nothing(tmp_path):
    cache, remote = FileCache(tmp_path, max_bytes=1 << 20), Remote()
    assert _read(cache, remote, 100, 50) == (BLOB[100:150], 50)
    assert _read(cache, remote, 1000, 100) == (BLOB[1000:1100], 100)
    remote.calls.clear()
    data, fetched = _read(cache, remote, 120, 1000)  # overlaps both pieces: two gaps
    assert data == BLOB[120:1120] and remote.calls == [(150, 850), (1100, 20)] and fetched == 870
    remote.calls.clear()
    assert _read(cache, remote, 100, 1020) == (BLOB[100:1120], 0) and remote.calls == []
    assert cache.ranges_held(FileCache.key("s", "s3://b/x")) == [(100, 1120)]
    # another cache object on the same folder (another process) reads the pieces from disk
    other = FileCache(tmp_path, max_bytes=1 << 20)
    assert _read(other, remote, 110, 900) == (BLOB[110:1010], 0) and remote.calls == []
    assert _read(other, remote, len(BLOB) - 10, 100) == (BLOB[-10:], 10)  # (short at the end)


def test_a_damaged_piece_is_dropped_and_fetched_again(tmp_path):
    cache, remote = FileCache(tmp_path, max_bytes=1 << 20), Remote()
    key = FileCache.key("s", "s3://b/x")
    _read(cache, remote, 0, 4096)
    part = next(tmp_path.rglob("*.part"))
    with open(part, "r+b") as f:
        f.seek(10)
        f.write(b"\xff\xfe")
    fresh = FileCache(tmp_path, max_bytes=1 << 20)  # (has not checked the piece yet)
    remote.calls.clear()
    assert _read(fresh, remote, 0, 100) == (BLOB[:100], 100) and remote.calls == [(0, 100)]
    assert fresh.ranges_held(key) == [(0, 100)]  # the damaged piece went, the refetched one stays
    remote.calls.clear()
    assert _read(FileCache(tmp_path, max_bytes=1 << 20), remote, 0, 100) == (BLOB[:100], 0)


def test_a_changed_object_drops_its_ranges(tmp_path):
    cache, remote = FileCache(tmp_path, max_bytes=1 << 20), Remote()
    _read(cache, remote, 0, 1000, mtime=1)
    changed = Remote(bytes(reversed(BLOB)))
    assert _read(cache, changed, 0, 1000, mtime=2) == (changed.data[:1000], 1000)
    assert _read(cache, changed, 500, 100, mtime=2) == (changed.data[500:600], 0)


def test_ranges_covering_the_object_become_its_whole_file_entry(tmp_path):
    cache, remote = FileCache(tmp_path, max_bytes=1 << 20), Remote()
    key = FileCache.key("s", "s3://b/x")
    _read(cache, remote, 0, 10000)
    assert cache.lookup(key, len(BLOB), 1) is None
    _read(cache, remote, 9000, len(BLOB))
    whole = cache.lookup(key, len(BLOB), 1)
    assert whole is not None and whole.read_bytes() == BLOB
    assert not list(tmp_path.rglob("*.part")) and cache.size() == len(BLOB)


def test_range_entries_count_against_the_bound_and_go_least_recently_used_first(tmp_path):
    cache = FileCache(tmp_path, max_bytes=40 << 10)
    blobs = {u: Remote(os.urandom(64 << 10)) for u in ("s3://b/1", "s3://b/2", "s3://b/3")}
    for i, (u, r) in enumerate(blobs.items()):
        _read(cache, r, 0, 16 << 10, url=u)
        os.utime(next(tmp_path.rglob(f"{FileCache.key('s', u)}.part")), (1000 + i, 1000 + i))
    assert cache.size() <= 40 << 10
    held = [u for u in blobs if cache.ranges_held(FileCache.key("s", u))]
    assert held == ["s3://b/2", "s3://b/3"]  # the first went
    big = Remote(os.urandom(64 << 10))  # more than half the bound in one read: read through, not kept
    assert _read(cache, big, 0, 30 << 10, url="s3://b/big") == (big.data[:30 << 10], 30 << 10)
    assert cache.ranges_held(FileCache.key("s", "s3://b/big")) == []


def test_a_short_fetch_is_an_error_and_nothing_is_kept(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1 << 20)
    short = Remote()
    short.data = BLOB[:100]
    with pytest.raises(StorageError, match=r"s3://b/x: fetched 0 bytes at offset 200, expected 50"):
        cache.read_range(FileCache.key("s", "s3://b/x"), "s3://b/x", len(BLOB), 1, 200, 50, short)
    assert cache.ranges_held(FileCache.key("s", "s3://b/x")) == []


# --- on the real S3 server ------------------------------------------------------------------

def _sorted(df: pd.DataFrame) -> pd.DataFrame:
    df = df.astype(str)
    return df.sort_values(list(df.columns), ignore_index=True)


@pytest.mark.parametrize("rel", ["url_counts/savepoint-heap", "flink/heap-canonical-savepoint",
                                 "flink/heap-checkpoint-compressed"])
def test_a_second_ranged_question_is_served_by_the_cache(s3, rel):
    """Parquet row groups (engine) and Flink key-group spans are read by range: the second time, in a
    fresh open with the same cache folder, no byte of state is fetched and the answer is the same."""
    local = SAMPLES / rel
    url = s3.upload(local, "snapshots", f"ranges-{next(_n)}")
    here = explorer.open(local)
    rows = here.keyed_state()
    kgs = sorted(set(rows["key_group"]))[:3]
    snap = explorer.open(url)  # (its _metadata is fetched whole)
    reset_fetch_stats()
    first = snap.keyed_state(key_groups=kgs)
    cold = fetch_stats()
    assert cold["ranged_reads"] > 0 and cold["files_fetched"] == 0, cold
    snap = explorer.open(url)
    reset_fetch_stats()
    second = snap.keyed_state(key_groups=kgs)
    warm = fetch_stats()
    assert warm["bytes_fetched"] == 0 and warm["ranged_reads"] == 0, warm
    # (served by the ranges held, or by the whole-file entry they became when they covered a file)
    assert warm["bytes_from_cache"] > 0 or warm["cache_hits"] > 0, warm
    pd.testing.assert_frame_equal(_sorted(second), _sorted(first))
    pd.testing.assert_frame_equal(_sorted(first), _sorted(here.keyed_state(key_groups=kgs)))
    # more key groups: only the spans not yet held are fetched
    more = sorted(set(rows["key_group"]))[:6]
    snap = explorer.open(url)
    reset_fetch_stats()
    got = snap.keyed_state(key_groups=more)
    extra = fetch_stats()
    pd.testing.assert_frame_equal(_sorted(got), _sorted(here.keyed_state(key_groups=more)))
    assert extra["bytes_fetched"] < cold["bytes_fetched"] + (64 << 10), (extra, cold)

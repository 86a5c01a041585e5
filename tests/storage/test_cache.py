"""The cache of fetched files: validated against size and modification time, bounded by LRU
eviction, and fetched once when threads and processes ask for the same file together."""

from __future__ import annotations

import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from explorer.errors import StorageError
from explorer.storage import FileCache, parse_size


def _writer(data: bytes, calls: list | None = None):
    def write(f):
        if calls is not None:
            calls.append(1)
        f.write(data)
    return write


def test_entry_is_used_only_while_size_and_mtime_match(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1 << 20)
    key = FileCache.key("s3|test", "s3://b/x")
    path, fetched = cache.store(key, "s3://b/x", 5, 111, _writer(b"hello"))
    assert fetched and path.read_bytes() == b"hello"
    assert cache.lookup(key, 5, 111) == path
    assert cache.lookup(key, 5, 222) is None  # the object was replaced
    assert cache.lookup(key, 6, 111) is None  # ... or has another size
    path.write_bytes(b"hell")  # the cached bytes were damaged
    assert cache.lookup(key, 5, 111) is None
    path2, fetched = cache.store(key, "s3://b/x", 5, 222, _writer(b"HELLO"))
    assert fetched and path2.read_bytes() == b"HELLO" and cache.lookup(key, 5, 222) == path2


def test_a_short_fetch_is_never_stored(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1 << 20)
    key = FileCache.key("s3|test", "s3://b/short")
    with pytest.raises(StorageError, match="s3://b/short: fetched 3 bytes, the store reported 10"):
        cache.store(key, "s3://b/short", 10, 1, _writer(b"abc"))
    assert cache.lookup(key, 10, 1) is None and cache.entries() == []


def test_least_recently_used_entries_go_first_when_the_bound_is_passed(tmp_path):
    cache = FileCache(tmp_path, max_bytes=250)
    keys = [FileCache.key("s", f"u{i}") for i in range(3)]
    for i, k in enumerate(keys[:2]):
        p, _ = cache.store(k, f"u{i}", 100, 1, _writer(b"x" * 100))
        os.utime(p, (1000 + i, 1000 + i))
    assert cache.lookup(keys[0], 100, 1) is not None  # used now: newer than u1
    cache.store(keys[2], "u2", 100, 1, _writer(b"y" * 100))
    assert cache.size() <= 250
    assert cache.lookup(keys[1], 100, 1) is None
    assert cache.lookup(keys[0], 100, 1) is not None and cache.lookup(keys[2], 100, 1) is not None


def test_threads_asking_for_one_file_fetch_it_once(tmp_path):
    cache = FileCache(tmp_path, max_bytes=1 << 20)
    key = FileCache.key("s", "u")
    calls: list[int] = []
    barrier = threading.Barrier(4)
    out = []

    def ask():
        barrier.wait()
        out.append(cache.store(key, "u", 4, 1, _writer(b"data", calls)))

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and sum(f for _, f in out) == 1
    assert {p for p, _ in out} == {out[0][0]} and out[0][0].read_bytes() == b"data"


def _fetch_in_process(root: str, q) -> None:
    cache = FileCache(root, max_bytes=1 << 20)
    _, fetched = cache.store(FileCache.key("s", "u"), "u", 4, 1, _writer(b"data"))
    q.put(fetched)


def test_processes_sharing_a_cache_fetch_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_fetch_in_process, args=(str(tmp_path), q)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(q.get(timeout=5) for _ in procs) == [False, False, True]


def test_location_and_bound_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("STATE_EXPLORER_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("STATE_EXPLORER_CACHE_MAX_BYTES", "2MiB")
    cache = FileCache()
    assert cache.root == tmp_path / "c" and cache.max_bytes == 2 << 20 and (tmp_path / "c").is_dir()
    assert FileCache(tmp_path / "d", max_bytes="1GB").max_bytes == 1 << 30  # GB means GiB, as memory_budget=
    assert parse_size("500 MiB") == 500 << 20 and parse_size(123) == 123
    with pytest.raises(StorageError, match="'lots'"):
        parse_size("lots")

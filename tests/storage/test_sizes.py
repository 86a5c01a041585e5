"""One size parser for memory_budget= and the cache bound: GB means GiB in both (Flink's and Spark's units)."""

from __future__ import annotations

import numpy as np
import pytest

import explorer
from explorer.errors import StorageError
from explorer.storage import FileCache, parse_size as cache_size
from explorer.storage.sizes import parse_size
from explorer.stored import parse_memory_budget


@pytest.mark.parametrize("text,expected", [
    ("2GB", 2 << 30), ("2GiB", 2 << 30), ("2g", 2 << 30), ("512 MB", 512 << 20), ("512MiB", 512 << 20),
    ("1.5GB", int(1.5 * (1 << 30))), ("64KB", 64 << 10), ("1TiB", 1 << 40), ("123", 123), (123, 123),
    (np.int64(7), 7), ("10 b", 10),
])
def test_units_are_powers_of_1024_in_every_spelling(text, expected):
    assert parse_size(text) == expected
    assert parse_memory_budget(text) == expected
    assert cache_size(text) == expected


def test_the_memory_budget_and_the_cache_bound_agree(tmp_path):
    snap = explorer.open("sample_data/url_counts/savepoint-rocksdb", memory_budget="3GB")
    assert snap.memory_budget == FileCache(tmp_path / "c", max_bytes="3GB").max_bytes == 3 << 30


@pytest.mark.parametrize("bad", ["lots", "2 GBs", "-1GB", "0", 0, True, "1e9", "GB"])
def test_a_bad_size_is_refused_naming_what_it_was_for(bad):
    with pytest.raises(ValueError, match="memory_budget"):
        parse_memory_budget(bad)
    with pytest.raises(StorageError, match="cache size"):
        cache_size(bad)

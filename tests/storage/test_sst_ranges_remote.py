"""Native RocksDB state on the S3 server read for some key groups: only each SST file's footer, index and
the data blocks that may hold a wanted key group are fetched, by range (tests/readers/test_flink_sst_ranges.py
has the local side)."""

from __future__ import annotations

import itertools

import pandas as pd
import pytest

import explorer
from explorer.storage import fetch_stats, reset_fetch_stats
from tests.readers.test_flink_sst_ranges import FIXTURES, ROOT, _narrow, _sorted, _sst_files

_n = itertools.count()


@pytest.mark.parametrize("rel", [FIXTURES[0], FIXTURES[3]])
def test_on_s3_only_the_wanted_blocks_are_fetched(s3, rel):
    """From the S3 server: the SST files are read by range (footer, index, wanted blocks), not fetched
    whole, and the answer is the local one's."""
    local = ROOT / rel
    url = s3.upload(local, "snapshots", f"sst-{next(_n)}")
    here = explorer.open(local)
    kgs = _narrow(here)
    want = here.keyed_state(key_groups=kgs)
    snap = explorer.open(url)
    reset_fetch_stats()
    got = snap.keyed_state(key_groups=kgs)
    stats = fetch_stats()
    pd.testing.assert_frame_equal(_sorted(got), _sorted(want))
    sst_bytes = sum(p.stat().st_size for p in _sst_files(local))
    assert stats["ranged_reads"] > 0 and stats["bytes_fetched"] < sst_bytes / 2, (stats, sst_bytes)

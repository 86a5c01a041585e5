"""Flink key-group streams read range by range: each range costs only its own bytes (issue 19).

Real Flink fixtures (canonical savepoints of the HashMap and RocksDB backends, compressed and
not, a 2-byte key-group prefix, a heap checkpoint's own layout), each cut into at least three
key-group ranges by a small ``memory_budget``: the streamed analyses answer as the in-memory
ones, every range reads exactly the bytes of its key groups' spans (from ``_metadata``'s
key-group offsets) and materialises exactly the rows of its key groups.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import explorer
from explorer.analysis import _ranges
from explorer.readers.base import KeyedStateQuery
from explorer.readers.flink import fullformat
from explorer.readers.flink.handles import KeyGroupsHandle
from explorer.stored import ANALYSIS_BYTES_PER_ROW

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ["sample_data/flink/heap-canonical-savepoint", "sample_data/flink/rocksdb-canonical-savepoint-compressed",
            "sample_data/flink/maxp1000-heap-canonical-savepoint", "sample_data/flink/heap-checkpoint-compressed",
            "sample_data/flink/production/plain-rocksdb-canonical-savepoint"]
#: those whose keyed state is in files (the production one's is small enough to sit inline in _metadata)
IN_FILES = FIXTURES[:4]


def _budget(path: Path, ranges: int) -> int:
    rows = float(_ranges.rows_per_key_group(explorer.open(path)).sum())
    return max(1, int(rows * ANALYSIS_BYTES_PER_ROW / ranges))


def _span_bytes(reader, key_groups: frozenset[int]) -> tuple[int, int]:
    """(bytes of the spans of ``key_groups`` over every keyed subtask, bytes of those subtasks' streams)."""
    want = whole = 0
    for op in reader.meta.operators:
        for st in reader._keyed_subtasks(op):
            h = st.managed_keyed
            assert isinstance(h, KeyGroupsHandle)
            if h.stream.kind == "bytes":  # inline in _metadata: no file read
                continue
            header = reader._header(op, st)
            size = reader.resolver.local_path(h.stream).stat().st_size
            whole += size
            want += sum(e - b for kg, b, e in fullformat.key_group_spans(h.offsets, h.start, header.end, size)
                        if kg in key_groups)
    return want, whole


@pytest.mark.parametrize("rel", IN_FILES)
def test_each_range_reads_only_its_key_groups_bytes_and_rows(rel):
    path = ROOT / rel
    whole = explorer.open(path).keyed_state()
    snap = explorer.open(path, memory_budget=_budget(path, 5))
    plan = _ranges.plan([snap])
    assert _ranges.needs_ranges(snap) and len(plan) >= 3
    for op in snap.reader.meta.operators:  # (a heap checkpoint's layout trial reads each subtask's first span once)
        for st in snap.reader._keyed_subtasks(op):
            snap.reader._layout(op, st)
    seen = 0
    for lo, hi in plan:
        view = _ranges.view(snap, lo, hi)
        reader = snap.reader
        kgs = frozenset(range(lo, hi + 1))
        want_bytes, stream_bytes = _span_bytes(reader, kgs)
        before = reader.resolver.key_group_bytes_read
        got = pd.concat([p.to_pandas() for p in view.reader.keyed_pieces(KeyedStateQuery())] or [pd.DataFrame()],
                        ignore_index=True)
        read = reader.resolver.key_group_bytes_read - before
        assert read == want_bytes < stream_bytes, (lo, hi, read, want_bytes, stream_bytes)
        mine = whole[whole["key_group"].between(lo, hi)]
        assert len(got) == len(mine)
        if len(got):
            assert got["key_group"].between(lo, hi).all()
        seen += len(got)
    assert seen == len(whole) > 0


@pytest.mark.parametrize("rel", FIXTURES)
def test_streamed_answers_equal_the_in_memory_ones(rel):
    path = ROOT / rel
    mem, streamed = explorer.open(path), explorer.open(path, memory_budget=_budget(path, 4))
    assert len(_ranges.plan([streamed])) >= 3
    for ask in (lambda s: s.key_group_distribution(), lambda s: s.hot_keys(10, by="bytes"),
                lambda s: s.hot_keys(10, by="entries"), lambda s: s.subtask_distribution()):
        assert_frame_equal(ask(streamed).reset_index(drop=True), ask(mem).reset_index(drop=True))


def test_a_subtask_without_the_asked_key_groups_is_not_read():
    path = ROOT / FIXTURES[0]
    snap = explorer.open(path)
    reader = snap.reader
    subs = snap.subtasks
    first = subs.iloc[0]
    before = reader.resolver.key_group_bytes_read
    kgs = frozenset([int(first["key_group_start"])])
    rows = sum(p.num_rows for p in reader.keyed_pieces(KeyedStateQuery(key_groups=kgs)))
    want, _ = _span_bytes(reader, kgs)
    assert rows > 0 and reader.resolver.key_group_bytes_read - before == want

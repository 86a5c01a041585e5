"""Keyed state read in parts: pages, Arrow batches, one Arrow table, a pyarrow Dataset, and the memory budget."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import explorer
from explorer.errors import AnalysisError

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ROOT / "sample_data/url_counts/savepoint-heap"
FLINK = ROOT / "sample_data/flink/heap-canonical-savepoint"


@pytest.fixture(scope="module")
def snap():
    return explorer.open(ENGINE)


def test_pages_are_slices_of_the_whole(snap):
    whole = snap.keyed_state()
    assert len(whole) > 300
    for offset, limit in [(0, 10), (5, 100), (len(whole) - 7, 50), (len(whole) + 3, 5), (0, 0)]:
        page = snap.keyed_state(offset=offset, limit=limit)
        expect = whole.iloc[offset: offset + limit].reset_index(drop=True)
        assert len(page) == len(expect)
        if len(expect):
            pd.testing.assert_frame_equal(page, expect, check_dtype=False)
    tail = snap.keyed_state(offset=len(whole) - 3)
    assert len(tail) == 3
    with pytest.raises(ValueError, match="offset"):
        snap.keyed_state(offset=-1)


def test_a_frame_over_the_budget_is_refused_unless_asked(snap):
    small = explorer.open(ENGINE, memory_budget=10_000)
    with pytest.raises(AnalysisError, match="memory budget") as err:
        small.keyed_state()
    assert str(ENGINE) in str(err.value) and "batches()" in str(err.value)
    assert len(small.keyed_state(unbounded=True)) == len(snap.keyed_state())
    assert len(small.keyed_state(limit=5)) == 5


def test_batches_stream_every_row_in_pieces(snap):
    whole = snap.keyed_state()
    batches = list(snap.batches(batch_size=100))
    assert all(isinstance(b, pa.RecordBatch) and b.num_rows <= 100 for b in batches)
    assert sum(b.num_rows for b in batches) == len(whole)
    assert batches[0].schema.names == list(explorer.CONTRACT_COLUMNS)
    op = whole["operator"].iloc[0]
    some = list(snap.batches(operator=op, key_groups=range(0, 20), columns=["key", "key_group"]))
    n = sum(b.num_rows for b in some)
    assert n == len(snap.keyed_state(operator=op, key_groups=range(0, 20)))
    assert all(b.schema.names == ["key", "key_group"] for b in some)
    key = whole["key"].iloc[0]
    by_key = list(snap.batches(key=key))  # each state's batches keep its own schema
    assert sum(b.num_rows for b in by_key) == int((whole["key"] == key).sum())
    assert {k for b in by_key for k in b.column("key").to_pylist()} == {key}
    with pytest.raises(ValueError):
        next(snap.batches(batch_size=0))


def test_to_arrow_is_the_whole_or_a_clear_error(snap):
    whole = snap.keyed_state()
    states = snap.states
    for op, st in zip(states["operator"], states["state"]):
        t = snap.to_arrow(operator=op, state=st)
        assert t.num_rows == int(((whole["operator"] == op) & (whole["state"] == st)).sum())
    try:
        t = snap.to_arrow()
    except AnalysisError as exc:  # states whose keys or values Arrow cannot put in one column
        assert "state=" in str(exc)
    else:
        assert t.num_rows == len(whole)


def test_dataset_is_the_parquet_files_with_key_group_partitions(snap):
    states = snap.states
    op, st = states["operator"].iloc[0], states["state"].iloc[0]
    d = snap.dataset(operator=op, state=st)
    assert isinstance(d, ds.FileSystemDataset)
    assert all(Path(f).is_relative_to(ENGINE) and f.endswith(".parquet") for f in d.files)
    t = d.to_table()
    expect = snap.keyed_state(operator=op, state=st)
    assert t.num_rows == len(expect)
    assert set(t.column("operator").to_pylist()) == {op} and set(t.column("state").to_pylist()) == {st}
    assert sorted(t.column("subtask").to_pylist()) == sorted(expect["subtask"].tolist())
    part = d.to_table(filter=(ds.field("key_group") >= 10) & (ds.field("key_group") < 30))
    assert part.num_rows == len(snap.keyed_state(operator=op, state=st, key_groups=range(10, 30)))
    # the partition expressions name each file's key-group range: a narrow filter skips files
    frags = list(d.get_fragments(filter=ds.field("key_group") == 3))
    assert 0 < len(frags) < len(d.files) or len(d.files) == 1
    assert pc.all(pc.equal(part.column("state"), st)).as_py()


def test_dataset_of_a_flink_savepoint_holds_its_rows():
    snap = explorer.open(FLINK)
    states = snap.states
    op, st = states["operator"].iloc[0], states["state"].iloc[0]
    d = snap.dataset(operator=op, state=st)
    assert d.count_rows() == len(snap.keyed_state(operator=op, state=st))


def test_a_filtered_read_is_measured_against_the_budget_by_its_own_rows(snap):
    whole = len(snap.keyed_state())
    kgs = range(0, 8)
    part = len(snap.keyed_state(key_groups=kgs))
    est = snap.reader.estimated_rows(snap.query(key_groups=kgs))
    assert 0 < est < whole and abs(est - part) <= max(5, part)  # spread evenly over each row group's key groups
    small = explorer.open(ENGINE, memory_budget=int(est * 3 * explorer.stored.FRAME_BYTES_PER_ROW))
    assert len(small.keyed_state(key_groups=kgs)) == part  # within the budget: no refusal

"""The Flink reader's first strings of a process are decoded in Python, not by the numba kernel
(``explorer.readers.flink.buffers.PYTHON_STRINGS``: no compile on a small first open, issue 31);
both paths give the same pieces, byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.readers.base import KeyedStateQuery
from explorer.readers.flink import FlinkSnapshotReader, buffers

FLINK = Path(__file__).resolve().parents[2] / "sample_data" / "flink"


def _pieces(path: Path, budget: int, monkeypatch: pytest.MonkeyPatch) -> list:
    monkeypatch.setattr(buffers, "_python_strings", [budget])
    return list(FlinkSnapshotReader(path).keyed_pieces(KeyedStateQuery()))


@pytest.mark.parametrize("sample", [
    "heap-canonical-savepoint", "rocksdb-incremental-checkpoint", "production/types-heap-canonical-savepoint",
    "production/types-rocksdb-native-savepoint", "sql-groupby-savepoint",
])
def test_python_and_kernel_strings_read_the_same(sample: str, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = _pieces(FLINK / sample, 0, monkeypatch)
    python = _pieces(FLINK / sample, 1 << 40, monkeypatch)
    assert len(python) == len(kernel) > 0
    for a, b in zip(python, kernel):
        assert a.equals(b)


def test_the_budget_is_spent_then_the_kernel_takes_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "_python_strings", [10])
    assert buffers.python_first(4)
    assert not buffers.python_first(7)  # more than is left: the kernel, from now on
    assert not buffers.python_first(1)

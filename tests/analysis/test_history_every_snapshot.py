"""Issue 33: "history() and changes() answer on every checkpoint that explorer.open opens (marking what cannot
be reconstructed)". Every sample snapshot that opens gets a history: at least one row, its checkpoint ids,
and for checkpoints whose files are partly gone (a half-deleted chk-N, a batch whose versions maintenance
deleted) the row marked rather than the whole answer refused. Spark checkpoints answer changes() too, or say
per batch why a batch cannot be answered."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

import explorer
from explorer.errors import StateExplorerError
from tests.readers.test_raw_values_are_noted import SAMPLES, _options, _snapshots


def _walked() -> list:
    """Every sample; of the transformWithState ones (read by Spark's JVM, ~15 s each) one, so that the suite's
    time goes to formats: their history is the same reader's (tests/spark/test_real_checkpoints.py reads them all)."""
    return [p for p in _snapshots() if "spark/tws-" not in p.id or p.id == "spark/tws-rows"]


@pytest.mark.parametrize("path,options", _walked())
def test_history_answers_on_every_snapshot_that_opens(path, options):
    options = _options(path, options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        explorer.open(path, **options)  # (it opens: the walk is over snapshots that do)
        h = explorer.history(path, **options)
    assert isinstance(h, pd.DataFrame) and len(h) >= 1
    assert h["checkpoint_id"].notna().all()
    for col in ("complete", "reconstructable"):
        if col in h:  # a checkpoint that is not whole is marked, never silently dropped nor failing the rest
            assert h[col].dtype == bool or h[col].isin([True, False]).all()


@pytest.mark.parametrize("path,options", [p for p in _walked() if "spark/" in p.id])
def test_changes_answers_on_every_spark_checkpoint(path, options):
    options = _options(path, options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ch = explorer.changes(path)
        except StateExplorerError as exc:  # a whole range it cannot answer: it must say why, per its batches
            assert "batch" in str(exc) and str(path.name) in str(exc)
            return
    assert isinstance(ch, pd.DataFrame)


def test_the_damaged_sample_is_refused_with_what_is_missing():
    with pytest.raises(StateExplorerError, match="state/0/2 is missing"):
        explorer.history(SAMPLES / "spark" / "damaged-missing-partition")

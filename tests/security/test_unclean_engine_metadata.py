"""Issue 29, finding 13: ``records_per_key_group`` that does not fit the key groups of its subtask.

A list longer than max parallelism reached pandas (``ValueError: All arrays must be of the same
length``, outside the tree). The metadata's arrays are now checked against the subtask's key-group
range and the operator's max parallelism when ``_metadata`` is read: a ``SnapshotFormatError``
naming the file and both lengths, before anything is built.
"""

import shutil

import pytest

import explorer
from explorer.errors import SnapshotFormatError
from explorer.format.snapshot import read_metadata, write_metadata

SAMPLE = "sample_data/sessions/savepoint-heap"


def _with(tmp_path, change):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    meta = read_metadata(snap)
    sub = next(s for o in meta["operators"] for s in o["subtasks"] if s.get("records_per_key_group"))
    change(sub)
    write_metadata(snap, meta)
    return snap


@pytest.mark.parametrize("change, found", [
    (lambda s: s.update(records_per_key_group=[1] * 129), "129"),        # longer than max parallelism 128
    (lambda s: s.update(records_per_key_group=[1] * 70), "70"),          # longer than its range of 64
    (lambda s: s.update(records_per_key_group="x" * 64), "str"),         # not a list of counts
    (lambda s: s.update(records_per_key_group=[1] * 63 + [-5]), "-5"),   # a negative count
    (lambda s: s.update(key_group_range=[0, 200]), "200"),               # a range past max parallelism
], ids=["over-max-parallelism", "over-range", "not-a-list", "negative", "range"])
def test_metadata_arrays_that_do_not_fit_the_key_groups_are_a_format_error(tmp_path, change, found):
    snap = _with(tmp_path, change)
    with pytest.raises(SnapshotFormatError) as err:
        explorer.open(snap).metrics()
    text = str(err.value)
    assert "_metadata" in text and found in text, text

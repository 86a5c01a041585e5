"""Issue 29, left by session 11: the engine's ``_metadata`` JSON was parsed before the budget was known.

Ten million entries (``records_per_key_group`` of 10^7 empty lists, 40 MB of text) were built as Python
objects (about 700 MB) and only then refused by the length check. ``explorer.open`` now makes its
``memory_budget`` current while the metadata is read: the file's size, then what its JSON would take once
parsed (counted from its separators and brackets, :func:`explorer.format.budget.json_cost`), are checked
before either is allocated.
"""

import shutil

import pytest

from explorer.errors import SnapshotTooLargeError
from explorer.format import budget
from explorer.format.snapshot import read_metadata, write_metadata
from tests.support.peak import peak_of

SAMPLE = "sample_data/sessions/savepoint-heap"
BUDGET_MB = 64
#: Python, pandas, pyarrow and the readers imported (a child reading the undamaged sample peaks ~320 MiB)
MARGIN_MB = 384
ENTRIES = 10**7


def _bomb(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    meta = read_metadata(snap)
    sub = next(s for o in meta["operators"] for s in o["subtasks"] if s.get("records_per_key_group"))
    sub["records_per_key_group"] = [[]] * ENTRIES
    write_metadata(snap, meta)
    del meta, sub
    return snap


def test_metadata_json_over_the_budget_is_refused_before_it_is_parsed(tmp_path):
    snap = _bomb(tmp_path)
    assert (snap / "_metadata").stat().st_size < BUDGET_MB << 20  # the file alone fits: its parse does not
    peak, message = peak_of(f"""
        import explorer
        result = raised(lambda: explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB"))
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert "_metadata" in message and "metadata JSON once parsed" in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_a_metadata_file_over_the_budget_is_refused_before_it_is_read(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    meta = read_metadata(snap)
    meta["notes"] = "x" * (budget.FLOOR + (1 << 20))  # one string: its JSON is cheap, the file is over the floor
    write_metadata(snap, meta)
    with budget.using(1), pytest.raises(SnapshotTooLargeError, match="its file size"):
        read_metadata(snap)


def test_the_samples_metadata_reads_within_a_small_budget(tmp_path):
    with budget.using(budget.FLOOR):
        assert read_metadata(SAMPLE)["operators"]


def test_json_cost_counts_what_a_parse_would_build():
    assert budget.json_cost(b"[" + b",".join([b"[]"] * 1000) + b"]") >= 1000 * 34
    assert budget.json_cost(b'"' + "\U0001F600".encode() + b'x' * 100 + b'"') >= 4 * 100  # one wide character: all wide

"""Issue 29, what session 12 left: editing an engine savepoint read its Parquet files unchecked.

The readers check a row group's declared sizes and page headers against ``memory_budget`` before a page is
decoded; the engine editor read each state file whole with ``pyarrow.parquet.read_table``, so the 14 KiB file of
``test_memory_engine_parquet`` (one 200 MiB zstd value, its SHA-256 in ``_metadata`` consistent) inflated in full
under ``explorer.edit(..., memory_budget="64MB")``. The editor now reads through the same checks.
"""

from explorer.format.snapshot import read_metadata
from tests.security.test_memory_engine_parquet import BUDGET_MB, MARGIN_MB, _bomb
from tests.support.peak import peak_of


def test_editing_a_savepoint_refuses_a_value_over_the_budget_before_reading_it(tmp_path):
    snap, rel = _bomb(tmp_path)
    op = read_metadata(snap)["operators"][1]
    uid, state = op["uid"], op["subtasks"][0]["states"][0]["name"]
    out = tmp_path / "edited"
    peak, message = peak_of(f"""
        import explorer
        ed = explorer.edit({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        ed.map_values(operator={uid!r}, state={state!r}, fn=lambda row: row["value"])
        result = raised(lambda: ed.write({str(out)!r}))
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"
    assert not out.exists()  # nothing half-written where the user asked for the edit

"""Issue 29, finding 11: an engine savepoint whose small Parquet file holds one huge zstd value.

A 14 KiB file holding a 300 MiB value made ``hot_keys()`` peak at 1.95 GiB under
``memory_budget="64MB"``. Row groups' and column chunks' uncompressed sizes (Parquet's own metadata)
are now checked against the budget before a row group is read: a ``SnapshotTooLargeError`` naming
the file, the row group and the size.
"""

import shutil

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from explorer.format.snapshot import file_entry, read_metadata, write_metadata
from tests.support.peak import peak_of

SAMPLE = "sample_data/sessions/savepoint-heap"
BUDGET_MB = 64
#: Python, pandas, pyarrow and the readers imported (a child reading the undamaged sample peaks ~320 MiB)
MARGIN_MB = 384
BIG = 200 << 20


def _bomb(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    meta = read_metadata(snap)
    state = meta["operators"][1]["subtasks"][0]["states"][0]
    path = snap / state["file"]
    t = pq.read_table(path)
    value = t.column("value").combine_chunks()
    pages = value.field("page").to_pylist()
    pages[0] = "a" * BIG
    fields = [value.field(i) if value.type.field(i).name != "page" else pa.array(pages)
              for i in range(value.type.num_fields)]
    t = t.set_column(t.schema.get_field_index("value"), "value",
                     pa.StructArray.from_arrays(fields, fields=list(value.type)))
    path.unlink()
    pq.write_table(t, path, compression="zstd")
    assert path.stat().st_size < 1 << 20
    meta["files"][state["file"]] = file_entry(snap, path)
    write_metadata(snap, meta)
    return snap, state["file"]


def test_a_row_group_over_the_budget_is_refused_before_it_is_read(tmp_path):
    snap, rel = _bomb(tmp_path)
    peak, message = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = raised(s.hot_keys)
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "row group 0" in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"

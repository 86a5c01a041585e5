"""Issue 29, what session 12 left: the engine's own restore read a snapshot's Parquet unchecked.

``explorer.open`` checks a row group's declared sizes and page headers against ``memory_budget`` before Arrow decodes
it; a job restoring from a savepoint someone else wrote (``execute(restore_from=...)``) read each row group whole, so
a small file holding one 200 MiB zstd value (its digest in ``_metadata`` consistent, as whoever wrote it would make
it) was inflated in full. The restore now checks under ``memory_budget=`` (default half the available memory).
"""

import pyarrow as pa
import pyarrow.parquet as pq

from explorer.engine import CollectSink
from explorer.format.snapshot import file_entry, read_metadata, write_metadata
from tests.engine.checkpoint.test_restore import job, savepoint_midway
from tests.support.peak import peak_of

BUDGET_MB = 64
#: Python, pandas, pyarrow and the engine imported, the job's own state
MARGIN_MB = 384
BIG = 200 << 20


def _bomb(sp):
    """One keyed state file of ``sp`` with a column holding one 200 MiB string (zstd: a few hundred KB)."""
    meta = read_metadata(sp)
    op = next(o for o in meta["operators"] if o.get("keyed"))
    rel = next(s["file"] for sub in op["subtasks"] for s in sub.get("states", ()) if s["name"] == "n")
    path = sp / rel
    t = pq.read_table(path)
    t = t.append_column("zz", pa.array(["a" * BIG] + [None] * (t.num_rows - 1), pa.large_string()))
    path.unlink()
    pq.write_table(t, path, compression="zstd")
    assert path.stat().st_size < 4 << 20
    meta["files"][rel] = file_entry(sp, path)
    write_metadata(sp, meta)
    return rel


def test_a_restore_refuses_a_row_group_over_its_memory_budget(tmp_path):
    sp, _ = savepoint_midway(tmp_path)
    rel = _bomb(sp)
    peak, message = peak_of(f"""
        from explorer.engine import CollectSink
        from tests.engine.checkpoint.test_restore import job
        result = raised(lambda: job(2, CollectSink("again")).execute_async(
            "job", restore_from={str(sp)!r}, memory_budget="{BUDGET_MB}MB").run())
    """)
    assert message.startswith("SnapshotTooLargeError: "), message
    assert rel in message and "memory_budget=" in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_an_honest_savepoint_restores_under_a_small_budget(tmp_path):
    sp, first = savepoint_midway(tmp_path)
    sink = CollectSink("rest")
    job(2, sink).execute("job", restore_from=sp, memory_budget=f"{BUDGET_MB}MB")
    reference = CollectSink("ref")
    job(2, reference).execute()
    assert sorted(first + list(sink.results)) == sorted(reference.results)

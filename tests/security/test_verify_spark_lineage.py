"""Issue 29, left by session 11: ``verify`` on a Spark checkpoint of format v2 checked only the version's own file.

With checkpoint format v2 and changelog checkpointing, version ``v`` of a store is its ``<v>_<id>.changelog``
replayed over its *lineage*, the versions and ids its header names back to the last snapshot. A copy missing the
lineage's snapshot, or with it damaged, verified ok and then failed to read. ``verify`` now follows the lineage as
the reader does: each file of it must be there, and each is checked like the batch's own files.
"""

from __future__ import annotations

import shutil
import zipfile

import pytest

import explorer
from explorer.errors import SnapshotError
from explorer.readers.checks import DAMAGED, MISSING, OK
from explorer.readers.spark.rocksdb import read_rocksdb_store

SAMPLE = "sample_data/spark/agg-rocksdb-v2-maintained"
#: batch 8 reads version 9; partition 2's version 9 is a changelog whose lineage is version 8, a snapshot
BATCH = 8
PART = "state/0/2"
OWN = f"{PART}/9_233c89e1-d233-4e5c-9f6e-5309c662ff2b.changelog"
BASE = f"{PART}/8_1b335267-bc8c-4421-b439-87e49586f08f.zip"


def _copy(tmp_path):
    snap = tmp_path / "ckpt"
    shutil.copytree(SAMPLE, snap)
    return snap


def _statuses(snap):
    return {c.file: c.status for c in explorer.verify(snap, batch_id=BATCH).checks}


def test_the_lineage_is_checked_on_the_untouched_copy(tmp_path):
    got = _statuses(_copy(tmp_path))
    assert got[OWN] == OK and got[BASE] == OK, got
    assert all(s == OK for s in got.values()), got


def test_a_lineage_whose_snapshot_is_gone_is_missing(tmp_path):
    snap = _copy(tmp_path)
    for suffix in ("", ".crc"):
        (snap / (BASE + suffix)).unlink()
    report = explorer.verify(snap, batch_id=BATCH)
    got = {c.file: c for c in report.checks}
    assert not report.ok and got[BASE].status == MISSING, report
    assert "lineage" in got[BASE].detail and "9_233c89e1" in got[BASE].detail, got[BASE]
    with pytest.raises(SnapshotError, match="8_1b335267"):  # what verify warns of: the read (without a JVM) fails
        read_rocksdb_store(snap, 0, 2, BATCH + 1, uuids=["233c89e1-d233-4e5c-9f6e-5309c662ff2b"])


def test_a_damaged_snapshot_of_the_lineage_is_damaged_even_behind_a_newer_orphan(tmp_path):
    """A failed attempt leaves a zip of version 9 under another id: the batch's own files then start there, and the
    lineage's snapshot (version 8) was never looked at."""
    snap = _copy(tmp_path)
    orphan = snap / PART / "9_00000000-0000-0000-0000-000000000000.zip"
    shutil.copy(snap / BASE, orphan)
    (snap / (BASE + ".crc")).unlink()  # (the damage is the zip's own: its member CRC-32)
    path = snap / BASE
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("metadata")
    data = bytearray(path.read_bytes())
    at = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    got = _statuses(snap)
    assert got.get(BASE) == DAMAGED, got

"""Snapshot layouts of Flink 1.17 to 2.x on real job output (sample_data/flink/production, issue 15):
file-merging checkpoints, ForSt snapshots, diff and history on Flink, operator uids; each handle parser on
damaged input fails with a StateExplorerError naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.errors import SnapshotCorruptError, StateExplorerError
from explorer.format.sst.file import SstError, SstFile
from explorer.readers.flink import FlinkSnapshotReader
from explorer.readers.flink.metadata import read_metadata
from support.flink_layouts import PRODUCTION, expected, mismatches

FILE_MERGING = ["plain-filemerging-rocksdb-incremental-checkpoint",
                "flink-1.20-plain-filemerging-rocksdb-incremental-checkpoint"]
FORST = ["plain-forst-checkpoint", "plain-forst-native-savepoint"]
# the same job on the same input, on every backend, layout and version: the same entries
PLAIN = sorted(p.name for p in PRODUCTION.iterdir() if "plain" in p.name and "changelog" not in p.name)
PLAIN_CHECKPOINTS = [n for n in PLAIN if (PRODUCTION / n / "EXPECTED.json").is_file() and "checkpoint" in n]


def _open(name: str, **kw):
    return explorer.open(PRODUCTION / name, uids=expected(name).get("uids") or None, **kw)


# -- whole fixtures equal to what the job computed ---------------------------------------------------------

@pytest.mark.parametrize("name", FILE_MERGING)
def test_file_merging_checkpoint_equals_expected(name):
    snap = _open(name)
    assert mismatches(snap, name) == []
    # operator state sits in segments too: the source's split state is read, operators without any are none
    ops = snap.operator_state()
    assert set(ops["state"]) == {"SourceReaderState"}
    assert not [n for n in snap.notes if "operator state" in n]


@pytest.mark.parametrize("name", FORST)
def test_forst_snapshot_equals_expected(name):
    snap = _open(name)
    assert mismatches(snap, name) == []
    assert len(snap.hot_keys()) and len(snap.key_group_distribution())


def test_forst_sst_files_use_a_partitioned_index():
    reader = FlinkSnapshotReader(PRODUCTION / FORST[0])
    handles = [h for op in reader.meta.operators for st in op.subtasks if (h := st.managed_keyed) is not None]
    ssts = [SstFile(reader.resolver.read(sh), local) for h in handles for local, sh in h.shared + h.private
            if local.endswith(".sst")]
    assert ssts and all(f.prop_int("rocksdb.block.based.table.index.type") == 2 for f in ssts)
    assert all(f.data_handles() for f in ssts)


# -- diff and history on Flink snapshots -------------------------------------------------------------------

@pytest.mark.parametrize("name", PLAIN)
def test_diff_plain_job_across_backends_layouts_and_versions(name):
    base = _open("plain-rocksdb-incremental-checkpoint")
    other = _open(name)
    d = explorer.diff(base, other)
    assert len(d) and set(d["status"]) == {"unchanged"}, d["status"].value_counts().to_dict()


def test_diff_flink_finds_a_changed_state():
    a = _open("plain-rocksdb-incremental-checkpoint")
    b = explorer.open(PRODUCTION.parent / "rocksdb-incremental-checkpoint")  # another job (StateFixtures)
    d = explorer.diff(a, b)
    assert set(d["status"]) >= {"removed", "added"} and "unchanged" not in set(d["status"])
    assert d[d["status"] == "removed"]["entries_a"].sum() == len(a.keyed_state())


@pytest.mark.parametrize("name", PLAIN_CHECKPOINTS)
def test_history_of_a_flink_checkpoint_directory(name):
    h = explorer.history(PRODUCTION / name, uids=expected(name)["uids"])
    meta = read_metadata(next((PRODUCTION / name).glob("chk-*/_metadata")))
    assert set(h["checkpoint_id"]) == {meta.checkpoint_id}
    assert h["created_at"].notna().all()
    assert (h["checkpoint_bytes"] > meta.path.stat().st_size).all()
    per_op = h.groupby("operator")["operator_bytes"].first()
    assert set(per_op.index) >= {"user-activity", "category-windows"} and (per_op > 0).all()
    amounts = h[(h["operator"] == "user-activity") & (h["state"] == "amounts")].iloc[0]
    assert amounts["entries"] == len(expected(name)["operators"]["user-activity"]["states"]["amounts"]["entries"])
    assert amounts["keys"] == 24 and amounts["bytes"] > 0


def test_history_counts_shared_files_once(tmp_path):
    """Two retained checkpoints naming the same shared files: the second one only wrote its _metadata."""
    name = "plain-rocksdb-incremental-checkpoint"
    job = tmp_path / "job"
    shutil.copytree(PRODUCTION / name, job)
    (chk,) = job.glob("chk-*")
    n = int(chk.name.split("-")[1])
    shutil.copytree(chk, job / f"chk-{n + 1}")  # (its _metadata still names chk-{n}, shared/ files)
    h = explorer.history(job, per_state=False)
    assert list(h["checkpoint_id"]) == [n, n]  # the id is the one stored in each _metadata
    first, second = h.iloc[0], h.iloc[1]
    assert first["incremental_bytes"] == first["checkpoint_bytes"]
    assert second["incremental_bytes"] == (job / f"chk-{n + 1}" / "_metadata").stat().st_size
    assert second["delta_bytes"] == 0


def test_uids_name_operators_of_flink_1_17_in_every_analysis():
    name = "flink-1.17-plain-rocksdb-incremental-checkpoint"
    uids = expected(name)["uids"]
    plain = explorer.open(PRODUCTION / name)
    assert not set(uids) & set(plain.operators["operator"])  # metadata version 4: no names
    snap = explorer.open(PRODUCTION / name, uids=uids)
    assert mismatches(snap, name) == []
    assert set(snap.hot_keys()["operator"]) <= set(uids)
    assert set(snap.key_group_distribution()["operator"]) <= set(uids)
    assert set(explorer.diff(snap, snap)["operator"]) <= set(uids)
    assert set(explorer.history(PRODUCTION / name, uids=uids)["operator"]) <= set(uids)


# -- damaged input: a StateExplorerError that names the file -----------------------------------------------

def _damaged_copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(PRODUCTION / name, dst)
    return dst


@pytest.mark.parametrize("name", FILE_MERGING)
def test_truncated_file_merging_metadata_fails_cleanly(tmp_path, name):
    src = next((PRODUCTION / name).glob("chk-*/_metadata")).read_bytes()
    meta = tmp_path / "chk-1" / "_metadata"
    meta.parent.mkdir()
    for cut in range(9, len(src), max(1, len(src) // 97)):
        meta.write_bytes(src[:cut])
        with pytest.raises(StateExplorerError) as info:
            read_metadata(meta)
        assert str(meta) in str(info.value)


def _segment_positions(data: bytes) -> list[int]:
    """Offsets of segment handles (type 15) in a _metadata: the type byte, then start and size (longs), then a
    scope (int 0 or 1) and a path that starts with 'file:'."""
    out = []
    for i in range(len(data) - 40):
        if data[i] == 15 and data[i + 17 : i + 20] == b"\0\0\0" and data[i + 20] in (0, 1) \
                and data[i + 23 : i + 28] == b"file:":
            out.append(i)
    return out


def test_segment_past_the_end_of_its_file_fails_cleanly(tmp_path):
    name = FILE_MERGING[0]
    job = _damaged_copy(tmp_path, name)
    meta = next(job.glob("chk-*/_metadata"))
    data = bytearray(meta.read_bytes())
    pos = _segment_positions(bytes(data))
    assert pos
    for p in pos:  # every segment claims 1 MB more than its file has
        size = int.from_bytes(data[p + 9 : p + 17], "big")
        data[p + 9 : p + 17] = (size + (1 << 20)).to_bytes(8, "big")
    meta.write_bytes(bytes(data))
    snap = explorer.open(job, uids=expected(name)["uids"])
    with pytest.raises(SnapshotCorruptError, match="segment") as info:
        snap.keyed_state()
    assert str(job) in str(info.value)


def test_unknown_stream_handle_type_names_the_file(tmp_path):
    name = FILE_MERGING[0]
    job = _damaged_copy(tmp_path, name)
    meta = next(job.glob("chk-*/_metadata"))
    data = bytearray(meta.read_bytes())
    data[_segment_positions(bytes(data))[0]] = 99
    meta.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="stream state handle type 99") as info:
        read_metadata(meta)
    assert str(meta) in str(info.value)


def test_damaged_partitioned_index_fails_cleanly():
    reader = FlinkSnapshotReader(PRODUCTION / FORST[0])
    h = next(st.managed_keyed for op in reader.meta.operators for st in op.subtasks if st.managed_keyed)
    local, sh = next((lc, s) for lc, s in h.shared + h.private if lc.endswith(".sst"))
    good = SstFile(reader.resolver.read(sh), local)
    data = bytearray(good.data)
    off, size = good.index
    top = good.block(good.index)
    assert data[off : off + size] == top  # uncompressed: the handle value ends the first entry
    # point the first partition's handle past the end of the file (varints: offset, size)
    key_len = top[1]
    p = off + 2 + key_len
    data[p : p + 3] = b"\xff\xff\x7f"
    with pytest.raises(SstError, match=local) as info:
        SstFile(bytes(data), local).data_handles()
    assert isinstance(info.value, ValueError)

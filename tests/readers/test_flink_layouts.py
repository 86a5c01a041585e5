"""Snapshot layouts of Flink 1.17 to 2.x on real job output (sample_data/flink/production, issue 15):
file-merging checkpoints, ForSt snapshots, diff and history on Flink, operator uids; each handle parser on
damaged input fails with a StateExplorerError naming the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.errors import SnapshotCorruptError, SnapshotFormatError, StateExplorerError
from explorer.format.sst.file import SstError, SstFile
from explorer.readers.flink import FlinkSnapshotReader
from explorer.readers.flink.metadata import read_metadata
from tests.support.flink_layouts import PRODUCTION, expected, mismatches

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
    # Flink's _metadata stores no time: unknown, never the file's modification time (issue 18)
    assert h["created_at"].isna().all()
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


# -- changelog state backend -------------------------------------------------------------------------------

CHANGELOG = ["plain-changelog-heap-checkpoint", "plain-changelog-materialized-rocksdb-checkpoint"]


@pytest.mark.parametrize("name", CHANGELOG)
def test_changelog_checkpoint_equals_expected(name):
    snap = _open(name)
    assert mismatches(snap, name) == []
    assert len(snap.hot_keys()) and len(explorer.diff(snap, _open("plain-rocksdb-incremental-checkpoint")))


def test_changelog_only_checkpoint_is_read_from_the_log():
    reader = FlinkSnapshotReader(PRODUCTION / CHANGELOG[0])
    assert set(reader.subtasks()["handle"]) == {"changelog"}
    files = reader.stored_files()
    assert files["file"].str.contains("/dstl/").sum() == 4  # one changelog file per keyed subtask


def test_changelog_key_group_filter_keeps_only_those_key_groups():
    from explorer.readers.base import KeyedStateQuery
    reader = FlinkSnapshotReader(PRODUCTION / CHANGELOG[0], uids=expected(CHANGELOG[0])["uids"])
    cols = ("state", "key", "key_group")
    every = [p.select(cols) for p in reader.keyed_pieces(KeyedStateQuery(columns=cols))]
    some = [p.select(cols) for p in reader.keyed_pieces(KeyedStateQuery(columns=cols, key_groups=frozenset(range(40))))]
    kg = [k for p in every for k in p.column("key_group").to_pylist()]
    got = [k for p in some for k in p.column("key_group").to_pylist()]
    assert 0 < len(got) < len(kg) and all(k < 40 for k in got)
    assert len(got) == sum(1 for k in kg if k < 40)


def _changelog_files(job: Path) -> list[Path]:
    return sorted(p for p in (job / "shared" / "changelog").rglob("*") if p.is_file())


@pytest.mark.parametrize("cut", [0, 1, 5, 40, 400, -3])
def test_truncated_changelog_file_fails_cleanly(tmp_path, cut):
    job = _damaged_copy(tmp_path, CHANGELOG[0])
    f = _changelog_files(job)[0]
    data = f.read_bytes()
    f.write_bytes(data[:cut])
    snap = explorer.open(job)
    with pytest.raises(StateExplorerError) as info:
        snap.keyed_state()
    assert str(job) in str(info.value)


def test_compressed_changelog_is_refused_as_unsupported(tmp_path):
    job = _damaged_copy(tmp_path, CHANGELOG[0])
    f = _changelog_files(job)[0]
    f.write_bytes(b"\x01" + f.read_bytes()[1:])
    with pytest.raises(SnapshotFormatError, match="compressed") as info:
        explorer.open(job).keyed_state()
    assert str(f.name) in str(info.value)


def test_change_before_its_state_metadata_fails_cleanly(tmp_path):
    job = _damaged_copy(tmp_path, CHANGELOG[0])
    f = _changelog_files(job)[0]
    data = bytearray(f.read_bytes())
    # the first change of the set is a state's metadata (key group -1): make its key group a data one
    assert data[9:13] == b"\xff\xff\xff\xff"
    data[9:13] = (0).to_bytes(4, "big")
    f.write_bytes(bytes(data))
    with pytest.raises(StateExplorerError) as info:
        explorer.open(job).keyed_state()
    assert str(job) in str(info.value)


def test_damaged_changelog_handle_in_metadata_fails_cleanly(tmp_path):
    src = next((PRODUCTION / CHANGELOG[0]).glob("chk-*/_metadata")).read_bytes()
    meta = tmp_path / "chk-1" / "_metadata"
    meta.parent.mkdir()
    for cut in range(9, len(src), max(1, len(src) // 61)):
        meta.write_bytes(src[:cut])
        with pytest.raises(StateExplorerError) as info:
            read_metadata(meta)
        assert str(meta) in str(info.value)
    i = src.index(bytes([14]) + (0).to_bytes(4, "big"))  # the first changelog backend handle (type 14)
    bad = bytearray(src)
    bad[i] = 8 + 2  # a changelog file part where a backend handle must be
    meta.write_bytes(bytes(bad))
    with pytest.raises(SnapshotCorruptError, match="outside a changelog state backend handle"):
        read_metadata(meta)


def _java_string(text: str) -> bytes:
    """Flink's StringSerializer for ASCII text: varint length + 1, then the characters."""
    return bytes([len(text) + 1]) + text.encode("ascii")


def test_changes_on_top_of_materialized_state_are_applied(monkeypatch):
    """Materialized RocksDB state plus changes logged since (written here in the log's format, with the
    state metadata records of the real heap changelog of the same job): the rows are the materialized
    ones with the changes applied; states without changes stay as materialized."""
    import pandas as pd

    from explorer.readers.flink import reader as reader_module
    from explorer.readers.flink.changelog import read_change_sets
    from explorer.readers.flink.handles import ChangelogHandle, ChangelogPart

    name = CHANGELOG[1]
    uids = expected(name)["uids"]
    before = explorer.open(PRODUCTION / name, uids=uids).keyed_state(operator="user-activity")
    before = before[before["subtask"] == 0]
    keys = sorted(before["key"].unique())[:5]
    kg = {k: int(before[before["key"] == k]["key_group"].iloc[0]) for k in keys}
    # the metadata records of the same states, from the heap changelog fixture's user-activity log
    heap = PRODUCTION / CHANGELOG[0]
    metas = next(m for f in _changelog_files(heap)
                 for m in [[c for k, c in read_change_sets(f.read_bytes(), 0, f.name) if k == -1]]
                 if any(b"per_category" in c for c in m))
    removed_category = before[(before["key"] == keys[4]) & (before["state"] == "per_category")]["user_key"].iloc[0]
    void = b"\x00"
    data = [
        (kg[keys[0]], b"\x02\x00\x05" + _java_string(keys[0]) + void + (999).to_bytes(8, "big")),  # total = 999
        (kg[keys[1]], b"\x00\x00\x03" + _java_string(keys[1]) + void),  # amounts cleared
        (kg[keys[2]], b"\x05\x00\x03" + _java_string(keys[2]) + void + (7).to_bytes(8, "big")),  # amounts += 7
        (kg[keys[3]], b"\x06\x00\x04" + _java_string(keys[3]) + void + _java_string("zzz") + (5).to_bytes(8, "big")),
        (kg[keys[4]], b"\x07\x00\x04" + _java_string(keys[4]) + void + _java_string(removed_category)),
        (kg[keys[0]], b"\x05\x00\x01" + (1).to_bytes(4, "big") + ((123456 ^ (1 << 63)).to_bytes(8, "big"))
         + _java_string(keys[0]) + void),  # an event-time timer at 123456
    ]
    meta = read_metadata(next((PRODUCTION / name).glob("chk-*/_metadata")))
    op = next(o for o in meta.operators if o.operator_id == reader_module.operator_id_for_uid("user-activity"))
    h = next(s.managed_keyed for s in op.subtasks if s.index == 0)
    assert isinstance(h, ChangelogHandle) and h.materialized
    h.changelog.append(ChangelogPart(h.start, h.count, changes=[(-1, m) for m in metas] + data))
    monkeypatch.setattr(reader_module, "read_metadata", lambda path: meta)
    after = explorer.open(PRODUCTION / name, uids=uids).keyed_state(operator="user-activity")
    after = after[after["subtask"] == 0]

    def rows(df, state, key):
        return df[(df["state"] == state) & (df["key"] == key)]

    assert rows(after, "total", keys[0])["value"].tolist() == [999]
    assert rows(after, "amounts", keys[1]).empty and not rows(before, "amounts", keys[1]).empty
    assert rows(after, "amounts", keys[2])["value"].tolist() == rows(before, "amounts", keys[2])["value"].tolist() + [7]
    got = dict(zip(rows(after, "per_category", keys[3])["user_key"], rows(after, "per_category", keys[3])["value"]))
    want = dict(zip(rows(before, "per_category", keys[3])["user_key"], rows(before, "per_category", keys[3])["value"]))
    assert got == {**want, "zzz": 5}
    assert removed_category not in set(rows(after, "per_category", keys[4])["user_key"])
    timers = rows(after, "_timer_state/event_user-timers", keys[0])["value"]
    assert 123456 in set(pd.to_numeric(timers)) or pd.Timestamp(123456, unit="ms", tz="UTC") in set(timers)
    # a state the log does not touch, and every other key, as materialized
    for state in ("stats",):
        pd.testing.assert_frame_equal(rows(after, state, keys[0]).reset_index(drop=True),
                                      rows(before, state, keys[0]).reset_index(drop=True))
    untouched = set(before["key"]) - set(keys)
    cols = ["state", "key", "namespace", "user_key", "value"]
    norm = lambda df: sorted(map(repr, df[df["key"].isin(untouched)][cols].itertuples(index=False)))  # noqa: E731
    assert norm(after) == norm(before)


@pytest.mark.parametrize("name", [FILE_MERGING[1], FORST[0], CHANGELOG[0]])
def test_random_damage_gives_only_state_explorer_errors(tmp_path, name):
    """Bytes overwritten at random (seeded) in _metadata or a state file: the snapshot reads, or fails with a
    StateExplorerError (a damaged value may also come back as raw bytes with a note)."""
    import random

    rng = random.Random(15)
    job = _damaged_copy(tmp_path, name)
    files = sorted(p for p in job.rglob("*") if p.is_file() and p.name != "EXPECTED.json")
    original = {p: p.read_bytes() for p in files}
    for _ in range(25):
        for p, b in original.items():
            p.write_bytes(b)
        victim = rng.choice(files)
        data = bytearray(original[victim])
        start = 8 if victim.name == "_metadata" else 0
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(start, len(data))] = rng.randrange(256)
        victim.write_bytes(bytes(data))
        try:
            snap = explorer.open(job)
            snap.keyed_state()
            snap.operator_state()
        except StateExplorerError as exc:
            assert str(job) in str(exc) or victim.name in str(exc)


def test_diff_of_a_snapshot_with_dict_keys_compares_them_by_value():
    """PyFlink's Row keys decode to dicts (unhashable): diff matches them by value instead of failing."""
    path = PRODUCTION / "pyflink-heap-canonical-savepoint"
    d = explorer.diff(explorer.open(path), explorer.open(path))
    assert len(d) > 0 and set(d["status"]) == {"unchanged"}
    assert any(isinstance(k, dict) for k in d["key"])

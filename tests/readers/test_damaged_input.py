"""Damaged input (issue 16): every failure a StateExplorerError naming the file, no silent change, no escape."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import pytest

import explorer
from explorer.errors import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotFormatError,
    StateExplorerError,
    UnsafePathError,
)
from explorer.format import checksums
from explorer.format.snapshot import METADATA_FILE, read_metadata, write_metadata
from explorer.readers.base import SnapshotReader, convert_failure
from explorer.readers.flink.compression import unframe

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "sample_data"


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _flip(path: Path, at: int) -> None:
    b = bytearray(path.read_bytes())
    b[at] ^= 0x10
    path.write_bytes(bytes(b))


def _rewrite_metadata(folder: Path, change) -> None:
    meta = read_metadata(folder)
    change(meta)
    write_metadata(folder, meta)


# --- the boundary ---------------------------------------------------------------------------
class _Broken(SnapshotReader):
    format_name = "broken"

    def __init__(self, path, failure=None):
        super().__init__(path)
        self.failure = failure

    @classmethod
    def detect(cls, path):
        return False

    def info(self):
        raise self.failure

    def operators(self):
        return None

    def states(self):
        return None

    def subtasks(self):
        return None

    def keyed_pieces(self, query):
        self.current_file = self.path / "data.bin"
        yield from ()
        raise self.failure


@pytest.mark.parametrize("failure, kind", [
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), SnapshotCorruptError),
    (OverflowError("int too big to convert"), SnapshotCorruptError),
    (struct.error("unpack requires a buffer of 8 bytes"), SnapshotCorruptError),
    (AssertionError(), SnapshotFormatError),
    (AttributeError("'NoneType' object has no attribute 'x'"), SnapshotFormatError),
    (KeyError("operators"), SnapshotFormatError),
    (MemoryError(), SnapshotCorruptError),
])
def test_the_boundary_turns_lower_failures_into_the_tree_naming_the_file(tmp_path, failure, kind):
    reader = _Broken(tmp_path, failure)
    with pytest.raises(kind, match=str(tmp_path)) as info:
        reader.info()
    assert info.value.__cause__ is failure
    with pytest.raises(kind, match="data.bin") as info:
        list(reader.keyed_pieces(None))
    assert type(failure).__name__ in str(info.value)


def test_a_vanished_file_is_named(tmp_path):
    err = convert_failure(FileNotFoundError(2, "No such file", str(tmp_path / "x.parquet")), tmp_path)
    assert isinstance(err, SnapshotCorruptError) and "x.parquet" in str(err) and "vanished" in str(err)


def test_a_tree_error_without_the_path_gets_it(tmp_path):
    from explorer.errors import KeyTypeError

    err = convert_failure(KeyTypeError("a key is None; null keys are not allowed"), tmp_path)
    assert isinstance(err, KeyTypeError) and str(tmp_path) in str(err)


# --- engine snapshots: SHA-256 by default, listed files only ---------------------------------
@pytest.fixture
def engine_savepoint(tmp_path) -> Path:
    return _copy(SAMPLE / "sessions" / "savepoint-heap", tmp_path)


def _a_data_file(folder: Path) -> Path:
    meta = read_metadata(folder)
    rel = next(r for r in meta["files"] if r.endswith(".parquet"))
    return folder / rel


def test_engine_damage_is_caught_by_default_and_names_the_file(engine_savepoint):
    f = _a_data_file(engine_savepoint)
    _flip(f, f.stat().st_size // 2)
    snap = explorer.open(engine_savepoint)
    with pytest.raises(SnapshotCorruptError, match="SHA-256") as info:
        snap.keyed_state()
    assert f.name in str(info.value)


def test_verify_false_still_skips_the_digests(engine_savepoint):
    f = _a_data_file(engine_savepoint)
    _flip(f, f.stat().st_size // 2)
    snap = explorer.open(engine_savepoint, verify=False)
    try:
        snap.keyed_state()
    except StateExplorerError as exc:  # Parquet may notice by itself; then the file is named
        assert str(engine_savepoint) in str(exc)


def test_a_file_missing_from_the_list_is_never_read(engine_savepoint):
    f = _a_data_file(engine_savepoint)
    rel = str(f.relative_to(engine_savepoint))
    _rewrite_metadata(engine_savepoint, lambda m: m["files"].pop(rel))
    with pytest.raises(SnapshotCorruptError, match="files list does not"):
        explorer.open(engine_savepoint)


def test_an_emptied_files_list_is_an_error(engine_savepoint):
    _rewrite_metadata(engine_savepoint, lambda m: m["files"].clear())
    with pytest.raises(SnapshotCorruptError, match="files list does not"):
        explorer.open(engine_savepoint, verify=False)


def test_crafted_metadata_with_a_valid_crc_is_a_clean_error(engine_savepoint):
    def craft(m):
        for o in m["operators"]:
            for sub in o["subtasks"]:
                sub["heavy_hitters"] = {"entries": [[1, "x"]]}
    _rewrite_metadata(engine_savepoint, craft)
    snap = explorer.open(engine_savepoint)
    with pytest.raises(StateExplorerError, match=str(engine_savepoint)):
        snap.heavy_hitters()


def test_a_file_vanishing_during_the_read_is_named(engine_savepoint):
    snap = explorer.open(engine_savepoint)
    f = _a_data_file(engine_savepoint)
    f.unlink()
    with pytest.raises(SnapshotCorruptError) as info:
        snap.keyed_state()
    assert f.name in str(info.value)


# --- containment ------------------------------------------------------------------------------
def test_a_metadata_symlink_out_of_the_folder_is_refused(engine_savepoint, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(str(engine_savepoint / METADATA_FILE), outside / METADATA_FILE)
    (engine_savepoint / METADATA_FILE).symlink_to(outside / METADATA_FILE)
    with pytest.raises(UnsafePathError, match="outside the snapshot"):
        read_metadata(engine_savepoint)


def test_a_shared_folder_linking_elsewhere_is_refused(tmp_path):
    from explorer.format.snapshot import resolve

    chk = tmp_path / "dir" / "chk-1"
    chk.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.sst").write_bytes(b"x")
    (tmp_path / "dir" / "shared").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match="resolves outside"):
        resolve(chk, "../shared/a.sst")
    (tmp_path / "dir" / "shared").unlink()
    (tmp_path / "dir" / "shared").mkdir()
    (tmp_path / "dir" / "shared" / "a.sst").write_bytes(b"y")
    assert resolve(chk, "../shared/a.sst").read_bytes() == b"y"


# --- checkpoint directories -------------------------------------------------------------------
def test_a_damaged_newest_checkpoint_is_passed_over_with_a_note_and_a_warning(tmp_path):
    d = _copy(SAMPLE / "url_counts" / "checkpoints", tmp_path)
    chks = sorted((p for p in d.iterdir() if p.name.startswith("chk-")), key=lambda p: int(p.name[4:]))
    newest, older = chks[-1], chks[-2]
    _flip(newest / METADATA_FILE, 40)  # inside the JSON: the CRC no longer matches
    with pytest.warns(UserWarning, match=f"opened {older.name}"):
        snap = explorer.open(d)
    assert snap.path == older
    assert any(newest.name in n and "passed over" in n for n in snap.notes)


def test_a_directory_whose_checkpoints_are_all_damaged_is_an_error(tmp_path):
    d = _copy(SAMPLE / "url_counts" / "checkpoints", tmp_path)
    for p in d.iterdir():
        if p.name.startswith("chk-"):
            _flip(p / METADATA_FILE, 40)
    with pytest.raises(SnapshotError, match="no chk-N folder opens"):
        explorer.open(d)


# --- checksums of the foreign formats ---------------------------------------------------------
def test_crc32c_matches_the_standard_check_value():
    assert checksums.crc32c(b"123456789") == 0xE3069283
    assert checksums.crc32c(b"") == 0


def _frame(payload: bytes, crc: int | None = None) -> bytes:
    crc = checksums.masked_crc32c(payload) if crc is None else crc
    body = crc.to_bytes(4, "little") + payload
    return b"\xff\x06\x00\x00sNaPpY" + bytes([0x01]) + len(body).to_bytes(3, "little") + body


def test_snappy_frames_are_checked_against_their_crc():
    assert unframe(_frame(b"hello"), 0, len(_frame(b"hello"))) == b"hello"
    bad = _frame(b"hello", crc=0x12345678)
    with pytest.raises(SnapshotCorruptError, match="CRC-32C"):
        unframe(bad, 0, len(bad))


def test_a_snappy_chunk_stating_a_huge_length_is_refused_before_decompressing():
    """Found by the fuzz run (seed 43, case 16512): a damaged chunk of a Snappy-compressed Flink
    checkpoint stated 512 MiB decompressed. The decompressor allocates the stated length first and
    aborts the process when it cannot (a crash with a tight memory limit), so the length is
    checked (against what Snappy can expand to, and the framing format's 65,536 bytes) first."""
    import cramjam

    raw = bytes(cramjam.snappy.compress_raw(b"abc" * 100))
    payload = b"\xff\xff\xff\xff\x01" + raw[2:]  # the stated length (a varint32) now 536,870,911
    body = checksums.masked_crc32c(b"abc" * 100).to_bytes(4, "little") + payload
    framed = b"\xff\x06\x00\x00sNaPpY" + bytes([0x00]) + len(body).to_bytes(3, "little") + body
    with pytest.raises(SnapshotCorruptError, match=r"states 536870911 bytes decompressed; expected at most \d+"):
        unframe(framed, 0, len(framed))
    good = checksums.masked_crc32c(b"abc" * 100).to_bytes(4, "little") + raw
    ok = b"\xff\x06\x00\x00sNaPpY" + bytes([0x00]) + len(good).to_bytes(3, "little") + good
    assert unframe(ok, 0, len(ok)) == b"abc" * 100


def test_an_sst_block_whose_crc32c_does_not_match_is_an_error():
    from explorer.format.sst.file import SstError, SstFile

    path = SAMPLE / "flink/flink-1.20-rocksdb-incremental-checkpoint/shared/40405756-31fc-4a2f-8cca-9dc99dc77221"
    data = path.read_bytes()
    f = SstFile(data, path.name)
    assert f.checksum_type == 1
    handles = f.data_handles()
    off, size = handles[0]
    f.verify_block(off, size)  # undamaged: fine
    damaged = bytearray(data)
    damaged[off + size // 2] ^= 0x01
    g = SstFile(bytes(damaged), path.name)
    with pytest.raises(SstError, match="checksum") as info:
        g.verify_block(off, size)
    assert isinstance(info.value, SnapshotCorruptError) and path.name in str(info.value)


def test_a_damaged_sst_of_a_flink_checkpoint_is_an_error_not_fewer_rows(tmp_path):
    from explorer.format.sst.file import SstFile

    d = _copy(SAMPLE / "flink/flink-1.20-rocksdb-incremental-checkpoint", tmp_path)
    path = d / "shared" / "40405756-31fc-4a2f-8cca-9dc99dc77221"
    off, size = SstFile(path.read_bytes(), path.name).data_handles()[0]
    _flip(path, off + size // 2)
    with pytest.raises(SnapshotCorruptError, match=path.name):
        explorer.open(d).keyed_state()


def test_flink_key_group_offsets_out_of_order_or_past_the_end_are_corruption():
    from explorer.errors import FlinkCorruptError
    from explorer.readers.flink.fullformat import key_group_spans

    assert key_group_spans([10, 20, 20, 30], 0, 10, 40) == [(0, 10, 20), (2, 20, 30), (3, 30, 40)]
    with pytest.raises(FlinkCorruptError, match="decrease"):
        key_group_spans([10, 30, 20], 0, 10, 40)
    with pytest.raises(FlinkCorruptError, match="past the end"):
        key_group_spans([10, 20, 50], 0, 10, 40)


def test_spark_state_files_are_checked_against_their_hadoop_crc_files(tmp_path):
    """Spark writes each checkpoint file with a ``.NAME.crc`` side file (Hadoop's CRC-32 per 512
    bytes): a damaged state store file is an error naming it, not other rows."""
    from explorer.format.checksums import verify_hadoop_crc

    d = _copy(SAMPLE / "spark/agg-hdfs", tmp_path)
    stores = sorted(p for p in (d / "state").rglob("*") if p.suffix in (".delta", ".snapshot"))
    assert stores and all(verify_hadoop_crc(p, p.read_bytes()) for p in stores)
    for p in stores:
        _flip(p, p.stat().st_size // 2)
    with pytest.raises(SnapshotCorruptError, match=r"(?s)state/\d+/\d+/\d+\.(delta|snapshot).*CRC-32"):
        explorer.open(d).keyed_state()
    # a file without a side file is read unchecked, as Spark does
    bare = tmp_path / "bare.delta"
    bare.write_bytes(b"x")
    assert verify_hadoop_crc(bare, b"x") is False


def test_analyses_of_a_read_that_succeeded_do_not_fail_on_a_null_key(tmp_path):
    """Fuzz finding (seed 16, cases 3470 and 4975): a huge length written into a Flink SQL
    savepoint's state file made one key decode to null; the read succeeded, then hot_keys()
    failed with a raw ValueError (the null key's dictionary index became a negative code)."""
    from explorer.errors import StateExplorerError

    d = _copy(SAMPLE / "flink/sql-groupby-savepoint", tmp_path)
    f = d / "9e8cfe1e-b852-416c-b37c-d2a32296b516"
    data = f.read_bytes()
    f.write_bytes(data[:13192] + b"\x7f\xff\xff\xff" + data[13196:])
    try:
        snap = explorer.open(d)
        df = snap.keyed_state()
    except StateExplorerError:
        return  # a reader that rejects the damaged key is as good
    hot = snap.hot_keys(5)
    kgd = snap.key_group_distribution()
    assert len(hot) == 5 and len(kgd) > 0
    assert df["key"].isna().sum() <= 1

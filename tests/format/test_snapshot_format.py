"""The snapshot format refuses what it does not know and detects damage."""

import json
import struct
import zlib

import pytest

from explorer.errors import SnapshotCorruptError, SnapshotFormatError, UnsafePathError
from explorer.format.snapshot import (
    FORMAT_VERSION,
    MAGIC,
    read_metadata,
    resolve,
    verify_snapshot,
    write_metadata,
)


def test_metadata_round_trips(tmp_path):
    meta = {"checkpoint_id": 7, "kind": "savepoint", "files": {}, "nested": {"a": [1, 2.5, None, "x"]}}
    write_metadata(tmp_path, meta)
    assert read_metadata(tmp_path) == meta
    raw = (tmp_path / "_metadata").read_bytes()
    assert raw.startswith(MAGIC)
    assert struct.unpack(">I", raw[8:12])[0] == FORMAT_VERSION
    assert not (tmp_path / "_metadata.inprogress").exists()


def _rewrite(path, version=FORMAT_VERSION, magic=MAGIC, body=b"{}", crc=None, cut=0):
    data = struct.pack(">8sIQ", magic, version, len(body)) + body + struct.pack(">I", zlib.crc32(body) if crc is None else crc)
    path.write_bytes(data[: len(data) - cut] if cut else data)


def test_an_unknown_version_fails_loudly(tmp_path):
    _rewrite(tmp_path / "_metadata", version=99)
    with pytest.raises(SnapshotFormatError, match=r"_metadata: unrecognized snapshot format version 99; .*reads versions 1"):
        read_metadata(tmp_path)


def test_wrong_magic_names_what_was_found_and_expected(tmp_path):
    _rewrite(tmp_path / "_metadata", magic=b"\x00\x00\x00\x05FLNK")
    with pytest.raises(SnapshotFormatError, match=r"found magic bytes .*FLNK.*expected .*SXSNAP"):
        read_metadata(tmp_path)


def test_torn_and_flipped_metadata_are_detected(tmp_path):
    body = json.dumps({"checkpoint_id": 1}).encode()
    _rewrite(tmp_path / "_metadata", body=body, cut=3)
    with pytest.raises(SnapshotCorruptError, match="torn write"):
        read_metadata(tmp_path)
    _rewrite(tmp_path / "_metadata", body=body, crc=zlib.crc32(body) ^ 1)
    with pytest.raises(SnapshotCorruptError, match="checksum mismatch"):
        read_metadata(tmp_path)
    (tmp_path / "_metadata").write_bytes(b"SX")
    with pytest.raises(SnapshotCorruptError, match="shorter than"):
        read_metadata(tmp_path)


def test_missing_metadata_says_what_was_expected(tmp_path):
    with pytest.raises(SnapshotFormatError, match="no such file; expected the _metadata"):
        read_metadata(tmp_path)


@pytest.mark.parametrize("bad", ["../x.parquet", "/etc/passwd", "keyed/../../x", "../shared/../chk-1/x", "../other/x"])
def test_paths_in_metadata_never_escape(tmp_path, bad):
    snap = tmp_path / "chk-1"
    snap.mkdir()
    with pytest.raises(UnsafePathError):
        resolve(snap, bad)


def test_symlinks_out_of_the_snapshot_are_refused(tmp_path):
    snap = tmp_path / "sp"
    snap.mkdir()
    (tmp_path / "secret").write_text("x")
    (snap / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(UnsafePathError, match="resolves outside"):
        resolve(snap, "link")


def test_shared_files_of_incremental_checkpoints_resolve_one_level_up(tmp_path):
    snap = tmp_path / "chk-3"
    snap.mkdir()
    (tmp_path / "shared").mkdir()
    assert resolve(snap, "../shared/op-0-000012.sst") == (tmp_path / "shared" / "op-0-000012.sst").resolve()


def test_data_files_are_checked_by_size_and_checksum(tmp_path):
    (tmp_path / "keyed").mkdir()
    f = tmp_path / "keyed" / "0.parquet"
    f.write_bytes(b"0123456789")
    from explorer.format.snapshot import file_entry

    write_metadata(tmp_path, {"files": {"keyed/0.parquet": file_entry(tmp_path, f)}})
    assert verify_snapshot(tmp_path)["files"]
    f.write_bytes(b"0123456780")
    with pytest.raises(SnapshotCorruptError, match="SHA-256"):
        verify_snapshot(tmp_path)
    f.write_bytes(b"01234")
    with pytest.raises(SnapshotCorruptError, match="found 5 bytes, expected 10"):
        verify_snapshot(tmp_path)
    f.unlink()
    with pytest.raises(SnapshotCorruptError, match="missing"):
        verify_snapshot(tmp_path)


def test_a_stored_state_round_trips_its_metadata_json_and_refuses_a_description_without_its_fields():
    from explorer.engine.state import MapStateDescriptor
    from explorer.engine.ttl import StateTtlConfig
    from explorer.errors import SnapshotFormatError
    from explorer.format.states import StoredState

    desc = MapStateDescriptor("counts", str, int, ttl=StateTtlConfig(60_000)).describe()
    state = StoredState.of(desc)
    assert (state.name, state.kind, state.has_ttl) == ("counts", "map", True)
    assert state.user_key_type == {"type": "str"} and state.value_info.describe() == {"type": "int"}
    assert state.describe() == desc and StoredState.of(state) is state
    with pytest.raises(SnapshotFormatError, match="value_type"):
        StoredState.of({"name": "counts", "kind": "map"})


def test_a_file_entry_is_checked_against_its_sha256_or_xxh3_128_and_needs_one(tmp_path):
    from explorer.format.snapshot import check_file_digest, sha256_file, xxh3_128_file

    path = tmp_path / "data.bin"
    path.write_bytes(b"state" * 1000)
    check_file_digest(path, {"bytes": 5000, "sha256": sha256_file(path)})
    check_file_digest(path, {"bytes": 5000, "xxh3_128": xxh3_128_file(path)})
    good = xxh3_128_file(path)
    path.write_bytes(b"stats" * 1000)  # same size, other bytes
    with pytest.raises(SnapshotCorruptError, match="XXH3-128"):
        check_file_digest(path, {"bytes": 5000, "xxh3_128": good})
    with pytest.raises(SnapshotFormatError, match="records no checksum"):
        check_file_digest(path, {"bytes": 5000})

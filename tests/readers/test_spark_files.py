"""Spark's state store files read without a JVM: every checksum they carry is verified, damage is an error
naming the file (never fewer or wrong rows), and the column-wise UnsafeRow decode is exact."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

import explorer
from explorer.errors import SnapshotCorruptError, SnapshotError
from explorer.readers.spark.unsaferow import decode_rows

ROOT = Path(__file__).resolve().parents[2] / "sample_data" / "spark"


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(ROOT / name, dst)
    return dst


def _flip(f: Path, at: int) -> None:
    data = bytearray(f.read_bytes())
    data[at] ^= 0x40
    f.write_bytes(bytes(data))


def _read(path: Path):
    return explorer.open(path, jvm=False).keyed_state()


def _drop_sidecars(f: Path) -> None:
    for side in (f.with_name(f".{f.name}.crc"), f.with_name(f"{f.name}.crc")):
        side.unlink(missing_ok=True)


def test_hadoop_crc_files_are_checked(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb")
    sst = sorted((path / "state" / "0" / "1" / "SSTs").glob("*.sst"))[-1]
    _flip(sst, 10)
    with pytest.raises(SnapshotCorruptError, match=rf"{sst.name}.*CRC-32 .*\.{sst.name}\.crc records"):
        _read(path)


def test_sst_block_checksums_are_checked(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb")
    latest = max((path / "state" / "0" / "1").glob("*.zip"), key=lambda f: int(f.stem))
    import json
    import zipfile

    meta = json.loads(zipfile.ZipFile(latest).read("metadata").decode().splitlines()[1])
    sst = path / "state" / "0" / "1" / "SSTs" / meta["sstFiles"][0]["dfsSstFileName"]
    _drop_sidecars(sst)
    _flip(sst, 20)  # inside the first data block
    with pytest.raises(SnapshotCorruptError, match=rf"{sst.name}.*checksum"):
        _read(path)


def test_zip_member_crcs_are_checked(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb")
    latest = max((path / "state" / "0" / "2").glob("*.zip"), key=lambda f: int(f.stem))
    _drop_sidecars(latest)
    import zipfile

    info = next(i for i in zipfile.ZipFile(latest).infolist() if i.filename.startswith("OPTIONS"))
    data = latest.read_bytes()
    name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
    _flip(latest, info.header_offset + 30 + name_len + extra_len + info.compress_size // 2)
    with pytest.raises(SnapshotCorruptError, match=rf"{latest.name}"):
        _read(path)


def test_lz4_block_checksums_of_changelogs_are_checked(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb-changelog")
    f = path / "state" / "0" / "3" / "2.changelog"
    _drop_sidecars(f)
    data = f.read_bytes()
    (clen,) = struct.unpack_from("<i", data, 9)
    _flip(f, 21 + clen - 1)  # the block's last byte: a literal, so it still decompresses
    with pytest.raises(SnapshotCorruptError, match=r"2\.changelog"):
        _read(path)


def test_sparks_own_checksum_files_are_checked(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb-v2")
    f = sorted((path / "state" / "0" / "0").glob("6_*.changelog"))[0]
    (f.parent / f".{f.name}.crc").unlink()  # Hadoop's: so that Spark 4's JSON one is what catches it
    _flip(f, 30)
    with pytest.raises(SnapshotCorruptError, match=rf"{f.name}.*CRC-32C.*{f.name}\.crc records"):
        _read(path)


def test_a_missing_changelog_is_an_error_naming_the_folder(tmp_path):
    path = _copy(tmp_path, "agg-rocksdb-changelog")
    (path / "state" / "0" / "1" / "3.changelog").unlink()
    with pytest.raises(SnapshotError, match=r"state/0/1.*3\.changelog"):
        _read(path)


def test_older_batches_of_rocksdb_stores_replay_their_changelogs():
    """Batch by batch, the files alone give the same rows as the zips Spark wrote for that batch (the same
    query with and without changelog checkpointing)."""
    with_zips = explorer.open(ROOT / "agg-rocksdb", jvm=False).reader
    with_changelogs = explorer.open(ROOT / "agg-rocksdb-changelog", jvm=False).reader
    v2 = explorer.open(ROOT / "agg-rocksdb-v2", jvm=False).reader

    def rows(reader):
        df = explorer.open(reader.path, jvm=False, batch_id=reader.batch_id).keyed_state()
        return sorted((k, repr(v)) for k, v in zip(df["key"], df["value"]))

    for b in with_zips.checkpoint_ids():
        want = rows(with_zips.at_batch(b))
        assert want and rows(with_changelogs.at_batch(b)) == want == rows(v2.at_batch(b)), b


def _unsafe_row(values: list, types: list[str]) -> bytes:
    """An UnsafeRow written the way Spark lays it out (null bits, 8-byte slots, 8-byte aligned data)."""
    n = len(types)
    bitset = ((n + 63) // 64) * 8
    nulls = 0
    slots, data = [], b""
    fixed = bitset + 8 * n
    for j, (v, t) in enumerate(zip(values, types)):
        if v is None:
            nulls |= 1 << j
            slots.append(b"\0" * 8)
        elif t == "string":
            raw = v.encode()
            slots.append(struct.pack("<q", (fixed + len(data)) << 32 | len(raw)))
            data += raw + b"\0" * (-len(raw) % 8)
        elif t == "integer":
            slots.append(struct.pack("<i", v) + b"\0" * 4)
        elif t == "double":
            slots.append(struct.pack("<d", v))
        elif t == "boolean":
            slots.append(struct.pack("<?", v) + b"\0" * 7)
        else:
            slots.append(struct.pack("<q", v))
    return nulls.to_bytes(bitset, "little") + b"".join(slots) + data


def test_unsafe_rows_decode_column_wise_exactly():
    types = ["string", "long", "integer", "double", "boolean", "string"]
    rows = [["ü-1", 2**62, -5, 0.5, True, ""], [None, -1, None, None, False, "x" * 40],
            ["", None, 2**31 - 1, -0.0, None, None]]
    schema = {"type": "struct", "fields": [{"name": n, "type": t} for n, t in
                                           zip(["s", "count", "i", "d", "b", "count"], types)]}
    arr = decode_rows([b"\0" + _unsafe_row(r, types) for r in rows], schema, "test", skip=1)
    assert arr.type.names == ["s", "count", "i", "d", "b", "count_2"]  # repeated names made unique
    assert [list(d.values()) for d in arr.to_pylist()] == rows
    assert arr.field(1).type == pa.int64() and arr.field(2).type == pa.int32()


def test_a_row_pointing_outside_itself_is_an_error():
    types = ["string"]
    row = bytearray(_unsafe_row(["abc"], types))
    row[8:16] = struct.pack("<q", 16 << 32 | 400)  # 400 bytes from a 24-byte row
    schema = {"type": "struct", "fields": [{"name": "s", "type": "string"}]}
    with pytest.raises(SnapshotCorruptError, match=r"'s' of row 0 points at bytes 16\.\.416 outside its row of 24"):
        decode_rows([bytes(row)], schema, "test")


def test_other_encodings_are_left_to_spark(tmp_path):
    """Row checksums, Avro values or another codec: not read from the files (Spark's data source reads them)."""
    from explorer.errors import ReaderError
    from explorer.readers.spark import SparkCheckpointReader

    path = _copy(tmp_path, "agg-rocksdb")
    f = path / "offsets" / "0"
    f.write_text(f.read_text().replace('"spark.sql.streaming.stateStore.rowChecksum.enabled":"false"',
                                       '"spark.sql.streaming.stateStore.rowChecksum.enabled":"true"'))
    (path / "offsets" / ".0.crc").unlink(missing_ok=True)
    assert SparkCheckpointReader(path, batch_id=0).jvm_free is False
    with pytest.raises(ReaderError, match="rowChecksum.enabled=true"):
        SparkCheckpointReader(path, batch_id=0, jvm=False).jvm_free
    assert SparkCheckpointReader(ROOT / "agg-rocksdb").jvm_free is True


@pytest.mark.parametrize("name", ["offsets/5", "commits/5", "metadata", "state/0/_metadata/metadata"])
def test_logs_and_metadata_are_checked_against_their_crc_files(tmp_path, name):
    """The offset and commit logs and the metadata files carry Hadoop's CRC side files too; a flipped
    byte in one is an error naming it, not a changed watermark, batch or operator."""
    path = _copy(tmp_path, "agg-hdfs")
    f = path / name
    _flip(f, len(f.read_bytes()) // 2)
    with pytest.raises(SnapshotCorruptError, match=rf"{f}: bytes .* have CRC-32 .* as \.{f.name}\.crc records"):
        snap = explorer.open(path, jvm=False)
        snap.keyed_state()
        snap.info()

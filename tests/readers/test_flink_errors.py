"""Damaged or foreign input: clear errors naming the file, what was found and what was expected."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from explorer.errors import ReaderError, SnapshotCorruptError, SnapshotFormatError, SnapshotNotFoundError, UnsafePathError
from explorer.readers.base import KeyedStateQuery
from explorer.readers.flink import FlinkSnapshotReader
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.handles import HandleResolver, StreamHandle
from explorer.readers.flink.javaser import parse_java_object

from tests.support.flink import FLINK_FIXTURES, expected, load

CANONICAL = "heap-canonical-savepoint"


@pytest.fixture()
def copy(tmp_path):
    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(FLINK_FIXTURES / name, dest)
        return dest
    return make


def test_truncated_metadata(copy):
    d = copy(CANONICAL)
    data = (d / "_metadata").read_bytes()
    (d / "_metadata").write_bytes(data[: len(data) // 2])
    with pytest.raises(SnapshotCorruptError, match=r"_metadata: file ends early at byte \d+ of \d+"):
        FlinkSnapshotReader(d)
    (d / "_metadata").write_bytes(data[:5])
    with pytest.raises(SnapshotFormatError, match="found 5 bytes, expected at least 8"):
        FlinkSnapshotReader(d)


def test_wrong_magic(copy):
    d = copy(CANONICAL)
    data = bytearray((d / "_metadata").read_bytes())
    data[0:4] = b"\xca\xfe\xba\xbe"
    (d / "_metadata").write_bytes(bytes(data))
    with pytest.raises(SnapshotFormatError, match=r"_metadata: found magic number 0xcafebabe, expected 0x4960672d") as e:
        FlinkSnapshotReader(d)
    assert str(d) in str(e.value)
    assert not FlinkSnapshotReader.detect(d)


def test_unknown_version(copy):
    d = copy(CANONICAL)
    data = bytearray((d / "_metadata").read_bytes())
    data[4:8] = (99).to_bytes(4, "big")
    (d / "_metadata").write_bytes(bytes(data))
    with pytest.raises(SnapshotFormatError, match="found metadata version 99, expected one of 3, 4, 5, 6, 7"):
        FlinkSnapshotReader(d)


def test_not_a_snapshot(tmp_path):
    with pytest.raises(SnapshotNotFoundError, match="found no '_metadata' file"):
        FlinkSnapshotReader(tmp_path)
    with pytest.raises(SnapshotNotFoundError, match="no such file or folder"):
        FlinkSnapshotReader(tmp_path / "missing")


def _data_files(d: Path) -> list[Path]:
    return [p for p in d.iterdir() if p.name not in ("_metadata", "EXPECTED.json")]


def test_missing_and_truncated_state_files(copy):
    d = copy(CANONICAL)
    big = max(_data_files(d), key=lambda p: p.stat().st_size)
    data = big.read_bytes()
    big.write_bytes(data[: len(data) // 3])
    reader = FlinkSnapshotReader(d)  # metadata alone is fine
    with pytest.raises(SnapshotCorruptError, match=rf"{big.name}: found \d+ bytes, the metadata expects {len(data)}"):
        load(reader)
    big.unlink()
    with pytest.raises(SnapshotCorruptError, match="named in the metadata is missing"):
        load(FlinkSnapshotReader(d))


def test_unknown_serializer_comes_back_as_raw_bytes(copy):
    """Rename the Tuple2 serializer snapshot class in the real files: the rest still loads."""
    d = copy("rocksdb-canonical-savepoint-compressed")
    known = b"org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
    unknown = b"com.example.acme.CustomSerializer$CustomSerializerConfigSnapshotV9"
    unknown = unknown + b"x" * (len(known) - len(unknown))
    assert len(unknown) == len(known)
    patched = 0
    for p in _data_files(d):
        b = p.read_bytes()
        if known in b:
            p.write_bytes(b.replace(known, unknown))
            patched += 1
    assert patched >= 1
    reader = FlinkSnapshotReader(d)
    frames = load(reader)
    exp = expected(d.name)
    first = frames[("user-state", "first_event")]
    assert set(first["key"]) == set(exp["users"])
    assert all(isinstance(v, bytes) and v for v in first["value"])
    assert any("CustomSerializer" in n and "raw bytes" in n for n in reader.notes)
    st = reader.states()
    assert st.loc[st["state"] == "first_event", "value_type"].iat[0].startswith("unknown (com.example.acme")
    stats = frames[("user-state", "stats")].set_index("key")["value"]
    assert {u: v["count"] for u, v in stats.items()} == {u: e["count"] for u, e in exp["users"].items()}


def test_paths_in_metadata_stay_inside_the_snapshot(tmp_path):
    meta = tmp_path / "snap" / "_metadata"
    meta.parent.mkdir()
    meta.write_bytes(b"")
    r = HandleResolver(meta)
    for h in (StreamHandle("file", "/etc/passwd", 10), StreamHandle("relative", "../../etc/passwd", 10),
              StreamHandle("file", "file:/somewhere/else/chk-3/../../../etc/passwd", 10)):
        with pytest.raises(UnsafePathError, match="outside the snapshot folder"):
            r.read(h)
    with pytest.raises(UnsafePathError, match="'s3' storage"):
        r.read(StreamHandle("file", "s3://bucket/job/chk-1/x", 10))


def test_checkpoint_properties_are_parsed_not_deserialized():
    reader = FlinkSnapshotReader(FLINK_FIXTURES / CANONICAL)
    props = reader.meta.properties

    def plain(x):
        if isinstance(x, dict):
            return all(isinstance(k, str) and plain(v) for k, v in x.items())
        if isinstance(x, list):
            return all(plain(v) for v in x)
        return isinstance(x, (str, int, float, bool, bytes, type(None)))

    assert plain(props)
    assert props["checkpointType"]["formatType"]["name"] == "CANONICAL"
    with pytest.raises(ValueError, match="not a Java serialization stream"):
        parse_java_object(DataInput(b"\x80\x04pickle"))


def test_reader_never_imports_code_running_modules():
    src = Path(FlinkSnapshotReader.__module__.replace(".", "/")).parent
    root = Path(__file__).resolve().parents[2] / src
    banned = {"pickle", "marshal", "shelve", "subprocess", "dill", "cloudpickle", "jpype", "py4j"}
    for f in root.glob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                assert not banned & {n.split(".")[0] for n in names}, f"{f.name} imports {names}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("eval", "exec", "compile", "__import__"), f.name


def test_key_serializer_unknown_is_a_reader_error(copy):
    d = copy(CANONICAL)
    known = b"org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot"
    unknown = b"com.example.KeySerializer$Snapshot".ljust(len(known), b"x")
    for p in _data_files(d):
        b = p.read_bytes()
        i = b.find(known)
        if 0 <= i < 64:  # the key serializer comes first in the header
            p.write_bytes(b[:i] + unknown + b[i + len(known):])
    reader = FlinkSnapshotReader(d)
    with pytest.raises(ReaderError, match="key serializer com.example.KeySerializer"):
        load(reader, KeyedStateQuery(operators=frozenset({"user-state"})))


def test_damaged_sst_file(copy):
    d = copy("rocksdb-incremental-checkpoint")
    reader = FlinkSnapshotReader(d)
    # the SST files big enough to live in shared/ (small ones are inline in _metadata)
    ssts = [reader.resolver.local_path(x) for op in reader.meta.operators for st in op.subtasks
            if st.managed_keyed is not None
            for local, x in st.managed_keyed.shared + st.managed_keyed.private
            if local.endswith(".sst") and x.kind != "bytes"]
    assert ssts
    data = ssts[0].read_bytes()
    ssts[0].write_bytes(data[:-8] + b"\x00" * 8)  # same size, magic number gone
    with pytest.raises(SnapshotCorruptError, match=r"found table magic 0x0, expected 0x88e241b785f4cff7"):
        load(FlinkSnapshotReader(d))


def test_damaged_snappy_frame(copy):
    d = copy("heap-checkpoint-compressed")
    reader = FlinkSnapshotReader(d)
    files = [reader.resolver.local_path(st.managed_keyed.stream) for op in reader.meta.operators
             for st in op.subtasks if st.managed_keyed is not None and st.managed_keyed.stream.kind != "bytes"]
    data = bytearray(files[0].read_bytes())
    i = data.find(b"sNaPpY", len(data) // 2)
    data[i + 6] = 0x05  # a reserved chunk type right after a stream identifier
    files[0].write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match="keyed state is damaged"):
        load(FlinkSnapshotReader(d))


def test_unknown_serializer_in_the_heap_layout_skips_only_what_it_must(copy):
    """In the heap layout values are not length-prefixed: the key group is cut at the unknown value."""
    d = copy("heap-native-savepoint")
    known = b"org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
    unknown = b"com.example.acme.CustomSerializer$CustomSerializerConfigSnapshotV9".ljust(len(known), b"x")
    for p in _data_files(d):
        p.write_bytes(p.read_bytes().replace(known, unknown))
    reader = FlinkSnapshotReader(d)
    frames = load(reader)
    exp = expected(d.name)
    assert any("cannot decode" in n and "CustomSerializer" in n for n in reader.notes)
    # other operators are untouched
    sums = frames[("bucket-state", "amount_sum")]
    assert dict(zip(sums["key"].astype(str), sums["value"])) == exp["bucket_sums"]
    assert ("user-state", "first_event") not in frames


def test_a_value_pandas_cannot_hold_is_a_reader_error_not_damage(tmp_path):
    """A far-future Instant (year 3000: a valid Java value) decodes from its bytes; pandas cannot hold it.
    That is State Explorer's conversion failing, reported as a ReaderError naming the state and the
    conversion, never as damaged input (issue 33)."""
    import datetime as dt
    import struct

    import explorer

    name = "types-heap-canonical-savepoint"
    src = FLINK_FIXTURES / "production" / name
    dest = tmp_path / name
    shutil.copytree(src, dest)
    sec = int(dt.datetime(2023, 11, 14, 22, 13, 29, tzinfo=dt.timezone.utc).timestamp())
    old = struct.pack(">qi", sec, 387009007)  # user-00's first_seen, as Flink's InstantSerializer wrote it
    new = struct.pack(">qi", int(dt.datetime(3000, 1, 1, tzinfo=dt.timezone.utc).timestamp()), 387009007)
    hits = 0
    for f in dest.iterdir():
        data = f.read_bytes()
        if old in data:
            hits += data.count(old)
            f.write_bytes(data.replace(old, new))
    assert hits >= 1  # (the POJO profile holds the same Instant too)
    snap = explorer.open(dest, uids=["user-types"])
    assert len(snap.keyed_state(operator="user-types", state="tier")) > 0  # the other states read
    with pytest.raises(ReaderError, match=r"first_seen.*Instant of 32503680000 s does not fit a pandas Timestamp.*not damaged input") as info:
        snap.keyed_state(operator="user-types", state="first_seen")
    assert not isinstance(info.value, SnapshotCorruptError) and "damaged" not in str(info.value).replace("not damaged", "")

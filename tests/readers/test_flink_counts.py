"""Structural checks of Flink's unchecksummed streams (issue 16): a count or length is checked
against the bytes left before it is used, so a huge one fails at once with a clean error naming
the file, instead of a long loop, a walk backwards or a memory spike."""

from __future__ import annotations

import shutil
import struct

import pytest

import explorer
from explorer.errors import SnapshotCorruptError
from explorer.readers.flink import FlinkSnapshotReader
from explorer.readers.flink.datainput import MAX_EMPTY_COUNT, DataInput
from explorer.readers.flink.fullformat import scan
from explorer.readers.flink.serializers import PRIMITIVES, ListDecoder, MapDecoder

from tests.support.flink import FLINK_FIXTURES

LONG, STRING, VOID = PRIMITIVES["LongSerializer"], PRIMITIVES["StringSerializer"], PRIMITIVES["VoidNamespaceSerializer"]


def test_a_count_is_checked_against_the_bytes_left():
    body = struct.pack(">i", 2) + struct.pack(">qq", 7, 8)
    assert DataInput(body).read_count("longs", 8) == 2
    with pytest.raises(EOFError, match="count of 3 longs at offset 0"):
        DataInput(struct.pack(">i", 3) + body[4:]).read_count("longs", 8)
    with pytest.raises(EOFError, match="count of -1"):
        DataInput(struct.pack(">i", -1)).read_count()
    # values of no bytes: any count the bytes cannot contradict, up to a cap
    assert DataInput(struct.pack(">i", 1000)).read_count("voids", 0) == 1000
    with pytest.raises(EOFError, match="count of"):
        DataInput(struct.pack(">i", MAX_EMPTY_COUNT + 1)).read_count("voids", 0)


@pytest.mark.parametrize("decoder, what", [(ListDecoder(LONG), "list elements"),
                                           (MapDecoder(STRING, LONG), "map entries")])
def test_a_huge_collection_size_fails_before_any_element_is_read(decoder, what):
    inp = DataInput(struct.pack(">i", 0x7FFFFFF0) + bytes(64))
    with pytest.raises(EOFError, match=f"count of {0x7FFFFFF0} {what}"):
        decoder.read(inp)
    assert inp.pos == 4  # nothing read past the count


def test_a_string_longer_than_the_bytes_left_fails_at_once():
    # StringValue: length + 1 as a varint (here 2**28), then the chars
    with pytest.raises(EOFError, match="string of 268435455 chars"):
        STRING.read(DataInput(bytes([0x80, 0x80, 0x80, 0x80, 0x01]) + b"abc"))


def _heap_key_group(tmp_path):
    """A copy of the heap savepoint, one of its state files, and a key group with data in it."""
    d = tmp_path / "heap"
    shutil.copytree(FLINK_FIXTURES / "heap-native-savepoint", d)
    reader = FlinkSnapshotReader(d)
    for op in reader.meta.operators:
        for st in op.subtasks:
            mk = st.managed_keyed
            if mk is not None and mk.stream.kind != "bytes":
                path = reader.resolver.local_path(mk.stream)
                data = path.read_bytes()
                offs = sorted(o for o in mk.offsets if o > 0)
                for a, b in zip(offs, offs[1:] + [len(data)]):
                    # int key group, short state id, int count: a key group holding entries
                    if b - a > 10 and struct.unpack_from(">i", data, a + 6)[0] > 0:
                        return d, path, a
    raise AssertionError("no file-backed key group with entries in the heap savepoint")


def test_a_huge_entry_count_in_a_heap_key_group_is_a_clean_error_naming_the_file(tmp_path):
    d, path, at = _heap_key_group(tmp_path)
    data = bytearray(path.read_bytes())
    data[at + 6: at + 10] = struct.pack(">i", 0x7FFFFF00)
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotCorruptError, match=f"(?s){path.name}.*count of {0x7FFFFF00} entries"):
        explorer.open(d).keyed_state()


def test_a_negative_length_in_a_full_snapshot_stream_is_corruption_not_a_loop():
    # one key group (12) written with the full format: state id 0, then key length -8 (which would
    # step back onto itself), value length 4
    kg = 12
    body = struct.pack(">H", 0) + struct.pack(">i", -8) + struct.pack(">i", 4) + b"\x00\x00\x00\x01"
    with pytest.raises(SnapshotCorruptError, match="key group 12: the entry at offset 2 has a key of -8 bytes"):
        scan(body, [(kg, 0, len(body))], compressed=False)
    # a value length running past the end of the key group
    body = struct.pack(">H", 0) + struct.pack(">i", 1) + bytes([kg]) + struct.pack(">i", 1 << 30)
    with pytest.raises(SnapshotCorruptError, match="value of 1073741824 bytes"):
        scan(body, [(kg, 0, len(body))], compressed=False)


def test_a_max_parallelism_beyond_flinks_bound_is_corruption_not_a_huge_allocation(tmp_path):
    # A fuzz mutant (8 bytes copied inside the metadata) turned one operator's max parallelism into
    # 356,740,974: the read succeeded and hot_keys() then sized an array by it (a 2.7 GB MemoryError).
    src = FLINK_FIXTURES / "sql-groupby-savepoint"
    dst = tmp_path / "savepoint"
    shutil.copytree(src, dst)
    data = (src / "_metadata").read_bytes()
    (dst / "_metadata").write_bytes(data[:809] + data[21:29] + data[817:])
    with pytest.raises(SnapshotCorruptError, match=r"_metadata: operator \w+ has parallelism .* expected 0 < parallelism"):
        explorer.open(dst).hot_keys()

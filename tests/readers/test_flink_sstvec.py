"""sstvec (the column-wise SST reader) on SST files written by RocksDB itself through rocksdict.

Flink's own fixtures (test_flink_reader.py) use Snappy and short entries; these
files cover every block compression RocksDB offers here, entries whose varints
take more than one byte (values of 128 bytes and more), and keys longer than the
buffer's zero margins.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

rocksdict = pytest.importorskip("rocksdict")

from explorer.readers.flink import sstvec  # noqa: E402
from explorer.readers.flink.reader import _repeat_string  # noqa: E402
from explorer.readers.flink.rocksdb import resolve  # noqa: E402
from explorer.readers.flink.sst import SstFile  # noqa: E402

COMPRESSIONS = ["none", "snappy", "lz4", "zstd"]


def _write_sst(path, compression: str, items: list[tuple[bytes, bytes]]) -> SstFile:
    opts = rocksdict.Options(raw_mode=True)
    opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    table = rocksdict.BlockBasedOptions()
    table.set_format_version(5)  # the newest layout the reader knows (Flink's RocksDB writes 5)
    opts.set_block_based_table_factory(table)
    writer = rocksdict.SstFileWriter(options=opts)
    writer.open(str(path))
    for k, v in items:
        writer[k] = v
    writer.finish()
    return SstFile(path.read_bytes(), path.name)


def _pairs(values, keys, ks, ke, vs, ve) -> list[tuple[bytes, bytes]]:
    kb, vb = keys.tobytes(), values.tobytes()
    return [(kb[a:b], vb[c:d]) for a, b, c, d in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist())]


def _items(rng: np.random.Generator, n: int, long_keys: bool) -> list[tuple[bytes, bytes]]:
    keys = set()
    while len(keys) < n:
        stem = f"user-{int(rng.integers(0, 10 * n)):07d}".encode()
        if long_keys and rng.random() < 0.3:
            stem += b"x" * int(rng.integers(100, 300))  # longer than the 128 zero bytes around the blocks
        keys.add(bytes([int(rng.integers(0, 128))]) + stem)
    out = []
    for k in sorted(keys):
        size = int(rng.choice([0, 5, 40, 127, 128, 300, 20000]))  # varints of 1, 2 and 3 bytes
        out.append((k, bytes(rng.integers(0, 256, size, dtype=np.uint8))))
    return out


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("long_keys", [False, True])
def test_every_compression_and_entry_size_reads_like_the_entry_reader(tmp_path, compression, long_keys):
    items = _items(np.random.default_rng(len(compression) + 10 * long_keys), 3000, long_keys)
    f = _write_sst(tmp_path / f"{compression}.sst", compression, items)
    values, keys, ks, ke, vs, ve, merged = sstvec.read_column_family([f])
    got = _pairs(values, keys, ks, ke, vs, ve)
    e = f.entries()
    ref_keys, ref_values, _ = resolve([(e.keys, e.seqs, e.types, e.values)])
    assert got == list(zip(ref_keys, ref_values)) == items  # one file of values: in key order
    assert merged == 0
    assert sstvec._data_handles(f) == f.data_handles()


def test_the_same_keys_in_two_files_resolve_to_one_row_each(tmp_path):
    """Two files (levels) holding the same keys: one row per key, in key-group order (RocksDB's
    SstFileWriter gives every entry sequence number 0, so only keys, not versions, are checked)."""
    rng = np.random.default_rng(5)
    items = _items(rng, 2000, False)
    a = _write_sst(tmp_path / "a.sst", "snappy", sorted(items[::2] + items[1:600:2]))
    b = _write_sst(tmp_path / "b.sst", "lz4", items[1::2])
    values, keys, ks, ke, vs, ve, _ = sstvec.read_column_family([a, b])
    got = _pairs(values, keys, ks, ke, vs, ve)
    assert sorted(k for k, _ in got) == [k for k, _ in items]
    assert dict(got).keys() == dict(items).keys()
    groups = [k[0] for k, _ in got]
    assert groups == sorted(groups)


@pytest.mark.parametrize("text", ["user-state", "", "é-🔥", "x" * 300])
@pytest.mark.parametrize("n", [0, 1, 1000])
def test_repeated_strings_equal_pa_repeat(text, n):
    got = _repeat_string(text, n)
    got.validate(full=True)
    assert got.equals(pa.repeat(pa.scalar(text, pa.string()), n))


def test_states_with_the_same_keys_share_one_decoded_key_column(monkeypatch):
    """columnar.KeyCache: value states of one operator holding the same keys decode them once, and the
    pieces equal those read with every key column decoded anew (cache of size 0)."""
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.flink import FlinkSnapshotReader, columnar

    from .flink_helpers import FLINK_FIXTURES

    caches = []
    real_init = columnar.KeyCache.__init__

    def pieces(size):
        def init(self, size_=size):
            real_init(self, size_)
            caches.append(self)

        with monkeypatch.context() as m:
            m.setattr(columnar.KeyCache, "__init__", init)
            reader = FlinkSnapshotReader(FLINK_FIXTURES / "rocksdb-incremental-checkpoint")
            return list(reader.keyed_pieces(KeyedStateQuery()))

    shared = pieces(4)
    hits = sum(c.hits for c in caches)
    caches.clear()
    alone = pieces(0)
    assert hits > 0 and sum(c.hits for c in caches) == 0
    assert len(shared) == len(alone) > 1
    for a, b in zip(shared, alone):
        assert a.equals(b)


def test_key_cache_decodes_again_when_any_key_byte_differs():
    from explorer.readers.flink import columnar
    from explorer.readers.flink.serializers import PRIMITIVES

    dec = PRIMITIVES["StringSerializer"]
    width, margin = 16, 128

    def key_buffer(words):
        buf = np.zeros(margin + width * len(words), dtype=np.uint8)
        for i, w in enumerate(words):
            raw = bytes([5, len(w) + 1]) + w.encode()  # key group 5, then StringValue: length + 1, chars
            buf[margin + i * width : margin + i * width + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
        ks = margin + width * np.arange(len(words))
        return columnar.Buf(buf), ks, ks + np.array([2 + len(w) for w in words])

    cache = columnar.KeyCache()
    a = key_buffer(["user-1", "user-2", "user-3"])
    first, _ = cache.read(dec, 1, *a)
    again, _ = cache.read(dec, 1, *key_buffer(["user-1", "user-2", "user-3"]))
    other, _ = cache.read(dec, 1, *key_buffer(["user-1", "user-9", "user-3"]))
    assert cache.hits == 1 and again is first
    assert first.values.to_pylist() == ["user-1", "user-2", "user-3"]
    assert other.values.to_pylist() == ["user-1", "user-9", "user-3"]

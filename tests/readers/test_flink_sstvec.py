"""sstvec (the column-wise SST reader) on SST files written by RocksDB itself through rocksdict.

Flink's own fixtures (test_flink_reader.py) use Snappy and short entries; these
files cover every block compression RocksDB offers here, entries whose varints
take more than one byte (values of 128 bytes and more), and keys longer than the
buffer's zero margins.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

rocksdict = pytest.importorskip("rocksdict")

from explorer.format.sst import columns as sstvec  # noqa: E402
from explorer.readers.base import CONSTANT_VALUES, make_piece  # noqa: E402
from explorer.format.sst.instance import resolve  # noqa: E402
from explorer.format.sst.file import SstError, SstFile  # noqa: E402

from tests.support.flink import varint  # noqa: E402

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
    """A piece's one-value columns are built from buffers, equal to pa.repeat, and their values recorded."""
    piece = make_piece({"operator": text, "state": text, "key": pa.array(range(n))})
    got = piece.column("operator").combine_chunks()
    got.validate(full=True)
    assert got.equals(pa.repeat(pa.scalar(text, pa.string()), n))
    assert json.loads(piece.schema.metadata[CONSTANT_VALUES]) == {"operator": text, "state": text}
    left_out = make_piece({"operator": text, "state": text, "key": pa.array(range(n))}, columns=["key", "state"])
    assert left_out.column_names == ["key", "state"] and left_out.num_rows == n  # operator never built
    assert json.loads(left_out.schema.metadata[CONSTANT_VALUES])["operator"] == text


def test_states_with_the_same_keys_share_one_decoded_key_column(monkeypatch):
    """columnar.KeyCache: value states of one operator holding the same keys decode them once, and the
    pieces equal those read with every key column decoded anew (cache of size 0)."""
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.flink import FlinkSnapshotReader, columnar

    from tests.support.flink import FLINK_FIXTURES

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


def _db_files(tmp_path, compression: str, rounds: list[tuple[list[tuple[bytes, bytes]], list[bytes]]]):
    """SST files of a RocksDB database (one flushed file per round of puts and deletions, no compaction):
    the same keys in several files with different sequence numbers. Also the database's own view."""
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_disable_auto_compactions(True)
    opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    path = tmp_path / f"db-{compression}"
    db = rocksdict.Rdict(str(path), options=opts)
    for puts, deletes in rounds:
        for k, v in puts:
            db[k] = v
        for k in deletes:
            del db[k]
        db.flush()
    view = dict(db.items())
    db.close()
    files = [SstFile(p.read_bytes(), p.name) for p in sorted(path.glob("*.sst"))]
    return files, view


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_versions_across_files_resolve_like_the_entry_reader_and_rocksdb(tmp_path, compression):
    """Puts, overwrites and deletions flushed into several files: the newest version of each key wins, the
    deleted keys are gone; equal to rocksdb.resolve over the entry reader's entries and to RocksDB's own view."""
    rng = np.random.default_rng(11 + len(compression))
    items = _items(rng, 3000, True)
    keys = [k for k, _ in items]
    rounds = [(items, [])]
    for r in range(3):
        pick = rng.choice(len(keys), 700, replace=False)
        puts = [(keys[i], bytes([r]) * int(rng.integers(0, 300))) for i in pick[:500].tolist()]
        rounds.append((puts, [keys[i] for i in pick[500:].tolist()]))
    files, view = _db_files(tmp_path, compression, rounds)
    assert len(files) == 4
    values, kbuf, ks, ke, vs, ve, merged = sstvec.read_column_family(files)
    got = _pairs(values, kbuf, ks, ke, vs, ve)
    ref_keys, ref_values, _ = resolve([(e.keys, e.seqs, e.types, e.values) for e in (f.entries() for f in files)])
    assert got == list(zip(ref_keys, ref_values)) == sorted(view.items())  # in RocksDB's key order
    assert merged == 0 and len(got) < len(items)
    with pytest.raises(sstvec.Unsupported, match="type 0"):
        sstvec.read_column_family(files, types=(1,))  # the deletions are not among the accepted types


def _block(entries: list[tuple[int, bytes, bytes]], restarts: list[int] | None = None) -> bytes:
    """A raw data block: entries ``(shared, non-shared key bytes, value)``, restart offsets and their count."""
    body = b"".join(varint(s) + varint(len(k)) + varint(len(v)) + k + v for s, k, v in entries)
    restarts = [0] if restarts is None else restarts
    return body + b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")


def _walk(block: bytes):
    """scan_blocks and fill_entries over one block placed as sstvec places blocks (zero margins around)."""
    from explorer.format.sst import kernels

    m = sstvec._MARGIN
    buf = np.zeros(2 * m + len(block), dtype=np.uint8)
    buf[m : m + len(block)] = np.frombuffer(block, dtype=np.uint8)
    start, size, bfile = (np.array([x], dtype=np.int64) for x in (m, len(block), 0))
    counts = np.zeros(1, dtype=np.int64)
    code, _, at, longest = kernels.scan_blocks(buf, start, size, counts)
    if code:
        return code, at, None
    n = int(counts[0])
    width = max(8, -(-(int(longest) - 8) // 8) * 8)
    keys = np.zeros(m + n * width, dtype=np.uint8)
    cols = [np.zeros(n, dtype=np.int64) for _ in range(4)] + [np.zeros(n, np.uint8), np.zeros(n, np.int8)]
    code2, _, at2 = kernels.fill_entries(buf, start, size, bfile, keys, m, width, *cols)
    assert code2 == code
    return code, at, cols


TRAILER = (5 << 8 | 1).to_bytes(8, "little")  # sequence 5, a value


def test_damaged_blocks_give_error_codes_not_reads_past_the_block():
    from explorer.format.sst import kernels

    good = [(0, b"key-1" + TRAILER, b"v1"), (4, b"2" + TRAILER, b"value-2")]
    code, _, cols = _walk(_block(good))
    assert code == kernels.OK and cols[0].tolist() == [5, 5] and cols[3].tolist() == [5, 5]
    assert _walk(_block([(1, b"key-1" + TRAILER, b"v")]))[0] == kernels.SHARED  # the first key shares
    assert _walk(_block(good[:1] + [(20, b"2" + TRAILER, b"")]))[0] == kernels.SHARED  # more than there is
    assert _walk(_block([(0, b"short", b"")]))[0] == kernels.SHORT_KEY
    whole = _block(good)
    entries = len(whole) - 8
    first = 3 + 13 + 2  # the first entry's bytes: a block of it alone is whole
    for cut in range(1, entries):  # an entry cut short: its key or value, or its varints, run past the entries
        code, at, _ = _walk(whole[:cut] + whole[entries:])
        if cut == first:
            assert code == kernels.OK
            continue
        assert code in (kernels.VARINT, kernels.ENTRY_OVER, kernels.SHORT_KEY), cut
        assert 0 <= at < cut
    assert _walk(b"\xff\xff\xff\xff\xff" + whole[entries:])[0] == kernels.VARINT  # a varint over 5 bytes
    assert _walk(whole[:-4] + (1000).to_bytes(4, "little"))[0] == kernels.RESTARTS
    assert _walk(whole[:-4] + (1 | 1 << 31).to_bytes(4, "little"))[0] == kernels.HASH_INDEX
    assert _walk(b"\x01\x00")[0] == kernels.SHORT_BLOCK


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_damaged_files_give_an_error_naming_the_file(tmp_path, compression):
    """Random bytes of the data blocks overwritten: each read returns, or raises SstError naming the file (or
    Unsupported); never another error or a crash (the kernels check every read)."""
    rng = np.random.default_rng(len(compression))
    items = sorted((bytes([i % 128]) + f"user-{i:07d}".encode(), bytes(int(rng.integers(0, 20))))
                   for i in range(3000))  # short values: most bytes are entry headers and keys
    f = _write_sst(tmp_path / "good.sst", compression, items)
    handles = f.data_handles()
    data_end = handles[-1][0] + handles[-1][1]
    errors = 0
    for trial in range(60):
        raw = bytearray(f.data)
        for _ in range(int(rng.integers(1, 6))):
            if trial % 3:  # anywhere in the data blocks
                at = int(rng.integers(0, data_end))
            else:  # near a block's start (its first entry; the header of a compressed block)
                off, size = handles[int(rng.integers(0, len(handles)))]
                at = off + int(rng.integers(0, min(size, 8)))
            raw[at] = int(rng.integers(0, 256)) if trial % 2 else raw[at] ^ 0x80
        damaged = SstFile(bytes(raw), f"damaged-{trial}.sst")
        try:
            sstvec.read_column_family([damaged])
        except sstvec.Unsupported:
            pass
        except SstError as exc:
            assert f"damaged-{trial}.sst" in str(exc)
            errors += 1
    assert errors > 0


def test_a_damaged_rocksdb_checkpoint_is_reported_with_the_sst_file(tmp_path):
    """The reader on a Flink checkpoint whose largest SST file has a damaged data block: SnapshotCorruptError
    naming the file, not a crash."""
    import shutil

    from explorer.errors import SnapshotCorruptError
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.flink import FlinkSnapshotReader

    from tests.support.flink import FLINK_FIXTURES

    root = tmp_path / "chk"
    shutil.copytree(FLINK_FIXTURES / "rocksdb-incremental-checkpoint", root)
    sst = max((root / "shared").iterdir(), key=lambda p: p.stat().st_size)  # (stored under UUID names)
    f = SstFile(sst.read_bytes(), sst.name)
    raw = bytearray(f.data)
    off, size = f.data_handles()[0]
    raw[off : off + size] = bytes(size)  # a zeroed (Snappy) block
    sst.write_bytes(bytes(raw))
    with pytest.raises(SnapshotCorruptError, match=rf"\d+\.sst \(.*{sst.name}\)"):
        list(FlinkSnapshotReader(root).keyed_pieces(KeyedStateQuery()))

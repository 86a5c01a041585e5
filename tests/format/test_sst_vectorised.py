"""The NumPy forms of the SST walk and merge (``format/sst/_vectorised.py``) against the numba kernels
(``format/sst/kernels.py``): the same frames on every RocksDB and ForSt sample snapshot, and the same return
values, entries and errors on crafted blocks (restart points, shared prefixes, deletions and older
versions in several files, damaged blocks), as a first open with an empty kernel cache runs the first
and a warm one the second (issue 31)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

rocksdict = pytest.importorskip("rocksdict")

from explorer.format.sst import _vectorised as vec  # noqa: E402
from explorer.format.sst import codes  # noqa: E402
from explorer.format.sst import columns as sstvec  # noqa: E402
from explorer.format.sst import kernels  # noqa: E402
from explorer.format.sst.file import SstError, SstFile  # noqa: E402
from explorer.readers.base import KeyedStateQuery  # noqa: E402
from explorer.readers.flink import FlinkSnapshotReader  # noqa: E402

from tests.support.flink import FLINK_FIXTURES, varint  # noqa: E402

#: every sample snapshot Flink wrote with RocksDB or ForSt (SST files; canonical savepoints have none)
SST_SAMPLES = sorted(str(p.parent.relative_to(FLINK_FIXTURES)) for p in FLINK_FIXTURES.rglob("_metadata")
                     if any(w in str(p.parent.relative_to(FLINK_FIXTURES)) for w in ("rocksdb", "forst"))
                     and "canonical" not in str(p.parent))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def _counting(monkeypatch: pytest.MonkeyPatch, module, name: str) -> list[int]:
    calls = [0]
    f = getattr(module, name)

    def counted(*args):
        calls[0] += 1
        return f(*args)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_sst_samples_are_found():
    assert len(SST_SAMPLES) >= 15 and "rocksdb-incremental-checkpoint/chk-8" in SST_SAMPLES
    assert any("forst" in s for s in SST_SAMPLES)


@pytest.mark.parametrize("sample", SST_SAMPLES)
def test_every_sst_sample_gives_the_same_pieces_with_numpy_and_numba(monkeypatch, sample):
    """Every keyed piece of the snapshot, byte for byte (Arrow IPC), read with the NumPy forms and with the kernels."""
    got = {}
    for walk in ("numba", "numpy"):
        monkeypatch.setattr(sstvec, "WALK", walk)
        numpy_walks = _counting(monkeypatch, vec, "scan_blocks")
        numpy_merges = _counting(monkeypatch, vec, "visible_entries")
        fallback = _counting(monkeypatch, vec, "_kernels")
        pieces = FlinkSnapshotReader(FLINK_FIXTURES / sample).keyed_pieces(KeyedStateQuery())
        got[walk] = sorted(_ipc(p) for p in pieces)
        if walk == "numpy":
            assert numpy_walks[0] > 0 and fallback[0] == 0  # the NumPy forms ran, and never handed over
            if sample.startswith("rocksdb-incremental"):
                assert numpy_merges[0] > 0  # (versions in several files: merged and resolved)
        else:
            assert numpy_walks[0] == 0
    assert got["numpy"] == got["numba"] and got["numba"]


def _block(entries: list[tuple[int, bytes, bytes]], restarts: list[int] | None = None) -> bytes:
    """A raw data block: entries ``(shared, non-shared key bytes, value)``, restart offsets and their count."""
    body = b"".join(varint(s) + varint(len(k)) + varint(len(v)) + k + v for s, k, v in entries)
    restarts = [0] if restarts is None else restarts
    return body + b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")


def _walk_both(blocks: list[bytes], files: list[int] | None = None):
    """scan_blocks then fill_entries over ``blocks`` placed as sstvec places them (zero margins around), by the
    kernels and by the NumPy forms; asserts every return value and output array equal; returns the kernels'."""
    m = sstvec._MARGIN
    buf = np.zeros(m, dtype=np.uint8)
    starts = []
    for b in blocks:
        starts.append(len(buf))
        buf = np.concatenate([buf, np.frombuffer(b, dtype=np.uint8), np.zeros(m, dtype=np.uint8)])
    start = np.array(starts, dtype=np.int64)
    size = np.array([len(b) for b in blocks], dtype=np.int64)
    bfile = np.array(files if files is not None else [0] * len(blocks), dtype=np.int64)
    out = {}
    for impl in (kernels, vec):
        counts = np.full(len(blocks), -1, dtype=np.int64)
        scanned = impl.scan_blocks(buf, start, size, counts)
        n = int(counts[counts > 0].sum())
        width = max(8, -(-(int(scanned[3]) - 8) // 8) * 8)
        keys = np.full(m + n * width, 7, dtype=np.uint8)
        cols = [np.full(n, -1, dtype=np.int64) for _ in range(4)] + [np.zeros(n, np.uint8), np.full(n, 9, np.int8)]
        filled = impl.fill_entries(buf, start, size, bfile, keys, m, width, *cols)
        out[impl] = (tuple(int(x) for x in scanned), counts.tolist(), tuple(int(x) for x in filled), keys.tobytes(),
                     [c.tolist() for c in cols])
    assert out[vec] == out[kernels]
    return out[kernels]


def _t(seq: int, kind: int = 1) -> bytes:
    return ((seq << 8) | kind).to_bytes(8, "little")


def test_crafted_blocks_walk_the_same(monkeypatch):
    fallback = _counting(monkeypatch, vec, "_kernels")
    # shared prefixes over several entries, a key of 300 bytes, values with 2-byte varints
    long_key = b"k" * 300
    entries = [(0, b"apple" + _t(9), b"1"), (5, _t(3, 0), b""), (3, b"ricot" + _t(7), b"v" * 200),
               (0, long_key + _t(1), b"x"), (290, b"z" * 10 + _t(2, 2), b"y" * 130)]
    code = _walk_both([_block(entries)])
    assert code[0][0] == codes.OK and code[4][0] == [5, 5, 8, 300, 300]
    assert code[4][5] == [codes.FIRST, codes.OLDER, codes.GREATER, codes.GREATER, codes.GREATER]
    # the same entries with a restart point at each entry, at every other one, and at offsets that are not
    # entry starts (both walk from the block's start: the restart points only speed the NumPy form up)
    body = _block(entries)[:-8]
    ends = np.cumsum([len(_block([e])) - 8 for e in entries]).tolist()
    starts = [0] + ends[:-1]
    for restarts in (starts, starts[::2], [0, 1, 2], [0, ends[-1]], [3], [0, starts[2], starts[1]]):
        _walk_both([body + b"".join(r.to_bytes(4, "little") for r in restarts) + len(restarts).to_bytes(4, "little")])
    # a restart entry that shares bytes with the previous key (RocksDB never writes one; valid for the walk)
    shared = [(0, b"abcdef" + _t(4), b"v"), (3, b"x" + _t(5), b"w")]
    second = len(_block(shared[:1])) - 8
    _walk_both([_block(shared, [0, second])])
    # several blocks and files; a block without entries; disorder and same sequence numbers across blocks
    a = _block([(0, b"b" + _t(5), b"1"), (1, _t(5), b"2")])  # the same key and sequence number
    b = _block([(0, b"a" + _t(5), b"3")])  # a smaller key than the previous block's (disorder)
    c = _block([(0, b"c" + _t(6), b"4")])
    empty = (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    got = _walk_both([a, b, empty, c], files=[0, 0, 0, 1])
    assert got[4][5] == [codes.FIRST, codes.SAME_SEQ, codes.DISORDER, codes.FIRST]
    _walk_both([])
    assert fallback[0] == 0  # all walked by the NumPy forms themselves


def test_damaged_blocks_give_the_same_codes():
    good = [(0, b"key-1" + _t(5), b"v1"), (4, b"2" + _t(5), b"value-2")]
    whole = _block(good)
    entries = len(whole) - 8
    cases = [
        _block([(1, b"key-1" + _t(5), b"v")]),  # the first key shares
        _block(good[:1] + [(20, b"2" + _t(5), b"")]),  # more than there is
        _block([(0, b"short", b"")]),
        b"\xff\xff\xff\xff\xff" + whole[entries:],  # a varint over 5 bytes
        whole[:-4] + (1000).to_bytes(4, "little"),  # too many restarts
        whole[:-4] + (1 | 1 << 31).to_bytes(4, "little"),  # a hash index
        b"\x01\x00",
        *(whole[:cut] + whole[entries:] for cut in range(1, entries)),  # an entry cut short
    ]
    seen = set()
    for damaged in cases:
        got = _walk_both([whole, damaged, whole])
        seen.add(got[0][0])
    assert {codes.SHARED, codes.SHORT_KEY, codes.VARINT, codes.RESTARTS, codes.HASH_INDEX, codes.SHORT_BLOCK,
            codes.ENTRY_OVER} <= seen


def _sorted_runs(rng: np.random.Generator, n: int, runs: int, width: int):
    """Key rows (zero past each key), lengths and sequence numbers of ``runs`` runs, each in RocksDB's order,
    with repeated keys (across and within runs) and repeated sequence numbers."""
    pool = [bytes(rng.integers(0, 3, int(rng.integers(0, width + 1)), dtype=np.uint8)) for _ in range(max(1, n // 3))]
    starts = np.sort(rng.integers(0, n + 1, runs - 1))
    bounds = np.concatenate([[0], starts, [n]]).astype(np.int64)
    keys, seqs = [], []
    for r in range(runs):
        items = [(pool[int(rng.integers(0, len(pool)))], int(rng.integers(0, 4)))
                 for _ in range(bounds[r + 1] - bounds[r])]
        items.sort(key=lambda kv: (kv[0], -kv[1]))
        keys += [k for k, _ in items]
        seqs += [s for _, s in items]
    m = 16
    buf = np.zeros(m + n * width, dtype=np.uint8)
    for i, k in enumerate(keys):
        buf[m + i * width : m + i * width + len(k)] = np.frombuffer(k, dtype=np.uint8)
    ulen = np.array([len(k) for k in keys], dtype=np.int64)
    return buf, m, ulen, np.array(seqs, dtype=np.int64), bounds


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.tolist() == y.tolist()
        else:
            assert x == y


@pytest.mark.parametrize("seed", range(12))
def test_merge_and_visible_entries_equal_the_kernels(monkeypatch, seed):
    fallback = _counting(monkeypatch, vec, "_kernels")
    rng = np.random.default_rng(seed)
    width = 8 * int(rng.integers(1, 4))
    n = int(rng.integers(0, 300))
    keys, m, ulen, seq, runs = _sorted_runs(rng, n, int(rng.integers(1, 6)), width)
    order = kernels.merge_runs(keys, m, width, ulen, seq, runs)
    _same(vec.merge_runs(keys, m, width, ulen, seq, runs), order)
    typ = rng.integers(0, 3, n).astype(np.uint8)
    vpos = rng.integers(0, 1000, n).astype(np.int64)
    vlen = rng.integers(0, 50, n).astype(np.int64)
    outs = [np.full(m + n * width, 5, dtype=np.uint8) for _ in range(2)]
    for o in (order[0], rng.permutation(n).astype(np.int64)):  # in key order, and in any order
        got = [impl.visible_entries(keys, m, width, ulen, seq, typ, vpos, vlen, o, out, m)
               for impl, out in zip((kernels, vec), outs)]
        _same(got[1], got[0])
        assert outs[0].tobytes() == outs[1].tobytes()
    assert fallback[0] == 0
    if n > 1:  # a run out of order, and bytes past a key that are not zero: handed to the kernel, same result
        shuffled = rng.permutation(n)
        rows = keys[m:].reshape(n, width)[shuffled].reshape(-1)
        bad = np.concatenate([keys[:m], rows])
        _same(vec.merge_runs(bad, m, width, ulen[shuffled], seq[shuffled], runs),
              kernels.merge_runs(bad, m, width, ulen[shuffled], seq[shuffled], runs))
        junk = keys.copy()
        junk[m + width - 1] = 1 if ulen[0] < width - 8 else junk[m + width - 1]
        _same(vec.merge_runs(junk, m, width, ulen, seq, runs), kernels.merge_runs(junk, m, width, ulen, seq, runs))
    if n:  # arguments that do not fit together
        for args in ((keys, m, width + 1, ulen, seq, runs), (keys, m, width, ulen, seq, runs[1:]),
                     (keys, m, width, ulen, seq[:-1], runs), (keys, m, width, ulen, seq, runs[:1])):
            _same(vec.merge_runs(*args), kernels.merge_runs(*args))


def _db(tmp_path, restart_interval: int, compression: str, rounds: int, seed: int) -> list[SstFile]:
    """SST files of a RocksDB database, one flush per round of puts (shared prefixes, long keys, values of
    1- to 3-byte varint lengths) and deletions, with ``restart_interval`` entries per restart point."""
    rng = np.random.default_rng(seed)
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_disable_auto_compactions(True)
    opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
    table = rocksdict.BlockBasedOptions()
    table.set_block_restart_interval(restart_interval)
    table.set_block_size(1024)
    opts.set_block_based_table_factory(table)
    path = tmp_path / f"db-{restart_interval}-{compression}-{rounds}"
    db = rocksdict.Rdict(str(path), options=opts)
    stems = [b"user-%05d" % i + (b"x" * int(rng.integers(100, 300)) if rng.random() < 0.1 else b"")
             for i in range(2000)]
    for r in range(rounds):
        for i in rng.choice(len(stems), 800, replace=False).tolist():
            db[bytes([i % 7]) + stems[i]] = bytes([r]) * int(rng.choice([0, 3, 127, 128, 200, 17000]))
        for i in rng.choice(len(stems), 100, replace=False).tolist():
            del db[bytes([i % 7]) + stems[i]]
        db.flush()
    db.close()
    return [SstFile(p.read_bytes(), p.name) for p in sorted(path.glob("*.sst"))]


def _read(files: list[SstFile], walk: str):
    sstvec.WALK = walk
    try:
        entries = sstvec._entries(files)
        walked = [x.tobytes() if isinstance(x, np.ndarray) else x for x in entries]
        return walked, [x.tobytes() if isinstance(x, np.ndarray) else x for x in sstvec._resolve(files, None, *entries)]
    except (SstError, sstvec.Unsupported) as exc:
        return type(exc).__name__, str(exc)
    finally:
        sstvec.WALK = None


@pytest.mark.parametrize("restart_interval", [1, 16, 1000])
@pytest.mark.parametrize("compression", ["none", "snappy"])
def test_rocksdb_files_read_the_same(tmp_path, monkeypatch, restart_interval, compression):
    """Several files of one database (older versions, deletions) with restart points every 1, 16 or 1000
    entries: the same walk and the same visible entries, without the NumPy forms handing over."""
    files = _db(tmp_path, restart_interval, compression, 3, restart_interval)
    assert len(files) == 3
    fallback = _counting(monkeypatch, vec, "_kernels")
    got = _read(files, "numpy")
    assert fallback[0] == 0
    assert got == _read(files, "numba") and isinstance(got[0], list)


def test_damaged_rocksdb_files_fail_the_same(tmp_path):
    """Bytes of the data blocks overwritten: the same entries or the same error (SstError naming the file)."""
    rng = np.random.default_rng(5)
    (good,) = _db(tmp_path, 16, "none", 1, 1)
    handles = good.data_handles()
    data_end = handles[-1][0] + handles[-1][1]
    errors = 0
    for trial in range(40):
        raw = bytearray(good.data)
        for _ in range(int(rng.integers(1, 4))):
            if trial % 2:
                at = int(rng.integers(0, data_end))
            else:  # a block's first entry
                off, size = handles[int(rng.integers(0, len(handles)))]
                at = off + int(rng.integers(0, min(size, 8)))
            raw[at] = int(rng.integers(0, 256))
        got = {}
        for walk in ("numba", "numpy"):
            # (checksums off: the walk itself meets the damage, as where a block is read unverified)
            f = SstFile(bytes(raw), f"damaged-{trial}.sst")
            f.verify_blocks = lambda *a, **k: None  # type: ignore[method-assign]
            got[walk] = _read([f], walk)
        assert got["numpy"] == got["numba"], trial
        errors += got["numba"][0] == "SstError"
    assert errors > 0

"""SST files written without RocksDB (restore's bulk load) and SST files joined by mapping (full snapshots)."""

from __future__ import annotations

import mmap
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from explorer.format.sst import columns as sstvec
from explorer.format.sst.file import SstFile
from explorer.format.sst.writer import write_sst

rocksdict = pytest.importorskip("rocksdict")


def _entries(seed: int, n: int) -> tuple[list[bytes], list[bytes]]:
    rng = np.random.default_rng(seed)
    # keys sharing prefixes, some a prefix of the next; values empty to several blocks long
    keys = sorted({bytes([i % 3]) + b"user-%07d" % int(rng.integers(0, 10**6)) + b"x" * int(rng.integers(0, 4))
                   for i in range(n)})
    values = [rng.bytes(int(rng.choice([0, 1, 17, 300, 5000]))) for _ in keys]
    return keys, values


@pytest.mark.parametrize("seed,n", [(1, 1), (2, 17), (3, 3000)])
def test_written_file_reads_back_and_ingests(tmp_path, seed, n):
    keys, values = _entries(seed, n)
    path = tmp_path / "x.sst"
    size = write_sst(path, pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
    assert size == path.stat().st_size
    f = SstFile(path.read_bytes(), path.name)
    got = f.entries()
    assert (got.keys, got.values) == (keys, values)
    assert set(got.seqs) == {0} and set(got.types) == {1}
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    try:
        cf = db.create_column_family("s", rocksdict.Options(raw_mode=True))
        opts = rocksdict.IngestExternalFileOptions()
        opts.set_move_files(True)
        cf.ingest_external_file([str(path)], opts)  # RocksDB reads its properties, index and first/last keys
        assert list(cf.keys()) == keys and list(cf.values()) == values  # every block's checksum checked
        for k, v in zip(keys[::7], values[::7]):
            assert cf[k] == v
        assert cf.get(keys[-1] + b"\xff") is None
        cf.close()
    finally:
        db.close()


@pytest.mark.parametrize("seed,n", [(5, 1), (6, 3000)])
def test_values_in_two_parts_write_the_same_file(tmp_path, seed, n):
    """(heads, bodies) values (a restore's length prefixes and the value column, not joined first) give the
    bytes of the joined values, a head of any length (none, one byte, several) included."""
    keys, values = _entries(seed, n)
    cut = [min(len(v), i % 3) for i, v in enumerate(values)]
    heads = pa.array([v[:c] for v, c in zip(values, cut)], pa.binary())
    bodies = pa.array([v[c:] for v, c in zip(values, cut)], pa.binary())
    k = pa.array(keys, pa.binary())
    write_sst(tmp_path / "joined.sst", k, pa.array(values, pa.binary()))
    write_sst(tmp_path / "parts.sst", k, (heads.slice(0), bodies))
    assert (tmp_path / "parts.sst").read_bytes() == (tmp_path / "joined.sst").read_bytes()
    with pytest.raises(ValueError, match="one value per key"):
        write_sst(tmp_path / "bad.sst", k, (heads[:-1], bodies))


def test_damaged_block_is_caught(tmp_path):
    keys, values = _entries(4, 200)
    path = tmp_path / "x.sst"
    write_sst(path, pa.array(keys, pa.binary()), pa.array(values, pa.binary()))
    raw = bytearray(path.read_bytes())
    raw[100] ^= 0x40
    with pytest.raises(Exception, match="checksum"):
        f = SstFile(bytes(raw), path.name)
        off, size = sstvec._handle_arrays(f)
        f.verify_blocks(off, size)


def _opened(paths, with_path: bool) -> list:
    """The SST files at ``paths`` opened (mapped) for the column-wise reader; ``with_path``: each
    also names its path, so the reader maps them side by side instead of copying them."""
    out = []
    for p in paths:
        with open(p, "rb") as fh:
            f = SstFile(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), p.name)
        if with_path:
            f.path = p
        out.append(f)
    return out


@pytest.mark.parametrize("compression", ["none", "snappy", "zstd"])
def test_mapped_files_read_like_copied_ones(tmp_path, monkeypatch, compression):
    """Files joined by mapping them side by side give the entries the copying join gives."""
    paths = []
    rng = np.random.default_rng(5)
    for j in range(3):
        opts = rocksdict.Options(raw_mode=True)
        opts.set_compression_type(getattr(rocksdict.DBCompressionType, compression)())
        w = rocksdict.SstFileWriter(options=opts)
        p = tmp_path / f"{j}.sst"
        w.open(str(p))
        for i in range(2000):  # half compressible, half random values
            w[bytes([j]) + b"k%06d" % i] = (b"ab" * 200) if i % 2 else rng.bytes(400)
        w.finish()
        paths.append(p)

    def files(with_path: bool):
        return _opened(paths, with_path)

    def entries(fs):
        values, keys, ks, ke, vs, ve, _ = sstvec.read_column_family(fs)
        kb, vb = keys.tobytes(), values.tobytes()
        return [(kb[a:b], vb[c:d]) for a, b, c, d in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist())]

    assert not sstvec._blocks(files(True))[0].flags.writeable  # the mapped join (read-only), not a copy
    assert sstvec._blocks(files(False))[0].flags.writeable
    mapped = entries(files(True))
    assert len(mapped) == 6000
    assert mapped == entries(files(False))
    monkeypatch.setattr(sstvec, "MAP_FILES", False)
    assert mapped == entries(files(True))

    # the mapping goes with the last array over it (nothing of the files stays mapped, which kept
    # deleted SST files on disk and in memory after every full snapshot)
    def mapped_here():
        with open("/proc/self/maps") as f:
            return sum(str(p) in line for line in f for p in paths)

    monkeypatch.setattr(sstvec, "MAP_FILES", True)
    joined = sstvec._blocks(files(True))[0]
    assert mapped_here() == len(paths)
    del joined
    assert mapped_here() == 0


def test_direct_and_buffered_writes_give_the_same_file(tmp_path, monkeypatch):
    from explorer.format.sst import writer

    keys, values = _entries(6, 4000)  # a few MB: the bulk written directly, the tail buffered
    k, v = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    write_sst(tmp_path / "direct.sst", k, v)
    monkeypatch.setattr(writer, "DIRECT_WRITES", False)
    write_sst(tmp_path / "buffered.sst", k, v)
    assert (tmp_path / "direct.sst").read_bytes() == (tmp_path / "buffered.sst").read_bytes()


def test_block_checksums_of_the_kernel_and_of_python_give_the_same_file(tmp_path, monkeypatch):
    """The block trailers written by the kernel calling xxhash's C XXH3 (outside the GIL) are the bytes
    of the Python path's (a call per block); blocks of every size (empty values to several blocks long,
    the index block) included, and RocksDB reads the file (each block's checksum checked)."""
    from explorer.format.sst import writer

    assert writer.xxh3_c_function() is not None  # xxhash, a dependency, exports XXH3_64bits
    keys, values = _entries(11, 3000)
    k, v = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
    write_sst(tmp_path / "kernel.sst", k, v)
    monkeypatch.setattr(writer, "BLOCK_SUMS_IN_KERNEL", False)
    write_sst(tmp_path / "python.sst", k, v)
    assert (tmp_path / "kernel.sst").read_bytes() == (tmp_path / "python.sst").read_bytes()
    f = SstFile((tmp_path / "kernel.sst").read_bytes(), "kernel.sst")
    off, size = sstvec._handle_arrays(f)
    f.verify_blocks(off, size)
    db = rocksdict.Rdict(str(tmp_path / "db"), rocksdict.Options(raw_mode=True))
    try:
        opts = rocksdict.IngestExternalFileOptions()
        opts.set_move_files(True)
        db.ingest_external_file([str(tmp_path / "kernel.sst")], opts)
        assert list(db.keys()) == keys and list(db.values()) == values
    finally:
        db.close()


def test_a_reused_buffer_gives_the_same_files(tmp_path):
    import threading

    scratch = threading.local()
    for seed, n in ((7, 3000), (8, 500), (9, 4000)):  # smaller, then larger than the kept buffer
        keys, values = _entries(seed, n)
        k, v = pa.array(keys, pa.binary()), pa.array(values, pa.binary())
        write_sst(tmp_path / "reused.sst", k, v, scratch)
        write_sst(tmp_path / "fresh.sst", k, v)
        assert (tmp_path / "reused.sst").read_bytes() == (tmp_path / "fresh.sst").read_bytes(), seed
        (tmp_path / "reused.sst").unlink()
        (tmp_path / "fresh.sst").unlink()


@pytest.mark.parametrize("with_path", [True, False])
def test_a_damaged_block_fails_the_column_read_with_its_checksum(tmp_path, with_path):
    """Uncompressed files' checksums are verified beside the walk (from the mapped join, or from each file's
    own bytes): a block damaged in one of several files fails the read with the checksum error, naming it."""
    paths = []
    for j in range(3):
        keys, values = _entries(20 + j, 400)
        p = tmp_path / f"{j}.sst"
        write_sst(p, pa.array([bytes([j]) + k for k in keys], pa.binary()), pa.array(values, pa.binary()))
        paths.append(p)
    raw = bytearray(paths[1].read_bytes())
    raw[len(raw) // 3] ^= 0x01  # inside a data block's value bytes: the walk alone would not notice
    paths[1].write_bytes(bytes(raw))
    fs = _opened(paths, with_path)
    with pytest.raises(Exception, match=r"1\.sst.*checksum|checksum.*1\.sst"):
        sstvec.read_column_family(fs)


def test_warming_loads_the_kernels_a_snapshot_and_a_restore_call(tmp_path):
    """warm_kernels() loads each kernel for the argument types the readers and the writer pass (a read-only
    mapped join, writable outputs): in a fresh process, a column read and an SST write afterwards add no
    signature of their own (each would be a load, or a compile, in the first checkpoint or restore)."""
    script = r"""
import mmap, sys
from pathlib import Path
import pyarrow as pa
from explorer.format import parquet_pages
from explorer.format.sst import columns, kernels, writer
from explorer.format.sst.file import SstFile
names = ("gather_segments", "scan_blocks", "fill_entries", "merge_runs", "visible_entries")
def sigs():
    out = {n: len(getattr(kernels, n).signatures) for n in names}
    out.update(data_blocks=len(writer._data_blocks.signatures), index_block=len(writer._index_block.signatures),
               block_trailers=len(writer._block_trailers.signatures),
               plain_spans=len(parquet_pages._kernel().signatures))
    return out
writer.warm_kernels()
before = sigs()
# a restore of an uncompressed checkpoint: values located in the mapped Parquet file, two-part values
import pyarrow.parquet as pq
pq.write_table(pa.table({"value": [b"x" * 30] * 300}), Path(sys.argv[1]) / "v.parquet", compression="none",
               use_dictionary=False)
md = pq.ParquetFile(Path(sys.argv[1]) / "v.parquet").metadata
spans = parquet_pages.column_spans(parquet_pages.map_file(Path(sys.argv[1]) / "v.parquet"), md.row_group(0).column(0),
                                   1, 0, "v.parquet")
writer.write_sst(Path(sys.argv[1]) / "s.sst", pa.array([b"\x01k%04d" % i for i in range(300)], pa.binary()),
                 (pa.array([b"\x1e"] * 300, pa.binary()), spans))
keys = [b"\x01user-%06d" % i for i in range(300)]
fs = []
for j in range(2):  # two files of the same keys: the merge kernels too
    p = Path(sys.argv[1]) / f"{j}.sst"
    writer.write_sst(p, pa.array(keys, pa.binary()), pa.array([bytes([j]) * 40] * 300, pa.binary()))
    with open(p, "rb") as fh:
        f = SstFile(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ), p.name)
    f.path = p
    fs.append(f)
columns.read_column_family(fs)
print(before == sigs() and all(before.values()), before, sigs())
"""
    got = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("True"), got.stdout

"""The checksums the stored formats carry, computed the way their writers compute them.

* **CRC-32C** (Castagnoli): RocksDB block trailers of checksum type 1 and the Snappy
  framing format's chunks, both *masked* (rotated right by 15 bits, plus ``0xA282EAD8``)
  so that a CRC of bytes holding CRCs stays well distributed. ``google_crc32c`` when it is
  installed (hardware CRC), else a table-driven numba kernel here.
* **xxHash** (32-bit, type 2), **XXH64** (lower 32 bits, type 3) and **XXH3** (type 4, the
  default of recent RocksDB releases): through the ``xxhash`` package. RocksDB's XXH3 block
  checksum is the lower 32 bits of ``XXH3_64bits`` over the block without its last byte
  (the compression type), xor the last byte times ``0x6B9083D9``; checked against every
  SST of ``sample_data/flink``.

A RocksDB block checksum covers the block's stored bytes and the one-byte compression type
that follows them (:func:`rocksdb_block_checksum`). Tables of format version 6 add a
per-file, per-offset modifier (:func:`rocksdb_context_modifier`).
"""

from __future__ import annotations

import ctypes
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SnapshotCorruptError

try:  # hardware CRC-32C; the numba kernel below does without it
    import google_crc32c
except ImportError:  # pragma: no cover - depends on the environment
    google_crc32c = None
try:  # xxHash, XXH64 and XXH3 of RocksDB checksum types 2 to 4
    import xxhash
except ImportError:  # pragma: no cover - depends on the environment
    xxhash = None

_CASTAGNOLI = 0x82F63B78  # the reflected CRC-32C polynomial
_MASK_DELTA = 0xA282EAD8
#: what RocksDB's XXH3 block checksum mixes the block's compression type byte with
XXH3_LAST_BYTE_PRIME = 0x6B9083D9

#: RocksDB's checksum types (the first byte of an SST footer)
CHECKSUM_NAMES = {0: "none", 1: "CRC32C", 2: "xxHash", 3: "xxHash64", 4: "XXH3"}


def _table() -> np.ndarray:
    t = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _CASTAGNOLI if c & 1 else c >> 1
        t[i] = c
    return t


_TABLE = _table()


def _crc32c_py(data: np.ndarray, table: np.ndarray, crc: np.uint32) -> np.uint32:
    full = np.uint32(0xFFFFFFFF)
    c = np.uint32(crc) ^ full
    for i in range(data.shape[0]):
        c = table[(c ^ data[i]) & np.uint32(0xFF)] ^ (c >> np.uint32(8))
    return c ^ full


_compiled: list = []


def _crc32c_kernel():  # type: ignore[no-untyped-def]
    """:func:`_crc32c_py` compiled by numba, imported here on first use: only without google-crc32c, so an
    ``explorer.open`` that reads no SST file does not import numba for it (~0.3 s)."""
    if not _compiled:
        import numba

        from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

        _compiled.append(numba.njit(cache=True, nogil=True)(_crc32c_py))
    return _compiled[0]


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C of ``data``."""
    if google_crc32c is not None:
        return int(google_crc32c.value(bytes(data)))
    arr = np.frombuffer(data, dtype=np.uint8)
    return int(_crc32c_kernel()(arr, _TABLE, np.uint32(0))) & 0xFFFFFFFF


def mask_crc(crc: int) -> int:
    """The masked form of a CRC-32C that RocksDB and the Snappy framing format store."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def masked_crc32c(data: bytes | bytearray | memoryview) -> int:
    return mask_crc(crc32c(data))


def available(checksum_type: int) -> bool:
    """Whether this installation can compute RocksDB checksum type ``checksum_type``."""
    if checksum_type in (0, 1):
        return True
    return checksum_type in (2, 3, 4) and xxhash is not None


def rocksdb_block_checksum(checksum_type: int, data: bytes | memoryview) -> int:
    """The 32-bit checksum RocksDB stores after a block; ``data`` is the block's stored bytes
    followed by its one-byte compression type."""
    if checksum_type == 1:
        return masked_crc32c(data)
    if checksum_type == 2:
        return xxhash.xxh32_intdigest(bytes(data), 0)
    if checksum_type == 3:
        return xxhash.xxh64_intdigest(bytes(data), 0) & 0xFFFFFFFF
    if checksum_type == 4:
        if not len(data):
            return 0
        mv = memoryview(data)
        v = xxhash.xxh3_64_intdigest(bytes(mv[:-1])) & 0xFFFFFFFF
        return v ^ ((mv[-1] * XXH3_LAST_BYTE_PRIME) & 0xFFFFFFFF)
    raise ValueError(f"RocksDB checksum type {checksum_type} is unknown; expected 1 to 4")


def rocksdb_block_checksums(checksum_type: int, data, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray | None:
    """:func:`rocksdb_block_checksum` of many blocks of one file at once (``uint32``): the block at
    ``offsets[i]`` of ``sizes[i]`` stored bytes, followed by its compression type byte, in ``data``
    (bytes, mmap). None for checksum types not computed here (then check block by block): for
    XXH3 (the default) one C call per block and the rest in NumPy, not a Python function per block."""
    if checksum_type != 4 or xxhash is None:
        return None
    h = xxhash.xxh3_64_intdigest
    mv = memoryview(data)
    ends = (offsets + sizes).tolist()
    digests = np.fromiter((h(mv[o:e]) for o, e in zip(offsets.tolist(), ends)), dtype=np.uint64, count=len(ends))
    last = np.frombuffer(data, dtype=np.uint8)[offsets + sizes].astype(np.uint64)
    return ((digests ^ (last * XXH3_LAST_BYTE_PRIME)) & 0xFFFFFFFF).astype(np.uint32)


_xxh3_c: list[Any] = []


def xxh3_c_function() -> Any:
    """xxhash's C ``XXH3_64bits(const void*, size_t) -> uint64`` (seed 0) as a ctypes function, for a
    numba kernel to call outside the GIL (the ``xxhash`` package's extension exports it); None when
    xxhash or that symbol is missing."""
    if not _xxh3_c:
        fn = None
        if xxhash is not None:
            try:
                fn = ctypes.CDLL(xxhash._xxhash.__file__).XXH3_64bits
                fn.restype = ctypes.c_uint64
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            except (AttributeError, OSError):  # another build of xxhash: the Python path
                fn = None
        _xxh3_c.append(fn)
    return _xxh3_c[0]


def rocksdb_context_modifier(base_context_checksum: int, offset: int) -> int:
    """What format version 6 adds to a block checksum: the file's base context checksum
    mixed with the block's offset (zero when the base is zero)."""
    if not base_context_checksum:
        return 0
    return (base_context_checksum ^ ((offset & 0xFFFFFFFF) + (offset >> 32))) & 0xFFFFFFFF


def verify_hadoop_crc(path, data: bytes | memoryview) -> bool:
    """Check ``data``, the bytes of ``path``, against Hadoop's checksum side file ``.NAME.crc``
    next to it (written by Hadoop's ``ChecksumFileSystem``, so by Spark on local and HDFS-like
    file systems: ``crc\0``, an int of bytes per checksum, then a big-endian CRC-32 per chunk).
    Returns whether there was one to check; raises
    :class:`~explorer.errors.SnapshotCorruptError` naming the file and the damaged chunk."""
    path = Path(path)
    side = path.with_name(f".{path.name}.crc")
    try:
        raw = side.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return False
    per = int.from_bytes(raw[4:8], "big") if len(raw) >= 8 else 0
    if raw[:4] != b"crc\0" or per <= 0:
        raise SnapshotCorruptError(f"{side}: found {raw[:8]!r} at its start; expected Hadoop's checksum header "
                                   "('crc\\0' and a positive chunk size)")
    n = -(-len(data) // per)
    if len(raw) != 8 + 4 * n:
        raise SnapshotCorruptError(
            f"{path}: {len(data)} bytes need {n} CRCs of {per}-byte chunks, but {side.name} holds {(len(raw) - 8) / 4:g}; "
            "the file or its checksum file is damaged (or was changed without it)")
    view = memoryview(data)
    for i in range(n):
        found = zlib.crc32(view[i * per:(i + 1) * per])
        want = int.from_bytes(raw[8 + 4 * i:12 + 4 * i], "big")
        if found != want:
            raise SnapshotCorruptError(
                f"{path}: bytes {i * per}..{min((i + 1) * per, len(data))} have CRC-32 {found:08x}; expected {want:08x} "
                f"as {side.name} records (the file is damaged)")
    return True

"""A pinned RocksDB view's state read straight from its SST files (the fast half of a full snapshot).

:func:`.capture.write_capture` writes a RocksDB backend's full snapshot from a
:class:`.capture.PinnedView` (a RocksDB checkpoint folder: hard-linked SSTs,
memtables flushed, the WAL off). Iterating it with rocksdict makes a Python
``bytes`` per key and per value; here the state's SST files are parsed at once
by :mod:`explorer.format.sst.columns` (data blocks decompressed into one
buffer, versions of a key resolved by sequence number, deletions hiding their
keys), the visible entries sorted into RocksDB's byte order, cut into the
same batches of :data:`explorer.format.rocksdb.native.TABLE_BATCH` raw entries and
decoded by :func:`explorer.format.rocksdb.columns.decode_flat` from buffers and
offsets. The written file is the one the rocksdict path writes: same batches,
same decoding, same tables (a batch the column-wise decoder declines is decoded
row by row from its raw bytes, as there).

:func:`write_view_state_sst` returns None, having written nothing, whenever
the files hold anything not handled here: a non-empty WAL, range deletions,
merge operands or other entry types, two versions of a key with one sequence
number, a file the parser rejects (format version, compression, index type),
state types not decoded column-wise, or batches whose kinds differ. The caller
then reads the view with rocksdict.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import numpy as np

from ...format.keyed import SAVEPOINT, ParquetProfile, rows_to_table
from ...format.prefetch import map_ahead
from ...format.rocksdb.columns import decode_flat, supported
from ...format.rocksdb.native import TABLE_BATCH, decoded_rows, write_decoded
from ...format.states import StoredState
from ...format.sst.columns import Unsupported, read_column_family
from ...format.sst.file import SstError, SstFile

#: entry types read here: deletion, value, single deletion (no merge operands, no blob or entity entries)
_TYPES = (0, 1, 7)


_EXTERNAL = "rocksdb.external_sst_file.version"


class _Fallback(Exception):
    pass


def column_family_files(staging: Path) -> dict[str, list | None] | None:
    """The view's SST files by column family (footers and properties parsed; data mapped, not read),
    or None when its files cannot be read this way (a non-empty WAL, an unreadable SST, a range
    deletion); a family's files are None where they mix ingested files with others."""

    staging = Path(staging)
    if any(p.stat().st_size > 0 for p in staging.glob("*.log")):
        return None  # entries not in any SST file
    by_cf: dict[str, list] = {}
    try:
        for p in sorted(staging.glob("*.sst")):
            with open(p, "rb") as fh:
                data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if p.stat().st_size else b""
            f = SstFile(data, p.name)
            f.path = p  # mapped whole, side by side with the others, when read (format.sst.columns)
            if f.has_range_deletions or f.column_family is None:
                return None
            by_cf.setdefault(f.column_family, []).append(f)
    except (SstError, OSError, ValueError):
        return None
    for name, files in by_cf.items():
        # an ingested file (SstFileWriter) stores sequence number 0 for its entries, its real one only in the
        # MANIFEST: among other files its versions cannot be ordered here
        ingested = sum(_EXTERNAL in f.properties for f in files)
        if ingested and ingested < len(files):
            by_cf[name] = None
    return by_cf


def _sorted_entries(files: list, prefix_bytes: int, first: int, last: int):
    """Visible entries of key groups ``first..last`` in RocksDB's key order:
    ``(keys (n, width) uint8, key lengths, values buffer, value starts, value lengths)``."""

    if not files:
        return np.zeros((0, 8), dtype=np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint8), \
            np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:
        values, kbuf, ks, ke, vs, ve, merged = read_column_family(files, types=_TYPES)
    except (SstError, Unsupported, ValueError, IndexError) as exc:
        raise _Fallback(str(exc)) from exc
    if merged:
        raise _Fallback("merge operands")
    n = len(ks)
    klen = ke - ks
    width = (len(kbuf) - int(ks[0])) // n if n else 8
    if n and (np.any(np.diff(ks) != width) or width % 8 or width < 8):
        raise _Fallback("key rows of unexpected layout")
    rows = kbuf[int(ks[0]) if n else 0:][: n * width].reshape(n, width)
    if n and bool(np.any(klen <= prefix_bytes)):
        raise _Fallback("a key without its key-group prefix")
    kg = np.zeros(n, dtype=np.int64)
    for j in range(prefix_bytes):
        kg = kg * 256 + rows[:, j]
    # read_column_family gives the rows in RocksDB's key order already: keep those of these key groups
    order = np.flatnonzero((kg >= first) & (kg <= last))
    keys = np.take(rows, order, axis=0)
    return keys, klen[order], values, vs[order], (ve - vs)[order]


def write_view_state_sst(files: list, desc: "StoredState | dict[str, Any]", prefix_bytes: int, key_group_range: tuple[int, int],
                         value_info: Any, user_key: Any, path: Path, expire: tuple[int, int] | None = None,
                         profile: ParquetProfile = SAVEPOINT):
    """:func:`explorer.format.rocksdb.native.write_native_table` of one state from its SST ``files``:
    ``(row groups, rows, kinds, checksum entry)``, or None (nothing written) where this path does not apply."""

    state = StoredState.of(desc)
    if not supported(state.kind, value_info, user_key):
        return None
    try:
        keys, klen, values, vs, vlen = _sorted_entries(files, prefix_bytes, *key_group_range)
    except _Fallback:
        return None
    ttl, kind = state.has_ttl, state.kind
    n, width = keys.shape

    def piece(i: int):
        j = min(n, i + TABLE_BATCH)
        kb = keys[i:j].reshape(-1)
        kst = np.arange(j - i, dtype=np.int64) * width
        kl = klen[i:j]
        bs, bl = vs[i:j], vlen[i:j]
        lo = int(bs.min())
        hi = int((bs + bl).max())
        vb = values[lo:hi]
        got = decode_flat((kb, kst, kl), (vb, bs - lo, bl), kind, prefix_bytes, ttl, value_info, user_key, expire)
        if got is None:
            entries = [(kb[s : s + ln].tobytes(), vb[s2 : s2 + ln2].tobytes())
                       for s, ln, s2, ln2 in zip(kst.tolist(), kl.tolist(), (bs - lo).tolist(), bl.tolist())]
            rows = list(decoded_rows(entries, desc, prefix_bytes, value_info, expire))
            if not rows:
                return None
            got = rows_to_table(rows, value_info, user_key)
        return got

    # None where kinds or schemas differ between batches: the rocksdict path reports or reconciles it.
    # The next batches are decoded (NumPy, numba, Arrow: mostly outside the GIL) by two threads, a
    # batch each, while the current one is Parquet-encoded, hashed and written (also outside the GIL).
    pieces = (p for p in map_ahead(piece, range(0, n, TABLE_BATCH), 2, "snapshot-decode") if p is not None)
    return write_decoded(path, pieces, lambda: rows_to_table([], value_info, user_key), profile)


__all__ = ["column_family_files", "write_view_state_sst"]

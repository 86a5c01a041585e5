"""A pinned RocksDB view's state read straight from its SST files (the fast half of a full snapshot).

:func:`.capture.write_capture` writes a RocksDB backend's full snapshot from a
:class:`.capture.PinnedView` (a RocksDB checkpoint folder: hard-linked SSTs,
memtables flushed, the WAL off). Iterating it with rocksdict makes a Python
``bytes`` per key and per value; here the state's SST files are read by
:mod:`explorer.format.sst.columns` (data blocks mapped side by side, versions of a
key resolved by sequence number, deletions hiding their keys) one key-group range
at a time (:data:`CHUNK_BYTES` of blocks each, chosen from the files' index
blocks): the next ranges' blocks are checksum-verified and walked, :data:`WALK_THREADS`
ranges at once, while the batches of this one are decoded in another thread and
Parquet-encoded, hashed and written in the caller's (1 GB: the first batch is written ~0.15 s in, not
after the whole 0.4 s walk). The entries are cut into the same batches of
:data:`explorer.format.rocksdb.native.TABLE_BATCH` raw entries as the rocksdict
path, counted from the first entry (a batch may span two ranges), and decoded by
:func:`explorer.format.rocksdb.columns.decode_flat` from buffers and offsets. The
written file is the one the rocksdict path writes: same batches, same decoding,
same tables (a batch the column-wise decoder declines is decoded row by row from
its raw bytes, as there).

:func:`write_view_state_sst` returns None whenever the files hold anything not
handled here: a non-empty WAL, range deletions, merge operands or other entry
types, two versions of a key with one sequence number, a file the parser rejects
(format version, compression, index type), a damaged block, a compressed block
among uncompressed ones, state types not decoded column-wise, or batches whose
kinds differ. Some ranges may have been written by then (the file is aborted);
the caller then writes it again, reading the view with rocksdict.
"""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ...format.keyed import SAVEPOINT, ParquetProfile, rows_to_table
from ...format.prefetch import map_ahead, map_fed
from ...format.rocksdb.columns import decode_flat, supported
from ...format.rocksdb.native import TABLE_BATCH, decoded_rows, write_decoded
from ...format.states import StoredState
from ...format.sst.columns import ColumnFamilyBlocks, Recycled, Unsupported
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


#: block bytes per key-group range read at a time: the next range is walked (one thread) while this
#: one's batches are decoded and written (1 GB of state: 16 ranges; the first range is the only wait)
CHUNK_BYTES = 64 << 20
#: threads decoding batches while the current one is written (one keeps up with the writer: 1 GB, 25 ms a
#: batch against 33 ms; a second only adds to what the writer's thread shares two cores with)
DECODE_THREADS = 1
#: key-group ranges verified and walked at once, each by a thread of its own (numba and xxhash: mostly outside
#: the GIL)
WALK_THREADS = 2


def _rows(got: tuple, prefix_bytes: int, first: int, last: int):
    """Entries of :func:`~explorer.format.sst.columns.read_column_family` as
    ``(keys (n, width) uint8, key lengths, values buffer, value starts, value lengths)``, only those of
    key groups ``first..last``, in RocksDB's key order."""
    values, kbuf, ks, ke, vs, ve, merged = got
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
    # the rows are in RocksDB's key order already: keep those of these key groups
    if n and int(kg[0]) >= first and int(kg[-1]) <= last:
        return rows, klen, values, vs, ve - vs  # (kg ascends with the rows: all of them)
    order = np.flatnonzero((kg >= first) & (kg <= last))
    return np.take(rows, order, axis=0), klen[order], values, vs[order], (ve - vs)[order]


def _ranges(bounds: tuple | None, blocks: ColumnFamilyBlocks, first: int, last: int) -> list[tuple[int, int]]:
    """Key-group ranges covering ``first..last``, each of about :data:`CHUNK_BYTES` of blocks; one range
    where the blocks' key groups are not known (``bounds``: ``ColumnFamilyBlocks.key_group_bounds``)."""
    total = int(blocks.blen.sum()) if len(blocks) else 0
    k = min(64, total // max(1, CHUNK_BYTES))
    if bounds is None or k <= 1 or first >= last:
        return [(first, last)]
    kg = bounds[1]
    inside = (kg >= first) & (kg <= last)
    # the blocks' bytes by the last key group they may hold, summed: a range starts where the sum
    # passes the next multiple of a range's share
    sums = np.cumsum(np.bincount(kg[inside] - first, weights=blocks.blen[inside], minlength=last - first + 1))
    if not len(sums) or sums[-1] <= 0:
        return [(first, last)]
    share = sums[-1] / k
    marks = share * np.arange(1, k)
    cuts = np.unique(first + 1 + np.searchsorted(sums, marks, side="left"))
    bounds = [first, *cuts[cuts <= last].tolist(), last + 1]
    return [(lo, hi - 1) for lo, hi in zip(bounds, bounds[1:]) if lo < hi]


def _chunks(blocks: ColumnFamilyBlocks, prefix_bytes: int, first: int, last: int) -> Iterator[tuple]:
    """:func:`_rows` of each key-group range of :func:`_ranges`, in order, :data:`WALK_THREADS` ranges
    verified and walked at once."""
    try:
        bounds = blocks.key_group_bounds(prefix_bytes)
        ranges = _ranges(bounds, blocks, first, last)
    except (SstError, Unsupported, ValueError, IndexError) as exc:
        raise _Fallback(str(exc)) from exc

    def walk(r: tuple[int, int]) -> tuple:
        lo, hi = r
        try:
            sel = np.arange(len(blocks)) if bounds is None else blocks.blocks_of(bounds, lo, hi)
            blocks.verify(sel)  # (their checksums: before anything is read from them)
            return _rows(blocks.read(sel, types=_TYPES), prefix_bytes, lo, hi)
        except (SstError, Unsupported, ValueError, IndexError) as exc:
            raise _Fallback(str(exc)) from exc

    if WALK_THREADS > 1 and len(ranges) > 1:
        yield from map_ahead(walk, ranges, WALK_THREADS, "snapshot-walk")
    else:
        yield from map(walk, ranges)
    try:
        blocks.verify()  # the blocks of no range too: every checksum of the files
    except (SstError, Unsupported, ValueError, IndexError) as exc:
        raise _Fallback(str(exc)) from exc


def _batches(chunks: Iterator[tuple]) -> Iterator[list[tuple]]:
    """The entries of ``chunks`` cut into batches of :data:`TABLE_BATCH` counted from the first entry, as
    the rocksdict path cuts them (a batch may span two chunks): each a list of ``(chunk, i, j)``."""
    pending: list[tuple] = []
    have = 0
    for c in chunks:
        n = len(c[1])
        i = 0
        while i < n:
            j = min(n, i + TABLE_BATCH - have)
            pending.append((c, i, j))
            have += j - i
            i = j
            if have == TABLE_BATCH:
                yield pending
                pending, have = [], 0
    if pending:
        yield pending


def _flat(parts: list[tuple]):
    """The keys and values of one batch as ``(key buffer, starts, lengths)``, ``(value buffer, starts,
    lengths)``: views of its chunk's arrays, joined (keys padded to one width) where it spans two."""
    if len(parts) == 1:
        (keys, klen, values, vs, vlen), i, j = parts[0]
        width = keys.shape[1]
        kb = keys[i:j].reshape(-1)
        kl = klen[i:j]
        bs, bl = vs[i:j], vlen[i:j]
    else:
        width = max(c[0].shape[1] for c, _, _ in parts)
        rows = np.zeros((sum(j - i for _, i, j in parts), width), dtype=np.uint8)
        at = 0
        for (keys, *_), i, j in parts:
            rows[at : at + j - i, : keys.shape[1]] = keys[i:j]
            at += j - i
        kb = rows.reshape(-1)
        kl = np.concatenate([c[1][i:j] for c, i, j in parts])
        bufs = [c[2] for c, _, _ in parts]
        if all(b is bufs[0] for b in bufs):  # one buffer (the joined blocks): no copy
            values = bufs[0]
            bs = np.concatenate([c[3][i:j] for c, i, j in parts])
        else:
            segs, starts, at = [], [], 0
            for (_, _, v, s, ln), i, j in parts:
                lo, hi = int(s[i:j].min()), int((s[i:j] + ln[i:j]).max())
                segs.append(v[lo:hi])
                starts.append(s[i:j] - lo + at)
                at += hi - lo
            values, bs = np.concatenate(segs), np.concatenate(starts)
        bl = np.concatenate([c[4][i:j] for c, i, j in parts])
    kst = np.arange(len(kl), dtype=np.int64) * width
    lo = int(bs.min())
    hi = int((bs + bl).max())
    return (kb, kst, kl), (values[lo:hi], bs - lo, bl)


def write_view_state_sst(files: list, desc: "StoredState | dict[str, Any]", prefix_bytes: int, key_group_range: tuple[int, int],
                         value_info: Any, user_key: Any, path: Path, expire: tuple[int, int] | None = None,
                         profile: ParquetProfile = SAVEPOINT):
    """:func:`explorer.format.rocksdb.native.write_native_table` of one state from its SST ``files``:
    ``(row groups, rows, kinds, checksum entry)``, or None where this path does not apply (the file at
    ``path`` then is not written, or only partly: the caller writes it again, the rocksdict way)."""

    state = StoredState.of(desc)
    if not supported(state.kind, value_info, user_key):
        return None
    ttl, kind = state.has_ttl, state.kind
    if not files:
        return write_decoded(path, iter(()), lambda: rows_to_table([], value_info, user_key), profile)
    try:
        blocks = ColumnFamilyBlocks(files, lazy=True)  # (pages mapped as they are read, by the walk's thread)
    except (SstError, Unsupported, ValueError, IndexError):
        return None

    def piece(parts: list[tuple]):
        kflat, vflat = _flat(parts)
        got = decode_flat(kflat, vflat, kind, prefix_bytes, ttl, value_info, user_key, expire, buffers.empty)
        if got is None:
            (kb, kst, kl), (vb, bs, bl) = kflat, vflat
            entries = [(kb[s : s + ln].tobytes(), vb[s2 : s2 + ln2].tobytes())
                       for s, ln, s2, ln2 in zip(kst.tolist(), kl.tolist(), bs.tolist(), bl.tolist())]
            rows = list(decoded_rows(entries, desc, prefix_bytes, value_info, expire))
            if not rows:
                return None
            got = rows_to_table(rows, value_info, user_key)
        return got

    # The next key-group ranges are verified and walked by WALK_THREADS threads (numba, outside the GIL), the
    # batches of this one decoded in another (NumPy, numba, Arrow: mostly outside the GIL), while the
    # current batch is Parquet-encoded, hashed and written (also outside the GIL). A damaged block or
    # anything not read here (see the module's notes) ends in None, the file aborted; so do kinds or
    # schemas that differ between batches (the rocksdict path reports or reconciles it).
    # About the file's size: an uncompressed checkpoint holds about the blocks' bytes (the file system
    # allocates them at once; what is not written is given back).
    size_hint = int(blocks.blen.sum()) * 9 // 8 if profile.compression == "none" else 0
    buffers = Recycled()  # the values of a batch gathered into the buffer of one written before
    decoded = map_fed(piece, _batches(_chunks(blocks, prefix_bytes, *key_group_range)), DECODE_THREADS,
                      "snapshot-decode", "snapshot-walk")
    pieces = (p for p in decoded if p is not None)
    try:
        return write_decoded(path, pieces, lambda: rows_to_table([], value_info, user_key), profile, size_hint)
    except _Fallback:
        return None
    finally:
        decoded.close()
        buffers.close()


__all__ = ["CHUNK_BYTES", "column_family_files", "write_view_state_sst"]

"""The data blocks of a column family's SST files parsed at once with NumPy.

``sst`` reads a data block entry by entry in Python; this module reads the same
bytes column-wise and gives the same visible key/value pairs as
``rocksdb.resolve`` (a test checks it on every fixture), as byte ranges of two
buffers (keys, values), ready for ``columnar`` decoding. Flink keeps one column
family per state, so only the files of the states asked for are read at all.

1. every data block is decompressed (``cramjam``) and the blocks are joined
   into one buffer; each block's trailer gives its *restart points*, the
   offsets of the entries whose keys are stored whole;
2. the entries of all restart intervals are walked in step: step ``j`` decodes
   the three varints (shared, non-shared, value length) of the ``j``-th entry of
   every interval at once (intervals are ``restart_interval`` entries, 16 by
   default), so Python loops once per step, not once per entry; when all three
   are one byte long, as usual, they are read as one word;
3. keys are rebuilt as rows of an ``(entries, longest key)`` byte matrix: a row
   takes the block's bytes from where its key would start, then the previous
   key's bytes within its shared prefix (``row ^= (row ^ previous) & mask``),
   one step at a time;
4. values stay where they are in the joined blocks. When the column family has
   several files (levels), or several versions of a key, rows are sorted by key
   group and a 64-bit hash of the zero-padded user key (equal keys checked byte
   for byte), the newest sequence number of each key decides as in
   ``rocksdb.resolve``, and ``rocksdb.combine`` joins the few keys whose newest
   version is a merge operand (Flink's list appends). Output comes in key-group
   order; the visible keys' rows are copied into their own buffer, zero past
   each key.

NumPy notes that matter here: rows of a contiguous matrix are gathered with
``np.take(axis=0)`` (fancy indexing of a 2-D array is ~10x slower); rows at
arbitrary byte offsets through 1-D strided views of void or number items
(``np.take`` would first copy the whole strided source).

What this module does not handle (a data-block hash index, a key matrix much
larger than the data, a hash collision) raises :class:`Unsupported`; the caller then uses the
entry-by-entry reader.
"""

from __future__ import annotations

from collections import defaultdict

import cramjam
import numpy as np

from .sst import TYPE_MERGE, TYPE_VALUE, SstError, SstFile

_PAD = 16
_MARGIN = 128  # zero bytes around the joined blocks


class Unsupported(Exception):
    """These SST files need the entry-by-entry reader."""


def _u32le(b: np.ndarray, pos: np.ndarray) -> np.ndarray:
    v = b[pos].astype(np.int64)
    v |= b[pos + 1].astype(np.int64) << 8
    v |= b[pos + 2].astype(np.int64) << 16
    v |= b[pos + 3].astype(np.int64) << 24
    return v


def _varints(b: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varint32 at every position; returns values and the positions after them."""
    v = b[pos].astype(np.int64)
    more = np.flatnonzero(v >= 0x80)
    if not len(more):
        return v, pos + 1
    end = pos + 1
    v[more] &= 0x7F
    for k in range(1, 5):
        y = b[pos[more] + k].astype(np.int64)
        v[more] |= (y & 0x7F) << (7 * k)
        end[more] += 1
        more = more[y >= 0x80]
        if not len(more):
            return v, end
    raise SstError(f"a varint32 at offset {int(pos[more[0]])} of the joined data blocks runs over 5 bytes")


def _data_handles(f: SstFile) -> list[tuple[int, int]]:
    """The data block handles of ``f``'s index (as ``SstFile.data_handles`` gives them)."""
    off, size = _handle_arrays(f)
    return list(zip(off.tolist(), size.tolist()))


def _handle_arrays(f: SstFile) -> tuple[np.ndarray, np.ndarray]:
    """Offsets and sizes of ``f``'s data blocks, all at once when every index entry is a restart point.

    That is RocksDB's default (``index_block_restart_interval`` 1): each entry is
    ``varint shared (0), varint non_shared, [varint value length], key, varint
    offset, varint size``. Otherwise ``SstFile.data_handles`` reads it entry by entry.
    """
    def by_entries() -> tuple[np.ndarray, np.ndarray]:
        handles = f.data_handles()
        return (np.array([h[0] for h in handles], dtype=np.int64), np.array([h[1] for h in handles], dtype=np.int64))

    if f.prop_int("rocksdb.block.based.table.index.type", 0) != 0:
        return by_entries()
    delta = f.prop_int("rocksdb.index.value.is.delta.encoded", 0) == 1
    block = f.block(f.index)
    n = len(block)
    b = np.frombuffer(block + b"\0" * _PAD, dtype=np.uint8)
    packed = int.from_bytes(block[n - 4 :], "little")
    nr = packed & 0x7FFFFFFF
    limit = n - 4 - 4 * nr
    if packed >> 31 or nr < 1 or limit < 0:
        return by_entries()
    starts = _u32le(b, limit + 4 * np.arange(nr))
    if (starts >= limit).any():
        return by_entries()
    shared, p = _varints(b, starts)
    nonshared, p = _varints(b, p)
    if not delta:
        _, p = _varints(b, p)
    off, p = _varints(b, p + nonshared)
    size, p = _varints(b, p)
    if shared.any() or not (p == np.append(starts[1:], limit)).all():
        return by_entries()  # entries between restart points: the entry-by-entry reader
    return off, size


def _blocks(files: list[SstFile]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every data block of ``files`` decompressed into one zero-margined buffer; each block's start and length.

    Snappy blocks are decompressed straight into place (``cramjam``'s
    ``decompress_raw_into``), their lengths read from their headers all at
    once; :data:`_MARGIN` zero bytes before and after let fixed-width rows be
    read at any key without running off the buffer.
    """
    plans = []  # per file: (file, block offsets, sizes, compression types, decompressed lengths, other blocks)
    for f in files:
        off, size = _handle_arrays(f)
        fb = np.frombuffer(f.data, dtype=np.uint8)
        over = off + size + 5 > len(fb)
        if over.any():
            i = int(np.flatnonzero(over)[0])
            raise SstError(f"{f.name}: block at {int(off[i])} (+{int(size[i])}) runs past the end of the file")
        ctype = fb[off + size]
        length = size.copy()
        snappy = np.flatnonzero(ctype == 1)
        if len(snappy):
            # a raw Snappy block starts with its decompressed length, a varint32 (within the block's trailer)
            length[snappy] = _varints(fb, off[snappy])[0]
        other = {}
        for i in np.flatnonzero(ctype > 1).tolist():  # LZ4, ZSTD: whole, then copied
            other[i] = f.block((int(off[i]), int(size[i])))
            length[i] = len(other[i])
        plans.append((f, off, size, ctype, length, other))
    blen = np.concatenate([p[4] for p in plans]) if plans else np.zeros(0, dtype=np.int64)
    starts = _MARGIN + np.cumsum(blen) - blen
    out = np.zeros(_MARGIN + int(blen.sum()) + _MARGIN, dtype=np.uint8)
    into = cramjam.snappy.decompress_raw_into
    om = memoryview(out)
    first = 0
    for f, off, size, ctype, length, other in plans:
        mv = memoryview(f.data)
        where = starts[first : first + len(off)]
        for i, (o, z, c, d, n) in enumerate(zip(off.tolist(), size.tolist(), ctype.tolist(), where.tolist(),
                                                length.tolist())):
            if c == 1:
                if into(mv[o : o + z], om[d : d + n]) != n:
                    raise SstError(f"{f.name}: the Snappy block at {o} decompressed short of its stated {n} bytes")
            elif c == 0:
                om[d : d + n] = mv[o : o + z]
            else:
                om[d : d + n] = other[i]
        first += len(off)
    block_file = np.repeat(np.arange(len(plans)), [len(p[1]) for p in plans]).astype(np.int64)
    return out, starts, block_file


def _entries(files: list[SstFile]):
    """Walk every data block of ``files``; returns the joined blocks, the key matrix and entry columns.

    Keys are rebuilt as rows of a ``(n, width)`` byte matrix (``width``: the
    longest key): step ``j`` takes, per column, the previous key's byte where
    the column is within the shared prefix and the block's byte otherwise.
    """
    joined, base, bfile = _blocks(files)
    b = joined
    blen = np.diff(np.append(base, len(b) - _MARGIN))
    names = [f.name for f in files]
    if len(blen) and blen.min() < 4:
        raise SstError(f"{names[int(bfile[np.argmin(blen)])]}: a data block of {int(blen.min())} bytes")
    packed = _u32le(b, base + blen - 4)
    if (packed >> 31).any():
        raise Unsupported("data block hash index")
    nr = packed & 0x7FFFFFFF
    limit = blen - 4 - 4 * nr
    if len(blen) and ((limit < 0) | (nr < 1)).any():
        bad = int(np.flatnonzero((limit < 0) | (nr < 1))[0])
        raise SstError(f"{names[int(bfile[bad])]}: a data block of {int(blen[bad])} bytes claims "
                       f"{int(nr[bad])} restart points")
    # restart points -> restart intervals [gstart, gend) of the joined buffer
    rfirst = np.cumsum(nr) - nr
    within = np.arange(int(nr.sum())) - np.repeat(rfirst, nr)
    gblock = np.repeat(np.arange(len(blen)), nr)
    gstart = base[gblock] + _u32le(b, (base + limit)[gblock] + 4 * within)
    gend = np.empty_like(gstart)
    gend[:-1] = gstart[1:]
    gend[rfirst + nr - 1] = base + limit
    wrong = (gstart > gend) | (gstart < base[gblock])
    if wrong.any():
        bad = int(gblock[np.flatnonzero(wrong)[0]])
        raise SstError(f"{names[int(bfile[bad])]}: a data block's restart points are out of order")
    # walk all intervals in step, the j-th entry of every interval at once; rows stay in step order
    width = 8
    steps = []
    g = np.flatnonzero(gstart < gend)
    pos = gstart[g]
    # the three varints' first bytes, read as one little-endian word (the margin covers the last entry)
    heads = np.ndarray((len(b) - 3,), dtype="<u4", buffer=b, strides=(1,))
    while len(g):
        w = heads[pos]
        if not (w & 0x808080).any():  # all three varints one byte long: the usual case
            w = w.astype(np.int64)
            shared = w & 0xFF
            nonshared = (w >> 8) & 0xFF
            vlen = (w >> 16) & 0xFF
            kpos = pos + 3
        else:
            shared, p = _varints(b, pos)
            nonshared, p = _varints(b, p)
            vlen, kpos = _varints(b, p)
        nxt = kpos + nonshared + vlen
        end = gend[g]
        if (nxt > end).any():
            bad = int(gblock[g[np.flatnonzero(nxt > end)[0]]])
            raise SstError(f"{names[int(bfile[bad])]}: a data block entry runs past its block")
        go = np.flatnonzero(nxt < end)
        klen = shared + nonshared
        steps.append((g, shared, klen, kpos, nonshared, vlen, go))
        width = max(width, int(klen.max()))
        g, pos = g[go], nxt[go]
    if steps and steps[0][1].any():
        raise SstError(f"{names[0]}: a key at a restart point of a data block shares bytes with the previous key")
    width = -(-width // 8) * 8
    n = sum(len(st[0]) for st in steps)
    if n * width > max(1 << 26, 8 * len(joined)):
        raise Unsupported(f"keys of up to {width} bytes")
    counts = np.zeros(len(gstart), dtype=np.int64)
    for st in steps:
        counts[st[0]] += 1
    gfirst = np.cumsum(counts) - counts
    keys = np.empty((n, width), dtype=np.uint8)
    kw = keys.view("<u8")
    kv = keys.view(np.dtype((np.void, width))).ravel()
    # row i: the `width` bytes from the start of key i's shared prefix, were it in the block (the margins
    # cover rows that start before the buffer's first block or end after its last); one memcpy per row
    shift = 0 if width <= _MARGIN else width
    padded = b if not shift else np.concatenate([np.zeros(width, dtype=np.uint8), b, np.zeros(width, dtype=np.uint8)])
    rows_at = np.ndarray((len(padded) - width + 1,), dtype=np.dtype((np.void, width)), buffer=padded, strides=(1,))
    prefix_masks = _prefix_masks(width)
    off = 0
    prev = None  # the previous step's rows of the intervals still going: a slice, or row numbers
    prev_klen = None
    for g, sh, kl, kp, _, _, go in steps:
        m = len(g)
        kv[off : off + m] = rows_at[kp - sh + shift]  # (np.take would copy all of rows_at first)
        if prev is not None:
            if (sh > prev_klen).any():
                raise SstError(f"{names[0]}: a data block key shares more bytes than the previous key has")
            # the shared prefix from the previous key of the interval, a word at a time:
            # row ^= (row ^ previous) & mask (np.take: row gathers of a contiguous matrix, ~10x fancy indexing)
            rows = kw[off : off + m]
            t = np.bitwise_xor(kw[prev] if isinstance(prev, slice) else np.take(kw, prev, axis=0), rows)
            t &= np.take(prefix_masks, sh, axis=0)
            rows ^= t
        prev = slice(off, off + m) if len(go) == m else off + go
        prev_klen = kl if len(go) == m else kl[go]
        off += m
    cat = np.concatenate
    klen = cat([st[2] for st in steps]) if steps else np.zeros(0, dtype=np.int64)
    vpos = cat([st[3] + st[4] for st in steps]) if steps else np.zeros(0, dtype=np.int64)
    vlen = cat([st[5] for st in steps]) if steps else np.zeros(0, dtype=np.int64)
    slot = cat([gfirst[st[0]] + j for j, st in enumerate(steps)]) if steps else np.zeros(0, dtype=np.int64)
    shared = cat([st[1] for st in steps]) if steps else np.zeros(0, dtype=np.int64)
    order = np.empty(n, dtype=np.int64)
    order[slot] = np.arange(n)  # file order -> row
    efile = np.repeat(bfile[gblock], counts)
    return joined, keys, klen, vpos, vlen, order, efile, shared, len(steps[0][0]) if steps else 0


# _PREFIX[k]: the first k bytes of a little-endian uint64 word
_PREFIX = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def _prefix_masks(width: int) -> np.ndarray:
    """Row ``k``: the words of a ``width``-byte row that keep its first ``k`` bytes (``k`` up to ``width``)."""
    return _PREFIX[np.clip(np.arange(width + 1)[:, None] - 8 * np.arange(width // 8), 0, 8)]


def _hash_rows(kw: np.ndarray, ulen: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each zero-padded key row and its length (equal keys, equal hashes)."""
    with np.errstate(over="ignore"):
        h = ulen.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        t = np.empty_like(h)
        for i in range(kw.shape[1]):  # in place: h = (h ^ word) * K; h ^= h >> 31
            h ^= kw[:, i]
            h *= np.uint64(0xBF58476D1CE4E5B9)
            np.right_shift(h, np.uint64(31), out=t)
            h ^= t
    return h


def read_column_family(files: list[SstFile], types: tuple[int, ...] | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Visible entries of one column family spread over ``files``: ``(values, keys, ks, ke, vs, ve, merged keys)``.

    ``types``, if given, are the only entry types accepted (anything else raises
    :class:`Unsupported`, as do two versions of a key with one sequence number).
    ``vs``/``ve`` index ``values`` (the joined blocks, then any merged lists),
    ``ks``/``ke`` index ``keys`` (one row per key), both uint8 arrays (two
    buffers: joining them would copy every block once more). Entries come in
    key order for one file holding one version per key; otherwise in key-group order, and within a key
    group in the order of a hash of the key (``rocksdb.resolve`` sorts fully:
    compare them as sets).
    """
    joined, keys, klen, vpos, vlen, order, efile, shared, restarts = _entries(files)
    n, width = keys.shape
    kw = keys.view("<u8")
    if n and klen.min() < 8:
        raise SstError(f"{files[int(efile[np.argmin(klen)])].name}: an internal key is shorter than its "
                       "8-byte trailer")
    ulen = klen - 8
    flat = keys.reshape(-1)
    at = np.arange(n) * width + ulen  # each key's 8-byte trailer: (sequence << 8) | type, little-endian
    typ = flat[at]  # the type byte (the sequence numbers only where versions are compared)
    strict = types is not None
    if strict and n and not np.isin(typ, np.array(types, dtype=np.uint8)).all():
        bad = int(typ[~np.isin(typ, np.array(types, dtype=np.uint8))][0])
        raise Unsupported(f"an entry of type {bad} (expected one of {list(types)})")
    merged = 0
    extra: list[bytes] = []  # merged list values, stored after the blocks
    if len(files) == 1 and (typ == TYPE_VALUE).all() and not _adjacent_equal(kw, ulen, order, shared, restarts):
        keep = order  # one file of values, one version per key: already sorted and visible
        vs, ve = vpos[keep], vpos[keep] + vlen[keep]
        masked = None
    else:
        masked = True  # _resolve zeroes the rows past each user key
        tail = np.ndarray((max(len(flat) - 7, 0),), dtype="<u8", buffer=flat, strides=(1,))
        seq = (tail[at] >> np.uint64(8)).astype(np.int64)
        keep, vs, ve, extra = _resolve(joined, keys, ulen, vpos, vlen, seq, typ.astype(np.int64), strict)
        merged = len(extra)
    # the visible keys' rows in output order (key ranges ascend through their buffer), zero past each key,
    # after a margin of zeros (columnar hashes strings by reading the `width` bytes that end where each ends)
    kbuf = np.zeros(_MARGIN + len(keep) * width, dtype=np.uint8)
    # (np.take with out= and mode="clip" copies in place, unbuffered: ~8x assigning a fancy-indexed copy)
    np.take(keys.view(np.dtype((np.void, width))).ravel(), keep, out=kbuf[_MARGIN:].view(np.dtype((np.void, width))),
            mode="clip")
    if masked is None:  # zero past each user key (not yet done for one file): equal keys, equal rows
        kout = kbuf[_MARGIN:].view("<u8").reshape(len(keep), width // 8)
        kout &= np.take(_prefix_masks(width), ulen[keep], axis=0)
    values = joined if not extra else np.frombuffer(b"".join([joined, *extra]), dtype=np.uint8)
    ks = _MARGIN + np.arange(len(keep), dtype=np.int64) * width
    return values, kbuf, ks, ks + ulen[keep], vs, ve, merged

def _resolve(joined, keys, ulen, vpos, vlen, seq, typ, strict=False):
    """The visible version of every user key, in key-group order: ``(rows, value starts, value ends, merged)``.

    ``merged``: the combined values of the keys whose newest version is a merge
    operand, in the order their value ranges point to (from ``len(joined)`` on).

    Rows are sorted once by key group (the first two key bytes) and a 64-bit
    hash of the user key (the key group in the top 16 bits, 48 bits of the hash
    below); rows with equal sort keys are one user key's versions (checked byte
    for byte), of which the newest decides as in ``rocksdb.resolve``. Merged
    values (keys whose newest version is a merge operand) are placed after
    ``joined``, in the order of the returned list.
    """
    from .rocksdb import combine

    n, width = keys.shape
    kw = keys.view("<u8")
    kw &= np.take(_prefix_masks(width), ulen, axis=0)  # user keys, zero-padded
    h = _hash_rows(kw, ulen)
    kg = (keys[:, 0].astype(np.uint64) << np.uint64(8)) | keys[:, 1]
    sort_key = (kg << np.uint64(48)) | (h >> np.uint64(16))
    by_key = np.argsort(sort_key)
    sk = sort_key[by_key]
    first = np.flatnonzero(np.concatenate([[True], sk[1:] != sk[:-1]]))
    size = np.diff(np.append(first, n))
    rep = by_key[first]  # each key's newest version (so far: its only one)
    multi = np.flatnonzero(size > 1)
    if len(multi):
        # several versions: newest first; the hash must not have joined different keys
        msize = size[multi]
        grp = np.repeat(np.arange(len(multi)), msize)
        rows = by_key[np.repeat(first[multi] - (np.cumsum(msize) - msize), msize) + np.arange(len(grp))]
        o = np.lexsort((-seq[rows], grp))
        rows, grp = rows[o], grp[o]
        heads = np.flatnonzero(np.concatenate([[True], grp[1:] != grp[:-1]]))
        lead = np.repeat(rows[heads], np.diff(np.append(heads, len(rows))))
        if not ((np.take(kw, rows, axis=0) == np.take(kw, lead, axis=0)).all(axis=1)
                & (ulen[rows] == ulen[lead])).all():
            raise Unsupported("a 64-bit hash collision between different keys")
        if strict:  # two versions of a key with one sequence number: which is newer is not known here
            second = heads[np.diff(np.append(heads, len(rows))) > 1] + 1
            if (seq[rows[second]] == seq[rows[second - 1]]).any():
                raise Unsupported("two versions of a key with the same sequence number")
        rep[multi] = rows[heads]
        ends = np.append(heads[1:], len(rows))
        multi_at = dict(zip(multi.tolist(), range(len(multi))))
    tr = typ[rep]
    keep_g = np.flatnonzero((tr == TYPE_VALUE) | (tr == TYPE_MERGE))  # deletions hide their keys
    keep = rep[keep_g]
    vs = vpos[keep]
    ve = vs + vlen[keep]
    extra: list[bytes] = []
    off = len(joined)
    for k in np.flatnonzero(tr[keep_g] == TYPE_MERGE).tolist():  # combined exactly as rocksdb.resolve does
        gi = int(keep_g[k])
        if size[gi] > 1:
            m = multi_at[gi]
            idx = rows[heads[m] : ends[m]].tolist()
        else:
            idx = [int(rep[gi])]
        value = combine([(int(typ[e]), joined[vpos[e] : vpos[e] + vlen[e]].tobytes()) for e in idx])
        vs[k], ve[k] = off, off + len(value)
        extra.append(value)
        off += len(value)
    return keep, vs, ve, extra


def _adjacent_equal(kw: np.ndarray, ulen: np.ndarray, order: np.ndarray, shared: np.ndarray,
                    restarts: int) -> bool:
    """Whether two neighbouring entries of one sorted file have the same user key (several versions).

    Within a restart interval a key's ``shared`` count is its exact common
    prefix with the previous key, so equal user keys share at least the user
    key; only keys at restart points (rows ``< restarts``) are compared bytewise.
    """
    a, b = order[:-1], order[1:]
    same_len = ulen[a] == ulen[b]
    if (same_len & (b >= restarts) & (shared[b] >= ulen[b])).any():
        return True
    cand = np.flatnonzero(same_len & (b < restarts))
    if not len(cand):
        return False
    a, b = a[cand], b[cand]
    mask = np.take(_prefix_masks(8 * kw.shape[1]), ulen[a], axis=0)  # the user keys' bytes only
    return bool(((np.take(kw, a, axis=0) & mask) == (np.take(kw, b, axis=0) & mask)).all(axis=1).any())


def column_families(sst_files: list[tuple[str, bytes]]) -> tuple[dict[str, list[SstFile]], dict[str, int]]:
    """The SST files of one RocksDB instance by column family (footers and properties only); stats."""
    by_cf: dict[str, list[SstFile]] = defaultdict(list)
    stats = {"sst_files": 0, "merged_keys": 0, "range_deletions": 0}
    for name, data in sst_files:
        f = SstFile(data, name)
        stats["sst_files"] += 1
        stats["range_deletions"] += int(f.has_range_deletions)
        by_cf[f.column_family or "default"].append(f)
    return dict(by_cf), stats


__all__ = ["Unsupported", "column_families", "read_column_family"]

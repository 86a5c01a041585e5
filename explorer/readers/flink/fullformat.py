"""The *full snapshot* stream: canonical savepoints (any backend) and RocksDB full checkpoints.

After the keyed-backend header (``statemeta``), each key group that holds data
is written at the offset the metadata records for it::

    --- Snappy-framed when the header says "compressed" ---
    short state id                       (position in the header's state list)
    repeated:
        int key length, key bytes        (key/value layout, see ``rows``)
        int value length, value bytes
        if the key's first byte has its top bit set (cleared before use), a
        short follows: the next state id, or 0xFFFF for "end of key group"

The key group itself is not written: it is the key's prefix. Key groups
without data keep offset 0 in the metadata; they are skipped.
"""

from __future__ import annotations

import struct
from array import array
from typing import Iterator

import numpy as np

from ...errors import FlinkCorruptError

from .compression import unframe

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
END_OF_KEY_GROUP = 0xFFFF


def key_group_spans(offsets: list[int], start_kg: int, header_end: int, total: int) -> list[tuple[int, int, int]]:
    """(key group, start, end) for every key group with bytes, in file order.

    Flink writes key groups in order, so their offsets never decrease and lie inside the
    stream: anything else is a damaged handle, reported rather than read as other rows.
    """
    in_order = [off for off in offsets if off >= header_end]
    for a, b in zip(in_order, in_order[1:]):
        if b < a:
            raise FlinkCorruptError(f"key-group offsets decrease ({a} then {b}); expected the offsets of key groups "
                                    "written in order (a damaged state handle)")
    if in_order and in_order[-1] > total:
        raise FlinkCorruptError(f"a key-group offset {in_order[-1]} lies past the end of the {total}-byte stream")
    present = sorted((off, start_kg + i) for i, off in enumerate(offsets) if off >= header_end)
    spans = []
    for j, (off, kg) in enumerate(present):
        nxt = present[j + 1][0] if j + 1 < len(present) else total
        if nxt > off:
            spans.append((kg, off, nxt))
    return spans


def iter_entries(
    buf: bytes, span: tuple[int, int, int], compressed: bool
) -> Iterator[tuple[int, bytes, bytes]]:
    """(state id, key bytes, value bytes) of one key group of a full snapshot stream."""
    kg, start, end = span
    if compressed:
        data = unframe(buf, start, end)
        p, stop = 0, len(data)
    else:
        data = buf
        p, stop = start, end
    if p >= stop:
        return
    unpack_int = _INT.unpack_from
    state = _SHORT.unpack_from(data, p)[0]
    p += 2
    while p < stop:
        at = p
        if p + 4 > stop or (n := unpack_int(data, p)[0]) < 0 or p + 4 + n + 4 > stop:
            raise FlinkCorruptError(f"key group {kg}: the entry at offset {at} has a key length that runs past the "
                                    f"end of the key group (end {stop}); expected a length of 0 to {stop - p - 8}")
        p += 4
        key = data[p : p + n]
        p += n
        if (n := unpack_int(data, p)[0]) < 0 or p + 4 + n > stop:
            raise FlinkCorruptError(f"key group {kg}: the entry at offset {at} has a value length {n} that runs past "
                                    f"the end of the key group (end {stop})")
        p += 4
        value = data[p : p + n]
        p += n
        if key and key[0] & 0x80:
            key = bytes([key[0] & 0x7F]) + key[1:]
            yield state, key, value
            if p + 2 > stop:
                raise FlinkCorruptError(f"key group {kg}: the entry at offset {at} is its state's last, but the key "
                                        f"group ends (at {stop}) before the next state id; expected 2 more bytes")
            nxt = _SHORT.unpack_from(data, p)[0]
            p += 2
            if nxt == END_OF_KEY_GROUP:
                return
            state = nxt
        else:
            yield state, key, value



def _entry_past_end(kg: int, at: int, stop: int, what: str, length: int) -> FlinkCorruptError:
    return FlinkCorruptError(f"key group {kg}: the entry at offset {at} has a {what} of {length} bytes, which runs "
                             f"past the end of the key group at {stop}; expected a length that fits inside it")


def _be32(b, pos):
    """Big-endian int32 at each position (positions past the end read as -1)."""
    view = np.ndarray((max(len(b) - 3, 0),), dtype=">i4", buffer=b, strides=(1,))  # unaligned, no copy
    ok = (pos >= 0) & (pos + 4 <= len(b))
    if ok.all():
        return view[pos].astype(np.int64)
    v = view[np.where(ok, pos, 0)].astype(np.int64) if len(view) else np.zeros(len(pos), dtype=np.int64)
    v[~ok] = -1
    return v


def _scan_span_vectorised(b, start: int, stop: int, prefix: int, kg: int):
    """Entry key starts and state switches of one key group, or None if the shortcut does not apply.

    Every entry of a key group begins with ``00 00`` (a key shorter than 64 KiB)
    and, four bytes later, the key group's own prefix. Positions that look like
    that are *candidates*; each candidate's lengths say where the next entry
    would start. Following those links from the first entry visits exactly the
    real entries (each real entry's successor is again a candidate); see
    :func:`_reachable` for how they are found without a walk.
    """
    seg = b[start:stop]
    n = len(seg)
    m = n - 4 - prefix
    if m <= 2:
        return None
    c = (seg[:m] == 0) & (seg[1 : m + 1] == 0)
    if prefix == 1:
        c &= (seg[4 : m + 4] & 0x7F) == kg
    else:
        c &= ((seg[4 : m + 4] & 0x7F) == (kg >> 8)) & (seg[5 : m + 5] == (kg & 0xFF))
    cand = np.flatnonzero(c)
    if not len(cand) or cand[0] > 2:
        return None
    kl = _be32(seg, cand)
    vpos = cand + 4 + kl
    vl = _be32(seg, vpos)
    flag = (seg[cand + 4] & 0x80) != 0
    nxt = vpos + 4 + np.maximum(vl, 0) + np.where(flag, 2, 0)
    nidx = np.searchsorted(cand, nxt)
    nidx_c = np.minimum(nidx, len(cand) - 1)
    hit = (cand[nidx_c] == nxt) & (vl >= 0)
    links = np.where(hit & ~flag, nidx_c, -1)
    # a flagged entry is followed by a state id: the next entry comes after it (or the key group ends)
    links = np.where(hit & flag, nidx_c, links)
    first = int(np.searchsorted(cand, 2))
    if first >= len(cand) or cand[first] != 2:
        return None
    idx = _reachable(links, first)
    if idx is None:  # long chains of false candidates (runs of zero bytes): walk the links one by one
        nl = links.tolist()
        path = []
        append = path.append
        i = first
        while i >= 0:
            append(i)
            i = nl[i]
        idx = np.asarray(path, dtype=np.int64)
    last = idx[-1]
    if nxt[last] != n or not flag[last]:
        return None  # the walk stopped early (a key of 64 KiB or more?): use the plain loop
    ks = cand[idx] + 4 + start
    fl = np.flatnonzero(flag[idx])
    after = nxt[idx[fl]] - 2 + start  # the state id written after each flagged entry
    sid_after = (b[after].astype(np.int64) << 8) | b[after + 1]
    if sid_after[-1] != END_OF_KEY_GROUP:
        return None
    switches = [(int(k) + 1, int(v)) for k, v in zip(fl[:-1], sid_after[:-1])]
    return ks, switches


_MAX_PRUNING_ROUNDS = 64


def _reachable(links, first: int):
    """Candidates reachable from ``first`` along ``links`` (-1: none), ascending; None if too costly.

    Links only point forward. A candidate nothing links to cannot be reached
    unless it is ``first``: drop it, which may leave its target with nothing
    linking to it, and so on. What survives is exactly the chain from ``first``:
    each survivor has a surviving predecessor, and following predecessors back
    (always to smaller positions) can only end at ``first``. False candidates
    form short chains, so this takes a few vectorised rounds; past
    :data:`_MAX_PRUNING_ROUNDS` the caller walks the links one by one instead.
    """
    n = len(links)
    has = links >= 0
    indeg = np.bincount(links[has], minlength=n)
    alive = np.ones(n, dtype=bool)
    drop = np.flatnonzero(indeg == 0)
    drop = drop[drop != first]
    for _ in range(_MAX_PRUNING_ROUNDS):
        if not len(drop):
            idx = np.flatnonzero(alive)
            if len(idx) > 1 and not (links[idx[:-1]] == idx[1:]).all():
                return None  # cannot happen for forward links; never return a broken chain
            return idx
        alive[drop] = False
        t = links[drop]
        t = t[t >= 0]
        np.subtract.at(indeg, t, 1)
        t = np.unique(t)
        drop = t[(indeg[t] == 0) & alive[t] & (t != first)]
    return None


def scan(data: bytes, spans: list[tuple[int, int, int]], compressed: bool, prefix: int = 1):
    """Byte ranges of every entry in the given key groups, for column-wise decoding.

    Returns ``(buffer, state_ids, key_starts, key_ends, value_starts, value_ends)``;
    positions index ``buffer`` (the file itself, or the decompressed key groups
    joined). The "more follows" bit stays set in the buffer; decoders mask it.
    Each key group is walked with :func:`_scan_span_vectorised`, else entry by entry.
    """
    if compressed:
        parts = [unframe(data, s, e) for _, s, e in spans]
        joined = b"".join(parts)
        ranges, off = [], 0
        for (kg, _, _), part in zip(spans, parts):
            ranges.append((kg, off, off + len(part)))
            off += len(part)
    else:
        joined = data
        ranges = list(spans)
    b = np.frombuffer(joined, dtype=np.uint8)
    chunks: list[np.ndarray] = []
    kss = array("q")
    switches: list[tuple[int, int]] = []  # (entry index, state id from there on)
    count = 0
    unpack = _INT.unpack_from
    d = joined
    for kg, p, stop in ranges:
        if p >= stop:
            continue
        fast = _scan_span_vectorised(b, p, stop, prefix, kg)
        if fast is not None:
            ks, sw = fast
            switches.append((count, (d[p] << 8) | d[p + 1]))
            switches.extend((count + i, v) for i, v in sw)
            chunks.append(ks)
            count += len(ks)
            continue
        kss = array("q")
        a_ks = kss.append
        switches.append((count, (d[p] << 8) | d[p + 1]))
        p += 2
        while p < stop:
            # every length checked against the key group's end before it is used: a negative or huge
            # one fails here, not as a walk backwards (a loop) or into the next key group
            at, k0 = p, p + 4
            kl = unpack(d, p)[0] if k0 <= stop else -1
            if kl < 1 or k0 + kl + 4 > stop:
                raise _entry_past_end(kg, at, stop, "key", kl)
            p = k0 + kl
            vl = unpack(d, p)[0]
            if vl < 0 or p + 4 + vl > stop:
                raise _entry_past_end(kg, at, stop, "value", vl)
            p += 4 + vl
            a_ks(k0)
            if d[k0] & 0x80:
                if p + 2 > stop:
                    raise _entry_past_end(kg, at, stop, "next state id", 2)
                state = (d[p] << 8) | d[p + 1]
                p += 2
                if state == END_OF_KEY_GROUP:
                    break
                switches.append((count + len(kss), state))
        chunks.append(np.frombuffer(kss, dtype=np.int64) if len(kss) else np.zeros(0, dtype=np.int64))
        count += len(kss)
    ks = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int64)
    ke = ks + _be32(b, ks - 4) if len(ks) else ks
    vs = ke + 4
    ve = vs + _be32(b, ke) if len(ks) else ks
    sids = np.zeros(len(ks), dtype=np.int64)
    if switches and len(ks):
        idx = np.array([i for i, _ in switches], dtype=np.int64)
        val = np.array([v for _, v in switches], dtype=np.int64)
        marks = np.zeros(len(ks) + 1, dtype=np.int64)
        # a state id holds from its switch to the next: deltas at switch points, then a running sum
        np.add.at(marks, idx, np.diff(np.concatenate([[0], val])))
        sids = np.cumsum(marks)[: len(ks)]
    return joined, sids, ks, ke, vs, ve

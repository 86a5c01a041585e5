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
from typing import Iterator

from .compression import unframe

_INT = struct.Struct(">i")
_SHORT = struct.Struct(">H")
END_OF_KEY_GROUP = 0xFFFF


def key_group_spans(offsets: list[int], start_kg: int, header_end: int, total: int) -> list[tuple[int, int, int]]:
    """(key group, start, end) for every key group with bytes, in file order."""
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
        n = unpack_int(data, p)[0]
        p += 4
        key = data[p : p + n]
        p += n
        n = unpack_int(data, p)[0]
        p += 4
        value = data[p : p + n]
        p += n
        if p > stop:
            raise ValueError(f"key group {kg}: an entry runs past the end of the key group")
        if key and key[0] & 0x80:
            key = bytes([key[0] & 0x7F]) + key[1:]
            yield state, key, value
            nxt = _SHORT.unpack_from(data, p)[0]
            p += 2
            if nxt == END_OF_KEY_GROUP:
                return
            state = nxt
        else:
            yield state, key, value


def scan(data: bytes, spans: list[tuple[int, int, int]], compressed: bool):
    """Byte ranges of every entry in the given key groups, for column-wise decoding.

    Returns ``(buffer, state_ids, key_starts, key_ends, value_starts, value_ends)``;
    positions index ``buffer`` (the file itself, or the decompressed key groups
    joined). The "more follows" bit stays set in the buffer; decoders mask it.
    """
    from array import array

    import numpy as np

    if compressed:
        parts = [unframe(data, s, e) for _, s, e in spans]
        joined = b"".join(parts)
        ranges, off = [], 0
        for part in parts:
            ranges.append((off, off + len(part)))
            off += len(part)
    else:
        joined = data
        ranges = [(s, e) for _, s, e in spans]
    sids, kss, kes, vss, ves = array("q"), array("q"), array("q"), array("q"), array("q")
    a_sid, a_ks, a_ke, a_vs, a_ve = sids.append, kss.append, kes.append, vss.append, ves.append
    unpack = _INT.unpack_from
    d = joined
    for p, stop in ranges:
        if p >= stop:
            continue
        state = (d[p] << 8) | d[p + 1]
        p += 2
        while p < stop:
            k0 = p + 4
            p = k0 + unpack(d, p)[0]
            ke = p
            v0 = p + 4
            p = v0 + unpack(d, p)[0]
            a_sid(state)
            a_ks(k0)
            a_ke(ke)
            a_vs(v0)
            a_ve(p)
            if d[k0] & 0x80:
                state = (d[p] << 8) | d[p + 1]
                p += 2
                if state == END_OF_KEY_GROUP:
                    break
        if p > stop:
            raise ValueError(f"an entry runs past the end of its key group (offset {p}, end {stop})")
    as_np = lambda a: np.frombuffer(a, dtype=np.int64) if len(a) else np.zeros(0, dtype=np.int64)  # noqa: E731
    return joined, as_np(sids), as_np(kss), as_np(kes), as_np(vss), as_np(ves)

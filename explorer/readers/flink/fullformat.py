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

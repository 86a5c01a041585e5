"""numba kernels of :mod:`.columnar`: Flink ``StringValue`` strings and Kryo strings into Arrow buffers.

Imported lazily (inside functions): ``import explorer`` does not pay for numba.
The kernels take and return NumPy arrays only, release the GIL (the reader's
threads run them side by side) and never read outside the buffer they are
given: a string that would run past it is left to the caller's row-by-row
decoder, which raises the reader's error.

``StringValue`` (Flink's ``StringSerializer``): a variable-length int (7-bit
groups, low group first) holding the number of UTF-16 code units plus one (0:
null), then each unit as a variable-length int (one byte for ASCII). Each string's Java
``String.hashCode`` is computed while it is copied, by the kernels of :mod:`explorer.keygroups`
(inlined here).
"""

from __future__ import annotations

import numba
import numpy as np

from ... import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error
from ...format.sst.kernels import varint
from ...keygroups.kernels import POW31, java_hash_of_units, java_hash_step

_U = np.uint64
_jit = numba.njit(cache=True, nogil=True)

NULL = 1  # flags: a null string
REDO = 2  # flags: left to the caller (running past the buffer, a lone surrogate, a unit over 16 bits)


@_jit
def _fill_strings(buf, pos, i, data, o, offsets, ends, hashes, flags, pow31):
    """Strings ``i, i + 1, ...`` into ``data`` from ``o`` on, until one might not fit; returns the next row,
    the next free byte of ``data`` and the room that row needs (0 when all rows are done)."""
    n = len(pos)
    nb = len(buf)
    cap = len(data)
    while i < n:
        offsets[i] = o
        p = pos[i]
        ends[i] = p
        hashes[i] = 0
        flags[i] = 0
        if p < 0 or p >= nb:
            flags[i] = REDO
            i += 1
            continue
        count, q = varint(buf, p, nb, 5)
        if q < 0:
            flags[i] = REDO
            i += 1
            continue
        if count == 0:
            flags[i] = NULL
            ends[i] = q
            i += 1
            continue
        count -= 1
        if count > nb - q:  # every unit takes a byte at least
            flags[i] = REDO
            i += 1
            continue
        if o + 3 * count > cap:  # at most 3 UTF-8 bytes per UTF-16 unit
            return i, o, o + 3 * count
        if count < len(pow31):  # all ASCII, as usual: the bytes as they are
            acc = np.uint8(0)
            uq = _U(q)
            uo = _U(o)
            for j in range(_U(count)):
                c = buf[uq + j]
                acc |= c
                data[uo + j] = c
            if acc < 0x80:  # an ASCII byte is its UTF-16 unit
                hashes[i] = java_hash_of_units(data, o, count, pow31)
                o += count
                ends[i] = q + count
                i += 1
                continue
        # unit by unit (a unit of 0x80 or more takes 2 or 3 bytes)
        h = _U(0)
        k = np.int64(0)
        start = o
        while k < count:
            unit, q = varint(buf, q, nb, 3)
            if q < 0 or unit > 0xFFFF:
                break
            h = java_hash_step(h, unit)
            k += 1
            if unit < 0x80:
                data[_U(o)] = unit
                o += 1
            elif unit < 0x800:
                data[_U(o)] = 0xC0 | (unit >> 6)
                data[_U(o + 1)] = 0x80 | (unit & 0x3F)
                o += 2
            elif unit < 0xD800 or unit > 0xDFFF:
                data[_U(o)] = 0xE0 | (unit >> 12)
                data[_U(o + 1)] = 0x80 | ((unit >> 6) & 0x3F)
                data[_U(o + 2)] = 0x80 | (unit & 0x3F)
                o += 3
            else:  # a surrogate: a high one followed by a low one is one code point (4 bytes for 2 units)
                if unit > 0xDBFF or k >= count:
                    q = -1
                    break
                low, q = varint(buf, q, nb, 3)
                if q < 0 or low < 0xDC00 or low > 0xDFFF:
                    q = -1
                    break
                h = java_hash_step(h, low)
                k += 1
                cp = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                data[_U(o)] = 0xF0 | (cp >> 18)
                data[_U(o + 1)] = 0x80 | ((cp >> 12) & 0x3F)
                data[_U(o + 2)] = 0x80 | ((cp >> 6) & 0x3F)
                data[_U(o + 3)] = 0x80 | (cp & 0x3F)
                o += 4
        if q < 0 or k < count or unit > 0xFFFF:
            flags[i] = REDO
            o = start
        else:
            hashes[i] = np.uint32(h)
            ends[i] = q
        i += 1
    return i, o, np.int64(0)


@_jit
def flink_strings(buf, pos):
    """The ``StringValue`` at every position of ``buf``, as Arrow string buffers.

    Returns ``(data, offsets, ends, hashes, flags)``: the UTF-8 bytes of all
    strings, ``n + 1`` int64 offsets into them, the position after each string,
    its Java ``String.hashCode`` (uint32), and :data:`NULL` or :data:`REDO`
    flags (those rows hold an empty string here; the caller decodes the
    :data:`REDO` ones).
    """
    n = len(pos)
    data = np.empty(max(np.int64(64), 16 * n), dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    hashes = np.empty(n, dtype=np.uint32)
    flags = np.empty(n, dtype=np.uint8)
    i = np.int64(0)
    o = np.int64(0)
    while True:
        # the rows are filled by a function of their own: growing ``data`` in its loop made it ~2x slower
        i, o, need = _fill_strings(buf, pos, i, data, o, offsets, ends, hashes, flags, POW31)
        if need == 0:
            break
        grown = np.empty(max(2 * len(data), need), dtype=np.uint8)
        grown[:o] = data[:o]
        data = grown
    offsets[n] = o
    return data[:o], offsets, ends, hashes, flags


@_jit
def kryo_strings(buf, pos, lim):
    """The Kryo string at every position of ``buf`` (none read at or past its ``lim``), as Arrow string buffers.

    Kryo writes a string as an ASCII run whose last byte has bit 7 set, or (bit 7 of the first byte set) its
    length ``chars + 1`` in 6 + 7k bits (0: null, 1: empty) then each UTF-16 unit as 1 to 3 bytes. Returns
    ``(data, offsets, ends, flags)`` like :func:`flink_strings` (no hashes); :data:`REDO` for a string with a
    unit of 0x80 or more, one that runs past its limit, or a length over 5 bytes: the caller reads those.
    """
    n = len(pos)
    total = np.int64(0)
    for i in range(n):
        total += max(lim[i] - pos[i], 0)
    data = np.empty(max(np.int64(64), total), dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    flags = np.zeros(n, dtype=np.uint8)
    o = np.int64(0)
    for i in range(n):
        offsets[i] = o
        p = pos[i]
        e = min(lim[i], len(buf))
        ends[i] = p
        if p < 0 or p >= e:
            flags[i] = REDO
            continue
        b = buf[_U(p)]
        if b < 0x80:  # an ASCII run, its last byte marked
            q = p
            while q < e and buf[_U(q)] < 0x80:
                q += 1
            if q >= e:
                flags[i] = REDO
                continue
            for k in range(p, q):
                data[_U(o)] = buf[_U(k)]
                o += 1
            data[_U(o)] = buf[_U(q)] & 0x7F
            o += 1
            ends[i] = q + 1
            continue
        count = np.int64(b & 0x3F)
        q = p + 1
        ok = True
        if b & 0x40:
            shift = 6
            for _ in range(4):
                if q >= e:
                    ok = False
                    break
                c = np.int64(buf[_U(q)])
                q += 1
                count |= (c & 0x7F) << shift
                shift += 7
                if c < 0x80:
                    break
            else:
                if buf[_U(q - 1)] >= 0x80:
                    ok = False  # (more length bytes than the row path reads: it reports)
        if not ok:
            flags[i] = REDO
            continue
        if count == 0:
            flags[i] = NULL
            ends[i] = q
            continue
        count -= 1
        if count > e - q:
            flags[i] = REDO
            continue
        start = o
        for k in range(count):
            c = buf[_U(q + k)]
            if c >= 0x80:
                ok = False
                break
            data[_U(o)] = c
            o += 1
        if not ok:
            flags[i] = REDO
            o = start
            continue
        ends[i] = q + count
    offsets[n] = o
    return data[:o], offsets, ends, flags


def warm() -> None:
    """Load :func:`flink_strings` and :func:`kryo_strings` from numba's cache (compile it if it has none) for the buffers the
    reader passes: a read-only mapping of a heap savepoint's stream, and a writable buffer of joined
    RocksDB values (:mod:`explorer.kernels` calls it at install)."""
    ro = np.zeros(16, dtype=np.uint8)
    ro.flags.writeable = False
    pos = np.zeros(0, dtype=np.int64)
    flink_strings(ro, pos)
    flink_strings(np.zeros(16, dtype=np.uint8), pos)
    kryo_strings(ro, pos, pos)
    kryo_strings(np.zeros(16, dtype=np.uint8), pos, pos)

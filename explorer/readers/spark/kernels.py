"""numba kernel of :mod:`.hdfs`: the walk over a record stream of Spark's state store files.

Imported lazily (inside functions): ``import explorer`` does not pay for numba.
A stream is records of a big-endian ``int`` key size, the key, an ``int`` value
size (``-1``: the key was removed) and the value; a key size of ``-1`` ends it.
The walk only finds where each record's key and value are; it never reads past
the buffer: a record running past it stops the walk with an error code and
its offset, which the caller turns into an error naming the file.
"""

from __future__ import annotations

import numba
import numpy as np

from ... import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

OK = 0
CUT = 1  # the stream ends inside a record or without its end mark
BAD_SIZE = 2  # a negative key size other than the end mark, or a size past the end

_jit = numba.njit(cache=True, nogil=True)


@_jit
def _be32(buf, i):
    v = (np.int64(buf[i]) << 24) | (np.int64(buf[i + 1]) << 16) | (np.int64(buf[i + 2]) << 8) | np.int64(buf[i + 3])
    if v >= 2**31:
        v -= 2**32
    return v


@_jit
def count_records(buf, start):
    """(records before the end mark, error code, byte offset of the error or of the end mark's end)."""
    n = buf.shape[0]
    i = start
    count = 0
    while True:
        if i + 4 > n:
            return count, CUT, i
        ks = _be32(buf, i)
        i += 4
        if ks == -1:
            return count, OK, i
        if ks < 0 or i + ks + 4 > n:
            return count, BAD_SIZE, i - 4
        i += ks
        vs = _be32(buf, i)
        i += 4
        if vs >= 0:
            if i + vs > n:
                return count, BAD_SIZE, i - 4
            i += vs
        count += 1


@_jit
def fill_records(buf, start, koff, klen, voff, vlen):
    """Each record's key offset and size, value offset and size (-1: removed), in order."""
    i = start
    for r in range(koff.shape[0]):
        ks = _be32(buf, i)
        koff[r] = i + 4
        klen[r] = ks
        i += 4 + ks
        vs = _be32(buf, i)
        i += 4
        voff[r] = i
        vlen[r] = vs
        if vs > 0:
            i += vs


def warm() -> None:
    """Load this module's kernels from numba's cache (compile them if it has none) for the read-only
    buffer of a decompressed delta or snapshot file the reader passes (:mod:`explorer.kernels`)."""
    buf = np.zeros(16, dtype=np.uint8)
    buf.flags.writeable = False
    i64 = np.zeros(0, dtype=np.int64)
    count_records(buf, 0)
    fill_records(buf, 0, i64, i64.copy(), i64.copy(), i64.copy())

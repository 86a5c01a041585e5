"""numba forms of Java's ``String.hashCode``, for the kernels that hash strings in bulk.

Imported lazily (inside functions): ``import explorer`` does not pay for numba (~0.3 s).
:func:`java_hash_of_units` and :func:`java_hash_step` are inlined into other kernels (the
Flink reader's string decoder hashes each string while it copies it); :func:`java_hashes`
hashes the pure-ASCII strings of an Arrow array (:func:`._vectorised.java_string_hashes`).

The hash of code units ``c[0..n-1]`` is ``sum(c[j] * 31**(n - 1 - j))`` mod ``2**32``. Up to
:data:`UNROLLED` units it is summed with a table of powers (:data:`POW31`), which leaves no
chain of multiplications from one unit to the next; longer strings go by Horner's rule.
"""

from __future__ import annotations

import numba
import numpy as np

from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error

_U = np.uint64
_MASK = np.uint64(0xFFFFFFFF)

#: the longest string :func:`java_hash_of_units` sums with :data:`POW31`
UNROLLED = 256
#: ``POW31[k] = 31**k mod 2**64``, ``k = 0..UNROLLED`` (the low 32 bits are what Java keeps)
POW31 = np.array([pow(31, k, 1 << 64) for k in range(UNROLLED + 1)], dtype=np.uint64)


@numba.njit(cache=True, nogil=True, inline="always")
def java_hash_step(h, unit):
    """Horner's step of ``String.hashCode``: the hash ``h`` (uint64, below ``2**32``) of a
    prefix extended by one UTF-16 code unit."""
    return (h * _U(31) + _U(unit)) & _MASK


@numba.njit(cache=True, nogil=True, inline="always")
def java_hash_of_units(units, start, count, pow31):
    """``String.hashCode`` (uint32) of the ``count`` code units ``units[start:start + count]``
    (UTF-16 units, or the bytes of an ASCII string). ``pow31`` is :data:`POW31` (passed in: a
    global array would be copied into every kernel that inlines this)."""
    s = _U(start)
    h = _U(0)
    if count < len(pow31):
        top = _U(count - 1)
        for j in range(_U(count)):
            h += _U(units[s + j]) * pow31[top - j]
    else:
        for j in range(_U(count)):
            h = java_hash_step(h, units[s + j])
    return np.uint32(h & _MASK)


@numba.njit(cache=True, nogil=True)
def java_hashes(off, data, out):
    """``out[i]``: Java's ``String.hashCode`` (uint32) of the pure-ASCII bytes
    ``data[off[i]:off[i + 1]]`` (one UTF-16 unit per byte). 1 when done, 0 when a byte is not
    ASCII (the caller takes the exact path), -1 for offsets outside ``data`` (nothing read)."""
    n = len(out)
    if len(off) != n + 1:
        return -1
    pow31 = POW31
    for i in range(n):
        s, e = off[i], off[i + 1]
        if s < 0 or e < s or e > len(data):
            return -1
        acc = np.uint8(0)
        for x in range(s, e):
            acc |= data[x]
        if acc >= 0x80:
            return 0
        out[i] = java_hash_of_units(data, s, e - s, pow31)
    return 1


def warm() -> None:
    """Load :func:`java_hashes` from numba's cache (compile it if it has none) for the int32 and int64
    offsets of Arrow string and large-string arrays, read-only as Arrow's buffers are (:mod:`explorer.kernels`)."""
    data = np.zeros(0, dtype=np.uint8)
    data.flags.writeable = False
    out = np.zeros(0, dtype=np.uint32)
    for dtype in (np.int32, np.int64):
        off = np.zeros(1, dtype=dtype)
        off.flags.writeable = False
        java_hashes(off, data, out)

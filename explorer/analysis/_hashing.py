"""Vectorised hashes of Arrow string columns, straight from their offset and data buffers.

A polynomial hash ``H(s) = sum(s[t] * B**(len(s) - 1 - t)) mod 2**64`` of every string
of a column costs three NumPy passes over the data buffer, whatever the string lengths,
through prefix sums (``B`` odd, hence invertible mod ``2**64``)::

    G[i] = sum(c[t] * B**-t for t < i)              (one cumulative sum over all bytes)
    H(data[a:b]) = (G[b] - G[a]) * B**(b - 1)

With ``B = 31`` over pure-ASCII strings the low 32 bits are Java's ``String.hashCode``
(one UTF-16 unit per byte, arithmetic mod ``2**32``). With a large odd ``B``, the length
a SplitMix64 finalizer and the 64-bit key hash :func:`string_hash64` (a numba pass over
the words of each string) :func:`explorer.analysis.diff` joins snapshots on (and then
checks: equal hashes are only candidates, see there).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_CHUNK = 1 << 18


def _inverse(b: int) -> int:
    return pow(b, -1, 1 << 64)


def _powers(base: int, n: int) -> np.ndarray:
    """``base**t mod 2**64`` for ``t = 0..n-1``."""
    out = np.empty(max(n, 1), dtype=np.uint64)
    out[0] = 1
    if n > 1:
        out[1:] = np.uint64(base)
        np.multiply.accumulate(out, out=out)
    return out[:n]


def string_buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets of the array's own strings, the data buffer as uint8) without copies."""
    off_type = np.int64 if pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_type)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _hash_chunks(arr: pa.Array | pa.ChunkedArray, max_width: int, hash_chunk) -> np.ndarray:
    """uint64 hashes of every string of ``arr``, a chunk of at most ``_CHUNK`` strings at a time.

    ``hash_chunk(body, rel, lengths, widths, out)`` fills ``out`` for one chunk: ``body`` is
    the chunk's bytes, ``rel`` its string offsets from 0, ``lengths`` their lengths and
    ``widths`` the count of strings per length, or None when a string is longer than
    ``max_width`` or there are more than ``_MAX_WIDTHS`` lengths.
    """
    if isinstance(arr, pa.ChunkedArray):
        parts = [_hash_chunks(c, max_width, hash_chunk) for c in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    n = len(arr)
    out = np.zeros(n, dtype=np.uint64)
    if n == 0:
        return out
    offsets, data = string_buffers(arr)
    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        off = offsets[lo: hi + 1].astype(np.int64)
        body = data[int(off[0]): int(off[-1])]
        rel = off - off[0]
        lengths = np.diff(rel)
        widths = np.bincount(lengths) if int(lengths.max()) <= max_width else None
        if widths is not None and np.count_nonzero(widths) > _MAX_WIDTHS:
            widths = None
        hash_chunk(body, rel, lengths, widths, out[lo:hi])
    return out


def polynomial_hashes(arr: pa.Array | pa.ChunkedArray, base: int) -> np.ndarray:
    """``sum(byte[t] * base**(len - 1 - t)) mod 2**64`` of every string (bytes) of ``arr`` (uint64).

    ``base`` must be odd. Nulls hash like empty strings (callers check nulls). Strings of
    one length (the usual keys: ids, zero-padded numbers) are a matrix view of the data
    buffer hashed column by column (Horner); a few distinct lengths are gathered into one
    matrix per length; anything else goes through the prefix sums of the module doc.
    """
    if base % 2 == 0:
        raise ValueError(f"the base must be odd (invertible mod 2**64), found {base}")

    def chunk(body, rel, lengths, widths, out):
        if widths is not None:
            _by_length(body, rel, lengths, widths, base, out)
        else:
            out[:] = _by_prefix_sums(body, rel, base)

    return _hash_chunks(arr, _MAX_WIDTH, chunk)


_MAX_WIDTH = 256
_MAX_WIDTHS = 48


def _horner(matrix: np.ndarray, base: int, dtype: type = np.uint64) -> np.ndarray:
    h = np.zeros(len(matrix), dtype=dtype)
    b = dtype(base)
    for j in range(matrix.shape[1]):
        h *= b
        h += matrix[:, j]
    return h


def _by_length(body: np.ndarray, rel: np.ndarray, lengths: np.ndarray, widths: np.ndarray, base: int,
               out: np.ndarray) -> None:
    present = np.flatnonzero(widths)
    if len(present) == 1:  # one length: the buffer is the matrix
        width = int(present[0])
        if width:
            out[:] = _horner(body.reshape(len(lengths), width), base)
        return
    starts = rel[:-1]
    for width in present:
        if width == 0:
            continue
        idx = np.flatnonzero(lengths == width)
        out[idx] = _horner(body[starts[idx, None] + np.arange(width)], base)


_POWERS: dict[tuple[int, int], np.ndarray] = {}


def _powers_cached(base: int, size: int) -> np.ndarray:
    key = (base, size)
    if key not in _POWERS:
        if len(_POWERS) > 4:
            _POWERS.clear()
        block = 1 << 12
        small = _powers(base, block)
        big = _powers(pow(base, block, 1 << 64), max(1, -(-size // block)))
        _POWERS[key] = np.multiply.outer(big, small).ravel()[:size]
    return _POWERS[key]


def _by_prefix_sums(body: np.ndarray, rel: np.ndarray, base: int) -> np.ndarray:
    m = len(body)
    size = 1 << max(int(m).bit_length(), 12)
    winv, wpow = _powers_cached(_inverse(base), size), _powers_cached(base, size)
    g = np.zeros(m + 1, dtype=np.uint64)
    np.multiply(body, winv[:m], out=g[1:], dtype=np.uint64)
    np.cumsum(g, out=g)
    ends = rel[1:]
    return (g[ends] - g[rel[:-1]]) * wpow[np.maximum(ends - 1, 0)]


def is_ascii(arr: pa.Array | pa.ChunkedArray) -> bool:
    """Whether every byte of the strings of ``arr`` is below 0x80."""
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    for c in chunks:
        if not len(c):
            continue
        offsets, data = string_buffers(c)
        body = data[int(offsets[0]): int(offsets[-1])]
        if body.size and int(body.max()) >= 0x80:
            return False
    return True


#: strings from which :func:`java_string_hashes` uses the numba kernel: below, NumPy's passes
#: cost less than loading numba in a process that has not yet (~0.3 s)
KERNEL_STRINGS = 1 << 20


def java_string_hashes(arr: pa.Array | pa.ChunkedArray) -> np.ndarray | None:
    """Java ``String.hashCode`` (as uint32) of pure-ASCII strings, or None if any is not ASCII.

    ``KERNEL_STRINGS`` strings or more: one numba pass (:func:`._diff_kernels.java_hashes`,
    10 M keys in ~0.05 s instead of ~0.45 s); fewer: NumPy (Horner over the buffer as a
    matrix for strings of one length, prefix sums otherwise).
    """
    if isinstance(arr, pa.Array) and len(arr) >= KERNEL_STRINGS:
        from . import _diff_kernels as kernels

        offsets, data = string_buffers(arr)
        out = np.empty(len(arr), dtype=np.uint32)
        ok = kernels.java_hashes(offsets, data, out)
        if ok < 0:
            raise ValueError(f"a {arr.type} array of {len(arr)} values whose offsets run outside its "
                             f"{len(data)}-byte data buffer (expected rising offsets within it)")
        return out if ok else None
    if not is_ascii(arr):
        return None
    if isinstance(arr, pa.Array) and len(arr):
        offsets, data = string_buffers(arr)
        lengths = np.diff(offsets)
        width = int(lengths[0])
        if (lengths == width).all():  # one length: Horner in uint32 over the buffer as a matrix
            body = data[int(offsets[0]): int(offsets[-1])]
            return _horner(body.reshape(len(arr), width), 31, np.uint32) if width else \
                np.zeros(len(arr), dtype=np.uint32)
    return (polynomial_hashes(arr, 31) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijection of uint64 that spreads every input bit (wrapping)."""
    z = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)  # a new array: the rest is in place
    for shift, mult in ((30, 0xBF58476D1CE4E5B9), (27, 0x94D049BB133111EB)):
        z ^= z >> np.uint64(shift)
        z *= np.uint64(mult)
    z ^= z >> np.uint64(31)
    return z


def string_hash64(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each string (or binary) value; nulls hash like empty strings.

    Each string is read as little-endian 8-byte words (the last word overlaps the one before
    it instead of being padded; strings under 8 bytes are one zero-padded word) mixed by a
    multiply and xor-shift each from a seed of the length, then finalized, in one numba pass
    over the offsets and data buffers (:func:`._diff_kernels.hash_strings`, imported on
    first use). The hash only has to spread keys: :func:`explorer.analysis.diff.diff`
    compares the keys of equal hashes before it matches them, so a collision costs time,
    never a wrong match.
    """
    from . import _diff_kernels as kernels

    if isinstance(arr, pa.ChunkedArray):
        parts = [string_hash64(c) for c in arr.chunks]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
    out = np.empty(len(arr), dtype=np.uint64)
    if not len(arr):
        return out
    offsets, data = string_buffers(arr)
    if not kernels.hash_strings(offsets, data, out):
        raise ValueError(f"a {arr.type} array of {len(arr)} values whose offsets run outside its "
                         f"{len(data)}-byte data buffer (expected rising offsets within it)")
    return out


def _lengths(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    parts = []
    for c in chunks:
        if len(c):
            offsets, _ = string_buffers(c)
            parts.append(np.diff(offsets).astype(np.uint64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

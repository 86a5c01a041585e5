"""The 64-bit key hashes :func:`explorer.analysis.diff.diff` joins snapshots on.

:func:`string_hash64` hashes each string (or binary) key in one numba pass over the
Arrow buffers (:func:`._diff_kernels.hash_strings`), :func:`splitmix64` each integer key.
The hashes only have to spread keys: the diff compares the keys of equal hashes before it
matches them, so a collision costs time, never a wrong match. (Java's ``String.hashCode``,
for key groups, is :mod:`explorer.keygroups`'.)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..keygroups import string_buffers


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
    first use).
    """
    from . import _diff_kernels as kernels  # numba: loaded by the first diff, not by import explorer

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

"""numba kernel of the streamed hot-key pass: a range's per-subtask loads in one pass over its keys.

:meth:`._common.KeyTable.subtask_loads` sums each measure with its own ``np.bincount`` (and a float64
copy of the measure for the weights): four passes and three copies of a range's millions of keys.
:func:`subtask_sums` reads each key once and adds its entries, bytes, 1 and records to its subtask's
sums, in row order and in float64, as ``np.bincount`` does: the same sums to the bit.

Imported lazily, like :mod:`._key_kernels`: ``import explorer`` does not pay for numba.
"""

from __future__ import annotations

import numba
import numpy as np

from .. import numba_cache  # noqa: F401 - a damaged numba cache file is a miss, not an error


@numba.njit(cache=True, nogil=True)
def subtask_sums(subtask, entries, nbytes, records, parallelism, out):
    """``out[0..3, s]``: entries, bytes, keys and records of the rows of subtask ``s`` (float64, summed in row
    order). False (``out`` unspecified) where a subtask lies outside ``0..parallelism-1``."""
    out[:] = 0.0
    for i in range(len(subtask)):
        s = subtask[i]
        if s < 0 or s >= parallelism:
            return False
        out[0, s] += np.float64(entries[i])
        out[1, s] += np.float64(nbytes[i])
        out[2, s] += 1.0
        out[3, s] += np.float64(records[i])
    return True


def warm() -> None:
    """Compile (or load from numba's cache) the signatures the hot-key pass passes :func:`subtask_sums`
    (:func:`explorer.kernels.warm`, at install): int64 columns of a :class:`._common.KeyTable`."""
    m = np.zeros(1, dtype=np.int64)
    subtask_sums(m, m, m, m, 1, np.empty((4, 1), dtype=np.float64))

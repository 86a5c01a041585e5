"""numba's on-disk kernel cache, made to fail safe: a damaged cache file is a cache miss, not an error.

Every kernel module imports this before it defines its kernels. numba reads a kernel's cache index
(``*.nbi``) and code (``*.nbc``) with ``pickle``; a truncated or otherwise unreadable file (a full
disk, a copy cut short) raised from inside the first call of the kernel, which the readers then
reported as a damaged *snapshot*. Here such a file counts as absent: numba compiles the kernel
and writes a new index over the damaged one. Stale caches (an edited kernel, another numba,
Python or CPU) numba already handles itself (:mod:`explorer.kernels`).

:func:`cached` tells, without compiling, whether a kernel would run at once on given arguments: a
caller with a NumPy form of the kernel runs that instead of compiling (issue 31's first open).
"""

from __future__ import annotations

import warnings

from typing import Any

from numba.core import caching

_IndexFile = caching.IndexDataCacheFile


def _safe_load_index(self):  # type: ignore[no-untyped-def]
    try:
        return _original_load_index(self)
    except Exception as exc:  # noqa: BLE001 - any unreadable index is a miss
        warnings.warn(f"numba's kernel cache index {self._index_path} is unreadable ({type(exc).__name__}: "
                      f"{exc}); compiling the kernel again and rewriting it", RuntimeWarning, stacklevel=2)
        return {}


def _safe_load(self, key):  # type: ignore[no-untyped-def]
    try:
        return _original_load(self, key)
    except Exception as exc:  # noqa: BLE001 - any unreadable code file is a miss
        warnings.warn(f"numba's kernel cache in {self._cache_path} has an unreadable entry ({type(exc).__name__}: "
                      f"{exc}); compiling the kernel again", RuntimeWarning, stacklevel=2)
        return None


_original_load_index = getattr(_IndexFile, "_explorer_original_load_index", _IndexFile._load_index)
_original_load = getattr(_IndexFile, "_explorer_original_load", _IndexFile.load)
_IndexFile._explorer_original_load_index = _original_load_index
_IndexFile._explorer_original_load = _original_load
_IndexFile._load_index = _safe_load_index
_IndexFile.load = _safe_load


def cached(dispatcher: Any, args: tuple) -> bool:
    """Whether ``dispatcher`` (a ``cache=True`` numba kernel) runs on ``args`` without compiling: this process
    has compiled or loaded it for their types already, or numba's cache index for it (one small file) lists
    them for this kernel's code and this CPU, as numba's own lookup would. Costs the arguments' typing and
    that file's read; an unreadable or stale index is not a hit."""
    sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    if sig in dispatcher.overloads:
        return True
    cache = dispatcher._cache
    if not isinstance(cache, caching.Cache):
        return False
    key = cache._index_key(sig, dispatcher.targetctx.codegen())
    return key in cache._cache_file._load_index()

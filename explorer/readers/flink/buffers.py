"""What the column-wise decoders of the Flink reader share: a byte buffer viewed as NumPy (:class:`Buf`),
the signal that a state must be decoded row by row (:class:`Fallback`), and Flink ``StringValue`` strings of
many entries at once (:func:`strings`, with the process's budget of strings decoded in Python before the numba
kernel is first used, :data:`PYTHON_STRINGS`). Used by :mod:`.columnar` (keys, simple values),
:mod:`.valuecolumns` and :mod:`.kryocolumns` (composite and Kryo values).
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...keygroups import java_hash_code
from .datainput import DataInput

#: strings a process decodes one by one in Python before it first uses the numba kernel of
#: :func:`strings`: ~0.25 CPU-s at most (~4 us a string), less than importing numba and loading the
#: kernel from its cache (~0.5 CPU-s) and far less than compiling it (4-5 CPU-s where ``make venv``'s
#: warm-up has not run, ``docs/performance.md``); a small snapshot is then read without numba at all
PYTHON_STRINGS = 1 << 16
_python_strings = [PYTHON_STRINGS]  # left of the budget; 0 once the kernel is used
_python_lock = threading.Lock()


def python_first(n: int) -> bool:
    """Whether ``n`` strings are decoded in Python (taken from the process's budget) rather than by the kernel."""
    with _python_lock:
        if n <= _python_strings[0]:
            _python_strings[0] -= n
            return True
        _python_strings[0] = 0
        return False


class Fallback(Exception):
    """This state cannot be decoded column-wise; decode it row by row."""


class Buf:
    """A byte buffer viewed as NumPy."""

    def __init__(self, data: bytes | np.ndarray) -> None:
        """``data``: bytes, or a uint8 NumPy array (used in place; ``data`` is then a memoryview of it)."""
        if isinstance(data, np.ndarray):
            self.np = data.view(np.uint8).reshape(-1)
            self.data = memoryview(self.np)
        else:
            self.data = data
            self.np = np.frombuffer(data, dtype=np.uint8)
        self._windows: dict[int | str, np.ndarray] = {}

    def windows(self, width: int) -> np.ndarray:
        """A zero-copy view of ``width``-byte rows, one starting at every byte: row ``i`` is ``buf[i : i + width]``.

        A 1-D array of ``width``-byte void items (fancy indexing copies each row
        with one memcpy; a 2-D ``(len, width)`` strided view is several times slower).
        """
        w = self._windows.get(width)
        if w is None:
            n = max(len(self.np) - width + 1, 0)
            w = np.ndarray((n,), dtype=np.dtype((np.void, width)), buffer=self.np, strides=(1,))
            self._windows[width] = w
        return w

    def numbers(self, dtype: str) -> np.ndarray:
        """A zero-copy view of ``dtype`` numbers (such as ``>i8``), one starting at every byte."""
        w = self._windows.get(dtype)
        if w is None:
            size = np.dtype(dtype).itemsize
            w = np.ndarray((max(len(self.np) - size + 1, 0),), dtype=dtype, buffer=self.np, strides=(1,))
            self._windows[dtype] = w
        return w


def strings(buf: Buf, pos: np.ndarray, want_codes: bool = False) -> tuple[pa.Array, np.ndarray | None, np.ndarray]:
    """``StringValue`` strings at every position: ``(values, Java hash codes if wanted, ends)``, decoded into
    Arrow buffers by a numba kernel (``_column_kernels``), the rare rows it leaves (a lone surrogate, bytes past
    the buffer) one by one; a process's first :data:`PYTHON_STRINGS` all one by one, without numba."""
    n = len(pos)
    if python_first(n):
        return _strings_py(buf, pos, want_codes)
    from . import _column_kernels as kernels

    data, offsets, ends, codes, flags = kernels.flink_strings(buf.np, np.ascontiguousarray(pos, dtype=np.int64))
    big = len(data) >= (1 << 31)
    offs = pa.py_buffer(offsets if big else offsets.astype(np.int32))
    null = flags == kernels.NULL
    nulls = int(np.count_nonzero(null))
    bitmap = pa.py_buffer(np.packbits(~null, bitorder="little")) if nulls else None
    values = (pa.LargeStringArray if big else pa.StringArray).from_buffers(n, offs, pa.py_buffer(data), bitmap, nulls)
    if big:
        values = values.cast(pa.string())
    redo = flags == kernels.REDO
    idx = np.flatnonzero(redo)
    if len(idx):
        repl = []
        for i in idx.tolist():
            inp = DataInput(buf.data, int(pos[i]))
            s = inp.read_flink_string()
            ends[i] = inp.pos
            repl.append(s)
            codes[i] = (java_hash_code(s) & 0xFFFFFFFF) if s is not None else 0
        values = pc.replace_with_mask(values, pa.array(redo), pa.array(repl, type=pa.string()))
    return values, (codes if want_codes else None), ends


def _strings_py(buf: Buf, pos: np.ndarray, want_codes: bool) -> tuple[pa.Array, np.ndarray | None, np.ndarray]:
    """:func:`strings` one string at a time, as the kernel's left-over rows are: no numba (see ``PYTHON_STRINGS``)."""
    n = len(pos)
    ends = np.empty(n, dtype=np.int64)
    codes = np.zeros(n, dtype=np.uint32)
    out = []
    for i, p in enumerate(pos.tolist()):
        inp = DataInput(buf.data, int(p))
        s = inp.read_flink_string()
        ends[i] = inp.pos
        out.append(s)
        if s is not None:
            codes[i] = java_hash_code(s) & 0xFFFFFFFF
    return pa.array(out, type=pa.string()), (codes if want_codes else None), ends

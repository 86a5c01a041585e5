"""Sizes in bytes as users write them: the one parser of ``memory_budget=`` and the cache bound.

``parse_size("2GB")``, ``"500 MiB"``, ``"512m"``, ``"1.5 GB"``, ``123`` or ``"123"``. Units, case-insensitive:
``B``; ``K``, ``KB``, ``KiB``; ``M``, ``MB``, ``MiB``; ``G``, ``GB``, ``GiB``; ``T``, ``TB``, ``TiB``.

**GB means GiB** (2\\ :sup:`30` bytes), as it does in the memory settings of the systems whose state
this explorer reads: Flink's ``MemorySize`` (``taskmanager.memory.process.size: 2gb``), Spark's
``spark.driver.memory=2g`` and the JVM's ``-Xmx2g`` all count in powers of 1024, and a memory
budget is compared with what the operating system reports, in the same units. ``KB``, ``MB`` and
``TB`` likewise mean 2\\ :sup:`10`, 2\\ :sup:`20` and 2\\ :sup:`40`; the ``KiB``/``MiB``/``GiB``/``TiB``
spellings are accepted and mean the same. A fraction is rounded down to whole bytes.
"""

from __future__ import annotations

import numbers
import re

__all__ = ["UNITS", "format_size", "parse_size"]

#: bytes per unit (lower case, without spaces); every unit is a power of 1024 (see the module doc)
UNITS: dict[str, int] = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    for _spelling in (_p, f"{_p}b", f"{_p}ib"):
        UNITS[_spelling] = 1 << (10 * _i)

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-zA-Z]*)\s*")


def parse_size(text: int | str, what: str = "size", error: type[Exception] = ValueError) -> int:
    """Bytes (a positive whole number) from ``text`` (see the module doc); ``error(message)`` names ``what`` and
    the text when it is not a size."""
    if isinstance(text, bool):
        raise error(f"{what}={text!r}: expected a number of bytes or a size such as '2GB' or '500MiB', found a bool")
    if isinstance(text, numbers.Integral):  # int, NumPy's integers
        value = int(text)
    else:
        m = _SIZE.fullmatch(str(text))
        if not m or m.group(2).lower() not in UNITS:
            raise error(f"{what}={text!r}: expected a number of bytes or a size such as '2GB' or '500MiB' "
                        "(B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB; GB means GiB, 2**30 bytes)")
        value = int(float(m.group(1)) * UNITS[m.group(2).lower()])
    if value <= 0:
        raise error(f"{what}={text!r}: expected a positive number of bytes")
    return value


def format_size(n: float) -> str:
    """Bytes as people read them, in the units :func:`parse_size` takes: ``"1.0 KB"``, ``"512 B"``, ``"2.0 GB"``
    (never ``"0 MB"`` for a small size)."""
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TB"

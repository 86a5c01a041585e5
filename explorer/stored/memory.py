"""How much memory a snapshot's reads may hold: what is available, the default budget, ``memory_budget=``.

A :class:`~explorer.stored.snapshot.StoredSnapshot` refuses a ``keyed_state()`` whose DataFrame would
exceed its budget, and the analyses stream over key-group ranges past it
(:mod:`explorer.analysis._ranges`); the per-row costs they estimate with are measured here.
"""

from __future__ import annotations

from ..format.budget import available_memory, default_memory_budget
from ..storage.sizes import parse_size

__all__ = ["ANALYSIS_BYTES_PER_ROW", "FRAME_BYTES_PER_ROW", "MB", "available_memory", "default_memory_budget",
           "parse_memory_budget"]

#: what one row of keyed state costs in memory as the contract DataFrame of :meth:`StoredSnapshot.keyed_state`
#: (measured: 10 M keys of ``bench_explorer`` peaked at 4.4 GB, about 440 bytes per row, Python keys included)
FRAME_BYTES_PER_ROW = 440
#: what one row costs while an analysis holds it (the analysis columns, keys as codes, the Arrow pieces they
#: came from and the per-key sums; :mod:`explorer.analysis._ranges`). Measured with ``bench_scale``'s
#: children on 2.4 M rows: budgets of 256 MB and 512 MB peaked 365 MB and 570-600 MB above the ~130 MB of
#: Python and its imports (hot keys, key-group distribution, diff)
ANALYSIS_BYTES_PER_ROW = 320
#: one mebibyte
MB = 1 << 20


def parse_memory_budget(budget: int | str | None) -> int:
    """``memory_budget=`` as bytes: an int, a string such as ``"2GB"``/``"512MB"`` (GB means GiB, as in Flink's and
    Spark's memory settings: :mod:`explorer.storage.sizes`), or None (the default)."""
    if budget is None:
        return default_memory_budget()
    return parse_size(budget, what="memory_budget", error=ValueError)


"""The analyses' cache on a snapshot: what they loaded and built, kept between calls."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pandas as pd

__all__ = ["AnalysisCache"]


class AnalysisCache:
    """What the analyses keep on a :class:`Snapshot` between calls (a snapshot on disk does not change).

    Filled by :mod:`explorer.analysis` (its ``_columns`` module), emptied by
    :meth:`StoredSnapshot.drop_analysis_cache`:

    * ``frame``: the analysis frame, the columns most analyses need with keys as integer
      codes (None until the first analysis loads it);
    * ``pieces``: ``(operator, state, first row, end row)`` of each reader piece in ``frame``;
    * ``row_hashes``: a uint64 hash of each row's ``(namespace, user_key, value)`` (for a
      diff), or None until computed;
    * ``derived``: what analyses built from ``frame``, by key (:meth:`memo`). A key is a tuple
      ``(what, rows, *parameters)``: ``what`` names the result (``"per_key"``,
      ``"kg_aggregates"``, ``"key_stats"``), ``rows`` the operators and states it was built
      from (``filter_key`` of ``explorer.analysis._columns``), the rest whatever else it
      depends on (an operator's layout, a max parallelism); ``("heavy_hitters",)`` is the
      reader's traffic sketch, read once.
    """

    def __init__(self) -> None:
        self.frame: pd.DataFrame | None = None
        self.pieces: list[tuple[str, str, int, int]] = []
        self.row_hashes: np.ndarray | None = None
        self.derived: dict[tuple, Any] = {}

    @property
    def loaded(self) -> bool:
        """Whether the analysis frame is loaded."""
        return self.frame is not None

    def memo(self, key: tuple, build: Callable[[], Any]) -> Any:
        """``build()`` once per ``key`` (see the class doc for the key scheme)."""
        if key not in self.derived:
            self.derived[key] = build()
        return self.derived[key]

    def clear(self) -> None:
        """Forget everything: the next analysis loads the frame again."""
        self.frame, self.pieces, self.row_hashes = None, [], None
        self.derived.clear()

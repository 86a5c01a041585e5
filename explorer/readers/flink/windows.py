"""Session windows in a Flink snapshot: each window state's namespace given the bounds of the merged
window it stands for, the part of :class:`~.reader.FlinkSnapshotReader` for operators of merging windows.

Flink's ``WindowOperator`` keeps the state of a merging window (a session) under its *state window*, the
window of the first element that opened the session, and keeps per key, in the state
:data:`MERGING_WINDOW_SET`, a list of (merged window, state window). A ``TimeWindow`` namespace
(``start``, ``end``) of such an operator's states also gets ``window_start`` and ``window_end``.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..base import KeyedStateQuery, piece_value, python_values
from .metadata import OperatorState, SubtaskState
from .notes import Notes
from .rows import dict_key

#: the state in which WindowOperator keeps, per key, the merged windows and their state windows
MERGING_WINDOW_SET = "merging-window-set"


class MergedWindows(Notes):
    """Merged-window bounds on window namespaces (see module doc); a part of ``FlinkSnapshotReader``."""

    def _with_merged_windows(self, op: OperatorState, st: SubtaskState, query: KeyedStateQuery) -> Iterator[pa.Table]:
        """The subtask's pieces; in an operator of merging windows (session windows), each state's
        ``TimeWindow`` namespace, which is Flink's *state window* (the window of the first element that
        opened the session, kept as the namespace while windows merge), also gets ``window_start`` and
        ``window_end``: the bounds of the merged window it stands for, from the operator's
        ``merging-window-set`` state (a list of (window, state window) per key)."""
        pieces = self._pyflink_pieces(op, st, query)
        names = {sm.name for sm in self._header(op, st).states}
        if MERGING_WINDOW_SET not in names:
            yield from pieces
            return
        merged: dict | None = None
        for p in pieces:
            state, kind = piece_value(p, "state"), piece_value(p, "kind")
            if p.num_rows and {"namespace", "key"} <= set(p.column_names) and state is not None and kind is not None \
                    and _is_time_window(p.schema.field("namespace").type) \
                    and state != MERGING_WINDOW_SET and not kind.endswith("_timer"):
                if merged is None:
                    merged = self._merged_windows(op, st, query)
                p = _add_merged_bounds(p, merged)
            yield p

    def _merged_windows(self, op: OperatorState, st: SubtaskState, query: KeyedStateQuery) -> dict:
        """``(key, state window start, end) -> (window start, end)`` from one subtask's merging-window-set."""
        sub = KeyedStateQuery(frozenset([op.display_name]), frozenset([MERGING_WINDOW_SET]), query.key_groups,
                              None, ("key", "value"))
        out = {}
        for p in self._subtask_pieces(op, st, sub):
            for k, v in zip(python_values(p.column("key")), python_values(p.column("value"))):
                try:
                    window, state_window = v["f0"], v["f1"]
                    out[(dict_key(k), state_window["start"], state_window["end"])] = (window["start"], window["end"])
                except (TypeError, KeyError):  # not a Tuple2 of TimeWindows: nothing to map
                    continue
        return out


def _is_time_window(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == ["start", "end"]


def _add_merged_bounds(piece: pa.Table, merged: dict) -> pa.Table:
    ns = piece.column("namespace").combine_chunks()
    starts, ends = ns.field(0).to_pylist(), ns.field(1).to_pylist()
    bounds = [merged.get((dict_key(k), s, e), (None, None)) if s is not None else (None, None)
              for k, s, e in zip(python_values(piece.column("key")), starts, ends)]
    valid = ns.is_valid()
    out = pa.StructArray.from_arrays(
        [ns.field(0), ns.field(1), pa.array([b[0] for b in bounds], type=pa.int64()),
         pa.array([b[1] for b in bounds], type=pa.int64())],
        names=["start", "end", "window_start", "window_end"], mask=pc.invert(valid) if ns.null_count else None)
    return piece.set_column(piece.column_names.index("namespace"), "namespace", out)

"""PyFlink's Python states as the job declared them, the part of :class:`~.reader.FlinkSnapshotReader`
for snapshots of PyFlink jobs.

PyFlink keeps every Python value, list, reducing and aggregating state as a Java list state of pickled
records (``pickles``), named ``python-state-*`` (``statemeta``), and keys the Java side by a Row holding
the user's key. Here such a state is shown under the name the job gave it, one row per record
(``user_key`` its index in the key's list), or as its one record where it was declared a value,
reducing or aggregating state (``pyflink_kinds=``), and the key as the user's key.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from ..base import KeyedStateQuery, piece_value, python_values
from .metadata import OperatorState, SubtaskState
from .notes import Notes
from .rows import dict_key, to_arrow
from .statemeta import StateMeta


class PyFlinkStates(Notes):
    """PyFlink's list-kept states as declared (see module doc); a part of ``FlinkSnapshotReader``."""

    def _pyflink_pieces(self, op: OperatorState, st: SubtaskState, query: KeyedStateQuery) -> Iterator[pa.Table]:
        """The subtask's pieces, PyFlink's Python list-kept states as the job declared them: one row per record
        (an array of the Flink list holds the records appended in one go), ``user_key`` its index in the key's
        list; a state declared as a value (reducing, aggregating) is its one record, without a user key."""
        header = self._header(op, st)
        if not any(sm.shown_name is not None for sm in header.states):
            yield from self._subtask_pieces(op, st, query)
            return
        bags = {sm.display_name: sm for sm in header.states if sm.is_pyflink_bag and query.wants_state(sm.display_name)}
        # every column is read (the records are in the values), whatever was asked for: the rows are the same
        whole = KeyedStateQuery(query.operators, query.states, query.key_groups, query.keys,
                                None if bags else query.columns)
        for p in self._subtask_pieces(op, st, whole):
            if "key" in p.column_names and _one_field_row(p.schema.field("key").type):
                # PyFlink keys the Java side by a Row holding the user's key: the user's key
                p = p.set_column(p.column_names.index("key"), "key", p.column("key").combine_chunks().field(0))
            meta = bags.get(piece_value(p, "state")) if p.num_rows else None
            if meta is not None:
                p = self._records(op, meta, p)
            yield p.select(list(query.columns)) if query.columns is not None else p

    def _records(self, op: OperatorState, meta: StateMeta, piece: pa.Table) -> pa.Table:
        rows, uks, values, sizes = [], [], [], []
        seen: dict = {}
        size = piece.column("size_bytes").to_pylist()
        keys = python_values(piece.column("key"))
        for i, v in enumerate(python_values(piece.column("value"))):
            recs = v if isinstance(v, list) else [v]  # raw bytes (a refused pickle) stay one row
            k = dict_key(keys[i])
            for j, r in enumerate(recs):
                rows.append(i)
                uks.append(seen.get(k, 0))
                seen[k] = uks[-1] + 1
                values.append(r)
                sizes.append(size[i] // len(recs) + (size[i] % len(recs) if j == 0 else 0))
        single = meta.shown_kind in ("value", "reducing", "aggregating")
        if single:
            many = sum(1 for n in seen.values() if n > 1)
            if many:
                self._note(f"{self.metadata_file} (operator {op.display_name!r}): state {meta.display_name!r} was "
                           f"declared as a {meta.shown_kind} state but {many} keys hold more than one record; each "
                           "record is its own row")
            else:
                uks = [None] * len(uks)
        out = piece.take(pa.array(rows, type=pa.int64()))
        for name, col in (("user_key", pa.array(uks, type=pa.int64())),
                          ("value", to_arrow(values, note=self._column_note(op, meta, "values"))),
                          ("size_bytes", pa.array(sizes, type=pa.int64()))):
            out = out.set_column(out.column_names.index(name), name, col)
        return out


def _one_field_row(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and t.num_fields == 1 and t.field(0).name == "f0"

"""``keyed_state(key=k)`` on a Spark checkpoint: the part of :class:`~.reader.SparkCheckpointReader` that
finds a key's partition and matches keys.

Spark placed each key by Murmur3 of its grouping columns mod the shuffle partitions
(:func:`explorer.keygroups.spark.partition_ids`); the key's types come from the store's key schema
(the schema file without a JVM, Spark's frame otherwise), so only the keys' partitions are read. A key
that does not fit the key columns pushes nothing down: every partition is read and the filter decides.
A key of several columns is matched with a tuple (or dict) of its fields, in order (``keys.key_leaves``).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from ...errors import ReaderError
from ...keygroups.spark import partition_ids
from ..base import KeyedStateQuery
from . import layout
from .hdfs import read_schema
from .jvm import spark_cause
from .keys import key_leaves, leaf_types
from .part import SparkPart
from .unsaferow import json_leaf_types


class KeyLookup(SparkPart):
    """Key lookups and the partition push-down (see module doc)."""

    #: the reader matches keys itself (StoredSnapshot leaves keyed_state(key=) to it)
    filters_keys = True

    def key_query(self, query: KeyedStateQuery, key: Any) -> KeyedStateQuery:
        """``keyed_state(key=k)``: read only the Spark partition of ``k`` (per operator, from its key schema)."""
        return KeyedStateQuery(query.operators, query.states, query.key_groups, (key,), query.columns)

    def key_matches(self, row_key: Any, key: Any) -> bool:
        return key_leaves(row_key) == key_leaves(key)

    def _matching_keys(self, op, st, piece: pa.Table, keys) -> pa.Table:
        """The rows of ``piece`` whose key is one of ``keys``."""
        # a key of several columns is a struct: matched with a tuple (or dict) of its fields,
        # in order; timestamps by their instant, a window as {"start", "end"}
        try:
            wanted = {key_leaves(k) for k in keys}
            mask = [key_leaves(d) in wanted for d in piece.column("key").to_pylist()]
        except Exception as exc:  # noqa: BLE001 - our own conversion failed, not the input
            raise ReaderError(f"state {st['state']!r} of operator {op['operator']!r} in {self.path}: "
                              f"matching its keys with {list(keys)!r} failed "
                              f"({type(exc).__name__}: {exc})") from exc
        return piece.filter(pa.array(mask, pa.bool_()))

    def _stored_key_partitions(self, op, st, keys) -> frozenset[int] | None:
        """The partitions of ``keys`` from the store's key schema file (no JVM), or None: read them all."""
        types = json_leaf_types(read_schema(layout.store_schema_file(
            self.path, op["operator_id"], st["options"].get("storeName", "default")), self.roots)[0])
        found = self._partitions_of(op, st, types, keys)
        return None if found is None else frozenset(found)

    def _partitions_of(self, op, st, key_type, keys) -> list[int] | None:
        """The Spark partitions of ``keys`` in one store, or None when a key does not fit the store's key
        columns (then every partition is read)."""
        parts = self._partition_list(op, st, key_type, keys)
        return None if any(p is None for p in parts) else sorted(set(parts))

    def _partition_list(self, op, st, key_type, keys) -> list[int | None]:
        """Spark's partition of each key: Murmur3 of its grouping columns mod the partitions, as the shuffle
        placed it (None for a key that does not fit the store's key columns)."""
        types = leaf_types(key_type) if not isinstance(key_type, list) else key_type
        if st["state"].endswith("keyWithIndexToValue") or op["spark_operator"].startswith("sessionWindow"):
            types = types[:-1]  # the row index / session start is not part of the shuffle key
        types = ["long" if t == "timestamp" else t for t in types]  # microseconds, hashed as a long
        out: list[int | None] = []
        for k in keys:
            leaves = key_leaves(k)
            if len(leaves) != len(types) or not types:
                out.append(None)
                continue
            try:
                cols = [[v[1] if isinstance(v, tuple) else v] for v in leaves]
                out.append(int(partition_ids(cols, op["num_partitions"], types)[0]))
            except Exception:  # noqa: BLE001 - a value of another type: no push-down, the filter decides
                out.append(None)
        return out

    def partitions_of(self, keys: list[Any], operator: str | None = None, state: str | None = None) -> list[int | None]:
        """The Spark partition (``key_group``) of each key in one state (by default the operator's first):
        what ``keyed_state(key=k)`` reads."""
        if state is None:
            op = next(o for o in self._operators if operator is None or o["operator"] == operator)
            st = self._states_of(op)[0]
        else:
            op, st = self._find(state, operator)
        try:
            key_type = self._frame(op, st["options"]).schema["key"].dataType
        except Exception as exc:  # noqa: BLE001
            raise ReaderError(f"{self.path}/state/{op['operator_id']}: cannot read the key schema of "
                              f"{st['state']!r}: {spark_cause(exc)}") from exc
        return self._partition_list(op, st, key_type, list(keys))

"""Operators a Spark checkpoint has no metadata for: the part of :class:`~.reader.SparkCheckpointReader`
that names them.

Spark 3.x writes no ``state/<op>/_metadata`` (or it was lost); such an operator is found from its folders
(``layout.discover_operators``) and its Spark 4 name inferred from its stores and state schema
(``layout.infer_operator``; a join from its stores' names), with a note that says it is inferred. An
operator whose schema fits none is read as ``operator-<id>`` with a note that its name is unknown.
"""

from __future__ import annotations

from typing import Any

from ...errors import SnapshotFormatError
from . import layout
from .hdfs import read_schema
from .part import SparkPart


class OperatorKinds(SparkPart):
    """Operators without metadata, named from their stores (see module doc)."""

    def _inferred_operator(self, op_id: int, stores: list[str]) -> str | None:
        """Spark 4's name of an operator without metadata, from its stores and state schema
        (:func:`.layout.infer_operator`); None when the schema is unreadable or fits no operator."""
        if any(s.endswith(("keyToNumValues", "keyWithIndexToValue")) for s in stores):
            return "symmetricHashJoin"
        try:
            key_schema, value_schema = read_schema(layout.store_schema_file(self.path, op_id, stores[0]), self.roots)
        except (SnapshotFormatError, OSError, ValueError, KeyError):
            return None
        return layout.infer_operator(key_schema, value_schema, stores)

    def _discovered_operator(self, op_id: int, found: Any) -> dict[str, Any]:
        """The operator dict (as ``checkpoint``'s ``_operators`` has them) of an operator found from its folders
        (``found``: :func:`.layout.discover_operators`'s), its name inferred where it can be, and noted."""
        # Spark 3.x writes no state/<op>/_metadata (or it was lost): the folders and schemas say what there is
        inferred = self._inferred_operator(op_id, list(found.stores))
        if inferred is not None:
            self.notes.append(
                f"{self.path}/state/{op_id}: no operator metadata (state/{op_id}/_metadata: Spark 3.x writes "
                f"none, or it was deleted); read with store(s) {', '.join(found.stores)} from its folders; its "
                f"operator ({inferred}, a {layout.operator_kind(inferred)}) is inferred from its state schema"
                + (" (or applyInPandasWithState: the same state layout)"
                   if inferred == "flatMapGroupsWithState" else ""))
        else:
            self.notes.append(
                f"{self.path}/state/{op_id}: no operator metadata (state/{op_id}/_metadata: Spark 3.x writes none, "
                f"or it was deleted); read as a stateful operator with store(s) {', '.join(found.stores)} from "
                "its folders, its operator name is unknown")
        return {
            "operator_id": op_id, "spark_operator": inferred or f"operator-{op_id}",
            "num_partitions": max(len(found.partitions), self.num_partitions),
            "min_batch_id": None, "max_batch_id": None, "stores": list(found.stores), "variables": [],
            "time_mode": None, "discovered": True, "inferred": inferred is not None,
        }

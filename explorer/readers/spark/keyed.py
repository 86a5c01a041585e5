"""Keyed state of a Spark checkpoint, state by state: the part of :class:`~.reader.SparkCheckpointReader`
that yields pieces (``readers.base``).

Per state: the adapter's bucket layout is decoded (``buckets``); a JVM-free reader reads the store files
(``stores.state_table``: HDFS-backed and RocksDB, v1 and v2, every checksum verified) one partition at a
time, so the first rows come before the last are decoded, and ``key=`` reads only the keys' partitions
(``lookup``); otherwise Spark's data source reads the state at once (``jvm``). A partition folder that
is missing is an error naming it, never fewer rows. Rows become contract pieces in ``contract``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa
from tqdm.auto import tqdm

from ...errors import ReaderError
from ..base import CONTRACT_COLUMNS, KeyedStateQuery
from . import layout
from .part import SparkPart
from .stores import state_table
from .values import flatten_values


class KeyedReads(SparkPart):
    """Keyed state as pieces, state by state (see module doc)."""

    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator[pa.Table]:
        todo = [(op, st) for op in self._operators if query.wants_operator(op["operator"])
                for st in self._states_of(op) if query.wants_state(st["state"])]
        how = "from its files" if self.jvm_free else "through Spark"
        with tqdm(total=len(todo), desc=f"reading Spark state {how}", unit="state", disable=None,
                  leave=False) as bar:
            for op, st in todo:
                bar.set_postfix_str(f"{op['operator']}/{st['state']}", refresh=False)
                yield from self._pieces_of(op, st, query)
                bar.update(1)

    def _pieces_of(self, op: dict[str, Any], st: dict[str, Any], query: KeyedStateQuery) -> Iterator[pa.Table]:
        if query.keys is not None and query.columns is not None and "key" not in query.columns:
            # key= with columns= that leave the key out: the key column is read to match on, then dropped
            inner = dataclasses.replace(query, columns=tuple(query.columns) + ("key",))
            for piece in self._pieces_of(op, st, inner):
                yield piece.drop_columns(["key"])
            return
        if st.get("bucket"):
            pieces = [self._bucket_piece(op, st, query)]
        elif self.jvm_free:  # one piece per partition: the first rows come before the last are decoded
            self._check_partitions(op, query)
            wanted = query.key_groups
            if query.keys is not None and wanted is None:  # key=: only the keys' partitions
                wanted = self._stored_key_partitions(op, st, query.keys)
            parts = [p for p in range(op["num_partitions"]) if wanted is None or p in wanted]
            pieces = (self._converted(op, st, self._read(op, st, dataclasses.replace(
                query, key_groups=frozenset([p]))), query) for p in parts)
        else:
            pieces = [self._converted(op, st, self._read(op, st, query), query)]
        for piece in pieces:
            if query.keys is not None and "key" in piece.column_names:
                piece = self._matching_keys(op, st, piece, query.keys)
            yield piece

    def _store_table(self, op, st, query: KeyedStateQuery) -> pa.Table:
        """One state's rows at this batch from its store files, no JVM (``stores.state_table``): the
        partitions ``query.key_groups`` names, or all."""
        parts = sorted(query.key_groups) if query.key_groups is not None else op["num_partitions"]
        return state_table(self.path, op["operator_id"], parts, self.batch_id,
                           st["options"].get("storeName", "default"), self.provider, self.format_version,
                           None if op.get("discovered") else op["spark_operator"].startswith("sessionWindow"),
                           roots=self.roots)

    def _check_partitions(self, op: dict[str, Any], query: KeyedStateQuery) -> None:
        missing = layout.missing_partitions(self.path, op["operator_id"], op["num_partitions"])
        if query.key_groups is not None:
            missing = [p for p in missing if p in query.key_groups]
        if missing:
            folders = ", ".join(f"{self.path}/state/{op['operator_id']}/{p}" for p in missing)
            raise ReaderError(
                f"operator {op['operator']!r} has {op['num_partitions']} state partitions but {folders} "
                f"{'is' if len(missing) == 1 else 'are'} missing: the keys of "
                f"{'that partition' if len(missing) == 1 else 'those partitions'} would be lost, so nothing is read "
                "(restore the folder, or read the others with key_groups=)")

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        return None

    def flat_state(self, operator: str | None = None, state: str | None = None) -> pd.DataFrame:
        """One state's rows with one column per value field (:func:`.values.flatten_values`), e.g. an
        aggregation's ``count, sum, count_2, sum_2, ...``; by default the first state of the first operator."""
        states = self.states()
        if operator is not None:
            states = states[states["operator"] == operator]
        if state is not None:
            states = states[states["state"] == state]
        if states.empty:
            raise ReaderError(f"{self.path}: no state {state!r} of operator {operator!r}; the checkpoint has "
                              f"{list(zip(self.states()['operator'], self.states()['state']))}")
        op, st = states.iloc[0]["operator"], states.iloc[0]["state"]
        pieces = list(self.keyed_pieces(KeyedStateQuery(operators=frozenset([op]), states=frozenset([st]))))
        df = pa.concat_tables(pieces).to_pandas(maps_as_pydicts="strict") if pieces else pd.DataFrame(
            columns=list(CONTRACT_COLUMNS))
        return flatten_values(df)

"""A Spark checkpoint's history: the part of :class:`~.reader.SparkCheckpointReader` that answers what
changed between batches (``changes``), one partition rebuilt from a snapshot (``read_snapshot``) and every
retained batch (``history``, :func:`.history.spark_history`).

Where the changes come from, in order: a JVM-free reader compares the state of consecutive batches
(``_diff_changes``), each read from the files; a batch that cannot be rebuilt is answered from its own
changelog (RocksDB) or delta (HDFS-backed) file where there is one (``_own_records``), with a note either
way. Otherwise Spark's change feed is read, and when it fails (a changelog gone, or changelog
checkpointing off) the batches are compared instead, with a note that says why. Timers of
transformWithState, whose change feed Spark cannot read, come from each batch's registered timers
(``_timer_changes``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa

from ...errors import ReaderError, SnapshotFormatError, VersionGoneError
from ...spark_session import spark_progress
from ..base import KeyedStateQuery
from .contract import unwrap, value_and_ttl
from .history import spark_history
from .jvm import spark_cause, unique_field_names
from .keys import key_leaves
from .part import SparkPart
from .stores import batch_records


class Changes(SparkPart):
    """Changes between batches, snapshots and the history (see module doc)."""

    def changes(self, state: str, start_batch_id: int, end_batch_id: int | None = None,
                operator: str | None = None) -> pd.DataFrame:
        """What changed in ``state`` between two batches (Spark's change feed): one row per change.

        Columns: ``batch_id, change_type, key, key_group, user_key, value, expires_at``.
        Needs changelog checkpointing (on in :func:`explorer.spark.get_spark`). Timers of transformWithState
        (whose change feed Spark's reader cannot read: it throws a ClassCastException in PySpark 4.3) come from
        the registered timers of each batch and the one before it: ``update`` a timer registered in that
        batch, ``delete`` one that fired or was deleted.
        """
        op, st = self._find(state, operator)
        end = self.batch_id if end_batch_id is None else int(end_batch_id)
        if st["kind"] in ("event_timer", "processing_timer"):
            return self._timer_changes(op, st, int(start_batch_id), end)
        if self.jvm_free:  # the stores' files are at hand: consecutive batches compared, no JVM
            return self._diff_changes(op, st, int(start_batch_id), end, [])
        extra = {"readChangeFeed": "true", "changeStartBatchId": int(start_batch_id), "changeEndBatchId": end}
        opts = {k: v for k, v in st["options"].items()}
        where = f"the change feed of {state!r} ({start_batch_id}..{end}) in {self.path}"
        try:
            df = self._frame(op, opts, extra)
            with spark_progress(f"reading {where} through Spark"):
                t = unique_field_names(df).toArrow()
        except Exception as exc:  # noqa: BLE001 - Spark's feed needs every changelog: compare batches instead
            on = self.sql_conf.get("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
                                   "false").lower() == "true"
            why = ("changelog checkpointing was on, so a changelog of this range is gone (the store's maintenance "
                   "deletes old ones) or was written before it was switched on" if on else
                   "changelog checkpointing was off for this query")
            return self._diff_changes(op, st, int(start_batch_id), end, [
                f"reading {where} failed ({why}): {spark_cause(exc)}; the changes were found by comparing the state "
                "of consecutive batches instead"])
        out = {"batch_id": t.column("batch_id").to_numpy(), "change_type": t.column("change_type").to_pylist(),
               "key": unwrap(t.column("key").combine_chunks()).to_pylist(),
               "key_group": t.column("partition_id").to_numpy()}
        vcol = {"map": "user_map_value", "list": "list_element"}.get(st["kind"], "value")
        value, expires, _ = value_and_ttl(t.column(vcol).combine_chunks())
        out["user_key"] = (unwrap(t.column("user_map_key").combine_chunks()).to_pylist()
                           if st["kind"] == "map" else [None] * t.num_rows)
        out["value"] = value.to_pylist()
        out["expires_at"] = (pd.to_datetime(expires.to_numpy(zero_copy_only=False), unit="ms", utc=True)
                             if expires is not None else pd.NaT)
        df = pd.DataFrame(out)
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)  # NaT too: one dtype with the timers'
        return df.sort_values(["batch_id", "key_group"], kind="stable").reset_index(drop=True)

    def _diff_changes(self, op, st, start: int, end: int, notes: list[str]) -> pd.DataFrame:
        """The changes of one state in batches ``start..end`` from the state of each batch and the one before:
        ``update`` a row added or whose value (or expiry) changed, ``delete`` a row gone (its value null, as in
        Spark's feed). A key re-written with the same value is no change here. A batch that cannot be rebuilt
        (its files deleted by the store's maintenance, or its commit purged) has no rows, and a note in
        ``attrs["notes"]`` says which batch and why; so has the batch after it (nothing to compare with)."""
        cols = ["batch_id", "change_type", "key", "key_group", "user_key", "value", "expires_at"]
        query = KeyedStateQuery(operators=frozenset([op["operator"]]), states=frozenset([st["state"]]))
        where = f"state {st['state']!r} of operator {op['operator']!r} in {self.path}"

        def state_at(batch: int) -> dict[tuple, dict[str, Any]]:
            if batch < 0:
                return {}
            if batch not in self.committed:
                raise VersionGoneError(f"batch {batch} is not in the commit log (committed: "
                                       f"{self.committed[0]}..{self.committed[-1]}; older entries are purged)")
            out = {}
            for piece in self.at_batch(batch)._pieces_of(op, st, query):
                for r in piece.select(["key", "key_group", "user_key", "value", "expires_at"]).to_pylist():
                    out[(r["key_group"], key_leaves(r["key"]), key_leaves(r["user_key"]))] = r
            return out

        def attempt(batch: int) -> tuple[dict | None, str | None]:
            try:
                return state_at(batch), None
            except (VersionGoneError, ReaderError) as exc:
                return None, str(exc)

        rows = []
        before, why_before = attempt(start - 1)
        for b in range(start, end + 1):
            now, why = attempt(b)
            if now is None or before is None:
                own, why_own = self._own_records(op, st, b, query)
            if now is None:
                if own is None:
                    notes.append(f"{where}: the changes of batch {b} are unknown: its state cannot be rebuilt: {why}")
                else:
                    rows += own
                    notes.append(f"{where}: the state of batch {b} cannot be rebuilt ({why}): its changes are its own "
                                 "records in its changelog (delta) file: every key it wrote is an update, also one "
                                 "written with the value it had")
            elif before is None:
                if own is None:
                    notes.append(f"{where}: the changes of batch {b} are unknown: the state of batch {b - 1} before "
                                 f"it cannot be rebuilt ({why_before}) and batch {b}'s own records cannot be read "
                                 f"({why_own})")
                else:
                    rows += own
                    notes.append(f"{where}: the state of batch {b - 1} cannot be rebuilt ({why_before}): the changes "
                                 f"of batch {b} are its own records in its changelog (delta) file: every key it "
                                 "wrote is an update, also one written with the value it had")
            else:
                for k, r in now.items():
                    old = before.get(k)
                    if old is None or repr(old["value"]) != repr(r["value"]) or old["expires_at"] != r["expires_at"]:
                        rows.append({**r, "batch_id": b, "change_type": "update"})
                for k in before.keys() - now.keys():
                    rows.append({**before[k], "batch_id": b, "change_type": "delete", "value": None})
            before, why_before = now, why
        df = pd.DataFrame(rows, columns=cols)
        df["batch_id"] = df["batch_id"].astype("int64")
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)
        df = df.sort_values(["batch_id", "key_group", "change_type"], kind="stable").reset_index(drop=True)
        df.attrs["notes"] = notes
        return df

    def _own_records(self, op, st, batch: int, query: KeyedStateQuery) -> tuple[list[dict] | None, str | None]:
        """The changes of ``batch`` from its own changelog (RocksDB) or delta (HDFS-backed) file: what it put
        (``update``) and deleted (``delete``, value null), without the state before it; (None, why) when
        the file is not there or the store is read through Spark."""
        if not self.jvm_free:
            return None, "the store is read through Spark's data source"
        if batch not in self.committed:
            return None, f"batch {batch} is not in the commit log"
        try:
            self._check_partitions(op, query)
            t = batch_records(self.path, op["operator_id"], op["num_partitions"], batch,
                              st["options"].get("storeName", "default"), self.provider, self.format_version,
                              None if op.get("discovered") else op["spark_operator"].startswith("sessionWindow"),
                              roots=self.roots)
        except (SnapshotFormatError, ReaderError) as exc:
            return None, str(exc)
        deleted = t.column("deleted").to_pylist()
        piece = self.at_batch(batch)._converted(op, st, t.drop_columns(["deleted"]), query)
        rows = []
        for gone, r in zip(deleted, piece.select(["key", "key_group", "user_key", "value", "expires_at"]).to_pylist()):
            if gone:
                rows.append({**r, "batch_id": batch, "change_type": "delete", "value": None, "expires_at": None})
            else:
                rows.append({**r, "batch_id": batch, "change_type": "update"})
        return rows, None

    def _timer_changes(self, op, st, start: int, end: int) -> pd.DataFrame:
        """The change feed of a timer state, from the registered timers of consecutive batches."""
        cols = ["batch_id", "change_type", "key", "key_group", "user_key", "value", "expires_at"]
        query = KeyedStateQuery(operators=frozenset([op["operator"]]), states=frozenset([st["state"]]))

        def timers(batch: int) -> dict[tuple, dict[str, Any]]:
            if batch < self.committed[0]:
                return {}
            if batch not in self.committed:
                raise ReaderError(f"{self.path}: the timer changes of batch {batch + 1} need batch {batch}, which "
                                  f"is not committed (committed: {self.committed[0]}..{self.committed[-1]})")
            at = self.at_batch(batch)
            out = {}
            for piece in at._pieces_of(op, st, query):
                for r in piece.select(["key", "key_group", "value", "expires_at"]).to_pylist():
                    out[(key_leaves(r["key"]), r["value"])] = r
            return out

        rows = []
        before = timers(start - 1)
        for b in range(start, end + 1):
            now = timers(b)
            for k in now.keys() - before.keys():
                rows.append({"batch_id": b, "change_type": "update", **now[k]})
            for k in before.keys() - now.keys():
                rows.append({"batch_id": b, "change_type": "delete", **before[k]})
            before = now
        df = pd.DataFrame(rows, columns=cols)
        df["user_key"] = None
        df["batch_id"] = df["batch_id"].astype("int64")
        df["expires_at"] = pd.to_datetime(df["expires_at"], utc=True)
        return df.sort_values(["batch_id", "key_group", "change_type"], kind="stable").reset_index(drop=True)

    def read_snapshot(self, state: str, snapshot_start_batch_id: int, partition: int,
                      operator: str | None = None) -> pa.Table:
        """One partition of ``state`` rebuilt from the snapshot of ``snapshot_start_batch_id`` plus changelogs."""
        op, st = self._find(state, operator)
        have = self.snapshot_batches(op["operator_id"], partition)
        if snapshot_start_batch_id not in have:
            raise ReaderError(
                f"{self.path}: partition {partition} of operator {op['operator']!r} has no snapshot for batch "
                f"{snapshot_start_batch_id} (Spark's snapshotStartBatchId needs a '<batch + 1>.zip'); snapshots "
                f"exist for batches {have or 'none'}"
            )
        extra = {"snapshotStartBatchId": int(snapshot_start_batch_id), "snapshotPartitionId": int(partition)}
        t = self._read(op, st, KeyedStateQuery(), extra)
        return self._to_contract(op, st, t, KeyedStateQuery())

    def history(self, keys: bool = True, per_state: bool = True) -> pd.DataFrame:
        """Every retained batch (what :func:`explorer.history` shows for a Spark checkpoint):
        see :func:`explorer.readers.spark.history.spark_history`."""
        self._everything()
        return spark_history(self, keys=keys, per_state=per_state)

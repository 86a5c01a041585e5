"""Taking one subtask's snapshot: a synchronous capture, then an asynchronous write.

The *synchronous* part runs when the barrier is processed (the subtask is
paused): it copies the subtask's keyed state rows, timers, operator and
broadcast state and metrics into memory. The *asynchronous* part turns the
copy into files (Parquet and JSON) while the job keeps running, and returns
this subtask's part of the snapshot metadata with sizes and checksums.

A RocksDB backend's keyed state is not copied row by row in the synchronous
part: a full checkpoint or savepoint pins a consistent view instead (a RocksDB
checkpoint, hard-linked SST files, taken at the barrier, as Flink's full
snapshot pins a RocksDB snapshot), and the asynchronous part reads that view,
decoding it column-wise where the types allow
(:func:`explorer.format.rocksdb.native.write_native_table`), and writes the same Parquet
files the row copy would have, each batch as soon as it is decoded. The view's
folder is removed when the write is done, or when the capture is dropped
unwritten (an aborted checkpoint). Where the view's files allow it, a state is
read straight from its SST files, column-wise (:mod:`.sst_view`); rocksdict
iterates the view otherwise.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
from rocksdict import AccessType, Options, Rdict

from ...format.keyed import CHECKPOINT, SAVEPOINT, ParquetProfile, columns_to_table, encode_keys, rows_to_table, \
    write_parquet_by_key_group
from ...format.rocksdb.native import write_native_table
from ...format.snapshot import file_entry
from ...format.types import type_from_description, type_info
from ..backends.rocksdb import StagingDir
from ..backends.table import ColumnSnapshot
from ..operators import KeyedOperatorBase, SourceOperator
from ..state import StateKind
from ..timers import TimerSnapshot
from ..ttl import is_expired
from . import sst_view
from .list_reuse import ListReuse


@dataclass
class StateCapture:
    descriptor: dict[str, Any]
    rows: list[tuple] | None  # None: the rows are read from the capture's pinned view when written
    value_info: Any
    user_key: Any
    expire: tuple[int, int] | None = None  # (ttl_ms, now_ms): drop expired rows when reading the view
    columns: ColumnSnapshot | None = None  # the rows copied column-wise (a heap table): written instead of rows
    reuse: ListReuse | None = None  # the long lists of ``columns`` converted at the table's last checkpoint


class PinnedView:
    """A RocksDB backend's state at the barrier: a RocksDB checkpoint (SSTs hard-linked) in ``staging``.

    Taken in the synchronous phase (a memtable flush and a few links), read in
    the asynchronous one. ``staging`` is the ``db`` folder inside an owned
    staging folder ``.<db>-full-<hex>`` (a
    :class:`~explorer.engine.backends.rocksdb.StagingDir`), which is removed by
    :meth:`release`, or when the view is garbage-collected without being
    released (an aborted checkpoint); while the view lives, its lock keeps a
    backend opening the same directory (in this or another process) from
    sweeping it away, and if the process dies the next such backend removes it.
    """

    def __init__(self, backend) -> None:
        self._owned = StagingDir(backend.path, "full")
        self.staging = self._owned.path / "db"
        try:
            backend.native_checkpoint(self.staging)
        except BaseException:
            self._owned.release()
            raise
        self.prefix_bytes = backend.key_group_prefix_bytes
        self.key_group_range = (backend.key_groups.start, backend.key_groups.end)
        self._db = None
        self._sst: Any = False  # not yet listed

    def column_family(self, name: str):
        if self._db is None:
            self._db = Rdict(str(self.staging), Options(raw_mode=True), access_type=AccessType.read_only())
        return self._db.get_column_family(name)

    def sst_files(self, name: str) -> list | None:
        """The SST files of state ``name`` (parsed footers), or None when the view must be read with rocksdict."""
        if self._sst is False:
            self._sst = sst_view.column_family_files(self.staging)
        if self._sst is None or name == "default":
            return None
        return self._sst.get(name, [])  # None: this state's files need rocksdict

    def release(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        self._sst = None
        self._owned.release()


def _can_pin(backend) -> bool:
    """Whether ``backend`` is a RocksDB backend whose live database can take a RocksDB checkpoint."""
    return (getattr(backend, "name", None) == "rocksdb" and hasattr(backend, "native_checkpoint")
            and not getattr(backend, "_closed", True) and not getattr(backend, "_read_only", True))


@dataclass
class SubtaskCapture:
    uid: str
    name: str
    index: int
    parallelism: int
    max_parallelism: int
    keyed: bool
    key_group_range: tuple[int, int] | None
    states: list[StateCapture] = field(default_factory=list)
    timers: list[tuple] = field(default_factory=list)
    timer_snapshots: list[tuple[str, TimerSnapshot]] = field(default_factory=list)  # listed into ``timers`` when written
    operator_lists: dict[str, dict[str, Any]] = field(default_factory=dict)
    broadcast: dict[str, dict[str, Any]] = field(default_factory=dict)
    records_per_key_group: list[int] | None = None
    heavy_hitters: dict[str, Any] | None = None
    inflight: list[dict[str, Any]] = field(default_factory=list)
    sync_ms: float = 0.0
    alignment_ms: float = 0.0
    source_positions: list[list[Any]] | None = None
    native: Any = None  # an incremental.NativeCapture: keyed state as RocksDB files
    view: PinnedView | None = None  # a full snapshot of a RocksDB backend: states read from here when written


def capture_subtask(subtask, now_ms: int, native: Callable[[Any], Any] | None = None,
                    pin_views: bool = True) -> SubtaskCapture:
    """Copy everything a subtask must restore (the synchronous phase).

    ``native``, if given, takes the keyed backend and captures it natively
    (an incremental checkpoint, see :mod:`.incremental`); its rows are then not copied.
    Otherwise a RocksDB backend is pinned as a :class:`PinnedView` (its rows are
    read in :func:`write_capture`) unless ``pin_views`` is False (then they are
    copied here, the row-by-row path).
    """
    t0 = time.perf_counter()
    op = subtask.operator
    spec = subtask.spec
    cap = SubtaskCapture(
        uid=spec.uid,
        name=spec.name,
        index=subtask.index,
        parallelism=spec.parallelism,
        max_parallelism=spec.max_parallelism,
        keyed=spec.keyed,
        key_group_range=(op.key_groups.start, op.key_groups.end) if isinstance(op, KeyedOperatorBase) else None,
    )
    if isinstance(op, KeyedOperatorBase) and native is not None:
        cap.native = native(op.backend)
    if isinstance(op, KeyedOperatorBase) and cap.native is None and pin_views and _can_pin(op.backend):
        cap.view = PinnedView(op.backend)
    if isinstance(op, KeyedOperatorBase):
        for name, table in (op.backend.tables.items() if cap.native is None else ()):
            desc = table.descriptor
            ttl = getattr(desc, "ttl", None)
            expire = (ttl.ttl_ms, now_ms) if ttl is not None and ttl.cleanup.full_snapshot else None
            columns = reuse = None
            if cap.view is None and expire is None and table.snapshot_reuse is None and ListReuse.applies(table):
                table.snapshot_reuse = ListReuse(table)  # from now on taken copy-on-write
            if cap.view is not None:
                rows = None
            elif expire is None and (columns := table.snapshot_columns()) is not None:
                rows = None  # references copied column-wise; the columns are built when written
                reuse = table.snapshot_reuse
            else:
                rows = list(table.rows())
                if expire is not None:
                    rows = [r for r in rows if not is_expired(r[5], ttl.ttl_ms, now_ms)]
            if desc.kind is StateKind.MAP:
                uk = desc.user_key_info
            elif desc.kind is StateKind.LIST:
                uk = "index"
            else:
                uk = None
            cap.states.append(StateCapture(desc.describe(), rows, desc.value_info, uk, expire, columns, reuse))
        # the queues' buckets copied; the timers are listed in order when written
        cap.timer_snapshots = [("event_time", op.event_timers.snapshot()),
                               ("processing_time", op.processing_timers.snapshot())]
        cap.records_per_key_group = op.metrics.records.tolist()
        cap.heavy_hitters = op.sketch.to_json()
    store = op.operator_state
    for name, st in store.lists.items():
        info = st.descriptor.value_info
        cap.operator_lists[name] = {
            "mode": st.mode.value,
            "value_type": info.describe(),
            "items": [info.to_arrow(v) for v in st.items],
        }
    for name, bs in store.broadcast.items():
        d = bs.descriptor
        cap.broadcast[name] = {
            "key_type": d.user_key_info.describe(),
            "value_type": d.value_info.describe(),
            "entries": [[d.user_key_info.to_arrow(k), d.value_info.to_arrow(v)] for k, v in bs.entries.items()],
        }
    if isinstance(op, SourceOperator):
        cap.source_positions = [list(x) for x in op.offsets_state.items]
    cap.sync_ms = (time.perf_counter() - t0) * 1000
    return cap


def _safe(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return out or "_"


def write_capture(cap: SubtaskCapture, folder: Path, upload: Callable[[Any], tuple] | None = None,
                  savepoint: bool = True) -> dict[str, Any]:
    """Write one subtask's capture under ``folder``; return its metadata fragment.

    ``upload`` writes a native capture (``cap.native``) and returns its
    ``native`` metadata, file entries and bytes written (:func:`.incremental.upload_native`).
    A savepoint's Parquet files are written with :data:`explorer.format.keyed.SAVEPOINT`
    (zstd, SHA-256), a checkpoint's with :data:`~explorer.format.keyed.CHECKPOINT`
    (uncompressed, XXH3-128): the same columns and row groups, read and verified alike.
    """
    profile = SAVEPOINT if savepoint else CHECKPOINT
    t0 = time.perf_counter()
    files: dict[str, dict[str, Any]] = {}
    states_meta = []
    uid_dir = _safe(cap.uid)
    native_meta = None
    written = None
    if cap.native is not None:
        native_meta, native_files, written = upload(cap.native)
        files.update(native_files)
        states_meta = list(cap.native.states)
    try:
        for sc in cap.states:
            rel = f"keyed/{uid_dir}/{_safe(sc.descriptor['name'])}/{cap.index}.parquet"
            path = folder / rel
            digest = None
            if sc.columns is not None:
                cols = sc.columns.columns(None if sc.reuse is None else sc.reuse.values(sc.columns))
                table, kinds = columns_to_table(value_info=sc.value_info, user_key=sc.user_key, **cols)
                groups, rows = write_parquet_by_key_group(table, path, profile=profile), table.num_rows
            elif sc.rows is None:
                groups, rows, kinds, digest = _write_view_state(cap.view, sc, path, profile)
            else:
                table, kinds = rows_to_table(sc.rows, sc.value_info, sc.user_key)
                groups, rows = write_parquet_by_key_group(table, path, profile=profile), table.num_rows
            # the checksum of a file written batch by batch was computed as it was written
            files[rel] = file_entry(folder, path, profile.checksum) if digest is None else \
                {"bytes": path.stat().st_size, **digest}
            states_meta.append({"name": sc.descriptor["name"], "file": rel, "rows": rows,
                                "row_groups": groups, **kinds})
    finally:
        if cap.view is not None:
            cap.view.release()
    for domain, snap in cap.timer_snapshots:
        cap.timers += [(t.key_group, t.key, t.namespace, t.timestamp, domain) for t in snap]
    cap.timer_snapshots = []
    timers_meta = None
    if cap.timers:
        kgs, keys, nss, tss, doms = zip(*sorted(cap.timers, key=lambda r: (r[0], r[3])))
        key_col, key_kind = encode_keys(list(keys))
        ns_col, ns_kind = encode_keys(list(nss))
        t = pa.table({"key_group": pa.array(kgs, pa.int32()), "key": key_col, "namespace": ns_col,
                      "timestamp": pa.array(tss, pa.int64()), "domain": pa.array(doms, pa.string())})
        rel = f"timers/{uid_dir}/{cap.index}.parquet"
        groups = write_parquet_by_key_group(t, folder / rel, profile=profile)
        files[rel] = file_entry(folder, folder / rel, profile.checksum)
        timers_meta = {"file": rel, "rows": t.num_rows, "row_groups": groups, "key_kind": key_kind, "namespace_kind": ns_kind}
        if written is not None:
            written += files[rel]["bytes"]
    op_meta = None
    if cap.operator_lists or cap.broadcast or cap.inflight:
        rel = f"operator/{uid_dir}/{cap.index}.json"
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"lists": cap.operator_lists, "broadcast": cap.broadcast, "inflight": cap.inflight},
                                   default=_json_default))
        files[rel] = file_entry(folder, path)
        op_meta = rel
        if written is not None:
            written += files[rel]["bytes"]
    async_ms = (time.perf_counter() - t0) * 1000
    total = sum(f["bytes"] for f in files.values())
    frag = {
        "index": cap.index,
        "key_group_range": list(cap.key_group_range) if cap.key_group_range else None,
        "states": states_meta,
        "timers": timers_meta,
        "operator_state": op_meta,
        "records_per_key_group": cap.records_per_key_group,
        "heavy_hitters": cap.heavy_hitters,
        "source_positions": cap.source_positions,
        "sync_ms": round(cap.sync_ms, 3),
        "async_ms": round(async_ms, 3),
        "alignment_ms": round(cap.alignment_ms, 3),
        "bytes": total,
        # what this checkpoint wrote (files it only references from shared/ are not counted)
        "bytes_written": total if written is None else written,
        "files": files,
    }
    if native_meta is not None:
        frag["state_format"] = "rocksdb-native"
        frag["native"] = native_meta
    return frag


#: read a pinned view's states from its SST files where they allow it (:mod:`.sst_view`); else with rocksdict
READ_SST_FILES = True


def _write_view_state(view: PinnedView, sc: StateCapture, path: Path, profile: ParquetProfile = SAVEPOINT):
    """One state read from a pinned view and written to ``path`` batch by batch (the asynchronous
    half of a RocksDB full snapshot): its row groups, row count, kinds and checksum entry (or None)."""
    if READ_SST_FILES:
        files = view.sst_files(sc.descriptor["name"])
        if files is not None:
            got = sst_view.write_view_state_sst(files, sc.descriptor, view.prefix_bytes, view.key_group_range,
                                                sc.value_info, sc.user_key, path, expire=sc.expire, profile=profile)
            if got is not None:
                return got
    cf = view.column_family(sc.descriptor["name"])
    try:
        return write_native_table(cf, sc.descriptor, view.prefix_bytes, [view.key_group_range],
                                  sc.value_info, sc.user_key, path, expire=sc.expire, profile=profile)
    finally:
        cf.close()


def _json_default(o):
    if isinstance(o, bytes):
        return {"$bytes": o.hex()}
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} cannot be stored in operator state JSON")


def operator_value(desc_json: dict[str, Any], value: Any) -> Any:
    """Decode an operator-state value written by :func:`write_capture`."""
    return type_from_description(desc_json).from_arrow(value)


__all__ = ["SubtaskCapture", "capture_subtask", "write_capture", "operator_value", "type_info"]

"""Restoring a job from a checkpoint or savepoint, at any parallelism up to max parallelism.

Operators are matched by uid. A keyed subtask reads only the key groups it
now owns (whole key groups move on rescale); operator list state is dealt
out again (even split or union); broadcast state is copied to every
subtask; sources resume at their recorded positions. Keyed state of an
incremental checkpoint (RocksDB's own files) is restored natively into a
RocksDB subtask, or read out row by row into any other backend
(:mod:`.incremental`). Canonical (Parquet) keyed state is read one row group
at a time (the next one read and encoded in a thread while the current one is
written); a RocksDB subtask gets each row group's raw entries encoded
column-wise (:mod:`explorer.format.rocksdb.encode`) and bulk-loads them as SST
files, other backends (and shapes not encoded column-wise) get rows. Strings
and bytes of value, reducing and aggregating states in an uncompressed
checkpoint are not read out by Arrow: they are copied into the SST blocks
straight from the mapped Parquet file (:mod:`explorer.format.parquet_pages`).

State is checked when the restored job registers it (Flink's state
migration): the same kind, a compatible type (a dataclass may gain fields
with defaults or lose fields), and the same TTL. Anything else is a
:class:`~explorer.errors.StateMigrationError` naming the state and both
sides. State or operators the new job does not declare fail the restore
unless ``allow_non_restored_state=True``.
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...errors import RestoreError, StateMigrationError
from ...format import budget
from ...format.keyed import check_row_groups, decode_keys, read_parquet_key_groups
from ...format.parquet_pages import ByteSpans
from ...format.rocksdb.encode import encode_batch, splits
from ...format.prefetch import map_ahead
from ...format.records import decode_record
from ...format.snapshot import BackgroundVerification, check_file_size, read_metadata, resolve, verify_file
from ...format.states import StoredState
from ...format.types import TypeInfo, type_from_description
from ...storage.sizes import parse_size
from ..backends.rocksdb import RocksDBStateBackend, remove_created_dirs
from ..channels import Batch
from ..operator_state import OperatorStateMode, redistribute_list
from ..operators import KeyedOperatorBase, SourceOperator
from ..state import StateDescriptor
from .incremental import NATIVE_FORMAT, restore_native_subtask
from .migration import check_declaration, converter


class RestoredKeyedState:
    """Rows of one state, waiting for the job to register its descriptor."""

    def __init__(self, folder: Path, desc: "StoredState | dict", files: list[tuple[str, dict]], key_groups: range,
                 verification: BackgroundVerification | None = None) -> None:
        self.folder = folder
        #: what one read of a row group may allocate: the restore's ``memory_budget`` (see :func:`restore_runtime`)
        self.memory_budget = budget.current()
        self._footers: dict[Path, list] = {}
        self.desc = StoredState.of(desc)
        self.files = files  # (relative path, state metadata)
        self.key_groups = key_groups
        #: the checksum checks of these files, running while they load (see :func:`restore_runtime`)
        self.verification = verification

    def _checked(self, items: Iterator[Any]) -> Iterator[Any]:
        """``items``, stopped with the checksum error as soon as the background verification
        finds a mismatch; a load error (a damaged file Parquet cannot read) becomes the
        checksum error when the verification finds one."""
        v = self.verification
        if v is None:
            yield from items
            return
        try:
            for item in items:
                if v.failed:
                    v.wait()
                yield item
        except BaseException as e:
            if not isinstance(e, GeneratorExit):
                v.wait()  # raises the clearer error when a file is damaged
            raise

    def check(self, descriptor: StateDescriptor, operator: str) -> None:
        check_declaration(self.desc, descriptor, operator)

    def _decoders(self, descriptor: StateDescriptor, operator: str) -> tuple[Any, TypeInfo | None]:
        where = f"operator {operator!r}, state {self.desc.name!r}"
        return converter(self.desc.value_type, descriptor.value_info, where), descriptor.user_key_info

    def _groups(self) -> Iterator[tuple[Path, dict, int]]:
        """``(file, state metadata, row group)`` of each Parquet row group holding wanted key groups, in file order."""
        lo, hi = self.key_groups.start, self.key_groups.stop - 1
        for rel, smeta in self.files:
            groups = smeta["row_groups"]
            path = resolve(self.folder, rel)
            for i, (first, last, _) in enumerate(groups):
                if first <= hi and last >= lo:
                    yield path, smeta, i

    def _read_group(self, path: Path, smeta: dict, i: int) -> pa.Table:
        """Row group ``i`` of ``path``, cut to the wanted key groups. The file is memory-mapped (its
        page-cache pages read in place: no buffer of fresh memory per row group); each call opens it
        (a footer read), so that threads read row groups side by side."""
        pf = pq.ParquetFile(path, memory_map=True)
        self._check(path, pf, i)
        t = pf.read_row_group(i)
        keep = self._wanted(t, smeta, i)
        return t if keep is None else t.filter(keep)

    def _footer(self, path: Path) -> list:
        groups = self._footers.get(path)
        if groups is None:
            from ...format.parquet_pages import footer_chunks

            groups = self._footers[path] = footer_chunks(path)
        return groups

    def _check(self, path: Path, pf: pq.ParquetFile, i: int) -> None:
        """Row group ``i``'s declared sizes and page headers against the restore's memory budget, before Arrow
        decodes it: a snapshot is untrusted input, and a small file can hold a value that inflates to gigabytes
        (the readers' check, :func:`explorer.format.keyed.check_row_groups`)."""
        with budget.using(self.memory_budget):
            check_row_groups(path, pf, [i], None, footer=self._footer(path))

    def _wanted(self, t: pa.Table, smeta: dict, i: int) -> Any:
        """Which rows of row group ``i`` (read as ``t``) are of the wanted key groups: None for all of them
        (the row group's key groups, in ``smeta``, all wanted), else a boolean mask."""
        lo, hi = self.key_groups.start, self.key_groups.stop - 1
        first, last, _ = smeta["row_groups"][i]
        if first >= lo and last <= hi:
            return None
        kg = t.column("key_group")
        return pc.fill_null(pc.and_(pc.greater_equal(kg, lo), pc.less_equal(kg, hi)), False)

    def _read_spans(self, path: Path, smeta: dict, i: int, mapped: dict[Path, Any], lock: threading.Lock
                    ) -> tuple[pa.Table, ByteSpans] | None:
        """Row group ``i`` of ``path`` cut to the wanted key groups as :meth:`_read_group` reads it, but
        for its value column: those values' bytes in place in the mapped file
        (:func:`explorer.format.parquet_pages.column_spans`); None when that column is not stored
        so (compressed, a dictionary, nulls: a savepoint's files)."""
        from ...format.parquet_pages import column_spans, map_file  # numba: loaded where used

        pf = pq.ParquetFile(path, memory_map=True)
        md = pf.metadata
        j = next((k for k in range(md.num_columns) if md.schema.column(k).path == "value"), None)
        if j is None:
            return None
        col = md.schema.column(j)
        with lock:
            data = mapped.get(path)
            if data is None:
                data = mapped[path] = map_file(path)
        # the chunk as the footer's Thrift is parsed here, not pyarrow's RowGroupMetaData.column(): that
        # aborts the process on some damaged footers, before this file's checksum is checked
        groups = self._footer(path)
        if i >= len(groups) or j >= len(groups[i].columns):
            return None  # (Arrow's own read says what is wrong)
        spans = column_spans(data, groups[i].columns[j], col.max_definition_level, col.max_repetition_level,
                             f"{path}: row group {i}")
        if spans is None:
            return None
        self._check(path, pf, i)
        t = pf.read_row_group(i, columns=[n for n in pf.schema_arrow.names if n != "value"])
        if len(spans) != t.num_rows:
            return None
        keep = self._wanted(t, smeta, i)
        if keep is not None:
            t = t.filter(keep)
            spans = spans.filter(np.asarray(keep.to_numpy(), dtype=bool))
        return t, spans

    def _tables(self) -> Iterator[tuple[pa.Table, dict]]:
        """Each Parquet row group holding wanted key groups, cut to them, in file order."""
        for path, smeta, i in self._groups():
            t = self._read_group(path, smeta, i)
            if t.num_rows:
                yield t, smeta

    @staticmethod
    def _rows_of(t: pa.Table, smeta: dict, conv: Any, uk_info: TypeInfo | None) -> Iterator[tuple]:
        keys = decode_keys(t.column("key"), smeta["key_kind"])
        nss = decode_keys(t.column("namespace"), smeta["namespace_kind"])
        uks = t.column("user_key").to_pylist()
        if uk_info is not None:
            uks = [uk_info.from_arrow(u) for u in uks]
        vals = [conv(v) for v in t.column("value").to_pylist()]
        tss = t.column("last_access").to_pylist()
        kg = t.column("key_group").to_pylist()
        return zip(kg, keys, nss, uks, vals, tss)

    def rows(self, descriptor: StateDescriptor, operator: str) -> Iterator[tuple]:
        conv, uk_info = self._decoders(descriptor, operator)
        for t, smeta in self._checked(self._tables()):
            yield from self._rows_of(t, smeta, conv, uk_info)

    def chunks(self, descriptor: StateDescriptor, operator: str, prefix_bytes: int) -> Iterator["RestoredChunk"]:
        """The rows batch by batch (one Parquet row group each), for a RocksDB state with a
        ``prefix_bytes`` key-group prefix; each batch also carries its raw RocksDB entries when
        its types encode column-wise and the declared value type is unchanged (no conversion)."""
        conv, uk_info = self._decoders(descriptor, operator)
        d = self.desc
        same_type = descriptor.describe()["value_type"] == d.value_type
        ttl = d.has_ttl

        # values of value/reducing/aggregating states of strings or bytes in an uncompressed checkpoint:
        # located in place in the mapped file (format.parquet_pages) instead of copied out by Arrow
        direct = same_type and splits(d.kind, d.value_type)
        mapped: dict[Path, Any] = {}
        lock = threading.Lock()

        def read(group: tuple[Path, dict, int]) -> RestoredChunk | None:
            smeta = group[1]
            got = self._read_spans(*group, mapped, lock) if direct else None
            if got is None:
                t, spans = self._read_group(*group), None
                rows = (lambda: self._rows_of(t, smeta, conv, uk_info))
            else:
                t, spans = got
                # the rows, if wanted after all, from the whole row group read again
                rows = (lambda: self._rows_of(self._read_group(*group), smeta, conv, uk_info))
            if not t.num_rows:
                return None
            raw = None
            if same_type:
                raw = encode_batch(t, d.kind, prefix_bytes, ttl, d.value_type, d.user_key_type, smeta["key_kind"],
                                   smeta["namespace_kind"], split=True, values=spans)
            return RestoredChunk(raw, t.num_rows, rows)

        # the next batches are read and encoded (Arrow and NumPy, which release the GIL) by two
        # threads, a row group each, while the caller writes the current one
        for c in self._checked(map_ahead(read, self._groups(), 2, "restore-read")):
            if c is not None:
                yield c


class RestoredChunk:
    """One batch of a restored state: ``rows()``, and ``raw`` = the RocksDB ``(keys, values)`` or None (values
    may be two arrays whose items join, see :func:`explorer.format.rocksdb.encode.encode_batch`)."""

    __slots__ = ("raw", "num_rows", "_rows")

    def __init__(self, raw: tuple[pa.Array, pa.Array] | None, num_rows: int, rows: Any) -> None:
        self.raw = raw
        self.num_rows = num_rows
        self._rows = rows

    def rows(self) -> Iterator[tuple]:
        return self._rows()


def restore_runtime(runtime, folder: str | Path, allow_non_restored_state: bool = False,
                    memory_budget: int | str | None = None) -> dict[str, Any]:
    """Load ``folder`` into a built (not yet opened) runtime. Returns the snapshot metadata.

    A snapshot is untrusted input: each Parquet row group's declared sizes and page headers are checked
    against ``memory_budget`` (bytes or a size such as ``"2GB"``; default half the available memory, as
    ``explorer.open``) before it is decoded, here and when the job loads its keyed state, with a
    :class:`~explorer.errors.SnapshotTooLargeError` naming the file when one is over it.

    Every data file's size is checked first, and every file is hashed before the job
    runs. The small files read here (operator state, timers, a native subtask's
    MANIFEST, CURRENT and OPTIONS) are hashed before use. The bulk of a snapshot is
    hashed in threads while it loads (:class:`BackgroundVerification`): the canonical
    keyed-state Parquet files, loaded when the job registers its states in ``open()``,
    and the SST files of a native (incremental or full native) checkpoint, linked into
    the new database and opened by RocksDB, which checks each block's checksum as it
    reads it (as the canonical restore's page CRCs are checked). :func:`check_after_open`
    waits for the hashes before the job processes a record or takes a checkpoint: on a
    mismatch the restore fails with the checksum error (also when the damage made the
    load itself fail first: :class:`~explorer.engine.checkpoint.job.JobClient` awaits
    the verification's verdict) and :func:`abort_restore` removes the state built so far.
    """
    limit = (budget.default_memory_budget() if memory_budget is None
             else parse_size(memory_budget, what="memory_budget", error=ValueError))
    with budget.using(limit):  # (the keyed states restored below keep it for the job's open())
        return _restore_runtime(runtime, Path(folder), allow_non_restored_state)


def _restore_runtime(runtime, folder: Path, allow_non_restored_state: bool) -> dict[str, Any]:
    meta = read_metadata(folder)
    files = meta.get("files", {})
    deferred = {smeta["file"] for o in meta.get("operators", []) if o.get("keyed")
                for sub in o.get("subtasks", []) if sub.get("state_format") != NATIVE_FORMAT
                for smeta in sub.get("states", [])}
    deferred |= {rel for o in meta.get("operators", []) if o.get("keyed")
                 for sub in o.get("subtasks", []) if sub.get("state_format") == NATIVE_FORMAT
                 for name, rel in sub.get("native", {}).get("files", {}).items() if name.endswith(".sst")}
    background: list[tuple[Path, dict]] = []
    now: list[tuple[str, dict]] = []
    for rel, entry in files.items():
        if rel in deferred:
            background.append((check_file_size(folder, rel, entry), entry))
        else:
            now.append((rel, entry))
    verify_files(folder, now)
    verification = None
    if background:
        big = sum(int(e.get("bytes", 0)) for _, e in background) >= VERIFY_PARALLEL_BYTES
        verification = BackgroundVerification(background, _verify_threads(len(background)) if big else 1)
    runtime.restore_verification = verification
    try:
        return _restore_into(runtime, folder, meta, allow_non_restored_state, verification)
    except BaseException as e:
        # an error of the load may come from a damaged file: the caller awaits the verdict
        # (JobClient reports the checksum error then); interrupted, stop hashing
        if verification is not None and not isinstance(e, Exception):
            verification.cancel()
        raise


#: files verified before or during a restore are hashed by this many threads when they hold this many bytes or more
VERIFY_THREADS = 4
VERIFY_PARALLEL_BYTES = 32 << 20


def _verify_threads(n_files: int) -> int:
    return max(1, min(VERIFY_THREADS, os.cpu_count() or 1, n_files))


def verify_files(folder: Path, files: list[tuple[str, dict]]) -> None:
    """:func:`verify_file` of every ``(relative path, entry)``; large sets are hashed by a few threads at once (hashlib releases the GIL), the first
    damaged file in the given order raising its error as the sequential check would."""
    if sum(int(e.get("bytes", 0)) for _, e in files) < VERIFY_PARALLEL_BYTES or len(files) < 2:
        for rel, entry in files:
            verify_file(folder, rel, entry)
        return
    workers = _verify_threads(len(files))
    with ThreadPoolExecutor(workers, thread_name_prefix="restore-verify") as pool:
        # the largest first, so that the threads finish together
        order = sorted(range(len(files)), key=lambda i: -int(files[i][1].get("bytes", 0)))
        futures = {i: pool.submit(verify_file, folder, *files[i]) for i in order}
        try:
            for i in range(len(files)):
                futures[i].result()
        except BaseException:
            for f in futures.values():
                f.cancel()
            raise


def _restore_into(runtime, folder: Path, meta: dict[str, Any], allow_non_restored_state: bool,
                  verification: BackgroundVerification | None) -> dict[str, Any]:
    old_ops = {o["uid"]: o for o in meta["operators"]}
    new_uids = {spec.uid for spec in runtime.specs}
    missing = sorted(set(old_ops) - new_uids)
    if missing and not allow_non_restored_state:
        raise RestoreError(
            f"{folder}: the snapshot has state for operators {missing} that the job does not have "
            f"(the job's operators: {sorted(new_uids)}); pass allow_non_restored_state=True to drop it"
        )
    for spec in runtime.specs:
        old = old_ops.get(spec.uid)
        if old is None:
            continue
        if spec.keyed and old["keyed"] and old["max_parallelism"] != spec.max_parallelism:
            raise RestoreError(
                f"{folder}: operator {spec.uid!r} was snapshotted with max parallelism {old['max_parallelism']}, "
                f"the job has {spec.max_parallelism}; key groups cannot be remapped"
            )
        subtasks = runtime.tasks[spec.id]
        _restore_operator_state(folder, old, subtasks, runtime.env.record_types)
        if spec.keyed and old["keyed"]:
            for st in subtasks:
                _restore_keyed(folder, old, st, verification)
    runtime.restored_from = folder
    runtime.restored_meta = meta
    runtime.allow_non_restored_state = allow_non_restored_state
    return meta


def _restore_keyed(folder: Path, old: dict, subtask, verification: BackgroundVerification | None) -> None:
    op: KeyedOperatorBase = subtask.operator
    kgr = op.key_groups
    wanted = range(kgr.start, kgr.end + 1)
    by_state: dict[str, list[tuple[str, dict]]] = {}
    native: list[dict] = []
    for sub in old["subtasks"]:
        lo, hi = sub["key_group_range"]
        if hi < kgr.start or lo > kgr.end:
            continue
        if sub.get("state_format") == NATIVE_FORMAT:
            native.append(sub)
        else:
            for smeta in sub["states"]:
                by_state.setdefault(smeta["name"], []).append((smeta["file"], smeta))
        t = sub.get("timers")
        if t:
            _restore_timers(folder, t, op, wanted)
        rec = sub.get("records_per_key_group")
        if rec:
            for i, n in enumerate(rec):
                kg = lo + i
                if kgr.start <= kg <= kgr.end:
                    op.metrics.records[kg - kgr.start] += n
    if native:  # an incremental checkpoint of a RocksDB job
        restore_native_subtask(folder, old, subtask, native)
        return
    descs = {d["name"]: StoredState.of(d) for d in old["states"]}
    for name, files in by_state.items():
        op.backend.restored[name] = RestoredKeyedState(folder, descs[name], files, wanted, verification)
    for name, d in descs.items():  # states with no rows still exist (their declaration is checked)
        op.backend.restored.setdefault(name, RestoredKeyedState(folder, d, [], wanted))


def _restore_timers(folder: Path, tmeta: dict, op: KeyedOperatorBase, wanted: range) -> None:
    t = read_parquet_key_groups(resolve(folder, tmeta["file"]), tmeta["row_groups"], list(wanted))
    keys = decode_keys(t.column("key"), tmeta["key_kind"])
    nss = decode_keys(t.column("namespace"), tmeta["namespace_kind"])
    for kg, key, ns, ts, dom in zip(t.column("key_group").to_pylist(), keys, nss,
                                     t.column("timestamp").to_pylist(), t.column("domain").to_pylist()):
        q = op.event_timers if dom == "event_time" else op.processing_timers
        q.register(ts, key, ns, kg)


def _restore_operator_state(folder: Path, old: dict, subtasks: list, registry: dict[str, type]) -> None:
    per_sub_lists: dict[str, list[list[Any]]] = {}
    modes: dict[str, tuple[OperatorStateMode, dict]] = {}
    broadcast: dict[str, dict[Any, Any]] = {}
    inflight: list[list[dict]] = []
    for sub in sorted(old["subtasks"], key=lambda s: s["index"]):
        rel = sub.get("operator_state")
        if not rel:
            inflight.append([])
            continue
        data = json.loads(resolve(folder, rel).read_text())
        for name, ls in data["lists"].items():
            info = type_from_description(ls["value_type"])
            per_sub_lists.setdefault(name, []).append([info.from_arrow(v) for v in ls["items"]])
            modes[name] = (OperatorStateMode(ls["mode"]), ls["value_type"])
        for name, bs in data["broadcast"].items():
            if name not in broadcast:
                kinfo = type_from_description(bs["key_type"])
                vinfo = type_from_description(bs["value_type"])
                broadcast[name] = {kinfo.from_arrow(k): vinfo.from_arrow(v) for k, v in bs["entries"]}
        inflight.append(data.get("inflight", []))
    p = len(subtasks)
    for name, parts in per_sub_lists.items():
        mode, _ = modes[name]
        for st, items in zip(subtasks, redistribute_list(parts, mode, p)):
            st.operator.operator_state.restored_lists[name] = items
    for st in subtasks:
        for name, entries in broadcast.items():
            st.operator.operator_state.restored_broadcast[name] = dict(entries)
        if isinstance(st.operator, SourceOperator):
            st.operator.operator_state_restored = True
    if any(inflight):
        if len(inflight) != p:
            raise RestoreError(
                f"{folder}: operator {old['uid']!r} has in-flight records of an unaligned checkpoint at parallelism "
                f"{len(inflight)}; restore it at the same parallelism (then take a savepoint to rescale)"
            )

        for st, recs in zip(subtasks, inflight):
            for r in reversed(recs):
                ch = [c for c in st.inputs if c.input_index == 0][0] if r["channel"] >= len(st.inputs) else st.inputs[r["channel"]]
                values = [decode_record(v, registry, str(folder)) for v in r["values"]]
                ch.queue.appendleft(Batch(values, r["timestamps"]))


def check_after_open(runtime) -> None:
    """After ``open()``: every data file checked out (waiting for the background checksum
    checks), and every restored state has been claimed by a descriptor."""
    if getattr(runtime, "restored_from", None) is None:
        return
    verification = getattr(runtime, "restore_verification", None)
    if verification is not None:
        verification.wait()
    for spec in runtime.specs:
        for st in runtime.tasks[spec.id]:
            backend = getattr(st.operator, "backend", None)
            if backend is None or not backend.restored:
                continue
            left = sorted(backend.restored)
            declared = sorted(n for n in backend.tables)
            if runtime.allow_non_restored_state:
                for pending in backend.restored.values():
                    discard = getattr(pending, "discard", None)  # state restored in place (RocksDB files)
                    if discard is not None:
                        discard()
                backend.restored.clear()
                continue
            raise StateMigrationError(
                f"{runtime.restored_from}: operator {spec.uid!r}: the snapshot has state {left} that the job never "
                f"declares (the job declares {declared}); a renamed descriptor loses its state — rename it back, "
                "or pass allow_non_restored_state=True to drop it"
            )


def abort_restore(runtime) -> None:
    """A restore failed (a damaged file, a state that does not fit the job, any error in
    ``open()`` or after): stop the background checks, close the subtasks' state backends
    and remove the RocksDB directories built for them, and the folders created for those
    (``state_dir/rocksdb/``) where empty again, so that no state of a snapshot that did
    not restore remains, no database stays locked in this process, and the state directory
    is as the restore found it (staging folders are removed by the code that made them,
    or by the next backend that opens the directory if this process dies)."""
    verification = getattr(runtime, "restore_verification", None)
    if verification is not None:
        verification.cancel()
    remove_created_dirs([st.operator.backend for st in runtime.subtasks
                         if isinstance(getattr(st.operator, "backend", None), RocksDBStateBackend)])

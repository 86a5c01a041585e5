"""``FlinkSnapshotReader``: Apache Flink savepoints and retained checkpoints, no JVM.

What it opens: a directory holding ``_metadata`` (a savepoint, or one ``chk-N``
of a retained checkpoint), the ``_metadata`` file itself, or a job's checkpoint
directory holding ``chk-N/`` folders (the newest complete one is used).

How keyed state is found, per operator and subtask (see ``metadata``):

==============================  ===============================  ====================
handle in ``_metadata``         written by                       decoded by
==============================  ===============================  ====================
savepoint key groups (type 7)   canonical savepoints, any        ``fullformat``
                                backend
key groups (types 3, 12)        HashMap backend checkpoints and  ``heapformat``
                                native savepoints; RocksDB full  (or ``fullformat``)
                                (non-incremental) checkpoints
incremental (types 5, 11)       RocksDB incremental checkpoints  ``format.sst``
                                and native savepoints
changelog (types 8, 14)         the changelog state backend      ``changelog`` (or, when
                                                                 nothing was logged since
                                                                 materialization, the
                                                                 materialized handle's reader)
==============================  ===============================  ====================

Any stream in these handles may be a file-merging segment (Flink 1.20+: a byte range of a
shared file, ``handles``); ForSt (Flink 2.x) writes RocksDB's SST format with partitioned
indexes (``format.sst``), so its snapshots read like RocksDB's.

Rows follow the public contract (``explorer.readers.base``). ``key_group`` comes
from the files; where the key's Java hash can be reproduced, it is re-computed
with :mod:`explorer.keygroups` and disagreements are counted
(``info().extra["key_group_mismatches"]``) and described in :attr:`notes`.
Flink does not store TTL durations, only each entry's last-access time; pass
``ttl={"state name": timedelta(...)}`` to get ``expires_at``.
"""

from __future__ import annotations

import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from struct import error as struct_error
from typing import Any, Iterable, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ...errors import (
    FlinkCorruptError,
    FlinkFormatError,
    ReaderError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotFormatError,
    SnapshotNotFoundError,
    StateExplorerError,
)
from ...storage import as_path
from ...format.checkpoint_dir import METADATA_NAME, newest_complete
from ...format.sst import columns as sstvec
from ...format.sst.instance import resolve
from ...keygroups import assign_key_groups, key_groups_for_hash_codes, operator_indices_for_key_groups
from ..base import (
    OPERATOR_COLUMNS,
    OPERATOR_STATE_COLUMNS,
    STATE_COLUMNS,
    SUBTASK_COLUMNS,
    TIMESTAMP,
    KeyedStateQuery,
    SnapshotInfo,
    SnapshotReader,
    make_piece,
    piece_value,
    python_values,
)
from . import columnar, fullformat, heapformat
from .changelog import ChangelogState, read_change_sets
from .datainput import DataInput
from .handles import ChangelogHandle, HandleResolver, IncrementalHandle, KeyGroupsHandle
from .metadata import MAGIC, CheckpointMetadata, OperatorState, SubtaskState, read_metadata
from .operatorid import operator_id_for_uid
from .operatorstate import read_operator_state
from .rows import KeyValueDecoder, RowBuffer, hashable_keys, to_arrow
from .serializers import RowDataDecoder, UnknownLayout
from .statemeta import PYFLINK_KINDS, BackendMeta, StateMeta, read_backend_meta

#: what decoding a damaged keyed-state stream raises: the parsers' own errors (with the offset), and
#: Python's for bytes that end early, index past the data or are not UTF-8
#: (ValueError and OverflowError: a damaged length or character code, e.g. ``chr()`` of an impossible one)
_DAMAGED = (EOFError, IndexError, struct_error, UnicodeDecodeError, ValueError, OverflowError, FlinkCorruptError,
            FlinkFormatError)

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def find_metadata(path: Path) -> Path:
    """The ``_metadata`` file ``path`` stands for (see module doc)."""
    path = as_path(path)
    if path.is_file():
        if path.name == "_metadata":
            return path
        raise SnapshotNotFoundError(f"{path}: found a file, expected a Flink '_metadata' file or snapshot folder")
    if not path.is_dir():
        raise SnapshotNotFoundError(f"{path}: no such file or folder")
    if (path / "_metadata").is_file():
        return path / "_metadata"
    newest = newest_complete(path)
    if newest is not None:
        return newest / METADATA_NAME
    raise SnapshotNotFoundError(
        f"{path}: found no '_metadata' file here or in a chk-N folder; expected a Flink savepoint or checkpoint"
    )


class FlinkSnapshotReader(SnapshotReader):
    """An Apache Flink savepoint or retained checkpoint (see module doc)."""

    format_name = "flink"

    def __init__(
        self, path: str | Path, ttl: dict[str, timedelta] | None = None, uids: Iterable[str] | None = None,
        jars: Iterable[str | Path] | None = None, type_hints: dict | None = None, kryo_version: int | None = None,
        pyflink: bool = False, pyflink_kinds: dict[str, str] | None = None,
    ) -> None:
        """``uids``: operator uids of the job, to name operators in metadata that stores only IDs (Flink < 1.20).
        ``jars``, ``type_hints``, ``kryo_version``: what decodes Kryo values (see ``readers.flink.kryo``);
        ``pyflink``: byte arrays are PyFlink-coded (see ``readers.flink.pickles``; states PyFlink names
        ``python-state-*`` are read so anyway, and shown under the name the job gave them);
        ``pyflink_kinds``: the kind each PyFlink Python state was declared as (``{"summary": "value"}``): PyFlink
        keeps value, reducing and aggregating states as list states, and the snapshot does not say which."""
        super().__init__(path)
        self.metadata_file = find_metadata(self.path)
        self.meta: CheckpointMetadata = read_metadata(self.metadata_file)
        self.decode_options = {"jars": list(jars or []), "type_hints": dict(type_hints or {}),
                               "kryo_version": kryo_version, "flink_metadata_version": self.meta.version,
                               "pyflink": pyflink, "pyflink_kinds": dict(pyflink_kinds or {})}
        for name, kind in (pyflink_kinds or {}).items():
            if kind not in PYFLINK_KINDS:
                raise ValueError(f"pyflink_kinds[{name!r}]: found {kind!r}, expected one of {', '.join(PYFLINK_KINDS)}")
        if uids:
            by_id = {operator_id_for_uid(u): u for u in uids}
            for op in self.meta.operators:
                if op.uid is None and op.operator_id in by_id:
                    op.uid = by_id[op.operator_id]
        self.resolver = HandleResolver(self.metadata_file)
        self._changelogs: dict[tuple[str, int], ChangelogState] = {}
        self._unwrap_changelog_handles()
        self.ttl: dict[str, timedelta] = {}
        for name, td in (ttl or {}).items():
            if not isinstance(td, timedelta) or td <= timedelta(0):
                raise ValueError(f"ttl for state {name!r}: found {td!r}, expected a positive datetime.timedelta")
            self.ttl[name] = td
        self._headers: dict[tuple[str, int], BackendMeta] = {}
        self._layouts: dict[tuple[str, int], str] = {}
        self._noted: set[str] = set()
        if self.meta.version < 5:
            unnamed = [op for op in self.meta.operators if op.uid is None and op.name is None
                       and any(st.managed_keyed is not None or st.managed_operator is not None for st in op.subtasks)]
            if not uids:
                self._note(f"{self.metadata_file}: metadata version {self.meta.version} stores no operator names or "
                           "uids; operators are named by OperatorID unless their uids are passed (uids=[...])")
            elif unnamed:
                self._note(f"{self.metadata_file}: metadata version {self.meta.version} stores no operator names or "
                           f"uids; {len(unnamed)} operators with state match none of the uids passed and are named "
                           f"by OperatorID ({', '.join(op.operator_id for op in unnamed[:3])})")
        inflight = sum(st.channel_state_handles for op in self.meta.operators for st in op.subtasks)
        if inflight:
            self._note(f"{self.metadata_file}: an unaligned checkpoint with {inflight} channel state handles "
                       "(records in flight between operators); they are not state and are not read")
        # (operator id, subtask, state id) -> (rows checked, mismatches), from whole-state reads
        self._kg_checks: dict[tuple[str, int, int], tuple[int, int]] = {}
        # the keyed-state headers (small) are read now, so that notes on serializers are there from open() on;
        # a header that cannot be read fails later, where its state is asked for
        for o in self.meta.operators:
            subs = self._keyed_subtasks(o)
            if subs:
                try:
                    header = self._header(o, subs[0])
                except StateExplorerError:
                    continue
                undeclared = [sm.display_name for sm in header.states if sm.is_pyflink_bag and sm.declared_kind is None]
                if undeclared:
                    self._note(f"{self.metadata_file} (operator {o.display_name!r}): PyFlink keeps every Python value, "
                               "list, reducing and aggregating state as a list state and the snapshot does not say "
                               f"which was declared; {', '.join(map(repr, undeclared))} are shown as lists (one row "
                               "per element) unless their kinds are passed: explorer.open(path, pyflink_kinds="
                               f"{{{undeclared[0]!r}: 'value', ...}})")

    def _unwrap_changelog_handles(self) -> None:
        """A changelog handle with nothing logged since its materialization is its materialized handle; one
        with changes is read by ``changelog``, starting from its materialized state if it has one."""
        for op in self.meta.operators:
            for st in op.subtasks:
                h = st.managed_keyed
                if not isinstance(h, ChangelogHandle):
                    continue
                logged = any(p.streams or p.changes for p in h.changelog)
                if len(h.materialized) > 1:
                    raise SnapshotFormatError(
                        f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index}): found a "
                        f"changelog state backend handle with {len(h.materialized)} materialized handles (state "
                        "rescaled since it was materialized); expected one")
                if not logged:
                    st.managed_keyed = h.materialized[0] if h.materialized else None

    @staticmethod
    def _materialized(st: SubtaskState) -> SubtaskState | None:
        """The subtask as its materialized state alone (a changelog handle's), or None."""
        h = st.managed_keyed
        if isinstance(h, ChangelogHandle) and h.materialized:
            return SubtaskState(st.index, managed_keyed=h.materialized[0])
        return None

    # -- detection and metadata ---------------------------------------------------------

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            f = find_metadata(as_path(path))
            with f.open("rb") as fh:
                return int.from_bytes(fh.read(4), "big") == MAGIC
        except (SnapshotError, OSError):
            return False

    @property
    def key_group_mismatches(self) -> int:
        """Rows whose key group in the files differs from :mod:`explorer.keygroups` (so far read)."""
        return sum(m for _, m in self._kg_checks.values())

    def _note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def info(self) -> SnapshotInfo:
        m = self.meta
        is_sp = m.is_savepoint
        fmt = m.savepoint_format
        job_dir = self.resolver.job_dir
        ctype = (m.properties or {}).get("checkpointType") or {}
        extra: dict[str, Any] = {
            "metadata_version": m.version,
            "metadata_file": str(self.metadata_file),
            "savepoint_format": fmt.lower() if fmt else None,
            "checkpoint_type": ctype.get("name") if isinstance(ctype, dict) else None,
            # Flink's _metadata stores no time; a file's modification time is when it was copied, not
            # when the snapshot was taken, so created_at stays unknown (analyses then take "now" from
            # the latest last-access time in the state, or from now=)
            "created_at_source": None,
            "metadata_modified_at": pd.Timestamp(self.metadata_file.stat().st_mtime, unit="s", tz="UTC"),
            "operators_with_keyed_state": sum(1 for o in m.operators if self._keyed_subtasks(o)),
            "backends": {o.display_name: self._backend_name(o) for o in m.operators if self._keyed_subtasks(o)},
            # over the keyed state read so far (all of it once keyed_pieces has run unfiltered)
            "channel_state_handles": sum(st.channel_state_handles for o in m.operators for st in o.subtasks),
            "key_group_mismatches": self.key_group_mismatches,
            "key_group_checked_rows": sum(r for r, _ in self._kg_checks.values()),
        }
        return SnapshotInfo(
            path=self.path,
            format="flink-savepoint" if is_sp else "flink-checkpoint",
            kind="savepoint" if is_sp else "checkpoint",
            checkpoint_id=m.checkpoint_id,
            created_at=None,
            job_id=job_dir.name if _HEX32.match(job_dir.name) else None,
            job_name=None,
            extra=extra,
        )

    @staticmethod
    def _keyed_subtasks(op: OperatorState) -> list[SubtaskState]:
        return [s for s in op.subtasks if s.managed_keyed is not None]

    def _backend_name(self, op: OperatorState) -> str:
        subs = self._keyed_subtasks(op)
        if not subs:
            return "none"
        h = subs[0].managed_keyed
        if isinstance(h, IncrementalHandle):
            return "rocksdb (native)"
        if isinstance(h, ChangelogHandle):
            return "changelog"
        if h.savepoint:
            return "canonical savepoint"
        return {"heap": "hashmap (heap)", "full": "rocksdb (full)"}.get(self._layout(op, subs[0]), "unknown")

    def operators(self) -> pd.DataFrame:
        rows = []
        for o in self.meta.operators:
            keyed = self._keyed_subtasks(o)
            rows.append(
                {
                    "operator": o.display_name,
                    "operator_id": o.operator_id,
                    "uid": o.uid,
                    "parallelism": o.parallelism,
                    "max_parallelism": o.max_parallelism,
                    "name": o.name,
                    "has_keyed_state": bool(keyed),
                    "has_operator_state": any(s.managed_operator is not None for s in o.subtasks),
                    "backend": self._backend_name(o),
                    "finished": o.fully_finished,
                }
            )
        df = pd.DataFrame(rows, columns=list(OPERATOR_COLUMNS) + ["name", "has_keyed_state", "has_operator_state", "backend", "finished"])
        return df

    def _header(self, op: OperatorState, st: SubtaskState) -> BackendMeta:
        key = (op.operator_id, st.index)
        if key not in self._headers and isinstance(st.managed_keyed, ChangelogHandle):
            mat = self._materialized(st)
            if mat is None:
                self._headers[key] = self._changelog(op, st).backend_meta()
            else:  # the materialized state's header, and states first registered in the log after it
                header = self._header_of(op, mat)
                logged = self._changelog(op, st, header)
                known = {sm.name for sm in header.states}
                extra = [sm for sm in logged.backend_meta().states if sm.name not in known]
                states = header.states + [StateMeta(len(header.states) + i, sm.name, sm.backend_type, sm.options,
                                                    sm.serializers, sm.shown_name, sm.declared_kind)
                                          for i, sm in enumerate(extra)]
                self._headers[key] = BackendMeta(header.version, header.compressed, header.key_decoder, states,
                                                 header.end, list(header.notes) + list(logged.notes))
            for n in self._headers[key].notes:
                self._note(n)
        if key not in self._headers:
            self._headers[key] = self._header_of(op, st)
        return self._headers[key]

    def _header_of(self, op: OperatorState, st: SubtaskState) -> BackendMeta:
        """The keyed backend header of a key-groups or incremental handle (read, not cached)."""
        h = st.managed_keyed
        stream = h.meta if isinstance(h, IncrementalHandle) else h.stream
        where = f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index})"
        if stream is None:
            raise SnapshotCorruptError(f"{where}: keyed state handle has no stream")
        present = [o for o in h.offsets if o > 0] if isinstance(h, KeyGroupsHandle) else []
        # the header ends where the first key group starts: read no further
        data = self.resolver.read(stream, min(present) if present else None)
        try:
            header = read_backend_meta(DataInput(data), where, len(data), options=self.decode_options)
        except _DAMAGED as exc:  # (the header's own errors are ReaderErrors that name it)
            raise SnapshotCorruptError(f"{where}: keyed state header is damaged ({exc})") from exc
        for n in header.notes:
            self._note(n)
        return header

    def states(self) -> pd.DataFrame:
        rows = []
        for o in self.meta.operators:
            subs = self._keyed_subtasks(o)
            if not subs:
                continue
            header = self._header(o, subs[0])
            for sm in header.states:
                vdec = sm.value_decoder
                ttl = self._ttl(sm)
                rows.append(
                    {
                        "operator": o.display_name,
                        "state": sm.display_name,
                        "kind": sm.shown_kind,
                        "key_type": header.key_decoder.describe(),
                        "value_type": (sm.element_decoder.describe() if sm.shown_kind != sm.kind and sm.element_decoder
                                       else vdec.describe() if vdec else None),
                        "ttl_ms": int(ttl.total_seconds() * 1000) if (ttl is not None and sm.has_ttl) else None,
                        "update_type": None,  # not stored in Flink snapshots
                        "visibility": None,  # not stored in Flink snapshots
                        "has_ttl": sm.has_ttl,
                        "namespace_type": sm.namespace_decoder.describe() if sm.namespace_decoder else None,
                        "backend_state_type": sm.backend_type,
                    }
                )
        return pd.DataFrame(rows, columns=list(STATE_COLUMNS) + ["has_ttl", "namespace_type", "backend_state_type"])

    def subtasks(self) -> pd.DataFrame:
        rows = []
        for o in self.meta.operators:
            for s in self._keyed_subtasks(o):
                h = s.managed_keyed
                if isinstance(h, IncrementalHandle):
                    start, end, kind = h.start, h.end, "incremental"
                    size = sum(x.size for _, x in h.shared + h.private) + (h.meta.size if h.meta else 0)
                elif isinstance(h, ChangelogHandle):
                    start, end, kind = h.start, h.end, "changelog"
                    size = sum(x.size for p in h.changelog for _, x in p.streams) + sum(
                        len(c) for p in h.changelog for _, c in p.changes)
                else:
                    start, end = h.start, h.end
                    kind = "savepoint-key-groups" if h.savepoint else "key-groups"
                    size = h.stream.size if h.stream else 0
                rows.append(
                    {"operator": o.display_name, "subtask": s.index, "key_group_start": start,
                     "key_group_end": end, "handle": kind, "bytes": size}
                )
        return pd.DataFrame(rows, columns=list(SUBTASK_COLUMNS) + ["handle", "bytes"])

    def stored_files(self) -> pd.DataFrame:
        """Every stored piece this snapshot names, for :func:`explorer.history`: ``operator``, ``file``
        (an identity equal across the retained checkpoints of a job that share it: the file's path
        under the job folder, plus the byte range of a file-merging segment; the ``_metadata`` path for
        the metadata file itself), ``bytes`` (from the metadata, no state file is read) and ``inline``
        (state stored inside ``_metadata``, whose bytes the metadata file's row already counts)."""
        rows = [{"operator": None, "file": str(self.metadata_file), "bytes": self.metadata_file.stat().st_size,
                 "inline": False}]
        job = self.resolver.job_dir.resolve()

        def add(op: OperatorState, h: Any) -> None:
            if h is None:
                return
            if h.kind == "bytes":
                rows.append({"operator": op.display_name, "file": f"{self.metadata_file}:{h.name}",
                             "bytes": int(h.size), "inline": True})
                return
            try:
                path = self.resolver.local_path(h)
                ident = str(path.relative_to(job)) if job in path.parents else str(path)
            except SnapshotError:  # a path outside the snapshot folder: named, never opened
                ident = h.name
            if h.kind == "segment":
                ident += f"@{h.offset}+{h.size}"
            rows.append({"operator": op.display_name, "file": ident, "bytes": int(h.size), "inline": False})

        for op in self.meta.operators:
            for st in op.subtasks:
                for oh in (st.managed_operator, st.raw_operator):
                    if oh is not None:
                        add(op, oh.stream)
                for kh in (st.managed_keyed, st.raw_keyed):
                    if isinstance(kh, KeyGroupsHandle):
                        add(op, kh.stream)
                    elif isinstance(kh, IncrementalHandle):
                        add(op, kh.meta)
                        for _, sh in kh.shared + kh.private:
                            add(op, sh)
                    elif isinstance(kh, ChangelogHandle):  # (a changelog file is named once per subtask)
                        for sh in {id(x): x for p in kh.changelog for _, x in p.streams}.values():
                            add(op, sh)
                        for mh in kh.materialized:
                            if isinstance(mh, KeyGroupsHandle):
                                add(op, mh.stream)
                            else:
                                add(op, mh.meta)
                                for _, sh in mh.shared + mh.private:
                                    add(op, sh)
        return pd.DataFrame(rows, columns=["operator", "file", "bytes", "inline"])

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        return None

    #: bytes a row of keyed state takes at least in Flink's streams (a key and a value length, a key-group
    #: prefix, a value byte): rows estimated from bytes this way are never too few
    MIN_ROW_BYTES = 12

    def key_group_rows(self, query: KeyedStateQuery) -> np.ndarray:
        """Rows per key group ``0..M-1`` (``M`` the largest max parallelism asked), an upper estimate from the
        metadata alone: each key group's bytes in its stream (from the key-group offsets) over
        :data:`MIN_ROW_BYTES`; a RocksDB instance's or a changelog's bytes spread evenly over its range.
        Analyses under a memory budget plan their key-group ranges from it (``analysis._ranges``)."""
        ops = [o for o in self.meta.operators if query.wants_operator(o.display_name) and self._keyed_subtasks(o)]
        out = np.zeros(max([o.max_parallelism for o in ops], default=0), dtype=np.float64)
        for o in ops:
            for st in self._keyed_subtasks(o):
                h = st.managed_keyed
                if isinstance(h, KeyGroupsHandle) and h.stream is not None:
                    present = [off for off in h.offsets if off > 0]
                    size = h.stream.size if h.stream.size >= 0 else 0
                    try:
                        spans = fullformat.key_group_spans(h.offsets, h.start, min(present, default=0), size)
                    except FlinkCorruptError:  # (reported where the state is read)
                        spans = [(h.start, 0, size)]
                    for kg, b, e in spans:
                        if kg < len(out):
                            out[kg] += (e - b) / self.MIN_ROW_BYTES
                    continue
                if isinstance(h, IncrementalHandle):
                    size = sum(x.size for _, x in h.shared + h.private)
                else:  # changelog
                    size = h.checkpointed_size
                lo, hi = h.start, min(h.end, len(out) - 1)
                if hi >= lo:
                    out[lo : hi + 1] += max(size, 0) / self.MIN_ROW_BYTES / (hi - lo + 1)
        return out

    # -- keyed state ----------------------------------------------------------------------

    def _layout(self, op: OperatorState, st: SubtaskState) -> str:
        """'full' or 'heap' for a key-groups handle (a canonical savepoint is always 'full')."""
        h = st.managed_keyed
        if not isinstance(h, KeyGroupsHandle):
            return "rocksdb"
        if h.savepoint or self.meta.savepoint_format == "CANONICAL":
            return "full"
        key = (op.operator_id, st.index)
        if key in self._layouts:
            return self._layouts[key]
        header = self._header(op, st)
        first = [kg for kg, off in enumerate(h.offsets, h.start) if off >= header.end][:1]
        data, spans = self.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end, frozenset(first))
        layout = "full"
        # the heap stream writes every key group and every state; try it on the first one
        for span in spans[:1]:
            try:
                heapformat.read_key_group(data, span, header, lambda sid: None)
                layout = "heap"
            except UnknownLayout:  # cannot finish the trial: the heap stream starts with its key group id
                layout = "heap" if int.from_bytes(data[span[1] : span[1] + 4], "big") == span[0] else "full"
            except (EOFError, IndexError, KeyError, UnicodeDecodeError, FlinkFormatError, FlinkCorruptError):
                # not the heap layout, or a damaged first key group: a heap stream starts every key group
                # with its id, which a full stream's first bytes (a state id, a key length under 64 KiB)
                # can equal only for key group 0
                # (the first bytes of the first 16 key groups with bytes, read by range)
                present = frozenset([kg for kg, off in enumerate(h.offsets, h.start) if off >= header.end][:16])
                data, spans = self.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end, present, head=4)
                ids = [(kg, int.from_bytes(data[s : s + 4], "big")) for kg, s, _ in spans if kg]
                layout = "heap" if ids and all(kg == found for kg, found in ids) else "full"
        self._layouts[key] = layout
        return layout

    #: threads reading subtasks' keyed state side by side (NumPy, Arrow, cramjam and the numba kernels do
    #: most of the work without holding the GIL); 1 reads them one after the other
    workers: int = min(2, os.cpu_count() or 1)

    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator[pa.Table]:
        units = [(op, st) for op in self.meta.operators if query.wants_operator(op.display_name)
                 for st in self._keyed_subtasks(op)]
        if self.workers <= 1 or len(units) <= 1:
            for op, st in units:
                yield from self._with_merged_windows(op, st, query)
            return
        # in order, at most `workers` subtasks in flight (their pieces are held until yielded)
        with ThreadPoolExecutor(self.workers, thread_name_prefix="flink-reader") as pool:
            pending: deque = deque()
            try:
                for op, st in units:
                    pending.append(pool.submit(lambda o=op, s=st: list(self._with_merged_windows(o, s, query))))
                    if len(pending) >= self.workers:
                        yield from pending.popleft().result()
                while pending:
                    yield from pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()

    def _changelog(self, op: OperatorState, st: SubtaskState, header: BackendMeta | None = None) -> ChangelogState:
        """The changes of a changelog handle applied in order (read once per subtask), starting from the
        rows of its materialized state (``header``: that state's header) where it has one."""
        key = (op.operator_id, st.index)
        if key in self._changelogs:
            return self._changelogs[key]
        h = st.managed_keyed
        where = f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index})"
        state = ChangelogState(options=self.decode_options)
        try:
            changes: list[tuple[int, bytes]] = []
            for part in h.changelog:
                changes.extend(part.changes)
                for offset, sh in part.streams:
                    name = sh.name if sh.kind == "bytes" else str(self.resolver.local_path(sh))
                    changes.extend(read_change_sets(self.resolver.read(sh), offset, f"{where}: {name}"))
            for kg, change in changes:  # every state's metadata first: materialized rows are seeded by name
                if kg == -1:
                    state.register(change, where)
            mat = self._materialized(st)
            if mat is not None and header is not None:
                state.key_decoder = header.key_decoder  # (the materialized header names the key serializer)
                self._seed(op, mat, header, state)
            for kg, change in changes:
                if kg != -1:
                    state.apply(kg, change, where)
        except FlinkFormatError as exc:  # a healthy changelog State Explorer cannot read
            raise SnapshotFormatError(f"{where}: {exc}") from exc
        except _DAMAGED as exc:
            raise SnapshotCorruptError(f"{where}: the changelog is damaged ({exc})") from exc
        self._changelogs[key] = state
        return state

    def _seed(self, op: OperatorState, mat: SubtaskState, header: BackendMeta, state: ChangelogState) -> None:
        """Start the logged states from their materialized rows."""
        by_name = {sm.name: sid for sid, sm in state.states.items()}
        names = frozenset(by_name) & {sm.name for sm in header.states}
        if not names:
            return
        # (read with the materialized header; the subtask's header, once built, starts with the same states)
        for piece in self._subtask_pieces(op, mat, KeyedStateQuery(states=names)):
            if not piece.num_rows:
                continue
            cols = {c: piece.column(c).to_pylist() for c in
                    ("state", "key", "key_group", "namespace", "user_key", "value", "last_access", "size_bytes")}
            name = cols["state"][0]
            state.seed(by_name[name], cols)

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
            k = _hashable(keys[i])
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

    def _ttl(self, meta: StateMeta):
        return self.ttl.get(meta.display_name, self.ttl.get(meta.name))

    def _merged_windows(self, op: OperatorState, st: SubtaskState, query: KeyedStateQuery) -> dict:
        """``(key, state window start, end) -> (window start, end)`` from one subtask's merging-window-set."""
        sub = KeyedStateQuery(frozenset([op.display_name]), frozenset([MERGING_WINDOW_SET]), query.key_groups,
                              None, ("key", "value"))
        out = {}
        for p in self._subtask_pieces(op, st, sub):
            for k, v in zip(python_values(p.column("key")), python_values(p.column("value"))):
                try:
                    window, state_window = v["f0"], v["f1"]
                    out[(_hashable(k), state_window["start"], state_window["end"])] = (window["start"], window["end"])
                except (TypeError, KeyError):  # not a Tuple2 of TimeWindows: nothing to map
                    continue
        return out

    def _subtask_pieces(self, op: OperatorState, st: SubtaskState, query: KeyedStateQuery) -> Iterator[pa.Table]:
        header = self._header(op, st)
        wanted = {sm.state_id for sm in header.states if query.wants_state(sm.display_name)}
        if not wanted:
            return
        buffers: dict[int, RowBuffer] = {}  # filled by the heap layout only
        h = st.managed_keyed
        where = f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index})"
        kgs = query.key_groups
        try:
            if isinstance(h, ChangelogHandle):
                changelog = self._changelog(op, st, header if h.materialized else None)
                for n in changelog.notes:
                    self._note(n)
                if h.materialized:  # logged states from the log (seeded), the others as materialized
                    logged = {sm.name: sid for sid, sm in changelog.states.items()}
                    unlogged = frozenset(header.states[sid].display_name for sid in wanted
                                         if header.states[sid].name not in logged)
                    if unlogged:
                        sub = KeyedStateQuery(query.operators, unlogged, query.key_groups, query.keys, query.columns)
                        yield from self._subtask_pieces(op, self._materialized(st), sub)
                    buffers = {sid: changelog.rows(logged[header.states[sid].name], header.states[sid])
                               for sid in wanted if header.states[sid].name in logged}
                else:
                    buffers = changelog.buffers(header, wanted)
                if kgs is not None:
                    buffers = {sid: _only_key_groups(b, kgs) for sid, b in buffers.items()}
            elif isinstance(h, IncrementalHandle):
                yield from self._rocksdb_pieces(op, st, h, header, wanted, query, where)
            else:
                if kgs is not None and not kgs & frozenset(range(h.start, h.end + 1)):
                    return  # (none of the asked key groups is this subtask's: nothing read)
                # only the asked key groups' bytes are read (by range), the whole stream when all are asked
                data, spans = self.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end, kgs)
                if self._layout(op, st) == "heap":
                    buffers = {sid: RowBuffer(header.states[sid]) for sid in wanted}
                    skipped: dict[int, str] = {}
                    lost: list[int] = []
                    for span in spans:
                        try:
                            heapformat.read_key_group(data, span, header, buffers.get, skipped)
                        except UnknownLayout:  # no later state found: the rest of this key group is lost
                            lost.append(span[0])
                    for sid, why in sorted(skipped.items()):
                        self._note(f"{where}: values of state {header.states[sid].name!r} cannot be decoded "
                                   f"({why}); its entries are skipped, the other states are read")
                    if lost:
                        self._note(f"{where}: {len(lost)} key groups (first {lost[0]}) end in values State "
                                   "Explorer cannot decode; their remaining states are skipped")
                else:
                    joined, sids, ks, ke, vs, ve = fullformat.scan(
                        data, spans, header.compressed, 2 if op.max_parallelism > 128 else 1)
                    buf = columnar.Buf(joined)
                    for sid in sorted(wanted):
                        sel = sids == sid
                        yield from self._kv_pieces(op, st, header, sid, buf, ks[sel], ke[sel], vs[sel], ve[sel], query)
        except _DAMAGED as exc:
            stream = getattr(h, "stream", None)  # a key-groups handle's own file, where it has one
            stored = "" if stream is None or stream.kind == "bytes" else f", file {self.resolver.local_path(stream)}"
            raise SnapshotCorruptError(f"{where}{stored}: keyed state is damaged ({exc})") from exc
        for sid in sorted(buffers):
            buf = buffers[sid]
            if buf.raw_notes:
                self._note(f"{where}: {buf.raw_notes} values of state {buf.meta.name!r} use a serializer State "
                           "Explorer cannot decode; they are returned as raw bytes"
                           + (f" ({buf.raw_reason})" if getattr(buf, "raw_reason", None) else ""))
            piece = self._piece(op, st, header, buf, query)
            if piece is not None:
                yield piece

    def _rocksdb_pieces(self, op: OperatorState, st: SubtaskState, h: IncrementalHandle, header: BackendMeta,
                        wanted: set[int], query: KeyedStateQuery, where: str) -> Iterator[pa.Table]:
        """Pieces of one RocksDB instance (its SST files), one per wanted state.

        Flink keeps each state in its own column family, so only the SST files of
        the wanted states are parsed: column-wise (``sstvec``), or entry by entry
        (``format.sst.file`` and ``format.sst.instance.resolve``) where ``sstvec`` does not apply.
        """
        kgs = query.key_groups
        # each SST file named by its RocksDB name and, when it is a file of its own, where it is stored
        # (on a remote store, a file whose column family is another state's is not fetched)
        names = {header.states[sid].name for sid in wanted} if len(wanted) < len(header.states) else None
        prefix = 2 if op.max_parallelism > 128 else 1
        ssts = [(local if sh.kind == "bytes" else f"{local} ({self.resolver.local_path(sh)})", sh)
                for local, sh in h.shared + h.private if local.endswith(".sst")]
        try:
            if kgs is None:
                files = [(name, self.resolver.read(sh)) for name, sh in ssts
                         if names is None or self.resolver.sst_column_family(sh) in (None, *names)]
            else:
                # some key groups: each file's footer, properties and index are read, then only the data blocks
                # whose index keys say they may hold a wanted key group (Flink's keys start with it); a file
                # of another state, or whose blocks all lie outside, gives no block to read
                files = []
                for name, sh in ssts:
                    f = self.resolver.sst_for_key_groups(sh, name)
                    if names is None or (f.column_family or "default") in names:
                        f.only_key_groups(prefix, kgs)
                        files.append((name, f))
            by_cf, stats = sstvec.column_families(files)
        except ValueError as exc:
            raise SnapshotCorruptError(f"{where}: {exc}") from exc
        if stats["range_deletions"]:
            self._note(f"{where}: {stats['range_deletions']} SST files hold range deletions, which are not "
                       "applied; deleted ranges may still show")
        by_name = {header.states[sid].name: sid for sid in wanted}
        key_cache = columnar.KeyCache()  # states with the same keys decode them once
        for cf_name, cf_files in by_cf.items():
            sid = by_name.get(cf_name)
            if sid is None:
                continue
            try:
                cols = self._column_family(cf_files) if self.columnar_sst else None
                if cols is None:
                    cols = _column_family_by_entries(cf_files)
            except ValueError as exc:
                raise SnapshotCorruptError(f"{where}: {exc}") from exc
            values, keys, ks, ke, vs, ve = cols
            if not len(ks):
                continue
            buf = columnar.Buf(keys)
            vbuf = buf if values is keys else columnar.Buf(values)
            head = buf.np[ks[:, None] + np.arange(prefix)].astype(np.int64)
            kg = head[:, 0] if prefix == 1 else (head[:, 0] << 8) | head[:, 1]
            keep = (kg >= h.start) & (kg <= h.end)  # rows outside the range are left over from rescaling
            if kgs is not None:
                keep &= np.isin(kg, np.fromiter(kgs, dtype=np.int64))
            if not keep.all():
                ks, ke, vs, ve = ks[keep], ke[keep], vs[keep], ve[keep]
            yield from self._kv_pieces(op, st, header, sid, buf, ks, ke, vs, ve, query, vbuf,
                                       key_cache if values is not keys else None)

    #: parse SST files column-wise (``sstvec``); False forces the entry-by-entry reader (tests compare both)
    columnar_sst = True

    @staticmethod
    def _column_family(cf_files):
        try:
            values, keys, ks, ke, vs, ve, _ = sstvec.read_column_family(cf_files)
        except sstvec.Unsupported:
            return None
        return values, keys, ks, ke, vs, ve

    def _kv_pieces(self, op, st, header: BackendMeta, sid: int, buf: "columnar.Buf", ks, ke, vs, ve,
                   query: KeyedStateQuery, vbuf: "columnar.Buf | None" = None,
                   key_cache: "columnar.KeyCache | None" = None) -> Iterator[pa.Table]:
        """One piece for one state's key/value entries: column-wise, else row by row.

        ``ks``/``ke`` index ``buf``; ``vs``/``ve`` index ``vbuf`` (default: ``buf``). ``key_cache``: only for
        key buffers zero past each key (``sstvec``'s).
        """
        vbuf = buf if vbuf is None else vbuf
        meta = header.states[sid]
        prefix = 2 if op.max_parallelism > 128 else 1
        try:
            cols = columnar.decode_state(meta, header.key_decoder, prefix, buf, ks, ke, vs, ve,
                                         frozenset(query.columns) if query.columns is not None else None, vbuf,
                                         key_cache)
        except columnar.Fallback:
            cols = None
        if cols is None:
            rb = RowBuffer(meta)
            dec = KeyValueDecoder(meta, header.key_decoder, op.max_parallelism)
            d, vd = bytes(buf.data), bytes(vbuf.data)  # (bytes, not views of arrays, for the row decoders)
            for a, b, c, e in zip(ks.tolist(), ke.tolist(), vs.tolist(), ve.tolist()):
                kb = bytes([d[a] & 0x7F]) + d[a + 1 : b]
                kg = int.from_bytes(kb[:prefix], "big")
                dec.decode(rb, kg, kb, vd[c:e])
            if rb.raw_notes:
                self._note(f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index}): "
                           f"{rb.raw_notes} values of state {meta.name!r} use a serializer State Explorer "
                           "cannot decode; they are returned as raw bytes"
                           + (f" ({rb.raw_reason})" if rb.raw_reason else ""))
            piece = self._piece(op, st, header, rb, query)
        else:
            piece = self._columns_piece(op, st, header, meta, cols, query)
        if piece is not None:
            yield piece

    def _columns_piece(self, op, st, header: BackendMeta, meta, cols: "columnar.StateColumns",
                       query: KeyedStateQuery) -> pa.Table:
        kg = cols.key_group.astype(np.int64)
        n = len(kg)
        if cols.key.codes is not None:
            expected = cols.key.key_groups.get(op.max_parallelism)
            if expected is None:  # (computed once for a key column that several states share)
                expected = cols.key.key_groups[op.max_parallelism] = key_groups_for_hash_codes(
                    cols.key.codes, op.max_parallelism)
            bad = np.flatnonzero(expected != kg)
            if len(bad):
                keys = cols.key.values
                sample = ", ".join(f"{keys[int(i)].as_py()!r}: file {kg[i]}, computed {expected[i]}" for i in bad[:3])
                self._note(f"operator {op.display_name!r}: {len(bad)} rows whose key group in the files differs "
                           f"from explorer.keygroups ({sample})")
            if query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (n, len(bad))
        elif n:
            bad = self._check_key_groups(op, header.key_decoder, cols.key.values.to_pylist(), kg)
            if bad is not None and query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (n, bad)
        subtask = operator_indices_for_key_groups(op.max_parallelism, op.parallelism, kg) if n else kg
        la = pa.array(cols.last_access, type=pa.int64()) if cols.last_access is not None else pa.nulls(n, type=pa.int64())
        ttl = self._ttl(meta)
        if ttl is not None and meta.has_ttl and cols.last_access is not None:
            expires = pa.array(cols.last_access + int(ttl.total_seconds() * 1000), type=pa.int64()).cast(TIMESTAMP)
        else:
            expires = pa.nulls(n, type=TIMESTAMP)
        data = {
            "operator": op.display_name,
            "state": meta.display_name,
            "kind": meta.shown_kind,
            "key": cols.key.values,
            "key_group": pa.array(kg, type=pa.int32()),
            "subtask": pa.array(subtask, type=pa.int32()),
            "namespace": cols.namespace,
            "user_key": cols.user_key,
            "value": cols.value,
            "last_access": la.cast(TIMESTAMP),
            "expires_at": expires,
            "size_bytes": pa.array(cols.size, type=pa.int64()),
        }
        table = make_piece(data, columns=query.columns)
        if query.keys is not None:
            try:
                wanted = pa.array(list(query.keys), type=cols.key.values.type)
                table = table.filter(pc.is_in(cols.key.values, value_set=wanted))
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
                pass
        return table

    def _piece(self, op: OperatorState, st: SubtaskState, header: BackendMeta, buf: RowBuffer,
               query: KeyedStateQuery) -> pa.Table | None:
        meta = buf.meta
        keys = buf.keys
        kdec = header.key_decoder
        if isinstance(kdec, RowDataDecoder) and len(kdec.types) == 1:
            keys = [k["f0"] if isinstance(k, dict) else k for k in keys]
        kg = np.asarray(buf.key_groups, dtype=np.int64)
        if len(keys):
            bad = self._check_key_groups(op, kdec, buf.keys, kg)
            if bad is not None and query.key_groups is None:
                self._kg_checks[(op.operator_id, st.index, meta.state_id)] = (len(kg), bad)
        mask = None
        if query.keys is not None:
            try:
                wanted = set(query.keys)
                mask = np.fromiter((k in wanted for k in keys), dtype=bool, count=len(keys))
            except TypeError:
                mask = None
        subtask = operator_indices_for_key_groups(op.max_parallelism, op.parallelism, kg) if len(kg) else kg
        la = pa.array(buf.last_access, type=pa.int64())
        ttl = self._ttl(meta)
        if ttl is not None and meta.has_ttl:
            ms = int(ttl.total_seconds() * 1000)
            expires = pa.compute.add(la, ms).cast(TIMESTAMP)
        else:
            expires = pa.nulls(len(keys), type=TIMESTAMP)
        data = {
            "operator": op.display_name,
            "state": meta.display_name,
            "kind": meta.shown_kind,
            "key": to_arrow(keys, note=self._column_note(op, meta, "keys")),
            "key_group": pa.array(kg, type=pa.int32()),
            "subtask": pa.array(subtask, type=pa.int32()),
            "namespace": to_arrow(buf.namespaces, note=self._column_note(op, meta, "namespaces")),
            "user_key": to_arrow(buf.user_keys, note=self._column_note(op, meta, "user keys")),
            "value": to_arrow(buf.values, meta.element_decoder.arrow_type() if meta.element_decoder else None,
                              note=self._column_note(op, meta, "values")),
            "last_access": la.cast(TIMESTAMP),
            "expires_at": expires,
            "size_bytes": pa.array(buf.sizes, type=pa.int64()),
        }
        if not len(keys):
            data["key"] = pa.array([], type=pa.null())
        table = make_piece(data, columns=query.columns)
        if mask is not None:
            table = table.filter(pa.array(mask))
        return table

    def _column_note(self, op: OperatorState, meta: StateMeta, what: str):
        return lambda text: self._note(f"{self.metadata_file} (operator {op.display_name!r}): {what} of state "
                                       f"{meta.name!r}: {text}")

    def _check_key_groups(self, op: OperatorState, kdec, keys: list, kg: np.ndarray) -> int | None:
        """Re-compute key groups; the number of mismatches, or None when keys cannot be hashed."""
        hk = hashable_keys(kdec, keys)
        if hk is None:
            self._note(f"operator {op.display_name!r}: keys are {kdec.describe()}, whose Java hash State "
                       "Explorer does not reproduce; key groups are taken from the files unchecked")
            return None
        expected = assign_key_groups(hk, op.max_parallelism)
        bad = np.flatnonzero(expected != kg)
        if len(bad):
            sample = ", ".join(f"{keys[i]!r}: file {kg[i]}, computed {expected[i]}" for i in bad[:3])
            self._note(f"operator {op.display_name!r}: {len(bad)} rows whose key group in the files differs "
                       f"from explorer.keygroups ({sample})")
        return len(bad)

    # -- operator state -------------------------------------------------------------------

    def operator_state(self) -> pd.DataFrame:
        rows = []
        for op in self.meta.operators:
            for st in op.subtasks:
                h = st.managed_operator
                if h is None or h.stream is None:
                    continue
                where = f"{self.metadata_file} (operator {op.display_name!r}, subtask {st.index})"
                try:
                    data = self.resolver.read(h.stream)
                    for r in read_operator_state(data, h, where, self._note):
                        r.update(operator=op.display_name, subtask=st.index)
                        rows.append(r)
                except ReaderError as exc:
                    self._note(str(exc))
        return pd.DataFrame(rows, columns=list(OPERATOR_STATE_COLUMNS))


#: the state in which WindowOperator keeps, per key, the merged windows and their state windows
MERGING_WINDOW_SET = "merging-window-set"


def _one_field_row(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and t.num_fields == 1 and t.field(0).name == "f0"


def _is_time_window(t: pa.DataType) -> bool:
    return pa.types.is_struct(t) and [t.field(i).name for i in range(t.num_fields)] == ["start", "end"]


def _hashable(k):
    try:
        hash(k)
        return k
    except TypeError:
        return repr(k)


def _add_merged_bounds(piece: pa.Table, merged: dict) -> pa.Table:
    ns = piece.column("namespace").combine_chunks()
    starts, ends = ns.field(0).to_pylist(), ns.field(1).to_pylist()
    bounds = [merged.get((_hashable(k), s, e), (None, None)) if s is not None else (None, None)
              for k, s, e in zip(python_values(piece.column("key")), starts, ends)]
    valid = ns.is_valid()
    out = pa.StructArray.from_arrays(
        [ns.field(0), ns.field(1), pa.array([b[0] for b in bounds], type=pa.int64()),
         pa.array([b[1] for b in bounds], type=pa.int64())],
        names=["start", "end", "window_start", "window_end"], mask=pc.invert(valid) if ns.null_count else None)
    return piece.set_column(piece.column_names.index("namespace"), "namespace", out)


def _only_key_groups(buf: RowBuffer, kgs) -> RowBuffer:
    """The rows of ``buf`` in key groups ``kgs``."""
    out = RowBuffer(buf.meta)
    for i, kg in enumerate(buf.key_groups):
        if kg in kgs:
            out.add(kg, buf.keys[i], buf.namespaces[i], buf.user_keys[i], buf.values[i], buf.sizes[i])
            out.last_access[-1] = buf.last_access[i]
    return out


def _column_family_by_entries(cf_files) -> tuple[bytes, bytes, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One column family's visible entries read entry by entry (``format.sst.file``), as byte ranges of one buffer
    (returned twice: as the values' buffer and the keys')."""
    entries = [(e.keys, e.seqs, e.types, e.values) for e in (f.entries() for f in cf_files)]
    keys, values, _ = resolve(entries)
    n = len(keys)
    klen = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    vlen = np.fromiter(map(len, values), dtype=np.int64, count=n)
    both = np.empty(2 * n, dtype=np.int64)
    both[0::2], both[1::2] = klen, vlen
    offs = np.cumsum(both) - both
    ks, vs = offs[0::2].copy(), offs[1::2].copy()
    joined = b"".join([x for pair in zip(keys, values) for x in pair])
    return joined, joined, ks, ks + klen, vs, vs + vlen


"""A Flink snapshot's layout, from ``_metadata`` alone: where it is, its operators, states, subtasks,
stored files, and how many rows each key group may hold.

:func:`find_metadata` finds the ``_metadata`` file a path stands for (a snapshot folder, the file itself,
or a job's checkpoint folder, whose newest complete ``chk-N`` is taken: :mod:`explorer.format.checkpoint_dir`).
:class:`SnapshotLayout` is the part of :class:`~.reader.FlinkSnapshotReader` that answers from the
metadata: ``info``, ``operators``, ``states`` (from the keyed backend headers, ``keyed``), ``subtasks``,
``stored_files`` and ``key_group_rows``; no state stream is read for them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import FlinkCorruptError, SnapshotError, SnapshotFormatError, SnapshotNotFoundError
from ...format.checkpoint_dir import METADATA_NAME, newest_complete
from ...format.untrusted import own_file
from ...storage import as_path
from ..base import OPERATOR_COLUMNS, STATE_COLUMNS, SUBTASK_COLUMNS, KeyedStateQuery, SnapshotInfo
from . import fullformat
from .handles import ChangelogHandle, HandleResolver, IncrementalHandle, KeyGroupsHandle
from .metadata import CheckpointMetadata, OperatorState, SubtaskState
from .notes import Notes

_HEX32 = re.compile(r"^[0-9a-f]{32}$")


def find_metadata(path: str | Path) -> Path:
    """The ``_metadata`` file ``path`` stands for (see module doc)."""
    return metadata_file_in(as_path(path))


def metadata_file_in(path: Path) -> Path:
    """:func:`find_metadata` of a path already made by ``storage.as_path`` (the reader's own)."""
    if path.is_file():
        if path.name == "_metadata":
            return own_file(path.parent, METADATA_NAME)  # (a link out of its folder: refused unread)
        raise SnapshotNotFoundError(f"{path}: found a file, expected a Flink '_metadata' file or snapshot folder")
    if not path.is_dir():
        raise SnapshotNotFoundError(f"{path}: no such file or folder")
    if (path / "_metadata").is_file():
        return own_file(path, METADATA_NAME)
    newest = newest_complete(path)
    if newest is not None:
        return own_file(newest, METADATA_NAME)
    raise SnapshotNotFoundError(
        f"{path}: found no '_metadata' file here or in a chk-N folder; expected a Flink savepoint or checkpoint"
    )


def unwrap_changelog_handles(meta: CheckpointMetadata, metadata_file: Path) -> None:
    """A changelog handle with nothing logged since its materialization is its materialized handle; one
    with changes is read by ``changelog``, starting from its materialized state if it has one."""
    for op in meta.operators:
        for st in op.subtasks:
            h = st.managed_keyed
            if not isinstance(h, ChangelogHandle):
                continue
            logged = any(p.streams or p.changes for p in h.changelog)
            if len(h.materialized) > 1:
                raise SnapshotFormatError(
                    f"{metadata_file} (operator {op.display_name!r}, subtask {st.index}): found a "
                    f"changelog state backend handle with {len(h.materialized)} materialized handles (state "
                    "rescaled since it was materialized); expected one")
            if not logged:
                st.managed_keyed = h.materialized[0] if h.materialized else None


class SnapshotLayout(Notes):
    """What the metadata says (see module doc); a part of ``FlinkSnapshotReader``. ``states`` and the
    backend names take the keyed backend headers and stream layouts from ``keyed`` (``_header``, ``_layout``)."""

    resolver: HandleResolver

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
                    "name_inferred": o.inferred_name is not None and o.display_name == o.inferred_name,
                }
            )
        df = pd.DataFrame(rows, columns=list(OPERATOR_COLUMNS) + ["name", "has_keyed_state", "has_operator_state", "backend", "finished",
                                                               "name_inferred"])
        return df

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

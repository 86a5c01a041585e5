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

:class:`FlinkSnapshotReader` opens the snapshot and is composed of parts, one role each:

=================  ==================================================================
``layout``         the metadata's answers: ``info``, ``operators``, ``states``,
                   ``subtasks``, ``stored_files``, ``key_group_rows``; ``find_metadata``
``keyed``          keyed state subtask by subtask: headers, heap and full streams,
                   changelogs (``keyed_pieces``)
``sstread``        RocksDB instances: their SST files, column-wise or entry by entry
``pieces``         decoded entries to pieces, key groups re-computed and checked
``windows``        merged-window bounds on session windows' namespaces
``pyflinkstates``  PyFlink's Python states as the job declared them
``operatorstate``  operator and broadcast state (``operator_state``)
``notes``          the notes: raw values, undecodable states, what is not read
=================  ==================================================================
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Iterable

from ...errors import SnapshotError, StateExplorerError, UnsafePathError
from ...format.untrusted import Roots
from ...storage import as_path
from .changelog import ChangelogState
from .checks import flink_checks
from .handles import HandleResolver
from .keyed import KeyedReads
from .layout import SnapshotLayout, find_metadata, metadata_file_in, unwrap_changelog_handles
from .metadata import MAGIC, CheckpointMetadata, read_metadata
from .operatorid import infer_operator_name, operator_id_for_uid
from .operatorstate import OperatorStates
from .pieces import Pieces
from .pyflinkstates import PyFlinkStates
from .sstread import SstReads
from .statemeta import PYFLINK_KINDS, BackendMeta
from .windows import MergedWindows

__all__ = ["FlinkSnapshotReader", "find_metadata"]  # (find_metadata lives in layout)


class FlinkSnapshotReader(SnapshotLayout, KeyedReads, MergedWindows, PyFlinkStates, SstReads, Pieces, OperatorStates):
    """An Apache Flink savepoint or retained checkpoint (see module doc): opened here, read by its parts."""

    format_name = "flink"

    def __init__(
        self, path: str | Path, ttl: dict[str, timedelta] | None = None, uids: Iterable[str] | None = None,
        jars: Iterable[str | Path] | None = None, type_hints: dict | None = None, kryo_version: int | None = None,
        pyflink: bool = False, pyflink_kinds: dict[str, str] | None = None, allow_roots: Iterable[str | Path] | None = None,
    ) -> None:
        """``uids``: operator uids of the job, to name operators in metadata that stores only IDs (Flink < 1.20).
        ``jars``, ``type_hints``, ``kryo_version``: what decodes Kryo values (see ``readers.flink.kryo``);
        ``pyflink``: byte arrays are PyFlink-coded (see ``readers.flink.pickles``; states PyFlink names
        ``python-state-*`` are read so anyway, and shown under the name the job gave them);
        ``pyflink_kinds``: the kind each PyFlink Python state was declared as (``{"summary": "value"}``): PyFlink
        keeps value, reducing and aggregating states as list states, and the snapshot does not say which.
        ``allow_roots``: folders beyond the snapshot's own that state files may be read from (the changelog
        backend's ``dstl/`` kept beside the job folder); see ``handles``."""
        super().__init__(path)
        self.metadata_file = metadata_file_in(self.path)  # (self.path: as_path's)
        if self.metadata_file != self.path and self.metadata_file.is_symlink():  # (a folder's _metadata)
            Roots([self.metadata_file.parent], allow_roots).confine(self.metadata_file)
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
        self.resolver = HandleResolver(self.metadata_file, allow_roots)
        self._changelogs: dict[tuple[str, int], ChangelogState] = {}
        unwrap_changelog_handles(self.meta, self.metadata_file)
        self.ttl: dict[str, timedelta] = {}
        for name, td in (ttl or {}).items():
            if not isinstance(td, timedelta) or td <= timedelta(0):
                raise ValueError(f"ttl for state {name!r}: found {td!r}, expected a positive datetime.timedelta")
            self.ttl[name] = td
        self._headers: dict[tuple[str, int], BackendMeta] = {}
        self._layouts: dict[tuple[str, int], str] = {}
        self._noted: set[str] = set()
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
                self._note_undeclared_pyflink(o, header)
                if o.name is None and o.uid is None:
                    self._infer_name(o, header)
        self._note_unread_metadata(uids)

    def _infer_name(self, op, header: BackendMeta) -> None:
        """Names an operator the metadata stores without name or uid by the SQL operator its states are
        (``operatorid.infer_operator_name``), and says so: the name is inferred, not stored."""
        states = [sm.name for sm in header.states]
        name = infer_operator_name(op.operator_id, states)
        if name is None or any(o.display_name == name for o in self.meta.operators):
            return
        op.inferred_name = name
        self._note(f"{self.metadata_file}: operator {op.operator_id} has no name or uid in the metadata; named "
                   f"{name!r} from the states it holds ({', '.join(sorted(s for s in states if not s.startswith('_timer')))}): "
                   "inferred, not stored")

    @classmethod
    def check_files(cls, path: Path, **options) -> list:
        """Every file the metadata names: inside the roots, there, of its size; SST files' checksums (``checks``)."""
        return flink_checks(path, **options)  # normalised at the door (explorer.verify)

    @classmethod
    def detect(cls, path: Path) -> bool:
        try:
            f = metadata_file_in(as_path(path))
            with f.open("rb") as fh:
                return int.from_bytes(fh.read(4), "big") == MAGIC
        except UnsafePathError:
            raise  # a _metadata linking out of the snapshot: said, not passed over as "not Flink"
        except (SnapshotError, OSError):
            return False

"""Keyed state read from a Flink snapshot's streams: the part of :class:`~.reader.FlinkSnapshotReader`
that turns one subtask's keyed-state handle into pieces (``readers.base``).

Per handle (the table in ``reader``'s module doc): a key-groups handle's stream is read by key-group
range (``handles.HandleResolver.read_key_groups``) and decoded as the heap layout (``heapformat``, entry
by entry into a ``rows.RowBuffer``) or the full layout (``fullformat.scan``, column-wise); which of the
two a stream has is tried on its first key group (``_layout``). An incremental handle is RocksDB's SST
files (``sstread``). A changelog handle is its changes applied in order (``changelog``), on top of its
materialized state where it has one. The backend header of each subtask (``statemeta``) is read once.
Subtasks are read side by side by ``workers`` threads; the rows become pieces in ``pieces``.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from struct import error as struct_error
from typing import Iterator

import pyarrow as pa

from ...errors import FlinkCorruptError, FlinkFormatError, SnapshotCorruptError, SnapshotFormatError
from ..base import ConversionFailure, KeyedStateQuery, conversion_error, raised_by_conversion
from . import columnar, fullformat, heapformat
from .changelog import ChangelogState, read_change_sets
from .datainput import DataInput
from .handles import ChangelogHandle, IncrementalHandle, KeyGroupsHandle
from .metadata import OperatorState, SubtaskState
from .notes import Notes
from .rows import RowBuffer
from .serializers import UnknownLayout
from .statemeta import BackendMeta, StateMeta, read_backend_meta

#: what decoding a damaged keyed-state stream raises: the parsers' own errors (with the offset), and
#: Python's for bytes that end early, index past the data or are not UTF-8
#: (ValueError and OverflowError: a damaged length or character code, e.g. ``chr()`` of an impossible one)
_DAMAGED = (EOFError, IndexError, struct_error, UnicodeDecodeError, ValueError, OverflowError, FlinkCorruptError,
            FlinkFormatError)


class KeyedReads(Notes):
    """Keyed state, subtask by subtask (see module doc); a part of ``FlinkSnapshotReader``."""

    decode_options: dict
    _headers: dict[tuple[str, int], BackendMeta]
    _layouts: dict[tuple[str, int], str]
    _changelogs: dict[tuple[str, int], ChangelogState]

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
                    pending.append(pool.submit(copy_context().run,  # the memory budget goes along (format.budget)
                                              lambda o=op, s=st: list(self._with_merged_windows(o, s, query))))
                    if len(pending) >= self.workers:
                        yield from pending.popleft().result()
                while pending:
                    yield from pending.popleft().result()
            finally:
                for f in pending:
                    f.cancel()

    def keyed_header(self, op: OperatorState, st: SubtaskState) -> BackendMeta:
        """The keyed backend header of one subtask's keyed state (read once, then cached)."""
        return self._header(op, st)

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

    @staticmethod
    def _materialized(st: SubtaskState) -> SubtaskState | None:
        """The subtask as its materialized state alone (a changelog handle's), or None."""
        h = st.managed_keyed
        if isinstance(h, ChangelogHandle) and h.materialized:
            return SubtaskState(st.index, managed_keyed=h.materialized[0])
        return None

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
                    self._note_skipped(where, header, skipped, lost)
                else:
                    joined, sids, ks, ke, vs, ve = fullformat.scan(
                        data, spans, header.compressed, 2 if op.max_parallelism > 128 else 1)
                    buf = columnar.Buf(joined)
                    for sid in sorted(wanted):
                        sel = sids == sid
                        yield from self._kv_pieces(op, st, header, sid, buf, ks[sel], ke[sel], vs[sel], ve[sel], query)
        except ConversionFailure as exc:
            raise conversion_error(exc, f"{where}, state(s) {_names(header, wanted)}") from exc
        except _DAMAGED as exc:
            if raised_by_conversion(exc):
                raise conversion_error(exc, f"{where}, state(s) {_names(header, wanted)}") from exc
            stream = getattr(h, "stream", None)  # a key-groups handle's own file, where it has one
            stored = "" if stream is None or stream.kind == "bytes" else f", file {self.resolver.local_path(stream)}"
            raise SnapshotCorruptError(f"{where}{stored}: keyed state is damaged ({exc})") from exc
        for sid in sorted(buffers):
            buf = buffers[sid]
            self._note_raw_values(where, buf)
            piece = self._piece(op, st, header, buf, query)
            if piece is not None:
                yield piece


def _names(header: BackendMeta, sids) -> str:
    return ", ".join(repr(header.states[sid].display_name) for sid in sorted(sids))


def _only_key_groups(buf: RowBuffer, kgs) -> RowBuffer:
    """The rows of ``buf`` in key groups ``kgs``."""
    out = RowBuffer(buf.meta)
    for i, kg in enumerate(buf.key_groups):
        if kg in kgs:
            out.add(kg, buf.keys[i], buf.namespaces[i], buf.user_keys[i], buf.values[i], buf.sizes[i])
            out.last_access[-1] = buf.last_access[i]
    return out

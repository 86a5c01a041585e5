"""What the Flink reader tells the user besides the rows: its notes (``reader.notes``).

A value State Explorer cannot decode stays raw bytes and a note says what would decode it; a
state whose values cannot be decoded at all is skipped with a note, and the other states are read
(DESIGN.md, "Real state, not only our own"). Each note is said once, in the order first met.

:class:`Notes` is the base of every part of :class:`~.reader.FlinkSnapshotReader` (``layout``,
``keyed``, ``sstread``, ``pieces``, ``windows``, ``pyflinkstates``). The parts subclass
:class:`~explorer.readers.base.SnapshotReader` through it so that the error boundary wraps the
reader methods each part defines (``SnapshotReader.__init_subclass__`` wraps a class's own
methods only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable

from ..base import SnapshotReader
from .metadata import CheckpointMetadata, OperatorState
from .rows import RowBuffer
from .statemeta import BackendMeta, StateMeta


class Notes(SnapshotReader):
    """The notes of a Flink reader, each said once (see module doc)."""

    metadata_file: Path
    meta: CheckpointMetadata
    _noted: set[str]

    def _note(self, text: str) -> None:
        if text not in self._noted:
            self._noted.add(text)
            self.notes.append(text)

    def _column_note(self, op: OperatorState, meta: StateMeta, what: str) -> Callable[[str], None]:
        return lambda text: self._note(f"{self.metadata_file} (operator {op.display_name!r}): {what} of state "
                                       f"{meta.name!r}: {text}")

    def _note_raw_values(self, where: str, buf: RowBuffer) -> None:
        """``buf``'s values that stayed raw bytes: how many, of which state, and what would decode them."""
        if buf.raw_notes:
            self._note(f"{where}: {buf.raw_notes} values of state {buf.meta.name!r} use a serializer State "
                       "Explorer cannot decode; they are returned as raw bytes"
                       + (f" ({buf.raw_reason})" if getattr(buf, "raw_reason", None) else ""))

    def _note_skipped(self, where: str, header: BackendMeta, skipped: dict[int, str], lost: list[int]) -> None:
        """A heap stream's states whose values cannot be decoded (skipped), and key groups whose rest was lost."""
        for sid, why in sorted(skipped.items()):
            self._note(f"{where}: values of state {header.states[sid].name!r} cannot be decoded "
                       f"({why}); its entries are skipped, the other states are read")
        if lost:
            self._note(f"{where}: {len(lost)} key groups (first {lost[0]}) end in values State "
                       "Explorer cannot decode; their remaining states are skipped")

    def _note_unread_metadata(self, uids: Iterable[str] | None) -> None:
        """What ``_metadata`` holds that is not read: operator names older metadata does not store, and
        records in flight of an unaligned checkpoint."""
        if self.meta.version < 5:
            unnamed = [op for op in self.meta.operators if op.uid is None and op.name is None and op.inferred_name is None
                       and any(st.managed_keyed is not None or st.managed_operator is not None for st in op.subtasks)]
            if not uids:
                self._note(f"{self.metadata_file}: metadata version {self.meta.version} stores no operator names or "
                           "uids; operators are named by OperatorID unless their uids are passed (uids=[...]), "
                           "SQL operators by the states they hold (inferred)")
            elif unnamed:
                self._note(f"{self.metadata_file}: metadata version {self.meta.version} stores no operator names or "
                           f"uids; {len(unnamed)} operators with state match none of the uids passed and are named "
                           f"by OperatorID ({', '.join(op.operator_id for op in unnamed[:3])})")
        inflight = sum(st.channel_state_handles for op in self.meta.operators for st in op.subtasks)
        if inflight:
            self._note(f"{self.metadata_file}: an unaligned checkpoint with {inflight} channel state handles "
                       "(records in flight between operators); they are not state and are not read")

    def _note_undeclared_pyflink(self, op: OperatorState, header: BackendMeta) -> None:
        """PyFlink states shown as lists because the job's declared kinds were not passed."""
        undeclared = [sm.display_name for sm in header.states if sm.is_pyflink_bag and sm.declared_kind is None]
        if undeclared:
            self._note(f"{self.metadata_file} (operator {op.display_name!r}): PyFlink keeps every Python value, "
                       "list, reducing and aggregating state as a list state and the snapshot does not say "
                       f"which was declared; {', '.join(map(repr, undeclared))} are shown as lists (one row "
                       "per element) unless their kinds are passed: explorer.open(path, pyflink_kinds="
                       f"{{{undeclared[0]!r}: 'value', ...}})")

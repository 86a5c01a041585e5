"""Operator (non-keyed) state: list, union and broadcast state of one subtask.

The stream starts with an ``OperatorBackendSerializationProxy``::

    int   version (6 in Flink 1.15 .. 2.x)
    bool  compressed                   (version 6+)
    short n operator states, each a state meta info (as in ``statemeta``:
          name, type 1, options incl. OPERATOR_STATE_DISTRIBUTION_MODE, serializers)
    short n broadcast states, each the same (type 2, KEY_ and VALUE_SERIALIZER)

The metadata's operator-state handle gives, per state name, the distribution
mode and the byte offset of every element of a list/union state; each element
is written there with the state's value serializer. A broadcast state's single
offset points at ``int n`` and ``n`` (key, value) pairs.

With snapshot compression, the data after the header is Snappy-framed and
Flink flushes the compressor before recording each offset, so every offset
starts a run of frames that decodes to exactly what it points at.

:class:`OperatorStates` is the part of :class:`~.reader.FlinkSnapshotReader` that reads every
subtask's operator-state stream into ``operator_state()``'s rows; a stream that cannot be read
is a note, and the others are read. A source operator's ``SourceReaderState`` elements are decoded
as source splits where their layout is known (:mod:`.splits`), else left raw with a note.
"""

from __future__ import annotations

from typing import Any, Callable

import pandas as pd

from ...errors import ReaderError
from ..base import OPERATOR_STATE_COLUMNS
from .compression import unframe
from .datainput import DataInput
from .handles import HandleResolver, OperatorStreamHandle
from .notes import Notes
from .splits import SOURCE_READER_STATE, decode_split
from .serializers import Decoder, RawDecoder, UnknownLayout, UnknownSnapshot, read_top_level_snapshot

_MODES = {"SPLIT_DISTRIBUTE": "split", "UNION": "union", "BROADCAST": "broadcast"}


def _read_infos(inp: DataInput, n: int) -> dict[str, dict[str, Decoder]]:
    out = {}
    for _ in range(n):
        name = inp.read_utf()
        inp.read_int()  # backend state type
        for _ in range(inp.read_int()):
            inp.read_utf()
            inp.read_utf()
        sers: dict[str, Decoder] = {}
        for _ in range(inp.read_int()):
            key = inp.read_utf()
            try:
                sers[key] = read_top_level_snapshot(inp)
            except UnknownSnapshot as exc:
                sers[key] = RawDecoder(exc.class_name)
                raise _Stop(name, exc.class_name) from exc
        out[name] = sers
    return out


class _Stop(Exception):
    def __init__(self, state: str, cls: str) -> None:
        super().__init__(state, cls)
        self.state, self.cls = state, cls


def read_operator_state(
    data: bytes, handle: OperatorStreamHandle, where: str, note: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Rows (state, mode, user_key, value, size_bytes) of one subtask's operator state."""
    inp = DataInput(data)
    try:
        version = inp.read_int()
        compressed = inp.read_bool() if version >= 6 else False
        try:
            infos = _read_infos(inp, inp.read_short())
            infos.update(_read_infos(inp, inp.read_short()))
        except _Stop as stop:
            note(f"{where}: operator state {stop.state!r} uses serializer {stop.cls}, which State Explorer "
                 "cannot decode; operator state of this subtask is skipped")
            return []
    except EOFError as exc:
        raise ReaderError(f"{where}: operator state header ends early ({exc})") from exc
    ends: dict[int, int] = {}
    if compressed:
        starts = sorted({o for _, offs in handle.states.values() for o in offs})
        ends = {o: (starts[i + 1] if i + 1 < len(starts) else len(data)) for i, o in enumerate(starts)}

    def at(off: int) -> DataInput:
        if not compressed:
            return DataInput(data, off)
        return DataInput(unframe(data, off, ends[off]))

    rows: list[dict[str, Any]] = []
    for name, (mode, offsets) in handle.states.items():
        sers = infos.get(name, {})
        m = _MODES.get(mode, mode.lower())
        try:
            if m == "broadcast":
                kdec, vdec = sers.get("KEY_SERIALIZER"), sers.get("VALUE_SERIALIZER")
                for off in offsets[:1]:
                    e = at(off)
                    for _ in range(e.read_int()):
                        s = e.pos
                        k = kdec.read(e)
                        v = vdec.read(e)
                        rows.append({"state": name, "mode": m, "user_key": k, "value": v, "size_bytes": e.pos - s})
            else:
                vdec = sers.get("VALUE_SERIALIZER")
                for i, off in enumerate(offsets):
                    e = at(off)
                    start = e.pos
                    v = vdec.read(e)
                    rows.append({"state": name, "mode": m, "user_key": i, "value": v, "size_bytes": e.pos - start})
        except (UnknownLayout, AttributeError, EOFError, ValueError) as exc:
            note(f"{where}: operator state {name!r} could not be decoded ({exc}); skipped")
    return rows


class OperatorStates(Notes):
    """Operator and broadcast state of every subtask (see module doc); a part of ``FlinkSnapshotReader``."""

    resolver: HandleResolver

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
                        if r["state"] == SOURCE_READER_STATE and isinstance(r["value"], (bytes, bytearray)):
                            r["value"], why = decode_split(bytes(r["value"]))
                            if why:
                                self._note(f"{self.metadata_file} (operator {op.display_name!r}): source split "
                                           f"state {SOURCE_READER_STATE!r} holds a split State Explorer cannot "
                                           f"decode: {why}")
                        rows.append(r)
                except ReaderError as exc:
                    self._note(str(exc))
        return pd.DataFrame(rows, columns=list(OPERATOR_STATE_COLUMNS))

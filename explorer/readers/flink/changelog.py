"""The changelog state backend's log (Flink 1.15+, ``state.changelog.enabled``), read and applied.

A changelog handle in ``_metadata`` (see ``metadata``) lists change sets: inline,
or at an offset of a file of the changelog storage (``shared/changelog/<job>/dstl/``).
Such a file starts with one byte, 1 when what follows is Snappy-compressed (not
supported here), and offsets count from the byte after it. A change set::

    int   number of key-group groups, each:
          int   number of changes, int key group (-1: state metadata, first)
          per change: int length, that many bytes

A *metadata* change (key group -1) registers a state::

    byte  8 or 9 (METADATA)              int   meta info snapshot version
    state meta info snapshot             (utf name, int backend type, options, serializers:
                                         as in the keyed backend header, ``statemeta``)
    [key/value states: byte has-TTL, byte has-default-value (only "no" is read)]
    short state id                       byte  backend type (0 key/value, 3 priority queue)

A *data* change: ``byte operation, short state id``, then for key/value states
the scope (key, namespace, each with its serializer) and the operation's bytes;
for timers the timer elements (``int count`` + elements for ADD_ELEMENT, one
element for REMOVE_ELEMENT). Operations: 0 CLEAR, 1 SET, 2 SET_INTERNAL, 3 ADD
(a whole value, a list's elements appended), 4 MERGE_NS (not supported), 5
ADD_ELEMENT (list element, timers), 6 ADD_OR_UPDATE_ELEMENT (map user key and
value), 7 REMOVE_ELEMENT (map user key, timer).

The changes are decoded and applied in order to the entries they name (by their
decoded key, namespace and user key), starting from the rows of the materialized
state when the handle has one (the reader seeds the states the log names; the
others are read as materialized). Flink logs no key serializer (the job supplies
it on restore): the key type is the materialized header's, else the one inside
the operator's timer serializer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ...errors import FlinkCorruptError, FlinkFormatError
from .datainput import DataInput
from .rows import RowBuffer
from .serializers import (
    Decoder,
    ListDecoder,
    MapDecoder,
    RawDecoder,
    TimerDecoder,
    TtlValue,
    UnknownLayout,
    UnknownSnapshot,
    read_top_level_snapshot,
)
from .statemeta import BACKEND_STATE_TYPES, PYTHON_STATE_PREFIX, BackendMeta, StateMeta

META_KEY_GROUP = -1
METADATA_CODES = (8, 9)
CLEAR, SET, SET_INTERNAL, ADD, MERGE_NS, ADD_ELEMENT, ADD_OR_UPDATE_ELEMENT, REMOVE_ELEMENT = range(8)


def read_change_sets(data: bytes, offset: int, where: str) -> list[tuple[int, bytes]]:
    """The (key group, change) pairs of the change set at ``offset`` of changelog file ``data``."""
    if not data:
        raise FlinkCorruptError(f"{where}: found an empty changelog file, expected a compression flag and changes")
    if data[0] not in (0, 1):
        raise FlinkFormatError(f"{where}: found changelog compression flag {data[0]}, expected 0 or 1")
    if data[0] == 1:
        raise FlinkFormatError(f"{where}: the changelog file is compressed; State Explorer reads uncompressed "
                               "changelogs (dstl.dfs.compression.enabled: false, Flink's default)")
    inp = DataInput(data, 1 + offset)
    out = []
    try:
        groups = inp.read_int()
        if groups < 0:
            raise FlinkCorruptError(f"{where}: found {groups} key-group groups at offset {offset}, expected >= 0")
        for _ in range(groups):
            n, kg = inp.read_int(), inp.read_int()
            if n < 0:
                raise FlinkCorruptError(f"{where}: found {n} changes in key group {kg}, expected >= 0")
            for _ in range(n):
                size = inp.read_int()
                if size < 0 or size > len(data) - inp.pos:
                    raise FlinkCorruptError(f"{where}: found a change of {size} bytes at offset {inp.pos}, "
                                            f"expected 0 to {len(data) - inp.pos}")
                out.append((kg, inp.read_bytes(size)))
    except EOFError as exc:
        raise FlinkCorruptError(f"{where}: changelog ends early at byte {inp.pos} ({exc})") from exc
    return out


@dataclass
class _Entry:
    kg: int
    key: Any
    ns: Any
    # a value state: one _Value; a list: list of _Value; a map: canonical user key -> (user key, _Value)
    value: Any = None


@dataclass
class _Value:
    value: Any  # decoded (raw bytes when its serializer cannot read it)
    size: int
    last_access: int | None = None
    raw: bool = False  # its serializer could not decode it: the bytes as stored


@dataclass
class ChangelogState:
    """The state a changelog leaves: registered states and their entries after every change, keyed by
    their decoded key, namespace (and user key), so that rows of materialized state can be the start."""

    states: dict[int, StateMeta] = field(default_factory=dict)
    entries: dict[int, dict[Any, _Entry]] = field(default_factory=dict)
    timers: dict[int, dict[Any, tuple[int, int, Any, Any, int]]] = field(default_factory=dict)
    key_decoder: Decoder | None = None
    notes: list[str] = field(default_factory=list)
    #: states whose changes could not be decoded (state id -> why): left out, with a note
    broken: dict[int, str] = field(default_factory=dict)
    #: per state id: why the first value its serializer could not decode was kept raw
    raw_reasons: dict[int, str] = field(default_factory=dict)
    #: the user's decoding options (``explorer.open(..., jars=, type_hints=, pyflink=)``), as for snapshot headers
    options: dict[str, Any] = field(default_factory=dict)

    def register(self, change: bytes, where: str) -> None:
        inp = DataInput(change, 1)
        inp.read_int()  # meta info snapshot version
        name = inp.read_utf()
        t = inp.read_int()
        options = {}
        for _ in range(inp.read_int()):
            k = inp.read_utf()
            options[k] = inp.read_utf()
        sid = int.from_bytes(change[-3:-1], "big", signed=True)
        meta = StateMeta(sid, name, BACKEND_STATE_TYPES[t] if 0 <= t < 4 else f"TYPE_{t}", options)
        decode = self.options
        if name.startswith(PYTHON_STATE_PREFIX) and len(name) > len(PYTHON_STATE_PREFIX):  # as read_backend_meta
            meta.shown_name = name[len(PYTHON_STATE_PREFIX):]
            meta.declared_kind = dict(self.options.get("pyflink_kinds") or {}).get(meta.shown_name)
            decode = {**self.options, "pyflink": True, "pyflink_records": meta.kind == "list"}
        for _ in range(inp.read_int()):
            key = inp.read_utf()
            try:
                meta.serializers[key] = read_top_level_snapshot(inp, decode)
            except UnknownSnapshot as exc:
                meta.serializers[key] = RawDecoder(exc.class_name)
                self.notes.append(f"{where}: state {name!r} uses serializer {exc.class_name}, which State Explorer "
                                  "cannot decode; its changes are not applied")
                break
        if meta.backend_type == "KEY_VALUE" and inp.pos + 5 == len(change) and any(change[inp.pos : inp.pos + 2]):
            self.notes.append(f"{where}: state {name!r} has a TTL or default value in the changelog; they are "
                              "not read")
        self.states[sid] = meta
        vdec = meta.value_decoder
        if isinstance(vdec, TimerDecoder) and self.key_decoder is None:
            self.key_decoder = vdec.key

    def seed(self, sid: int, rows: dict[str, list]) -> None:
        """Start state ``sid`` from materialized rows (columns of the row contract, as Python lists)."""
        meta = self.states[sid]
        vdec = meta.value_decoder
        n = len(rows["key"])
        if meta.is_timer:
            table = self.timers.setdefault(sid, {})
            for i in range(n):
                ts, key, ns = rows["value"][i], rows["key"][i], rows["namespace"][i]
                table[_canon((ts, key, ns))] = (rows["key_group"][i], ts, key, ns, rows["size_bytes"][i])
            return
        table = self.entries.setdefault(sid, {})
        for i in range(n):
            key, ns = rows["key"][i], rows["namespace"][i]
            scope = _canon((key, ns))
            v = _Value(rows["value"][i], rows["size_bytes"][i], _epoch_ms(rows["last_access"][i]))
            if _is_list(meta, vdec):
                table.setdefault(scope, _Entry(rows["key_group"][i], key, ns, [])).value.append(v)
            elif _is_map(meta, vdec):
                uk = rows["user_key"][i]
                table.setdefault(scope, _Entry(rows["key_group"][i], key, ns, {})).value[_canon(uk)] = (uk, v)
            else:
                table[scope] = _Entry(rows["key_group"][i], key, ns, v)

    def apply(self, kg: int, change: bytes, where: str = "") -> None:
        inp = DataInput(change)
        op = inp.read_ubyte()
        sid = inp.read_short()
        meta = self.states.get(sid)
        if meta is None:
            raise FlinkCorruptError(f"found a change of state id {sid} before that state's metadata, expected "
                                    f"one of the registered ids {sorted(self.states)}")
        vdec = meta.value_decoder
        if isinstance(vdec, RawDecoder) or vdec is None or sid in self.broken:
            return
        try:
            self._apply(kg, sid, meta, vdec, op, inp, change)
        except UnknownLayout as exc:  # a key or namespace its serializer cannot read: the state's later changes
            self.broken[sid] = str(exc)  # cannot be applied either (each builds on the last): left out
            self.notes.append(f"{where}: a change of state {meta.name!r} cannot be decoded ({exc}); the state's "
                              "entries are left out")

    def _decode(self, dec: Decoder, data: bytes, sid: int) -> _Value:
        try:
            v = dec.read(DataInput(data))
        except (UnknownLayout, EOFError, IndexError, UnicodeDecodeError, FlinkFormatError, FlinkCorruptError) as exc:
            self.raw_reasons.setdefault(sid, str(exc))
            return _Value(bytes(data), len(data), raw=True)
        if type(v) is TtlValue:
            return _Value(v.value, len(data), v.last_access)
        return _Value(v, len(data))

    def _apply(self, kg: int, sid: int, meta: StateMeta, vdec: Decoder, op: int, inp: DataInput,
               change: bytes) -> None:
        if meta.is_timer:
            self._apply_timer(kg, sid, op, inp, vdec)
            return
        if self.key_decoder is None:
            raise FlinkFormatError(f"state {meta.name!r}: the changelog names no key serializer (the operator "
                                   "has no timers, whose serializer holds it)")
        key = self.key_decoder.read(inp)
        nsdec = meta.namespace_decoder
        ns = nsdec.read(inp) if nsdec is not None else None
        scope = _canon((key, ns))
        table = self.entries.setdefault(sid, {})
        if op == CLEAR:
            table.pop(scope, None)
            return
        payload = change[inp.pos :]
        if _is_list(meta, vdec):
            e = table.setdefault(scope, _Entry(kg, key, ns, []))
            if op in (SET, SET_INTERNAL):
                e.value = [self._decode(vdec.elem, b, sid) for b in _split_list(vdec, payload)]
            elif op == ADD:
                e.value.extend(self._decode(vdec.elem, b, sid) for b in _split_list(vdec, payload))
            elif op == ADD_ELEMENT:
                e.value.append(self._decode(vdec.elem, payload, sid))
            else:
                raise FlinkFormatError(f"state {meta.name!r}: list state change {op} is not supported")
        elif _is_map(meta, vdec):
            e = table.setdefault(scope, _Entry(kg, key, ns, {}))
            if op in (SET, SET_INTERNAL):
                e.value = {_canon(uk): (uk, _Value(None, 0) if b is None else self._decode(vdec.value, b, sid))
                           for uk, b in _split_map(vdec, payload).values()}
            elif op == ADD_OR_UPDATE_ELEMENT:  # user key and value, no null flag
                p = DataInput(payload)
                uk = vdec.key.read(p)
                e.value[_canon(uk)] = (uk, self._decode(vdec.value, payload[p.pos :], sid))
            elif op == REMOVE_ELEMENT:
                e.value.pop(_canon(vdec.key.read(DataInput(payload))), None)
            else:
                raise FlinkFormatError(f"state {meta.name!r}: map state change {op} is not supported")
        elif op in (SET, SET_INTERNAL, ADD):
            table[scope] = _Entry(kg, key, ns, self._decode(vdec, payload, sid))
        else:
            raise FlinkFormatError(f"state {meta.name!r}: change {op} of a {meta.kind} state is not supported")

    def _apply_timer(self, kg: int, sid: int, op: int, inp: DataInput, vdec: TimerDecoder) -> None:
        table = self.timers.setdefault(sid, {})
        if op == CLEAR:
            table.clear()
            return
        n = inp.read_int() if op == ADD_ELEMENT else 1
        for _ in range(n):
            s = inp.pos
            ts, key, ns = vdec.read(inp)
            if op == ADD_ELEMENT:
                table[_canon((ts, key, ns))] = (kg, ts, key, ns, inp.pos - s)
            elif op == REMOVE_ELEMENT:
                table.pop(_canon((ts, key, ns)), None)
            else:
                raise FlinkFormatError(f"timer change {op} is not supported")

    def backend_meta(self) -> BackendMeta:
        ids = sorted(self.states)
        # rows.RowBuffer and the reader look states up by their position: give them dense ids
        metas = [StateMeta(i, self.states[s].name, self.states[s].backend_type, self.states[s].options,
                           self.states[s].serializers, self.states[s].shown_name, self.states[s].declared_kind)
                 for i, s in enumerate(ids)]
        key = self.key_decoder or RawDecoder("key serializer (not in the changelog)")
        return BackendMeta(0, False, key, metas, 0, list(self.notes))

    def buffers(self, header: BackendMeta, wanted: Iterable[int]) -> dict[int, RowBuffer]:
        """Rows of the wanted states (dense ids of :meth:`backend_meta`)."""
        ids = sorted(self.states)
        out = {}
        for i in wanted:
            out[i] = self.rows(ids[i], header.states[i])
        return out

    def rows(self, sid: int, meta: StateMeta) -> RowBuffer:
        """The rows state ``sid`` holds after every change, described by ``meta``."""
        buf = RowBuffer(meta)
        buf.raw_reason = self.raw_reasons.get(sid)  # (raw_notes: counted below, over the values left)
        vdec = self.states[sid].value_decoder
        if sid in self.broken:
            return buf
        if self.states[sid].is_timer:
            for kg, ts, key, ns, size in self.timers.get(sid, {}).values():
                buf.add(kg, key, ns, None, ts, size)
            return buf

        def add(e: _Entry, uk: Any, v: _Value) -> None:
            buf.add(e.kg, e.key, e.ns, uk, v.value, v.size)
            buf.last_access[-1] = v.last_access
            buf.raw_notes += v.raw

        stored = self.states[sid]
        for e in self.entries.get(sid, {}).values():
            if _is_list(stored, vdec):
                for j, v in enumerate(e.value):
                    add(e, j, v)
            elif _is_map(stored, vdec):
                for uk, v in e.value.values():
                    add(e, uk, v)
            else:
                add(e, None, e.value)
        return buf


def _is_list(meta: StateMeta, vdec: Decoder | None) -> bool:
    """A list state (one entry per element); a value state whose type is a List is one whole value."""
    return meta.kind == "list" and isinstance(vdec, ListDecoder)


def _is_map(meta: StateMeta, vdec: Decoder | None) -> bool:
    return meta.kind == "map" and isinstance(vdec, MapDecoder)


def _canon(x: Any) -> Any:
    """A hashable stand-in for a decoded value, equal for equal values (dicts and lists included)."""
    if isinstance(x, dict):
        return ("{", tuple(sorted(((str(k), _canon(v)) for k, v in x.items()), key=lambda kv: kv[0])))
    if isinstance(x, (list, tuple)):
        return ("[", tuple(_canon(v) for v in x))
    try:
        hash(x)
        return x
    except TypeError:
        return ("?", repr(x))


def _epoch_ms(t: Any) -> int | None:
    """Epoch milliseconds of a ``last_access`` cell (a timestamp, or null)."""
    if t is None:
        return None
    try:
        return int(t.timestamp() * 1000) if hasattr(t, "timestamp") else int(t)
    except (TypeError, ValueError, OverflowError):
        return None


def _split_list(vdec: ListDecoder, payload: bytes) -> list[bytes]:
    """A whole list as the list serializer writes it (int size, elements): its elements' bytes."""
    inp = DataInput(payload)
    out = []
    for _ in range(inp.read_int()):
        s = inp.pos
        vdec.elem.read(inp)
        out.append(payload[s : inp.pos])
    return out


def _split_map(vdec: MapDecoder, payload: bytes) -> dict[bytes, tuple[Any, bytes | None]]:
    """A whole map as the map serializer writes it (int size, then key, null flag, value): per user key's
    bytes the user key and the value's bytes (None for a null value)."""
    inp = DataInput(payload)
    out: dict[bytes, tuple[Any, bytes | None]] = {}
    for _ in range(inp.read_int()):
        s = inp.pos
        uk = vdec.key.read(inp)
        kb = payload[s : inp.pos]
        if inp.read_bool():
            out[kb] = (uk, None)
            continue
        v = inp.pos
        vdec.value.read(inp)
        out[kb] = (uk, payload[v : inp.pos])
    return out

"""The keyed-backend header that starts every keyed state stream.

Flink writes a ``KeyedBackendSerializationProxy`` before keyed state (at the
start of a full snapshot stream, and as the whole "meta data" file of a
RocksDB incremental/native snapshot)::

    int   proxy version                 (6 in Flink 1.15 .. 2.x)
    bool  key groups compressed         (snapshot compression: Snappy)
    snapshot of the key serializer      (see serializers)
    short number of states, each:
        utf   state name
        int   backend state type         0 key-value, 1 operator, 2 broadcast, 3 priority queue (timers)
        int   n options, n x (utf, utf)  e.g. KEYED_STATE_TYPE -> VALUE | LIST | MAP | REDUCING | AGGREGATING
        int   n serializers, n x (utf, snapshot)
              VALUE_SERIALIZER, NAMESPACE_SERIALIZER (and for operator state KEY_SERIALIZER)

A state's position in this list is its *state id* in the data that follows
(and its column family order in RocksDB).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ...errors import ReaderError
from .datainput import DataInput
from .serializers import (
    Decoder,
    ListDecoder,
    MapDecoder,
    PojoDecoder,
    RawDecoder,
    TtlDecoder,
    UnknownSnapshot,
    iter_decoders,
    read_top_level_snapshot,
)

#: (KEY_VALUE_V2: a state of the async state API, Flink 2.x ``enableAsyncState()``; its VALUE_SERIALIZER is the
#: element's, a map state's user keys have a USER_KEY_SERIALIZER of their own, see ``StateMeta.value_decoder``)
BACKEND_STATE_TYPES = ("KEY_VALUE", "OPERATOR", "BROADCAST", "PRIORITY_QUEUE", "KEY_VALUE_V2")
#: the prefix PyFlink's Java side (``BeamKeyedStateStore``) puts before the name of every Python keyed state
PYTHON_STATE_PREFIX = "python-state-"
#: kinds a PyFlink Python state may be declared as
PYFLINK_KINDS = ("value", "list", "map", "reducing", "aggregating")
_KIND_NAMES = {"VALUE": "value", "LIST": "list", "MAP": "map", "REDUCING": "reducing", "AGGREGATING": "aggregating"}
_SERIALIZER_KEYS = (b"VALUE_SERIALIZER", b"NAMESPACE_SERIALIZER", b"KEY_SERIALIZER")


@dataclass
class StateMeta:
    state_id: int
    name: str
    backend_type: str
    options: dict[str, str]
    serializers: dict[str, Decoder] = field(default_factory=dict)
    #: how the user named the state, where Flink stored it under another name (PyFlink's "python-state-" prefix)
    shown_name: str | None = None
    #: the kind the user declared, where the snapshot stores it as another kind (PyFlink keeps every Python value,
    #: reducing and aggregating state as a list state); given by ``explorer.open(..., pyflink_kinds=...)``
    declared_kind: str | None = None
    #: where this state's entry (name, type, options, serializer snapshots) lies in the header's bytes
    span: tuple[int, int] | None = None

    @property
    def display_name(self) -> str:
        return self.shown_name or self.name

    @property
    def is_pyflink_bag(self) -> bool:
        """A PyFlink Python state kept as a Flink list of byte arrays (each array holds pickled records)."""
        return self.shown_name is not None and self.kind == "list"

    @property
    def shown_kind(self) -> str:
        """The kind rows are shown as: the declared one (PyFlink) or the stored one."""
        return self.declared_kind or self.kind

    @property
    def is_timer(self) -> bool:
        return self.backend_type == "PRIORITY_QUEUE"

    @property
    def kind(self) -> str:
        if self.is_timer:
            return "event_timer" if "event" in self.name.rsplit("/", 1)[-1] else "processing_timer"
        return _KIND_NAMES.get(self.options.get("KEYED_STATE_TYPE", "VALUE"), "value")

    @property
    def value_decoder(self) -> Decoder | None:
        """The whole value's decoder, as the classic API declares it (a list state's ``List<T>``, a map
        state's ``Map<K, V>``). The async state API (State V2) stores the element's serializer and, for a map,
        the user key's as USER_KEY_SERIALIZER: the same bytes, the whole value's decoder is made from them."""
        v = self.serializers.get("VALUE_SERIALIZER")
        if self.backend_type != "KEY_VALUE_V2" or v is None:
            return v
        kind = self.kind
        if kind == "map":
            uk = self.serializers.get("USER_KEY_SERIALIZER")
            return MapDecoder(uk, v) if uk is not None else RawDecoder("a State V2 map state without USER_KEY_SERIALIZER")
        return ListDecoder(v) if kind == "list" else v

    @property
    def namespace_decoder(self) -> Decoder | None:
        return self.serializers.get("NAMESPACE_SERIALIZER")

    @property
    def element_decoder(self) -> Decoder | None:
        """What one row's ``value`` is: the list element, the map value, or the value."""
        v = self.value_decoder
        kind = self.kind
        if kind == "list" and isinstance(v, ListDecoder):
            return v.elem
        if kind == "map" and isinstance(v, MapDecoder):
            return v.value
        return v  # a ValueState (or reducing/aggregating) of a List or Map type is one whole value

    @property
    def user_key_decoder(self) -> Decoder | None:
        v = self.value_decoder
        return v.key if self.kind == "map" and isinstance(v, MapDecoder) else None

    @property
    def has_ttl(self) -> bool:
        return isinstance(self.element_decoder, TtlDecoder)


@dataclass
class BackendMeta:
    version: int
    compressed: bool
    key_decoder: Decoder
    states: list[StateMeta]
    end: int  # byte offset right after the header
    notes: list[str] = field(default_factory=list)
    #: byte offset of the state count (the key serializer snapshot ends there), for writers copying the header
    states_at: int | None = None


def read_backend_meta(
    inp: DataInput, where: str, end_hint: int | None = None, options: Mapping[str, Any] | None = None
) -> BackendMeta:
    """Parse the header at ``inp``'s position; ``end_hint`` is where it must end, if known.

    ``options``: the user's decoding options (``explorer.open(..., jars=, type_hints=)``), handed to
    registered snapshot factories (``serializers.register_snapshot_decoder``)."""
    try:
        version = inp.read_int()
        if not 1 <= version <= 6:
            raise ReaderError(f"{where}: found keyed backend meta version {version}, expected 1 to 6")
        compressed = inp.read_bool() if version >= 2 else False
        try:
            key_decoder = read_top_level_snapshot(inp, options)
        except UnknownSnapshot as exc:
            raise ReaderError(
                f"{where}: the key serializer {exc.class_name} is not one State Explorer can decode; "
                "expected String, primitives, Tuple, POJO or RowData keys"
            ) from exc
        states_at = inp.pos
        n_states = inp.read_short()
        states: list[StateMeta] = []
        notes: list[str] = []
        i = 0
        while i < n_states:
            entry_start = inp.pos
            name = inp.read_utf()
            t = inp.read_int()
            state_options = {}
            for _ in range(inp.read_int()):
                k = inp.read_utf()
                state_options[k] = inp.read_utf()
            meta = StateMeta(i, name, BACKEND_STATE_TYPES[t] if 0 <= t < len(BACKEND_STATE_TYPES) else f"TYPE_{t}",
                             state_options)
            states.append(meta)
            state_decode = options
            if name.startswith(PYTHON_STATE_PREFIX) and len(name) > len(PYTHON_STATE_PREFIX):
                # PyFlink's: its byte arrays hold what Python-side coders wrote (a list's arrays: pickled records)
                meta.shown_name = name[len(PYTHON_STATE_PREFIX):]
                meta.declared_kind = dict((options or {}).get("pyflink_kinds") or {}).get(meta.shown_name)
                state_decode = {**(options or {}), "pyflink": True, "pyflink_records": meta.kind == "list"}
            n_ser = inp.read_int()
            j = 0
            next_state = False
            while j < n_ser:
                key = inp.read_utf()
                start = inp.pos
                try:
                    meta.serializers[key] = read_top_level_snapshot(inp, state_decode)
                    for d in iter_decoders(meta.serializers[key]):
                        text = d.raw_note() if isinstance(d, PojoDecoder) else None
                        if text:
                            notes.append(f"{where}: state {name!r}: {text}")
                    j += 1
                    continue
                except UnknownSnapshot as exc:
                    meta.serializers[key] = exc.partial or RawDecoder(exc.class_name)
                    notes.append(
                        f"{where}: state {name!r} uses serializer {exc.class_name}, which State Explorer "
                        "cannot decode; its values are returned as raw bytes"
                        + (" (its map keys are decoded)" if exc.partial is not None else "")
                        + (" and so are its map keys (the map's key serializer)" if exc.map_keys else "")
                    )
                    where_next = _resync(inp, start, n_ser - j - 1 > 0, i + 1 < n_states, end_hint)
                    if where_next is None:
                        raise ReaderError(
                            f"{where}: cannot find the end of serializer snapshot {exc.class_name} "
                            f"of state {name!r}; expected a known serializer"
                        ) from exc
                    pos, what = where_next
                    inp.pos = pos
                    j += 1
                    if what != "serializer":
                        next_state = True
                        break
            if next_state:
                # the remaining serializers of this state were inside the unknown bytes
                pass
            meta.span = (entry_start, inp.pos)
            i += 1
    except EOFError as exc:
        raise ReaderError(f"{where}: keyed state header ends early ({exc})") from exc
    names = [sm.name for sm in states]
    for sm in states:  # a PyFlink name that another state of the operator has stays as stored
        if sm.shown_name is not None and sm.shown_name in names:
            sm.shown_name = None
    return BackendMeta(version, compressed, key_decoder, states, inp.pos, notes, states_at)


_NEXT_STATE = re.compile(rb"\x00\x00\x00[\x00-\x03]\x00\x00\x00[\x00-\x09]")


def _resync(inp: DataInput, start: int, more_serializers: bool, more_states: bool, end_hint: int | None):
    """Where parsing can go on after an unknown snapshot: next serializer key, next state, or the end."""
    buf = bytes(inp.buf[start : inp.end])
    candidates = []
    if more_serializers:
        for k in _SERIALIZER_KEYS:
            p = buf.find(len(k).to_bytes(2, "big") + k + b"\x00\x00\x00")
            if p >= 0:
                candidates.append((start + p, "serializer"))
    if more_states:
        # a state entry: utf name, int type (0..3), int n options; try names ending right before
        for m in re.finditer(rb"\x00\x10KEYED_STATE_TYPE|\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x10VALUE", buf):
            p = m.start()
            head = p - 8 if m.group(0).startswith(b"\x00\x10KEYED") else p
            for ln in range(1, 200):
                q = head - ln - 2
                if q < 0:
                    break
                if int.from_bytes(buf[q : q + 2], "big") == ln:
                    candidates.append((start + q, "state"))
                    break
            if candidates and candidates[-1][1] == "state":
                break
    if not more_serializers and not more_states and end_hint is not None:
        candidates.append((end_hint, "end"))
    if not candidates:
        return None
    return min(candidates)

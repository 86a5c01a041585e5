"""The HashMap (heap) backend's own snapshot stream: its checkpoints and native savepoints.

After the keyed-backend header (``statemeta``), every key group of the
subtask's range is written at its recorded offset::

    int   key group                                  (never compressed)
    per state (in the backend's order, each its own Snappy-framed stream when
    the header says "compressed"):
        short state id
        key/value state:   int n, then n x (namespace, key, state)
                           where state is the whole value, list (int size +
                           elements) or map (int size + (key, bool isNull, value))
        timers:            int n, then n x timer (timestamp, key, namespace)

Everything is written with the state's own serializers, and values are not
length-prefixed: a state whose serializer is unknown cannot be skipped by
length, so the reader looks for where the next state starts (``_resync``) and
loses only that state's entries.
"""

from __future__ import annotations

from typing import Callable

from ...errors import FlinkCorruptError, FlinkFormatError

from .compression import unframe
from .datainput import DataInput
from .rows import RowBuffer
from .serializers import Decoder, ListDecoder, MapDecoder, TimerDecoder, UnknownLayout, min_width
from .statemeta import BackendMeta, StateMeta


def read_key_group(
    buf: bytes,
    span: tuple[int, int, int],
    backend: BackendMeta,
    buffers: Callable[[int], RowBuffer | None],
    skipped: dict[int, str] | None = None,
) -> None:
    """Decode one key group into the row buffers ``buffers(state_id)`` (None: skip the state).

    A state whose values cannot be decoded (:class:`UnknownLayout`) costs only
    that state's entries in this key group: the next state's start is found by
    :func:`_resync` and recorded in ``skipped`` (state id -> reason). Raises
    :class:`UnknownLayout` only when no next state can be found.
    """
    kg, start, end = span
    head = DataInput(buf, start, end)
    found = head.read_int()
    if found != kg:
        raise FlinkFormatError(f"key group at offset {start}: found id {found}, expected {kg}")
    inp = DataInput(unframe(buf, start + 4, end)) if backend.compressed else DataInput(buf, start + 4, end)
    states = backend.states
    seen: set[int] = set()
    while not inp.at_end():
        sid = inp.read_short()
        if not 0 <= sid < len(states):
            raise FlinkFormatError(f"key group {kg} at offset {start}: found state id {sid}, expected 0..{len(states) - 1}")
        seen.add(sid)
        body = inp.pos
        try:
            _read_state(inp, kg, states[sid], backend.key_decoder, buffers(sid))
        except UnknownLayout as exc:
            nxt = _resync(inp, body, kg, backend, seen)
            if nxt is None:
                raise UnknownLayout(f"{exc}; no later state of key group {kg} could be found after it") from exc
            if skipped is not None:
                skipped.setdefault(sid, str(exc))
            inp.pos = nxt


def _read_state(inp: DataInput, kg: int, meta: StateMeta, key_dec: Decoder, out: RowBuffer | None) -> None:
    """One state's entries of a key group (after its state id)."""
    vdec = meta.value_decoder
    nsdec = meta.namespace_decoder
    if meta.is_timer:
        entry = 9  # at least a timestamp and a one-byte key
    else:  # a namespace, a key, and a value (a list or map: its int size)
        entry = min_width(nsdec) + min_width(key_dec) + (4 if meta.kind in ("list", "map") else min_width(vdec))
    try:
        n = inp.read_count(f"entries of state {meta.name!r}", entry)
    except EOFError as exc:
        raise FlinkCorruptError(f"key group {kg}: {exc}") from exc
    if meta.is_timer:
        if not isinstance(vdec, TimerDecoder):
            raise UnknownLayout(f"timer state {meta.name!r}: {vdec.describe() if vdec else 'no serializer'}")
        for _ in range(n):
            s = inp.pos
            ts, key, ns = vdec.read(inp)
            if out is not None:
                out.add(kg, key, ns, None, ts, inp.pos - s)
        return
    kind = meta.kind
    for _ in range(n):
        ns = nsdec.read(inp) if nsdec is not None else None
        key = key_dec.read(inp)
        if kind == "list" and isinstance(vdec, ListDecoder):
            size = inp.read_count("list elements", min_width(vdec.elem))
            for i in range(size):
                s = inp.pos
                v = vdec.elem.read(inp)
                if out is not None:
                    out.add(kg, key, ns, i, v, inp.pos - s)
        elif kind == "map" and isinstance(vdec, MapDecoder):
            size = inp.read_count("map entries", min_width(vdec.key) + 1)
            for _ in range(size):
                uk = vdec.key.read(inp)
                s = inp.pos
                v = None if inp.read_bool() else vdec.value.read(inp)
                if out is not None:
                    out.add(kg, key, ns, uk, v, inp.pos - s)
        else:
            s = inp.pos
            if vdec is None:
                raise UnknownLayout(f"state {meta.name!r} has no value serializer")
            v = vdec.read(inp)
            if out is not None:
                out.add(kg, key, ns, None, v, inp.pos - s)


_MAX_CANDIDATES = 4096


def _resync(inp: DataInput, body: int, kg: int, backend: BackendMeta, seen: set[int]) -> int | None:
    """Where the state after an undecodable one starts, or None.

    Heap snapshots do not length-prefix values, so the bytes of an undecodable
    state cannot be skipped by length. Instead every later position holding the
    id of a state not yet met in this key group is a candidate; the first one
    where that whole state decodes and ends exactly at the end of the key group
    or at another unseen state id is taken. A false candidate would have to
    decode a count, keys and values of the right serializers and land exactly
    on a boundary, which random bytes practically never do.
    """
    states = backend.states
    data = bytes(inp.buf[body : inp.end])
    ids = [i for i in range(len(states)) if i not in seen]
    cands: list[int] = []
    for sid in ids:
        pat = sid.to_bytes(2, "big")
        p = data.find(pat, 1)
        while p >= 0 and len(cands) < _MAX_CANDIDATES:
            cands.append(p)
            p = data.find(pat, p + 1)
    for p in sorted(set(cands)):
        q = body + p
        probe = DataInput(inp.buf, q + 2, inp.end)
        sid = int.from_bytes(data[p : p + 2], "big")
        try:
            _read_state(probe, kg, states[sid], backend.key_decoder, None)
        except Exception:  # noqa: BLE001 - probing arbitrary bytes: any failure rejects the candidate
            continue
        if probe.at_end():
            return q
        if probe.remaining() >= 2:
            nxt = int.from_bytes(bytes(probe.buf[probe.pos : probe.pos + 2]), "big")
            if nxt < len(states) and nxt not in seen and nxt != sid:
                return q
    return None

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

Everything is written with the state's own serializers, so the stream is only
as decodable as they are: an unknown serializer stops the key group (the next
one starts at its own offset).
"""

from __future__ import annotations

from typing import Callable

from ...errors import FlinkFormatError

from .compression import unframe
from .datainput import DataInput
from .rows import RowBuffer
from .serializers import ListDecoder, MapDecoder, TimerDecoder
from .statemeta import BackendMeta


def read_key_group(
    buf: bytes,
    span: tuple[int, int, int],
    backend: BackendMeta,
    buffers: Callable[[int], RowBuffer | None],
) -> None:
    """Decode one key group into the row buffers ``buffers(state_id)`` (None: skip the state)."""
    kg, start, end = span
    head = DataInput(buf, start, end)
    found = head.read_int()
    if found != kg:
        raise FlinkFormatError(f"key group at offset {start}: found id {found}, expected {kg}")
    inp = DataInput(unframe(buf, start + 4, end)) if backend.compressed else DataInput(buf, start + 4, end)
    key_dec = backend.key_decoder
    states = backend.states
    while not inp.at_end():
        sid = inp.read_short()
        if not 0 <= sid < len(states):
            raise FlinkFormatError(f"key group {kg} at offset {start}: found state id {sid}, expected 0..{len(states) - 1}")
        meta = states[sid]
        out = buffers(sid)
        n = inp.read_int()
        vdec = meta.value_decoder
        if meta.is_timer:
            assert isinstance(vdec, TimerDecoder)
            for _ in range(n):
                s = inp.pos
                ts, key, ns = vdec.read(inp)
                if out is not None:
                    out.add(kg, key, ns, None, ts, inp.pos - s)
            continue
        nsdec = meta.namespace_decoder
        kind = meta.kind
        for _ in range(n):
            ns = nsdec.read(inp) if nsdec is not None else None
            key = key_dec.read(inp)
            if kind == "list" and isinstance(vdec, ListDecoder):
                size = inp.read_int()
                for i in range(size):
                    s = inp.pos
                    v = vdec.elem.read(inp)
                    if out is not None:
                        out.add(kg, key, ns, i, v, inp.pos - s)
            elif kind == "map" and isinstance(vdec, MapDecoder):
                size = inp.read_int()
                for _ in range(size):
                    uk = vdec.key.read(inp)
                    s = inp.pos
                    v = None if inp.read_bool() else vdec.value.read(inp)
                    if out is not None:
                        out.add(kg, key, ns, uk, v, inp.pos - s)
            else:
                s = inp.pos
                v = vdec.read(inp)
                if out is not None:
                    out.add(kg, key, ns, None, v, inp.pos - s)

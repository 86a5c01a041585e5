"""Decoders for the state Flink's own operators keep: interval join, CEP, SQL runtime types.

Registered with :func:`.serializers.register_snapshot_decoder`. Wire formats:

* ``IntervalJoinOperator$BufferEntrySerializer``: ``bool hasBeenJoined``, then
  the element -> ``{"element": .., "joined": bool}``;
* CEP ``EventId``: ``int id``, ``long timestamp`` -> ``{"id", "timestamp"}``;
  ``Lockable``: ``int refCounter``, the element -> ``{"refs", "element"}``;
  ``NodeId``: ``byte present``, then an ``EventId`` and a ``StringValue`` page
  name -> ``{"event", "page"}``; ``DeweyNumber``: ``int n``, ``n`` ints -> a
  dotted string ``"1.0.2"``; ``SharedBufferEdge``: a ``NodeId`` and a
  ``DeweyNumber``; ``SharedBufferNode`` (V2 snapshot): ``int n``, then ``n``
  times ``int refCounter`` + an edge -> ``{"edges": [{"refs", "target", "version"}]}``;
  ``NFAState``: the partial then the completed matches, each ``int n`` and ``n``
  computation states: ``StringValue`` state name, the previous entry's
  ``NodeId``, a ``DeweyNumber``, ``long`` start timestamp, ``long`` previous
  timestamp (only when the snapshot, version 2, says the serializer writes it),
  ``byte`` has-start-event + ``EventId`` -> ``{"partial_matches": [..],
  "completed_matches": [..]}``, a match as ``{"state", "previous_entry",
  "version", "start_timestamp", "previous_timestamp", "start_event"}``;
* SQL ``TimestampData`` (snapshot: ``int precision``): ``long`` epoch millis,
  plus ``int`` nanos of the millisecond when precision > 3 -> ``pd.Timestamp``;
  ``ExternalSerializer`` (a ``MapView``/``ListView`` or other external type
  inside an accumulator; snapshot: a Java-serialized ``DataType``, parsed as
  data, then the internal serializer): the internal serializer's value;
  ``RawValueData``: ``int n`` + ``n`` bytes; ``NullSerializer``: one byte, None;
* SQL ``DecimalData`` (snapshot: ``int precision``, ``int scale``): the unscaled ``long``
  when precision <= 18, else ``int n`` + ``n`` big-endian bytes -> ``Decimal``; an
  ``ExternalSerializer`` of ``DATE``/``TIME`` (internally ``int``) -> ``date``/``time``;
* ``StreamElementSerializer`` (an evicting window's elements): ``byte tag``, for a
  record with a timestamp (0) ``long timestamp`` + the value, without (1) the value
  -> ``{"timestamp", "value"}``.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pandas as pd
import pyarrow as pa

from ...errors import FlinkFormatError

from .datainput import DataInput
from .javaser import parse_java_object
from .serializers import (
    NESTED_MAGIC,
    Decoder,
    SnapshotContext,
    UnknownLayout,
    UnknownSnapshot,
    read_composite_header,
    register_snapshot_decoder,
    sql_field_type,
    timestamp_from_epoch,
)

_CEP = "org.apache.flink.cep.nfa."


class BufferEntryDecoder(Decoder):
    def __init__(self, elem: Decoder) -> None:
        self.elem = elem
        self.name = f"BufferEntry<{elem.describe()}>"

    def read(self, inp: DataInput):
        joined = inp.read_bool()
        return {"element": self.elem.read(inp), "joined": joined}

    def arrow_type(self):
        t = self.elem.arrow_type()
        return None if t is None else pa.struct([("element", t), ("joined", pa.bool_())])


def _composite_nested(inp: DataInput, ctx: SnapshotContext) -> list[Decoder]:
    read_composite_header(inp)
    return ctx.read_nested(inp)


register_snapshot_decoder(
    "org.apache.flink.streaming.api.operators.co.IntervalJoinOperator$BufferEntrySerializerSnapshot",
    lambda inp, ctx: BufferEntryDecoder(_composite_nested(inp, ctx)[0]),
)


class EventIdDecoder(Decoder):
    name = "EventId"
    fixed_length = 12
    arrow = pa.struct([("id", pa.int32()), ("timestamp", pa.int64())])

    def read(self, inp: DataInput):
        return {"id": inp.read_int(), "timestamp": inp.read_long()}


class LockableDecoder(Decoder):
    def __init__(self, elem: Decoder) -> None:
        self.elem = elem
        self.name = f"Lockable<{elem.describe()}>"

    def read(self, inp: DataInput):
        refs = inp.read_int()
        return {"refs": refs, "element": self.elem.read(inp)}

    def arrow_type(self):
        t = self.elem.arrow_type()
        return None if t is None else pa.struct([("refs", pa.int32()), ("element", t)])


class NodeIdDecoder(Decoder):
    name = "NodeId"

    def __init__(self, event: Decoder) -> None:
        self.event = event

    def read(self, inp: DataInput):
        if inp.read_byte() == 0:
            return None
        return {"event": self.event.read(inp), "page": inp.read_flink_string()}


class DeweyDecoder(Decoder):
    name = "DeweyNumber"
    arrow = pa.string()

    def read(self, inp: DataInput):
        n = inp.read_int()
        return ".".join(str(inp.read_int()) for _ in range(n))


class EdgeDecoder(Decoder):
    name = "SharedBufferEdge"

    def __init__(self, node: Decoder, dewey: Decoder) -> None:
        self.node, self.dewey = node, dewey

    def read(self, inp: DataInput):
        return {"target": self.node.read(inp), "version": self.dewey.read(inp)}


class NodeDecoder(Decoder):
    name = "SharedBufferNode"

    def __init__(self, edge: Decoder) -> None:
        self.edge = edge

    def read(self, inp: DataInput):
        edges = []
        for _ in range(inp.read_int()):
            refs = inp.read_int()
            edge = self.edge.read(inp)
            edges.append({"refs": refs, **edge} if isinstance(edge, dict) else {"refs": refs, "edge": edge})
        return {"edges": edges}


class NFAStateDecoder(Decoder):
    name = "NFAState"

    def __init__(self, dewey: Decoder, node: Decoder, event: Decoder, previous_timestamp: bool) -> None:
        self.dewey, self.node, self.event = dewey, node, event
        self.previous_timestamp = previous_timestamp

    def _matches(self, inp: DataInput) -> list[dict]:
        out = []
        for _ in range(inp.read_int()):
            m = {"state": inp.read_flink_string(), "previous_entry": self.node.read(inp),
                 "version": self.dewey.read(inp), "start_timestamp": inp.read_long()}
            m["previous_timestamp"] = inp.read_long() if self.previous_timestamp else None
            m["start_event"] = self.event.read(inp) if inp.read_byte() == 1 else None
            out.append(m)
        return out

    def read(self, inp: DataInput):
        partial = self._matches(inp)
        return {"partial_matches": partial, "completed_matches": self._matches(inp)}


def _node_id(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    (event,) = _composite_nested(inp, ctx)
    return NodeIdDecoder(event)


def _edge(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    node, dewey = _composite_nested(inp, ctx)
    return EdgeDecoder(node, dewey)


register_snapshot_decoder(f"{_CEP}sharedbuffer.EventId$EventIdSerializer$EventIdSerializerSnapshot",
                          lambda inp, ctx: EventIdDecoder())
register_snapshot_decoder(f"{_CEP}sharedbuffer.LockableTypeSerializerSnapshot",
                          lambda inp, ctx: LockableDecoder(_composite_nested(inp, ctx)[0]))
register_snapshot_decoder(f"{_CEP}sharedbuffer.NodeId$NodeIdSerializer$NodeIdSerializerSnapshot", _node_id)
register_snapshot_decoder(f"{_CEP}DeweyNumber$DeweyNumberSerializer$DeweyNumberSerializerSnapshot",
                          lambda inp, ctx: DeweyDecoder())
register_snapshot_decoder(f"{_CEP}sharedbuffer.SharedBufferEdge$SharedBufferEdgeSerializer$SharedBufferEdgeSerializerSnapshot",
                          _edge)
register_snapshot_decoder(f"{_CEP}sharedbuffer.SharedBufferNodeSerializerSnapshotV2",
                          lambda inp, ctx: NodeDecoder(_composite_nested(inp, ctx)[0]))


class TimestampDataDecoder(Decoder):
    arrow = pa.timestamp("ns")

    def __init__(self, precision: int) -> None:
        self.precision = precision
        self.fixed_length = 8 if precision <= 3 else 12
        self.name = f"TIMESTAMP({precision})"

    def read(self, inp: DataInput):
        ms = inp.read_long()
        nanos = inp.read_int() if self.precision > 3 else 0
        return timestamp_from_epoch(ms, nanos, self.name)


register_snapshot_decoder(
    "org.apache.flink.table.runtime.typeutils.TimestampDataSerializer$TimestampDataSerializerSnapshot",
    lambda inp, ctx: TimestampDataDecoder(inp.read_int()),
)


class DecimalDataDecoder(Decoder):
    """SQL ``DECIMAL(p, s)`` (``DecimalDataSerializer``; snapshot: ``int precision``, ``int scale``): the unscaled
    value as a ``long`` when ``p <= 18``, else ``int n`` + ``n`` big-endian two's-complement bytes -> ``Decimal``."""

    def __init__(self, precision: int, scale: int) -> None:
        if not 0 < precision <= 38 or not 0 <= scale <= precision:
            raise FlinkFormatError(f"DECIMAL serializer snapshot: found precision {precision} and scale {scale}, "
                                   "expected 0 < precision <= 38 and 0 <= scale <= precision")
        self.precision, self.scale = precision, scale
        self.compact = precision <= 18
        self.fixed_length = 8 if self.compact else -1
        self.name = f"DECIMAL({precision}, {scale})"

    def read(self, inp: DataInput):
        if self.compact:
            unscaled = inp.read_long()
        else:
            n = inp.read_int()
            if not 0 < n <= 17:  # (38 digits fit 16 bytes)
                raise FlinkFormatError(f"{self.name}: found {n} bytes of unscaled value, expected 1 to 17")
            unscaled = int.from_bytes(inp.read_bytes(n), "big", signed=True)
        return Decimal(unscaled).scaleb(-self.scale)


register_snapshot_decoder(
    "org.apache.flink.table.runtime.typeutils.DecimalDataSerializer$DecimalSerializerSnapshot",
    lambda inp, ctx: DecimalDataDecoder(inp.read_int(), inp.read_int()),
)

_EPOCH_DAY = dt.date(1970, 1, 1)


class ExternalDecoder(Decoder):
    """An external data type over an internal serializer: values are the internal serializer's, except that
    ``DATE`` (internally ``int`` days since the epoch) and ``TIME`` (``int`` milliseconds of the day) are shown
    as ``datetime.date`` / ``datetime.time``, as they are in a row."""

    def __init__(self, inner: Decoder, data_type: str, logical: str = "") -> None:
        self.inner = inner
        self.logical = logical
        shown = logical if logical in ("DATE", "TIME") else data_type
        self.name = f"External<{shown}>" if shown else inner.describe()

    def read(self, inp: DataInput):
        v = self.inner.read(inp)
        if self.logical == "DATE" and isinstance(v, int):
            return _EPOCH_DAY + dt.timedelta(days=v)
        if self.logical == "TIME" and isinstance(v, int):
            return dt.time(v // 3_600_000, v // 60_000 % 60, v // 1000 % 60, v % 1000 * 1000)
        return v

    def arrow_type(self):
        if self.logical == "DATE":
            return pa.date32()
        if self.logical == "TIME":
            return pa.time64("us")
        return self.inner.arrow_type()


def _external(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    read_composite_header(inp)
    obj = parse_java_object(inp)
    data_type = ""
    if isinstance(obj, dict):
        conv = obj.get("conversionClass")
        if isinstance(conv, dict):
            data_type = str(conv.get("@class_object") or "").rsplit(".", 1)[-1]
    logical = sql_field_type(obj.get("logicalType")) if isinstance(obj, dict) else ""
    # a few flag bytes may follow the data type before the nested snapshots
    for skip in range(0, 9):
        if int.from_bytes(bytes(inp.buf[inp.pos + skip : inp.pos + skip + 4]), "big") == NESTED_MAGIC:
            inp.skip(skip)
            (inner,) = ctx.read_nested(inp)
            return ExternalDecoder(inner, data_type, logical if isinstance(logical, str) else "")
    raise UnknownSnapshot(ctx.class_name, inp.pos)


register_snapshot_decoder("org.apache.flink.table.runtime.typeutils.ExternalSerializer$ExternalSerializerSnapshot",
                          _external)


class StreamRecordDecoder(Decoder):
    """An evicting window's element (``StreamElementSerializer``): ``byte tag``, then for a record with a
    timestamp (tag 0) ``long timestamp`` and the value, for one without (tag 1) the value alone. Watermarks,
    latency markers and the other stream elements never sit in window state: their tags leave the value raw."""

    def __init__(self, elem: Decoder) -> None:
        self.elem = elem
        self.name = f"StreamRecord<{elem.describe()}>"

    def read(self, inp: DataInput):
        tag = inp.read_byte()
        if tag == 0:
            ts = inp.read_long()
            return {"timestamp": ts, "value": self.elem.read(inp)}
        if tag == 1:
            return {"timestamp": None, "value": self.elem.read(inp)}
        raise UnknownLayout(f"stream element with tag {tag} in {self.name}: only records (tags 0 and 1) are decoded")

    def arrow_type(self):
        t = self.elem.arrow_type()
        return None if t is None else pa.struct([("timestamp", pa.int64()), ("value", t)])


register_snapshot_decoder(
    "org.apache.flink.streaming.runtime.streamrecord.StreamElementSerializer$StreamElementSerializerSnapshot",
    lambda inp, ctx: StreamRecordDecoder(_composite_nested(inp, ctx)[0]),
)


class RawValueDecoder(Decoder):
    name = "RAW"
    arrow = pa.binary()

    def read(self, inp: DataInput):
        n = inp.read_int()
        return inp.read_bytes(n) if n >= 0 else None


register_snapshot_decoder(
    "org.apache.flink.table.runtime.typeutils.RawValueDataSerializer$RawValueDataSerializerSnapshot",
    lambda inp, ctx: (_composite_nested(inp, ctx), RawValueDecoder())[1],
)


class NullValueDecoder(Decoder):
    name = "Null"
    fixed_length = 1
    arrow = pa.null()

    def read(self, inp: DataInput):
        inp.read_byte()
        return None


register_snapshot_decoder("org.apache.flink.table.dataview.NullSerializer$NullSerializerSnapshot",
                          lambda inp, ctx: NullValueDecoder())


def _nfa_state(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    """Nested: the DeweyNumber, NodeId and EventId serializers; version 2 adds whether the previous
    timestamp is written (Flink 1.16+)."""
    previous = read_composite_header(inp) >= 2 and inp.read_bool()
    nested = ctx.read_nested(inp)
    if len(nested) != 3:
        raise UnknownSnapshot(ctx.class_name, inp.pos)
    dewey, node, event = nested
    return NFAStateDecoder(dewey, node, event, previous)


register_snapshot_decoder(f"{_CEP}NFAStateSerializerSnapshot", _nfa_state)

"""Source splits: the elements of a FLIP-27 source operator's ``SourceReaderState``.

A source operator (``SourceOperator``) keeps the splits its reader holds as the operator list state
``SourceReaderState`` of byte arrays; each element is the split serializer's output behind its
version (Flink's ``SimpleVersionedSerialization``)::

    int   split serializer version
    int   n
    n     bytes: the split, as that version of the source's split serializer wrote it

The snapshot does not name the source nor its split serializer; a split is decoded when its bytes
fit exactly one layout State Explorer knows, and stays raw with a note otherwise (never silently):

* ``NumberSequenceSplit`` (``env.fromSequence``, Flink's ``NumberSequenceSource``; version 1):
  modified UTF-8 split id, ``long from`` (the next number the reader emits), ``long to``.
  Checked against real Flink 2.3 output (``sample_data/flink/production/source-splits-*``).
* ``KafkaPartitionSplit`` (the Kafka connector's ``KafkaPartitionSplitSerializer``, version 0): modified
  UTF-8 topic, ``int partition``, ``long startingOffset``, ``long stoppingOffset`` (``Long.MIN_VALUE``: none,
  shown as None; starting offsets -1, -2, -3 are the connector's markers for latest, earliest and
  committed). The Kafka connector is not on PyPI or Debian here: this layout is taken from the
  connector's published serializer format and checked only against bytes built from it
  (``tests/readers/test_flink_source_splits.py``), not against real Flink output.
"""

from __future__ import annotations

from typing import Any, Callable

from .datainput import DataInput

SOURCE_READER_STATE = "SourceReaderState"

_NO_STOPPING_OFFSET = -(1 << 63)
KAFKA_OFFSET_MARKERS = {-1: "latest", -2: "earliest", -3: "committed"}


def _number_sequence(inp: DataInput) -> dict[str, Any]:
    return {"split_type": "NumberSequenceSplit", "split_id": inp.read_utf(), "from": inp.read_long(),
            "to": inp.read_long()}


def _kafka(inp: DataInput) -> dict[str, Any]:
    topic = inp.read_utf()
    partition = inp.read_int()
    start = inp.read_long()
    stop = inp.read_long()
    return {"split_type": "KafkaPartitionSplit", "split_id": f"{topic}-{partition}", "topic": topic,
            "partition": partition, "starting_offset": start,
            "stopping_offset": None if stop == _NO_STOPPING_OFFSET else stop}


#: (serializer version, layout): tried in turn; a layout must read the split's bytes exactly
_LAYOUTS: list[tuple[int, Callable[[DataInput], dict[str, Any]]]] = [(1, _number_sequence), (0, _kafka)]


def decode_split(element: bytes) -> tuple[Any, str | None]:
    """(the split as a dict with named fields, None), or (``element`` unchanged, why it stays raw)."""
    inp = DataInput(element)
    try:
        version, n = inp.read_int(), inp.read_int()
    except EOFError:
        return element, f"{len(element)} bytes are no versioned split (version, length, bytes)"
    if n != inp.remaining():
        return element, f"{len(element)} bytes are no versioned split (length {n}, {inp.remaining} bytes follow)"
    start = inp.pos
    found = []
    for v, layout in _LAYOUTS:
        if v != version:
            continue
        inp.pos = start
        try:
            out = layout(inp)
        except (EOFError, ValueError, UnicodeDecodeError):
            continue
        if inp.pos == inp.end:
            found.append(out)
    if len(found) == 1:
        return {**found[0], "serializer_version": version}, None
    return element, (f"split serializer version {version}, {n} bytes: "
                     + ("fits more than one known split layout" if found else "no known split layout")
                     + " (known: NumberSequenceSplit v1, KafkaPartitionSplit v0); left raw")


def _utf(s: str) -> bytes:
    data = s.encode("utf-8")  # (modified UTF-8 equals UTF-8 for text without NUL or supplementary characters)
    if "\x00" in s or any(ord(c) > 0xFFFF for c in s) or len(data) > 0xFFFF:
        raise ValueError(f"{s!r:.40}: a split id or topic with NUL, a supplementary character, or over 65535 bytes")
    return len(data).to_bytes(2, "big") + data


def _long(v: Any) -> bytes:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{v!r}: expected an int")
    return v.to_bytes(8, "big", signed=True)


def encode_split(split: dict[str, Any]) -> bytes:
    """A split as :func:`decode_split` shows it, written back behind its serializer version (the layouts of the
    module doc); ``ValueError`` for another split type or a field that does not fit. The caller checks that
    :func:`decode_split` reads the bytes back as ``split``."""
    kind = split.get("split_type")
    if kind == "NumberSequenceSplit":
        version, body = 1, _utf(split["split_id"]) + _long(split["from"]) + _long(split["to"])
    elif kind == "KafkaPartitionSplit":
        stop = split.get("stopping_offset")
        partition = split["partition"]
        if isinstance(partition, bool) or not isinstance(partition, int) or not -(1 << 31) <= partition < 1 << 31:
            raise ValueError(f"partition {partition!r}: expected an int")
        version, body = 0, (_utf(split["topic"]) + partition.to_bytes(4, "big", signed=True)
                            + _long(split["starting_offset"]) + _long(_NO_STOPPING_OFFSET if stop is None else stop))
    else:
        raise ValueError(f"split type {kind!r}: State Explorer writes NumberSequenceSplit and KafkaPartitionSplit")
    if split.get("serializer_version", version) != version:
        raise ValueError(f"{kind}: serializer version {split['serializer_version']}, the layout known is {version}")
    return version.to_bytes(4, "big") + len(body).to_bytes(4, "big") + body

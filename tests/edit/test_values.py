"""explorer.editing.values: values encoded as Flink's serializers write them, checked byte by byte against what
Flink wrote (the types fixture's own entries) and against Java's encodings, and refused where not exact."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pandas as pd
import pytest

from explorer.editing.values import Touched, encode, last_access_ms
from explorer.errors import EditError
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.serializers import PRIMITIVES, TtlDecoder, TtlValue, UnknownLayout
from explorer.readers.flink.valuetypes import _FIXED, _Fixed



def fixed(name: str) -> _Fixed:
    return _Fixed(*_FIXED[name])


@pytest.mark.parametrize(("decoder", "value", "java_bytes"), [
    # BigDecimal: int (length + 4), BigInteger.toByteArray() of the unscaled value, int scale
    (fixed("BigDecSerializer"), Decimal("1.10"), "00000005" "6e" "00000002"),
    (fixed("BigDecSerializer"), Decimal("-0.001"), "00000005" "ff" "00000003"),
    (fixed("BigDecSerializer"), Decimal("128"), "00000006" "0080" "00000000"),  # a sign byte, as Java writes it
    # Instant: long seconds, int nanos
    (fixed("InstantSerializer"), pd.Timestamp("1970-01-01T00:00:01.000000002Z"), "0000000000000001" "00000002"),
    (fixed("InstantSerializer"), pd.Timestamp("1969-12-31T23:59:59.5Z"), "ffffffffffffffff" "1dcd6500"),
    # LocalDate: int year, byte month, byte day
    (fixed("LocalDateSerializer"), dt.date(2024, 2, 29), "000007e8" "02" "1d"),
    # String: length + 1, then UTF-16 units as varints
    (PRIMITIVES["StringSerializer"], "é☃", "03" "e901" "83 4c".replace(" ", "")),
    # a TTL wrapper: long last access, then the value
    (TtlDecoder(PRIMITIVES["LongSerializer"]), TtlValue(5, -1), "0000000000000005" "ffffffffffffffff"),
])
def test_values_are_written_as_java_writes_them(decoder, value, java_bytes):
    assert encode(decoder, value, "here").hex() == java_bytes


@pytest.mark.parametrize(("decoder", "value", "why"), [
    (PRIMITIVES["LongSerializer"], True, "Long is written from an int"),
    (PRIMITIVES["IntSerializer"], 2**31, "Integer"),
    (fixed("BigDecSerializer"), 1.5, "finite decimal.Decimal"),
    (fixed("BigDecSerializer"), Decimal("NaN"), "finite decimal.Decimal"),
    (fixed("InstantSerializer"), None, "nulls only where a null flag is declared"),
    (fixed("LocalDateTimeSerializer"), pd.Timestamp("2024-01-01", tz="UTC"), "local date-times"),
    (fixed("LocalDateSerializer"), dt.datetime(2024, 1, 1), "datetime.date"),
    (TtlDecoder(PRIMITIVES["LongSerializer"]), 5, "TtlValue"),
    (None, 1, "not decoded"),
])
def test_values_not_encoded_exactly_are_refused(decoder, value, why):
    with pytest.raises(EditError, match=why):
        encode(decoder, value, "here")


def test_every_decoded_value_of_the_types_fixture_is_written_back_to_the_bytes_flink_wrote():
    """Each value state of the types job decoded by the reader and encoded again gives the very bytes Flink wrote
    (POJO, Row, Tuple, List, Map, enum, java.time, BigDecimal, arrays, Either, TTL); Kryo ones are refused."""
    from explorer.readers.flink.fullformat import iter_entries
    from explorer.readers.flink.reader import FlinkSnapshotReader

    reader = FlinkSnapshotReader("sample_data/flink/production/types-heap-canonical-savepoint")
    op = next(o for o in reader.meta.operators if o.uid == "user-types")
    st = next(s for s in op.subtasks if s.managed_keyed is not None)
    header = reader.keyed_header(op, st)
    h = st.managed_keyed
    data, spans = reader.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end, None)
    same, refused = set(), set()
    for span in spans:
        for sid, _key, value in iter_entries(data, span, header.compressed):
            meta = header.states[sid]
            if meta.kind != "value" or meta.element_decoder is None or meta.name.startswith("_timer"):
                continue
            try:
                decoded = meta.element_decoder.read(DataInput(value, bounded=True))
            except UnknownLayout:  # (a Kryo class without its layout: nothing to write back)
                refused.add(meta.name)
                continue
            try:
                assert encode(meta.element_decoder, decoded, meta.name) == value, meta.name
                same.add(meta.name)
            except EditError:
                refused.add(meta.name)
    assert {"basket", "row", "tuple", "list_value", "map_value", "tier", "spend", "big", "day", "first_seen",
            "last_local", "legacy_date", "sql_ts", "either", "long_array", "names_array", "bytes", "ttl_value"} <= same
    assert {"kryo", "maybe", "profile"} <= refused and not same & refused


def test_last_access_takes_epoch_ms_or_timestamps():
    assert last_access_ms(1_700_000_000_000, "x") == 1_700_000_000_000
    assert last_access_ms(pd.Timestamp("2023-11-14T22:13:20Z"), "x") == 1_700_000_000_000
    assert last_access_ms("2023-11-14 22:13:20", "x") == 1_700_000_000_000  # naive: UTC
    with pytest.raises(EditError, match="finer than the millisecond"):
        last_access_ms(pd.Timestamp("2023-11-14T22:13:20.0000001Z"), "x")
    assert Touched(1, 2).last_access == 2

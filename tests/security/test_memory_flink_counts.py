"""Issue 29: declared counts in Kryo, Avro and Java serialization checked before anything is allocated.

A count is compared with the bytes left (each element takes at least a byte; elements of no bytes, such
as Kryo's all-null collections or Avro's ``null`` items, are capped) and with the memory budget. The
bombs run in a child under a 2 GiB address-space cap: before the checks a Kryo list of 2**31 nulls and
an Avro array of 2**40 nulls were MemoryErrors (or worse, without a cap).
"""

import pytest

from explorer.errors import SnapshotTooLargeError
from explorer.format import budget
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.javaser import parse_java_object
from tests.support.peak import peak_of

MARGIN_MB = 384
_CHILD = """
    import resource
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from explorer.format import budget
    from explorer.readers.flink.datainput import DataInput
    from explorer.readers.flink.kryo import KryoConfig, KryoDecoder, Layouts
    from explorer.readers.flink.avro import AvroDecoder, AvroSchema

    def ascii_(text):
        return text[:-1].encode() + bytes([ord(text[-1]) | 0x80])

    def kryo_nulls(n1):  # ArrayList by name, new object, size + 1 with the "same class" flag, the null class
        head = bytes([0x80 | 0x40 | (n1 & 0x3F)])
        rest, groups = n1 >> 6, []
        while True:
            groups.append(rest & 0x7F)
            rest >>= 7
            if not rest:
                break
        body = bytes(g | 0x80 for g in groups[:-1]) + bytes(groups[-1:])
        return bytes([1, 0]) + ascii_("java.util.ArrayList") + b"\\x01" + head + body + b"\\x00"

    def kryo(data):
        cls = "java.util.ArrayList"
        return KryoDecoder(KryoConfig(cls, [(cls, False)]), Layouts(type_hints={}), 5).read(DataInput(data))

    def varint(n):
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)

    def avro(data):
        return AvroDecoder(AvroSchema({"type": "array", "items": "null"})).read(DataInput(data))
"""


@pytest.mark.parametrize("call, expect", [
    ("kryo(kryo_nulls((1 << 31) - 1))", "EOFError: found a count of 2,147,483,646"),  # over the cap of no-byte items
    ("avro(varint(1 << 40) + b'\\x00')", "EOFError: found a count of"),
], ids=["kryo-nulls", "avro-nulls"])
def test_a_huge_count_of_empty_elements_is_refused_before_it_is_built(call, expect):
    peak, message = peak_of(_CHILD + f"""
    result = raised(lambda: {call})
    """)
    assert message.replace("2147483646", "2,147,483,646").startswith(expect.split(" of")[0]), message
    assert peak < MARGIN_MB, f"peak {peak:.0f} MiB"


def test_a_count_within_the_bytes_but_over_the_budget_is_refused():
    peak, message = peak_of(_CHILD + """
    with budget.using(1 << 20):  # at least budget.FLOOR (16 MiB): 10 M null slots are 80 MB
        result = raised(lambda: kryo(kryo_nulls(10_000_001)))
    """)
    assert message.startswith("SnapshotTooLargeError: ") and "10,000,000" in message, message
    assert peak < MARGIN_MB, f"peak {peak:.0f} MiB"


def test_a_java_array_longer_than_its_bytes_fails_at_once():
    # TC_ARRAY, a class desc of "[B" (TC_CLASSDESC, name, serialVersionUID, flags, no fields, end, no super),
    # then a length of 2**31 - 1 with three bytes after it
    desc = b"\x72" + (2).to_bytes(2, "big") + b"[B" + bytes(8) + b"\x02" + b"\x00\x00" + b"\x78" + b"\x70"
    data = b"\xac\xed\x00\x05" + b"\x75" + desc + (2**31 - 1).to_bytes(4, "big") + b"abc"
    with pytest.raises(EOFError, match="count of 2147483647 Java array elements"):
        parse_java_object(DataInput(data))


def test_read_count_checks_the_budget():
    data = (3_000_000).to_bytes(4, "big") + bytes(3_000_000)
    with budget.using(1), pytest.raises(SnapshotTooLargeError, match="3,000,000 map entries"):
        DataInput(data).read_count("map entries")
    assert DataInput(data).read_count("map entries") == 3_000_000  # no budget: the bytes alone decide

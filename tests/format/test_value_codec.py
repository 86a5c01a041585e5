"""The binary value codec writes exactly the documented bytes and reads them back.

``_ref_encode`` is an independent, deliberately plain encoder written from the
format table in :mod:`explorer.format.types` (and checked by hand below for a
few values): RocksDB state and checkpoints store these bytes, so a faster codec
must produce the same ones, byte for byte.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

import pytest

from explorer.errors import SerializationError
from explorer.format.types import type_from_description, type_info


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _ref_encode(declared: Any, value: Any) -> bytes:
    """The documented layout: ints/floats 8 bytes big-endian, bool 1 byte, str/bytes
    varint length + bytes, list/dict varint count + items, tuple/dataclass fields in
    order, Optional a 0/1 flag then the value."""
    if declared is bool:
        return b"\x01" if value else b"\x00"
    if declared is int:
        return struct.pack(">q", value)
    if declared is float:
        return struct.pack(">d", value)
    if declared is str:
        b = value.encode("utf-8")
        return _varint(len(b)) + b
    if declared is bytes:
        return _varint(len(value)) + bytes(value)
    origin = getattr(declared, "__origin__", None)
    args = getattr(declared, "__args__", ())
    if origin is list:
        return _varint(len(value)) + b"".join(_ref_encode(args[0], v) for v in value)
    if origin is dict:
        return _varint(len(value)) + b"".join(
            _ref_encode(args[0], k) + _ref_encode(args[1], v) for k, v in value.items()
        )
    if origin is tuple:
        return b"".join(_ref_encode(t, v) for t, v in zip(args, value))
    if type(None) in args:  # Optional[X]
        (inner,) = [a for a in args if a is not type(None)]
        return b"\x00" if value is None else b"\x01" + _ref_encode(inner, value)
    assert dataclasses.is_dataclass(declared)
    hints = typing.get_type_hints(declared)
    return b"".join(
        _ref_encode(hints[f.name], value[f.name] if isinstance(value, dict) else getattr(value, f.name))
        for f in dataclasses.fields(declared)
    )


@dataclass(frozen=True, slots=True)
class Event:
    user_id: str
    ts: int
    kind: str
    page: str


@dataclass
class Point:
    x: float
    y: float


@dataclass
class One:
    only: int


@dataclass
class Empty:
    pass


@dataclass
class Everything:
    i: int
    f: float
    b: bool
    s: str
    raw: bytes
    opt_s: Optional[str]
    opt_i: Optional[int]
    opt_p: Optional[Point]
    pts: list[Point]
    tags: list[str]
    counts: dict[str, int]
    pair: tuple[str, float]
    nested: Event
    events: list[Event]
    one: One
    empty: Empty
    maybe_list: Optional[list[int]]
    flag2: bool = True
    default_list: list[int] = field(default_factory=list)


@dataclass
class PostInit:
    a: int
    b: str
    calls: ClassVar[list[tuple[int, str]]] = []

    def __post_init__(self):
        PostInit.calls.append((self.a, self.b))


@dataclass
class NotInInit:
    a: int
    b: int = field(init=False, default=7)


@dataclass
class KwOnly:
    b: str
    a: int = dataclasses.field(kw_only=True, default=0)
    c: str = "z"


@dataclass(init=False)
class OwnInit:
    x: int
    y: str

    def __init__(self, y: str, x: int) -> None:  # parameters not in field order
        self.x = x
        self.y = y


BIG = 2**63 - 1
SMALL = -(2**63)


def _event(i: int, user: str = "user-1") -> Event:
    return Event(user, 1_700_000_000_000 + i, "view", "/product")


EVERYTHING = [
    Everything(
        i=0, f=0.0, b=False, s="", raw=b"", opt_s=None, opt_i=None, opt_p=None, pts=[], tags=[], counts={},
        pair=("", 0.0), nested=_event(0, ""), events=[], one=One(0), empty=Empty(), maybe_list=None,
    ),
    Everything(
        i=BIG, f=float("nan"), b=True, s="héllo wörld ✓ 🚀", raw=bytes(range(256)), opt_s="ü" * 200,
        opt_i=SMALL, opt_p=Point(-0.0, float("inf")), pts=[Point(1.5, -2.25), Point(float("-inf"), 1e308)],
        tags=["a", "", "日本語", "x" * 127, "y" * 128, "z" * 20000], counts={"k": -1, "": BIG, "ñ": SMALL},
        pair=("p" * 300, -1e-300), nested=_event(1, "bot-crawler-1"), events=[_event(i) for i in range(130)],
        one=One(-1), empty=Empty(), maybe_list=[1, -2, 3], flag2=False, default_list=list(range(-5, 5)),
    ),
]

CASES: list[tuple[Any, Any]] = [
    (int, 0), (int, -1), (int, BIG), (int, SMALL), (int, 1_700_000_000_000),
    (float, 1.5), (float, -0.0), (float, float("inf")), (float, 3),
    (bool, True), (bool, False),
    (str, ""), (str, "ascii"), (str, "ünïcødé ✓ 🚀"), (str, "x" * 127), (str, "x" * 128), (str, "x" * 16384),
    (bytes, b""), (bytes, b"\x00\xff" * 100),
    (Optional[str], None), (Optional[str], "s"), (Optional[Event], None), (Optional[Event], _event(3)),
    (list[Event], [_event(i) for i in range(5)]), (list[int], list(range(-200, 200, 7))),
    (dict[str, Point], {"a": Point(1.0, 2.0), "ü": Point(-1.0, 0.0)}),
    (tuple[int, str, Optional[float]], (7, "seven", None)),
    (Event, _event(42)), (Event, Event("ü" * 70, -5, "", "x" * 200)),
    (Point, Point(0.1, 0.2)), (One, One(BIG)), (Empty, Empty()),
    (PostInit, PostInit(3, "three")), (KwOnly, KwOnly("b", a=9, c="cc")),
    (OwnInit, OwnInit("why", 8)),
] + [(Everything, v) for v in EVERYTHING]


def _same(a: Any, b: Any) -> bool:
    """Equality that treats NaN as equal to NaN (dataclass equality does not)."""
    if isinstance(a, float) and type(b) is int or isinstance(b, float) and type(a) is int:
        a, b = float(a), float(b)  # an int stored in a float field comes back as a float
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return type(a) is type(b) and all(
            _same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("declared,value", CASES, ids=[f"{i}-{getattr(d, '__name__', d)}" for i, (d, _) in enumerate(CASES)])
def test_bytes_match_the_documented_layout_and_round_trip(declared, value):
    info = type_info(declared)
    raw = info.to_bytes(value)
    assert raw == _ref_encode(declared, value)
    back = info.from_bytes(raw)
    assert _same(back, value)
    # the same bytes decode from a memoryview, at an offset, and report where they end
    buf = b"\xaa\xbb" + raw + b"\xcc"
    v2, end = info.decode(memoryview(buf), 2)
    assert end == 2 + len(raw) and _same(v2, value)
    # a struct read back without its class is a dict of the same fields and encodes the same
    generic = type_from_description(info.describe())
    as_dict = generic.from_bytes(raw)
    assert generic.to_bytes(as_dict) == raw


def test_hand_checked_layouts():
    assert type_info(Event).to_bytes(Event("ab", 1, "", "é")) == (
        b"\x02ab" + b"\x00" * 7 + b"\x01" + b"\x00" + b"\x02\xc3\xa9"
    )
    assert type_info(Optional[Point]).to_bytes(Point(1.0, -2.0)) == b"\x01" + struct.pack(">dd", 1.0, -2.0)
    assert type_info(str).to_bytes("x" * 128)[:3] == b"\x80\x01x"
    assert type_info(list[One]).to_bytes([One(-1), One(2)]) == b"\x02" + b"\xff" * 8 + b"\x00" * 7 + b"\x02"
    assert type_info(Empty).to_bytes(Empty()) == b""


def test_decoding_runs_the_dataclass_init():
    info = type_info(PostInit)
    raw = info.to_bytes(PostInit(1, "x"))
    PostInit.calls.clear()
    back = info.from_bytes(raw)
    assert PostInit.calls == [(1, "x")]  # __post_init__ ran once, on the decoded fields
    assert back == PostInit(1, "x")
    info = type_info(KwOnly)
    assert info.from_bytes(info.to_bytes(KwOnly("q", a=4))) == KwOnly("q", a=4, c="z")
    info = type_info(OwnInit)
    assert info.from_bytes(info.to_bytes(OwnInit("yy", 3))).__dict__ == {"x": 3, "y": "yy"}


def test_a_field_outside_init_is_still_encoded():
    assert type_info(NotInInit).to_bytes(NotInInit(5)) == struct.pack(">qq", 5, 7) == _ref_encode(NotInInit, NotInInit(5))


def test_a_dict_with_the_struct_fields_encodes_like_the_instance():
    info = type_info(Event)
    e = _event(9)
    assert info.to_bytes(dataclasses.asdict(e)) == info.to_bytes(e)


def test_wrong_values_still_fail_clearly():
    info = type_info(Event)
    with pytest.raises(SerializationError, match="Event"):
        info.check("not an event", "state 'session'")
    with pytest.raises(AttributeError, match="encode"):  # a str field holding an int
        info.to_bytes(Event(5, 1, "view", "/"))  # type: ignore[arg-type]
    with pytest.raises(struct.error):  # an int field holding a str
        info.to_bytes(Event("u", "1", "view", "/"))  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="user_id"):
        info.to_bytes(Point(1.0, 2.0))
    with pytest.raises(KeyError, match="page"):
        info.to_bytes({"user_id": "u", "ts": 1, "kind": "k"})

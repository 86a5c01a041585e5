"""A restricted reader for Python pickles of plain data (PyFlink's pickled state values).

PyFlink stores a value of ``Types.PICKLED_BYTE_ARRAY()`` (and every state
whose Python type it does not map to a Java one) as a Python pickle inside a
Java ``byte[]``. ``pickle.loads`` would run whatever the pickle names, so it
is never called here. :func:`read_pickle` interprets the pickle opcodes
itself (``pickletools`` documents them; protocols 0 to 5) and builds only
``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``tuple``,
``list``, ``dict``, ``set`` and ``frozenset``. Any opcode that would import a
name or call something (``GLOBAL``, ``STACK_GLOBAL``, ``REDUCE``, ``BUILD``,
``INST``, ``OBJ``, ``NEWOBJ``, ``NEWOBJ_EX``, ``EXT1/2/4``, ``PERSID``,
``BINPERSID``, out-of-band buffers) raises :class:`PickleRefused`, which names
the opcode and its offset; the caller keeps the raw bytes with that note.
"""

from __future__ import annotations

import struct
from typing import Any

from ...errors import FlinkFormatError
from ...format import budget
from .datainput import DataInput
from .serializers import PRIMITIVES, Decoder, SnapshotContext, UnknownLayout, register_snapshot_decoder


class PickleRefused(FlinkFormatError):
    """The pickle asks to import or call something (or is not a pickle of plain data)."""


_REFUSED = {
    b"c": "GLOBAL", b"\x93": "STACK_GLOBAL", b"R": "REDUCE", b"b": "BUILD", b"i": "INST", b"o": "OBJ",
    b"\x81": "NEWOBJ", b"\x92": "NEWOBJ_EX", b"\x82": "EXT1", b"\x83": "EXT2", b"\x84": "EXT4", b"P": "PERSID",
    b"Q": "BINPERSID", b"\x97": "NEXT_BUFFER", b"\x98": "READONLY_BUFFER", b"S": "STRING", b"T": "BINSTRING",
    b"U": "SHORT_BINSTRING",
}

_MARK = object()


def looks_like_pickle(data: bytes) -> bool:
    """A protocol 2+ pickle: ``PROTO n`` first, ``STOP`` last."""
    return len(data) >= 3 and data[0] == 0x80 and 2 <= data[1] <= 5 and data[-1:] == b"."


#: the limit of :func:`expanded_size` outside a reader call with a memory budget
UNBUDGETED = 1 << 30
#: bytes one converted value costs besides its text (measured: the Flink reader's union conversion turns each
#: tuple into a Python list and Arrow slots, ~80 bytes a node at its peak)
NODE_BYTES = 64


def expanded_size(value: Any, where: str = "pickle") -> int:
    """Bytes ``value`` takes once converted to Arrow or walked as a tree: every use of a shared object counted
    (a pickle's memo and DUP share objects, so 72 bytes can stand for 2**34 leaves). Each object is visited
    once (its size memoized), so this costs the pickle's size, never its expansion; a container holding
    itself is refused (:class:`PickleRefused`): no conversion would end."""
    sizes: dict[int, int] = {}
    keep: list[Any] = []  # keeps what was sized alive, so an id is never reused during the walk
    active: set[int] = set()
    todo: list[tuple[Any, bool]] = [(value, False)]
    while todo:
        obj, done = todo.pop()
        if isinstance(obj, (str, bytes)):
            sizes[id(obj)] = NODE_BYTES + len(obj)
            keep.append(obj)
            continue
        if not isinstance(obj, (list, tuple, dict, set, frozenset)):
            sizes[id(obj)] = NODE_BYTES + (obj.bit_length() // 8 if isinstance(obj, int) else 0)
            keep.append(obj)
            continue
        items = [x for kv in obj.items() for x in kv] if isinstance(obj, dict) else obj
        if done:
            active.discard(id(obj))
            sizes[id(obj)] = NODE_BYTES + sum(sizes[id(x)] for x in items)
            keep.append(obj)
            continue
        if id(obj) in sizes:
            continue
        if id(obj) in active:
            raise PickleRefused(f"{where}: pickle builds a {type(obj).__name__} that holds itself; expected plain "
                                "data (a tree, whose converted values end)")
        active.add(id(obj))
        todo.append((obj, True))
        todo.extend((x, False) for x in items if id(x) not in sizes)
    return sizes[id(value)]


def read_pickle(data: bytes, where: str = "pickle", max_depth: int = 10_000) -> Any:
    """The plain-data value ``data`` pickles; :class:`PickleRefused` for anything else. Never executes."""
    stack: list[Any] = []
    memo: dict[int, Any] = {}
    pos = 0
    n = len(data)

    def take(k: int) -> bytes:
        nonlocal pos
        if k < 0 or pos + k > n:
            raise PickleRefused(f"{where}: pickle ends early at byte {pos} (needed {k} more bytes)")
        b = data[pos : pos + k]
        pos += k
        return b

    def line() -> bytes:
        nonlocal pos
        end = data.find(b"\n", pos)
        if end < 0:
            raise PickleRefused(f"{where}: pickle line at byte {pos} has no end")
        b = data[pos:end]
        pos = end + 1
        return b

    def pop_mark() -> list:
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is _MARK:
                items = stack[i + 1 :]
                del stack[i:]
                return items
        raise PickleRefused(f"{where}: pickle has no MARK before byte {pos}")

    def pop() -> Any:
        if not stack or stack[-1] is _MARK:
            raise PickleRefused(f"{where}: pickle stack empty at byte {pos}")
        return stack.pop()

    def u(fmt: str, k: int) -> int:
        return struct.unpack("<" + fmt, take(k))[0]

    while True:
        if len(stack) > max_depth:
            raise PickleRefused(f"{where}: pickle stack deeper than {max_depth}")
        at = pos
        op = take(1)
        if op in _REFUSED:
            raise PickleRefused(f"{where}: pickle opcode {_REFUSED[op]} at byte {at} would import or call "
                                "something; expected plain data only (None, bool, int, float, str, bytes, tuple, "
                                "list, dict, set)")
        if op == b".":
            if len(stack) != 1:
                raise PickleRefused(f"{where}: pickle STOP at byte {at} with {len(stack)} items on the stack")
            v = stack[0]
            if v is _MARK:
                raise PickleRefused(f"{where}: pickle ends with a MARK")
            budget.check(expanded_size(v, where), file=where, what=f"the value a {n}-byte pickle expands to once "
                         "converted (shared references counted each time they are used)",
                         budget=budget.current() or UNBUDGETED)
            return v
        if op == b"\x80":
            take(1)
        elif op == b"\x95":
            take(8)
        elif op == b"N":
            stack.append(None)
        elif op == b"\x88":
            stack.append(True)
        elif op == b"\x89":
            stack.append(False)
        elif op == b"I":
            s = line()
            stack.append(True if s == b"01" else False if s == b"00" else int(s))
        elif op == b"J":
            stack.append(u("i", 4))
        elif op == b"K":
            stack.append(u("B", 1))
        elif op == b"M":
            stack.append(u("H", 2))
        elif op == b"L":
            stack.append(int(line().rstrip(b"L")))
        elif op == b"\x8a":
            stack.append(int.from_bytes(take(u("B", 1)), "little", signed=True))
        elif op == b"\x8b":
            k = u("i", 4)
            stack.append(int.from_bytes(take(k), "little", signed=True))
        elif op == b"F":
            stack.append(float(line()))
        elif op == b"G":
            stack.append(struct.unpack(">d", take(8))[0])
        elif op == b"V":
            stack.append(line().decode("raw_unicode_escape"))
        elif op in (b"X", b"\x8c", b"\x8d"):
            k = u("I", 4) if op == b"X" else u("B", 1) if op == b"\x8c" else u("Q", 8)
            stack.append(take(k).decode("utf-8", "surrogatepass"))
        elif op in (b"B", b"C", b"\x8e", b"\x96"):
            k = u("I", 4) if op == b"B" else u("B", 1) if op == b"C" else u("Q", 8)
            stack.append(bytes(take(k)))
        elif op == b")":
            stack.append(())
        elif op == b"t":
            stack.append(tuple(pop_mark()))
        elif op in (b"\x85", b"\x86", b"\x87"):
            k = op[0] - 0x84
            items = [pop() for _ in range(k)][::-1]
            stack.append(tuple(items))
        elif op == b"]":
            stack.append([])
        elif op == b"l":
            stack.append(pop_mark())
        elif op == b"a":
            v = pop()
            lst = stack[-1] if stack else None
            if not isinstance(lst, list):
                raise PickleRefused(f"{where}: pickle APPEND at byte {at} to a {type(lst).__name__}")
            lst.append(v)
        elif op == b"e":
            items = pop_mark()
            lst = stack[-1] if stack else None
            if not isinstance(lst, list):
                raise PickleRefused(f"{where}: pickle APPENDS at byte {at} to a {type(lst).__name__}")
            lst.extend(items)
        elif op == b"}":
            stack.append({})
        elif op in (b"d", b"u", b"s"):
            items = pop_mark() if op != b"s" else [pop(), pop()][::-1]
            if op == b"d":
                target: Any = {}
                stack.append(target)
            else:
                target = stack[-1] if stack else None
            if not isinstance(target, dict) or len(items) % 2:
                raise PickleRefused(f"{where}: pickle dict items at byte {at} do not pair up with a dict")
            try:
                for i in range(0, len(items), 2):
                    target[items[i]] = items[i + 1]
            except TypeError as exc:
                raise PickleRefused(f"{where}: pickle dict key at byte {at} is not hashable ({exc})") from exc
        elif op == b"\x8f":
            stack.append(set())
        elif op == b"\x90":
            items = pop_mark()
            target = stack[-1] if stack else None
            if not isinstance(target, set):
                raise PickleRefused(f"{where}: pickle ADDITEMS at byte {at} to a {type(target).__name__}")
            try:
                target.update(items)
            except TypeError as exc:
                raise PickleRefused(f"{where}: pickle set item at byte {at} is not hashable ({exc})") from exc
        elif op == b"\x91":
            try:
                stack.append(frozenset(pop_mark()))
            except TypeError as exc:
                raise PickleRefused(f"{where}: pickle frozenset item at byte {at} is not hashable ({exc})") from exc
        elif op == b"(":
            stack.append(_MARK)
        elif op == b"0":
            pop()
        elif op == b"1":
            pop_mark()
        elif op == b"2":
            if not stack:
                raise PickleRefused(f"{where}: pickle DUP at byte {at} on an empty stack")
            stack.append(stack[-1])
        elif op in (b"p", b"q", b"r", b"\x94"):
            idx = (int(line()) if op == b"p" else u("B", 1) if op == b"q" else u("I", 4) if op == b"r"
                   else len(memo))
            if not stack or stack[-1] is _MARK:
                raise PickleRefused(f"{where}: pickle memo PUT at byte {at} with nothing to store")
            memo[idx] = stack[-1]
        elif op in (b"g", b"h", b"j"):
            idx = int(line()) if op == b"g" else u("B", 1) if op == b"h" else u("I", 4)
            if idx not in memo:
                raise PickleRefused(f"{where}: pickle memo GET {idx} at byte {at} of nothing stored")
            stack.append(memo[idx])
        else:
            raise PickleRefused(f"{where}: pickle opcode {op!r} at byte {at} is not one State Explorer reads")


def split_pyflink_records(raw: bytes) -> list[bytes] | None:
    """PyFlink's pickled values inside a ``byte[]``: one or more ``int length`` + pickle records (a list state
    appends records to one array); ``None`` when ``raw`` is not exactly such a sequence."""
    out, pos, n = [], 0, len(raw)
    while pos < n:
        if pos + 4 > n:
            return None
        k = int.from_bytes(raw[pos : pos + 4], "big", signed=True)
        if k < 3 or pos + 4 + k > n:
            return None
        rec = raw[pos + 4 : pos + 4 + k]
        if not looks_like_pickle(rec):
            return None
        out.append(rec)
        pos += 4 + k
    return out or None


def decode_pyflink_bytes(raw: bytes, where: str = "PyFlink value") -> Any:
    """The value PyFlink stored in ``raw``: a bare pickle, one ``length + pickle`` record (the value), several (a
    list of values); anything else is returned as it is. Refused pickles raise :class:`UnknownLayout`."""
    try:
        if looks_like_pickle(raw):
            return read_pickle(raw, where)
        recs = split_pyflink_records(raw)
        if recs is None:
            return raw
        vals = [read_pickle(r, where) for r in recs]
    except PickleRefused as exc:
        raise UnknownLayout(f"{exc}; the value is kept as raw bytes, nothing in it was run") from exc
    return vals[0] if len(vals) == 1 else vals


def decode_pyflink_coded(raw: bytes) -> Any:
    """Bytes a PyFlink Python-side coder wrote, read by their shape (the snapshot does not name the Python type):
    pickles as in :func:`decode_pyflink_bytes`; ``int n`` + ``n`` bytes of UTF-8 (the ``STRING`` coder) as
    ``str``; exactly 8 bytes (the ``BIGINT`` coder) as a big-endian ``int``; anything else stays bytes."""
    v = decode_pyflink_bytes(raw)
    if v is not raw:
        return v
    n = len(raw)
    if n >= 4 and int.from_bytes(raw[:4], "big") == n - 4:
        try:
            return raw[4:].decode("utf-8")
        except UnicodeDecodeError:
            return raw
    if n == 8:
        return int.from_bytes(raw, "big", signed=True)
    return raw


class PickledBytesDecoder(Decoder):
    """``byte[]`` (Flink's ``BytePrimitiveArraySerializer``: ``int length``, bytes) whose content, when it holds
    pickles (PyFlink's ``PICKLED_BYTE_ARRAY`` values), is read by :func:`read_pickle`; other arrays stay bytes.
    With ``explorer.open(..., pyflink=True)`` also the shapes of :func:`decode_pyflink_coded` (a PyFlink
    ``MapState``'s values are such arrays)."""

    arrow = None

    def __init__(self, pyflink: bool = False, records: bool = False) -> None:
        self.pyflink = pyflink
        self.records = records
        self.name = ("byte[] (PyFlink records)" if records else "byte[] (PyFlink-coded)" if pyflink
                     else "byte[] (PyFlink pickles decoded)")

    def read(self, inp: DataInput) -> Any:
        n = inp.read_int()
        if n < 0:
            return None
        raw = inp.read_bytes(n)
        if self.records:
            return decode_pyflink_records(raw)
        return decode_pyflink_coded(raw) if self.pyflink else decode_pyflink_bytes(raw)


def decode_pyflink_records(raw: bytes, where: str = "PyFlink list element") -> list:
    """The records one array of a PyFlink Python state holds, always as a list (an array of a list state holds
    the records appended in one go; an array of a value state, its one record): ``length + pickle`` records,
    else one bare pickle, else one value of another Python-side coder (:func:`decode_pyflink_coded`)."""
    recs = split_pyflink_records(raw)
    try:
        if recs is not None:
            return [read_pickle(r, where) for r in recs]
    except PickleRefused as exc:
        raise UnknownLayout(f"{exc}; the value is kept as raw bytes, nothing in it was run") from exc
    return [decode_pyflink_coded(raw)]


class PyFlinkWrappedBytesDecoder(Decoder):
    """PyFlink's ``ByteArrayWrapperSerializer`` (``int length``, bytes; only PyFlink uses it): the bytes a
    Python-side coder wrote, read by :func:`decode_pyflink_coded`."""

    name = "PyFlink-coded bytes"
    arrow = None

    def read(self, inp: DataInput) -> Any:
        n = inp.read_int()
        return None if n < 0 else decode_pyflink_coded(inp.read_bytes(n))


_BYTES_SNAPSHOT = ("org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer"
                   "$BytePrimitiveArraySerializerSnapshot")
_WRAPPER_SNAPSHOT = ("org.apache.flink.streaming.api.utils.ByteArrayWrapperSerializer"
                     "$ByteArrayWrapperSerializerSnapshot")


def _factory(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    if ctx.options.get("unpickle", True) is False:
        return PRIMITIVES["BytePrimitiveArraySerializer"]
    return PickledBytesDecoder(bool(ctx.options.get("pyflink")), bool(ctx.options.get("pyflink_records")))


def _wrapper_factory(inp: DataInput, ctx: SnapshotContext) -> Decoder:
    return PyFlinkWrappedBytesDecoder()


register_snapshot_decoder(_WRAPPER_SNAPSHOT, _wrapper_factory)
register_snapshot_decoder(_BYTES_SNAPSHOT, _factory)

__all__ = ["PickleRefused", "PickledBytesDecoder", "PyFlinkWrappedBytesDecoder", "decode_pyflink_bytes", "decode_pyflink_coded",
           "decode_pyflink_records",
           "looks_like_pickle",
           "read_pickle", "split_pyflink_records"]

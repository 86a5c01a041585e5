"""The memory budget as decoders see it: a size a snapshot declares is checked before it is allocated.

The user's bound is ``memory_budget=`` (``explorer.open``; parsed by ``stored.parse_memory_budget``).
The stored snapshot gives it to its reader (``SnapshotReader.memory_budget``) and the readers' error
boundary (``readers/base.py``) makes it the *current* budget while a reader method runs (a
``ContextVar``: threads and two snapshots open at once do not mix). Decoders far below (a zip member, a
Parquet row group, a pickle's conversion, a Kryo/Avro/Java collection's count) call :func:`check`
without a budget argument; outside a reader call, or for a reader used without a stored snapshot,
there is no current budget and only the structural checks hold (:func:`check_count`: a count no larger
than the bytes left).

Refusals are :class:`~explorer.errors.SnapshotTooLargeError` naming the file, what was declared and
the ``memory_budget=`` that would admit it; nothing was allocated, so it is not a ``MemoryError``.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import IO, Iterator

from ..errors import SnapshotCorruptError, SnapshotTooLargeError

__all__ = ["available_memory", "check", "check_count", "current", "default_memory_budget", "json_cost", "loads",
           "read_capped", "suggestion", "using"]

_BUDGET: ContextVar[int | None] = ContextVar("explorer_memory_budget", default=None)
_MB = 1 << 20
#: bytes read at a time by :func:`read_capped`
CHUNK = 1 << 20
#: the smallest limit a refusal uses: a budget below it (tests force analyses to stream key-group ranges with
#: budgets of kilobytes) still shapes how analyses stream, but refusing a 10 KB row group would help nobody
FLOOR = 16 << 20
#: the most one JSON value costs once parsed, per ``,`` ``:`` ``[`` ``{`` of its text (the object and the pointer to
#: it; CPython's json module measured with tracemalloc: 10 bytes for small ints, 34-38 for empty lists and dicts,
#: 64-98 for short strings and one-key dicts)
JSON_VALUE_BYTES = 100


def current() -> int | None:
    """The limit of the reader call running now, in bytes: its memory budget, at least :data:`FLOOR` (None
    outside one)."""
    b = _BUDGET.get()
    return None if b is None else max(b, FLOOR)


@contextmanager
def using(budget: int | None) -> Iterator[None]:
    """``budget`` as the current budget inside the block (None: leave the current one as it is)."""
    if budget is None:
        yield
        return
    token = _BUDGET.set(int(budget))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def suggestion(size: int) -> str:
    """A ``memory_budget=`` that admits ``size`` bytes with room for the rest (twice it, a power of two)."""
    mb = 1
    while mb * _MB < 2 * size:
        mb *= 2
    return f"memory_budget='{mb // 1024}GB'" if mb >= 1024 else f"memory_budget='{mb}MB'"


def check(size: int, *, file: object, what: str, budget: int | None = None) -> None:
    """Refuse ``size`` bytes of ``what`` in ``file`` when it is over ``budget`` (default: the current one)."""
    limit = current() if budget is None else budget
    if limit is not None and size > limit:
        raise SnapshotTooLargeError(
            f"{file}: {what} is {size:,} bytes ({size / _MB:,.1f} MB), over the memory budget of "
            f"{limit / _MB:,.0f} MB; expected sizes within the budget (refused before allocating: open the "
            f"snapshot with {suggestion(size)} if you trust it)")


def check_count(count: int, remaining: int, *, file: object, what: str, min_bytes: int = 1,
                error: type[Exception] = SnapshotCorruptError) -> None:
    """A declared ``count`` of ``what`` against the ``remaining`` bytes (each element takes at least ``min_bytes``)
    and the budget, before anything is allocated for it."""
    if count < 0 or count * min_bytes > remaining:
        raise error(f"{file}: {what} declares {count:,} elements of at least {min_bytes} byte(s) each, but only "
                    f"{remaining:,} bytes are left; expected a count that fits the bytes that follow")
    check(count * 8, file=file, what=f"{what} ({count:,} elements)")  # a pointer each, at the least


def read_capped(stream: IO[bytes], cap: int | None, *, file: object, what: str) -> bytes:
    """All of ``stream``, refused as soon as more than ``cap`` bytes come out (default cap: the current
    budget): for decompressing streams whose declared size may lie (a zip member's header)."""
    limit = current() if cap is None else cap
    parts, total = [], 0
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if limit is not None and total > limit:
            raise SnapshotTooLargeError(
                f"{file}: {what} inflates past {limit / _MB:,.0f} MB, over the memory budget (whatever its "
                f"header declared); expected it to stay within the budget (refused while decompressing: open the snapshot "
                f"with {suggestion(total * 4)} if you trust it)")
        parts.append(chunk)


def json_cost(body: bytes | bytearray) -> int:
    """What parsing the JSON text ``body`` may take at most, counted before it is parsed (C-speed scans, no
    allocation): the text decoded (1 byte a character for ASCII, up to 4 otherwise) and
    :data:`JSON_VALUE_BYTES` for each value its separators and brackets can open."""
    values = body.count(b",") + body.count(b":") + body.count(b"[") + body.count(b"{") + 1
    return len(body) * (1 if body.isascii() else 4) + JSON_VALUE_BYTES * values


def loads(body: bytes | bytearray, *, file: object, what: str):
    """``json.loads(body)`` once :func:`json_cost` fits the current budget: a snapshot's JSON of ten million
    entries is refused before they are built, not after (``json.JSONDecodeError`` and ``UnicodeDecodeError``
    pass through to the caller, who names what was expected)."""
    check(json_cost(body), file=file, what=f"{what} once parsed (counted from its {len(body):,} bytes before parsing)")
    return json.loads(body)


def available_memory() -> int:
    """Bytes of memory available to this process now (``MemAvailable`` of Linux; else the physical memory)."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # not Linux
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no way to tell
        return 4 << 30


def default_memory_budget() -> int:
    """Half the memory available when the snapshot is opened, at least 256 MB."""
    return max(256 * _MB, available_memory() // 2)

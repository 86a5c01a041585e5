"""What an engine function sees when it runs on Spark, shared by both layouts of the adapter.

:mod:`.adapter` (state per key) and :mod:`.buckets` (state per key-group bucket)
run the same :class:`~explorer.engine.KeyedProcessFunction` and hand it the same
objects: the process context (:class:`ProcessContext`), its timer service
(:class:`TimerService`; the bucket layout subclasses it to keep per-key timers
in the bucket's state), the runtime context of ``open()``
(:class:`RuntimeContext`), and the conversions between Spark rows and the
function's records and outputs (:func:`record_maker`, :func:`output_tuple`,
:func:`row_class`, :func:`to_ms`).

Importing this module does not import pyspark; the functions that need it do.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import operator
import time
from typing import Any, Callable, Sequence

import pandas as pd

from ..engine.functions import Collector
from ..errors import JobError
from .statemap import StateBinding

__all__ = ["PRIMITIVES", "ProcessContext", "RuntimeContext", "TimerService", "drain_rows", "output_tuple",
           "plain", "record_maker", "row_class", "to_ms"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def to_ms(ts: Any) -> int | None:
    if ts is None:
        return None
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.timezone.utc)
        d = ts - _EPOCH
        return (d.days * 86_400_000) + (d.seconds * 1000) + (d.microseconds // 1000)
    if isinstance(ts, pd.Timestamp):
        return int(ts.value // 1_000_000)
    return int(ts)


# --- what the function sees ------------------------------------------------------------------
class TimerService:
    """``ctx.timer_service()`` on Spark: one time domain, timers written when the key is done."""

    __slots__ = ("_handle", "_mode", "_pending", "_tv")

    def __init__(self, handle, mode: str) -> None:
        self._handle = handle
        self._mode = mode
        self._pending: dict[int, bool] = {}
        self._tv = None

    def _check(self, domain: str) -> None:
        if self._mode != domain:
            other = "event" if domain == "processing" else "processing"
            raise JobError(
                f"the function registers a {domain}-time timer but the Spark query runs with "
                f"time_mode={self._mode!r}; Spark keeps one time domain per query: run it with "
                f"time_mode={domain!r}" + (f" (and no {other}-time timers)" if self._mode != "none" else "")
            )

    def current_processing_time(self) -> int:
        t = -1 if self._tv is None else self._tv.getCurrentProcessingTimeInMs()
        return t if t >= 0 else int(time.time() * 1000)

    def current_watermark(self) -> int:
        w = -1 if self._tv is None else self._tv.getCurrentWatermarkInMs()
        return w if w >= 0 else -(2**63)

    def register_event_time_timer(self, timestamp: int) -> None:
        self._check("event")
        self._pending[int(timestamp)] = True

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._check("processing")
        self._pending[int(timestamp)] = True

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._check("event")
        self._pending[int(timestamp)] = False

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._check("processing")
        self._pending[int(timestamp)] = False

    def flush(self) -> None:
        if self._pending:
            h = self._handle
            for ts, register in self._pending.items():
                if register:
                    h.registerTimer(ts)
                else:
                    h.deleteTimer(ts)
            self._pending = {}


class ProcessContext:
    """The ``ctx`` of ``process_element`` / ``on_timer`` on Spark."""

    __slots__ = ("_key", "_timestamp", "_domain", "_timers")

    def __init__(self, timers: TimerService) -> None:
        self._key = None
        self._timestamp: int | None = None
        self._domain: str | None = None
        self._timers = timers

    def timestamp(self) -> int | None:
        return self._timestamp

    def timer_service(self) -> TimerService:
        return self._timers

    def get_current_key(self) -> Any:
        return self._key

    def time_domain(self) -> str | None:
        return self._domain

    def output(self, tag: str, value: Any) -> None:
        raise JobError(f"side output {tag!r}: side outputs have no counterpart in Spark's transformWithState; "
                       "emit a tagged row with out.collect() instead")

    def get_broadcast_state(self, descriptor) -> Any:
        raise JobError(f"broadcast state {descriptor.name!r} has no counterpart in Spark's transformWithState; "
                       "join the rules as a static DataFrame, or run this function on the engine")


class RuntimeContext:
    """What ``open(ctx)`` receives on Spark."""

    def __init__(self, binding: StateBinding, name: str, num_partitions: int) -> None:
        self._binding = binding
        self._name = name
        self._num_partitions = num_partitions

    @property
    def task_name(self) -> str:
        return self._name

    @property
    def index_of_this_subtask(self) -> int:
        from pyspark import TaskContext

        tc = TaskContext.get()
        return -1 if tc is None else tc.partitionId()

    @property
    def number_of_parallel_subtasks(self) -> int:
        return self._num_partitions

    max_number_of_parallel_subtasks = number_of_parallel_subtasks

    def get_state(self, descriptor):
        return self._binding.get_state(descriptor)

    get_list_state = get_state
    get_map_state = get_state
    get_reducing_state = get_state
    get_aggregating_state = get_state

    def get_operator_list_state(self, descriptor):
        raise JobError(f"operator state {descriptor.name!r} has no counterpart in Spark's transformWithState")

    get_union_list_state = get_operator_list_state
    get_broadcast_state = get_operator_list_state


# --- outputs -----------------------------------------------------------------------------------
PRIMITIVES = frozenset({int, float, str, bool, bytes, type(None)})


def plain(v: Any) -> Any:
    """A value Arrow can take from a Python row: dataclasses become dicts, recursively."""
    if type(v) in PRIMITIVES:
        return v
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: plain(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, tuple) and not hasattr(v, "_fields"):
        return tuple(plain(x) for x in v)
    if isinstance(v, list):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    return v


def output_tuple(names: Sequence[str]) -> Callable[[Any], tuple]:
    """How an emitted value becomes a tuple in ``names`` order (cached per emitted type)."""
    n = len(names)
    getters: dict[type, Callable[[Any], tuple]] = {}

    def convert(v: Any) -> tuple:
        if type(v) is tuple:
            if len(v) != n:
                raise JobError(f"the function emitted {v!r:.80} ({len(v)} fields) but output_schema has {n}: "
                               f"{list(names)}")
            for x in v:
                if type(x) not in PRIMITIVES:
                    return tuple(plain(x) for x in v)
            return v
        g = getters.get(type(v))
        if g is not None:
            return g(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            get = operator.attrgetter(*names) if n > 1 else (lambda x, a=operator.attrgetter(names[0]): (a(x),))
            prims = all(f.type in (int, float, str, bool, bytes, "int", "float", "str", "bool", "bytes")
                        for f in dataclasses.fields(v))
            g = get if prims else (lambda x: tuple(plain(y) for y in get(x)))
            getters[type(v)] = g
            return g(v)
        if isinstance(v, dict):
            return tuple(plain(v.get(k)) for k in names)
        if isinstance(v, tuple):  # a namedtuple or a Row
            return tuple(plain(x) for x in v)
        if n == 1:
            return (plain(v),)
        raise JobError(f"cannot turn the emitted {type(v).__name__} {v!r:.80} into a row of {list(names)}")

    return convert


def row_class(names: Sequence[str]):
    """A pyspark Row subclass for our outputs: field names on the class, and a flat ``asDict``.

    PySpark's row-based worker turns every output row into a dict with ``asDict(True)``, which
    walks each value looking for nested Rows; our values never hold Rows, so the flat version
    gives the same dict for a fraction of the cost.
    """
    from pyspark.sql import Row

    fields = list(names)

    class OutputRow(Row):
        __fields__ = fields

        def asDict(self, recursive: bool = False) -> dict[str, Any]:
            return dict(zip(fields, self))

    return OutputRow


def record_maker(record: Any, columns: Sequence[str]) -> Callable[[Any], Any]:
    """How one input row (a pyspark Row, or a plain tuple in the pandas variant) becomes a record."""
    if record is None:
        from pyspark.sql import Row

        R = Row(*columns)
        return lambda r: r if isinstance(r, Row) else R(*r)
    if isinstance(record, type) and dataclasses.is_dataclass(record):
        names = [f.name for f in dataclasses.fields(record)]
        if names == list(columns):
            return lambda r: record(*r)
        idx = [list(columns).index(n) for n in names]
        return lambda r: record(*(r[i] for i in idx))
    if record is dict:
        cols = list(columns)
        return lambda r: dict(zip(cols, r))
    if record is tuple:
        return tuple
    if callable(record):
        return record
    raise JobError(f"record must be a dataclass, dict, tuple or a callable, found {record!r}")


def drain_rows(out: Collector, to_tuple: Callable[[Any], tuple]) -> list[tuple]:
    """The values the function emitted into ``out`` since the last call, as output tuples."""
    values, _ = out.drain()
    return [to_tuple(v) for v in values]

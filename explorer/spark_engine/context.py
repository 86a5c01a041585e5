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

__all__ = ["END_OF_INPUT_MS", "MAIN_OUTPUT", "OUTPUT_COLUMN", "OutputRows", "PRIMITIVES", "ProcessContext", "RuntimeContext",
           "TimerService", "drain_rows", "output_tuple", "plain", "record_maker", "row_class", "tagged_schema", "to_ms"]

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

#: the event time of the end-of-input marker row (9999-12-31T23:59:59Z, the last second Spark's
#: timestamps hold): a bounded input ends with it, so Spark's watermark passes every timer, as
#: Flink's and the engine's final watermark does; the processors drop the row itself
END_OF_INPUT_MS = 253_402_300_799_000


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
    """The ``ctx`` of ``process_element`` / ``on_timer`` (and ``process_broadcast_element``) on Spark.

    ``side_tags`` are the side outputs the query declares: ``ctx.output(tag, value)`` keeps
    ``(tag, value)`` until :class:`OutputRows` turns it into a tagged row. ``broadcast`` is
    where broadcast state lives (the bucket layout's :class:`~explorer.engine.operator_state.OperatorStateStore`
    of the current bucket), ``None`` when the query has no broadcast input.
    """

    __slots__ = ("_key", "_timestamp", "_domain", "_timers", "_side_tags", "_side", "broadcast", "broadcast_side")

    def __init__(self, timers: TimerService, side_tags: Sequence[str] = ()) -> None:
        self._key = None
        self._timestamp: int | None = None
        self._domain: str | None = None
        self._timers = timers
        self._side_tags = frozenset(side_tags)
        self._side: list[tuple[str, Any]] = []
        self.broadcast = None
        self.broadcast_side = False

    def timestamp(self) -> int | None:
        return self._timestamp

    def timer_service(self) -> TimerService:
        return self._timers

    def get_current_key(self) -> Any:
        return self._key

    def time_domain(self) -> str | None:
        return self._domain

    def output(self, tag: str, value: Any) -> None:
        if tag not in self._side_tags:
            declared = f"it declares {sorted(self._side_tags)}" if self._side_tags else "it declares none"
            raise JobError(f"side output {tag!r} is not declared for this Spark query ({declared}); declare the "
                           f"side outputs and their schemas with run_on_spark(..., side_outputs={{{tag!r}: schema}})")
        self._side.append((tag, value))

    def drain_side(self) -> list[tuple[str, Any]]:
        side, self._side = self._side, []
        return side

    def get_broadcast_state(self, descriptor) -> Any:
        if self.broadcast is None:
            raise JobError(f"broadcast state {descriptor.name!r}: this Spark query has no broadcast input; run it "
                           "with run_on_spark(..., broadcast=...) (the bucket layout carries broadcast state)")
        # as in Flink: read-write on the broadcast side, read-only on the data side
        return self.broadcast.get_broadcast_state(descriptor, writable=self.broadcast_side)


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


#: the column of a query with side outputs that says which output a row belongs to
OUTPUT_COLUMN = "output"
#: the tag of the main output (what ``out.collect`` emits) in that column
MAIN_OUTPUT = "main"


def tagged_schema(main, side: dict[str, Any]):
    """The Spark output schema of a query with side outputs: ``output string, main struct<...>, <tag> struct<...>...``.

    Every row carries its output's name in ``output`` and its fields in that output's struct
    column (the others are null); the sink is partitioned by ``output``, so each output is a
    folder of its own (``output=main/``, ``output=illegal/``...).
    """
    from pyspark.sql.types import StringType, StructField, StructType

    for tag in side:
        if tag in (OUTPUT_COLUMN, MAIN_OUTPUT) or not tag or not tag.replace("_", "a").replace("-", "a").isalnum():
            raise JobError(f"side output tag {tag!r} cannot name a column and a folder: use letters, digits, '_' "
                           f"or '-', and neither {OUTPUT_COLUMN!r} nor {MAIN_OUTPUT!r}")
    fields = [StructField(OUTPUT_COLUMN, StringType(), False), StructField(MAIN_OUTPUT, main, True)]
    fields += [StructField(tag, schema, True) for tag, schema in side.items()]
    return StructType(fields)


class OutputRows:
    """How what a function emitted becomes the operator's output rows.

    Without side outputs a row is the emitted value's fields in ``main_columns`` order. With
    side outputs (:func:`tagged_schema`) it is ``(output, main fields or None, <tag> fields or
    None, ...)``: values from ``out.collect`` are tagged :data:`MAIN_OUTPUT`, values from
    ``ctx.output(tag, value)`` with their tag.
    """

    def __init__(self, main_columns: Sequence[str], side_columns: dict[str, Sequence[str]] | None = None) -> None:
        self.main = output_tuple(main_columns)
        self.side = {t: output_tuple(c) for t, c in (side_columns or {}).items()}
        self.tags = list(self.side)

    def rows(self, out: Collector, ctx: ProcessContext) -> list[tuple]:
        values, _ = out.drain()
        main = self.main
        if not self.side:
            return [main(v) for v in values]
        blank = (None,) * len(self.tags)
        rows = [(MAIN_OUTPUT, main(v)) + blank for v in values]
        for tag, v in ctx.drain_side():
            i = self.tags.index(tag)
            rows.append((tag, None) + blank[:i] + (self.side[tag](v),) + blank[i + 1:])
        return rows

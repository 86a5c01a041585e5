"""The key-group ("bucket") layout of the Spark adapter: few grouping keys, state in bulk.

With the per-key layout (:mod:`.statemap`) Spark calls Python once per user key
and micro-batch, and every state variable of that key costs round trips from
the Python worker to the JVM. That per-key cost is what keeps PySpark's
``transformWithState*`` operators slow, however little the function does.

The bucket layout mirrors Flink's own design, where keyed state lives in key
groups: the stream is grouped by a bucket column, Spark's Murmur3 hash of the
key columns modulo ``buckets`` (``pmod(hash(key...), buckets)``), so a
micro-batch has at most ``buckets`` grouping keys instead of tens of thousands.
With the pandas operator (the default here) and no event time, a stateless
``mapInArrow`` before the shuffle also packs each Arrow batch's rows of one
bucket into one row (:func:`bucket_input`), so Spark's shuffle and PySpark's
per-row conversion into the stateful operator handle one row per bucket and
input batch rather than one per record (with event time the rows stay
unpacked: the watermark needs the event-time column). For each bucket the
adapter

1. reads the bucket's whole state with **one** ``get()`` of one Spark
   ``ValueState`` (:data:`STATE_NAME`),
2. groups the bucket's rows by the user key (input order kept per key) and runs
   the function's ``process_element`` per record against the engine's own state
   objects (:mod:`explorer.engine.state`) over in-memory tables,
3. writes the state back with **one** ``update()`` (only if something changed),
4. keeps per-key timers in the bucket's state and **one** Spark timer per bucket,
   at the earliest per-key timer; when it fires, every per-key timer due by the
   watermark (event time) or the batch timestamp (processing time) fires, in
   timestamp order, as on the engine.

The stored value (one versioned struct per bucket, its tables as Arrow IPC streams, nothing
pickled) is :mod:`explorer.format.spark_buckets`, which :mod:`explorer.readers.spark` decodes too,
so ``explorer.open()`` shows one row per key and state entry, as for the per-key layout.

TTL follows **our engine's** semantics (:mod:`explorer.engine.ttl`: update type,
visibility, the one expiry rule), with the batch timestamp as the clock
(the wall clock with ``time_mode="none"``). Spark's per-key TTL cannot be used
here: Spark's TTL expires whole grouping keys' values, and the grouping key is
the bucket. Expired entries are dropped whenever a bucket is written (like the
engine's full-snapshot cleanup at every micro-batch that touches the bucket),
so ``RETURN_EXPIRED_IF_NOT_CLEANED_UP`` returns an expired entry only within
the micro-batch in which it expired.

When to use which layout:

* ``layout="bucket"``: many keys, a few records per key and micro-batch (the
  usual case); several times faster. Each touched bucket's state is rewritten
  whole every micro-batch, so the cost grows with the state of the touched
  buckets; raise ``buckets`` when a bucket holds more than some thousands of
  keys. The number of buckets is frozen into the checkpoint like Spark's
  shuffle partitions: restart a query with the same value.
* ``layout="key"``: huge state of mostly idle keys (each micro-batch touches
  only a small fraction), or when Spark's own state variables, TTL and
  timers should be what Spark's tools see.
"""

from __future__ import annotations

import copy
import io
import operator
import time
from typing import Any, Iterable, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..engine.backends.base import StateTable
from ..engine.functions import Collector, KeyedProcessFunction
from ..engine.state import STATE_CLASSES, KeyContext, StateKind
from ..engine.timers import TimerQueue
from ..errors import JobError
from ..format.spark_buckets import (BROADCAST, FORMAT, STATE_NAME, TIMERS, VERSION, check_value, describe, encode_tables,
                                    from_arrow_values, from_ipc, to_arrow_values, to_ipc)
from ..keygroups import KeyGroupRange
from ..engine.operator_state import OperatorStateStore
from .context import END_OF_INPUT_MS, OutputRows, ProcessContext, RuntimeContext, TimerService, record_maker, row_class, to_ms

__all__ = ["BROADCAST_COLUMN", "BUCKET_COLUMN", "DEFAULT_BUCKETS", "PACKED_COLUMN",
           "broadcast_columns", "broadcast_input", "bucket_column", "bucket_input", "data_columns", "key_codec",
           "make_processor", "pack_batches", "unpack"]

#: the grouping column the adapter adds: ``pmod(hash(key...), buckets)``
BUCKET_COLUMN = "__explorer_bucket"
#: the column that marks the rows of the broadcast input (see :func:`broadcast_input`)
BROADCAST_COLUMN = "__explorer_broadcast"
DEFAULT_BUCKETS = 64

_ONE_GROUP = KeyGroupRange(0, 0)


def value_schema():
    """The Spark schema of a bucket's stored value (:mod:`explorer.format.spark_buckets`)."""
    from pyspark.sql.types import (
        ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
    )

    table = StructType([StructField("name", StringType()), StructField("kind", StringType()),
                        StructField("ttl_ms", LongType()), StructField("data", BinaryType())])
    return StructType([StructField("format", StringType()), StructField("version", IntegerType()),
                       StructField("buckets", IntegerType()), StructField("tables", ArrayType(table))])


# --- in-memory state of one bucket -----------------------------------------------------------------
class BucketTable(StateTable):
    """One state of one bucket in memory: ``key -> entry`` (entries as the engine's backends hold them).

    Key groups and namespaces are not used (a keyed process function has no namespaces).
    """

    def __init__(self, descriptor) -> None:
        super().__init__(descriptor, _ONE_GROUP)
        self.data: dict[Any, Any] = {}
        self.dirty = False

    def get(self, key_group, key, namespace):
        return self.data.get(key)

    def put(self, key_group, key, namespace, entry):
        self.data[key] = entry
        self.dirty = True

    def remove(self, key_group, key, namespace):
        if self.data.pop(key, None) is not None:
            self.dirty = True

    def append(self, key_group, key, namespace, elements):
        cur = self.data.get(key)
        if cur is None:
            self.data[key] = list(elements)
        else:
            cur.extend(elements)
        self.dirty = True

    def map_get(self, key_group, key, namespace, user_key):
        d = self.data.get(key)
        return None if d is None else d.get(user_key)

    def map_put(self, key_group, key, namespace, user_key, entry):
        d = self.data.get(key)
        if d is None:
            self.data[key] = {user_key: entry}
        else:
            d[user_key] = entry
        self.dirty = True

    def map_remove(self, key_group, key, namespace, user_key):
        d = self.data.get(key)
        if d is not None and user_key in d:
            del d[user_key]
            if not d:
                del self.data[key]
            self.dirty = True

    def map_contains(self, key_group, key, namespace, user_key):
        d = self.data.get(key)
        return d is not None and user_key in d

    def map_items(self, key_group, key, namespace):
        d = self.data.get(key)
        return iter(()) if d is None else iter(list(d.items()))

    def addresses(self, key_groups=None):
        for key in list(self.data):
            yield 0, key, None


# --- the stored form (explorer.format.spark_buckets) ----------------------------------------------
def key_codec(key_type: pa.DataType):
    """(Arrow column -> keys, keys -> Arrow array): multi-column keys are tuples here, structs when stored."""
    if pa.types.is_struct(key_type):
        names = [key_type.field(i).name for i in range(key_type.num_fields)]
        return ((lambda col: [tuple(d.values()) for d in col.to_pylist()]),
                (lambda keys: pa.array([dict(zip(names, k)) for k in keys], key_type)))
    return (lambda col: col.to_pylist()), (lambda keys: pa.array(keys, key_type))


def _load_table(t: BucketTable, table: pa.Table, key_of) -> None:
    d = t.descriptor
    keys = key_of(table.column("key"))
    vals = from_arrow_values(d.value_info, table.column("value").combine_chunks())
    ttl = "last_access" in table.column_names
    if ttl:
        vals = list(zip(vals, table.column("last_access").to_pylist()))
    data = t.data
    kind = d.kind
    if kind is StateKind.MAP:
        uks = from_arrow_values(d.user_key_info, table.column("user_key").combine_chunks())
        for k, uk, e in zip(keys, uks, vals):
            m = data.get(k)
            if m is None:
                data[k] = {uk: e}
            else:
                m[uk] = e
    elif kind is StateKind.LIST:
        for k, e in zip(keys, vals):
            lst = data.get(k)
            if lst is None:
                data[k] = [e]
            else:
                lst.append(e)
    else:
        data.update(zip(keys, vals))


# --- what the function sees ----------------------------------------------------------------------
class _Clock:
    """The engine clock interface over Spark's batch timestamp (TTL's notion of now)."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = 0

    def now_ms(self) -> int:
        return self.now


class _Binding:
    """``ctx.get_state(descriptor)``: the engine's state objects over the bucket's in-memory tables."""

    def __init__(self, kctx: KeyContext, clock: _Clock) -> None:
        self.kctx = kctx
        self.clock = clock
        self.tables: dict[str, BucketTable] = {}
        self.states: dict[str, Any] = {}

    def get_state(self, descriptor):
        name = descriptor.name
        s = self.states.get(name)
        if s is not None:
            if s.descriptor != descriptor:
                raise JobError(f"state {name!r} is declared twice with different descriptors")
            return s
        if name == TIMERS:
            raise JobError(f"state name {TIMERS!r} is reserved by the bucket layout for its timers; rename the state")
        table = BucketTable(descriptor)
        s = STATE_CLASSES[descriptor.kind](descriptor, table, self.kctx, self.clock)
        self.tables[name] = table
        self.states[name] = s
        return s


def _make_timer_service(mode: str, kctx: KeyContext):
    class BucketTimerService(TimerService):
        """Per-key timers kept in the bucket's state (the engine's deduplicating timer queue)."""

        __slots__ = ("queue", "kctx", "dirty")

        def __init__(self) -> None:
            super().__init__(None, mode)
            self.queue = TimerQueue()
            self.kctx = kctx
            self.dirty = False

        def register_event_time_timer(self, timestamp: int) -> None:
            self._check("event")
            self.dirty |= self.queue.register(int(timestamp), self.kctx.key, None, 0)

        def register_processing_time_timer(self, timestamp: int) -> None:
            self._check("processing")
            self.dirty |= self.queue.register(int(timestamp), self.kctx.key, None, 0)

        def delete_event_time_timer(self, timestamp: int) -> None:
            self._check("event")
            self.dirty |= self.queue.delete(int(timestamp), self.kctx.key, None)

        def delete_processing_time_timer(self, timestamp: int) -> None:
            self._check("processing")
            self.dirty |= self.queue.delete(int(timestamp), self.kctx.key, None)

        def flush(self) -> None:  # timers are written with the bucket
            pass

    return BucketTimerService()


# --- the processors -------------------------------------------------------------------------------
class _BucketMixin:
    """Runs one engine function per Spark task over whole buckets."""

    def __init__(self, function: KeyedProcessFunction, *, time_mode: str, key_columns: Sequence[str],
                 input_columns: Sequence[str], output_columns: Sequence[str], record: Any,
                 event_time_column: str | None, num_partitions: int, name: str, key_arrow_type,
                 buckets: int, packed: bool = False, main_columns: Sequence[str] | None = None,
                 side_columns: dict[str, list[str]] | None = None, broadcast_columns: Sequence[str] | None = None,
                 broadcast_record: Any = None, ttl_clock: Any = None) -> None:
        self._template = function
        self._main_columns = list(output_columns if main_columns is None else main_columns)
        self._side_columns = dict(side_columns or {})
        self._broadcast_columns = None if broadcast_columns is None else list(broadcast_columns)
        self._broadcast_record = broadcast_record
        self._ttl_clock = ttl_clock
        self._time_mode = time_mode
        self._key_columns = list(key_columns)
        self._input_columns = list(input_columns)
        self._output_columns = list(output_columns)
        self._record = record
        self._event_column = event_time_column
        self._num_partitions = num_partitions
        self._name = name
        self._key_arrow_type = key_arrow_type
        self._buckets = buckets
        self._packed = packed

    def init(self, handle) -> None:
        self.handle = handle
        self.store = handle.getValueState(STATE_NAME, value_schema())
        self.kctx = KeyContext()
        # TTL's clock: the batch timestamp, or the one the function itself moves (a ReplayClock)
        self.clock = _Clock() if self._ttl_clock is None else self._ttl_clock
        self.binding = _Binding(self.kctx, self.clock)
        self.timers = _make_timer_service(self._time_mode, self.kctx)
        self.ctx = ProcessContext(self.timers, self._side_columns)
        self.out = Collector()
        self.rows = OutputRows(self._main_columns, self._side_columns)
        self.make_record = record_maker(self._record, self._input_columns)
        if self._broadcast_columns is not None:
            self.make_broadcast = record_maker(self._broadcast_record, self._broadcast_columns)
        self._broadcast_raw: dict[str, bytes] = {}
        self._broadcast_dirty = False
        self.fn = copy.deepcopy(self._template)
        self.fn.open(RuntimeContext(self.binding, self._name, self._num_partitions))
        self._timer_kind = "event_timer" if self._time_mode == "event" else "processing_timer"
        self._key_of, self._key_array = key_codec(self._key_arrow_type)

    # --- one bucket: load, run, store ------------------------------------------------------
    def _begin(self, timer_values) -> int | None:
        """Load the current bucket's state; returns the earliest per-key timer (the registered Spark timer)."""
        self.timers._tv = timer_values
        if isinstance(self.clock, _Clock):
            now = timer_values.getCurrentProcessingTimeInMs() if timer_values is not None else -1
            self.clock.now = now if now >= 0 else time.time_ns() // 1_000_000
        tables = self.binding.tables
        for t in tables.values():
            t.data = {}
            t.dirty = False
        self.timers.queue = TimerQueue()
        self.timers.dirty = False
        if self._broadcast_columns is not None:
            # every bucket keeps its own copy of the broadcast state, as every Flink subtask does
            self.ctx.broadcast = OperatorStateStore()
            self._broadcast_raw = {}
            self._broadcast_dirty = False
        row = self.store.get()
        if row is None:
            return None
        where = f"the bucket state {STATE_NAME!r} of {self._name}"
        for name, kind, _ttl, data in check_value(row, where, self._buckets):
            if kind == BROADCAST:
                if self._broadcast_columns is None:
                    raise JobError(f"{where}: the checkpoint holds broadcast state {name!r} but this query has no "
                                   "broadcast input; run it with run_on_spark(..., broadcast=...)")
                table = from_ipc(data, f"{where}, broadcast state {name!r}")
                self.ctx.broadcast.restored_broadcast[name] = dict(zip(table.column("user_key").to_pylist(),
                                                                       table.column("value").to_pylist()))
                self._broadcast_raw[name] = data
                continue
            table = from_ipc(data, f"{where}, table {name!r}")
            if name == TIMERS:
                q = self.timers.queue
                for k, ts in zip(self._key_of(table.column("key")), table.column("timestamp").to_pylist()):
                    q.register(ts, k, None, 0)
                continue
            t = tables.get(name)
            if t is None:
                raise JobError(f"{where}: the stored state {name!r} ({kind}) is not declared by the function; "
                               f"it declares {sorted(tables)}")
            _load_table(t, table, self._key_of)
        return self.timers.queue.peek_time()

    def _end(self, before: int | None, fired: int | None = None) -> None:
        """Write the bucket back (if it changed) and keep one Spark timer at its earliest per-key timer."""
        tables = list(self.binding.tables.values())
        timers = self.timers
        if timers.dirty or self._broadcast_dirty or any(t.dirty for t in tables):
            encoded = encode_tables(tables, timers.queue, self._timer_kind, self._key_array, self.clock.now_ms())
            if self._broadcast_columns is not None:
                encoded += self._encode_broadcast()
            if encoded:
                self.store.update((FORMAT, VERSION, self._buckets, encoded))
            else:
                self.store.clear()
        after = timers.queue.peek_time()
        registered = None if fired is not None else before  # Spark deletes a fired timer itself
        if after != registered:
            if registered is not None:
                self.handle.deleteTimer(registered)
            if after is not None:
                self.handle.registerTimer(after)

    def _encode_broadcast(self) -> list[tuple]:
        """The bucket's broadcast states as stored tables (those the function did not open: as they were)."""
        store = self.ctx.broadcast
        out = []
        for name, st in store.broadcast.items():
            d = st.descriptor
            kinfo, vinfo = d.user_key_info, d.value_info
            keys, vals = list(st.entries), list(st.entries.values())
            table = pa.table({"user_key": to_arrow_values(kinfo, keys, kinfo.arrow_type),
                              "value": to_arrow_values(vinfo, vals, vinfo.arrow_type)})
            table = table.replace_schema_metadata({"explorer.descriptor": describe(d)})
            out.append((name, BROADCAST, None, to_ipc(table)))
        out += [(name, BROADCAST, None, data) for name, data in self._broadcast_raw.items()
                if name not in store.broadcast]
        return out

    def _process_broadcast(self, records: list) -> None:
        """``process_broadcast_element`` for each broadcast record, in order, with the state writable."""
        ctx, out = self.ctx, self.out
        fn = self.fn.process_broadcast_element
        make = self.make_broadcast
        ctx._key = None
        ctx._domain = None
        ctx._timestamp = out._ts = None
        ctx.broadcast_side = True
        try:
            for r in records:
                fn(make(r), ctx, out)
        finally:
            ctx.broadcast_side = False
        self._broadcast_dirty = True

    def _process(self, keys: list, records: list, stamps: list | None, timer_values,
                 broadcast: list | None = None) -> list[tuple]:
        before = self._begin(timer_values)
        if broadcast:
            self._process_broadcast(broadcast)
        if stamps is not None and END_OF_INPUT_MS in stamps:  # the end-of-input marker: only moves the watermark
            keep = [i for i, t in enumerate(stamps) if t != END_OF_INPUT_MS]
            keys, records, stamps = [keys[i] for i in keep], [records[i] for i in keep], [stamps[i] for i in keep]
        groups: dict[Any, list[int]] = {}
        for i, k in enumerate(keys):
            g = groups.get(k)
            if g is None:
                groups[k] = [i]
            else:
                g.append(i)
        ctx, out, kctx = self.ctx, self.out, self.kctx
        fn = self.fn.process_element
        make = self.make_record
        ctx._domain = None
        ctx._timestamp = out._ts = None
        for k, idx in groups.items():
            kctx.set(k, 0, None)
            ctx._key = k
            if stamps is None:
                for i in idx:
                    fn(make(records[i]), ctx, out)
            else:
                for i in idx:
                    ctx._timestamp = out._ts = stamps[i]
                    fn(make(records[i]), ctx, out)
        self._end(before)
        return self.rows.rows(out, ctx)

    def _fire(self, timer_values, expired_info) -> list[tuple]:
        fired = expired_info.getExpiryTimeInMs()
        self._begin(timer_values)
        if self._time_mode == "event":
            bound = timer_values.getCurrentWatermarkInMs()
            domain = "event_time"
        else:
            bound = timer_values.getCurrentProcessingTimeInMs()
            domain = "processing_time"
        bound = max(bound, fired)
        ctx, out, kctx, q = self.ctx, self.out, self.kctx, self.timers.queue
        on_timer = self.fn.on_timer
        ctx._domain = domain
        try:
            while True:
                t = q.pop_due(bound)
                if t is None:
                    break
                self.timers.dirty = True
                kctx.set(t.key, 0, None)
                ctx._key = t.key
                ctx._timestamp = out._ts = t.timestamp if domain == "event_time" else None
                on_timer(t.timestamp, ctx, out)
        finally:
            ctx._domain = None
        self._end(None, fired)
        return self.rows.rows(out, ctx)

    def close(self) -> None:
        fn = getattr(self, "fn", None)
        if fn is not None:
            fn.close()


def _event_ms(series: pd.Series) -> list:
    """Epoch milliseconds of a timestamp (or epoch-ms integer) column, vectorised."""
    arr = pa.array(series, from_pandas=True)
    if pa.types.is_timestamp(arr.type):
        arr = pc.cast(arr, pa.timestamp("ms", tz=arr.type.tz)).cast(pa.int64())
    return arr.to_pylist()


def make_processor(variant: str, **kw):
    from pyspark.sql.streaming import StatefulProcessor

    if variant == "pandas":
        class BucketPandasProcessor(_BucketMixin, StatefulProcessor):  # type: ignore[misc, valid-type]
            """``transformWithStateInPandas`` over buckets: one call, one state read and write per bucket."""

            def handleInputRows(self, key, rows, timerValues):
                pdfs = [p for p in rows if len(p)]
                if not pdfs:
                    return
                pdf = pdfs[0] if len(pdfs) == 1 else pd.concat(pdfs, ignore_index=True)
                names = self._input_columns
                if self._packed:
                    table = unpack(pdf[PACKED_COLUMN].tolist())
                    cols = [table.column(c).to_pylist() for c in data_columns(len(names))]
                else:
                    cols = [pdf[c].tolist() for c in data_columns(len(names))]
                records = list(zip(*cols))
                kidx = [names.index(c) for c in self._key_columns]
                keys = cols[kidx[0]] if len(kidx) == 1 else list(zip(*(cols[i] for i in kidx)))
                stamps = None
                if self._event_column is not None:  # never packed (see keyed_process)
                    stamps = _event_ms(pdf[data_columns(len(names))[names.index(self._event_column)]])
                out = self._process(keys, records, stamps, timerValues)
                if out:
                    yield pd.DataFrame.from_records(out, columns=self._output_columns)

            def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
                out = self._fire(timerValues, expiredTimerInfo)
                if out:
                    yield pd.DataFrame.from_records(out, columns=self._output_columns)

            def close(self) -> None:
                _BucketMixin.close(self)

        return BucketPandasProcessor(**kw)

    class BucketRowProcessor(_BucketMixin, StatefulProcessor):  # type: ignore[misc, valid-type]
        """Row-based ``transformWithState`` over buckets."""

        def handleInputRows(self, key, rows, timerValues):
            rows = list(rows)
            if not rows:
                return []
            names = self._input_columns
            fields = list(rows[0].__fields__)
            broadcast = None
            if self._broadcast_columns is not None:  # the broadcast input's rows go first, in their order
                m = fields.index(BROADCAST_COLUMN)
                bidx = [fields.index(c) for c in broadcast_columns(len(self._broadcast_columns))]
                broadcast = [tuple(r[i] for i in bidx) for r in rows if r[m]]
                rows = [r for r in rows if not r[m]]
            idx = [fields.index(c) for c in data_columns(len(names))]
            if len(idx) == 1:
                records = [(r[idx[0]],) for r in rows]
            else:
                get = operator.itemgetter(*idx)
                records = [get(r) for r in rows]
            kidx = [names.index(c) for c in self._key_columns]
            if len(kidx) == 1:
                i0 = kidx[0]
                keys = [r[i0] for r in records]
            else:
                keys = [tuple(r[i] for i in kidx) for r in records]
            stamps = None
            if self._event_column is not None:
                e = names.index(self._event_column)
                stamps = [to_ms(r[e]) for r in records]
            R, new = row_class(self._output_columns), tuple.__new__
            return [new(R, t) for t in self._process(keys, records, stamps, timerValues, broadcast)]

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            R, new = row_class(self._output_columns), tuple.__new__
            return [new(R, t) for t in self._fire(timerValues, expiredTimerInfo)]

        def close(self) -> None:
            _BucketMixin.close(self)

    return BucketRowProcessor(**kw)


def data_columns(n: int) -> list[str]:
    """What the bucket layout renames the ``n`` input columns to on their way to Python.

    PySpark 4.3 hands the operators' input over with its columns in an order of its own, and
    the pandas variant rebuilds its frames from namedtuples, which rename columns starting
    with ``_``; plain names found by name avoid both.
    """
    return [f"c{i}" for i in range(n)]


def broadcast_columns(n: int) -> list[str]:
    """What the ``n`` columns of the broadcast input are renamed to (see :func:`data_columns`)."""
    return [f"b{i}" for i in range(n)]


def broadcast_input(data, broadcast, buckets: int):
    """The bucketed data rows (:func:`bucket_input`) and the broadcast input's rows, one copy per bucket, in one frame.

    Spark has no broadcast state and no operator that sees every grouping key; what Flink does
    with a broadcast edge (every parallel instance receives every broadcast element and keeps
    its own copy of the broadcast state) is done here with buckets: each broadcast row is
    repeated for every bucket (``explode(sequence(0, buckets - 1))``) and unioned with the data,
    marked by :data:`BROADCAST_COLUMN`. Data rows carry nulls in the broadcast columns
    (``b0``...) and broadcast rows nulls in the data columns (``c0``...).
    """
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`").alias(s) for c, s in zip(broadcast.columns, broadcast_columns(len(broadcast.columns)))]
    rep = broadcast.select(*cols, F.explode(F.sequence(F.lit(0), F.lit(int(buckets) - 1))).alias(BUCKET_COLUMN),
                           F.lit(True).alias(BROADCAST_COLUMN))
    return data.withColumn(BROADCAST_COLUMN, F.lit(False)).unionByName(rep, allowMissingColumns=True)


#: the packed rows column (see :func:`bucket_input`)
PACKED_COLUMN = "rows"


def bucket_input(df, keys: Sequence[str], buckets: int, pack: bool = False):
    """``df`` with its columns renamed (:func:`data_columns`) and the bucket column added.

    With ``pack``, a stateless ``mapInArrow`` before the shuffle packs each Arrow batch's rows
    of one bucket into one row ``(bucket, rows)``, ``rows`` an Arrow IPC stream of the data
    columns in input order: the shuffle and PySpark's per-row conversion into the stateful
    operator then handle one row per bucket and input batch instead of one per record.
    """
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`").alias(s) for c, s in zip(df.columns, data_columns(len(df.columns)))]
    out = df.select(*cols, bucket_column(keys, buckets).alias(BUCKET_COLUMN))
    if pack:
        out = out.mapInArrow(pack_batches, f"{BUCKET_COLUMN} int, {PACKED_COLUMN} binary")
    return out


def pack_batches(batches):
    """``mapInArrow`` function: rows of one bucket per Arrow batch -> one ``(bucket, IPC rows)`` row."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        b = batch.column(batch.schema.get_field_index(BUCKET_COLUMN))
        data = batch.drop_columns([BUCKET_COLUMN]) if hasattr(batch, "drop_columns") else \
            pa.RecordBatch.from_arrays([batch.column(i) for i, f in enumerate(batch.schema) if f.name != BUCKET_COLUMN],
                                       [f.name for f in batch.schema if f.name != BUCKET_COLUMN])
        order = pc.sort_indices(b)  # stable: input order kept within a bucket
        sorted_b = b.take(order).to_numpy(zero_copy_only=False)
        data = data.take(order)
        starts = [0] + [i for i in range(1, len(sorted_b)) if sorted_b[i] != sorted_b[i - 1]]
        ends = starts[1:] + [len(sorted_b)]
        ids, blobs = [], []
        for s0, e0 in zip(starts, ends):
            sink = io.BytesIO()
            with pa.ipc.new_stream(sink, data.schema) as w:
                w.write_batch(data.slice(s0, e0 - s0))
            ids.append(int(sorted_b[s0]))
            blobs.append(sink.getvalue())
        yield pa.RecordBatch.from_arrays([pa.array(ids, pa.int32()), pa.array(blobs, pa.binary())],
                                         [BUCKET_COLUMN, PACKED_COLUMN])


def unpack(blobs: Iterable[bytes]) -> pa.Table:
    """The data rows of packed ``rows`` values, in order."""
    tables = [pa.ipc.open_stream(pa.py_buffer(bytes(x))).read_all() for x in blobs]
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def bucket_column(keys: Iterable[str], buckets: int):
    """``pmod(hash(key...), buckets)``: Spark's Murmur3 (seed 42) of the key columns into ``buckets`` buckets."""
    from pyspark.sql import functions as F

    return F.pmod(F.hash(*[F.col(f"`{k}`") for k in keys]), F.lit(int(buckets)))

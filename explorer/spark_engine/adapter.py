"""Run an engine :class:`~explorer.engine.KeyedProcessFunction` on Spark Structured Streaming.

The same class that runs on our engine runs on Spark, unchanged::

    from explorer.spark import run_on_spark
    run = run_on_spark(CountPerUrl(), "in/", key="url", output_schema="url string, n long",
                       checkpoint_dir="ckpt/")
    run.output()            # pandas DataFrame of everything the function emitted
    explorer.open("ckpt/")  # its state, read back through Spark's state data source

How the engine's API maps onto Spark's ``transformWithState`` (arbitrary state API v2):

======================================  ===============================================
engine                                  Spark
======================================  ===============================================
``key_by("url")``                       ``groupBy("url")``
``open(ctx)`` / ``ctx.get_state(d)``    ``StatefulProcessor.init(handle)`` / a state
                                        variable per descriptor (:mod:`.statemap`)
``process_element(value, ctx, out)``    ``handleInputRows(key, rows, timerValues)``,
                                        once per record of the key
``on_timer(ts, ctx, out)``              ``handleExpiredTimer``
``register_event_time_timer``           ``registerTimer`` with ``time_mode="event"``
``register_processing_time_timer``      ``registerTimer`` with ``time_mode="processing"``
``current_watermark()``                 ``timerValues.getCurrentWatermarkInMs()``
``current_processing_time()``           ``timerValues.getCurrentProcessingTimeInMs()``
                                        (the micro-batch timestamp)
``StateTtlConfig(ttl)``                 ``ttlDurationMs`` (see :mod:`.statemap` for the
                                        update-type and visibility differences)
``out.collect(x)``                      output rows of ``output_schema``
======================================  ===============================================

Spark keeps one time domain per query (``timeMode``), so a function that uses
both event-time and processing-time timers cannot run here; registering a
timer of the other domain raises :class:`~explorer.errors.JobError`.

**Side outputs** (``ctx.output(tag, value)``, ``side_outputs={tag: schema}``):
a Spark query has one sink, and a second query over the same stateful operator
would run it, and its state, twice. So the operator's output is tagged: a column
``output`` names the output of each row, and each output's fields sit in a struct
column of its own (:func:`~explorer.spark_engine.context.tagged_schema`); the Parquet
sink is partitioned by ``output``, so every output lands in a folder of its own
(``output=main/``, ``output=illegal/``), written exactly once with the batch
like any file-sink output. :meth:`SparkRun.output` reads one of them.

**Broadcast state** (a ``KeyedBroadcastProcessFunction``, ``broadcast_source=``):
Spark has no broadcast edge and no state outside a grouping key. In Flink every
parallel instance receives every broadcast element and keeps its own copy of the
broadcast state, identical everywhere because every copy sees the same elements
in the same order. The bucket layout has exactly that shape: its buckets are
the parallel instances, so each broadcast row is repeated once per bucket and
unioned with the data (:func:`~explorer.spark_engine.buckets.broadcast_input`), and each
bucket keeps its copy in its stored value. Within a micro-batch a bucket applies
the broadcast rows first, in input order, then the data rows, so a rule applies
from the micro-batch it arrives in. As in Flink the state is read-write in
``process_broadcast_element`` and read-only in ``process_element`` and
``on_timer`` (a write there raises the engine's ``StateError``), since
:class:`~explorer.engine.operator_state.OperatorStateStore` is the engine's own.
Why not the other ways: replicating the rules to every *key* cannot reach keys
that appear later, and a state variable on one key per Spark partition cannot be
read from the other keys' calls. Broadcast state therefore needs the bucket
layout (the default with a broadcast input).

**End of input** (``end_of_input=True``): a bounded input ends on the engine (and
in Flink) with a final watermark that fires every timer. Spark's watermark stops
at the last record's time less the delay; a marker row with the event time
:data:`~explorer.spark_engine.context.END_OF_INPUT_MS` moves it past every timer, and
the processors drop the row itself.

Two layouts of the state (``layout=``):

* ``"key"`` (default): ``groupBy(key)``, one Spark state variable per
  descriptor, Spark's TTL and Spark's timers, as in the table above. Spark calls
  Python once per key and micro-batch; the adapter reads each key's state once
  and writes it once (:mod:`.statemap`). Use it when each micro-batch touches a
  small part of a large state, or when Spark's own tools should see the state
  variables.
* ``"bucket"``: ``groupBy(pmod(hash(key), buckets))``, Flink's key-group design:
  one Python call and one state read and write per bucket and micro-batch, the
  function run per key against the engine's own state objects, per-key timers
  and TTL kept by the adapter with the engine's semantics (:mod:`.buckets`;
  Spark's per-key TTL cannot apply there). Several times faster with many keys;
  ``explorer.open()`` still shows one row per key.

Two Spark operators can carry either layout: the row-based ``transformWithState``
(PySpark 4.1+, ``variant="row"``) and ``transformWithStateInPandas``
(``variant="pandas"``); see :func:`keyed_process` for the defaults.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ..engine.functions import Collector, KeyedBroadcastProcessFunction, KeyedProcessFunction
from ..errors import JobError
from ..format.types import type_info
from ..spark_session import get_spark
from . import buckets as bk
from .context import (END_OF_INPUT_MS, MAIN_OUTPUT, OUTPUT_COLUMN, OutputRows, ProcessContext, RuntimeContext, TimerService, record_maker,
                      row_class, tagged_schema, to_ms)
from .statemap import StateBinding

__all__ = ["SparkRun", "in_file_order", "keyed_process", "run_on_spark", "write_input"]

#: the timestamp column added for watermarks when the event time is given as epoch milliseconds
EVENT_TIME_COLUMN = "__event_time"

TIME_MODES = {"none": "None", "processing": "ProcessingTime", "event": "EventTime"}

# --- the Spark stateful processors --------------------------------------------------------------
def _processor_base():
    from pyspark.sql.streaming import StatefulProcessor

    return StatefulProcessor


class _FunctionProcessorMixin:
    """Shared by the row and pandas processors: runs one engine function per Spark task."""

    def __init__(self, function: KeyedProcessFunction, *, time_mode: str, key_columns: Sequence[str],
                 input_columns: Sequence[str], output_columns: Sequence[str], record: Any,
                 event_time_column: str | None, num_partitions: int, name: str,
                 main_columns: Sequence[str] | None = None, side_columns: dict[str, list[str]] | None = None) -> None:
        self._template = function
        self._main_columns = list(output_columns if main_columns is None else main_columns)
        self._side_columns = dict(side_columns or {})
        self._time_mode = time_mode
        self._single_key = len(key_columns) == 1
        self._input_columns = list(input_columns)
        self._output_columns = list(output_columns)
        self._record = record
        self._event_idx = None if event_time_column is None else self._input_columns.index(event_time_column)
        self._num_partitions = num_partitions
        self._name = name

    def init(self, handle) -> None:
        self.fn = copy.deepcopy(self._template)
        self.binding = StateBinding(handle, ttl_allowed=self._time_mode != "none")
        self.timers = TimerService(handle, self._time_mode)
        self.ctx = ProcessContext(self.timers, self._side_columns)
        self.out = Collector()
        self.rows = OutputRows(self._main_columns, self._side_columns)
        self.make_record = record_maker(self._record, self._input_columns)
        self.fn.open(RuntimeContext(self.binding, self._name, self._num_partitions))

    def _key_of(self, key: Any) -> Any:
        if self._single_key:
            k = key[0]
            return k.item() if hasattr(k, "item") else k
        return tuple(k.item() if hasattr(k, "item") else k for k in key)

    def _run_records(self, key, records: Iterator[Any], timer_values) -> list[tuple]:
        """Feed one key's records of this micro-batch to process_element; write state once."""
        ctx, out, b = self.ctx, self.out, self.binding
        ctx._key = self._key_of(key)
        ctx._domain = None
        self.timers._tv = timer_values
        fn = self.fn.process_element
        make = self.make_record
        eidx = self._event_idx
        b.in_key = True
        try:
            if eidx is None:
                for r in records:
                    fn(make(r), ctx, out)
            else:
                for r in records:
                    ts = to_ms(r[eidx])
                    if ts == END_OF_INPUT_MS:  # the end-of-input marker only moves the watermark
                        continue
                    ctx._timestamp = out._ts = ts
                    fn(make(r), ctx, out)
            b.flush()
            self.timers.flush()
        finally:
            b.in_key = False
        if not out.values and not ctx._side:
            return []
        return self.rows.rows(out, ctx)

    def _run_timer(self, key, timer_values, expired_info) -> list[tuple]:
        ctx, out, b = self.ctx, self.out, self.binding
        ctx._key = self._key_of(key)
        self.timers._tv = timer_values
        ts = expired_info.getExpiryTimeInMs()
        ctx._domain = "event_time" if self._time_mode == "event" else "processing_time"
        ctx._timestamp = out._ts = ts if self._time_mode == "event" else None
        b.in_key = True
        try:
            self.fn.on_timer(ts, ctx, out)
            b.flush()
            self.timers.flush()
        finally:
            b.in_key = False
            ctx._domain = None
        return self.rows.rows(out, ctx)

    def close(self) -> None:
        fn = getattr(self, "fn", None)
        if fn is not None:
            fn.close()



def _make_row_processor(**kw):
    base = _processor_base()

    class FunctionProcessor(_FunctionProcessorMixin, base):  # type: ignore[misc, valid-type]
        """Row-based ``transformWithState`` processor around an engine function."""

        def init(self, handle) -> None:
            _FunctionProcessorMixin.init(self, handle)
            self._Row = row_class(self._output_columns)

        def handleInputRows(self, key, rows, timerValues):
            R, new = self._Row, tuple.__new__
            return [new(R, t) for t in self._run_records(key, rows, timerValues)]

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            R, new = self._Row, tuple.__new__
            return [new(R, t) for t in self._run_timer(key, timerValues, expiredTimerInfo)]

        def close(self) -> None:
            _FunctionProcessorMixin.close(self)

    return FunctionProcessor(**kw)


def _make_pandas_processor(**kw):
    base = _processor_base()

    class FunctionPandasProcessor(_FunctionProcessorMixin, base):  # type: ignore[misc, valid-type]
        """``transformWithStateInPandas`` processor around an engine function."""

        def handleInputRows(self, key, rows, timerValues):
            def records():
                for pdf in rows:
                    yield from pdf.itertuples(index=False, name=None)

            out = self._run_records(key, records(), timerValues)
            if out:
                yield pd.DataFrame.from_records(out, columns=self._output_columns)

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
            out = self._run_timer(key, timerValues, expiredTimerInfo)
            if out:
                yield pd.DataFrame.from_records(out, columns=self._output_columns)

        def close(self) -> None:
            _FunctionProcessorMixin.close(self)

    return FunctionPandasProcessor(**kw)


def _as_struct(schema):
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    return get_spark()._parse_ddl(schema) if isinstance(schema, str) else StructType.fromJson(schema)


LAYOUTS = ("key", "bucket")


def keyed_process(df, function: KeyedProcessFunction, key: str | Sequence[str], output_schema, *,
                  time_mode: str = "none", variant: str | None = None, record: Any = None,
                  event_time_column: str | None = None, name: str | None = None, layout: str | None = None,
                  buckets: int | None = None, side_outputs: Mapping[str, Any] | None = None,
                  broadcast=None, broadcast_record: Any = None, ttl_clock: Any = None):
    """``df.groupBy(key)`` + the engine function as a Spark stateful operator; returns a DataFrame.

    ``record`` says what ``process_element`` receives for each input row: ``None``
    (a pyspark ``Row``, with attribute access like a dataclass), a dataclass type
    (built from the columns of the same names), ``dict``, ``tuple`` or a callable
    taking the row.

    ``layout="key"`` (default) groups by the key: Spark state variables, Spark TTL and
    Spark timers per key (:mod:`.statemap`). ``layout="bucket"`` groups by
    ``pmod(hash(key), buckets)`` and keeps every key's state, TTL and timers in one
    state value per bucket (:mod:`.buckets`): one Python call and one state read and
    write per bucket and micro-batch, several times faster with many keys; see
    :mod:`.buckets` for when to use which. ``variant`` defaults to the faster operator of
    each layout: ``"row"`` for the key layout (less work per call; most calls carry one or
    two rows) and ``"pandas"`` for the bucket layout, whose calls carry thousands of rows:
    PySpark 4.3's row worker converts every input cell with ``as_py()``, about 5x slower
    than the pandas worker's columnar conversion.

    ``side_outputs`` (tag -> schema) declares what ``ctx.output(tag, value)`` may emit: the
    result then has the tagged layout of :func:`~explorer.spark_engine.context.tagged_schema`
    (``output``, ``main``, one struct column per tag). ``broadcast`` (a streaming DataFrame)
    is the broadcast input of a ``KeyedBroadcastProcessFunction``, its rows given to
    ``process_broadcast_element`` as ``broadcast_record`` says (like ``record``); it needs the
    bucket layout (the default with ``broadcast``), see :func:`~explorer.spark_engine.buckets.broadcast_input`.
    ``ttl_clock`` (bucket layout) is the clock TTL runs on instead of the batch timestamp: a
    :class:`~explorer.pipelines.ReplayClock` the function moves to each record's event time.
    """
    if not isinstance(function, KeyedProcessFunction):
        raise JobError(f"{type(function).__name__} is not a KeyedProcessFunction")
    if time_mode not in TIME_MODES:
        raise JobError(f"time_mode must be one of {sorted(TIME_MODES)}, found {time_mode!r}")
    if layout is None:
        layout = "bucket" if broadcast is not None or ttl_clock is not None else "key"
    if layout not in LAYOUTS:
        raise JobError(f"layout must be 'key' (Spark state per key) or 'bucket' (state per key-group bucket), "
                       f"found {layout!r}")
    if broadcast is not None and not isinstance(function, KeyedBroadcastProcessFunction):
        raise JobError(f"a broadcast input needs a KeyedBroadcastProcessFunction; {type(function).__name__} is not one")
    if broadcast is None and isinstance(function, KeyedBroadcastProcessFunction):
        raise JobError(f"{type(function).__name__} is a KeyedBroadcastProcessFunction: give its broadcast input "
                       "with broadcast= (a streaming DataFrame, or broadcast_source= of run_on_spark)")
    if layout == "key" and (broadcast is not None or ttl_clock is not None):
        raise JobError("broadcast state and ttl_clock need layout='bucket': Spark keeps state per grouping key, and "
                       "only the bucket layout has a grouping key that every broadcast element can reach")
    if variant is None:
        variant = "pandas" if layout == "bucket" and broadcast is None else "row"
    if variant not in ("row", "pandas"):
        raise JobError(f"variant must be 'row' (transformWithState) or 'pandas' (transformWithStateInPandas), "
                       f"found {variant!r}")
    if broadcast is not None and variant != "row":
        raise JobError("a broadcast input needs variant='row': in a pandas frame holding both inputs' rows, the "
                       "integer columns of one input would turn into floats for the nulls of the other")
    keys = [key] if isinstance(key, str) else list(key)
    missing = [k for k in keys + ([event_time_column] if event_time_column else []) if k not in df.columns]
    if missing:
        raise JobError(f"columns {missing} are not in the input; it has {df.columns}")
    main = _as_struct(output_schema)
    side = {tag: _as_struct(sch) for tag, sch in (side_outputs or {}).items()}
    schema = tagged_schema(main, side) if side else main
    if time_mode == "event" and event_time_column is None:
        raise JobError("time_mode='event' needs event_time_column (and a watermark on the input)")
    num_partitions = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    kw = dict(function=function, time_mode=time_mode, key_columns=keys, input_columns=df.columns, output_columns=schema.names,
              record=record, event_time_column=event_time_column, num_partitions=num_partitions,
              name=name or type(function).__name__, main_columns=main.names,
              side_columns={t: sch.names for t, sch in side.items()})
    if layout == "bucket":
        if broadcast is not None:
            kw.update(broadcast_columns=broadcast.columns, broadcast_record=broadcast_record)
        return _bucket_process(df, keys, schema, kw, variant, time_mode, buckets, broadcast, ttl_clock)
    if buckets is not None:
        raise JobError("buckets applies to layout='bucket' only")
    grouped = df.groupBy(*keys)
    if variant == "row":
        return grouped.transformWithState(_make_row_processor(**kw), schema, "Append", TIME_MODES[time_mode])
    return grouped.transformWithStateInPandas(_make_pandas_processor(**kw), schema, "Append", TIME_MODES[time_mode])


def _bucket_process(df, keys, schema, kw, variant, time_mode, buckets, broadcast=None, ttl_clock=None):
    from pyspark.sql.pandas.types import to_arrow_type

    n = bk.DEFAULT_BUCKETS if buckets is None else buckets
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise JobError(f"buckets must be a positive int, found {buckets!r}")
    if bk.BUCKET_COLUMN in df.columns:
        raise JobError(f"the input already has a column {bk.BUCKET_COLUMN!r}, which the bucket layout adds")
    types = [to_arrow_type(df.schema[k].dataType) for k in keys]
    key_type = types[0] if len(keys) == 1 else pa.struct([pa.field(k, t) for k, t in zip(keys, types)])
    # rows are packed per bucket before the shuffle (pandas operator, no event time: the
    # watermark must see the event-time column, which packing would hide)
    packed = variant == "pandas" and time_mode != "event" and broadcast is None
    data = bk.bucket_input(df, keys, n, pack=packed)
    if broadcast is not None:
        data = bk.broadcast_input(data, broadcast, n)
    grouped = data.groupBy(bk.BUCKET_COLUMN)
    proc = bk.make_processor(variant, key_arrow_type=key_type, buckets=n, packed=packed, ttl_clock=ttl_clock, **kw)
    if variant == "row":
        return grouped.transformWithState(proc, schema, "Append", TIME_MODES[time_mode])
    return grouped.transformWithStateInPandas(proc, schema, "Append", TIME_MODES[time_mode])


# --- inputs, queries, results -----------------------------------------------------------------
def write_input(records: Sequence[Any], directory: str | Path, files: int = 4, record_type: Any = None) -> Path:
    """Write records (dataclasses, dicts or a DataFrame) as ``files`` Parquet files, for a streaming file source.

    Each file becomes (up to) one micro-batch with ``max_files_per_trigger=1``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(records, pd.DataFrame):
        table = pa.Table.from_pandas(records, preserve_index=False)
    else:
        records = list(records)
        if not records:
            raise JobError("write_input needs at least one record")
        first = records[0]
        rtype = record_type or (type(first) if dataclasses.is_dataclass(first) else None)
        if rtype is not None:
            info = type_info(rtype)
            rows = [info.to_arrow(r) for r in records]
            table = pa.Table.from_pylist(rows, schema=pa.schema(list(info.arrow_type)))
        else:
            table = pa.Table.from_pylist(records)
    files = max(1, min(files, table.num_rows))
    step = -(-table.num_rows // files)
    paths = []
    for i in range(files):
        paths.append(directory / f"part-{i:05d}.parquet")
        pq.write_table(table.slice(i * step, step), paths[-1])
    in_file_order(paths)
    return directory


def in_file_order(paths: Sequence[str | Path]) -> None:
    """Give ``paths`` modification times one second apart, in order, so Spark reads them in that order.

    Spark's file source takes new files in order of modification time, and files with equal
    times in the order the file system lists them (on ext4 and tmpfs not by name). Files
    written within the same millisecond (Java's resolution) then go into micro-batches in an
    order that changes from run to run, and with it every output that depends on the order of
    a key's records (a running count, the first of duplicates, where a session splits).
    """
    base = time.time_ns() // 1_000_000_000 - len(paths)
    for i, p in enumerate(paths):
        t = (base + i) * 1_000_000_000
        os.utime(p, ns=(t, t))


def _spark_schema_of(path: Path):
    from pyspark.sql.pandas.types import from_arrow_type
    from pyspark.sql.types import StructField, StructType

    files = sorted(p for p in path.glob("*.parquet"))
    if not files:
        raise JobError(f"no Parquet files in {path}")
    schema = pq.read_schema(files[0])
    return StructType([StructField(f.name, from_arrow_type(f.type, prefer_timestamp_ntz=False), True) for f in schema])


class _WorkerStartTimeout(Exception):
    """Spark's Python worker did not connect back in time (a busy machine); the query can be retried."""


def _await(query, checkpoint_dir: Path, deadline: float, stop_after_batches: int | None) -> None:
    while query.isActive:
        if stop_after_batches is not None and query.lastProgress is not None \
                and query.lastProgress["batchId"] + 1 >= stop_after_batches:
            query.stop()
            break
        if time.perf_counter() > deadline:
            query.stop()
            raise JobError(f"the Spark query on {checkpoint_dir} did not finish in time; it was stopped")
        try:
            query.awaitTermination(0.2)
        except Exception:  # the query failed: its exception() says why
            break
    exc = query.exception()
    if exc is not None:
        text = str(exc)
        if "failed to connect back" in text:
            raise _WorkerStartTimeout(text)
        raise JobError(f"the Spark query on {checkpoint_dir} failed: {text[:2000]}") from exc


@dataclass
class SparkRun:
    """A finished (or stopped) streaming query of :func:`run_on_spark`."""

    checkpoint_dir: Path
    output_dir: Path
    batches: int
    input_rows: int
    seconds: float
    progress: list[dict] = field(default_factory=list)
    #: the side outputs' tags (the query then writes the tagged layout, one folder per output)
    side_outputs: tuple[str, ...] = ()

    @property
    def rows_per_second(self) -> float:
        return self.input_rows / self.seconds if self.seconds > 0 else float("nan")

    def output(self, tag: str | None = None) -> pd.DataFrame:
        """What the function emitted, as pandas (read from the query's Parquet sink).

        ``tag`` names a side output (``ctx.output(tag, value)``); ``None`` is the main output
        (``out.collect``). With side outputs the sink is partitioned by output, one folder each.
        """
        if not self.side_outputs:
            if tag is not None:
                raise JobError(f"the query on {self.checkpoint_dir} declared no side outputs; found tag {tag!r}")
            return _read_parquet(sorted(self.output_dir.glob("*.parquet")))
        name = MAIN_OUTPUT if tag is None else tag
        if name != MAIN_OUTPUT and name not in self.side_outputs:
            raise JobError(f"the query on {self.checkpoint_dir} has no side output {tag!r}; it has "
                           f"{list(self.side_outputs)}")
        files = sorted((self.output_dir / f"{OUTPUT_COLUMN}={name}").glob("*.parquet"))
        table = _read_parquet(files, as_table=True)
        if table is None:
            return pd.DataFrame()
        return pa.Table.from_struct_array(table.column(name).combine_chunks()).to_pandas()


def _read_parquet(files: Sequence[Path], as_table: bool = False):
    if not files:
        return None if as_table else pd.DataFrame()
    t = ds.dataset([str(f) for f in files], format="parquet").to_table()
    return t if as_table else t.to_pandas()


def _end_of_input_file(in_dir: Path, event_time_column: str) -> Path:
    """A last input file of one row: nulls, and the event time :data:`END_OF_INPUT_MS` (see there)."""
    files = sorted(in_dir.glob("*.parquet"))
    schema = pq.read_schema(files[0]).remove_metadata()
    schema = pa.schema([f.with_nullable(True) for f in schema])  # Spark reads file sources as nullable anyway
    field_ = schema.field(event_time_column)
    if pa.types.is_timestamp(field_.type):
        end = pa.array([END_OF_INPUT_MS], pa.int64()).cast(pa.timestamp("ms", tz=field_.type.tz)).cast(field_.type)
    else:
        end = pa.array([END_OF_INPUT_MS], field_.type)
    cols = [end if f.name == event_time_column else pa.nulls(1, f.type) for f in schema]
    path = in_dir / "zz-end-of-input.parquet"
    pq.write_table(pa.Table.from_arrays(cols, schema=schema), path)
    in_file_order(files + [path])
    return path


def _source(spark, in_dir: Path, max_files_per_trigger: int | None):
    reader = spark.readStream.schema(_spark_schema_of(in_dir))
    if max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", int(max_files_per_trigger))
    return reader.parquet(str(in_dir))


def run_on_spark(function: KeyedProcessFunction, source: str | Path | Sequence[Any], key: str | Sequence[str],
                 output_schema, checkpoint_dir: str | Path, *, output_dir: str | Path | None = None,
                 time_mode: str = "none", variant: str | None = None, record: Any = None,
                 event_time_column: str | None = None, watermark_delay: str = "0 seconds",
                 max_files_per_trigger: int | None = 1, spark=None, timeout_s: float = 900,
                 stop_after_batches: int | None = None, layout: str | None = None,
                 buckets: int | None = None, side_outputs: Mapping[str, Any] | None = None,
                 broadcast_source: str | Path | Sequence[Any] | None = None, broadcast_record: Any = None,
                 end_of_input: bool = False, ttl_clock: Any = None, prepare: Any = None,
                 input_files: int = 4) -> SparkRun:
    """Run ``function`` as a Spark streaming query over Parquet files, to the end of the input.

    ``source`` is a directory of Parquet files, or records (written with :func:`write_input`
    next to the checkpoint, as ``input_files`` files: as many micro-batches). The query uses the ``availableNow`` trigger, checkpoints to
    ``checkpoint_dir`` (RocksDB state store with changelog checkpointing) and writes what
    the function emits as Parquet to ``output_dir`` (default: ``<checkpoint_dir>-output``).

    With processing-time timers an ``availableNow`` query in PySpark 4.3 never ends (Spark
    keeps planning batches for timers that might fire); no-data micro-batches are switched
    off for such queries, so processing-time timers fire only in batches that carry data.

    ``layout`` and ``buckets`` choose how state is kept (see :func:`keyed_process`); a
    checkpoint must be resumed with the layout and bucket count it was started with.

    ``side_outputs`` (tag -> schema) and ``broadcast_source`` (a directory or records, the
    broadcast input of a ``KeyedBroadcastProcessFunction``, read one file per micro-batch
    like ``source``) are described at :func:`keyed_process`; :meth:`SparkRun.output` reads
    each output. ``end_of_input=True`` (event time, ``source`` given as records) ends the
    input with a marker row whose event time is :data:`~explorer.spark_engine.context.END_OF_INPUT_MS`:
    the watermark then passes every timer and they all fire, as at the end of a bounded
    input on the engine and in Flink. ``prepare`` (a function of the streaming DataFrame,
    e.g. a stateless ``mapInArrow`` parse) runs on the input before the keyed function.
    """
    spark = spark or get_spark()
    checkpoint_dir = Path(checkpoint_dir)
    output_dir = Path(output_dir) if output_dir is not None else checkpoint_dir.with_name(checkpoint_dir.name + "-output")
    if isinstance(source, (str, Path)):
        in_dir = Path(source)
        if end_of_input:
            raise JobError("end_of_input=True needs the input as records: the marker file is not written into "
                           f"a folder of yours ({in_dir})")
    else:
        in_dir = write_input(source, checkpoint_dir.with_name(checkpoint_dir.name + "-input"), files=input_files)
        if record is None and source and dataclasses.is_dataclass(source[0]):
            record = type(source[0])
    if end_of_input:
        if event_time_column is None:
            raise JobError("end_of_input=True needs event_time_column: the marker moves the event-time watermark")
        _end_of_input_file(in_dir, event_time_column)
    df = _source(spark, in_dir, max_files_per_trigger)
    if prepare is not None:
        df = prepare(df)
    if event_time_column is not None:
        from pyspark.sql import functions as F
        from pyspark.sql.types import TimestampType

        if not isinstance(df.schema[event_time_column].dataType, TimestampType):
            # epoch milliseconds (the engine's time unit): Spark watermarks need a timestamp column
            df = df.withColumn(EVENT_TIME_COLUMN, F.timestamp_millis(F.col(event_time_column)))
            event_time_column = EVENT_TIME_COLUMN
        df = df.withWatermark(event_time_column, watermark_delay)
    broadcast = None
    if broadcast_source is not None:
        if isinstance(broadcast_source, (str, Path)):
            b_dir = Path(broadcast_source)
        else:
            b_dir = write_input(broadcast_source, checkpoint_dir.with_name(checkpoint_dir.name + "-broadcast-input"),
                                files=1)
            if broadcast_record is None and broadcast_source and dataclasses.is_dataclass(broadcast_source[0]):
                broadcast_record = type(broadcast_source[0])
        broadcast = _source(spark, b_dir, max_files_per_trigger)
    result = keyed_process(df, function, key, output_schema, time_mode=time_mode, variant=variant,
                           record=record, event_time_column=event_time_column, layout=layout, buckets=buckets,
                           side_outputs=side_outputs, broadcast=broadcast, broadcast_record=broadcast_record,
                           ttl_clock=ttl_clock)
    tags = tuple(side_outputs or ())
    conf_key = "spark.sql.streaming.noDataMicroBatches.enabled"
    attempts = 5
    for attempt in range(attempts):
        previous = spark.conf.get(conf_key)
        if time_mode == "processing":
            spark.conf.set(conf_key, "false")
        try:
            writer = (result.writeStream.format("parquet").option("path", str(output_dir))
                      .option("checkpointLocation", str(checkpoint_dir)).outputMode("append")
                      .trigger(availableNow=True))
            if tags:  # one folder per output: output=main/, output=<tag>/
                writer = writer.partitionBy(OUTPUT_COLUMN)
            t0 = time.perf_counter()
            query = writer.start()
        finally:
            spark.conf.set(conf_key, previous)
        try:
            _await(query, checkpoint_dir, t0 + timeout_s, stop_after_batches)
            seconds = time.perf_counter() - t0
            progress = [dict(p) for p in query.recentProgress]
            break
        except _WorkerStartTimeout:
            time.sleep(2 * (attempt + 1))
            if attempt == attempts - 1:
                raise JobError(
                    f"the Spark query on {checkpoint_dir} failed {attempts} times with 'Python worker failed to "
                    "connect back': Spark gives a new Python worker 10 s to start, which an overloaded "
                    "machine misses; retry when the machine is less busy"
                ) from None
        finally:
            if query.isActive:
                query.stop()
    rows = sum(int(p.get("numInputRows", 0)) for p in progress)
    batches = len({p["batchId"] for p in progress})
    return SparkRun(checkpoint_dir, output_dir, batches, rows, seconds, progress, tags)

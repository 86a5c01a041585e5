"""The example pipelines (:mod:`explorer.pipelines`) on Spark Structured Streaming, with the engine's outputs.

::

    from explorer.spark import run_on_spark
    run = run_on_spark("orders", n=3000, out="spark-out/")   # or a Pipeline
    run.outputs["illegal"]            # pandas, one row per record the job emitted there
    explorer.open(run.checkpoints["order-state-machine"])
    run.same_as(engine_outputs("orders", run.records))    # record for record

Each pipeline runs the same functions as on the engine, through :mod:`.adapter`:

=============  ==================================================================================
pipeline       on Spark
=============  ==================================================================================
url_counts     lines parsed by a stateless ``mapInArrow``; two queries (Spark cannot branch one
               stream into two stateful operators of one query): the rolling count as a
               ``ValueState`` function and :class:`~explorer.pipelines.url_counts.UrlStats`
sessions       :class:`~explorer.pipelines.sessions.SessionWindowFunction`, event-time timers
fraud          :class:`~explorer.pipelines.fraud.FraudDetector` with the rules as a broadcast input
               (bucket layout: every bucket keeps its copy of the broadcast state, see
               :func:`~explorer.spark_engine.buckets.broadcast_input`)
dedup          :class:`~explorer.pipelines.dedup.Deduplicator`, its TTL on a
               :class:`~explorer.pipelines.ReplayClock` as on the engine (bucket layout: Spark's
               own TTL runs on the wall clock only)
orders         :class:`~explorer.pipelines.orders.OrderStateMachine` with side outputs ``illegal``
               and ``stuck`` (the tagged output layout, one folder per output)
consumer_lag   stateless: one ``mapInArrow`` query writing ``lag`` and ``lagging``
=============  ==================================================================================

Event-time pipelines end their input with the end-of-input marker (see
:data:`~explorer.spark_engine.context.END_OF_INPUT_MS`), so every timer fires at the end as on the
engine, and Spark's watermark delay is the pipeline's bounded out-of-orderness plus one
second, so no record is late. Input files are read one per micro-batch in order
(:func:`~explorer.spark_engine.adapter.in_file_order`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd
import pyarrow as pa

from ..engine import KeyedProcessFunction, ValueStateDescriptor
from ..errors import JobError
from ..format.types import type_info
from ..pipelines import PIPELINES, Pipeline, ReplayClock, consumer_lag, dedup, fraud, orders, sessions, url_counts
from ..spark_session import get_spark
from .adapter import SparkRun, run_on_spark as run_function, write_input
from .context import MAIN_OUTPUT, OUTPUT_COLUMN, tagged_schema
from .statemap import spark_type

__all__ = ["PipelineRun", "RollingCount", "as_rows", "engine_outputs", "run_pipeline_on_spark"]


@dataclass
class PipelineRun:
    """One example pipeline run on Spark: its input, outputs and checkpoints."""

    pipeline: str
    records: list[Any]
    #: output or side-output name -> what the job emitted there (pandas)
    outputs: dict[str, pd.DataFrame]
    #: operator uid -> its Spark checkpoint folder
    checkpoints: dict[str, Path]
    runs: list[SparkRun] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.runs)

    @property
    def batches(self) -> int:
        return max((r.batches for r in self.runs), default=0)

    def rows(self, name: str) -> list[tuple]:
        """The records of output ``name`` as sorted tuples (what :func:`as_rows` makes of the engine's)."""
        df = self.outputs[name]
        return sorted(tuple(_plain(x) for x in r) for r in df.itertuples(index=False, name=None))

    def differences(self, engine: dict[str, list[Any]]) -> dict[str, tuple[int, int]]:
        """Outputs whose records differ from the engine's: ``name -> (only on Spark, only on the engine)``."""
        out = {}
        for name, values in engine.items():
            mine, theirs = pd.Series(self.rows(name), dtype=object), pd.Series(as_rows(values), dtype=object)
            a, b = mine.value_counts(), theirs.value_counts()
            diff = a.sub(b, fill_value=0)
            if (diff != 0).any():
                out[name] = (int(diff[diff > 0].sum()), int(-diff[diff < 0].sum()))
        return out


def _plain(x: Any) -> Any:
    if x is None or (isinstance(x, float) and x != x):
        return None
    return x.item() if hasattr(x, "item") else x


def as_rows(values: Sequence[Any]) -> list[tuple]:
    """Engine outputs (dataclasses or tuples) as sorted tuples of their fields."""
    return sorted(dataclasses.astuple(v) if dataclasses.is_dataclass(v) else tuple(v) for v in values)


def engine_outputs(pipeline: Pipeline | str, records: Sequence[Any], parallelism: int = 2,
                   **options: Any) -> dict[str, list[Any]]:
    """What ``pipeline`` emits on the engine for ``records``: output and side-output name -> values.

    ``options`` go to the pipeline's ``build`` (``rules=`` of fraud, ``threshold=`` of consumer_lag).
    """
    pipe = _pipeline(pipeline)
    result = pipe.run(records=list(records), parallelism=parallelism, **options)
    out = {name: result.output(name) for name in pipe.outputs}
    out.update({tag: result.side_output(tag) for tag in pipe.side_outputs})
    return out


class RollingCount(KeyedProcessFunction):
    """The engine's built-in ``key_by(...).count()`` as a function: ``ValueState[int]`` ``count``, ``(key, n)`` per record."""

    COUNT = ValueStateDescriptor("count", int)

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        out.collect((ctx.get_current_key(), n))


def _pipeline(pipeline: Pipeline | str) -> Pipeline:
    if isinstance(pipeline, Pipeline):
        return pipeline
    if pipeline not in PIPELINES:
        raise JobError(f"no pipeline named {pipeline!r}; pipelines are {sorted(PIPELINES)}")
    return PIPELINES[pipeline]


def _schema(cls) -> Any:
    """The Spark struct of a dataclass's fields (an output schema)."""
    return spark_type(cls)


def _delay(max_out_of_orderness_ms: int) -> str:
    return f"{max_out_of_orderness_ms // 1000 + 1} seconds"


def run_pipeline_on_spark(pipeline: Pipeline | str, records: Sequence[Any] | None = None, *, n: int | None = None,
                          seed: int = 0, out: str | Path, files: int = 4, layout: str | None = None,
                          **options: Any) -> PipelineRun:
    """Run an example pipeline on Spark over ``records`` (default: ``n`` generated for ``seed``).

    Writes under ``out``: ``<uid>/checkpoint``, ``<uid>/output`` per query and the input
    files; ``files`` input files make as many micro-batches. ``layout`` (``"key"`` or
    ``"bucket"``) applies to the pipelines that may use either (fraud and dedup always use
    buckets). ``options`` are the pipeline's build options that apply on Spark:
    ``rules=`` (fraud's broadcast input) and ``threshold=`` (consumer_lag).
    """
    pipe = _pipeline(pipeline)
    if records is None:
        records = pipe.generate(pipe.default_records if n is None else n, seed=seed)
    records = list(records)
    base = Path(out)
    return _RUNNERS[pipe.name](list(records), base, files, layout, **options)


def _keyed(base: Path, uid: str, function, src, key, schema, files: int, **kw) -> SparkRun:
    return run_function(function, src, key, schema, base / uid / "checkpoint", output_dir=base / uid / "output",
                        input_files=files, **kw)


def _url_counts(records, base, files, layout) -> PipelineRun:
    src = write_input([{"line": x} for x in records], base / "input", files=files)
    kw = dict(record=url_counts.AccessLog, layout=layout, prepare=_parse)
    count = _keyed(base, "url-count", RollingCount(), src, "url", "url string, count long", files, **kw)
    stats = _keyed(base, "url-stats", url_counts.UrlStats(), src, "url", _schema(url_counts.UrlHits), files, **kw)
    return PipelineRun("url_counts", records, {"url_counts": count.output(), "url_stats": stats.output()},
                       {"url-count": count.checkpoint_dir, "url-stats": stats.checkpoint_dir}, [count, stats])


def _parse(df):
    """The stateless ``map "parse" -> filter "valid"`` of the job: access-log lines to AccessLog rows."""
    return df.mapInArrow(_parse_lines, _schema(url_counts.AccessLog))


def _parse_lines(batches):
    info = type_info(url_counts.AccessLog)
    schema = pa.schema(list(info.arrow_type))
    for batch in batches:
        logs = [url_counts.parse_line(x) for x in batch.column(0).to_pylist()]
        rows = [info.to_arrow(x) for x in logs if x is not None]
        yield pa.RecordBatch.from_pylist(rows, schema=schema)


def _sessions(records, base, files, layout) -> PipelineRun:
    run = _keyed(base, "sessions", sessions.SessionWindowFunction(), records, "user_id",
                 _schema(sessions.SessionSummary), files, record=sessions.Event, time_mode="event", event_time_column="ts",
                 watermark_delay=_delay(sessions.MAX_OUT_OF_ORDERNESS_MS), end_of_input=True, layout=layout)
    return PipelineRun("sessions", records, {"sessions": run.output()}, {"sessions": run.checkpoint_dir}, [run])


def _fraud(records, base, files, layout, rules: Sequence[Any] = (fraud.DEFAULT_RULE,)) -> PipelineRun:
    run = _keyed(base, "fraud-detector", fraud.FraudDetector(), records, "account_id", _schema(fraud.Alert), files,
                 record=fraud.Transaction, time_mode="event", event_time_column="ts",
                 watermark_delay=_delay(fraud.MAX_OUT_OF_ORDERNESS_MS), end_of_input=True,
                 broadcast_source=list(rules), broadcast_record=fraud.Rule, buckets=8)
    return PipelineRun("fraud", records, {"alerts": run.output()}, {"fraud-detector": run.checkpoint_dir}, [run])


def _dedup(records, base, files, layout) -> PipelineRun:
    clock = ReplayClock()
    run = _keyed(base, "dedup", dedup.Deduplicator(clock), records, "event_id", _schema(dedup.Event), files,
                 record=dedup.Event, time_mode="event", event_time_column="ts",
                 watermark_delay=_delay(dedup.MAX_OUT_OF_ORDERNESS_MS), ttl_clock=clock, buckets=8)
    return PipelineRun("dedup", records, {"unique": run.output()}, {"dedup": run.checkpoint_dir}, [run])


def _orders(records, base, files, layout) -> PipelineRun:
    run = _keyed(base, "order-state-machine", orders.OrderStateMachine(), records, "order_id", _schema(orders.Order),
                 files, record=orders.OrderEvent, time_mode="event", event_time_column="ts",
                 watermark_delay=_delay(orders.MAX_OUT_OF_ORDERNESS_MS), end_of_input=True, layout=layout,
                 side_outputs={"illegal": _schema(orders.IllegalTransition), "stuck": _schema(orders.StuckOrder)})
    return PipelineRun("orders", records,
                       {"orders": run.output(), "illegal": run.output("illegal"), "stuck": run.output("stuck")},
                       {"order-state-machine": run.checkpoint_dir}, [run])


def _consumer_lag(records, base, files, layout, threshold: int = consumer_lag.DEFAULT_THRESHOLD) -> PipelineRun:
    src = write_input(records, base / "input", files=files)
    spark = get_spark()
    lag = _schema(consumer_lag.ConsumerLag)
    schema = tagged_schema(lag, {"lagging": lag})
    df = spark.readStream.schema(spark.read.parquet(str(src)).schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    ckpt, out_dir = base / "lag" / "checkpoint", base / "lag" / "output"
    q = (df.mapInArrow(_lag_rows(threshold), schema).writeStream.format("parquet").partitionBy(OUTPUT_COLUMN)
         .option("path", str(out_dir)).option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()
    progress = [dict(p) for p in q.recentProgress]
    run = SparkRun(ckpt, out_dir, len({p["batchId"] for p in progress}),
                   sum(int(p.get("numInputRows", 0)) for p in progress),
                   sum(p.get("durationMs", {}).get("triggerExecution", 0) for p in progress) / 1000, progress,
                   ("lagging",))
    return PipelineRun("consumer_lag", records, {"lag": run.output(), "lagging": run.output("lagging")},
                       {"lag": ckpt}, [run])


def _lag_rows(threshold: int) -> Callable:
    """``mapInArrow``: each report's lag to ``main`` (the ``lag`` sink), and again to ``lagging`` past ``threshold``."""

    def rows(batches):
        info = type_info(consumer_lag.ConsumerLag)
        struct = pa.struct(list(info.arrow_type))
        for batch in batches:
            d = batch.to_pydict()
            lags = [consumer_lag.compute_lag(consumer_lag.OffsetReport(*vals)) for vals in zip(
                *(d[f.name] for f in dataclasses.fields(consumer_lag.OffsetReport)))]
            lagging = [x for x in lags if consumer_lag.is_lagging(threshold, x)]
            tags = [MAIN_OUTPUT] * len(lags) + ["lagging"] * len(lagging)
            main = [info.to_arrow(x) for x in lags] + [None] * len(lagging)
            side = [None] * len(lags) + [info.to_arrow(x) for x in lagging]
            yield pa.RecordBatch.from_arrays([pa.array(tags, pa.string()), pa.array(main, struct),
                                              pa.array(side, struct)], [OUTPUT_COLUMN, MAIN_OUTPUT, "lagging"])

    return rows


_RUNNERS: dict[str, Callable[..., PipelineRun]] = {
    "url_counts": _url_counts,
    "sessions": _sessions,
    "fraud": _fraud,
    "dedup": _dedup,
    "orders": _orders,
    "consumer_lag": _consumer_lag,
}

"""The Spark part of ``make demo``: one example pipeline on local Spark, and its checkpoint opened.

``run_spark_demo(out)`` runs the url-counts pipeline's :class:`UrlStats` function
(ValueState + MapState) through :func:`explorer.spark.run_on_spark`, next to
Spark's native ``groupBy("url").count()`` over the same files, then opens the
checkpoint with :func:`explorer.open` and returns a short summary (also written
as ``out/spark/summary.json``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from ..pipelines import url_counts
from ..readers.base import KeyedStateQuery
from ..snapshot import open as open_snapshot
from .adapter import run_on_spark, write_input
from .session import get_spark

__all__ = ["run_spark_demo"]

URL_HITS_SCHEMA = "url string, hits long, status string, status_hits long"


def run_spark_demo(out: str | Path, n: int = 5000, files: int = 4) -> dict[str, Any]:
    base = Path(out) / "spark"
    shutil.rmtree(base, ignore_errors=True)
    spark = get_spark()
    logs = [x for x in map(url_counts.parse_line, url_counts.generate(n)) if x is not None]
    src = write_input(logs, base / "input", files=files)

    run = run_on_spark(url_counts.UrlStats(), src, "url", URL_HITS_SCHEMA, base / "url-stats" / "checkpoint",
                       output_dir=base / "url-stats" / "output", record=url_counts.AccessLog)

    # the native fast path for the plain count, as a Spark user would write it
    native_ckpt = base / "url-count-native" / "checkpoint"
    df = spark.readStream.schema(spark.read.parquet(str(src)).schema).option("maxFilesPerTrigger", 1).parquet(str(src))
    q = (df.groupBy("url").count().writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(native_ckpt)).trigger(availableNow=True).start())
    q.awaitTermination()

    snap = open_snapshot(run.checkpoint_dir)
    state = snap.reader  # the SparkCheckpointReader
    counts = next(state.keyed_pieces(KeyedStateQuery(states=frozenset({"count"})))).to_pandas()
    top = counts.sort_values("value", ascending=False).head(5)
    summary = {
        "checkpoint": str(run.checkpoint_dir),
        "native_checkpoint": str(native_ckpt),
        "batches": run.batches,
        "input_rows": run.input_rows,
        "rows_per_second": round(run.rows_per_second, 1),
        "format": snap.format,
        "checkpoint_id": snap.checkpoint_id,
        "shuffle_partitions": state.num_partitions,
        "states": state.states()[["state", "kind"]].to_dict("records"),
        "top_urls": [{"url": k, "hits": int(v), "partition": int(p)}
                     for k, v, p in zip(top["key"], top["value"], top["key_group"])],
    }
    (base / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary

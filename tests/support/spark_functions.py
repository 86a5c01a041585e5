"""Process functions and input helpers shared by the Spark adapter tests.

Spark's Python workers cannot import ``tests/``: :func:`by_value` makes cloudpickle send this
module's classes to them by value instead of by reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

from explorer.engine import KeyedProcessFunction, ValueStateDescriptor


def by_value() -> None:
    """Pickle this module's functions by value, so Spark's workers need not import it."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


class RemindLater(KeyedProcessFunction):
    """Registers a processing-time timer at the batch's time: due at once, so Spark fires it after the batch's data."""

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", int))

    def process_element(self, value, ctx, out):
        self.seen.update(self.seen.value(0) + 1)
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time())

    def on_timer(self, timestamp, ctx, out):
        out.collect((ctx.get_current_key(), self.seen.value(0), ctx.time_domain()))


def one_file_per_batch(tmp_path: Path, batches: list[list[dict]]) -> Path:
    """An input folder of one Parquet file per batch, in order: one micro-batch each (run_on_spark reads one file per trigger)."""
    from explorer.spark_engine.adapter import in_file_order, write_input

    src = tmp_path / "in"
    paths = []
    for i, b in enumerate(batches):
        write_input(b, tmp_path / f"b{i}", files=1)
        src.mkdir(exist_ok=True)
        paths.append(src / f"part-{i:05d}.parquet")
        (tmp_path / f"b{i}" / "part-00000.parquet").rename(paths[-1])
    in_file_order(paths)  # the files' own times may tie: Spark would read them in any order
    return src

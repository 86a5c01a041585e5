"""Spark side of bench_scale: hot keys, key-group distribution and a diff through the ``state-explorer``
data source on Spark ``local[2]``, with the raw read of the same files as the limit.

``run(snapshot_path, results, diff_with=None)`` fills ``results["spark"]`` (bench_scale calls it);
alone::

    python -m benchmarks._scale_spark PATH [--diff-with PATH2] [--out FILE]
    python -m benchmarks._scale_spark --build 1000000       # builds an engine savepoint of N keys and its
                                                             # variant (bench_explorer's), and measures both

Timed, once each, in this (fresh) process, in this order (what a user meets):

* ``spark_start``: starting the SparkSession (the JVM), not part of any question;
* ``raw_read``: every file of the snapshot read into memory (8 MiB reads, no decoding) and, for the engine's
  Parquet files, ``pyarrow.parquet.read_table`` of each: the limit a reader of the same files meets;
* ``source_read``: the data source's read alone (``read_state(columns=the analyses' columns).count()``:
  every partition decoded into Arrow batches by the executors and handed to the JVM, nothing aggregated;
  the analyses below do not pay this, their partitions aggregate, see :mod:`explorer.spark.datasource`);
* ``key_group_distribution``, ``hot_keys`` (by bytes, n=20) and, with a second snapshot,
  ``diff`` (``diff_summary(diff(a, b))``): each question from the path, as
  :mod:`explorer.spark.analysis` answers it, the snapshot read again each time.

Each figure: wall seconds, CPU seconds of this process and all its descendants (the JVM, the Python
workers: comparable under load), the driver's peak RSS (this Python process, VmHWM) and the peak RSS of
the whole tree (JVM + workers; a sum of per-process peaks, an upper bound), and ``keys``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a file: the project first, not an installed copy
    sys.path.insert(0, str(ROOT))

from benchmarks._machine import machine, result_path  # noqa: E402
from benchmarks._run_engine import vm_hwm_mb  # noqa: E402
from benchmarks._run_spark import tree_cpu_seconds, tree_rss_mb  # noqa: E402

LOAD_COLUMNS = ["operator", "state", "kind", "key", "key_group", "subtask", "size_bytes"]
MASTER = "local[2]"
#: for hundreds of millions of keys: the local executors live in the driver's JVM (Spark's default heap is 1 GB),
#: and get_spark's 4 shuffle partitions (a streaming default) would put ~25 M keys in each aggregation task
CONF = {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "64"}


def _timed(fn) -> tuple[dict[str, Any], Any]:
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    return {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 2), "driver_peak_rss_mb": round(vm_hwm_mb(), 1),
            "tree_peak_rss_mb": round(tree_rss_mb(), 1)}, out


def _files(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).rglob("*") if p.is_file())


def raw_read(path: Path) -> dict[str, Any]:
    """Every file's bytes (the disk's part) and, for Parquet files, pyarrow's decode of each (no pandas)."""
    import pyarrow.parquet as pq

    files = _files(path)
    t0 = time.perf_counter()
    nbytes = 0
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(8 << 20):
                nbytes += len(chunk)
    bytes_s = time.perf_counter() - t0
    parquet = [f for f in files if f.suffix == ".parquet"]
    out: dict[str, Any] = {"files": len(files), "bytes": nbytes, "bytes_read_seconds": round(bytes_s, 3)}
    if parquet:
        t0 = time.perf_counter()
        rows = sum(pq.read_table(f).num_rows for f in parquet)
        out.update({"parquet_read_table_seconds": round(time.perf_counter() - t0, 3), "parquet_rows": rows})
    return out


def run(snapshot_path: str | Path, results: dict, diff_with: str | Path | None = None, n: int = 20,
        master: str = MASTER) -> dict:
    """Measure the Spark path on ``snapshot_path`` (and a diff against ``diff_with``) into ``results["spark"]``."""
    from explorer.errors import JobError
    from explorer.spark import analysis, get_spark, read_state

    out: dict[str, Any] = {"master": master, "snapshot": str(snapshot_path), "machine_before": machine(),
                           "units": {"seconds": "wall s", "cpu_seconds": "CPU s of this process and descendants",
                                     "driver_peak_rss_mb": "MB, VmHWM of the Python driver",
                                     "tree_peak_rss_mb": "MB, sum of VmHWM over the driver, JVM and Python workers"}}
    def start():
        try:
            return get_spark(master, **CONF)
        except JobError:  # a session already runs (bench_scale's): its heap stays, the SQL settings apply
            out["note"] = "a SparkSession was already running: spark.driver.memory is its own"
            return get_spark(master, **{k: v for k, v in CONF.items() if k.startswith("spark.sql.")})

    fig, spark = _timed(start)
    out["spark_start"] = fig
    out["conf"] = {k: spark.sparkContext.getConf().get(k, None) if not k.startswith("spark.sql.") else spark.conf.get(k)
                   for k in CONF}
    out["raw_read"] = raw_read(Path(snapshot_path))
    df = read_state(spark, snapshot_path, columns=LOAD_COLUMNS)
    out["partitions"] = df.rdd.getNumPartitions()
    fig, rows = _timed(lambda: df.count())
    out["source_read"] = {**fig, "rows": int(rows)}
    fig, dist = _timed(lambda: analysis.key_group_distribution(snapshot_path, spark=spark))
    keys = int(dist["keys"].sum())
    out["key_group_distribution"] = {**fig, "keys": keys, "entries": int(dist["entries"].sum())}
    fig, hot = _timed(lambda: analysis.hot_keys(snapshot_path, n=n, by="bytes", spark=spark))
    out["hot_keys"] = {**fig, "keys": keys, "n": n, "top_key_bytes": int(hot["bytes"].iloc[0]) if len(hot) else None}
    if diff_with is not None:
        fig, summary = _timed(lambda: analysis.diff_summary(analysis.diff(snapshot_path, diff_with, spark=spark)))
        out["diff"] = {**fig, "keys": keys, "with": str(diff_with),
                       "keys_added": int(summary["keys_added"].sum()), "keys_removed": int(summary["keys_removed"].sum()),
                       "keys_changed": int(summary["keys_changed"].sum())}
    out["keys"] = keys
    out["driver_peak_rss_mb"] = round(vm_hwm_mb(), 1)
    out["machine_after"] = machine()
    results["spark"] = out
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path", nargs="?", help="a snapshot (any format explorer.open reads)")
    ap.add_argument("--diff-with", help="a second snapshot of the same job, for the diff")
    ap.add_argument("--build", type=int, help="build an engine savepoint of this many keys (and its variant) first")
    ap.add_argument("--workdir", default=None, help="where --build writes (default: a temp folder)")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--master", default=MASTER)
    ap.add_argument("--out", default=None, help="JSON file (default benchmarks/results/scale_spark.json)")
    args = ap.parse_args(argv)
    path, other = args.path, args.diff_with
    built = None
    if args.build:
        from benchmarks.bench_explorer import build_savepoint

        work = Path(args.workdir or tempfile.mkdtemp(prefix="scale-spark-"))
        t0 = time.perf_counter()
        path = build_savepoint(work / f"savepoint-{args.build}", args.build)
        other = build_savepoint(work / f"savepoint-{args.build}-variant", args.build, variant=True)
        built = {"keys": args.build, "seconds": round(time.perf_counter() - t0, 1), "folder": str(work)}
    if path is None:
        ap.error("give a snapshot PATH or --build N")
    results: dict[str, Any] = {}
    out = run(path, results, diff_with=other, n=args.n, master=args.master)
    if built:
        out["built"] = built
    target = Path(args.out) if args.out else result_path("scale_spark")
    target.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(json.dumps(results, indent=2, default=str))
    print(f"wrote {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONPATH", str(ROOT))  # Spark's Python workers import this checkout too
    raise SystemExit(main())

"""Spark side of bench_scale: hot keys, key-group distribution and a diff of two snapshots through the
``state-explorer`` data source on Spark ``local[2]``, with the raw read of the same files as the limit.

``run(snapshot_path, results, diff_with=None, flink=[...])`` fills ``results["spark"]`` (bench_scale calls it with
the 100 M-key engine savepoint, its variant and the Flink canonical savepoint pairs); alone::

    python -m benchmarks._scale_spark PATH [--diff-with PATH2] [--out FILE]
    python -m benchmarks._scale_spark --build 1000000       # builds an engine savepoint of N keys and its
                                                             # variant (bench_explorer's), and measures both

Timed in this (fresh) process, in this order (what a user meets), for each snapshot:

* ``spark_start`` (once): starting the SparkSession (the JVM), not part of any question;
* ``raw_read``: every file of the snapshot read into memory (8 MiB reads, no decoding) and, for the engine's
  Parquet files, ``pyarrow.parquet.read_table`` of each: the limit a reader of the same files meets; for a
  Flink savepoint also ``raw_scan``: every entry of its key-group streams found by the reader's fastest path,
  no value decoded (bench_scale's ``_flink_scan``); ``raw_read_both``: the same for both snapshots of the diff;
* ``source_read`` (``--source-read``): the data source's read alone, every partition decoded into Arrow batches
  and handed to the JVM, nothing aggregated (the analyses below do not pay this: their partitions aggregate);
* ``key_group_distribution``, ``hot_keys`` (by bytes, n=20), and with a second snapshot ``diff``
  (``diff_summary(a, b)``: each partition diffs one key-group range of both snapshots and sends its counts per
  status) and ``diff_changes`` (``collect_diff(diff(a, b, unchanged=False))``: a row per changed, added or removed
  key brought to the driver as Arrow batches and made the frame ``explorer.diff(a, b, unchanged=False)`` returns
  on one machine; ``--to-pandas`` also times ``diff(...).toPandas()``, what it replaced, as ``diff_changes_to_pandas``):
  each question from the paths, as :mod:`explorer.distributed.analysis` answers it, the snapshots read again each time.

Each figure: wall seconds, CPU seconds of this process and all its descendants (the JVM, the Python
workers: comparable under load), the driver's peak RSS (this Python process, VmHWM), the peak RSS of the
whole tree during that question (JVM + Python workers + driver: each process's VmHWM reset before the question
through ``/proc/PID/clear_refs``, then summed: an upper bound of the tree's peak), the load average after it,
and ``keys``. Each answer is compared with the local one of the same snapshot in ``scale.json`` (``equals_local``).
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
from benchmarks._run_spark import _children, tree_cpu_seconds, tree_rss_mb  # noqa: E402

LOAD_COLUMNS = ["operator", "state", "kind", "key", "key_group", "subtask", "size_bytes"]
MASTER = "local[2]"
#: for hundreds of millions of keys: the local executors live in the driver's JVM (Spark's default heap is 1 GB),
#: and get_spark's 4 shuffle partitions (a streaming default) would put ~25 M keys in each aggregation task
CONF = {"spark.driver.memory": "6g", "spark.sql.shuffle.partitions": "64"}


def _tree_pids() -> list[int]:
    tree, todo, out = _children(), [os.getpid()], []
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += tree.get(pid, [])
    return out


def _reset_peaks() -> bool:
    """Reset the peak RSS (VmHWM) of this process and its descendants (Linux: ``5`` into ``clear_refs``)."""
    done = True
    for pid in _tree_pids():
        try:
            with open(f"/proc/{pid}/clear_refs", "w") as f:
                f.write("5")
        except OSError:
            done = False
    return done


def _peaks_by_kind() -> dict[str, float]:
    """Peak RSS (VmHWM, MB) of the JVM(s) and of the Python workers (summed, and the largest) under this process."""
    me = os.getpid()
    jvm = workers = largest = 0.0
    for pid in _tree_pids():
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/status") as f:
                hwm = next((int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:")), 0.0)
        except OSError:
            continue
        if comm == "java":
            jvm += hwm
        elif comm.startswith("python"):
            workers += hwm
            largest = max(largest, hwm)
    return {"jvm_peak_rss_mb": round(jvm, 1), "python_workers_peak_rss_mb": round(workers, 1),
            "largest_python_worker_peak_rss_mb": round(largest, 1)}


def _timed(fn) -> tuple[dict[str, Any], Any]:
    reset = _reset_peaks()
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    out = fn()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    return {"seconds": round(wall, 3), "cpu_seconds": round(cpu, 2), "driver_peak_rss_mb": round(vm_hwm_mb(), 1),
            "tree_peak_rss_mb": round(tree_rss_mb(), 1), **_peaks_by_kind(), "peaks_reset": reset,
            "load_average": [round(x, 2) for x in os.getloadavg()]}, out


#: files a generator leaves beside a snapshot's own (what it wrote, the build marker): not the snapshot's bytes
_NOT_SNAPSHOT = {"SCALE.json", ".complete", "EXPECTED.json"}


def _files(path: Path) -> list[Path]:
    return sorted(p for p in Path(path).rglob("*") if p.is_file() and p.name not in _NOT_SNAPSHOT)


def raw_read(path: Path) -> dict[str, Any]:
    """Every file's bytes (the disk's part) and, for Parquet files, pyarrow's decode of each (no pandas)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = _files(path)
    t0, c0 = time.perf_counter(), tree_cpu_seconds()
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
        # the tables are gone, but Arrow's allocator keeps their pages (100 M keys: the driver stayed at 386 MB RSS,
        # 176 MB after this): without it, every question's tree would count the raw read's leftovers
        pa.default_memory_pool().release_unused()
    out["seconds"] = round(bytes_s + out.get("parquet_read_table_seconds", 0.0), 3)
    out["cpu_seconds"] = round(tree_cpu_seconds() - c0, 2)
    return out


def raw_scan(path: Path) -> dict[str, Any]:
    """A Flink snapshot's entries found without decoding a value (bench_scale's raw scan), timed."""
    from benchmarks.bench_scale import _flink_scan

    t0, c0 = time.perf_counter(), tree_cpu_seconds()
    found = _flink_scan(Path(path))
    return {**found, "seconds": round(time.perf_counter() - t0, 3), "cpu_seconds": round(tree_cpu_seconds() - c0, 2)}


def _both(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(a[k] + b[k], 3) if isinstance(a.get(k), float) else a[k] + b[k]) for k in a
            if isinstance(a.get(k), (int, float)) and isinstance(b.get(k), (int, float))}


def _local_entry(local: dict | None, path: Path) -> dict | None:
    """The local (one machine) figures of the same snapshot in scale.json, for the answers' comparison."""
    for e in (local or {}).get("snapshots", []):
        if Path(str(e.get("path", ""))).name == Path(path).name:
            return e
    return None


def measure(spark, name: str, path: Path, other: Path | None, keys: int | None, n: int = 20,
            local: dict | None = None, source_read: bool = False, to_pandas: bool = False) -> dict[str, Any]:
    """The figures of one snapshot (and its diff with ``other``) on Spark."""
    from explorer.distributed import analysis
    from explorer.spark import read_state

    entry: dict[str, Any] = {"name": name, "path": str(path), "keys": keys, "machine_before": machine()}
    print(f"spark: {name} ({path})", flush=True)
    from explorer.stored import reader_for

    flink = reader_for(path).format_name == "flink"
    entry["raw_read"] = raw_read(Path(path))
    entry["bytes"] = entry["raw_read"]["bytes"]
    if flink:
        entry["raw_scan"] = raw_scan(Path(path))
    entry["partitions"] = {"aggregate": read_state(spark, path, aggregate="key_groups").rdd.getNumPartitions()}
    if source_read:
        df = read_state(spark, path, columns=LOAD_COLUMNS)
        fig, rows = _timed(lambda: df.count())
        entry["source_read"] = {**fig, "rows": int(rows)}
    fig, dist = _timed(lambda: analysis.key_group_distribution(path, spark=spark))
    found = int(dist["keys"].sum())
    entry["keys"] = keys if keys is not None else found
    entry["key_group_distribution"] = {**fig, "keys": found, "entries": int(dist["entries"].sum()),
                                       "bytes": int(dist["bytes"].sum())}
    print(f"  key_group_distribution: {fig['seconds']} s, {found:,} keys", flush=True)
    fig, hot = _timed(lambda: analysis.hot_keys(path, n=n, by="bytes", spark=spark))
    entry["hot_keys"] = {**fig, "keys": found, "n": n,
                         "by_bytes_top3": [[str(k), int(b)] for k, b in zip(hot["key"][:3], hot["bytes"][:3])]}
    print(f"  hot_keys: {fig['seconds']} s", flush=True)
    if other is not None:
        raw_b = raw_read(Path(other))
        entry["diff_partitions"] = read_state(spark, path, aggregate="diff", other=str(other)).rdd.getNumPartitions()
        fig, summary = _timed(lambda: analysis.diff_summary(path, other, spark=spark))
        statuses = {s: int(summary[f"keys_{s}"].sum()) for s in ("added", "removed", "changed", "unchanged")}
        entry["diff"] = {**fig, "keys": found, "with": str(other), "raw_read_both": _both(entry["raw_read"], raw_b),
                         "statuses": statuses}
        print(f"  diff (summary): {fig['seconds']} s {statuses}", flush=True)

        def changes(to_pandas: bool = False):
            d = analysis.diff(path, other, unchanged=False, spark=spark)
            d = d.toPandas() if to_pandas else analysis.collect_diff(d)
            return {"rows": len(d), "statuses": {str(k): int(v) for k, v in d["status"].value_counts().items() if v},
                    "dtypes": {c: str(t) for c, t in d.dtypes.items()}}

        for label, pandas_ in (("diff_changes", False), ("diff_changes_to_pandas", True))[:2 if to_pandas else 1]:
            fig, got = _timed(lambda: changes(pandas_))
            entry[label] = {**fig, "keys": found, **got}
            print(f"  {label} (changed rows to the driver): {fig['seconds']} s {got}", flush=True)
    mine = _local_entry(local, path)
    if mine is not None:
        tasks = mine.get("tasks", {})
        same: dict[str, Any] = {}
        kgd = tasks.get("key_group_distribution", {}).get("answer")
        if kgd:
            same["key_group_distribution"] = all(kgd.get(k) == entry["key_group_distribution"][k]
                                                 for k in ("keys", "entries", "bytes"))
        hk = tasks.get("hot_keys", {}).get("answer")
        if hk:
            same["hot_keys_top3"] = [list(x) for x in hk.get("by_bytes_top3", [])] == entry["hot_keys"]["by_bytes_top3"]
        df_ = tasks.get("diff", {}).get("answer")
        if df_ and "diff" in entry:
            want = {k: v for k, v in df_.get("statuses", {}).items() if v}
            same["diff"] = want == {k: v for k, v in entry["diff"]["statuses"].items() if v and k != "unchanged"}
            same["diff_changes"] = want == entry["diff_changes"]["statuses"] and \
                df_.get("rows") == entry["diff_changes"]["rows"]
        entry["equals_local"] = same
        entry["local_run"] = (mine.get("run") or {}).get("date") or local.get("date")
    entry["machine_after"] = machine()
    return entry


def run(snapshot_path: str | Path | None, results: dict, diff_with: str | Path | None = None, n: int = 20,
        master: str = MASTER, flink: list | tuple = (), local: dict | None = None, previous: dict | None = None,
        source_read: bool = False, name: str = "engine savepoint (canonical Parquet)", to_pandas: bool = False,
        save: Any = lambda out: None) -> dict:
    """Measure the Spark path on ``snapshot_path`` (and its diff with ``diff_with``) and on the ``flink`` snapshots
    (``(name, path, other, keys)`` each) into ``results["spark"]["snapshots"]``; the entries of ``previous`` (the
    results file's) for snapshots not measured now are kept; ``save(out)`` is called after each snapshot (a long run keeps what
    finished)."""
    from explorer.errors import JobError
    from explorer.spark import get_spark

    out: dict[str, Any] = {"master": master, "machine_before": machine(),
                           "units": {"seconds": "wall s", "cpu_seconds": "CPU s of this process and descendants",
                                     "driver_peak_rss_mb": "MB, VmHWM of the Python driver",
                                     "tree_peak_rss_mb": "MB, sum of VmHWM over the driver, JVM and Python workers, "
                                                         "each reset before the question (peaks_reset)",
                                     "bytes": "bytes of snapshot files"}}

    def start():
        try:
            return get_spark(master, **CONF)
        except JobError:  # a session already runs (bench_scale's): its heap stays, the SQL settings apply
            out["note"] = "a SparkSession was already running: spark.driver.memory is its own"
            return get_spark(master, **{k: v for k, v in CONF.items() if k.startswith("spark.sql.")})

    os.environ.setdefault("PYTHONPATH", str(ROOT))  # Spark's Python workers import this checkout too
    fig, spark = _timed(start)
    out["spark_start"] = fig
    out["conf"] = {k: spark.sparkContext.getConf().get(k, None) if not k.startswith("spark.sql.") else spark.conf.get(k)
                   for k in CONF}
    todo = ([(name, Path(snapshot_path), None if diff_with is None else Path(diff_with), None)]
            if snapshot_path is not None else []) + [(a, Path(p), o, k) for a, p, o, k in flink]
    measured = {str(p) for _, p, _, _ in todo}
    kept = [e for e in (previous or {}).get("snapshots", []) if e.get("path") not in measured]
    if previous and "snapshots" not in previous and previous.get("snapshot"):
        out["earlier_run"] = previous  # the figures of a run before the results kept one entry per snapshot
    elif previous and previous.get("earlier_run"):
        out["earlier_run"] = previous["earlier_run"]
    out["snapshots"] = kept
    results["spark"] = out
    for label, path, other, keys in todo:
        out["snapshots"].append(measure(spark, label, path, other, keys, n=n, local=local, source_read=source_read,
                                        to_pandas=to_pandas))
        save(out)
    out["machine_after"] = machine()
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
    ap.add_argument("--source-read", action="store_true", help="also time the data source's read alone")
    ap.add_argument("--to-pandas", action="store_true",
                    help="also bring the diff's changed rows with toPandas() (what collect_diff replaced)")
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
    out = run(path, results, diff_with=other, n=args.n, master=args.master, source_read=args.source_read,
              to_pandas=args.to_pandas)
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

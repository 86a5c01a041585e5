"""Throughput of the Apache Flink reader (issue 7): MB/s of snapshot files read into Arrow pieces.

Two snapshots made by Flink itself with the fixture job (tools/flink/make_fixtures.sh
--bench), kept in the gitignored .cache/:

* a canonical savepoint of the HashMap (heap) backend (2 M events, 1 M keys);
* a retained incremental checkpoint of the RocksDB backend (SST files, Snappy;
  500 k events, 250 k keys: RocksDB makes the job itself much slower to run);
* a value-heavy canonical savepoint of the HashMap backend: the production-style
  "types" job of tools/flink/src/ProductionFixtures.java (150 k events, 40 k keys,
  26 states per key: POJOs with nested lists, maps and POJOs, Rows, tuples,
  enums, java.time, BigDecimal, Kryo objects read with the job's jar), where the
  value decoders, not the framing, are what costs.

Run::

    python -m benchmarks.bench_flink_reader              # uses .cache/flink/bench/*
    python -m benchmarks.bench_flink_reader --generate   # first builds them (Java 17, a few minutes)
    python -m benchmarks.bench_flink_reader --smoke      # the small committed fixtures: checks it runs

Writes benchmarks/results/flink_reader.json: bytes, rows, seconds (best of
``--repeat``), MB/s (10^6 bytes of snapshot files per second of wall time),
rows/s, and the same per CPU-second of this process, all threads (the fairer
figure on a shared machine), with the machine, its load average and the date
(``benchmarks._machine``). The whole snapshot is read: every operator, state and
row, with key groups re-computed and checked. ``--workers`` sets the reader's
threads (``FlinkSnapshotReader.workers``, subtasks read side by side; default 2).

The timed runs are warm (imports done, numba kernels loaded). The first read in
a fresh Python process is recorded apart (``first_read_fresh_process``): with
the numba cache on disk (the usual case: numba's import and loading the compiled
kernels count), and with an empty cache (``NUMBA_CACHE_DIR`` a new folder: the
kernels are compiled first), each after ``import explorer.readers.flink``
(its time also recorded).

The peer: Apache Flink's own State Processor API (``SavepointReader.readKeyedState`` with a
``KeyedStateReaderFunction`` emitting one record per state entry: a value, a list element, a map
entry, a timer; the window operator through ``SavepointReader.window(...).aggregate``), reading the
same snapshot into the same number of rows, in the same run, in a fresh JVM per row
(``benchmarks/flink/spa/SpaReadBench.java``, ``benchmarks/_spa.py``). Its headline is what a user meets:
wall seconds from the JVM's start to its exit and the JVM's CPU seconds (user + system, all threads);
the read alone inside the JVM (``SavepointReader.read`` to the job's end) is recorded beside it. The
State Processor API's jar is published only on Maven Central: give it with ``--spa-jar`` or
``FLINK_SPA_JAR``; without it the peer row says it was not run and why.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import _spa
from benchmarks._machine import machine, result_path

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / ".cache" / "flink" / "bench"
VALUE_HEAVY = "value-heavy heap canonical savepoint"
SNAPSHOTS = {
    "heap canonical savepoint": "bench-heap-canonical-savepoint",
    "rocksdb incremental checkpoint": "bench-rocksdb-incremental-checkpoint",
    VALUE_HEAVY: "bench-types-heap-canonical-savepoint",
}
#: the State Processor API peer: which fixture job made each snapshot, and its state backend
SPA_JOBS = {
    "heap canonical savepoint": ("fixtures", "hashmap"),
    "rocksdb incremental checkpoint": ("fixtures", "rocksdb"),
    VALUE_HEAVY: ("types", "hashmap"),
}
#: the value-heavy snapshot's job classes (its Kryo values decode from them; tools/flink/make_fixtures.sh --bench)
JOB_JAR = "bench-types-job.jar"
TARGET_MB_S = 50.0


def snapshot_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name != "EXPECTED.json")


def read_all(path: Path, warm_up: bool = False, workers: int | None = None,
             jars: list[Path] | None = None) -> tuple[int, dict]:
    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.flink import FlinkSnapshotReader

    reader = FlinkSnapshotReader(path, jars=jars)
    if workers is not None:
        reader.workers = workers
    if warm_up:
        return 0, reader.info().extra
    rows = sum(piece.num_rows for piece in reader.keyed_pieces(KeyedStateQuery()))
    return rows, reader.info().extra


_FRESH = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
import explorer.readers.flink
t1 = time.perf_counter()
from benchmarks.bench_flink_reader import read_all
rows, _ = read_all(Path(sys.argv[1]), workers=None if sys.argv[2] == "-" else int(sys.argv[2]),
                   jars=[Path(j) for j in sys.argv[3:]])
t2 = time.perf_counter()
print(json.dumps({"import_seconds": t1 - t0, "first_read_seconds": t2 - t1, "rows": rows}))
"""


def _fresh_process(path: Path, workers: int | None, size: int, cold_cache: bool, jars: list[Path]) -> dict:
    """The first read of ``path`` in a new Python process (see the module doc)."""
    import tempfile

    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        if cold_cache:
            env["NUMBA_CACHE_DIR"] = cache
        out = subprocess.run([sys.executable, "-c", _FRESH, str(path), "-" if workers is None else str(workers),
                              *map(str, jars)],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "numba_cache": "empty (kernels compiled)" if cold_cache else "on disk",
        "import_seconds": {"value": round(got["import_seconds"], 3), "unit": "s"},
        "seconds": {"value": round(got["first_read_seconds"], 3), "unit": "s"},
        "throughput": {"value": round(size / 1e6 / got["first_read_seconds"], 1), "unit": "MB/s"},
        "rows": got["rows"],
    }


def _state_count(expected: dict) -> int | None:
    """States per key of a production-style job's EXPECTED.json (``operators``: uid -> {"states": ...})."""
    ops = expected.get("operators")
    if not isinstance(ops, dict) or not all(isinstance(op, dict) and "states" in op for op in ops.values()):
        return None
    return sum(len(op["states"]) for op in ops.values())


def _measure(path: Path, repeat: int, workers: int | None, jars: list[Path]) -> tuple[float, float, int, dict]:
    """Best wall seconds and best CPU seconds (all threads) of ``repeat`` whole reads; rows; reader extras."""
    best = best_cpu = None
    for _ in range(max(1, repeat)):
        t0, c0 = time.perf_counter(), time.process_time()
        rows, extra = read_all(path, workers=workers, jars=jars)
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        best = dt if best is None or dt < best else best
        best_cpu = cpu if best_cpu is None or cpu < best_cpu else best_cpu
    return best, best_cpu, rows, extra


def _spa_peer(path: Path, label: str, size: int, rows: int, fresh: list[dict], cp: str | None,
              jar_error: str | None, heap: str = "4g") -> dict:
    """The State Processor API reading ``path``'s keyed state in a fresh JVM (see the module doc)."""
    if cp is None:
        return {"status": jar_error or _spa.NOT_GIVEN}
    job, backend = SPA_JOBS[label]
    try:
        with _spa.where_written(path):
            got = _spa.run_jvm(cp, "SpaReadBench", [str(_spa.metadata_dir(path)), job, backend], heap=heap)
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
        return {"status": f"failed: {exc}"}
    explorer_fresh = next((f for f in fresh if f["numba_cache"] == "on disk"), None)
    peer = {
        "status": "measured",
        "tool": "Apache Flink State Processor API (SavepointReader.readKeyedState), fresh JVM",
        "rows": got["rows"],
        "rows_match": got["rows"] == rows,
        "rows_per_state": got["per_state"],
        "seconds": {"value": round(got["wall_seconds"], 3), "unit": "s"},
        "throughput": {"value": round(size / 1e6 / got["wall_seconds"], 1), "unit": "MB/s"},
        "cpu_seconds": {"value": round(got["cpu_seconds"], 3), "unit": "s"},
        "throughput_per_cpu_second": {"value": round(size / 1e6 / got["cpu_seconds"], 1), "unit": "MB/s"},
        "read_seconds_in_jvm": {"value": round(got["read_seconds"], 3), "unit": "s"},
        "read_cpu_seconds_in_jvm": {"value": round(got["read_cpu_seconds"], 3), "unit": "s"},
        "jvm_start_seconds": {"value": round(got["jvm_uptime_at_read_start_seconds"], 3), "unit": "s"},
        "parallelism": got["parallelism"],
        "java_heap": heap,
    }
    if explorer_fresh is not None:  # the explorer's like-for-like figure: a new process, import and first read
        ours = explorer_fresh["import_seconds"]["value"] + explorer_fresh["seconds"]["value"]
        peer["explorer_fresh_process_seconds"] = {"value": round(ours, 3), "unit": "s"}
        peer["explorer_speedup_fresh_process"] = round(got["wall_seconds"] / ours, 2)
    return peer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=BENCH_DIR, help="where the benchmark snapshots are")
    ap.add_argument("--generate", action="store_true", help="build missing snapshots with Flink first")
    ap.add_argument("--repeat", type=int, default=2, help="runs per snapshot; the best is kept")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/flink_reader.json")
    ap.add_argument("--smoke", action="store_true", help="read the small committed fixtures once (no Java needed)")
    ap.add_argument("--workers", type=int, default=None, help="reader threads (default: the reader's own, 2)")
    ap.add_argument("--single-thread-too", action="store_true",
                    help="also measure each snapshot with one reader thread (recorded under one_thread)")
    ap.add_argument("--spa-jar", type=Path, default=None,
                    help=f"Flink's State Processor API jar, for the peer rows (default: ${_spa.ENV_VAR})")
    ap.add_argument("--spa-heap", default="4g", help="-Xmx of the State Processor API's JVM")
    ap.add_argument("--only", default=None, metavar="TEXT",
                    help="only the rows whose snapshot label contains TEXT (e.g. value-heavy)")
    args = ap.parse_args(argv)
    if args.out is None:
        args.out = result_path("flink_reader")
    snapshots = SNAPSHOTS
    if args.smoke:
        args.dir = ROOT / "sample_data" / "flink"
        args.repeat = 1
        snapshots = {"heap canonical savepoint": "heap-canonical-savepoint",
                     "rocksdb incremental checkpoint": "rocksdb-incremental-checkpoint",
                     VALUE_HEAVY: "production/types-heap-canonical-savepoint"}
    if args.only:
        snapshots = {label: name for label, name in snapshots.items() if args.only in label}

    missing = [name for name in snapshots.values() if not (args.dir / name / "EXPECTED.json").is_file()]
    if missing and args.generate and not args.smoke:
        subprocess.run([str(ROOT / "tools" / "flink" / "make_fixtures.sh"), "--bench", str(args.dir)], check=True)
        missing = [name for name in snapshots.values() if not (args.dir / name / "EXPECTED.json").is_file()]
    if missing:
        print(f"missing benchmark snapshots in {args.dir}: {', '.join(missing)}; "
              "run with --generate (needs Java 17) or tools/flink/make_fixtures.sh --bench", file=sys.stderr)
        return 2

    if not snapshots:
        print(f"no benchmark row's label contains {args.only!r}", file=sys.stderr)
        return 2
    read_all(args.dir / next(iter(snapshots.values())), warm_up=True)  # imports outside the timed runs
    for name in ("heap-canonical-savepoint", "rocksdb-incremental-checkpoint"):  # numba kernels loaded too
        read_all(ROOT / "sample_data" / "flink" / name)
    spa_cp = spa_error = None
    spa_jar = _spa.spa_jar(args.spa_jar)
    if spa_jar is not None:
        try:
            spa_cp = _spa.classpath(spa_jar)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            spa_error = f"not run: {exc}"
    load_start = round(os.getloadavg()[0], 2)
    results = []
    for label, name in snapshots.items():
        path = args.dir / name
        size = snapshot_bytes(path)
        expected = json.loads((path / "EXPECTED.json").read_text(encoding="utf-8"))
        jars = [args.dir / JOB_JAR] if label == VALUE_HEAVY and (args.dir / JOB_JAR).is_file() else []
        best, best_cpu, rows, extra = _measure(path, args.repeat, args.workers, jars)
        mbs = size / 1e6 / best
        results.append({
            "snapshot": label,
            "path": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "flink_version": expected.get("flink_version"),
            "events": expected.get("events"),
            "distinct_keys": expected.get("distinct_users"),
            "states": _state_count(expected),
            "job_jar": str(jars[0].name) if jars else None,
            "size": {"value": round(size / 1e6, 2), "unit": "MB"},
            "rows": rows,
            "seconds": {"value": round(best, 3), "unit": "s"},
            "throughput": {"value": round(mbs, 1), "unit": "MB/s"},
            "rows_per_second": {"value": round(rows / best), "unit": "rows/s"},
            "cpu_seconds": {"value": round(best_cpu, 3), "unit": "s"},
            "throughput_per_cpu_second": {"value": round(size / 1e6 / best_cpu, 1), "unit": "MB/s"},
            "key_group_mismatches": extra.get("key_group_mismatches"),
            "key_group_checked_rows": extra.get("key_group_checked_rows"),
        })
        print(f"{label}: {size / 1e6:.1f} MB, {rows} rows in {best:.2f} s = {mbs:.1f} MB/s "
              f"({rows / best:,.0f} rows/s); {best_cpu:.2f} CPU-s = {size / 1e6 / best_cpu:.1f} MB/s per CPU-second")
        fresh = [_fresh_process(path, args.workers, size, cold, jars) for cold in (False, True)]
        results[-1]["first_read_fresh_process"] = fresh
        for f in fresh:
            print(f"  first read in a fresh process, numba cache {f['numba_cache']}: {f['seconds']['value']:.2f} s "
                  f"= {f['throughput']['value']:.1f} MB/s (import explorer.readers.flink "
                  f"{f['import_seconds']['value']:.2f} s before it)")
        peer = results[-1]["state_processor_api"] = _spa_peer(path, label, size, rows, fresh, spa_cp, spa_error,
                                                                  args.spa_heap)
        if peer["status"] == "measured":
            print(f"  State Processor API: {peer['rows']} rows ({'the same' if peer['rows_match'] else 'NOT the same'}"
                  f" count) in {peer['seconds']['value']:.2f} s with the JVM's start "
                  f"({peer['read_seconds_in_jvm']['value']:.2f} s reading), {peer['cpu_seconds']['value']:.2f} CPU-s")
        else:
            print(f"  State Processor API: {peer['status']}")
        if args.single_thread_too:
            one, one_cpu, _, _ = _measure(path, args.repeat, 1, jars)
            results[-1]["one_thread"] = {
                "seconds": {"value": round(one, 3), "unit": "s"},
                "throughput": {"value": round(size / 1e6 / one, 1), "unit": "MB/s"},
                "cpu_seconds": {"value": round(one_cpu, 3), "unit": "s"},
                "throughput_per_cpu_second": {"value": round(size / 1e6 / one_cpu, 1), "unit": "MB/s"},
            }
            print(f"  one thread: {one:.2f} s = {size / 1e6 / one:.1f} MB/s; "
                  f"{one_cpu:.2f} CPU-s = {size / 1e6 / one_cpu:.1f} MB/s per CPU-second")
    from explorer.readers.flink import FlinkSnapshotReader

    report = {
        "benchmark": "benchmarks/bench_flink_reader.py",
        "command": "python -m benchmarks.bench_flink_reader " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            **machine(),
            "load_average_1m_at_start": load_start,
            "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        },
        "state_processor_api_jar": str(spa_jar) if spa_jar else None,
        "workers": args.workers if args.workers is not None else FlinkSnapshotReader.workers,
        "target": {"value": TARGET_MB_S, "unit": "MB/s"},
        "repeat": args.repeat,
        "smoke": args.smoke,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

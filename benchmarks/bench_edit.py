"""Throughput of the savepoint editor (issue 32), beside Apache Flink's State Processor API doing the same edit.

The edit: drop one hot key's state from the keyed operator of a Flink canonical savepoint, the fix a user
makes for a poisoned key::

    explorer.edit(path).drop_keys(operator="user-profiles", keys=["hot-00"]).write(out)

The input is a HashMap-backend canonical savepoint of ``tools/flink/src/ScaleSavepoints.java`` (one keyed
operator, ``user-profiles``: a POJO ``ValueState``, a ``ValueState<Long>`` and a ``MapState<String, Long>``;
about 128 bytes per key), built once by a real Flink job into ``.cache/edit/<keys>/``
(``benchmarks/_scale_flink.py``). ``--keys`` takes several sizes, run smallest first.

Each size is measured in the same run:

* the explorer in a fresh Python process (import included: what a script meets), wall seconds, CPU seconds of
  the process (user + system, ``getrusage`` of children) and its peak RSS; the process is watched and stopped
  if its RSS passes ``--max-rss-gb`` (the editor keeps one operator's kept entries in memory:
  ``explorer/editing/flink.py``, ``_OperatorEntries``), and a size whose peak, extrapolated from the
  sizes done (a line through the two largest), would pass it is not started: the row says so and why;
* the State Processor API in a fresh JVM (``benchmarks/flink/spa/SpaEditBench.java``: ``SavepointReader``
  reads the operator's keyed state leaving the key out, ``SavepointWriter.fromExistingSavepoint(...)
  .removeOperator(uid).withOperator(uid, <its state bootstrapped from the rows left>).write(out)``), wall
  with the JVM's start, CPU of the JVM, the in-JVM edit beside it. Its jar comes from ``--spa-jar`` or
  ``FLINK_SPA_JAR`` (it is published only on Maven Central); without it the row says not run.

Both outputs are then read back with the explorer's reader (outside the timing): the number of keyed
entries in each must equal the input's less the hot key's (``SpaEditBench`` also counts what it wrote).

MB/s: 10^6 bytes of the input savepoint's files per second (wall) and per CPU-second. Run it under
the benchmark lock::

    flock /tmp/bench.lock python -m benchmarks.bench_edit --keys 200000,2000000,8000000 --spa-jar PATH

Writes benchmarks/results/edit.json (units, machine, load before and after, date, command).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import _spa
from benchmarks._machine import machine, result_path
from benchmarks._scale_flink import flink_savepoints

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "edit"
OPERATOR = "user-profiles"
HOT_KEY = "hot-00"

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import explorer
t1 = time.perf_counter()
explorer.edit(sys.argv[1]).drop_keys(operator=sys.argv[2], keys=[sys.argv[3]]).write(sys.argv[4])
t2 = time.perf_counter()
print(json.dumps({"import_seconds": t1 - t0, "edit_seconds": t2 - t1,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name not in ("SCALE.json", ".complete"))


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def explorer_edit(src: Path, out: Path, max_rss_mb: float) -> dict:
    """The edit in a fresh Python process, stopped if its RSS passes ``max_rss_mb``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    c0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(src), OPERATOR, HOT_KEY, str(out)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _rss_mb(proc.pid))
        if peak > max_rss_mb:
            proc.kill()
            proc.wait()
            return {"status": f"stopped: RSS passed {max_rss_mb / 1024:.1f} GB "
                              f"after {time.perf_counter() - t0:.0f} s",
                    "peak_rss_mb": round(peak)}
        time.sleep(0.2)
    stdout, stderr = proc.communicate()
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        return {"status": f"failed: exit {proc.returncode}: {stderr.strip().splitlines()[-1] if stderr.strip() else ''}"}
    got = json.loads(stdout.strip().splitlines()[-1])
    return {"status": "measured", "wall_seconds": wall, "cpu_seconds": cpu,
            "edit_seconds_in_process": got["edit_seconds"], "import_seconds": got["import_seconds"],
            "peak_rss_mb": round(max(peak, got["peak_rss_mb"]))}


def operator_entries(path: Path) -> tuple[int, int]:
    """Keyed entries (rows) in ``path``, and those of the hot key, by the explorer's reader.

    The input job has one keyed operator, the edited one; every keyed row is counted, because the State
    Processor API writes the operator it bootstraps without its uid and name (the reader shows its id).
    """
    import pyarrow.compute as pc

    from explorer.readers.base import KeyedStateQuery
    from explorer.readers.flink import FlinkSnapshotReader

    rows = hot = 0
    query = KeyedStateQuery(columns=("key",))
    for piece in FlinkSnapshotReader(path).keyed_pieces(query):
        rows += piece.num_rows
        hot += pc.sum(pc.equal(piece.column("key").cast("string"), HOT_KEY)).as_py() or 0
    return rows, hot


def _rss_estimate(done: list[tuple[int, float]], size: int) -> float | None:
    """Peak RSS (MB) of an edit of ``size`` bytes: the line through the two largest edits done (the
    interpreter's fixed part is its intercept), or in proportion to the one edit done."""
    if not done:
        return None
    if len(done) == 1 or done[-1][0] == done[-2][0]:
        return done[-1][1] * size / done[-1][0]
    (s0, m0), (s1, m1) = done[-2], done[-1]
    return m1 + (m1 - m0) / (s1 - s0) * (size - s1)


def _rate(size: int, seconds: float) -> dict:
    return {"value": round(size / 1e6 / seconds, 1), "unit": "MB/s"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", default="8000000", help="comma-separated key counts of the input savepoints")
    ap.add_argument("--spa-jar", type=Path, default=None,
                    help=f"Flink's State Processor API jar, for the peer (default: ${_spa.ENV_VAR})")
    ap.add_argument("--max-rss-gb", type=float, default=8.0,
                    help="stop the explorer's process past this RSS, and do not start a size estimated past it")
    ap.add_argument("--java-heap", default="8g", help="-Xmx of the State Processor API's JVM")
    ap.add_argument("--build-heap", default="6g", help="-Xmx of the Flink job that builds the inputs")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/edit.json")
    args = ap.parse_args(argv)
    out_json = args.out or result_path("edit")
    sizes = sorted(int(k) for k in args.keys.split(","))

    spa_cp = spa_status = None
    jar = _spa.spa_jar(args.spa_jar)
    if jar is None:
        spa_status = _spa.NOT_GIVEN
    else:
        try:
            spa_cp = _spa.classpath(jar)
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            spa_status = f"not run: {exc}"

    load_start = os.getloadavg()
    rows_out = []
    done: list[tuple[int, float]] = []  # (input bytes, peak RSS MB) of the edits done
    for keys in sizes:
        src, _ = flink_savepoints(keys, "hashmap", CACHE / str(keys), heap=args.build_heap)
        size = _bytes(src)
        entries_in, hot_in = operator_entries(src)
        row: dict = {"keys": keys, "input": str(src.relative_to(ROOT)) if src.is_relative_to(ROOT) else str(src),
                     "size": {"value": round(size / 1e6, 1), "unit": "MB"},
                     "entries_in": entries_in, "hot_key": HOT_KEY, "hot_key_entries": hot_in,
                     "entries_expected_out": entries_in - hot_in}
        print(f"{keys:,} keys: {size / 1e6:.1f} MB, {entries_in:,} entries of {OPERATOR} ({hot_in:,} of {HOT_KEY})",
              flush=True)
        work = CACHE / "out"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)

        estimate = _rss_estimate(done, size)
        if estimate is not None and estimate > args.max_rss_gb * 1024:
            ours = {"status": f"not run: its peak RSS, extrapolated from the edits of "
                              f"{', '.join(f'{s / 1e6:.0f} MB ({m / 1024:.2f} GB)' for s, m in done)}, would be "
                              f"{estimate / 1024:.1f} GB, past the {args.max_rss_gb:.0f} GB allowed: the editor holds "
                              "the operator's kept entries in memory (explorer/editing/flink.py, _OperatorEntries)",
                    "peak_rss_mb_estimated": round(estimate)}
        else:
            ours = explorer_edit(src, work / "explorer", args.max_rss_gb * 1024)
        if ours["status"] == "measured":
            done.append((size, ours["peak_rss_mb"]))
            ours["entries_out"] = operator_entries(work / "explorer")[0]
            ours["entries_match"] = ours["entries_out"] == row["entries_expected_out"]
            ours.update(throughput=_rate(size, ours["wall_seconds"]),
                        throughput_per_cpu_second=_rate(size, ours["cpu_seconds"]))
            print(f"  explorer: {ours['wall_seconds']:.1f} s = {ours['throughput']['value']} MB/s, "
                  f"{ours['cpu_seconds']:.1f} CPU-s = {ours['throughput_per_cpu_second']['value']} MB/s per CPU-s, "
                  f"peak RSS {ours['peak_rss_mb']} MB, {ours['entries_out']:,} entries out", flush=True)
        else:
            print(f"  explorer: {ours['status']}", flush=True)
        row["explorer"] = ours

        if spa_cp is None:
            peer = {"status": spa_status}
            print(f"  State Processor API: {spa_status}", flush=True)
        else:
            try:
                got = _spa.run_jvm(spa_cp, "SpaEditBench", [str(src), str(work / "spa"), HOT_KEY],
                                   heap=args.java_heap)
                peer = {"status": "measured", "wall_seconds": got["wall_seconds"], "cpu_seconds": got["cpu_seconds"],
                        "edit_seconds_in_jvm": got["edit_seconds"], "edit_cpu_seconds_in_jvm": got["edit_cpu_seconds"],
                        "jvm_start_seconds": got["jvm_uptime_at_edit_start_seconds"], "java_heap": args.java_heap,
                        "keys_read": got["keys_read"], "keys_written": got["keys_written"],
                        "entries_written": got["entries_written"],
                        "entries_out": operator_entries(work / "spa")[0]}
                peer["entries_match"] = peer["entries_out"] == row["entries_expected_out"]
                peer.update(throughput=_rate(size, peer["wall_seconds"]),
                            throughput_per_cpu_second=_rate(size, peer["cpu_seconds"]))
                print(f"  State Processor API: {peer['wall_seconds']:.1f} s = {peer['throughput']['value']} MB/s, "
                      f"{peer['cpu_seconds']:.1f} CPU-s = {peer['throughput_per_cpu_second']['value']} MB/s per "
                      f"CPU-s, {peer['entries_out']:,} entries out", flush=True)
            except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as exc:
                peer = {"status": f"failed: {exc}"}
                print(f"  State Processor API: {peer['status']}", flush=True)
        peer["tool"] = "Apache Flink State Processor API (SavepointReader + SavepointWriter), fresh JVM"
        row["state_processor_api"] = peer
        if ours["status"] == "measured" and peer["status"] == "measured":
            row["explorer_speedup_wall"] = round(peer["wall_seconds"] / ours["wall_seconds"], 2)
            row["explorer_speedup_cpu"] = round(peer["cpu_seconds"] / ours["cpu_seconds"], 2)
        rows_out.append(row)
        shutil.rmtree(work, ignore_errors=True)

    report = {
        "benchmark": "benchmarks/bench_edit.py",
        "command": "python -m benchmarks.bench_edit " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {**machine(), "load_average_at_start": [round(x, 2) for x in load_start],
                    "load_average_at_end": [round(x, 2) for x in os.getloadavg()]},
        "edit": f"drop_keys(operator={OPERATOR!r}, keys=[{HOT_KEY!r}]) then write",
        "units": {"size": "MB (10^6 bytes of the input savepoint's files)", "throughput": "MB/s of input, wall",
                  "throughput_per_cpu_second": "MB of input per CPU-second", "seconds": "s", "rss": "MB"},
        "state_processor_api_jar": str(jar) if jar else None,
        "max_rss_gb": args.max_rss_gb,
        "results": rows_out,
    }
    out_json.parent.mkdir(parents=True, exist_ok=True)
    out_json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out_json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

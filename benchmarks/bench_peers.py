"""Our engine against what users would otherwise pick: Bytewax and Apache Flink, same input, same logic.

Two workloads on one generated input file (``benchmarks/_inputs.py``: Zipf
users, planted hot keys, 30-minute breaks between visits, written once to
``.cache/bench-input/``):

``count``
    per record: add one to the key's count and emit (key, count).
``sessions``
    per user, sessions closed by 30 minutes of inactivity (event-time timers),
    a summary per session - ``explorer.pipelines.sessions``' logic.

Each run is its own process, at parallelism 1, the input loaded into memory
before timing; its peak memory is the VmHWM it reports from /proc/self/status
at exit (for Spark: summed over the driver, the JVM and the Python workers):

* our engine (``benchmarks/_run_engine.py``): heap and RocksDB backends, with
  and without a checkpoint every second; for count also the same count written
  as a KeyedProcessFunction with a ValueState on both backends (the code
  Flink's job runs; the built-in ``count()`` updates state once per key and batch);
* Bytewax (``benchmarks/_run_bytewax.py``) from PyPI in its own venv
  ``.cache/bench-venvs/bytewax``: ``stateful_map``, and ``fold_window`` with a
  ``SessionWindower`` on an ``EventClock`` that closes sessions on the key's
  next event or at EOF (not on the system clock: replayed event times lie in
  the past), with and without recovery snapshots every second;
* Apache Flink (``benchmarks/flink/PeerBench.java``) compiled with javac
  against the jars of the apache-flink-libraries wheel
  (``tools/flink/fetch_jars.sh``), on a local mini cluster: HashMap and
  embedded RocksDB backends, with and without checkpoints every second;
* Spark Structured Streaming (``benchmarks/_run_spark.py``): the engine's own
  count and session functions on ``transformWithStateInPandas`` through
  ``explorer.spark.run_on_spark`` (local[2], RocksDB state store, a checkpoint
  per micro-batch; for sessions the input ends with end-of-input marker
  files, Spark's counterpart of the final watermark that closes the last
  sessions). Its per-key cost is so high that it runs on the first
  ``--spark-records`` records (20 k, a few minutes per run here) of the same
  file, beside our engine on the same prefix for the ratio; when the adapter
  has the key-group bucket layout (``explorer.spark_engine.buckets``), that layout
  runs on the same prefix too;
* the bare Python loop doing the same per-record work on a dict, in this
  process: the physical limit of per-record work in CPython. It is timed
  right beside our engine's heap run of the same workload (best of 3 just
  before and best of 3 just after that child process, the load recorded at
  each), and the ratio bare loop / engine takes the best of those six, so a
  load that changes over the minutes of a whole run moves both sides alike.
  For sessions a second loop also builds the job's actual output (per
  session: user, start, end, events, purchases; ``bare_python_output``),
  checked equal to the engine's output by a digest of the sorted summaries.

The rate compared is **records per CPU-second** ("records/s per core"): the
records over the CPU time every thread of the process spent while the job ran
(for Flink: from the first record read to the keyed operator's close, so the
JVM and mini-cluster start-up are left out and reported apart). Wall-clock rates
and start-up times are recorded too; on a loaded machine wall time mostly
measures the load.

Run::

    python -m benchmarks.bench_peers                 # 1 M records, every peer (sets up Bytewax and Flink)
    python -m benchmarks.bench_peers --smoke         # 20 k records, three runs of our engine and the bare loops
    python -m benchmarks.bench_peers --peers engine,bytewax --records 200000

Writes ``benchmarks/results/peers.json``. The Bytewax venv and the Flink jars
are created on first use (PyPI must be reachable; Flink needs a JDK 17).
``bench_spark`` compares Spark's own stateful paths with each other.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks._inputs import PEER_INPUT_DESCRIPTION, ROOT, peer_events_file, read_events, sessions_digest
from benchmarks._machine import machine, result_path

CACHE = ROOT / ".cache"
BYTEWAX_VERSION = os.environ.get("BYTEWAX_VERSION", "0.21.1")
BYTEWAX_VENV = CACHE / "bench-venvs" / "bytewax"
FLINK_VERSION = os.environ.get("FLINK_VERSION", "2.3.0")
FLINK_BUILD = CACHE / "flink" / "build" / f"peers-{FLINK_VERSION}"
FLINK_SRC = Path(__file__).resolve().parent / "flink" / "PeerBench.java"
WORK = CACHE / "bench-work"
SESSION_GAP_MS = 30 * 60 * 1000
PEERS = ("engine", "bytewax", "flink", "spark")
SPARK_RECORDS = 20_000  # what the per-key layout gets through in a few minutes here
RUN_TIMEOUT_S = int(os.environ.get("BENCH_RUN_TIMEOUT_S", "600"))  # a run still going after this is recorded as not measured


# --- setting up the peers' throwaway environments ------------------------------------------
def setup_bytewax() -> Path:
    """Bytewax's own venv under .cache/ (created once); returns its python."""
    python = BYTEWAX_VENV / "bin" / "python"
    stamp = BYTEWAX_VENV / f".installed-{BYTEWAX_VERSION}"
    if not stamp.is_file():
        print(f"   setting up Bytewax {BYTEWAX_VERSION} in {BYTEWAX_VENV}", flush=True)
        shutil.rmtree(BYTEWAX_VENV, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(BYTEWAX_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"bytewax=={BYTEWAX_VERSION}"], check=True)
        stamp.touch()
    return python


def setup_flink() -> str:
    """Flink's jars (from the wheel, tools/flink/fetch_jars.sh) and benchmarks/flink/*.java compiled; returns the classpath."""
    for tool in ("java", "javac"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} not found on PATH: the Flink peer needs a JDK 17")
    env = {**os.environ, "FLINK_VERSION": FLINK_VERSION, "PYTHON": sys.executable}
    jars = subprocess.run(["bash", str(ROOT / "tools" / "flink" / "fetch_jars.sh")], check=True, env=env,
                          capture_output=True, text=True).stdout.strip()
    sources = sorted(FLINK_SRC.parent.glob("*.java"))  # PeerBench, CheckpointBench (bench_checkpoints)
    stale = [src for src in sources if not (FLINK_BUILD / f"{src.stem}.class").is_file()
             or (FLINK_BUILD / f"{src.stem}.class").stat().st_mtime < src.stat().st_mtime]
    if stale:
        FLINK_BUILD.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(FLINK_BUILD), "-cp", jars, *map(str, sources)], check=True)
    return f"{FLINK_BUILD}:{jars}"


def java_version() -> str | None:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    except OSError:
        return None
    return out.splitlines()[0] if out else None


# --- one run in a child process ------------------------------------------------------------
def run_child(cmd: list[str], timeout_s: float = RUN_TIMEOUT_S) -> dict[str, Any]:
    """Run ``cmd``; its last JSON line (optionally after ``RESULT ``) plus peak RSS and wall time."""
    WORK.mkdir(parents=True, exist_ok=True)
    out_path = WORK / f"stdout-{os.getpid()}.txt"
    err_path = WORK / f"stderr-{os.getpid()}.txt"
    t0 = time.perf_counter()
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=ROOT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                raise RuntimeError(f"{cmd[:3]}... did not finish in {timeout_s:.0f} s")
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    stdout, stderr = out_path.read_text(), err_path.read_text()
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])}... exited with {proc.returncode}: {stderr[-2000:]}")
    lines = [ln.removeprefix("RESULT ").strip() for ln in stdout.splitlines() if ln.strip().startswith(("{", "RESULT {"))]
    if not lines:
        raise RuntimeError(f"{' '.join(cmd[:4])}... printed no result: {stdout[-1000:]} {stderr[-1000:]}")
    report = json.loads(lines[-1])
    # Linux keeps the pre-exec high-water mark in ru_maxrss, so a child forked from this (big) process
    # reports at least this process's RSS there; each runner therefore reports its own VmHWM at exit.
    report["ru_maxrss_mb"] = round(usage.ru_maxrss / 1024, 1)
    report["peak_rss_mb"] = report.get("vm_hwm_mb", report["ru_maxrss_mb"])
    report["process_wall_seconds"] = round(wall, 3)
    report["process_cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 3)
    return report


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """The figures compared: records per CPU-second while the job ran, and per wall second."""
    n = report["records"]
    seconds = report.get("processing_seconds", report["seconds"])
    cpu = report.get("processing_cpu_seconds", report["cpu_seconds"])
    row = {"value": round(n / cpu) if cpu > 0 else None, "unit": "records/s per core",
           "records_per_wall_s": round(n / seconds) if seconds > 0 else None,
           "seconds": round(seconds, 4), "cpu_seconds": round(cpu, 4)}
    row.update({k: v for k, v in report.items() if k not in row})
    return row


def head_file(path: Path, m: int) -> Path:
    """The first ``m`` records of the input file (same header), written once next to it."""
    head = path.with_name(f"{path.stem}-head{m}.csv")
    if not head.is_file():
        with open(path) as src, open(head.with_suffix(".tmp"), "w") as dst:
            for i, line in enumerate(src):
                if i > m:
                    break
                dst.write(line)
        head.with_suffix(".tmp").replace(head)
    return head


# --- the physical limit: bare Python loops on the same records -----------------------------
def bare_count(users: list[str]) -> int:
    d: dict[str, int] = {}
    out = []
    get, app = d.get, out.append
    for k in users:
        c = d[k] = get(k, 0) + 1
        app((k, c))
    return len(out)


def bare_sessions(users: list[str], ts: list[int]) -> tuple[int, int]:
    """Per user, split at gaps of 30 minutes or more; (sessions, events in them)."""
    last: dict[str, int] = {}
    count: dict[str, int] = {}
    sessions = events = 0
    for user, t in zip(users, ts):
        prev = last.get(user)
        if prev is not None and t - prev >= SESSION_GAP_MS:
            sessions += 1
            events += count[user]
            count[user] = 0
        if prev is None or t > prev:
            last[user] = t
        count[user] = count.get(user, 0) + 1
    return sessions + len(count), events + sum(count.values())


def bare_sessions_output(users: list[str], ts: list[int], kinds: list[str]) -> list[tuple]:
    """The job's output by a bare loop: per user, sessions split at gaps of 30 minutes or more,
    each as (user, start, end, events, purchases), closed ones in the order they close, then the
    ones open at the end."""
    open_: dict[str, list] = {}
    out = []
    app = out.append
    for user, t, kind in zip(users, ts, kinds):
        s = open_.get(user)
        if s is not None and t - s[1] >= SESSION_GAP_MS:
            app((user, s[0], s[1], s[2], s[3]))
            s = None
        if s is None:
            open_[user] = [t, t, 1, 1 if kind == "purchase" else 0]
            continue
        if t < s[0]:
            s[0] = t
        elif t > s[1]:
            s[1] = t
        s[2] += 1
        if kind == "purchase":
            s[3] += 1
    out += [(u, s[0], s[1], s[2], s[3]) for u, s in open_.items()]
    return out


def time_bare(fn, repeat: int) -> tuple[Any, float, float]:
    best_wall = best_cpu = float("inf")
    result = None
    for _ in range(repeat):
        gc.collect()
        c, t = time.process_time(), time.perf_counter()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    return result, best_wall, best_cpu


# --- the matrix ----------------------------------------------------------------------------
SMOKE_RUNS = ("count/engine/heap", "count/engine/rocksdb/checkpoint_1s", "sessions/engine/heap")


def runs_for(peers: list[str], workload: str, smoke: bool = False,
             spark_layouts: tuple[str, ...] = ("key", "bucket")) -> list[dict[str, Any]]:
    """(name, system, backend, checkpoint) of every run of ``workload`` (a few of our engine's when ``smoke``)."""
    runs = []
    if "engine" in peers:
        for backend in ("heap", "rocksdb"):
            for chk in (False, True):
                runs.append({"system": "engine", "backend": backend, "checkpoint": chk, "variant": workload})
        if workload == "count":  # the count as a ValueState process function, like Flink's job
            for backend in ("heap", "rocksdb"):
                runs.append({"system": "engine", "backend": backend, "checkpoint": False, "variant": "count_process"})
    if "bytewax" in peers:
        for chk in (False, True):
            runs.append({"system": "bytewax", "backend": "memory" if not chk else "memory+sqlite", "checkpoint": chk,
                         "variant": workload})
    if "flink" in peers:
        for backend in ("hashmap", "rocksdb"):
            for chk in (False, True):
                runs.append({"system": "flink", "backend": backend, "checkpoint": chk, "variant": workload})
    if "spark" in peers:  # on a prefix of the input; our engine beside it on the same prefix
        runs.append({"system": "engine", "backend": "heap", "checkpoint": False, "variant": workload, "head": True})
        if "key" in spark_layouts:
            runs.append({"system": "spark", "backend": "rocksdb", "checkpoint": True, "variant": workload, "head": True})
        if "bucket" in spark_layouts and spark_bucket_layout():  # the adapter's key-group layout (issue 6), beside the per-key one
            runs.append({"system": "spark", "backend": "rocksdb", "checkpoint": True, "variant": workload,
                         "head": True, "layout": "bucket"})
    for r in runs:
        r["workload"] = workload
        r["name"] = "/".join([workload, r["system"], r["backend"]] + (["process_fn"] if r["variant"] == "count_process" else [])
                             + (["checkpoint_1s"] if r["checkpoint"] and r["system"] != "spark" else [])
                             + (["checkpoint_per_microbatch"] if r["system"] == "spark" else [])
                             + (["bucket_layout"] if r.get("layout") == "bucket" else [])
                             + (["head"] if r.get("head") else []))
    return [r for r in runs if r["name"] in SMOKE_RUNS] if smoke else runs


def spark_bucket_layout() -> bool:
    """Whether the Spark adapter has the key-group bucket layout (``run_on_spark(layout="bucket")``)."""
    try:
        import inspect

        from explorer.spark_engine.adapter import run_on_spark
    except ImportError:
        return False
    return "layout" in inspect.signature(run_on_spark).parameters


def command(run: dict[str, Any], input_path: Path, work: Path, tools: dict[str, Any]) -> list[str]:
    if run["system"] == "engine":
        cmd = [sys.executable, "-m", "benchmarks._run_engine", str(input_path), run["variant"], run["backend"]]
        return cmd + (["--checkpoint-dir", str(work / "chk")] if run["checkpoint"] else [])
    if run["system"] == "bytewax":
        cmd = [str(tools["bytewax"]), str(Path(__file__).resolve().parent / "_run_bytewax.py"), str(input_path),
               run["workload"]]
        return cmd + (["--recovery-dir", str(work / "recovery")] if run["checkpoint"] else [])
    if run["system"] == "spark":
        return [sys.executable, "-m", "benchmarks._run_spark", str(input_path), run["workload"], str(work),
                "--layout", run.get("layout", "key")]
    heap = os.environ.get("FLINK_BENCH_HEAP", "1g")
    return ["java", f"-Xmx{heap}", "-Dlog4j2.level=ERROR", "-cp", tools["flink"], "PeerBench", str(input_path),
            run["workload"], run["backend"], "1000" if run["checkpoint"] else "0", str(work)]


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


def compute_ratios(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """ours / peer for the per-core rate (> 1: ours is faster), and peak memory ours / peer."""
    out: dict[str, Any] = {}
    pairs = [("engine/heap", "bytewax/memory"), ("engine/heap", "flink/hashmap"), ("engine/rocksdb", "flink/rocksdb"),
             ("engine/heap/checkpoint_1s", "bytewax/memory+sqlite/checkpoint_1s"),
             ("engine/heap/checkpoint_1s", "flink/hashmap/checkpoint_1s"),
             ("engine/rocksdb/checkpoint_1s", "flink/rocksdb/checkpoint_1s")]
    for wl in ("count", "sessions"):
        for ours, peer in pairs:
            a, b = results.get(f"{wl}/{ours}"), results.get(f"{wl}/{peer}")
            if a and b:
                key = f"{wl}: {ours} / {peer}"
                out[key] = {"throughput": ratio(a["value"], b["value"]),
                            "peak_memory": ratio(a.get("peak_rss_mb"), b.get("peak_rss_mb"))}
        a = results.get(f"{wl}/engine/heap/head")
        for suffix, label in (("head", "spark"), ("bucket_layout/head", "spark bucket layout")):
            b = results.get(f"{wl}/spark/rocksdb/checkpoint_per_microbatch/{suffix}")
            if a and b:
                out[f"{wl}: engine/heap / {label} (first {b['records']:,} records)"] = {
                    "throughput": ratio(a["value"], b["value"]),
                    "peak_memory": ratio(a.get("peak_rss_mb"), b.get("peak_rss_mb"))}
        bare, ours = results.get(f"{wl}/bare_python"), results.get(f"{wl}/engine/heap")
        if bare and ours:
            entry: dict[str, Any] = {"throughput": ratio(bare["value"], ours["value"])}
            around = bare.get("around_engine_heap_run") or []
            if len(around) == 2:  # timed beside the engine's run: each side's figure and the load then
                n = bare["records"]
                entry["throughput_bare_before"] = ratio(n / around[0]["cpu_seconds"], ours["value"])
                entry["throughput_bare_after"] = ratio(n / around[1]["cpu_seconds"], ours["value"])
                entry["load_1min_bare_before_engine_bare_after"] = [
                    around[0]["load_average_1min"], ours.get("load_average_1min_at_start"), around[1]["load_average_1min"]]
                entry["engine_finished_utc"] = ours.get("finished_utc")
            out[f"{wl}: bare_python / engine/heap"] = entry
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="20 k records, three runs of our engine and the bare loops")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--peers", default=None, help=f"comma-separated subset of {','.join(PEERS)}")
    ap.add_argument("--workloads", default="count,sessions")
    ap.add_argument("--spark-records", type=int, default=SPARK_RECORDS,
                    help="Spark (and our engine beside it) run on this many first records of the input")
    ap.add_argument("--spark-layouts", default="key,bucket",
                    help="the Spark adapter's state layouts to run: key (Spark state per key, the named peer), "
                         "bucket (key-group buckets, when the adapter has them)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--runs", default=None, help="only the runs whose names start with one of these (comma-separated)")
    ap.add_argument("--merge", action="store_true",
                    help="keep the other runs' figures from the existing JSON (re-measure some runs, e.g. at lower load)")
    args = ap.parse_args(argv)
    prefixes = tuple(x for x in (args.runs or "").split(",") if x)
    n = args.records or (20_000 if args.smoke else 1_000_000)
    peers = [p for p in (args.peers or ("engine" if args.smoke else ",".join(PEERS))).split(",") if p]
    workloads = [w for w in args.workloads.split(",") if w]

    t = time.perf_counter()
    input_path = peer_events_file(n)
    print(f"   input {input_path.name} ({time.perf_counter() - t:.1f} s)", flush=True)

    tools: dict[str, Any] = {}
    not_measured: dict[str, str] = {}
    versions: dict[str, Any] = {"python": platform.python_version(), "state_explorer": _our_version()}
    if "bytewax" in peers:
        try:
            tools["bytewax"] = setup_bytewax()
            versions["bytewax"] = BYTEWAX_VERSION
        except Exception as exc:  # noqa: BLE001 - record why, run the rest
            not_measured["bytewax"] = f"setup failed: {exc}"
    if "flink" in peers:
        try:
            tools["flink"] = setup_flink()
            versions["flink"] = FLINK_VERSION
            versions["java"] = java_version()
        except Exception as exc:  # noqa: BLE001
            not_measured["flink"] = f"setup failed: {exc}"
    head_path = None
    if "spark" in peers:
        try:
            import pyspark

            versions["pyspark"] = pyspark.__version__
            head_path = head_file(input_path, min(n, args.spark_records))
        except ImportError as exc:
            not_measured["spark"] = f"pyspark not importable: {exc}"

    users, ts, kinds = read_events(input_path)
    results: dict[str, dict[str, Any]] = {}
    repeat = 1 if args.smoke else 3
    bare_fns = {"count": lambda: bare_count(users), "sessions": lambda: bare_sessions(users, ts)}

    def time_bare_now(wl: str) -> dict[str, Any]:
        load = os.getloadavg()[0]
        got, wall, cpu = time_bare(bare_fns[wl], repeat)
        return {"cpu_seconds": round(cpu, 4), "seconds": round(wall, 4), "repeat": repeat,
                "load_average_1min": round(load, 2), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "result": got}

    def bare_row(wl: str, around: list[dict[str, Any]]) -> dict[str, Any]:
        best = min(around, key=lambda b: b["cpu_seconds"])
        got = best["result"]
        out, checksum = (got, got) if wl == "count" else got
        row = summarize({"records": n, "seconds": best["seconds"], "cpu_seconds": best["cpu_seconds"],
                         "output_records": out, "checksum": checksum})
        row["timed"] = ("beside the engine's heap run: best of 3 just before and best of 3 just after it"
                        if len(around) > 1 else "before the runs (the engine's heap run not in this invocation)")
        row["around_engine_heap_run"] = [{k: v for k, v in b.items() if k != "result"} for b in around]
        return row

    # each workload's bare loop is timed beside our engine's heap run of it (below); only when that
    # run is not part of this invocation is it timed here, before the runs
    beside = {wl for wl in workloads for run in runs_for(peers, wl, smoke=args.smoke)
              if run["name"] == f"{wl}/engine/heap" and not (prefixes and not run["name"].startswith(prefixes))}
    for wl in workloads:
        if wl in bare_fns and wl not in beside:
            results[f"{wl}/bare_python"] = bare_row(wl, [time_bare_now(wl)])
    if "sessions" in workloads and not args.smoke:  # the job's own output, by a bare loop
        c, t = time.process_time(), time.perf_counter()
        summaries = bare_sessions_output(users, ts, kinds)
        cpu, wall = time.process_time() - c, time.perf_counter() - t
        results["sessions/bare_python_output"] = summarize({
            "records": n, "seconds": wall, "cpu_seconds": cpu, "output_records": len(summaries),
            "checksum": sum(s[3] for s in summaries)})
        results["sessions/bare_python_output"].update({
            "system": "bare_python_output", "output_digest": sessions_digest(summaries),
            "what": "per session (user, start, end, events, purchases), as the job emits; one run, in this process"})
        del summaries

    out = Path(args.out) if args.out else result_path("peers")
    merged_runs: list[dict[str, Any]] = []
    if args.merge and out.is_file():
        prev = json.loads(out.read_text())
        if prev.get("records") != n:
            raise SystemExit(f"--merge: {out} holds a run on {prev.get('records')} records, not {n}")
        results = {**prev.get("results", {}), **results}
        merged_runs = prev.get("merged_runs", [])
        not_measured = {**prev.get("not_measured", {}), **not_measured}
        versions = {**prev.get("versions", {}), **versions}
    for wl in workloads:
        for run in runs_for(peers, wl, smoke=args.smoke, spark_layouts=tuple(args.spark_layouts.split(","))):
            if run["system"] in ("bytewax", "flink") and run["system"] not in tools:
                continue
            if run.get("head") and head_path is None:
                continue
            if prefixes and not run["name"].startswith(prefixes):
                continue
            not_measured.pop(run["name"], None)
            work = WORK / run["name"].replace("/", "-")
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            bare_before = time_bare_now(wl) if run["name"] == f"{wl}/engine/heap" and wl in bare_fns else None
            load = os.getloadavg()[0]
            try:
                report = run_child(command(run, head_path if run.get("head") else input_path, work, tools))
            except Exception as exc:  # noqa: BLE001 - record the failure, run the rest
                not_measured[run["name"]] = str(exc)[:500]
                print(f"   {run['name']:<44} FAILED {str(exc)[:200]}", flush=True)
                continue
            finally:
                shutil.rmtree(work, ignore_errors=True)
                if bare_before is not None:
                    results[f"{wl}/bare_python"] = bare_row(wl, [bare_before, time_bare_now(wl)])
            row = summarize(report)
            row.update({k: run[k] for k in ("workload", "system", "backend", "checkpoint")})
            row["load_average_1min_at_start"] = round(load, 2)
            row["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            results[run["name"]] = row
            print(f"   {run['name']:<44} {row['value']:>10,} records/s per core  {row['records_per_wall_s']:>10,}/s wall  "
                  f"peak {row['peak_rss_mb']:>7,.0f} MB  out {row['output_records']:,}", flush=True)
            # written after every run, so an interrupted run still leaves its figures (marked incomplete)
            out.write_text(json.dumps(document(n, input_path, workloads, results, versions, not_measured,
                                               complete=False), indent=2))

    result = document(n, input_path, workloads, results, versions, not_measured, complete=True)
    if args.merge:  # which invocations the figures come from (each row also has its own load and finish time)
        result["merged_runs"] = merged_runs + [{
            "command": "python -m benchmarks.bench_peers " + " ".join(argv if argv is not None else sys.argv[1:]),
            "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": [round(x, 2) for x in os.getloadavg()]}]
    out.write_text(json.dumps(result, indent=2))
    print(f"   -> {out}", flush=True)
    return result


def document(n: int, input_path: Path, workloads: list[str], results: dict[str, dict[str, Any]],
             versions: dict[str, Any], not_measured: dict[str, str], complete: bool) -> dict[str, Any]:
    """peers.json: every figure, the checks, ratios, versions and the machine (``complete``: all runs done)."""
    checks = {}
    # every workload with results (with --merge, also those kept from the earlier run)
    for wl in [w for w in ("count", "sessions") if w in workloads or any(k.startswith(w + "/") for k in results)]:
        full = {name: r for name, r in results.items() if name.startswith(wl + "/") and not name.endswith("/head")}
        outs = {name: r.get("output_records") for name, r in full.items()}
        checks[wl] = {"same_output_records_everywhere": len(set(outs.values())) <= 1,
                      "every_record_accounted": all(r.get("checksum") == n for r in full.values()),
                      "output_records": outs,
                      **({"bare_python_output_digest_equals": {
                          name: r.get("output_digest") == full[f"{wl}/bare_python_output"]["output_digest"]
                          for name, r in full.items() if r.get("output_digest") and not name.endswith("bare_python_output")}}
                         if f"{wl}/bare_python_output" in full else {}),
                      "on_the_first_records": {name: r.get("output_records") for name, r in results.items()
                                               if name.startswith(wl + "/") and name.endswith("/head")}}
    return {
        "complete": complete,
        "benchmark": "peers",
        "records": n,
        "input": PEER_INPUT_DESCRIPTION,
        "input_file": input_path.name,
        "rate_definition": ("records/s per core = records / CPU-seconds of all the process's threads while the "
                            "job ran (input loaded before; JVM and mini-cluster start-up excluded for Flink); "
                            "records_per_wall_s = records / wall seconds of the same span; peak_rss_mb = the "
                            "run's own peak resident set (VmHWM at exit; Spark: summed over its process tree), "
                            "including the loaded input"),
        "workloads": {"count": "per record: count += 1 for the key, emit (key, count)",
                      "sessions": "per user: sessions closed by 30 min of inactivity (event-time timers), "
                                  "one summary per session"},
        "results": results,
        "ratios": compute_ratios(results),
        "checks": checks,
        "versions": versions,
        "not_measured": not_measured,
        "physical_limit": "bare Python loop on a dict over the same records, in one process (per-record work in CPython)",
        "machine": machine(),
    }


def _our_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("state-explorer")
    except Exception:  # noqa: BLE001
        return None


if __name__ == "__main__":
    main()

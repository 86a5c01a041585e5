"""A snapshot on an object store: what a one-operator question fetches, cold and with a warm cache.

``run(snapshot_path, results)`` uploads a local snapshot (any format ``explorer.open`` reads) to an
S3 server on localhost (moto's server mode, the test suite's; a real HTTP S3 endpoint reached through
pyarrow's S3 client as AWS would be), then asks one question of one operator (its key-group
distribution: entries and distinct keys per key group, opened with ``memory_budget="1GB"`` so that
a snapshot bigger than that is streamed range by range; a count of distinct keys over Arrow batches,
asked here before, held every key at once: 15.7 GB at 100 M keys) three ways, each in a
fresh process: from S3 with an empty cache (cold), again (warm cache), and the raw read of the same
remote files with pyarrow alone (no decoding): the limit. It records bytes fetched against the
snapshot's size and the operator's state bytes (target: at most 1.1x those), wall and CPU time,
peak RSS, and the load. ``benchmarks/bench_scale.py`` calls it for its snapshots; alone:

    python -m benchmarks._scale_s3 PATH [--operator NAME] [--out benchmarks/results/scale_s3.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._machine import machine, result_path

ROOT = Path(__file__).resolve().parents[1]


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


def _operator_and_bytes(path: Path, operator: str | None) -> tuple[str, int | None]:
    """The operator asked about (the keyed one with the most state bytes unless named) and its state bytes
    as the snapshot's metadata gives them (engine: its files; Flink: its handles' sizes)."""
    import explorer

    snap = explorer.open(path)
    subs = snap.subtasks
    per_op: dict[str, int] = {}
    if "bytes" in subs:
        per_op = {str(k): int(v) for k, v in subs.groupby("operator")["bytes"].sum().items()}
    ops = snap.operators
    if not per_op and "bytes" in ops:
        per_op = {str(o): int(b) for o, b in zip(ops["operator"], ops["bytes"])}
    if operator is None:
        keyed = set(snap.states["operator"])
        candidates = {o: b for o, b in per_op.items() if o in keyed} or {o: 0 for o in keyed}
        operator = max(candidates, key=lambda o: candidates[o])
    return operator, per_op.get(operator)


def _question(url: str, operator: str, budget: str = "1GB") -> dict[str, Any]:
    """Child process: open ``url`` with ``memory_budget=budget``, ask one operator's key-group distribution (its
    entries and distinct keys per key group, streamed range by range within the budget); print the costs."""
    import explorer
    from explorer.storage import fetch_stats

    t0, c0 = time.perf_counter(), time.process_time()
    snap = explorer.open(url, memory_budget=budget)
    opened = fetch_stats()["bytes_fetched"]
    d = snap.key_group_distribution(operator=operator)
    entries, keys = int(d["entries"].sum()), int(d["keys"].sum())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"question": f"key_group_distribution(operator={operator!r}), memory_budget={budget!r}",
            "entries": entries, "keys": keys, "wall_seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "bytes_fetched_opening": opened, **fetch_stats()}


def _raw(urls: list[str]) -> dict[str, Any]:
    """Child process: read the same remote files whole with pyarrow's S3 filesystem, nothing decoded."""
    from explorer.storage import as_path

    t0, c0 = time.perf_counter(), time.process_time()
    total = 0
    for u in urls:
        p = as_path(u)
        with p.store.fs.open_input_stream(p.key) as f:
            while chunk := f.read(8 << 20):
                total += len(chunk)
    fetch_wall, fetch_cpu = time.perf_counter() - t0, time.process_time() - c0
    import pyarrow.parquet as pq  # the same files decoded by pyarrow alone: what any Parquet reader pays

    for u in urls:
        if u.endswith(".parquet"):
            p = as_path(u)
            with p.store.fs.open_input_file(p.key) as f:
                pq.read_table(f)
    return {"bytes": total, "files": len(urls), "wall_seconds": round(fetch_wall, 3),
            "cpu_seconds": round(fetch_cpu, 3),
            "wall_seconds_fetch_and_parquet_decode": round(time.perf_counter() - t0, 3),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def _child(env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "benchmarks._scale_s3", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmarks._scale_s3 {args[0]} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _cached_urls(cache_dir: Path) -> list[str]:
    urls = []
    for side in (cache_dir / "objects").glob("*/*.json"):
        urls.append(json.loads(side.read_text())["url"])
    return sorted(urls)


def run(snapshot_path: str | Path, results: dict, operator: str | None = None) -> dict:
    """Measure ``snapshot_path`` served from a local S3 server (see module doc); the figures go to
    ``results["s3"]`` (also returned)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.s3 import S3Server

    snapshot_path = Path(snapshot_path)
    op, op_bytes = _operator_and_bytes(snapshot_path, operator)
    size = _folder_bytes(snapshot_path)
    server = S3Server()
    work = Path(tempfile.mkdtemp(prefix="state-explorer-bench-s3-"))
    try:
        t = time.perf_counter()
        url = server.upload(snapshot_path, "bench", snapshot_path.name)
        upload_s = time.perf_counter() - t
        env = {**os.environ, **server.env(), "STATE_EXPLORER_CACHE_DIR": str(work / "cache"),
               "PYTHONPATH": str(ROOT)}
        load = os.getloadavg()
        cold = _child(env, "--question", url, op)
        warm = _child(env, "--question", url, op)
        urls = _cached_urls(work / "cache")
        raw = _child(env, "--raw", *urls) if urls else None
        out = {
            "snapshot": str(snapshot_path), "url": url, "operator": op, "snapshot_bytes": size,
            "operator_state_bytes": op_bytes, "upload_seconds": round(upload_s, 2),
            "cold": cold, "warm_cache": warm, "raw_read_same_files": raw,
            "cold_fetched_over_snapshot": round(cold["bytes_fetched"] / size, 4) if size else None,
            "cold_fetched_over_operator_state": round(cold["bytes_fetched"] / op_bytes, 4) if op_bytes else None,
            "question_fetched_over_operator_state": (round((cold["bytes_fetched"] - cold["bytes_fetched_opening"])
                                                           / op_bytes, 4) if op_bytes else None),
            "cold_over_raw_wall": round(cold["wall_seconds"] / raw["wall_seconds"], 2) if raw else None,
            "target": "bytes fetched for a one-operator question <= 1.1x that operator's state bytes",
            "units": {"*_bytes": "bytes", "*_seconds": "seconds", "peak_rss_mb": "MiB (ru_maxrss of the process)"},
            "load_before": load, "load_after": os.getloadavg(),
            "notes": "each of cold, warm_cache and raw_read_same_files ran in a fresh process; the S3 server "
                     "(moto, in the parent process) shares the machine's CPUs with them",
        }
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    results["s3"] = out
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--question":
        print(json.dumps(_question(argv[1], argv[2], *argv[3:4])))
        return 0
    if argv and argv[0] == "--raw":
        print(json.dumps(_raw(argv[1:])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", type=Path, nargs="+", metavar="PATH")
    ap.add_argument("--operator", default=None)
    ap.add_argument("--out", type=Path, default=result_path("scale_s3"))
    args = ap.parse_args(argv)
    runs = []
    for path in args.paths:
        results: dict[str, Any] = {}
        run(path, results, args.operator)
        s = results["s3"]
        runs.append(s)
        print(json.dumps({k: s[k] for k in ("snapshot", "operator", "snapshot_bytes", "operator_state_bytes",
                                             "cold_fetched_over_operator_state",
                                             "question_fetched_over_operator_state", "cold_over_raw_wall")}))
        print(f"cold: {s['cold']}\nwarm: {s['warm_cache']}\nraw: {s['raw_read_same_files']}")
    report = {"runs": runs, "command": "python -m benchmarks._scale_s3 " + " ".join(map(str, argv)),
              "machine": machine()}
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Inputs of ``bench_scale``: production-size Apache Flink canonical savepoints, built once by a real Flink job.

``tools/flink/src/ScaleSavepoints.java`` runs on a local mini cluster (Flink 2.3's jars from the
``apache-flink-libraries`` wheel, ``tools/flink/fetch_jars.sh``) with the HashMap or the RocksDB
state backend: one keyed operator, ``user-profiles``, holding a POJO ``ValueState`` and a
``ValueState<Long>`` per user and a ``MapState<String, Long>`` for one user in four (20 hot
users with 5,000 map entries each). It takes canonical savepoint ``flink-<backend>-a``, changes 2 %
of the keys (1 % updated, 0.5 % cleared, 0.5 % new), takes ``flink-<backend>-b`` (for the diff)
and stops. Each folder gets a ``SCALE.json`` with what the job wrote and a ``.complete`` marker;
a folder without it is built again.

    flock /tmp/bench.lock nice -n 10 python -m benchmarks._scale_flink --keys 18000000

About 128 bytes of savepoint per key: 18 M keys make about 2.3 GB per savepoint. The HashMap
backend holds every key on the JVM heap (about 350 bytes per key): ``--heap`` 10g for 18 M.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "scale"
BACKENDS = ("hashmap", "rocksdb")
JAVA_OPENS = ["--add-opens=java.base/java.util=ALL-UNNAMED", "--add-opens=java.base/java.lang=ALL-UNNAMED",
              "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/java.io=ALL-UNNAMED"]


def _classpath() -> tuple[str, Path]:
    cp = subprocess.run([str(ROOT / "tools/flink/fetch_jars.sh")], check=True, capture_output=True, text=True,
                        env={**os.environ, "FLINK_VERSION": os.environ.get("FLINK_VERSION", "2.3.0")}).stdout.strip()
    build = ROOT / ".cache/flink/build/scale"
    build.mkdir(parents=True, exist_ok=True)
    subprocess.run(["javac", "-nowarn", "-d", str(build), "-cp", cp, str(ROOT / "tools/flink/src/ScaleSavepoints.java")],
                   check=True)
    return cp, build


def flink_savepoints(keys: int, backend: str, cache: Path = CACHE, heap: str = "10g",
                     parallelism: int = 2) -> tuple[Path, Path]:
    """The two canonical savepoints of ``backend`` (``a`` and ``b``, a little later), built if missing."""
    name = f"flink-{backend}"
    a, b = cache / f"{name}-a", cache / f"{name}-b"
    if (a / ".complete").exists() and (b / ".complete").exists():
        return a, b
    cache.mkdir(parents=True, exist_ok=True)
    for p in (a, b):
        shutil.rmtree(p, ignore_errors=True)
    cp, build = _classpath()
    t = time.perf_counter()
    cmd = ["java", f"-Xmx{heap}", "-XX:+UseParallelGC", "-XX:ActiveProcessorCount=2", *JAVA_OPENS,
           "-Dlog4j2.level=ERROR", "-cp", f"{build}:{cp}", "ScaleSavepoints", str(cache), name, backend,
           str(keys), str(parallelism)]
    print(" ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)
    for p in (a, b):
        (p / ".complete").write_text(f"{keys} keys, built in {time.perf_counter() - t:.0f} s\n")
    return a, b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=18_000_000)
    ap.add_argument("--backend", choices=BACKENDS + ("all",), default="all")
    ap.add_argument("--heap", default="10g", help="the JVM's -Xmx (the HashMap backend keeps every key on it)")
    ap.add_argument("--cache", type=Path, default=CACHE)
    args = ap.parse_args(argv)
    for backend in BACKENDS if args.backend == "all" else (args.backend,):
        a, b = flink_savepoints(args.keys, backend, args.cache, args.heap)
        for p in (a, b):
            size = sum(f.stat().st_size for f in p.iterdir() if f.is_file())
            print(f"{p}: {size:,} bytes", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

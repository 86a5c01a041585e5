"""The first open of a Flink snapshot in a fresh Python process, by the state of numba's kernel cache (issue 31).

Three rows for each of ``sample_data/flink/heap-canonical-savepoint`` and
``sample_data/flink/rocksdb-incremental-checkpoint``, each a new process that imports
``explorer``, opens the snapshot with ``explorer.open`` and reads every keyed piece:

* ``empty``: ``NUMBA_CACHE_DIR`` a new, empty folder: what a user meets without ``make venv``'s warm-up
  (the SST walk then runs in NumPy, ``explorer/format/sst/_vectorised.py``: nothing compiled for these samples);
* ``install``: the folder filled only by ``python -m explorer.kernels --warm`` (what ``make venv``
  runs after ``pip install``): what a new user meets;
* ``warm``: the same folder after that first open: every later open.

Each process reports its CPU seconds (user + system, all threads: the fair figure on a shared
machine), its wall seconds and the kernel signatures numba compiled (cache misses) and loaded.
The warm-up's own CPU seconds are recorded too. Best of ``--repeat`` per row.

Run::

    python -m benchmarks.bench_first_open     # writes benchmarks/results/first_open.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._machine import machine, result_path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = {
    "heap canonical savepoint": ROOT / "sample_data" / "flink" / "heap-canonical-savepoint",
    "rocksdb incremental checkpoint": ROOT / "sample_data" / "flink" / "rocksdb-incremental-checkpoint",
}
#: the issue's target: a first open with an empty cache within this many times a warm first open
TARGET_RATIO = 1.5

_CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import explorer
from explorer.readers.base import KeyedStateQuery
snap = explorer.open(sys.argv[1])
rows = sum(p.num_rows for p in snap.reader.keyed_pieces(KeyedStateQuery()))
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
from explorer import kernels
print(json.dumps({"rows": rows, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
                  "compiled": sum(kernels.compile_counts().values()), "loaded": sum(kernels.load_counts().values()),
                  "compiled_by_kernel": kernels.compile_counts()}))
"""

_WARM = """
import resource, sys
from explorer import kernels
got = kernels.warm()
ru = resource.getrusage(resource.RUSAGE_SELF)
import json
print(json.dumps({"cpu": ru.ru_utime + ru.ru_stime, "compiled": sum(got["compiled"].values())}))
"""


def _python(code: str, args: list[str], cache: Path) -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(got: dict) -> dict:
    return {"cpu_seconds": {"value": round(got["cpu"], 3), "unit": "s"},
            "seconds": {"value": round(got["wall"], 3), "unit": "s"},
            "kernels_compiled": got["compiled"], "kernels_loaded": got["loaded"], "rows": got["rows"],
            "compiled_by_kernel": got["compiled_by_kernel"]}


def _best(rows: list[dict]) -> dict:
    return min(rows, key=lambda r: r["cpu"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=1, help="processes per row; the least CPU kept")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/first_open.json")
    args = ap.parse_args(argv)
    out_path = args.out or result_path("first_open")
    load_start = round(os.getloadavg()[0], 2)
    results = []
    warm_ups = []
    for label, path in SAMPLES.items():
        runs: dict[str, list[dict]] = {"empty": [], "install": [], "warm": []}
        for _ in range(max(1, args.repeat)):
            with tempfile.TemporaryDirectory(prefix="numba-empty-") as empty:
                runs["empty"].append(_python(_CHILD, [str(path)], Path(empty)))
            with tempfile.TemporaryDirectory(prefix="numba-install-") as cache:
                warm_ups.append(_python(_WARM, [], Path(cache)))
                runs["install"].append(_python(_CHILD, [str(path)], Path(cache)))
                runs["warm"].append(_python(_CHILD, [str(path)], Path(cache)))
        rows = {k: _best(v) for k, v in runs.items()}
        row = {"snapshot": label, "path": str(path.relative_to(ROOT)),
               **{f"numba_cache_{k}": _row(v) for k, v in rows.items()},
               "empty_over_warm_cpu": round(rows["empty"]["cpu"] / rows["warm"]["cpu"], 2),
               "install_over_warm_cpu": round(rows["install"]["cpu"] / rows["warm"]["cpu"], 2)}
        results.append(row)
        print(f"{label}: first open CPU-s empty cache {rows['empty']['cpu']:.2f} ({rows['empty']['compiled']} "
              f"compiled), install-time cache {rows['install']['cpu']:.2f} ({rows['install']['compiled']} compiled), "
              f"warm {rows['warm']['cpu']:.2f}; empty/warm {row['empty_over_warm_cpu']}x, "
              f"install/warm {row['install_over_warm_cpu']}x", flush=True)
    warm_up = min(warm_ups, key=lambda w: w["cpu"])
    report = {
        "benchmark": "benchmarks/bench_first_open.py",
        "command": "python -m benchmarks.bench_first_open " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {**machine(), "load_average_1m_at_start": load_start,
                    "load_average_1m_at_end": round(os.getloadavg()[0], 2)},
        "date": machine()["date"],
        "repeat": args.repeat,
        "target": {"empty_over_warm_cpu": TARGET_RATIO, "install_over_warm_cpu": TARGET_RATIO},
        "install_warm_up": {"cpu_seconds": {"value": round(warm_up["cpu"], 3), "unit": "s"},
                            "kernels_compiled": warm_up["compiled"],
                            "command": "python -m explorer.kernels --warm"},
        "results": results,
    }
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the default SHA-256 check costs on the first load of an engine savepoint (issue 16).

``explorer.open(path)`` checks each data file's SHA-256 in a thread while the file is read
(:meth:`explorer.readers.engine.EngineSnapshotReader._reading`); ``verify=False`` skips it.
Both are timed on the same savepoint (the one ``bench_explorer`` builds), best of ``--repeat``.

    python -m benchmarks.bench_verify --keys 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

from .bench_explorer import build_savepoint


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "verify.json")
    args = ap.parse_args(argv)
    import explorer

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="state-explorer-bench-verify-") as tmp:
        folder = build_savepoint(Path(tmp) / "sp", args.keys)
        folder = Path(tmp) / "sp"
        times: dict[str, list[float]] = {"verify": [], "no_verify": []}
        rows = 0
        for _ in range(args.repeat):
            for name, verify in (("verify", True), ("no_verify", False)):
                t = time.perf_counter()
                rows = len(explorer.open(folder, verify=verify).keyed_state(progress=False))
                times[name].append(time.perf_counter() - t)
        data_bytes = sum(p.stat().st_size for p in folder.rglob("*.parquet"))
    best = {k: min(v) for k, v in times.items()}
    report = {
        "keys": args.keys, "rows": rows, "parquet_bytes": data_bytes,
        "first_load_seconds": {k: round(v, 3) for k, v in best.items()},
        "all_runs_seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "verify_cost_ratio": round(best["verify"] / best["no_verify"], 3),
        "command": "python -m benchmarks.bench_verify " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_before": load_before, "load_after": os.getloadavg()},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("keys", "rows", "first_load_seconds", "verify_cost_ratio")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``make bench``: run every benchmark and write benchmarks/RESULTS.md.

``python -m benchmarks [--smoke] [--only NAME ...]``. Each benchmark module
``benchmarks/bench_<name>.py`` has a ``main(argv)`` that writes
``benchmarks/results/<name>.json``; this runner calls them in turn (a failing
one is reported and the others still run) and renders every JSON result into
one Markdown page.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["engine", "checkpoints", "explorer", "widgets", "flink_reader", "spark"]


def available() -> list[str]:
    names = [p.stem[len("bench_"):] for p in HERE.glob("bench_*.py")]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def render(results: dict[str, dict]) -> str:
    lines = ["# Benchmark results", "",
             "Made by `make bench` (`python -m benchmarks`); each section is one `benchmarks/results/NAME.json`.", ""]
    for name, res in results.items():
        lines.append(f"## {name}")
        m = res.get("machine", {})
        if m:
            lines.append(f"_{m.get('date', '?')} · {m.get('platform', '?')} · {m.get('cpus', '?')} CPUs · "
                         f"load {m.get('load_average')}_")
        lines.append("")
        rows = res.get("results")
        if isinstance(rows, dict):
            lines += ["| measure | value | unit |", "|---|---:|---|"]
            for k, v in rows.items():
                if isinstance(v, dict) and "value" in v:
                    lines.append(f"| {k} | {v['value']:,} | {v.get('unit', '')} |" if isinstance(v["value"], (int, float))
                                 else f"| {k} | {v['value']} | {v.get('unit', '')} |")
        for key in ("ratios", "peer", "targets"):
            if key in res:
                lines.append("")
                lines.append(f"**{key}**: `{json.dumps(res[key])}`")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the benchmarks and write benchmarks/RESULTS.md")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: checks the suite still runs")
    ap.add_argument("--only", nargs="*", default=None)
    args = ap.parse_args(argv)
    names = args.only or available()
    failed = []
    for name in names:
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"== {name}", flush=True)
        t = time.perf_counter()
        try:
            mod.main(["--smoke"] if args.smoke else [])
        except Exception:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            failed.append(name)
        print(f"   ({time.perf_counter() - t:.1f} s)", flush=True)
    results = {}
    for name in available():
        p = HERE / "results" / f"{name}.json"
        if p.is_file():
            results[name] = json.loads(p.read_text())
    if not args.smoke:
        (HERE / "RESULTS.md").write_text(render(results))
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``make bench``: run every benchmark and write benchmarks/RESULTS.md.

``python -m benchmarks [--smoke] [--only NAME ...] [--results-dir DIR] [--render-only]``

Each benchmark module ``benchmarks/bench_<name>.py`` has a ``main(argv)`` that
takes ``--out FILE`` and writes its JSON there; this runner calls them in turn
(a failing one is reported and the others still run) and renders every JSON
result into one Markdown page with charts (``benchmarks/_render.py``).

``--smoke`` runs the tiny versions (modules without a ``--smoke`` mode are
skipped) into ``.cache/bench-smoke/`` so a smoke run never overwrites the
measured results in ``benchmarks/results/`` or ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import inspect
import json
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ORDER = ["engine", "peers", "checkpoints", "explorer", "widgets", "flink_reader", "spark"]
SMOKE_DIR = ROOT / ".cache" / "bench-smoke"
#: arguments a full run adds for a benchmark (a fresh machine has no Flink snapshots yet: build them)
FULL_ARGS = {"flink_reader": ["--generate"]}


def available() -> list[str]:
    names = [p.stem[len("bench_"):] for p in HERE.glob("bench_*.py")]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def has_smoke(mod) -> bool:
    try:
        return "--smoke" in inspect.getsource(mod)
    except OSError:  # pragma: no cover
        return False


def load_results(results_dir: Path) -> dict[str, dict]:
    """Every benchmark's JSON in ``results_dir``, in the order of :func:`available`, then the runs kept beside
    them under names of their own (``peers_10m``, ``checkpoints_busy``: a benchmark run with other options)."""
    results = {}
    names = available()
    # (fuzz.json is not a timing run: its counts and bug examples are summarised in docs/damaged-input.md)
    extra = sorted(p.stem for p in results_dir.glob("*.json")
                   if not p.stem.startswith("_") and p.stem not in names and p.stem != "fuzz")
    for name in names + extra:
        p = results_dir / f"{name}.json"
        if p.is_file():
            try:
                results[name] = json.loads(p.read_text())
            except json.JSONDecodeError as exc:
                print(f"skipping {p}: {exc}", file=sys.stderr)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the benchmarks and write benchmarks/RESULTS.md")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, into .cache/bench-smoke/: checks the suite runs")
    ap.add_argument("--only", nargs="*", default=None, help=f"benchmarks to run (of {', '.join(available())})")
    ap.add_argument("--results-dir", type=Path, default=None,
                    help="where the JSONs go (default benchmarks/results; smoke: .cache/bench-smoke/results); "
                         "RESULTS.md and charts/ are written next to it")
    ap.add_argument("--render-only", action="store_true", help="only render the JSONs already there")
    args = ap.parse_args(argv)
    results_dir = args.results_dir or (SMOKE_DIR / "results" if args.smoke else HERE / "results")
    page_dir = results_dir.parent
    results_dir.mkdir(parents=True, exist_ok=True)
    runlog_path = results_dir / "_runlog.json"
    runlog = json.loads(runlog_path.read_text()) if runlog_path.is_file() else {}

    names = [] if args.render_only else (args.only or available())
    unknown = [n for n in names if n not in available()]
    if unknown:
        ap.error(f"no benchmark named {unknown}; there are {available()}")
    failed = []
    for name in names:
        mod = importlib.import_module(f"benchmarks.bench_{name}")
        if args.smoke and not has_smoke(mod):
            print(f"== {name}: skipped (no --smoke mode)", flush=True)
            continue
        print(f"== {name}", flush=True)
        t = time.perf_counter()
        status = "ok"
        try:
            extra = ["--smoke"] if args.smoke else FULL_ARGS.get(name, [])
            rc = mod.main(extra + ["--out", str(results_dir / f"{name}.json")])
            if isinstance(rc, int) and not isinstance(rc, bool) and rc != 0:
                status = f"exit {rc}"
        except SystemExit as exc:  # argparse errors and sys.exit inside a module
            if exc.code not in (0, None):
                status = f"exit {exc.code}"
        except Exception as exc:  # noqa: BLE001 - report and go on with the others
            traceback.print_exc()
            status = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
        seconds = round(time.perf_counter() - t, 1)
        print(f"   ({seconds} s, {status})", flush=True)
        if status != "ok":
            failed.append(name)
        runlog[name] = {"status": status, "seconds": seconds,
                        "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    runlog_path.write_text(json.dumps(runlog, indent=2) + "\n")

    from benchmarks._render import render

    page = page_dir / "RESULTS.md"
    page.write_text(render(load_results(results_dir), page_dir / "charts", runlog))
    print(f"wrote {page}", flush=True)
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

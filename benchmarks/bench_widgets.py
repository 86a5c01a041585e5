"""Dashboard first paint and responsiveness, and the HTML report's size, at 1 M keys.

Builds an engine savepoint of 1 M keys (``--smoke``: 50 k) with the explorer benchmark's builder
(:func:`benchmarks.bench_explorer.build_savepoint`: parallelism 4, max parallelism 128, a
ValueState with TTL for every key and a ListState for the 1 % hot keys), then measures:

* **loading state**: from calling ``widgets.explore`` (deferred, as in a notebook) to the
  dashboard with its header, tab bar and the first tab's loading line ready to display
  (target 100 ms);
* **loading state in a fresh process**: ``import widgets`` and a deferred ``Dashboard`` in a new
  Python process, as a user's first cell in a fresh kernel (the snapshot is opened after display);
* **first paint of each tab**: from asking for the tab (a click on it) to its first answer on
  screen (``Dashboard.timings``: the Overview's metadata facts before the keyed state is read;
  the other tabs built whole), and **complete**: to every figure filled, in tab order, on one
  freshly opened snapshot (target 1 s each; the browser's own drawing time is not included; the
  Overview's completion includes reading the keyed state, which every later tab reuses);
* **control changes**: from setting a control's ``.value`` to the return of its observer
  (model recomputed, figures updated in place, messages serialized), round robin over the
  key-groups parallelism slider and metric toggle, the hot-keys ranking, top-N and salting
  sliders, the TTL "now" slider and window, and a key search (target p95 150 ms);
* **JavaScript sent to the page**: the figures of a dashboard with every tab built, the bytes
  of their widget modules and of plotly.js sent once per kernel (:mod:`widgets._plotly`; plotly's
  own FigureWidget sends the 5 MB bundle with every figure, and the browser evaluates each copy);
* **report size**: ``state-explorer report`` of the same savepoint (:func:`explorer.report.build_report`),
  in bytes, and the same without the plotly.js bundle it inlines (target: under 1 MB plus one
  shared copy of plotly).

* **command line start**: ``state-explorer --help`` in a fresh process (the first run, then the
  median of 5), beside ``python -c "import pandas"`` and ``python -c pass`` in the same run
  (target 0.5 s for ``--help``: the CLI imports a command's dependencies when it runs).

Run::

    python -m benchmarks.bench_widgets            # 1 M keys
    python -m benchmarks.bench_widgets --smoke    # 50 k keys
    python -m benchmarks.bench_widgets --cli-only # only the command line start (kept beside the rest)

Writes ``benchmarks/results/widgets.json`` with units, the machine, its load and the date.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ._machine import machine, result_path

TARGET_P95_MS = 150.0
TARGET_LOADING_MS = 100.0
TARGET_PAINT_MS = 1000.0
TARGET_REPORT_BYTES = 1_000_000
TARGET_CLI_HELP_S = 0.5


def cli_start(runs: int = 5) -> dict[str, Any]:
    """Wall seconds of fresh processes: ``state-explorer --help`` (this checkout's code), ``python -c "import
    pandas"`` and ``python -c pass``, each the first run and the median of ``runs`` more."""
    import os
    import statistics
    import subprocess

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    script = Path(sys.executable).with_name("state-explorer")
    help_cmd = [str(script), "--help"] if script.exists() else [sys.executable, "-m", "explorer.cli", "--help"]
    commands = {
        "state-explorer --help": help_cmd,
        "state-explorer with a usage error": [*help_cmd[:-1], "inspect"],
        'python -c "import pandas"': [sys.executable, "-c", "import pandas"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    out: dict[str, Any] = {}
    for name, cmd in commands.items():
        times = []
        for _ in range(runs + 1):
            t = time.perf_counter()
            subprocess.run(cmd, cwd=root, env=env, capture_output=True, check=False)
            times.append(time.perf_counter() - t)
        out[f"{name}: first run"] = {"value": round(times[0], 3), "unit": "s"}
        out[f"{name}: median of {runs}"] = {"value": round(statistics.median(times[1:]), 3), "unit": "s"}
    return out


def changes(dash) -> list[tuple[str, Callable[[int], Any]]]:
    """``(control, set(i))``: one user action per call, each a different value than the last."""
    kg, hot, ttl, keys = dash.key_groups_tab, dash.hot_keys_tab, dash.ttl_tab, dash.keys_tab
    metrics = ["bytes", "entries", "keys", "records"]
    ranks = ["bytes", "entries", "traffic"]
    lo, hi = ttl.now_slider.min, ttl.now_slider.max
    words = ["user-00001", "user-0002", "user-1", "9", "user-000042", ""]
    return [
        ("key groups: parallelism slider", lambda i: setattr(kg.parallelism_slider, "value", 1 + (i * 7) % 32)),
        ("key groups: metric toggle", lambda i: setattr(kg.metric_select, "value", metrics[i % 4])),
        ("hot keys: rank by", lambda i: setattr(hot.by_select, "value", ranks[i % 3])),
        ("hot keys: top N slider", lambda i: setattr(hot.n_slider, "value", 5 + (i * 11) % 45)),
        ("hot keys: salting slider", lambda i: setattr(hot.salt_slider, "value", 2 + (i * 5) % 30)),
        ("ttl: now slider", lambda i: setattr(ttl.now_slider, "value", round(lo + (hi - lo) * ((i * 0.37) % 1), 1))),
        ("ttl: window", lambda i: setattr(ttl.freq_select, "value", ["1h", "6h", "10min", "1D"][i % 4])),
        ("keys: search", lambda i: setattr(keys.search, "value", words[i % len(words)])),
    ]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def _plotly_bundle_size(html: str) -> int:
    """Bytes of the inlined plotly.js bundles in a report (the scripts defining ``Plotly``)."""
    import re

    return sum(len(m.group(0).encode()) for m in re.finditer(r"<script[^>]*>(?:(?!</script>).)*?plotly\.js v"
                                                               r"(?:(?!</script>).)*</script>", html, flags=re.S))


def _module_bytes() -> tuple[int, int, int]:
    """``(figures, bytes of their modules, bytes of plotly.js sent apart)`` over the live widgets: what the
    kernel ships to the page as JavaScript (plotly's own FigureWidget: the 5 MB bundle with every figure;
    widgets._plotly: a small module per figure and the bundle once, in the PlotlyLibrary widget)."""
    import plotly.graph_objects as go
    from ipywidgets.widgets.widget import _instances

    from widgets._plotly import PlotlyLibrary

    live = list(_instances.values())
    figures = [x for x in live if isinstance(x, go.FigureWidget)]
    modules = sum(len(str(x._esm).encode()) for x in figures)
    library = sum(len(x.bundle.encode()) + len(str(x._esm).encode()) for x in live if isinstance(x, PlotlyLibrary))
    return len(figures), modules, library


def _fresh_process_loading(savepoint: Path) -> tuple[float, float]:
    """``(import widgets + deferred explore, import widgets)`` in ms, in a new Python process: what a user's
    first cell (``import widgets; widgets.explore(path)``) costs in a fresh kernel before the loading line."""
    import subprocess

    code = ("import time; t0 = time.perf_counter(); import widgets; t1 = time.perf_counter(); "
            f"d = widgets.Dashboard({str(savepoint)!r}, defer=True); t2 = time.perf_counter(); "
            "print((t2 - t0) * 1000, (t1 - t0) * 1000)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    total, imported = (float(x) for x in out.stdout.split())
    return total, imported


def run(n_keys: int, rounds: int, workdir: Path) -> dict[str, Any]:
    from .bench_explorer import build_savepoint

    import widgets
    from explorer.report import build_report

    t0 = time.perf_counter()
    sp = build_savepoint(workdir / f"sp-{n_keys}", n_keys)
    build_s = time.perf_counter() - t0
    fresh_ms, fresh_import_ms = _fresh_process_loading(sp)
    gc.collect()
    t0 = time.perf_counter()  # cold: the first in the process pays one-time imports (readers registered)
    widgets.Dashboard(sp, defer=True).close()
    loading_cold_ms = (time.perf_counter() - t0) * 1000
    t0 = time.perf_counter()
    dash = widgets.Dashboard(sp, defer=True)
    loading_ms = (time.perf_counter() - t0) * 1000
    paint: dict[str, float] = {}
    complete: dict[str, float] = {}
    per: dict[str, list[float]] = {}
    try:
        for title in dash.titles:  # each tab as a user opens it, the first one reads the state
            dash.select(title)
            times = dash.timings[title]
            paint[title] = (times["first answer"] - times["asked"]) * 1000
            complete[title] = (times["complete"] - times["asked"]) * 1000
        n_figures, figure_js, library_js = _module_bytes()
        acts = changes(dash)
        for _, act in acts:  # warm-up: first use of each code path
            act(0)
        for i in range(1, rounds + 1):
            for name, act in acts:
                t = time.perf_counter()
                act(i)
                per.setdefault(name, []).append((time.perf_counter() - t) * 1000)
        if dash.errors.last_error is not None:
            raise RuntimeError(f"a control raised: {dash.errors.last_error!r}")
    finally:
        dash.close()
    t0 = time.perf_counter()
    report = build_report(sp, workdir / "report.html")
    report_s = time.perf_counter() - t0
    html = report.read_text()
    report_bytes = len(html.encode())
    plotly_bytes = _plotly_bundle_size(html)
    every = [x for v in per.values() for x in v]
    results: dict[str, Any] = {
        "keys": {"value": n_keys, "unit": "keys"},
        "savepoint build": {"value": round(build_s, 2), "unit": "s"},
        "loading state ready (explore, deferred)": {"value": round(loading_ms, 1), "unit": "ms"},
        "loading state ready, first dashboard of the process": {"value": round(loading_cold_ms, 1), "unit": "ms"},
        "fresh process: import widgets": {"value": round(fresh_import_ms, 1), "unit": "ms"},
        "fresh process: import widgets and explore to loading state": {"value": round(fresh_ms, 1), "unit": "ms"},
    }
    for title, ms in paint.items():
        results[f"first paint: {title}"] = {"value": round(ms, 1), "unit": "ms"}
    for title, ms in complete.items():
        results[f"complete: {title}"] = {"value": round(ms, 1), "unit": "ms"}
    results.update({
        "all changes p50": {"value": round(percentile(every, 50), 1), "unit": "ms"},
        "all changes p95": {"value": round(percentile(every, 95), 1), "unit": "ms"},
        "all changes max": {"value": round(max(every), 1), "unit": "ms"},
        "changes timed": {"value": len(every), "unit": "changes"},
    })
    for name, v in per.items():
        results[f"{name} p50"] = {"value": round(percentile(v, 50), 1), "unit": "ms"}
        results[f"{name} p95"] = {"value": round(percentile(v, 95), 1), "unit": "ms"}
    results.update({
        "figures of a dashboard with every tab built": {"value": n_figures, "unit": "figures"},
        "JS sent with those figures (their modules)": {"value": figure_js, "unit": "bytes"},
        "JS sent once per kernel (plotly.js library widget)": {"value": library_js, "unit": "bytes"},
        "report build": {"value": round(report_s, 2), "unit": "s"},
        "report size": {"value": report_bytes, "unit": "bytes"},
        "report plotly.js inlined": {"value": plotly_bytes, "unit": "bytes"},
        "report size without plotly.js": {"value": report_bytes - plotly_bytes, "unit": "bytes"},
    })
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_widgets", description=__doc__.split("\n")[0])
    ap.add_argument("--smoke", action="store_true", help="50 k keys instead of 1 M")
    ap.add_argument("--keys", type=int, default=None, help="number of keys (overrides --smoke)")
    ap.add_argument("--rounds", type=int, default=None, help="changes per control (default 20; smoke 5)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--cli-only", action="store_true",
                    help="time only the command line start; the dashboard figures already written are kept")
    args = ap.parse_args(argv)
    path = args.out or result_path("widgets")
    cli = {"command": " ".join(["python -m benchmarks.bench_widgets", *(argv if argv is not None else sys.argv[1:])]),
           "results": cli_start(), "machine": machine()}
    help_s = cli["results"]["state-explorer --help: median of 5"]["value"]
    cli["targets"] = {"state-explorer --help (s)": TARGET_CLI_HELP_S, "met": bool(help_s <= TARGET_CLI_HELP_S)}
    for k, v in cli["results"].items():
        print(f"{k:<45} {v['value']:>12,} {v['unit']}")
    if args.cli_only:
        out = json.loads(path.read_text()) if path.exists() else {"benchmark": "widgets"}
        out["command line start"] = cli
        path.write_text(json.dumps(out, indent=2) + "\n")
        print(f"wrote {path}")
        return 0
    n = args.keys or (50_000 if args.smoke else 1_000_000)
    rounds = args.rounds or (5 if args.smoke else 20)
    with tempfile.TemporaryDirectory(prefix="bench-widgets-") as tmp:
        results = run(n, rounds, Path(tmp))
    p95 = results["all changes p95"]["value"]
    paints = {k: v["value"] for k, v in results.items() if k.startswith("first paint: ")}
    loading = results["loading state ready (explore, deferred)"]["value"]
    report_rest = results["report size without plotly.js"]["value"]
    targets = {
        "loading state (ms)": TARGET_LOADING_MS, "loading state met": bool(loading <= TARGET_LOADING_MS),
        "first paint of each tab (ms)": TARGET_PAINT_MS,
        "first paint met": bool(max(paints.values()) <= TARGET_PAINT_MS),
        "tabs over the target": sorted(k.removeprefix("first paint: ") for k, v in paints.items()
                                       if v > TARGET_PAINT_MS),
        "tabs complete after the target": sorted(k.removeprefix("complete: ") for k, v in results.items()
                                                 if k.startswith("complete: ") and v["value"] > TARGET_PAINT_MS),
        "p95 control change to updated figures (ms)": TARGET_P95_MS, "p95 met": bool(p95 < TARGET_P95_MS),
        "report without plotly.js (bytes)": TARGET_REPORT_BYTES,
        "report met": bool(report_rest < TARGET_REPORT_BYTES),
    }
    out = {
        "benchmark": "widgets",
        "command": " ".join(["python -m benchmarks.bench_widgets", *(argv if argv is not None else sys.argv[1:])]),
        "results": results,
        "targets": targets,
        "machine": machine(),
        "command line start": cli,
    }
    path.write_text(json.dumps(out, indent=2) + "\n")
    for k, v in results.items():
        print(f"{k:<45} {v['value']:>12,} {v['unit']}")
    print(json.dumps(targets))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""Render ``benchmarks/results/*.json`` into ``RESULTS.md`` with charts.

Every figure on the page is read from a result JSON written by a run; nothing
is typed in by hand. The page opens with the headline ratios (computed here
from the JSONs: our engine against the bare loop, Bytewax and Flink;
incremental against full checkpoints; snapshot loading against a raw Parquet
read; dashboard latency), then one section per benchmark: the machine, load,
date and versions it ran with, its tables and its ratios.

Charts: an SVG written by this module (no plotting dependency; renders on
GitHub and in any Markdown viewer without a browser engine), and the same
chart as an interactive plotly HTML file next to it (``include_plotlyjs="cdn"``).
plotly's static export needs kaleido and a browser, which the suite does not
require, so a PNG is written only when ``fig.write_image`` works.

A benchmark whose JSON has a shape this module does not know is still shown:
every ``{"value": ..., "unit": ...}`` leaf becomes a table row.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable

TITLES = {
    "engine": "Engine throughput against a bare Python loop",
    "peers": "Keyed count and sessions: our engine, Bytewax, Apache Flink",
    "checkpoints": "Checkpoints: full against incremental",
    "explorer": "Loading snapshots into pandas",
    "widgets": "Dashboard interaction latency",
    "flink_reader": "Reading real Apache Flink snapshots",
    "spark": "Spark Structured Streaming keyed count",
    "first_open": "First open in a fresh process, by the state of numba's kernel cache",
    "edit": "Editing a Flink savepoint: the editor beside the State Processor API",
}
TEXT_FIELDS = ("description", "input", "workload", "peer", "target", "physical_limit", "rate_definition", "notes",
               "command")


# --- small helpers ---------------------------------------------------------------------------
def fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v:  # NaN
            return "n/a"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 10:
            return f"{v:.1f}"
        return f"{v:.3g}"
    if isinstance(v, list):
        return ", ".join(fmt(x) for x in v)
    return str(v)


def times(r: float | None) -> str:
    """A ratio ours/peer as words: '2.3x faster' or '4.1x slower'."""
    if not r:
        return "n/a"
    x = r if r >= 1 else 1 / r
    x_s = f"{x:,.0f}" if x >= 100 else f"{x:.2g}" if x < 10 else f"{x:.0f}"
    return f"{x_s}x {'faster' if r >= 1 else 'slower'}"


def get(d: Any, *path: Any, default: Any = None) -> Any:
    for p in path:
        try:
            d = d[p]
        except (KeyError, IndexError, TypeError):
            return default
    return d


def val(d: Any, *path: Any) -> Any:
    """``d[path]``, unwrapping ``{"value": ...}``."""
    v = get(d, *path)
    return v.get("value") if isinstance(v, dict) else v


VERSION_KEYS = ("pandas", "pyarrow", "numpy", "pyspark", "plotly", "ipywidgets", "rocksdict", "flink", "java")


def machine_line(res: dict) -> str:
    m = res.get("machine") or {}
    date = m.get("date") or res.get("date") or "?"
    cpus = m.get("cpus") or m.get("cpu_count") or "?"
    load = next((m[k] for k in ("load_average", "load_average_1_5_15", "load_average_1m_at_start") if m.get(k)), None)
    if isinstance(load, list):
        load = " / ".join(f"{x:.1f}" for x in load) + " (1/5/15 min)"
    extra = m.get("load_average_1m_at_end")
    load_s = (f"load average {load}" + (f" → {extra} at the end" if extra is not None else "")
              if load is not None else "load average not recorded")
    parts = [date, m.get("platform", "?"), f"{cpus} CPUs", f"Python {m.get('python', '?')}", load_s]
    mem = m.get("memory_mb") or (m.get("memory_gb") and int(m["memory_gb"] * 1024))
    if mem:
        parts.insert(3, f"{mem:,} MB RAM")
    parts += [f"{k} {m[k]}" for k in VERSION_KEYS if m.get(k)]
    return "_" + " · ".join(str(p) for p in parts) + "_"


def table(header: list[str], rows: Iterable[list[Any]], align: str | None = None) -> list[str]:
    rows = list(rows)
    if not rows:
        return []
    align = align or ("l" + "r" * (len(header) - 1))
    sep = ["---:" if a == "r" else "---" for a in align]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    out += ["| " + " | ".join(c if isinstance(c, str) else ("" if c is None else fmt(c)) for c in r) + " |"
            for r in rows]
    return out


# --- charts ----------------------------------------------------------------------------------
PALETTE = {"ours": "#1f77b4", "peer": "#ff7f0e", "limit": "#7f7f7f", "other": "#2ca02c"}


DEFAULT_LEGEND = {"ours": "State Explorer engine", "peer": "peer", "limit": "physical limit"}


def svg_bars(title: str, bars: list[tuple[str, float, str]], unit: str, log: bool = False,
             legend: dict[str, str] | None = None) -> str:
    """A horizontal bar chart as standalone SVG: (label, value, group) per bar."""
    bars = [b for b in bars if b[1] is not None and b[1] > 0]
    width, label_w, bar_h, gap, top = 1000, 470, 18, 6, 40
    plot_w = width - label_w - 120
    height = top + len(bars) * (bar_h + gap) + 30
    vmax = max((b[1] for b in bars), default=1)
    vmin = min((b[1] for b in bars), default=1)
    lo = 10 ** math.floor(math.log10(vmin)) if log else 0

    def scale(v: float) -> float:
        if log:
            return plot_w * (math.log10(v) - math.log10(lo)) / max(1e-9, math.log10(vmax) - math.log10(lo))
        return plot_w * v / vmax

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="Helvetica,Arial,sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{html.escape(title)}</text>',
           f'<text x="{width - 10}" y="20" text-anchor="end" fill="#555">{html.escape(unit)}'
           f'{" (log scale)" if log else ""}</text>']
    for i, (label, v, group) in enumerate(bars):
        y = top + i * (bar_h + gap)
        w = max(1.0, scale(v))
        out.append(f'<text x="{label_w - 6}" y="{y + bar_h - 5}" text-anchor="end">{html.escape(label)}</text>')
        out.append(f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bar_h}" '
                   f'fill="{PALETTE.get(group, PALETTE["other"])}"/>')
        out.append(f'<text x="{label_w + w + 4:.1f}" y="{y + bar_h - 5}">{html.escape(fmt(v))}</text>')
    legend_y = height - 10
    used = {b[2] for b in bars}
    for j, (group, name) in enumerate((g, n) for g, n in (legend or DEFAULT_LEGEND).items() if g in used):
        x = label_w + j * 170
        out.append(f'<rect x="{x}" y="{legend_y - 10}" width="10" height="10" fill="{PALETTE[group]}"/>')
        out.append(f'<text x="{x + 14}" y="{legend_y}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out)


def write_chart(charts: Path, name: str, title: str, bars: list[tuple[str, float, str]], unit: str,
                log: bool = False, legend: dict[str, str] | None = None) -> list[str]:
    """SVG (always), plotly HTML (when plotly imports) and PNG (when plotly's static export works)."""
    bars = [b for b in bars if b[1] is not None and b[1] > 0]
    if not bars:
        return []
    charts.mkdir(parents=True, exist_ok=True)
    (charts / f"{name}.svg").write_text(svg_bars(title, bars, unit, log, legend))
    links = [f"![{title}](charts/{name}.svg)"]
    try:
        import plotly.graph_objects as go

        fig = go.Figure(go.Bar(x=[b[1] for b in bars], y=[b[0] for b in bars], orientation="h",
                               marker_color=[PALETTE.get(b[2], PALETTE["other"]) for b in bars],
                               text=[fmt(b[1]) for b in bars], textposition="outside"))
        fig.update_layout(title=title, xaxis_title=unit, yaxis_autorange="reversed", template="plotly_white",
                          height=120 + 28 * len(bars), margin=dict(l=320))
        if log:
            fig.update_xaxes(type="log")
        # a fixed div id: re-rendering the same figures leaves the file unchanged
        fig.write_html(charts / f"{name}.html", include_plotlyjs="cdn", full_html=True, div_id=f"chart-{name}")
        extra = f"[interactive plotly chart](charts/{name}.html)"
        try:
            fig.write_image(charts / f"{name}.png")
            extra += f" · [PNG](charts/{name}.png)"
        except Exception:  # noqa: BLE001 - kaleido missing or no browser: the SVG is the static chart
            pass
        links.append("")
        links.append(extra)
    except ImportError:
        pass
    return links


# --- generic section -------------------------------------------------------------------------
def leaves(obj: Any, path: str = "") -> Iterable[tuple[str, Any, str]]:
    """Every ``{"value": x, "unit": u}`` leaf (and plain numbers) with its path."""
    if isinstance(obj, dict):
        if "value" in obj and not isinstance(obj["value"], (dict, list)):
            yield path, obj["value"], str(obj.get("unit", ""))
            return
        for k, v in obj.items():
            if k in ("machine",) or k.endswith("_each"):
                continue
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            label = None
            if isinstance(v, dict):
                label = v.get("snapshot") or v.get("name") or (f"{v['state_mb']} MB" if "state_mb" in v else None) \
                    or (f"{v['keys']:,} keys" if isinstance(v.get("keys"), int) else None)
            yield from leaves(v, f"{path}[{label or i}]")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, obj, ""


def generic_section(res: dict) -> list[str]:
    lines: list[str] = []
    skip = {"machine", "date", "benchmark"} | set(TEXT_FIELDS)
    rows = [[p, fmt(v), u] for k, sub in res.items() if k not in skip for p, v, u in leaves(sub, k)]
    lines += table(["measure", "value", "unit"], rows, "lrl")
    return lines


def text_fields(res: dict) -> list[str]:
    out = []
    for k in TEXT_FIELDS:
        v = res.get(k)
        if isinstance(v, str):
            out.append(f"- **{k.replace('_', ' ')}**: {v}")
        elif isinstance(v, dict) and k in ("workload",):
            out.append(f"- **{k}**: " + ", ".join(f"{a} {fmt(b)}" for a, b in v.items()))
    return out + ([""] if out else [])


# --- per-benchmark sections ------------------------------------------------------------------
PEER_LABEL = {"engine": "State Explorer engine", "bytewax": "Bytewax", "flink": "Apache Flink",
              "spark": "Spark (transformWithStateInPandas)"}


def peers_section(res: dict, charts: Path) -> list[str]:
    lines: list[str] = []
    if res.get("complete") is False:
        lines += ["**This run was interrupted: the runs below finished; the others are missing.**", ""]
    results = res.get("results", {})
    if results:
        lines += ["Rows can come from different invocations (`bench_peers --merge` re-measures some runs and keeps "
                  "the others), so each row states the load at its own start; the header's date and load are the "
                  "last invocation's.", ""]
        for m in res.get("merged_runs") or []:
            lines.append(f"- `{m.get('command')}` finished {m.get('finished_utc')}, load {fmt(get(m, 'load_average', 0))}")
        if res.get("merged_runs"):
            lines.append("")
    v = res.get("versions", {})
    lines.append("Versions: " + ", ".join(f"{k} {x}" for k, x in v.items() if x) + ".")
    lines.append("")
    for wl, desc in (res.get("workloads") or {}).items():
        rows_wl = {k: r for k, r in results.items() if k.startswith(wl + "/")}
        if not rows_wl:
            continue
        lines += [f"### {wl}: {desc}", ""]
        ours = rows_wl.get(f"{wl}/engine/heap", {}).get("value")
        body = []
        bars = []
        for name, r in rows_wl.items():
            system = r.get("system", "bare_python")
            label = name.split("/", 1)[1]
            rel = ""
            ref = rows_wl.get(f"{wl}/engine/heap/head", {}).get("value") if name.endswith("/head") else ours
            if ref and r.get("value") and name not in (f"{wl}/engine/heap", f"{wl}/engine/heap/head"):
                rel = f"{ref / r['value']:.2f}"
            startup = r.get("execute_seconds")
            if startup is not None:
                startup = round(startup - r.get("seconds", 0), 1)
            body.append([label, r.get("records"), r.get("value"), r.get("records_per_wall_s"),
                         r.get("steady_records_per_wall_s"), r.get("peak_rss_mb"),
                         r.get("rss_after_load_mb"), r.get("output_records"), r.get("checkpoints_completed"),
                         fmt(startup) if startup is not None else "", r.get("process_wall_seconds"), rel,
                         fmt(r.get("load_average_1min_at_start")) if r.get("load_average_1min_at_start") is not None else ""])
            group = "limit" if system == "bare_python" else ("ours" if system == "engine" else "peer")
            short = label.split("/", 1)[-1]
            if short.endswith("/head") or short == "head":
                short = short.removesuffix("head").rstrip("/") + f" (first {r.get('records', 0):,} records)"
            if system == "bare_python_output":
                group = "limit"
            bars.append((f"{PEER_LABEL.get(system, 'bare Python loop')}: {short}" if system not in (
                "bare_python", "bare_python_output") else "bare Python loop (limit)" if system == "bare_python"
                else "bare Python loop building the job's output", r.get("value"), group))
        lines += table(["run", "records", "records/s per core", "records/s wall", "Spark steady records/s wall", "peak RSS MB",
                        "RSS after input loaded MB", "outputs", "checkpoints taken", "mini cluster start-up + teardown s",
                        "whole process wall s",
                        "engine/heap ÷ this", "load (1 min)"], body)
        if any(k.endswith("/head") for k in rows_wl):
            lines += ["", "`…/head` rows ran on the first records of the same input (Spark is too slow per key "
                      "for the full file here); their ratio is to our engine on that same prefix. "
                      "`bucket_layout` = the Spark adapter's key-group layout (`explorer.spark_engine.buckets`: one Spark "
                      "state value per bucket of keys); the other Spark row keeps Spark state per key."]
        lines.append("")
        lines += write_chart(charts, f"peers-{wl}", f"{wl}: records/s per core (parallelism 1)", bars,
                             "records per CPU-second", log=True)
        lines.append("")
        chk = get(res, "checks", wl)
        if chk:
            lines.append(f"Same outputs in every run: **{chk.get('same_output_records_everywhere')}**; "
                         f"every input record accounted for: **{chk.get('every_record_accounted')}**.")
            lines.append("")
    lines += spark_state_read(results)
    ratios = res.get("ratios") or {}
    if ratios:
        lines += ["### Ratios (ours ÷ peer; above 1: ours is faster / uses more memory)", ""]
        lines += table(["pair", "throughput", "peak memory"],
                       [[k, fmt(r.get("throughput")), fmt(r.get("peak_memory")) if r.get("peak_memory") else ""]
                        for k, r in ratios.items()])
        lines.append("")
    nm = res.get("not_measured") or {}
    if nm:
        def why(reason: str) -> str:
            for code, sig in (("-15", "SIGTERM"), ("-9", "SIGKILL")):
                if f"exited with {code}:" in reason:
                    return f"stopped with {sig} before it finished (`{reason.split('...')[0][-80:]}`)"
            return reason

        lines += ["Not measured in this run:", ""] + [f"- **{k}**: {why(r)}" for k, r in nm.items()] + [""]
    return lines


def spark_state_read(results: dict[str, Any]) -> list[str]:
    """Each Spark run's final state read into pandas: Spark's state data source, and explorer.open on it."""
    body = []
    for name, r in results.items():
        sr = r.get("state_read") if r.get("system") == "spark" else None
        if not sr:
            continue
        if sr.get("error"):
            body.append([name, "", "", "", "", "", "", f"not measured: {sr['error'][:150]}"])
            continue
        ratio = (sr["explorer_seconds"] / sr["raw_seconds"]) if sr.get("raw_seconds") else None
        body.append([name, ", ".join(sr.get("state_variables") or []), sr.get("raw_rows"), sr.get("raw_seconds"),
                     sr.get("raw_rows_per_s"), sr.get("explorer_rows"), sr.get("explorer_seconds"),
                     fmt(ratio) if ratio else ""])
    if not body:
        return []
    return ["### Spark state data source → pandas", "",
            "The final state of each Spark run above, read after its query: Spark's own state data source "
            "(`format(\"statestore\")` per state variable, `toPandas()`: the limit for any reader built on it) "
            "and `explorer.open(checkpoint).keyed_state()` on the same checkpoint. The sessions state is nearly "
            "empty at the end (every session closed), so those rows time fixed costs.", ""] + table(
        ["run", "state variables", "rows (state source)", "state source s", "state source rows/s",
         "rows (explorer)", "explorer s", "explorer ÷ state source (time)"], body) + [""]


def engine_section(res: dict, charts: Path) -> list[str]:
    rows = res.get("results", {})
    lines = table(["measure", "records/s", "seconds"],
                  [[k, r.get("value"), r.get("seconds")] for k, r in rows.items()])
    lines.append("")
    bars = [(k, r.get("value"), "limit" if k.startswith("bare") else "ours") for k, r in rows.items()]
    lines += write_chart(charts, "engine", "engine vs bare Python loop (one core)", bars, "records/s", log=True)
    lines.append("")
    if res.get("ratios"):
        lines += table(["ratio", "value"], [[k, v] for k, v in res["ratios"].items()]) + [""]
    if res.get("targets"):
        lines += [f"Targets: {json.dumps(res['targets'])}", ""]
    return lines


def checkpoints_section(res: dict, charts: Path) -> list[str]:
    lines = []
    disk = val(res, "disk_sequential_write", "with_fsync")
    if disk:
        lines += [f"Physical limit: sequential disk write with fsync {fmt(disk)} MB/s "
                  f"(page cache {fmt(val(res, 'disk_sequential_write', 'page_cache'))} MB/s), measured in the same run.", ""]
    body, bars = [], []
    for s in res.get("sizes", []):
        fd, idur = val(s, "full", "duration"), val(s, "incremental", "duration")
        fb, ib = val(s, "full", "bytes_written"), val(s, "incremental", "bytes_written")
        mbps = (fb / 1e6 / fd) if fb and fd else None
        body.append([f"{s.get('state_mb')} MB", fd, val(s, "full_canonical", "duration"), idur,
                     val(s, "speedup_full_over_incremental", "median"),
                     (fb or 0) / 1e6, (ib or 0) / 1e6, val(s, "written_ratio_full_over_incremental_mean"),
                     mbps, f"{100 * mbps / disk:.0f} %" if mbps and disk else "",
                     val(s, "recovery", "full", "restore"), val(s, "recovery", "full_canonical", "restore"),
                     val(s, "recovery", "incremental", "restore"),
                     " / ".join(fmt(x) for x in (val(s, "recovery", k, "restore_fresh_process")
                                                 for k in ("full", "full_canonical", "incremental")) if x is not None)])
        bars += [(f"{s.get('state_mb')} MB full", fd, "peer"), (f"{s.get('state_mb')} MB incremental", idur, "ours")]
    lines += ["Full = `trigger_checkpoint(full=True)` with incremental checkpoints on (Flink's `CheckpointType.FULL`: "
              "every SST file copied into the checkpoint, none shared); full canonical = `incremental=False` (every "
              "entry re-encoded as canonical Parquet, the savepoint format).", ""]
    lines += table(["state", "full s", "full canonical s", "incremental s", "full ÷ incremental", "full MB written",
                    "incremental MB written", "bytes full ÷ incr.", "full write MB/s", "of disk bandwidth",
                    "recovery full s", "recovery full canonical s", "recovery incremental s",
                    "the same in a fresh process s"], body)
    lines += ["", "Recoveries are timed in the process that took the checkpoints (as Flink's, in its JVM), and "
              "again as the first thing a new Python process does (its start and imports not counted: numba's "
              "one-off set-up and the kernels' loading are)."]
    lines.append("")
    lines += write_chart(charts, "checkpoints", "checkpoint duration (median)", bars, "seconds", log=True,
                         legend={"ours": "incremental", "peer": "full"})
    lines.append("")
    lines += flink_checkpoints(res, disk)
    return lines


def flink_checkpoints(res: dict, disk: float | None) -> list[str]:
    """Apache Flink's checkpoints of the same state beside ours, or why they are missing."""
    fl = res.get("flink")
    if not fl:
        return ["Apache Flink beside it: not measured in this run (`--no-flink` or `--smoke`).", ""]
    lines = [f"### Apache Flink {fl.get('version', '')} on the same state ({fl.get('job', '')})", "",
             "Full = `execution.checkpointing.incremental=false` (Flink's default for RocksDB: every entry "
             "written); FULL (all SST) = `CheckpointType.FULL` on the incremental backend (every SST file "
             "uploaded again); incremental = `CheckpointType.INCREMENTAL` (new SST files only), median of the "
             "rounds. Durations are Flink's own end-to-end checkpoint statistics; MB written = files new in the "
             "checkpoint folder. Recovery = job submission to the keyed operator's `open()` with the state "
             "restored (task deployment included; the same span for a job without state is given beside it).", ""]
    body = []
    for s in fl.get("sizes", []):
        fd, fb = val(s, "full", "duration"), val(s, "full", "bytes_written")
        mbps = (fb / 1e6 / fd) if fb and fd else None
        body.append([f"{s.get('state_mb')} MB", fd, val(s, "full_all_sst", "duration"), val(s, "incremental", "duration"),
                     val(s, "speedup_full_over_incremental", "median"), (fb or 0) / 1e6,
                     (val(s, "incremental", "bytes_written") or 0) / 1e6, mbps,
                     f"{100 * mbps / disk:.0f} %" if mbps and disk else "",
                     val(s, "recovery", "full", "restore"), val(s, "recovery", "full_all_sst", "restore"),
                     val(s, "recovery", "incremental", "restore"), val(s, "recovery", "job_start_without_state"),
                     f"{get(s, 'recovery', 'incremental', 'probed_keys_found')}/{get(s, 'recovery', 'probed_keys')}",
                     val(s, "load")])
    if body:
        lines += table(["state", "full s", "FULL (all SST) s", "incremental s", "full ÷ incremental", "full MB written",
                        "incremental MB written", "full write MB/s", "of disk bandwidth", "recovery full s",
                        "recovery FULL (all SST) s", "recovery incremental s", "job start without state s",
                        "keys read back", "load s"], body)
        lines.append("")
    ratios = fl.get("ratios_ours_over_flink") or {}
    if ratios:
        kinds = list(next(iter(ratios.values())).keys())
        lines += ["Flink's time ÷ ours (above 1: ours is faster):", ""]
        lines += table(["state"] + kinds, [[k] + [fmt(r.get(x)) if r.get(x) else "" for x in kinds]
                                           for k, r in ratios.items()])
        lines.append("")
    nm = fl.get("not_measured") or {}
    if nm:
        lines += ["Flink not measured:", ""] + [f"- **{k}**: {r}" for k, r in nm.items()] + [""]
    return lines


def explorer_section(res: dict, charts: Path) -> list[str]:
    body, bars, analyses = [], [], []
    for s in res.get("sizes", []):
        ld = s.get("load", {})
        ex, raw = ld.get("explorer_keyed_state", {}), ld.get("raw_pyarrow_read_table_to_pandas", {})
        body.append([f"{s.get('keys'):,}", s.get("rows"), (s.get("parquet_bytes") or 0) / 1e6, ex.get("seconds"),
                     raw.get("seconds"), ex.get("rows_per_second"), raw.get("rows_per_second"),
                     ld.get("speed_ratio_explorer_over_raw")])
        bars += [(f"{s.get('keys'):,} keys explorer.open().keyed_state()", ex.get("rows_per_second"), "ours"),
                 (f"{s.get('keys'):,} keys raw pyarrow read + to_pandas", raw.get("rows_per_second"), "limit")]
        for name, a in (s.get("analyses") or {}).items():
            analyses.append([f"{s.get('keys'):,}", name, a.get("seconds")])
    lines = table(["keys", "rows", "Parquet MB", "explorer s", "raw Parquet s", "explorer rows/s", "raw rows/s",
                   "raw time ÷ explorer time"], body)
    lines.append("")
    first = [[f"{s.get('keys'):,}", get(f, "explorer", "seconds"), get(f, "raw", "seconds"),
              get(f, "speed_ratio_explorer_over_raw"), get(f, "explorer", "cpu_seconds"), get(f, "raw", "cpu_seconds"),
              get(f, "cpu_ratio_explorer_over_raw"), get(f, "target_ratio_at_least")]
             for s in res.get("sizes", []) if (f := get(s, "load", "first_load_fresh_process"))]
    if first:
        lines += ["The first load in a fresh Python process (what a user meets; above: the best of the runs in one "
                  "process):", ""]
        lines += table(["keys", "explorer s", "raw s", "raw ÷ explorer", "explorer CPU s", "raw CPU s",
                        "CPU raw ÷ explorer", "target"], first) + [""]
    lines += write_chart(charts, "explorer-load", "snapshot → pandas", bars, "rows/s",
                         legend={"ours": "explorer", "limit": "raw Parquet read (limit)"})
    lines.append("")
    if analyses:
        lines += ["Analyses on the loaded snapshot:", ""] + table(["keys", "analysis", "seconds"], analyses) + [""]
    return lines


def widgets_section(res: dict, charts: Path) -> list[str]:
    rows = res.get("results", {})
    lines = table(["measure", "value", "unit"], [[k, r.get("value"), r.get("unit", "")] for k, r in rows.items()],
                  "lrl")
    lines.append("")
    bars = [(k[:-4], r.get("value"), "ours") for k, r in rows.items() if k.endswith(" p95")]
    lines += write_chart(charts, "widgets", "control change → updated figures, p95", bars, "ms", legend={"ours": "p95"})
    lines.append("")
    if res.get("targets"):
        lines += [f"Targets: {json.dumps(res['targets'])}", ""]
    cli = res.get("command line start")
    if cli:
        rows = cli.get("results", {})
        lines += ["Command line start (fresh processes, wall time, machine load "
                  f"{(cli.get('machine') or {}).get('load_average')}):", ""]
        lines += table(["measure", "value", "unit"], [[k, r.get("value"), r.get("unit", "")] for k, r in rows.items()],
                       "lrl")
        lines.append("")
    return lines


def flink_reader_section(res: dict, charts: Path) -> list[str]:
    body, bars = [], []
    for r in res.get("results", []):
        body.append([r.get("snapshot"), r.get("flink_version"), val(r, "size"), r.get("rows"), val(r, "seconds"),
                     val(r, "throughput"), val(r, "throughput_per_cpu_second"), val(r, "rows_per_second")])
        bars.append((str(r.get("snapshot")), val(r, "throughput"), "ours"))
    lines = table(["snapshot", "Flink", "MB", "rows", "seconds", "MB/s", "MB per CPU-s", "rows/s"], body)
    lines.append("")
    lines += write_chart(charts, "flink-reader", "real Flink snapshot → pandas", bars, "MB/s", legend={"ours": "explorer"})
    lines.append("")
    if res.get("target"):
        lines += [f"Target: {fmt(val(res, 'target'))} {get(res, 'target', 'unit', default='')}", ""]
    peer = []
    for r in res.get("results", []):
        spa = r.get("state_processor_api")
        if not spa:
            continue
        if spa.get("status") != "measured":
            peer.append([r.get("snapshot"), spa.get("status")] + [None] * 6)
            continue
        peer.append([r.get("snapshot"), spa.get("rows"), "yes" if spa.get("rows_match") else "**no**",
                     val(spa, "seconds"), val(spa, "read_seconds_in_jvm"), val(spa, "cpu_seconds"),
                     val(spa, "explorer_fresh_process_seconds"), spa.get("explorer_speedup_fresh_process")])
    if peer:
        lines += ["The State Processor API (Flink's `SavepointReader`, a fresh JVM per row; seconds include the "
                  "JVM's start, the read alone beside them) against the explorer's first read in a fresh process "
                  "(import included):", ""]
        lines += table(["snapshot", "SPA rows", "same rows", "SPA s", "SPA read s", "SPA CPU-s",
                        "explorer fresh s", "explorer x"], peer) + [""]
    return lines


def edit_section(res: dict, charts: Path) -> list[str]:
    body = []
    for r in res.get("results", []):
        ours, spa = r.get("explorer") or {}, r.get("state_processor_api") or {}

        def cells(x: dict) -> list[Any]:
            if x.get("status") != "measured":
                return [x.get("status"), None, None]
            return [val(x, "throughput"), val(x, "throughput_per_cpu_second"),
                    "yes" if x.get("entries_match") else "**no**"]

        body.append([r.get("keys"), val(r, "size"), r.get("entries_expected_out")] + cells(ours)
                    + [ours.get("peak_rss_mb")] + cells(spa) + [r.get("explorer_speedup_wall")])
    lines = table(["keys", "MB", "entries out", "explorer MB/s", "explorer MB per CPU-s", "entries right",
                   "explorer peak RSS MB", "SPA MB/s", "SPA MB per CPU-s", "SPA entries right", "explorer x (wall)"],
                  body)
    return lines + [""]


def spark_section(res: dict, charts: Path) -> list[str]:
    body, bars = [], []
    for name, r in (res.get("results") or {}).items():
        body.append([name, val(r, "total_rows_per_s"), val(r, "steady_rows_per_s"), val(r, "wall_s")])
        bars.append((name, val(r, "steady_rows_per_s") or val(r, "total_rows_per_s"), "peer"))
    lines = table(["path", "rows/s total", "rows/s steady", "wall s"], body)
    lines.append("")
    lines += write_chart(charts, "spark", "Spark keyed count (steady micro-batches)", bars, "rows/s", log=True,
                         legend={"peer": "Spark path"})
    lines.append("")
    if res.get("speedups"):
        lines += table(["speed-up", "x"], [[k, v] for k, v in res["speedups"].items()]) + [""]
    if res.get("spark_conf"):
        lines += ["Spark configuration: " + ", ".join(f"`{k}={v}`" for k, v in res["spark_conf"].items()), ""]
    return lines


_SCALE_QUESTIONS = (("key_group_distribution", "key-group distribution"), ("hot_keys", "hot keys"),
                   ("diff", "diff of two snapshots"))


def scale_section(res: dict, charts: Path) -> list[str]:
    """Issue 19's matrix: each snapshot and question on one machine, on Spark local[2] and from S3."""
    by_name: dict[str, dict[str, Any]] = {}
    for where, snaps in (("local", get(res, "local", "snapshots", default=[])),
                         ("spark", get(res, "spark", "snapshots", default=[])),
                         ("s3", get(res, "s3", "snapshots", default=[]))):
        for snap in snaps or []:
            by_name.setdefault(snap.get("name", "?"), {})[where] = snap
    limit = res.get("limit_peak_rss_mb")
    rows, bars = [], []
    for name, w in by_name.items():
        local, spark, s3 = w.get("local", {}), w.get("spark", {}), w.get("s3", {})
        keys = local.get("keys") or spark.get("keys") or s3.get("keys")
        for q, label in _SCALE_QUESTIONS:
            lt, st, sq = get(local, "tasks", q) or {}, spark.get(q) or {}, get(s3, "questions", q) or {}
            rows.append([name, f"{keys:,}" if keys else "", label,
                         lt.get("seconds"), lt.get("cpu_seconds"), lt.get("peak_rss_mb"),
                         st.get("seconds"), st.get("tree_peak_rss_mb"),
                         get(sq, "cold", "wall_seconds"), get(sq, "cold_fetched_over_snapshot"),
                         get(sq, "warm_cache", "wall_seconds"), get(sq, "warm_cache", "bytes_fetched"),
                         get(local, "raw_read", "seconds")])
            if lt.get("peak_rss_mb"):
                bars.append((f"{name[:40]}: {label}", lt["peak_rss_mb"], "ours"))
        one = get(s3, "questions", "one_state") or {}
        if one:
            rows.append([name, f"{keys:,}" if keys else "", f"one state ({s3.get('state', '?')}) from S3",
                         None, None, None, None, None, get(one, "cold", "wall_seconds"),
                         get(one, "question_fetched_over_state_bytes"), get(one, "warm_cache", "wall_seconds"),
                         get(one, "warm_cache", "bytes_fetched"), None])
    lines = [f"- **limit**: peak RSS on one machine ≤ {fmt(limit)} MiB; S3: bytes fetched for a one-state question "
             "≤ 1.1x the bytes that state occupies",
             f"- **commands**: {get(res, 'local', 'command')}; {get(res, 'spark', 'command')}; "
             f"{get(res, 's3', 'command')}",
             f"- **dates**: one machine {get(res, 'local', 'date')}, Spark {get(res, 'spark', 'date')}, "
             f"S3 {get(res, 's3', 'date')} (loads in `benchmarks/results/scale.json`)", ""]
    lines += table(["snapshot", "keys", "question", "one machine s", "CPU s", "peak RSS MiB", "Spark local[2] s",
                    "Spark tree RSS MiB", "S3 cold s", "S3 fetched ÷ asked", "S3 warm s", "S3 warm bytes fetched",
                    "raw read s (one machine)"], rows, align="lllrrrrrrrrrr")
    lines.append("")
    if bars:
        if limit:
            bars.append(("limit", float(limit), "limit"))
        lines += write_chart(charts, "scale-rss", "peak RSS on one machine (memory budget 1 GB)", bars, "MiB",
                             legend={"ours": "State Explorer", "limit": "limit (2 GiB)"})
        lines.append("")
    return lines


SECTIONS: dict[str, Callable[[dict, Path], list[str]]] = {
    "engine": engine_section, "peers": peers_section, "checkpoints": checkpoints_section,
    "explorer": explorer_section, "widgets": widgets_section, "flink_reader": flink_reader_section,
    "spark": spark_section, "edit": edit_section, "scale": scale_section,
}


# --- headline ratios -------------------------------------------------------------------------
def headline(results: dict[str, dict]) -> list[str]:
    out: list[str] = []

    def add(fn: Callable[[], list[str]]) -> None:
        try:
            out.extend(fn())
        except Exception as exc:  # noqa: BLE001 - one malformed JSON must not hide the others
            out.append(f"- ({fn.__name__}: could not read the result: {exc!r})")

    def engine() -> list[str]:
        r = results.get("engine")
        if not r:
            return []
        rows = r["results"]
        return [f"- **Engine vs bare Python loop** (keyed count, one core): the engine runs at "
                f"{fmt(rows['engine_heap_count_rolling']['value'])} records/s (rolling count) against the bare "
                f"loop's {fmt(rows['bare_python_rolling_count']['value'])}: the loop is "
                f"{fmt(r['ratios']['bare_loop_over_engine_count_rolling'])}x faster "
                f"({fmt(r['ratios']['bare_loop_over_engine_sessions'])}x for sessions)."]

    def peers() -> list[str]:
        r = results.get("peers")
        if not r:
            return []
        res, lines = r["results"], []
        for wl in ("count", "sessions"):
            ours = res.get(f"{wl}/engine/heap")
            if not ours:
                continue
            parts = []
            # like for like: for count, the ValueState process function (the code Flink's job runs)
            heap = res.get(f"{wl}/engine/heap/process_fn") or ours
            rocks = res.get(f"{wl}/engine/rocksdb/process_fn") or res.get(f"{wl}/engine/rocksdb") or heap
            for peer, label in (("bytewax/memory", "Bytewax"), ("flink/hashmap", "Flink (HashMap)"),
                                ("flink/rocksdb", "Flink (RocksDB)")):
                p = res.get(f"{wl}/{peer}")
                if p and p.get("value"):
                    ref = rocks if peer == "flink/rocksdb" else heap
                    which = "heap" if ref is heap else "RocksDB"
                    parts.append(f"{times(ref['value'] / p['value'])} than {label} (ours on {which}: "
                                 f"{fmt(ref['value'])} vs {fmt(p['value'])} records/s per core; peak memory "
                                 f"{fmt(ref.get('peak_rss_mb'))} vs {fmt(p.get('peak_rss_mb'))} MB)")
            oh = res.get(f"{wl}/engine/heap/head")
            for suffix, label in (("head", "Spark transformWithStateInPandas"),
                                  ("bucket_layout/head", "Spark transformWithStateInPandas with the adapter's "
                                                         "key-group bucket layout")):
                sp = res.get(f"{wl}/spark/rocksdb/checkpoint_per_microbatch/{suffix}")
                if oh and sp and sp.get("value"):
                    parts.append(f"{times(oh['value'] / sp['value'])} than {label} (first {sp['records']:,} records: "
                                 f"{fmt(oh['value'])} vs {fmt(sp['value'])} records/s per core; peak memory "
                                 f"{fmt(oh.get('peak_rss_mb'))} vs {fmt(sp.get('peak_rss_mb'))} MB)")
            missing = [k.split("/", 1)[1] for k in (r.get("not_measured") or {}) if k.startswith(wl + "/")]
            if missing:
                parts.append("not measured in this run (see the section): " + ", ".join(missing))
            ck = [(label, res.get(f"{wl}/{k}")) for label, k in (
                ("ours heap", "engine/heap/checkpoint_1s"), ("ours RocksDB", "engine/rocksdb/checkpoint_1s"),
                ("Bytewax", "bytewax/memory+sqlite/checkpoint_1s"), ("Flink HashMap", "flink/hashmap/checkpoint_1s"),
                ("Flink RocksDB", "flink/rocksdb/checkpoint_1s"))]
            ck = [f"{label} {fmt(x['value'])}" for label, x in ck if x and x.get("value")]
            if len(ck) > 1:
                parts.append("with a checkpoint every second (records/s per core): " + ", ".join(ck))
            bare = res.get(f"{wl}/bare_python")
            text = f"- **{wl}** ({r['records']:,} records, parallelism 1, {fmt(ours['value'])} records/s per core on the heap"
            if heap is not ours:
                text += (f" with the built-in `count()`; the same count as a ValueState process function, the code "
                         f"Flink's job runs, {fmt(heap['value'])}")
            text += ")"
            if parts:
                text += ": our engine is " + "; ".join(parts)
            if bare:
                text += (f"{'; ' if parts else ': '}the bare Python loop (the limit of per-record work) is "
                         f"{fmt(bare['value'] / ours['value'])}x faster than our engine")
            lines.append(text + ".")
        return lines

    def checkpoints() -> list[str]:
        r = results.get("checkpoints")
        if not r or not r.get("sizes"):
            return []
        s = r["sizes"][-1]
        disk = val(r, "disk_sequential_write", "with_fsync")
        # "full" is the native full checkpoint (SST files hard-linked) when the run measured the canonical
        # one (every entry re-encoded to Parquet) beside it: the bytes written and the disk's bandwidth
        # compare with the canonical one, which writes the state
        canonical = "full_canonical" if s.get("full_canonical") else "full"
        fd = val(s, "full", "duration")
        cd, cb = val(s, canonical, "duration"), val(s, canonical, "bytes_written")
        limit = (f"; the canonical full checkpoint writes at {fmt(cb / 1e6 / cd)} MB/s against the disk's "
                 f"{fmt(disk)} MB/s" if disk and cd and cb else "")
        native = (f"; the native full checkpoint (Flink's CheckpointType.FULL: every SST file, here hard-linked "
                  f"rather than copied) {fmt(fd)} s, recovery from it {fmt(val(s, 'recovery', 'full', 'restore'))} s"
                  if canonical == "full_canonical" else "")
        fresh = val(s, "recovery", canonical, "restore_fresh_process")
        fresh = f" ({fmt(fresh)} s as the first thing a new process does)" if fresh is not None else ""
        text = (f"- **Checkpoints** at {s['state_mb']} MB of state, 1 % churn: incremental "
                f"{fmt(val(s, 'incremental', 'duration'))} s vs canonical full {fmt(cd)} s"
                f"{limit}; recovery {fmt(val(s, 'recovery', 'incremental', 'restore'))} s (incremental) vs "
                f"{fmt(val(s, 'recovery', canonical, 'restore'))} s (canonical full){fresh}{native}")
        fl = r.get("flink") or {}
        f = next((x for x in fl.get("sizes", []) if x.get("state_mb") == s["state_mb"]), None)
        if f:
            def ours(flink_s: float | None, ours_s: float | None) -> str:
                if not flink_s or not ours_s:
                    return "n/a"
                r = flink_s / ours_s
                return "ours on par, within 10 %" if 0.9 <= r <= 1 / 0.9 else f"ours {times(r)}"

            each = get(f, "incremental", "duration_each", "value") or []
            spread = (f"; Flink's rounds {fmt(min(each))}-{fmt(max(each))} s, ours "
                      f"{fmt(min(get(s, 'incremental', 'duration_each', 'value') or [0]))}-"
                      f"{fmt(max(get(s, 'incremental', 'duration_each', 'value') or [0]))} s"
                      if len(each) > 1 else "")
            text += (f". Apache Flink on the same state: incremental {fmt(val(f, 'incremental', 'duration'))} s median "
                     f"({ours(val(f, 'incremental', 'duration'), val(s, 'incremental', 'duration'))}{spread}), "
                     f"full {fmt(val(f, 'full', 'duration'))} s (canonical: {ours(val(f, 'full', 'duration'), cd)}"
                     + (f"; native: {ours(val(f, 'full', 'duration'), fd)}" if canonical == "full_canonical" else "")
                     + "), recovery "
                     f"{fmt(val(f, 'recovery', 'incremental', 'restore'))} s from incremental "
                     f"({ours(val(f, 'recovery', 'incremental', 'restore'), val(s, 'recovery', 'incremental', 'restore'))}) "
                     f"and {fmt(val(f, 'recovery', 'full', 'restore'))} s from full "
                     f"(canonical: {ours(val(f, 'recovery', 'full', 'restore'), val(s, 'recovery', canonical, 'restore'))}"
                     + (f"; native: {ours(val(f, 'recovery', 'full', 'restore'), val(s, 'recovery', 'full', 'restore'))}"
                        if canonical == "full_canonical" else "") + ")")
        elif fl.get("not_measured"):
            text += f". Apache Flink: not measured ({'; '.join(f'{k}: {v[:120]}' for k, v in fl['not_measured'].items())})"
        elif not fl:
            text += ". Apache Flink: not measured in this run"
        return [text + "."]

    def explorer() -> list[str]:
        r = results.get("explorer")
        if not r or not r.get("sizes"):
            return []
        parts = []
        for s in r["sizes"]:
            ld = s["load"]
            q = ld["speed_ratio_explorer_over_raw"]
            parts.append(f"{s['keys']:,} keys in {fmt(ld['explorer_keyed_state']['seconds'])} s vs "
                         f"{fmt(ld['raw_pyarrow_read_table_to_pandas']['seconds'])} s for a raw pyarrow read "
                         f"({'%.2f' % q}x the raw read's speed)")
        return ["- **Loading** a snapshot into pandas (the limit: a raw Parquet read of the same files): "
                + "; ".join(parts) + "."]

    def spark_state() -> list[str]:
        r = results.get("peers")
        if not r:
            return []
        out = []
        for name, x in r.get("results", {}).items():
            sr = x.get("state_read") if x.get("system") == "spark" else None
            if sr and not sr.get("error") and sr.get("raw_rows", 0) > 100:
                out.append(f"{sr['raw_rows']:,} rows (the {name.split('/')[0]} run's state "
                           f"{', '.join(sr['state_variables'])}, {'bucket' if 'bucket' in name else 'per-key'} layout) in "
                           f"{fmt(sr['raw_seconds'])} s through Spark's state data source "
                           f"({fmt(sr['raw_rows_per_s'])} rows/s) vs {fmt(sr['explorer_seconds'])} s through "
                           f"`explorer.open` on the same checkpoint")
        return ["- **Spark state data source → pandas**: " + "; ".join(out) + "."] if out else []

    def flink_reader() -> list[str]:
        r = results.get("flink_reader")
        if not r or not r.get("results"):
            return []
        out = ["- **Real Flink snapshots** read at " + "; ".join(
            f"{fmt(val(x, 'throughput'))} MB/s ({x['snapshot']}, {fmt(val(x, 'size'))} MB)" for x in r["results"]) + "."]
        spa = [(x["snapshot"], x["state_processor_api"]) for x in r["results"]
               if get(x, "state_processor_api", "status") == "measured"]
        if spa:
            out[0] = out[0][:-1] + "; Flink's State Processor API in a fresh JVM on the same snapshots, same rows: " + \
                "; ".join(f"{fmt(val(s, 'seconds'))} s against the explorer's {fmt(val(s, 'explorer_fresh_process_seconds'))} s "
                          f"in a fresh process ({name})" for name, s in spa) + "."
        return out

    def edit() -> list[str]:
        r = results.get("edit")
        rows = [x for x in (r or {}).get("results", []) if get(x, "explorer", "status") == "measured"]
        if not rows:
            return []
        x = rows[-1]
        spa = x.get("state_processor_api") or {}
        peer = (f"; the State Processor API {fmt(val(spa, 'throughput'))} MB/s "
                f"({fmt(val(spa, 'throughput_per_cpu_second'))} per CPU-s)" if spa.get("status") == "measured" else
                f"; the State Processor API {spa.get('status', 'not run')}")
        return [f"- **Editing** a {fmt(val(x, 'size'))} MB Flink savepoint (drop one key): "
                f"{fmt(val(x['explorer'], 'throughput'))} MB/s ({fmt(val(x['explorer'], 'throughput_per_cpu_second'))} "
                f"per CPU-s, peak RSS {fmt(x['explorer'].get('peak_rss_mb'))} MB){peer}."]

    def spark() -> list[str]:
        r = results.get("spark")
        if not r or not r.get("results"):
            return []
        parts = [f"{k} {fmt(val(v, 'steady_rows_per_s'))} rows/s steady" for k, v in r["results"].items()]
        return ["- **Spark** keyed count (local[2], its own input): " + "; ".join(parts) + "."]

    def widgets() -> list[str]:
        r = results.get("widgets")
        if not r:
            return []
        rows = r["results"]
        return [f"- **Dashboard** at {fmt(val(rows, 'keys'))} keys: a control change updates the figures in "
                f"{fmt(val(rows, 'all changes p50'))} ms p50, {fmt(val(rows, 'all changes p95'))} ms p95."]

    for fn in (engine, peers, checkpoints, explorer, spark_state, flink_reader, edit, spark, widgets):
        add(fn)
    return out


# --- which of issue 8's rows the page holds -------------------------------------------------
def _peer_rows() -> list[tuple[str, str]]:
    rows = []
    for wl in ("count", "sessions"):
        for backend in ("heap", "rocksdb"):
            for suffix, what in (("", ""), ("/checkpoint_1s", ", checkpoint every second")):
                rows.append((f"{wl}/engine/{backend}{suffix}", f"{wl}: our engine, {backend}{what}"))
        for suffix, what in (("memory", ""), ("memory+sqlite/checkpoint_1s", ", recovery every second")):
            rows.append((f"{wl}/bytewax/{suffix}", f"{wl}: Bytewax{what}"))
        for backend in ("hashmap", "rocksdb"):
            for suffix, what in (("", ""), ("/checkpoint_1s", ", checkpoint every second")):
                rows.append((f"{wl}/flink/{backend}{suffix}", f"{wl}: Apache Flink, {backend}{what}"))
        rows.append((f"{wl}/spark/rocksdb/checkpoint_per_microbatch/head",
                     f"{wl}: Spark transformWithStateInPandas (a prefix of the input)"))
        rows.append((f"{wl}/bare_python", f"{wl}: the limit, a bare Python loop"))
    return rows


def coverage(results: dict[str, dict]) -> list[str]:
    """Every row the issue asks for: measured (with the run's load) or missing, and why."""
    body: list[list[Any]] = []

    def load_of(res: dict | None) -> str:
        m = (res or {}).get("machine") or {}
        la = m.get("load_average") or m.get("load_average_1_5_15") or m.get("load_average_1m_at_start")
        if isinstance(la, list):
            la = la[0] if la else None
        return fmt(round(la, 2)) if isinstance(la, (int, float)) else ""

    peers = results.get("peers")
    pres = (peers or {}).get("results", {})
    nm = (peers or {}).get("not_measured", {})
    for name, label in _peer_rows():
        r = pres.get(name)
        if r:
            extra = f" (first {r['records']:,} records)" if name.endswith("/head") else ""
            body.append([label, f"measured{extra}", fmt(r.get("load_average_1min_at_start")) if
                         r.get("load_average_1min_at_start") is not None else load_of(peers)])
        elif name in nm:
            body.append([label, f"**missing**: {nm[name][:160]}", ""])
        else:
            sysname = name.split("/")[1]
            why = nm.get(sysname) or ("no peers result" if not peers else "not run in the latest peers run")
            body.append([label, f"**missing**: {why[:160]}", ""])
    ck = results.get("checkpoints")
    ours_sizes = {s.get("state_mb") for s in (ck or {}).get("sizes", [])}
    fl = (ck or {}).get("flink") or {}
    fl_sizes = {s.get("state_mb") for s in fl.get("sizes", [])}
    for mb in (10, 100, 1000):
        body.append([f"checkpoints at {mb} MB: ours full vs incremental, recovery",
                     "measured" if mb in ours_sizes else "**missing**: not in the latest bench_checkpoints run",
                     load_of(ck) if mb in ours_sizes else ""])
        why = (fl.get("not_measured") or {}).get(f"{mb} MB") or (fl.get("not_measured") or {}).get("all sizes")
        body.append([f"checkpoints at {mb} MB: Apache Flink full vs incremental, recovery",
                     "measured" if mb in fl_sizes else f"**missing**: {why or 'Flink not run (--no-flink or --smoke)'}",
                     load_of(ck) if mb in fl_sizes else ""])
    body.append(["checkpoints: the limit, disk bandwidth",
                 "measured" if val(ck or {}, "disk_sequential_write", "with_fsync") else "**missing**: no checkpoints result",
                 load_of(ck)])
    ex = results.get("explorer")
    ex_keys = {s.get("keys") for s in (ex or {}).get("sizes", [])}
    for keys in (1_000_000, 10_000_000):
        body.append([f"loading {keys:,} keys: snapshot → pandas vs raw Parquet read (the limit)",
                     "measured" if keys in ex_keys else "**missing**: not in the latest bench_explorer run", load_of(ex)])
    reads = [r.get("state_read") for r in pres.values() if r.get("system") == "spark" and r.get("state_read")]
    ok = [x for x in reads if not x.get("error")]
    body.append(["loading: Spark state data source → pandas",
                 "measured (final state of the Spark runs)" if ok else
                 f"**missing**: {reads[0]['error'][:160]}" if reads else
                 "**missing**: no Spark run in the latest peers run recorded its state read", ""])
    fr = results.get("flink_reader")
    body.append(["loading: real Flink savepoints and checkpoints, MB/s",
                 f"measured ({len(fr['results'])} snapshots)" if fr and fr.get("results") else
                 "**missing**: no flink_reader result", load_of(fr)])
    w = results.get("widgets")
    body.append(["interaction: dashboard update latency p50/p95 at 1 M keys",
                 "measured" if w and val(w.get("results", {}), "all changes p95") else "**missing**: no widgets result",
                 load_of(w)])
    return ["## Every row of the issue", "",
            "Each row the benchmark issue asks for, and whether this page holds a real run of it (with the run's "
            "1-minute load average when recorded); a missing row says why.", ""] + table(
        ["row", "status", "load (1 min)"], body) + [""]


# --- the page --------------------------------------------------------------------------------
def render(results: dict[str, dict], charts: Path, runlog: dict[str, Any] | None = None) -> str:
    lines = ["# Benchmark results", "",
             "Written by `make bench` (`python -m benchmarks`) from `benchmarks/results/*.json`; every figure "
             "below comes from a run on the machine named in its section. Ratios are measured in one run "
             "against the peer named beside them. The machine is shared, so each section states its load average.",
             "", "## Headline ratios", ""]
    lines += headline(results) or ["- (no results yet)"]
    lines.append("")
    try:
        lines += coverage(results)
    except Exception as exc:  # noqa: BLE001 - a malformed JSON must not hide the page
        lines += [f"(coverage table failed: {exc!r})", ""]
    if runlog:
        lines += ["## Runs of `python -m benchmarks` behind this page", "",
                  "A section whose benchmark is not listed here shows that benchmark's latest own run "
                  "(its date and load are in the section).", ""]
        lines += table(["benchmark", "status", "seconds", "finished (UTC)"],
                       [[k, v.get("status", "?"), v.get("seconds"), v.get("finished", "")] for k, v in runlog.items()])
        lines.append("")
    for name, res in results.items():
        lines += [f"## {TITLES.get(name, name)}", "", f"`benchmarks/results/{name}.json` · " + machine_line(res), ""]
        lines += text_fields(res)
        try:
            lines += SECTIONS.get(name, lambda r, c: generic_section(r))(res, charts)
        except Exception as exc:  # noqa: BLE001 - fall back to the generic table
            lines += [f"(section renderer failed: {exc!r}; raw figures follow)", ""] + generic_section(res)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"

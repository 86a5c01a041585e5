"""Reports of a snapshot: a terminal summary, a small notebook display, and a self-contained HTML page.

* :func:`summary_text` is what ``state-explorer inspect`` and ``%explore`` print;
* :func:`snapshot_html` is ``Snapshot._repr_html_`` (metadata only: cheap on any size);
* :func:`build_report` writes an HTML page (a summary table, a contents list, the
  figures), self-contained by default: plotly.js is inlined once (not once per figure)
  and the page opens anywhere without a network connection; on request it loads one
  copy shared by the reports of a folder, or plotly's CDN.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from . import analysis, plots
from .format.checkpoint_dir import checkpoint_id
from .plots import format as fmt
from .plots import palette
from .escape import terminal_text
from .storage import as_path
from .stored import checkpoints_in, open_stored

_CSS = f"""
*{{box-sizing:border-box}}
body{{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem auto;max-width:1200px;
padding:0 1rem;color:{palette.TEXT}}}
h1{{font-size:1.6rem}} h2{{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid {palette.GUIDE}}}
h3{{font-size:1.05rem}} nav ol{{columns:2;font-size:.9rem}}
.tablewrap{{max-width:100%;overflow-x:auto;margin:.5rem 0}}
table.sx{{border-collapse:collapse;font-size:.85rem}}
table.sx td,table.sx th{{border:1px solid {palette.GUIDE};padding:.2rem .5rem;text-align:left;white-space:nowrap}}
table.sx td.num,table.sx th.num{{text-align:right;font-variant-numeric:tabular-nums}}
table.sx th{{background:{palette.SURFACE}}} .note{{color:{palette.WARNING_TEXT}}} .muted{{color:{palette.MUTED}}}
.caption{{color:{palette.MUTED};font-size:.85rem}}
.fig{{width:100%;max-width:100%;overflow:hidden}}
"""

#: file name of the shared plotly.js a report loads with ``plotly_js="file"`` (written once beside the reports)
PLOTLY_FILE = "plotly-{version}.min.js"
#: where a report made with ``plotly_js="cdn"`` loads plotly.js from (the version plotly.py ships)
PLOTLY_CDN = "https://cdn.plot.ly/plotly-{version}.min.js"
#: how a report gets plotly.js: in the page (the default), one file beside it, or plotly's CDN
PLOTLY_JS = ("inline", "file", "cdn")


def human_bytes(n: float | None) -> str:
    """Bytes for people (:func:`explorer.plots.format.human_bytes`)."""
    return fmt.human_bytes(n)


def _keyed_operators(snap: Any) -> list[str]:
    return list(analysis.keyed_operators(snap)["operator"])


def _state_table(snap: Any) -> pd.DataFrame:
    """The states with their entries, bytes and keys (counted from the data where the metadata lacks them)."""
    st = snap.states.copy()
    if not len(st):
        return st
    need_counts = "entries" not in st or "bytes" not in st
    if need_counts and _keyed_operators(snap):
        sizes = analysis.state_sizes(snap)
        st = st.drop(columns=[c for c in ("entries", "bytes", "keys") if c in st]).merge(
            sizes[["operator", "state", "entries", "bytes", "keys"]], on=["operator", "state"], how="left")
        for c in ("entries", "bytes", "keys"):
            st[c] = st[c].fillna(0).astype("int64")
    return st


def _no_ttl(st: pd.DataFrame) -> pd.DataFrame:
    if "ttl_ms" not in st:
        return st.iloc[0:0]
    no = st["ttl_ms"].isna()
    if "has_ttl" in st:
        no &= ~st["has_ttl"].fillna(False).astype(bool)
    if "kind" in st:
        no &= ~st["kind"].isin(["event_timer", "processing_timer"])
    return st[no]


def created_text(snap: Any) -> str:
    """When the snapshot was taken, from its own metadata (never from file times)."""
    if snap.created_at is not None:
        return fmt.human_time(snap.created_at)
    return "unknown (the format stores no time; expiry uses the latest last access, or now=)"


def traffic_known(snap: Any) -> bool:
    """Whether the snapshot carries traffic counts (the engine's heavy-hitter sketch)."""
    try:
        return bool(len(snap.heavy_hitters()))
    except Exception:  # noqa: BLE001 - a reader without a sketch
        return False


NO_TRAFFIC = ("no traffic data: this snapshot carries no per-key record counts (only the engine's snapshots "
              "keep a heavy-hitter sketch); keys are ranked by state bytes")


def summary_text(snap: Any, top: int = 5) -> str:
    """A terminal summary: operators, states with TTL, imbalance, hot keys, expired state, notes."""
    out: list[str] = []
    out.append(f"{snap.format} #{snap.checkpoint_id} at {snap.path}  (created {created_text(snap)})")
    t = snap.timings()
    if t:
        out.append(f"size {fmt.human_bytes(t.get('bytes'))}, duration {fmt.human_duration(t.get('duration_ms'))}, "
                   f"alignment {fmt.human_duration(t.get('alignment_ms'))}")
    ops = snap.operators
    cols = [c for c in ("operator", "kind", "parallelism", "max_parallelism", "keyed", "has_keyed_state", "states",
                        "bytes") if c in ops]
    out += ["", "operators:", fmt.format_frame(ops[cols]).to_string(index=False)]
    keyed = _keyed_operators(snap)
    st = _state_table(snap)
    if len(st):
        cols = [c for c in ("operator", "state", "kind", "value_type", "ttl_ms", "entries", "bytes") if c in st]
        out += ["", "states:", fmt.format_frame(st[cols]).to_string(index=False)]
    has_state = bool(len(st)) and ("entries" not in st or st["entries"].sum() > 0)
    if has_state and keyed:
        sub = analysis.subtask_distribution(snap)
        im = analysis.imbalance(sub)
        out += ["", "balance across subtasks (max/mean, 1.0 is perfect):"]
        for name, g in im.groupby("operator", sort=True, observed=True):
            figs = ", ".join(f"{r.metric} {r.max_over_mean:.2f} (cv {r.cv:.2f})" for r in g.itertuples()
                             if r.total > 0)
            out.append(f"  {name} at parallelism {int(g['parallelism'].iloc[0])}: {figs}")
        fixed = analysis.fixed_partitioning(snap)
        if fixed:
            out.append(f"  rescaling: {fixed}")
        best = analysis.best_parallelisms(snap, n=3)
        for name, g in best.groupby("operator", sort=True, observed=True):
            measure = "traffic (records)" if g["metric"].iloc[0] == "records" else str(g["metric"].iloc[0])
            out.append(f"  {name}: best parallelisms from 2 by {measure}: " +
                       ", ".join(f"{int(r.parallelism)} ({r.max_over_mean:.2f})" for r in g.itertuples()))
        hk = analysis.hot_keys(snap, n=top, by="bytes")
        if len(hk):
            out += ["", f"hottest keys by state bytes (top {top}):"]
            out.append(_fmt_hot(hk))
        hh = analysis.hot_keys(snap, n=top, by="traffic")
        if len(hh):
            out += ["", f"hottest keys by traffic (top {top}, from the engine's sketch; keys outside it unknown):"]
            out.append(_fmt_hot(hh))
        else:
            out += ["", NO_TRAFFIC]
        if len(hk) or len(hh):
            out.append(analysis.OVERLOAD_CAPTION)
        exp = analysis.expired_not_cleaned(snap)
        if len(exp):
            out += ["", "TTL state expired at the snapshot time but not yet cleaned up:"]
            for r in exp.itertuples():
                ttl = fmt.human_duration(r.ttl_ms) if r.ttl_ms is not None and not pd.isna(r.ttl_ms) else "unknown"
                out.append(f"  {r.operator}/{r.state}: {r.expired_entries:,} of {r.entries:,} entries "
                           f"({fmt.human_bytes(r.expired_bytes)}), TTL {ttl}")
        no_ttl = _no_ttl(st)
        if len(no_ttl):
            out += ["", "states without TTL (only the job's own code removes their entries): " +
                    ", ".join(f"{r.operator}/{r.state}" for r in no_ttl.itertuples())]
    hint = analysis.ttl_hint(snap)
    if hint:
        out += ["", f"hint: {hint}"]
    for n in snap.notes:
        out.append(f"note: {n}")
    return terminal_safe("\n".join(out))


#: control characters a terminal would act on (ESC starts colour and cursor sequences), line feeds aside
_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x0A}


def terminal_safe(text: str) -> str:
    """``text`` with its control characters shown as ``\\x1b`` (names and keys in a snapshot are its writer's:
    an ESC in a state name must not recolour or move the user's terminal); line feeds kept."""
    return text.translate(_CONTROL)


def _fmt_hot(hk: pd.DataFrame) -> str:
    cols = ["rank", "operator", "key", "subtask", "entries", "bytes", "records", "share", "overload"]
    df = hk[cols].copy()
    # clipped as shown (control characters visible first: a clip never splits an escape sequence)
    df["key"] = df["key"].map(lambda k: (t[:39] + "…") if len(t := terminal_text(k)) > 40 else t)
    return fmt.format_frame(df).to_string(index=False)


def _table(df: pd.DataFrame, max_rows: int = 30, caption: str | None = None) -> str:
    """An HTML table of formatted cells (numbers right-aligned under right-aligned headers), scrolling
    sideways rather than clipping."""
    df = df.head(max_rows)
    shown = fmt.format_frame(df)
    numeric = {c for c in df.columns if pd.api.types.is_numeric_dtype(df[c].dtype)
               and not pd.api.types.is_bool_dtype(df[c].dtype)}
    head = "".join(f"<th class='{'num' if c in numeric else ''}'>{html.escape(str(c))}</th>" for c in shown.columns)
    body = "".join(
        "<tr>" + "".join(f"<td class='{'num' if c in numeric else ''}'>{html.escape(str(v))}</td>"
                         for c, v in zip(shown.columns, row)) + "</tr>"
        for row in shown.itertuples(index=False))
    cap = f"<p class='caption'>{html.escape(caption)}</p>" if caption else ""
    return f"<div class='tablewrap'><table class='sx'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{cap}"


def snapshot_html(snap: Any) -> str:
    """The notebook display of a Snapshot: what it is, its operators and states (metadata only)."""
    t = snap.timings()
    parts = [
        f"<div class='sx-snapshot'><b>{html.escape(snap.format)}</b> #{html.escape(str(snap.checkpoint_id))} "
        f"<span class='muted'>{html.escape(str(snap.path))}</span><br>created {html.escape(created_text(snap))}"
        + (f", {fmt.human_bytes(t.get('bytes'))}" if t.get("bytes") is not None else ""),
    ]
    ops = snap.operators
    cols = [c for c in ("operator", "kind", "parallelism", "max_parallelism", "keyed", "states", "bytes") if c in ops]
    parts.append(_table(ops[cols]))
    st = snap.states
    if len(st):
        cols = [c for c in ("operator", "state", "kind", "value_type", "ttl_ms", "entries") if c in st]
        parts.append(_table(st[cols]))
    parts.append("<span class='muted'>snap.key_group_distribution(), .hot_keys(), .ttl_expiry(), "
                 "explorer.history(dir), explorer.diff(a, b)</span></div>")
    return "\n".join(parts)


def _figure_html(fig, div_id: str) -> str:
    fig.update_layout(autosize=True, width=None)
    return ("<div class='fig'>" + fig.to_html(include_plotlyjs=False, full_html=False, div_id=div_id,
                                              default_width="100%", config={"responsive": True}) + "</div>")


def summary_table(snap: Any) -> pd.DataFrame:
    """The report's summary: one row per figure a reader looks for first."""
    st = _state_table(snap)
    t = snap.timings()
    ops = snap.operators
    keyed = _keyed_operators(snap)
    rows = [
        ("format", snap.format), ("kind", snap.kind), ("checkpoint id", snap.checkpoint_id),
        ("path", str(snap.path)), ("created", created_text(snap)),
        ("operators", f"{len(ops):,} ({len(keyed):,} with keyed state)"),
        ("states", f"{len(st):,}"),
        ("state entries", fmt.human_count(st["entries"].sum()) if "entries" in st and len(st) else "0"),
        ("state bytes", fmt.human_bytes(st["bytes"].sum()) if "bytes" in st and len(st) else
         fmt.human_bytes(ops["bytes"].sum()) if "bytes" in ops else fmt.MISSING),
        ("parallelism", ", ".join(sorted({str(int(p)) for p in ops["parallelism"]})) if len(ops) else fmt.MISSING),
        ("max parallelism", ", ".join(sorted({str(int(p)) for p in ops["max_parallelism"]})) if len(ops)
         else fmt.MISSING),
        ("traffic data", "yes (the engine's heavy-hitter sketch)" if traffic_known(snap) else "none"),
    ]
    if t:
        rows += [("snapshot size", fmt.human_bytes(t.get("bytes"))),
                 ("duration", fmt.human_duration(t.get("duration_ms")))]
    return pd.DataFrame(rows, columns=["figure", "value"])


def write_plotly(directory: str | Path) -> Path:
    """Write plotly.js once into ``directory`` (if not there yet) for reports to share; its path."""
    import plotly  # noqa: PLC0415 - heavy, and only a report writes it

    path = Path(directory) / PLOTLY_FILE.format(version=plotly.__version__)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(get_plotlyjs(), encoding="utf-8")
        tmp.replace(path)
    return path


def build_report(source: Any, output: str | Path, *, top: int = 10, history_dir: str | Path | None = None,
                 parallelisms: list[int] | None = None, plotly_js: str = "inline") -> Path:
    """Write an HTML report of a snapshot (a Snapshot or a path) to ``output``.

    A page with a summary table, a contents list, then per keyed operator its key groups,
    rescale what-if, hot keys (with their skew and a salting what-if), the TTL timeline,
    and, when the snapshot sits in a checkpoint directory (or ``history_dir`` is given), the
    checkpoint history and the diff from the previous checkpoint. Works on every format.

    ``plotly_js="inline"`` (the default) puts plotly.js in the page once (about 4.6 MB): one
    file that opens anywhere, offline. ``"file"`` writes it once beside the report
    (:data:`PLOTLY_FILE`, reused by every report in that folder; ``"shared"`` is its old
    name) so each report stays small; ``"cdn"`` loads it from :data:`PLOTLY_CDN` (small,
    needs the network). Either way it is loaded once per page, not once per figure.
    """
    plotly_js = "file" if plotly_js == "shared" else plotly_js
    if plotly_js not in PLOTLY_JS:
        raise ValueError(f"plotly_js: found {plotly_js!r}, expected one of {', '.join(PLOTLY_JS)}")
    snap = source if hasattr(source, "keyed_state") else open_stored(source)
    out = Path(output)
    sections: list[tuple[str, str, list[str]]] = []  # (anchor, title, html parts)
    n = 0

    def section(title: str) -> list[str]:
        parts: list[str] = []
        sections.append((f"s{len(sections) + 1}", title, parts))
        return parts

    def fig(parts: list[str], f) -> None:
        nonlocal n
        n += 1
        parts.append(_figure_html(f, f"sx-fig-{n}"))

    title = f"State Explorer report: {snap.format} #{snap.checkpoint_id}"
    summary = section("Summary")
    summary.append(_table(summary_table(snap), max_rows=100))
    st = _state_table(snap)
    if len(st):
        cols = [c for c in ("operator", "state", "kind", "value_type", "ttl_ms", "entries", "bytes", "keys")
                if c in st]
        summary.append("<h3>States</h3>" + _table(st[cols], max_rows=200))
    hint = analysis.ttl_hint(snap)
    if hint:
        summary.append(f"<p class='note'>{html.escape(hint)}</p>")
    for note in snap.notes:
        summary.append(f"<p class='note'>note: {html.escape(note)}</p>")
    has_state = bool(len(st)) and ("entries" not in st or st["entries"].sum() > 0)
    keyed = [op for op in _keyed_operators(snap) if not len(st) or op in set(st["operator"])] if has_state else []
    has_traffic = traffic_known(snap)
    for op in keyed:
        parts = section(f"Key groups of {op}")
        fig(parts, plots.key_group_bars(analysis.key_group_distribution(snap, operator=op)))
        sub = analysis.subtask_distribution(snap, operator=op)
        fig(parts, plots.subtask_bars(sub))
        parts.append(_table(analysis.imbalance(sub), caption="max_over_mean: the heaviest subtask's load over the "
                            "mean subtask load (1.0 is perfect balance); cv: standard deviation over mean"))
        parts = section(f"Rescale what-if for {op}")
        w = analysis.rescale_whatif(snap, parallelisms, operator=op)
        fig(parts, plots.rescale_comparison(w))
        fixed = analysis.fixed_partitioning(snap)
        best = analysis.best_parallelisms(w if parallelisms else snap, n=5, operator=op)
        if fixed:
            parts.append(f"<p class='muted'>No best parallelism: {html.escape(fixed)}.</p>")
        elif len(best):
            by = "traffic (records)" if best["metric"].iloc[0] == "records" else str(best["metric"].iloc[0])
            parts.append(_table(best, caption=f"the most even parallelisms from 2 by {by} (1 is trivially even)"))
        else:
            parts.append("<p class='muted'>No best parallelism: no candidate of at least 2 subtasks.</p>")
        parts = section(f"Hot keys of {op}")
        hk = analysis.hot_keys(snap, n=top, operator=op)
        if len(hk):
            measure = str(hk["by"].iloc[0])
            fig(parts, plots.hot_key_bars(hk, y=measure, title=f"Hottest keys of {op} by "
                                          f"{'traffic' if measure == 'records' else measure}"))
            parts.append(_table(hk.drop(columns=["operator"]), caption=analysis.OVERLOAD_CAPTION +
                                "; share: the key's part of the operator's total; records: the sketch's count "
                                "(an upper bound, within records_error), unknown where the key is outside the sketch"))
        if not has_traffic:
            parts.append(f"<p class='muted'>{html.escape(NO_TRAFFIC)}.</p>")
        measure_skew = "traffic" if has_traffic and len(hk) and hk["by"].iloc[0] == "records" else "bytes"
        ks = analysis.key_stats(snap, operator=op, keys=False)
        skew = analysis.key_skew(snap, by=measure_skew, operator=op)
        value = "records" if measure_skew == "traffic" else "bytes"
        fig(parts, plots.lorenz_curve(ks, value=value))
        caption = "gini: 0 when every key holds the same, towards 1 when one key holds everything"
        if measure_skew == "traffic":
            r = skew.iloc[0]
            caption += (f"; by traffic over the {int(r.known_keys):,} keys the sketch counted (of {int(r['keys']):,}),"
                        f" which carry {fmt.human_share(r.known_share)} of the counted traffic; other keys are unknown")
        parts.append(_table(skew, caption=caption))
        key, why_not = _salting_key(snap, op, "records" if measure_skew == "traffic" else "bytes")
        if key is None:
            parts.append(f"<h3>Salting</h3><p class='muted'>No salting what-if: {html.escape(why_not)}.</p>")
        else:
            parts.append(f"<h3>Salting the hottest key holding state ({html.escape(str(key))}) into 4 sub-keys</h3>")
            sw = analysis.salting_whatif(snap, key, 4, operator=op)
            y = analysis.salting_measure(sw)
            fig(parts, plots.subtask_bars(sw, y=y, color="scenario",
                                          title=f"{op}: {'traffic' if y == 'records' else y} per subtask before and "
                                                f"after salting {key}"))
    tl = analysis.ttl_expiry(snap) if keyed else pd.DataFrame()
    if len(tl) or hint:
        parts = section("TTL expiry")
        if hint:
            parts.append(f"<p class='note'>{html.escape(hint)}</p>")
        for op in pd.unique(tl["operator"]) if len(tl) else []:
            fig(parts, plots.ttl_timeline(tl, operator=op))
        if len(tl):
            parts.append(_table(analysis.expired_not_cleaned(snap)))
    hist_dir = as_path(history_dir) if history_dir is not None else _checkpoint_dir_of(snap)
    if hist_dir is not None:
        chks = checkpoints_in(hist_dir)
        if len(chks) >= 2:
            parts = section(f"Checkpoint history of {hist_dir}")
            h = analysis.history(chks)
            fig(parts, plots.checkpoint_history(h))
            parts.append(_table(analysis.checkpoint_summary(h)))
            ug = analysis.unbounded_growth(chks)
            if len(ug):
                parts.append(_table(ug))
            ids = [c.name for c in chks]
            here = snap.path.name
            prev = chks[ids.index(here) - 1] if here in ids and ids.index(here) > 0 else chks[-2]
            cur = snap if here in ids else open_stored(chks[-1])
            parts = section(f"Diff from {prev.name} to {cur.path.name}")
            d = analysis.diff(open_stored(prev), cur)
            fig(parts, plots.diff_waterfall(d))
            parts.append(_table(analysis.diff_summary(d)))
            parts.append(_table(analysis.growth_by_key(d, n=top)))
    if plotly_js == "inline":
        script = f"<script type='text/javascript'>{get_plotlyjs()}</script>"
    elif plotly_js == "cdn":
        src = PLOTLY_CDN.format(version=get_plotlyjs_version())
        script = f"<script type='text/javascript' src='{html.escape(src)}' charset='utf-8'></script>"
    else:
        js = write_plotly(out.parent)
        script = f"<script type='text/javascript' src='{html.escape(js.name)}'></script>"
    contents = "".join(f"<li><a href='#{a}'>{html.escape(t)}</a></li>" for a, t, _ in sections)
    body = [f"<h1>{html.escape(title)}</h1>", f"<nav><h2>Contents</h2><ol>{contents}</ol></nav>"]
    for a, t, parts in sections:
        body.append(f"<section id='{a}'><h2>{html.escape(t)}</h2>")
        body.extend(parts)
        body.append("</section>")
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>{script}</head>\n<body>\n"
        + "\n".join(body)
        + "\n<p class='muted'>Made by State Explorer.</p></body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _salting_key(snap: Any, operator: str, measure: str) -> tuple[Any, str]:
    """The key a salting what-if acts on: the hottest by ``measure`` among the keys that hold state (the
    hottest by traffic may hold none any more), or None and why (nothing counted, or a tie at the top)."""
    ks = analysis.key_stats(snap, operator=operator)
    ks = ks[ks["entries"] > 0]
    if measure == "records":
        ks = ks[ks["records"].notna()]
        if not len(ks):
            return None, (f"none of the keys the traffic sketch counted holds state in {operator} now, and a "
                          "what-if on a key without state would move nothing")
    values = ks[measure].to_numpy(dtype="float64")
    key, why_not = analysis.hottest_key(values, list(ks["key"]), "records" if measure == "records" else measure)
    return key, why_not or ""


def _checkpoint_dir_of(snap: Any) -> Path | None:
    p = snap.path
    if checkpoint_id(p.name) is not None:
        return p.parent
    return None

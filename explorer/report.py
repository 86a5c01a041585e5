"""Reports of a snapshot: a terminal summary, a small notebook display, and a self-contained HTML page.

* :func:`summary_text` is what ``state-explorer inspect`` and ``%explore`` print;
* :func:`snapshot_html` is ``Snapshot._repr_html_`` (metadata only: cheap on any size);
* :func:`build_report` writes one HTML file with every chart, plotly.js inlined once,
  that opens without a network connection.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pandas as pd
from plotly.offline import get_plotlyjs

from . import analysis, plots
from .stored import checkpoints_in, open_stored

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;color:#222}
h1{font-size:1.6rem} h2{font-size:1.25rem;margin-top:2.2rem;border-bottom:1px solid #ddd}
table.sx{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}
table.sx td,table.sx th{border:1px solid #ddd;padding:.2rem .5rem;text-align:right}
table.sx th{background:#f5f5f5} .note{color:#a60} .muted{color:#777}
"""


def human_bytes(n: float | None) -> str:
    if n is None or pd.isna(n):
        return "-"
    n = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


def _keyed_operators(snap: Any) -> list[str]:
    ops = snap.operators
    if "keyed" in ops:
        ops = ops[ops["keyed"].astype(bool)]
    return list(ops["operator"])


def _has_state(snap: Any) -> bool:
    st = snap.states
    return bool(len(st)) and ("entries" not in st or st["entries"].sum() > 0)


def summary_text(snap: Any, top: int = 5) -> str:
    """A terminal summary: operators, states with TTL, imbalance, hot keys, expired state, notes."""
    out: list[str] = []
    created = snap.created_at.strftime("%Y-%m-%d %H:%M:%S UTC") if snap.created_at is not None else "unknown"
    out.append(f"{snap.format} #{snap.checkpoint_id} at {snap.path}  (created {created})")
    t = snap.timings()
    if t:
        out.append(f"size {human_bytes(t.get('bytes'))}, duration {t.get('duration_ms', '-')} ms, "
                   f"alignment {t.get('alignment_ms', '-')} ms")
    ops = snap.operators
    cols = [c for c in ("operator", "kind", "parallelism", "max_parallelism", "keyed", "states", "bytes") if c in ops]
    out += ["", "operators:", ops[cols].to_string(index=False)]
    st = snap.states
    if len(st):
        cols = [c for c in ("operator", "state", "kind", "value_type", "ttl_ms", "entries") if c in st]
        out += ["", "states:", st[cols].to_string(index=False)]
    if _has_state(snap) and _keyed_operators(snap):
        sub = analysis.subtask_distribution(snap)
        im = analysis.imbalance(sub)
        out += ["", "balance across subtasks (max/mean, 1.0 is perfect):"]
        for name, g in im.groupby("operator", sort=True, observed=True):
            figs = ", ".join(f"{r.metric} {r.max_over_mean:.2f} (cv {r.cv:.2f})" for r in g.itertuples()
                             if r.total > 0)
            out.append(f"  {name} at parallelism {int(g['parallelism'].iloc[0])}: {figs}")
        best = analysis.best_parallelisms(snap, metric="bytes", n=3)
        for name, g in best.groupby("operator", sort=True, observed=True):
            out.append(f"  {name}: best parallelisms for bytes " +
                       ", ".join(f"{int(r.parallelism)} ({r.max_over_mean:.2f})" for r in g.itertuples()))
        hk = analysis.hot_keys(snap, n=top, by="bytes")
        if len(hk):
            out += ["", f"hottest keys by state bytes (top {top}):"]
            out.append(_fmt_hot(hk, "bytes"))
        hh = analysis.hot_keys(snap, n=top, by="traffic")
        if len(hh) and hh["records"].sum() > 0:
            out += ["", f"hottest keys by traffic (top {top}, from the engine's sketch):"]
            out.append(_fmt_hot(hh, "records"))
        exp = analysis.expired_not_cleaned(snap)
        if len(exp):
            out += ["", "TTL state expired at the snapshot time but not yet cleaned up:"]
            for r in exp.itertuples():
                out.append(f"  {r.operator}/{r.state}: {r.expired_entries:,} of {r.entries:,} entries "
                           f"({human_bytes(r.expired_bytes)}), TTL {r.ttl_ms} ms")
        no_ttl = st[st["ttl_ms"].isna()] if "ttl_ms" in st else st.iloc[0:0]
        if len(no_ttl):
            out += ["", "states without TTL (only the job's own code removes their entries): " +
                    ", ".join(f"{r.operator}/{r.state}" for r in no_ttl.itertuples())]
    for n in snap.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def _fmt_hot(hk: pd.DataFrame, metric: str) -> str:
    cols = ["rank", "operator", "key", "key_group", "subtask", "entries", "bytes", "records", "share", "overload"]
    df = hk[cols].copy()
    df["key"] = df["key"].map(lambda k: str(k)[:40])
    df["share"] = (df["share"] * 100).map(lambda v: f"{v:.1f}%")
    df["overload"] = df["overload"].map(lambda v: f"{v:.2f}x")
    return df.to_string(index=False)


def _table(df: pd.DataFrame, max_rows: int = 30) -> str:
    return df.head(max_rows).to_html(index=False, classes="sx", border=0, na_rep="-",
                                     float_format=lambda v: f"{v:,.3f}")


def snapshot_html(snap: Any) -> str:
    """The notebook display of a Snapshot: what it is, its operators and states (metadata only)."""
    created = snap.created_at.strftime("%Y-%m-%d %H:%M:%S UTC") if snap.created_at is not None else "unknown"
    t = snap.timings()
    parts = [
        f"<div class='sx-snapshot'><b>{html.escape(snap.format)}</b> #{snap.checkpoint_id} "
        f"<span class='muted'>{html.escape(str(snap.path))}</span><br>created {created}"
        + (f", {human_bytes(t.get('bytes'))}" if t.get("bytes") is not None else ""),
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
    return fig.to_html(include_plotlyjs=False, full_html=False, div_id=div_id, config={"responsive": True})


def build_report(source: Any, output: str | Path, *, top: int = 10, history_dir: str | Path | None = None,
                 parallelisms: list[int] | None = None) -> Path:
    """Write a self-contained HTML report of a snapshot (a Snapshot or a path) to ``output``.

    Sections: summary, key groups per subtask, rescale what-if, hot keys and Lorenz curve,
    TTL timeline, and, when the snapshot sits in a checkpoint directory (or ``history_dir``
    is given), the checkpoint history and the diff from the previous checkpoint.
    plotly.js is inlined once in the page head, so the file opens offline.
    """
    snap = source if hasattr(source, "keyed_state") else open_stored(source)
    out = Path(output)
    body: list[str] = []
    n = 0

    def fig(f) -> None:
        nonlocal n
        n += 1
        body.append(_figure_html(f, f"sx-fig-{n}"))

    title = f"State Explorer report: {snap.format} #{snap.checkpoint_id}"
    body.append(f"<h1>{html.escape(title)}</h1>")
    body.append(f"<pre>{html.escape(summary_text(snap, top=5))}</pre>")
    keyed = _keyed_operators(snap) if _has_state(snap) else []
    for op in keyed:
        body.append(f"<h2>Key groups of {html.escape(op)}</h2>")
        fig(plots.key_group_bars(analysis.key_group_distribution(snap, operator=op)))
        sub = analysis.subtask_distribution(snap, operator=op)
        fig(plots.subtask_bars(sub))
        body.append(_table(analysis.imbalance(sub)))
        body.append(f"<h2>Rescale what-if for {html.escape(op)}</h2>")
        w = analysis.rescale_whatif(snap, parallelisms, operator=op)
        fig(plots.rescale_comparison(w))
        body.append(_table(analysis.best_parallelisms(w, metric="bytes", n=5)))
        body.append(f"<h2>Hot keys of {html.escape(op)}</h2>")
        hk = analysis.hot_keys(snap, n=top, by="bytes", operator=op)
        fig(plots.hot_key_bars(hk))
        body.append(_table(hk))
        tr = analysis.hot_keys(snap, n=top, by="traffic", operator=op)
        if len(tr) and tr["records"].sum() > 0:
            fig(plots.hot_key_bars(tr, y="records", title=f"Hottest keys of {op} by traffic"))
        ks = analysis.key_stats(snap, operator=op, keys=False)
        fig(plots.lorenz_curve(ks))
        body.append(_table(analysis.key_skew(snap, operator=op)))
        if len(hk):
            body.append("<h3>Salting the hottest key into 4 sub-keys</h3>")
            fig(plots.subtask_bars(analysis.salting_whatif(snap, hk["key"].iloc[0], 4, operator=op)))
    tl = analysis.ttl_expiry(snap) if keyed else pd.DataFrame()
    if len(tl):
        body.append("<h2>TTL expiry</h2>")
        for op in pd.unique(tl["operator"]):
            fig(plots.ttl_timeline(tl, operator=op))
        body.append(_table(analysis.expired_not_cleaned(snap)))
    hist_dir = Path(history_dir) if history_dir is not None else _checkpoint_dir_of(snap)
    if hist_dir is not None:
        chks = checkpoints_in(hist_dir)
        if len(chks) >= 2:
            body.append(f"<h2>Checkpoint history of {html.escape(str(hist_dir))}</h2>")
            h = analysis.history(chks)
            fig(plots.checkpoint_history(h))
            body.append(_table(analysis.checkpoint_summary(h)))
            ug = analysis.unbounded_growth(chks)
            if len(ug):
                body.append(_table(ug))
            ids = [c.name for c in chks]
            here = Path(snap.path).name
            prev = chks[ids.index(here) - 1] if here in ids and ids.index(here) > 0 else chks[-2]
            cur = snap if here in ids else open_stored(chks[-1])
            body.append(f"<h2>Diff from {html.escape(prev.name)} to {html.escape(Path(cur.path).name)}</h2>")
            d = analysis.diff(open_stored(prev), cur)
            fig(plots.diff_waterfall(d))
            body.append(_table(analysis.diff_summary(d)))
            body.append(_table(analysis.growth_by_key(d, n=top)))
    page = (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{_CSS}</style>"
        f"<script type='text/javascript'>{get_plotlyjs()}</script></head>\n<body>\n"
        + "\n".join(body)
        + "\n<p class='muted'>Made by State Explorer.</p></body></html>\n"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


def _checkpoint_dir_of(snap: Any) -> Path | None:
    p = Path(snap.path)
    if p.name.startswith("chk-"):
        return p.parent
    return None

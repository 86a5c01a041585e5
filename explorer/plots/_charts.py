"""The chart functions (see :mod:`explorer.plots` for which analysis feeds which)."""

from __future__ import annotations

import math

import pandas as pd
import plotly.graph_objects as go

from ..analysis.hotkeys import gini as _gini
from ..analysis.hotkeys import lorenz_curve as _lorenz
from ..errors import AnalysisError
from ._doc import document
from . import format as fmt
from ..escape import plot_categories, plot_text
from .palette import EXPIRED_COLOR, GUIDE, INK, PALETTE, VEIL

#: what a measure counts, as its axis title says it ("serialized bytes per subtask")
MEASURES = {"bytes": "serialized bytes", "size_bytes": "serialized bytes", "entries": "entries", "keys": "keys",
            "records": "records (traffic)", "incremental_bytes": "new file bytes", "checkpoint_bytes": "file bytes",
            "delta_bytes": "change in file bytes", "expired_bytes": "expired serialized bytes"}
_COUNTS = {"entries", "keys", "records", "expired_entries", "cum_entries", "rank"}


def _colour(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _need(df: pd.DataFrame, *cols: str) -> None:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise AnalysisError(f"the data frame lacks the columns {missing}; found {list(df.columns)}")


def _one_operator(df: pd.DataFrame, operator: str | None) -> tuple[pd.DataFrame, str | None]:
    if "operator" not in df.columns:
        return df, operator
    names = list(pd.unique(df["operator"]))
    if operator is None:
        if len(names) > 1:
            raise AnalysisError(f"the data holds the operators {names}; choose one with operator=")
        return df, names[0] if names else None
    if operator not in names:
        raise AnalysisError(f"no operator {operator!r} in the data; found {names}")
    return df[df["operator"] == operator], operator


def measure_name(measure: str) -> str:
    """What ``measure`` counts, for people (``bytes`` are the state's serialized bytes)."""
    return MEASURES.get(measure, measure.replace("_", " "))


def legend_above(fig: go.Figure, title: str | None = None, width: int = 640) -> go.Figure:
    """Put the legend in rows above the plot area, under the title, with the top margin they need.

    A legend below the plot sat on the x axis title, one on the right on a second y axis: above the
    plot, between the title and the data, nothing else is drawn. ``width`` is the narrowest plot area
    the figure is expected in (the rows are counted for it). A legend of several rows makes the figure
    taller, so the plot below it keeps about 240 px.
    """
    names = [str(t.name or "") for t in fig.data if t.showlegend is not False and t.name]
    shown = fig.layout.showlegend is not False and len(names) > (0 if fig.layout.showlegend else 1)
    # plotly.js lays a legend that does not fit on one row out in a grid of its widest entry (legend/draw.js):
    # counted as packed entries it was 6 rows where plotly drew 9, and the legend ran into the title
    per_row, widths = max(width - 40, 200), [40 + 7 * len(n) for n in names]
    rows = 1 if sum(widths) <= per_row else math.ceil(len(widths) / max(1, per_row // max(widths)))
    legend_title = title if title is not None else (fig.layout.legend.title.text or None)
    fig.update_layout(
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0,
                    title_text=None if legend_title is None else plot_text(legend_title),
                    title_side="left" if legend_title else None),
        title=dict(yref="container", y=0.985, yanchor="top", x=0.01, xanchor="left", font=dict(size=15)),
        margin=dict(t=56 + (24 * rows if shown else 0)))
    # many rows (a history of ten states with long names): the figure grows, so the legend does not take the
    # plot's height (it left a strip 80 px high, and plotly put the legend in a scroll box)
    need = 56 + 24 * rows + 80 + 240 if shown else 0
    if rows > 1 and (fig.layout.height or 450) < need:
        fig.update_layout(height=need)
    return fig


def _layout(fig: go.Figure, title: str, height: int | None, **kw) -> go.Figure:
    legend = kw.pop("legend", None)
    fig.update_layout(title_text=plot_text(title), template="plotly_white", height=height, colorway=list(PALETTE),
                      **kw)
    legend_above(fig, legend)
    fig.update_xaxes(automargin=True)  # long tick labels and axis titles get room instead of being clipped
    fig.update_yaxes(automargin=True)
    return fig


def value_axis(fig: go.Figure, measure: str, values, *, per: str | None, axis: str = "y",
               title: str | None = None, hover: bool = True) -> go.Figure:
    """Title an axis by what it counts and per what, and show its ticks and hover as people read them.

    Bytes in KB/MB (ticks and hover, powers of 1024), milliseconds as durations, counts as whole numbers
    (never 14.5 entries), starting at 0. ``values`` are the largest values the axis shows (a stack's totals).
    ``hover=False`` leaves the traces' hover (and their ``customdata``) as they are.
    """
    f = fmt.formatter_for(measure)
    v = pd.to_numeric(pd.Series(list(values), dtype="object"), errors="coerce").dropna()
    lo, hi = (float(v.min()), float(v.max())) if len(v) else (0.0, 0.0)
    name = title or (f"{measure_name(measure)} per {per}" if per else measure_name(measure))
    # every tick setting given each time: a figure updated in place (a dashboard's) keeps none of the last measure's
    spec: dict = dict(title_text=plot_text(name), rangemode="tozero", tickmode="auto", tickvals=None, ticktext=None,
                      tickformat=None, dtick=None, tick0=None)
    if f is fmt.human_bytes or f is fmt.human_duration:
        vals, texts = (fmt.byte_ticks if f is fmt.human_bytes else fmt.duration_ticks)(lo, hi)
        spec.update(tickmode="array", tickvals=vals, ticktext=texts)
    elif measure in _COUNTS or f in (fmt.human_count, fmt.human_traffic) or (
            len(v) and (v.round() == v).all() and f is fmt.human_value):
        spec.update(tickformat=",d")
        if hi - min(lo, 0) <= 5:
            spec.update(tickmode="linear", tick0=0, dtick=1)
    fig.update_layout({f"{axis[0]}axis{axis[1:]}": spec})  # this axis only (not a second one beside it)
    if hover:
        _hover(fig, axis, f, name)
    return fig


def _hover(fig: go.Figure, axis: str, f, name: str) -> None:
    """Hover on the traces of ``axis`` (``y``, ``y2``, ``x``) shows the value as the axis reads it."""
    letter = axis[0]
    for tr in fig.data:
        horizontal = tr.type == "bar" and tr.orientation == "h"
        if tr.type not in ("bar", "scatter") or (getattr(tr, f"{letter}axis") or letter) != axis or \
                horizontal != (letter == "x"):
            continue
        vals = getattr(tr, letter)
        if vals is None:
            continue
        other = "y" if letter == "x" else "x"
        tr.customdata = [f(v) for v in vals]
        tr.hovertemplate = f"%{{{other}}}<br>{plot_text(name)}: %{{customdata}}<extra>%{{fullData.name}}</extra>"


def _floats(col: pd.Series):
    """A column as float64 for plotly (an unknown ``<NA>`` as NaN: no bar)."""
    return pd.to_numeric(col, errors="coerce").astype("float64").to_numpy()


def _label(key) -> str:
    return plot_text(key)


@document
def key_group_bars(data_frame: pd.DataFrame, *, x: str = "key_group", y: str = "bytes", color: str = "subtask",
                   operator: str | None = None, title: str | None = None, height: int | None = None) -> go.Figure:
    """Load per key group, one colour per owning subtask (a ``key_group_distribution``).

    Contiguous runs of one colour are the key-group ranges Flink gives each subtask.
    """
    _need(data_frame, x, y, color)
    df, op = _one_operator(data_frame, operator)
    fig = go.Figure()
    for i, (c, g) in enumerate(df.groupby(color, sort=True, observed=True)):
        fig.add_trace(go.Bar(x=plot_categories(g[x]), y=g[y].to_numpy(), name=plot_text(f"{color} {c}"),
                             marker_color=_colour(i)))
    fig.update_xaxes(title_text=plot_text(x.replace("_", " ")), tickformat=",d", rangemode="tozero",
                     **({"dtick": 1} if len(df) and df[x].max() <= 16 else {}))  # key group 3, never 2.5
    value_axis(fig, y, df[y], per=x.replace("_", " "))
    return _layout(fig, title or f"{measure_name(y)} per key group of {op}", height, bargap=0, legend=color)


@document
def subtask_bars(data_frame: pd.DataFrame, *, x: str = "subtask", y: str = "bytes", color: str | None = None,
                 operator: str | None = None, title: str | None = None, height: int | None = None) -> go.Figure:
    """Load per subtask (a ``subtask_distribution``), or before/after side by side (a ``salting_whatif``:
    ``color`` defaults to ``"scenario"`` when the column exists). A dashed line marks the mean."""
    if color is None and "scenario" in data_frame.columns:
        color = "scenario"
    _need(data_frame, x, y, *([color] if color else []))
    df, op = _one_operator(data_frame, operator)
    fig = go.Figure()
    groups = df.groupby(color, sort=False, observed=True) if color else [(y, df)]
    for i, (c, g) in enumerate(groups):
        fig.add_trace(go.Bar(x=plot_categories(g[x]), y=_floats(g[y]), name=plot_text(c), marker_color=_colour(i)))
        mean = float(g[y].mean()) if len(g) and g[y].notna().any() else 0.0
        # each mean's label at its own end of the line: two close means' labels never print on each other
        fig.add_hline(y=mean, line_dash="dash", line_color=_colour(i), annotation_text=plot_text(f"mean {c}"),
                      annotation_position="top left" if i % 2 else "top right",
                      annotation_font_color=_colour(i), annotation_bgcolor=VEIL)
    fig.update_xaxes(title_text=plot_text(x), dtick=1)
    value_axis(fig, y, df[y], per=x)
    return _layout(fig, title or f"{measure_name(y)} per subtask of {op}", height, barmode="group", legend=color)


@document
def rescale_comparison(data_frame: pd.DataFrame, *, x: str = "parallelism", y: str = "max_over_mean",
                       color: str = "metric", operator: str | None = None, max_parallelism: int | None = None,
                       title: str | None = None, height: int | None = None) -> go.Figure:
    """Imbalance at each candidate parallelism, one line per metric (a ``rescale_whatif``).

    1.0 is perfect balance; the current parallelism is marked with a dotted line.
    """
    _need(data_frame, x, y, color, "max_parallelism")
    df, op = _one_operator(data_frame, operator)
    if max_parallelism is None:
        cur = df[df["is_current"]] if "is_current" in df.columns else df.iloc[0:0]
        max_parallelism = int(cur["max_parallelism"].iloc[0]) if len(cur) else int(df["max_parallelism"].iloc[0])
    df = df[df["max_parallelism"] == max_parallelism]
    fig = go.Figure()
    for i, (c, g) in enumerate(df.groupby(color, sort=False, observed=True)):
        g = g.sort_values(x)
        fig.add_trace(go.Scatter(x=g[x].to_numpy(), y=g[y].to_numpy(), mode="lines+markers", name=plot_text(c),
                                 line_color=_colour(i)))
    if "is_current" in df.columns and df["is_current"].any():
        fig.add_vline(x=int(df.loc[df["is_current"], x].iloc[0]), line_dash="dot", line_color=INK,
                      annotation_text="now")
    fig.add_hline(y=1.0, line_color=GUIDE)
    value_axis(fig, x, df[x], per=None, axis="x", title=f"{x} (subtasks)" if x == "parallelism" else x)
    fig.update_yaxes(title_text=plot_text("heaviest subtask / mean (1.0 is even)" if y == "max_over_mean"
                                          else y.replace("_", " ")), rangemode="tozero")
    return _layout(fig, title or f"Rescale what-if for {op} (max parallelism {max_parallelism})", height,
                   legend=color)


@document
def hot_key_bars(data_frame: pd.DataFrame, *, x: str = "key", y: str = "bytes", color: str = "subtask",
                 operator: str | None = None, title: str | None = None, height: int | None = None) -> go.Figure:
    """The hottest keys as bars, coloured by the subtask they load (a ``hot_keys``), hottest first."""
    _need(data_frame, x, y, color)
    df, op = _one_operator(data_frame, operator)
    df = df.sort_values(y, ascending=False, kind="stable")
    fig = go.Figure()
    order = [_label(k) for k in df[x]]
    for i, (c, g) in enumerate(df.groupby(color, sort=True, observed=True)):
        fig.add_trace(go.Bar(x=[_label(k) for k in g[x]], y=_floats(g[y]), name=plot_text(f"{color} {c}"),
                             marker_color=_colour(i)))
    fig.update_xaxes(title_text=plot_text(x), categoryorder="array", categoryarray=order,
                     tickangle=-30 if len(order) > 5 or any(len(k) > 12 for k in order) else 0)
    value_axis(fig, y, df[y], per=x)
    return _layout(fig, title or f"Hottest keys of {op} by {measure_name(y)}", height, legend=color)


@document
def lorenz_curve(data_frame: pd.DataFrame, *, value: str = "bytes", color: str = "operator",
                 title: str | None = None, height: int | None = None) -> go.Figure:
    """Lorenz curve of the load per key, one line per operator (a ``key_stats``), with the equality line.

    The further the curve sags below the diagonal, the more a few keys hold; the legend gives each Gini.
    Keys whose ``value`` is unknown (``<NA>``: traffic outside the sketch) are left out, and the
    legend says how many keys the curve covers.
    """
    _need(data_frame, value)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="equality", line=dict(color=GUIDE,
                                                                                          dash="dash")))
    groups = data_frame.groupby(color, sort=True, observed=True) if color in data_frame.columns else [("keys", data_frame)]
    for i, (c, g) in enumerate(groups):
        known = g[value].dropna().to_numpy(dtype="float64")
        if not len(known):
            continue
        lc = _lorenz(known)
        part = "" if len(known) == len(g) else f", {len(known):,} of {len(g):,} keys known"
        fig.add_trace(go.Scatter(x=lc["key_share"].to_numpy(), y=lc["load_share"].to_numpy(), mode="lines",
                                 name=plot_text(f"{c} (Gini {_gini(known):.2f}{part})"), line_color=_colour(i)))
    fig.update_xaxes(title_text="share of keys (smallest first)", range=[0, 1], tickformat=".0%")
    fig.update_yaxes(title_text=plot_text(f"share of {measure_name(value)} (largest keys last)"), range=[0, 1],
                     tickformat=".0%")
    return _layout(fig, title or f"Lorenz curve of {measure_name(value)} per key", height)


@document
def ttl_timeline(data_frame: pd.DataFrame, *, x: str = "window_start", y: str = "bytes", color: str = "state",
                 operator: str | None = None, title: str | None = None, height: int | None = None) -> go.Figure:
    """What expires when (a ``ttl_expiry``): stacked bars per window, one colour per state, and a grey bar
    at the start for what has already expired but is still stored."""
    _need(data_frame, x, y, color, "status")
    df, op = _one_operator(data_frame, operator) if len(data_frame) else (data_frame, operator)
    fig = go.Figure()
    for i, (c, g) in enumerate(df[df["status"] == "expiring"].groupby(color, sort=True, observed=True)):
        fig.add_trace(go.Bar(x=g[x].to_numpy(), y=g[y].to_numpy(), name=plot_text(c), marker_color=_colour(i),
                             offsetgroup="expiring"))
    expired = df[df["status"] == "expired"]
    if len(expired):
        fig.add_trace(go.Bar(x=expired["window_end"].to_numpy(), y=expired[y].to_numpy(),
                             name="expired, not cleaned", marker_color=EXPIRED_COLOR,
                             text=[plot_text(s) for s in expired[color]], offsetgroup="expired"))
    fig.update_xaxes(title_text="expires (window start)")
    totals = df.groupby(x, observed=True)[y].sum() if len(df) else []
    value_axis(fig, y, totals, per="expiry window")
    return _layout(fig, title or f"TTL expiry timeline{f' of {op}' if op else ''}", height, barmode="stack",
                   legend=color)


@document
def checkpoint_history(data_frame: pd.DataFrame, *, x: str = "checkpoint_id", y: str = "bytes",
                       color: str = "state", title: str | None = None, height: int | None = None) -> go.Figure:
    """State size per checkpoint, stacked by state (a ``history``), with the checkpoint duration as a line
    on a second axis and the incremental bytes as markers.

    The axis says what ``bytes`` count, as the history frame says it (``attrs["bytes_measure"]``: the
    files on disk, or a Flink state's serialized values, which are no file's size); the incremental
    (new file) bytes are drawn beside them only where they are file bytes too.
    """
    _need(data_frame, x, y)
    df = data_frame
    counted = df.attrs.get("bytes_measure", "bytes") if y == "bytes" else None
    fig = go.Figure()
    if color in df.columns and df[color].notna().any():
        labels = df["operator"].astype(str) + "/" + df[color].astype(str) if "operator" in df.columns else df[color]
        for i, (c, g) in enumerate(df.assign(_label=labels).groupby("_label", sort=True, observed=True)):
            if g[y].isna().all():  # nothing known to stack (Spark states sharing one store): no empty legend entry
                continue
            fig.add_trace(go.Bar(x=plot_categories(g[x]), y=g[y].fillna(0).to_numpy(), name=plot_text(c),
                                 marker_color=_colour(i)))
    else:
        fig.add_trace(go.Bar(x=plot_categories(df[x]), y=df[y].to_numpy(), name=plot_text(y), marker_color=_colour(0)))
    per_chk = df.drop_duplicates(x).sort_values(x)
    files = counted is not None and "file bytes" in counted
    if "incremental_bytes" in df.columns and files:  # file bytes beside file bytes only (not serialized, entries)
        fig.add_trace(go.Scatter(x=plot_categories(per_chk[x]), y=per_chk["incremental_bytes"].to_numpy(), mode="markers",
                                 name="new file bytes (incremental)", marker=dict(symbol="diamond", size=10, color=INK)))
    if "duration_ms" in df.columns and per_chk["duration_ms"].notna().any():
        fig.add_trace(go.Scatter(x=plot_categories(per_chk[x]), y=per_chk["duration_ms"].to_numpy(), mode="lines+markers",
                                 name="duration", yaxis="y2", line=dict(color=_colour(6))))
        fig.update_layout(yaxis2=dict(overlaying="y", side="right", showgrid=False, automargin=True))
        value_axis(fig, "duration_ms", per_chk["duration_ms"], per=None, axis="y2", title="checkpoint duration")
    fig.update_xaxes(title_text="checkpoint", type="category")
    totals = df.groupby(x, observed=True)[y].sum()
    if "incremental_bytes" in df.columns and files:
        totals = pd.concat([totals, per_chk["incremental_bytes"]])
    value_axis(fig, y, totals, per="checkpoint", title=f"{counted} per checkpoint" if counted else None)
    return _layout(fig, title or "Checkpoint history", height, barmode="stack")


@document
def diff_waterfall(data_frame: pd.DataFrame, *, value: str = "bytes", by: str = "state", title: str | None = None,
                   height: int | None = None) -> go.Figure:
    """From snapshot a's total to b's (a ``diff``): per ``by`` group, the steps from added keys, removed
    keys and changed keys. States are grouped per operator (``operator/state``): two operators'
    states of the same name are two bars, not one."""
    _need(data_frame, by, "status", f"{value}_a", f"{value}_b", f"{value}_delta")
    df = data_frame
    start = int(df[f"{value}_a"].sum())
    labels, measures, ys = ["a"], ["absolute"], [start]
    keys = ["operator", by] if by != "operator" and "operator" in df.columns else [by]
    for name, g in df.groupby(keys, sort=True, observed=True):
        name = "/".join(str(x) for x in name) if isinstance(name, tuple) else str(name)
        for status in ("added", "removed", "changed"):
            d = int(g.loc[g["status"] == status, f"{value}_delta"].sum())
            if d:
                labels.append(plot_text(f"{name}: {status}"))
                measures.append("relative")
                ys.append(d)
    labels.append("b")
    measures.append("total")
    ys.append(int(df[f"{value}_b"].sum()))
    fig = go.Figure(go.Waterfall(x=labels, y=ys, measure=measures, name=plot_text(value),
                                 increasing=dict(marker=dict(color=_colour(1))),
                                 decreasing=dict(marker=dict(color=_colour(2))),
                                 totals=dict(marker=dict(color=_colour(0))),
                                 customdata=[fmt.formatter_for(value)(v) for v in ys],
                                 hovertemplate="%{x}: %{customdata}<extra></extra>"))
    running = list(pd.Series(ys[:-1]).cumsum()) + [ys[-1]]
    value_axis(fig, value, running, per=None)
    fig.update_xaxes(title_text=plot_text(f"snapshot a, the change per {'operator/' if len(keys) > 1 else ''}{by}, "
                                          "snapshot b"),
                     tickangle=-30 if len(labels) > 6 or any(len(x) > 14 for x in labels) else 0)
    return _layout(fig, title or f"Growth in {measure_name(value)} from a to b", height, showlegend=False)

"""The chart functions (see :mod:`explorer.plots` for which analysis feeds which)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from ..analysis.hotkeys import gini as _gini
from ..analysis.hotkeys import lorenz_curve as _lorenz
from ..errors import AnalysisError
from ._doc import document
from ..escape import plot_categories, plot_text

#: plotly's default qualitative palette, cycled per trace
PALETTE = ("#636EFA", "#EF553B", "#00CC96", "#AB63FA", "#FFA15A", "#19D3F3", "#FF6692", "#B6E880", "#FF97FF",
           "#FECB52")
EXPIRED_COLOR = "#7F7F7F"


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


def _layout(fig: go.Figure, title: str, height: int | None, **kw) -> go.Figure:
    legend = kw.pop("legend", None)
    fig.update_layout(title=plot_text(title), template="plotly_white", height=height,
                      legend_title_text=None if legend is None else plot_text(legend), **kw)
    fig.update_xaxes(automargin=True)  # long tick labels and axis titles get room instead of being clipped
    fig.update_yaxes(automargin=True)
    return fig


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
                             marker_color=_colour(i),
                             hovertemplate=f"{plot_text(x)} %{{x}}<br>{plot_text(y)} %{{y:,}}"
                                           f"<extra>{plot_text(f'{color} {c}')}</extra>"))
    fig.update_xaxes(title_text=plot_text(x.replace("_", " ")))
    fig.update_yaxes(title_text=plot_text(y))
    return _layout(fig, title or f"{y} per key group of {op}", height, bargap=0, legend=color)


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
        fig.add_hline(y=mean, line_dash="dash", line_color=_colour(i), annotation_text=plot_text(f"mean {c}"))
    fig.update_xaxes(title_text=plot_text(x), dtick=1)
    fig.update_yaxes(title_text=plot_text(y))
    return _layout(fig, title or f"{y} per subtask of {op}", height, barmode="group", legend=color)


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
        fig.add_vline(x=int(df.loc[df["is_current"], x].iloc[0]), line_dash="dot", line_color="black",
                      annotation_text="now")
    fig.add_hline(y=1.0, line_color="lightgray")
    fig.update_xaxes(title_text=plot_text(x))
    fig.update_yaxes(title_text=plot_text(y.replace("_", " ")))
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
    fig.update_yaxes(title_text=plot_text(y))
    return _layout(fig, title or f"Hottest keys of {op} by {y}", height, legend=color)


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
    fig.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="equality", line=dict(color="lightgray",
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
    fig.update_yaxes(title_text=plot_text(f"share of {value}"), range=[0, 1], tickformat=".0%")
    return _layout(fig, title or f"Lorenz curve of {value} per key", height)


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
    fig.update_yaxes(title_text=plot_text(y))
    return _layout(fig, title or f"TTL expiry timeline{f' of {op}' if op else ''}", height, barmode="stack",
                   legend=color)


@document
def checkpoint_history(data_frame: pd.DataFrame, *, x: str = "checkpoint_id", y: str = "bytes",
                       color: str = "state", title: str | None = None, height: int | None = None) -> go.Figure:
    """State size per checkpoint, stacked by state (a ``history``), with the checkpoint duration as a line
    on a second axis and the incremental bytes as markers."""
    _need(data_frame, x, y)
    df = data_frame
    fig = go.Figure()
    if color in df.columns and df[color].notna().any():
        labels = df["operator"].astype(str) + "/" + df[color].astype(str) if "operator" in df.columns else df[color]
        for i, (c, g) in enumerate(df.assign(_label=labels).groupby("_label", sort=True, observed=True)):
            fig.add_trace(go.Bar(x=plot_categories(g[x]), y=g[y].fillna(0).to_numpy(), name=plot_text(c),
                                 marker_color=_colour(i)))
    else:
        fig.add_trace(go.Bar(x=plot_categories(df[x]), y=df[y].to_numpy(), name=plot_text(y), marker_color=_colour(0)))
    per_chk = df.drop_duplicates(x).sort_values(x)
    if "incremental_bytes" in df.columns:
        fig.add_trace(go.Scatter(x=plot_categories(per_chk[x]), y=per_chk["incremental_bytes"].to_numpy(), mode="markers",
                                 name="incremental bytes", marker=dict(symbol="diamond", size=10, color="black")))
    if "duration_ms" in df.columns:
        fig.add_trace(go.Scatter(x=plot_categories(per_chk[x]), y=per_chk["duration_ms"].to_numpy(), mode="lines+markers",
                                 name="duration (ms)", yaxis="y2", line=dict(color="#FF6692")))
        fig.update_layout(yaxis2=dict(title="duration (ms)", overlaying="y", side="right", showgrid=False,
                                      automargin=True, rangemode="tozero"))
    fig.update_xaxes(title_text="checkpoint", type="category")
    fig.update_layout(yaxis_title_text=plot_text(y))  # the left axis only: the right one is the duration
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
                                 increasing=dict(marker=dict(color="#EF553B")),
                                 decreasing=dict(marker=dict(color="#00CC96")),
                                 totals=dict(marker=dict(color="#636EFA"))))
    fig.update_yaxes(title_text=plot_text(value))
    return _layout(fig, title or f"Growth in {value} from a to b", height, showlegend=False)

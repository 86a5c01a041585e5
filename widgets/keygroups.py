"""The Key groups tab: load per key group coloured by owning subtask, and the rescale what-if.

Moving the parallelism slider re-assigns the snapshot's key groups to subtasks
exactly as Flink's rescaling does (``kg * p // max_parallelism``); nothing is
re-read: the per-key-group aggregates are summed per subtask again.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import numpy as np
import traitlets as t

from explorer.analysis.distribution import METRICS, imbalance_figures
from explorer.keygroups import operator_indices_for_key_groups
from explorer.escape import plot_text
from explorer.plots import INK, PALETTE, legend_above, measure_name, value_axis
from explorer.plots.palette import GUIDE

from ._base import View, figure, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea


def owns_text(max_parallelism: int, parallelism: int) -> str:
    """How many key groups each subtask owns, in words: a range only where the counts differ."""
    lo, hi = max_parallelism // parallelism, -(-max_parallelism // parallelism)
    if lo == hi:
        return "each subtask owns one key group" if lo == 1 else f"each subtask owns {lo} key groups"
    return f"each subtask owns {lo}–{hi} key groups"


class KeyGroupsTab(View):
    """Key-group distribution of one keyed operator at a chosen parallelism."""

    operator = t.Unicode(help="the keyed operator shown")
    metric = t.Enum(METRICS, default_value="bytes", help="the load drawn: entries, bytes, keys or records")
    parallelism = t.Int(1, help="the parallelism the key groups are assigned at (the what-if)")
    #: max/mean of the subtask loads at ``parallelism`` (1.0 is perfect balance)
    imbalance = t.Float(1.0, read_only=True)

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        ops = data.operator_names
        self.max_parallelism = data.layout(ops[0])[1] if ops else 1
        self.subtask_loads = np.zeros(0)
        self.operator_select = self.own(w.Dropdown(options=ops, description="operator"))
        self.metric_select = self.own(w.ToggleButtons(options=list(METRICS), value="bytes", description="load",
                                                      style={"button_width": "80px"}))
        self.parallelism_slider = self.own(w.IntSlider(min=1, max=self.max_parallelism, description="parallelism",
                                                       continuous_update=False,
                                                       layout=w.Layout(width="480px")))
        self.summary = self.own(w.HTML())
        self.key_group_figure = self.own(figure(340, bargap=0, showlegend=False))
        # a stable hook for the browser tests and user CSS (plotly's FigureWidget ignores DOM classes)
        self.parallelism_slider.add_class("sx-parallelism")
        self.subtask_figure = self.own(figure(330, showlegend=False))
        self.whatif_figure = self.own(figure(330, showlegend=True))
        self.key_group_figure.add_bar(x=[], y=[], name="key groups",
                                      hovertemplate="key group %{x}<br>%{y:,}<br>subtask %{customdata}<extra></extra>")
        self.key_group_figure.update_xaxes(title_text="key group")
        self.subtask_figure.add_bar(x=[], y=[], name="subtasks",
                                    hovertemplate="subtask %{x}<br>%{y:,}<extra></extra>")
        self.subtask_figure.update_xaxes(title_text="subtask", dtick=1)
        self.whatif_figure.add_scatter(x=[], y=[], mode="lines+markers", name="max / mean", line_color=PALETTE[0],
                                       marker=dict(size=4))
        self.whatif_figure.add_scatter(x=[], y=[], mode="markers", name="snapshot's parallelism",
                                       marker=dict(size=13, symbol="star", color=INK))
        self.whatif_figure.add_scatter(x=[], y=[], mode="markers", name="chosen", marker=dict(size=13, color=PALETTE[1]))
        legend_above(self.whatif_figure)  # below the plot it sat on the x axis title
        self.whatif_figure.update_xaxes(title_text="parallelism (subtasks)", tickformat=",d")
        self.whatif_figure.update_yaxes(title_text="heaviest subtask / mean", rangemode="tozero")
        t.link((self.operator_select, "value"), (self, "operator"))
        t.link((self.metric_select, "value"), (self, "metric"))
        t.link((self.parallelism_slider, "value"), (self, "parallelism"))
        self.on_change(["operator"], self._switch_operator, "choosing the operator")
        self.on_change(["metric", "parallelism"], self.update, "updating the key-group charts")
        if ops:
            self._switch_operator()
        else:
            self.summary.value = "<i>This snapshot has no keyed state.</i>"
        self.children = [
            w.HBox([self.operator_select, self.metric_select]),
            self.parallelism_slider,
            self.summary,
            self.key_group_figure,
            w.HBox([self.subtask_figure, self.whatif_figure]),
        ]
        for child in self.children:
            if isinstance(child, w.HBox):
                self.own(child)
        self.subtask_figure.layout.width = 480
        self.whatif_figure.layout.width = 500

    @t.validate("parallelism")
    def _check_parallelism(self, proposal: Any) -> int:
        p = int(proposal["value"])
        if not 0 < p <= self.max_parallelism:
            raise t.TraitError(f"parallelism must be in 1..{self.max_parallelism} (the max parallelism of "
                               f"{self.operator!r}; key groups cannot be split), found {p}")
        return p

    def _switch_operator(self) -> None:
        p, m = self.data.layout(self.operator)
        self.snapshot_parallelism = p
        self.max_parallelism = m
        self.parallelism_slider.max = m
        self._whatif_curve()
        if self.parallelism == p:
            self.update()
        else:
            self.parallelism = p  # the observer updates the figures

    def _loads(self, metric: str, p: int) -> np.ndarray:
        agg = self.data.key_group_aggregates(self.operator)
        sub = operator_indices_for_key_groups(self.max_parallelism, p, agg["key_group"].to_numpy())
        return np.bincount(sub, weights=agg[metric].to_numpy(np.float64, na_value=np.nan), minlength=p)  # NaN: unknown

    def _whatif_curve(self) -> None:
        m = self.max_parallelism
        ps = np.arange(1, m + 1)
        ratios = []
        for p in ps:
            f = imbalance_figures(self._loads(self.metric, int(p)))
            ratios.append(f["max_over_mean"])
        self._ratios = np.asarray(ratios, dtype=np.float64)
        p0 = self.snapshot_parallelism
        with self.whatif_figure.batch_update():
            self.whatif_figure.data[0].x = ps
            self.whatif_figure.data[0].y = self._ratios
            self.whatif_figure.data[1].x = [p0]
            self.whatif_figure.data[1].y = [self._ratios[p0 - 1]]
            self.whatif_figure.layout.title.text = f"Rescale what-if: {self.metric} balance at each parallelism"
        self._curve_metric = self.metric

    def update(self) -> None:
        """Recompute the subtask loads at ``parallelism`` and update the three figures in place."""
        if not self.operator:
            return
        if getattr(self, "_curve_metric", None) != self.metric:
            self._whatif_curve()
        m, p, metric = self.max_parallelism, self.parallelism, self.metric
        agg = self.data.key_group_aggregates(self.operator)
        kg = agg["key_group"].to_numpy()
        sub = operator_indices_for_key_groups(m, p, kg)
        values = agg[metric].to_numpy(np.float64, na_value=np.nan)  # NaN: traffic not counted, unknown
        loads = np.bincount(sub, weights=values, minlength=p)
        fig = imbalance_figures(loads)
        self.subtask_loads = loads
        self.set_trait("imbalance", float(fig["max_over_mean"]) if np.isfinite(fig["max_over_mean"]) else 1.0)
        colours = [subtask_colour(s) for s in range(p)]
        with self.key_group_figure.batch_update():
            bar = self.key_group_figure.data[0]
            bar.x = kg
            bar.y = values
            bar.customdata = sub
            bar.marker.color = [colours[s] for s in sub]
            self.key_group_figure.layout.title.text = (
                f"{measure_name(metric)} per key group of {plot_text(self.operator)}: {m} key groups on {p} subtask{'s' * (p != 1)}")
            value_axis(self.key_group_figure, metric, values, per="key group", hover=False)
            self.key_group_figure.update_xaxes(tickformat=",d", rangemode="tozero")
        with self.subtask_figure.batch_update():
            bar = self.subtask_figure.data[0]
            bar.x = np.arange(p)
            bar.y = loads
            bar.marker.color = colours
            self.subtask_figure.layout.shapes = [dict(type="line", xref="paper", x0=0, x1=1, y0=fig["mean"],
                                                      y1=fig["mean"], line=dict(dash="dash", color=GUIDE))]
            self.subtask_figure.layout.title.text = f"{measure_name(metric)} per subtask (dashed: mean)"
            value_axis(self.subtask_figure, metric, loads, per="subtask", hover=False)
        with self.whatif_figure.batch_update():
            self.whatif_figure.data[2].x = [p]
            self.whatif_figure.data[2].y = [self._ratios[p - 1]]
        current = " (the snapshot's)" if p == self.snapshot_parallelism else f" (snapshot: {self.snapshot_parallelism})"
        heaviest = int(np.argmax(loads)) if len(loads) else 0
        self.summary.value = (
            f"<b>{html.escape(str(self.operator))}</b> at parallelism <b>{p}</b>{current}, max parallelism {m}: "
            f"{owns_text(m, p)}; heaviest subtask <b>{heaviest}</b> carries "
            f"<b>{self.imbalance:.2f}×</b> the mean {html.escape(str(metric))}.")

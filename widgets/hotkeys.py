"""The Hot keys tab: top-N keys by bytes, entries or traffic, skew figures, and the salting what-if.

Salting splits one hot key into ``n`` sub-keys ``f"{key}#{i}"`` (as
:func:`explorer.analysis.salting_whatif` does); the what-if here works from the
cached per-key loads: the hot key's load leaves its subtask and is spread
evenly over the subtasks its sub-keys hash to.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import numpy as np
import traitlets as t

from explorer.analysis.hotkeys import gini, lorenz_curve, salted_key, top_share
from explorer.keygroups import assign_key_groups, operator_indices_for_key_groups

from ._base import View, figure, html_table, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea

#: ranking -> column of the per-key loads
BY = {"bytes": "bytes", "entries": "entries", "traffic": "records"}


class HotKeysTab(View):
    """The hottest keys of one operator and what salting the hottest would do to its subtasks."""

    operator = t.Unicode()
    by = t.Enum(tuple(BY), default_value="bytes", help="rank keys by state bytes, entries or traffic")
    n = t.Int(10, help="how many keys to show")
    salt = t.Int(4, help="sub-keys the hottest key is split into in the salting what-if")
    #: max/mean subtask load before and after salting
    imbalance_before = t.Float(1.0, read_only=True)
    imbalance_after = t.Float(1.0, read_only=True)

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        ops = data.operator_names
        self.operator_select = self.own(w.Dropdown(options=ops, description="operator"))
        self.by_select = self.own(w.ToggleButtons(options=list(BY), value="bytes", description="rank by",
                                                  style={"button_width": "80px"}))
        self.n_slider = self.own(w.IntSlider(value=10, min=1, max=50, description="top N", continuous_update=False))
        self.salt_slider = self.own(w.IntSlider(value=4, min=1, max=32, description="salt into",
                                                continuous_update=False))
        self.stats = self.own(w.HTML())
        self.table = self.own(w.HTML())
        self.hot_figure = self.own(figure(330, showlegend=False))
        self.hot_figure.add_bar(x=[], y=[], hovertemplate="%{x}<br>%{y:,}<br>subtask %{customdata}<extra></extra>")
        self.lorenz_figure = self.own(figure(330, showlegend=True, width=460))
        self.lorenz_figure.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="equality",
                                       line=dict(color="lightgray", dash="dash"))
        self.lorenz_figure.add_scatter(x=[], y=[], mode="lines", name="keys", line_color="#636EFA")
        self.lorenz_figure.update_xaxes(title_text="share of keys (smallest first)", range=[0, 1], tickformat=".0%")
        self.lorenz_figure.update_yaxes(range=[0, 1], tickformat=".0%")
        self.salt_figure = self.own(figure(330, showlegend=True, width=600, barmode="group"))
        self.salt_figure.add_bar(x=[], y=[], name="before", marker_color="#B0B0B0")
        self.salt_figure.add_bar(x=[], y=[], name="after salting")
        self.salt_figure.update_xaxes(title_text="subtask", dtick=1)
        t.link((self.operator_select, "value"), (self, "operator"))
        t.link((self.by_select, "value"), (self, "by"))
        t.link((self.n_slider, "value"), (self, "n"))
        t.link((self.salt_slider, "value"), (self, "salt"))
        self.on_change(["operator", "by", "n", "salt"], self.update, "updating the hot keys")
        self.children = [
            self.own(w.HBox([self.operator_select, self.by_select])),
            self.own(w.HBox([self.n_slider, self.salt_slider])),
            self.stats, self.hot_figure,
            self.own(w.HBox([self.lorenz_figure, self.salt_figure])),
            self.table,
        ]
        if ops:
            self.update()

    @t.validate("n")
    def _check_n(self, proposal: Any) -> int:
        if proposal["value"] < 1:
            raise t.TraitError(f"n must be at least 1 key, found {proposal['value']}")
        return int(proposal["value"])

    @t.validate("salt")
    def _check_salt(self, proposal: Any) -> int:
        if proposal["value"] < 1:
            raise t.TraitError(f"salt must be at least 1 sub-key, found {proposal['value']}")
        return int(proposal["value"])

    def _skew(self, col: str, values: np.ndarray) -> tuple[Any, float, float]:
        """Lorenz curve, Gini and top-1 % share of ``col`` (each sorts every key: cached)."""
        k = (self.operator, col)
        cache = self.__dict__.setdefault("_skew_cache", {})
        if k not in cache:
            cache[k] = (lorenz_curve(values), gini(values), top_share(values, 0.01))
        return cache[k]

    def _loads(self, col: str, p: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-key values of ``col`` and their sums per subtask (cached: a million keys each)."""
        k = (self.operator, col)
        cache = self.__dict__.setdefault("_loads_cache", {})
        if k not in cache:
            ks = self.data.key_stats(self.operator)
            values = ks[col].to_numpy(np.float64)
            cache[k] = (values, np.bincount(ks["subtask"].to_numpy(np.int64), weights=values, minlength=p))
        return cache[k]

    def update(self) -> None:
        if not self.operator:
            return
        col = BY[self.by]
        ks = self.data.key_stats(self.operator)
        p, m = self.data.layout(self.operator)
        values, loads = self._loads(col, p)
        n = min(self.n, len(ks))
        if n < len(values):  # the top n without sorting a million values
            part = np.argpartition(-values, n - 1)[:n]
            top_idx = part[np.lexsort((part, -values[part]))]
        else:
            top_idx = np.lexsort((np.arange(len(values)), -values))
        top = ks.iloc[top_idx]
        self.top = top.reset_index(drop=True)
        total = float(loads.sum())
        labels = [str(k) for k in top["key"]]
        with self.hot_figure.batch_update():
            bar = self.hot_figure.data[0]
            bar.x = labels
            bar.y = top[col].to_numpy()
            bar.customdata = top["subtask"].to_numpy()
            bar.marker.color = [subtask_colour(s) for s in top["subtask"]]
            self.hot_figure.layout.title.text = (f"Top {n} keys of {self.operator} by {self.by} "
                                                 "(colour: the subtask holding the key)")
            self.hot_figure.layout.yaxis.title.text = col
            self.hot_figure.layout.xaxis.type = "category"
        lc, g, t1 = self._skew(col, values)
        with self.lorenz_figure.batch_update():
            self.lorenz_figure.data[1].x = lc["key_share"].to_numpy()
            self.lorenz_figure.data[1].y = lc["load_share"].to_numpy()
            self.lorenz_figure.data[1].name = f"{self.operator} (Gini {g:.2f})"
            self.lorenz_figure.layout.title.text = f"Lorenz curve of {col} per key"
            self.lorenz_figure.layout.yaxis.title.text = f"share of {col}"
        # salting what-if for the hottest key
        after = loads.copy()
        if len(top) and total > 0:
            hot = top.iloc[0]
            v = float(hot[col])
            after[int(hot["subtask"])] -= v
            subkeys = [salted_key(hot["key"], i) for i in range(self.salt)]
            subs = operator_indices_for_key_groups(m, p, assign_key_groups(subkeys, m))
            np.add.at(after, subs, v / self.salt)
            hot_key = hot["key"]
        else:
            hot_key = None
        mean = loads.mean() if len(loads) and loads.mean() else 1.0
        self.set_trait("imbalance_before", float(loads.max() / mean) if len(loads) else 1.0)
        self.set_trait("imbalance_after", float(after.max() / mean) if len(after) else 1.0)
        self.salted_loads = after
        self.subtask_loads = loads
        with self.salt_figure.batch_update():
            self.salt_figure.data[0].x = np.arange(p)
            self.salt_figure.data[0].y = loads
            self.salt_figure.data[1].x = np.arange(p)
            self.salt_figure.data[1].y = after
            self.salt_figure.data[1].marker.color = [subtask_colour(s) for s in range(p)]
            self.salt_figure.layout.title.text = (f"Salting {hot_key!s} into {self.salt} sub-keys: "
                                                  f"max/mean {self.imbalance_before:.2f} → {self.imbalance_after:.2f}")
            self.salt_figure.layout.yaxis.title.text = f"{col} per subtask"
        top1 = float(values[top_idx[0]] / total) if len(top_idx) and total else 0.0
        self.stats.value = (
            f"{len(ks):,} keys · Gini <b>{g:.2f}</b> · top 1 % of keys hold <b>{t1:.0%}</b> · "
            f"hottest key <b>{html.escape(str(hot_key))}</b> holds <b>{top1:.1%}</b> of {col}"
            + (" <i>(traffic: counts of the engine's heavy-hitter sketch)</i>" if self.by == "traffic" else ""))
        shown = top[["key", "key_group", "subtask", "entries", "bytes", "records"]].copy()
        shown.insert(0, "rank", np.arange(1, len(shown) + 1))
        self.table.value = html_table(shown, max_rows=50)

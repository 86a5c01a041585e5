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
import pandas as pd
import traitlets as t

from explorer.analysis.hotkeys import gini, hottest_key, lorenz_curve, rank_order, salted_key, top_share
from explorer.escape import plot_text
from explorer.plots import measure_name, value_axis
from explorer.plots.format import formatter_for
from explorer.plots.palette import BASELINE, GUIDE, MUTED, PALETTE
from explorer.ranking import nth_largest
from explorer.keygroups import assign_key_groups, operator_indices_for_key_groups

from ._base import View, figure, html_table, show_drawn, show_empty, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea

#: ranking -> column of the per-key loads
BY = {"traffic": "records", "bytes": "bytes", "entries": "entries"}

#: where the snippets write the edited savepoint (a new folder; the user changes it in the cell)
EDIT_OUT = "out/edited-savepoint"


def _literal(v: Any) -> str:
    """``v`` as Python source that evaluates to it: repr (which escapes quotes, newlines and the rest of an
    untrusted key), NumPy scalars as plain Python ones and Tuple/Row keys (shown as dicts) as lists."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, tuple, str, bytes)):
        v = v.item()
    if isinstance(v, dict):
        return "[" + ", ".join(_literal(x) for x in v.values()) + "]"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    return repr(v)


def drop_key_code(path: Any, operator: str, key: Any, out: str = EDIT_OUT) -> str:
    """The editor call that drops one key's state of ``operator`` (every state and timer of the key)."""
    return ("import explorer\n\n"
            f"# every state and timer of this key of operator {_literal(operator)}, left out of a new savepoint\n"
            f"explorer.edit({_literal(str(path))}).drop_keys(operator={_literal(operator)}, keys=[{_literal(key)}])"
            f".write({_literal(out)})\n")


def salt_key_code(path: Any, operator: str, key: Any, n: int, out: str = EDIT_OUT) -> str:
    """What salting ``key`` into ``n`` sub-keys does to the subtasks, then the edit the salted job restores:
    the key's state dropped (its sub-keys ``key#0…`` start from empty state)."""
    p, op, k = _literal(str(path)), _literal(operator), _literal(key)
    return ("import explorer\n"
            "from explorer.analysis import salting_whatif\n\n"
            f"# the job keys by f\"{{key}}#{{i % {n}}}\" for this key: its load spread over {n} sub-keys\n"
            f"salting_whatif(explorer.open({p}), keys=[{k}], n={n}, operator={op})\n\n"
            "# the salted job's savepoint: the unsalted key's state dropped (its sub-keys start empty)\n"
            f"explorer.edit({p}).drop_keys(operator={op}, keys=[{k}]).write({_literal(out)})\n")


class HotKeysTab(View):
    """The hottest keys of one operator and what salting the hottest would do to its subtasks."""

    operator = t.Unicode()
    by = t.Enum(tuple(BY), default_value="bytes", help="rank keys by traffic, state bytes or entries "
                "(default: traffic where the snapshot counted it, else bytes)")
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
                                                  style={"button_width": "80px"},
                                                  tooltips=["records counted per key (heavy-hitter sketch)",
                                                            "serialized state bytes of the key",
                                                            "state entries of the key"]))
        self.n_slider = self.own(w.IntSlider(value=10, min=1, max=50, description="top N", continuous_update=False))
        self.salt_slider = self.own(w.IntSlider(value=4, min=1, max=32, description="salt into",
                                                continuous_update=False))
        self.stats = self.own(w.HTML())
        self.table = self.own(w.HTML())
        self.hot_figure = self.own(figure(330, showlegend=False))
        self.hot_figure.add_bar(x=[], y=[], hovertemplate="%{x}<br>%{customdata[1]}<br>subtask %{customdata[0]}"
                                                          "<extra></extra>")
        self.lorenz_figure = self.own(figure(330, showlegend=True, width=460))
        self.lorenz_figure.add_scatter(x=[0, 1], y=[0, 1], mode="lines", name="equality",
                                       line=dict(color=GUIDE, dash="dash"))
        self.lorenz_figure.add_scatter(x=[], y=[], mode="lines", name="keys", line_color=PALETTE[0])
        self.lorenz_figure.update_xaxes(title_text="share of keys (smallest first)", range=[0, 1], tickformat=".0%")
        self.lorenz_figure.update_yaxes(range=[0, 1], tickformat=".0%")
        self.salt_figure = self.own(figure(330, showlegend=True, width=600, barmode="group"))
        shown = "subtask %{x}<br>%{customdata}<extra>%{fullData.name}</extra>"
        self.salt_figure.add_bar(x=[], y=[], name="before", marker_color=BASELINE, hovertemplate=shown)
        self.salt_figure.add_bar(x=[], y=[], name="after salting", hovertemplate=shown)
        self.salt_figure.update_xaxes(title_text="subtask", dtick=1)
        self.key_select = self.own(w.Dropdown(options=[], description="key", layout=w.Layout(width="260px")))
        self.drop_button = self.own(w.Button(description="Drop this key's state", icon="trash",
                                             layout=w.Layout(width="auto"),  # 148 px cut it to "Drop this key's..."
                                             tooltip="a new cell with the editor call that drops this key's state"))
        self.salt_button = self.own(w.Button(description="Salt it", icon="random",
                                             tooltip="a new cell with the salting what-if and the edit"))
        self.snippet_area = self.own(w.HTML())
        #: the last snippet a button produced (put into a new cell under IPython, else shown to copy)
        self.snippet = ""
        self.drop_button.on_click(lambda _: self._offer(self.drop_code()))
        self.salt_button.on_click(lambda _: self._offer(self.salt_code()))
        t.link((self.operator_select, "value"), (self, "operator"))
        t.link((self.n_slider, "value"), (self, "n"))
        t.link((self.salt_slider, "value"), (self, "salt"))
        if ops and self.has_traffic(ops[0]):
            self.by_select.value = "traffic"  # the hottest by traffic where known, else by the largest state
        t.link((self.by_select, "value"), (self, "by"))
        self.on_change(["operator", "by", "n", "salt"], self.update, "updating the hot keys")
        self.children = [
            self.own(w.HBox([self.operator_select, self.by_select])),
            self.own(w.HBox([self.n_slider, self.salt_slider])),
            self.stats, self.hot_figure,
            self.own(w.HBox([self.lorenz_figure, self.salt_figure])),
            self.table,
            self.own(w.HBox([self.key_select, self.drop_button, self.salt_button])),
            self.snippet_area,
        ]
        if ops:
            self.update()

    # -- snippets -------------------------------------------------------------------------------------------
    def _key(self) -> Any:
        i = self.key_select.value
        if i is None or not len(self.top) or i >= len(self.top):
            raise ValueError("no key to edit: this operator shows no keys")
        return self.top["key"].iloc[i]

    def drop_code(self) -> str:
        """The editor snippet that drops the selected key's state (the hottest by default)."""
        return drop_key_code(self.data.snapshot.path, self.operator, self._key())

    def salt_code(self) -> str:
        """The salting what-if for the selected key and the edit a salted job restores from."""
        return salt_key_code(self.data.snapshot.path, self.operator, self._key(), self.salt)

    def _offer(self, code: str) -> None:
        """Put ``code`` into a new cell below (IPython's ``set_next_input``; nothing is run), else show it."""
        self.snippet = code
        shell = None
        try:
            from IPython import get_ipython

            shell = get_ipython()
        except ImportError:
            pass
        where = "in a new cell below" if shell is not None else "here: copy it into a cell"
        if shell is not None:
            shell.set_next_input(code)
        self.snippet_area.value = (f"<div style='font-size:11px;color:{MUTED}'>The code is {where} "
                                   "(nothing has been run):</div>"
                                   f"<pre style='user-select:all'>{html.escape(code)}</pre>")

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

    def _loads(self, col: str, p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-key values of ``col``, whether each is known, and the known values' sums per subtask (cached).

        Traffic is known only for the keys the heavy-hitter sketch holds; the others are
        unknown (NA), never counted as 0.
        """
        k = (self.operator, col)
        cache = self.__dict__.setdefault("_loads_cache", {})
        if k not in cache:
            ks = self.data.key_stats(self.operator)
            series = ks[col] if col in ks else pd.Series(np.zeros(len(ks)), dtype="Float64")
            known = series.notna().to_numpy(bool)
            values = series.to_numpy(dtype=np.float64, na_value=np.nan)
            loads = np.bincount(ks["subtask"].to_numpy(np.int64)[known], weights=values[known], minlength=p)
            cache[k] = (values, known, loads)
        return cache[k]

    def has_traffic(self, operator: str | None = None) -> bool:
        """Whether any key of ``operator`` has a counted traffic (the engine's heavy-hitter sketch)."""
        ks = self.data.key_stats(operator or self.operator)
        return "records" in ks and bool(ks["records"].notna().any())

    def _no_traffic(self, n_keys: int) -> None:
        message = "no traffic data: this snapshot counts no records per key"
        for fig in (self.hot_figure, self.lorenz_figure, self.salt_figure):
            show_empty(fig, message)
        self.top = self.data.key_stats(self.operator).iloc[0:0]
        self.key_select.options = []
        self.salted_loads = self.subtask_loads = np.zeros(0)
        self.set_trait("imbalance_before", 1.0)
        self.set_trait("imbalance_after", 1.0)
        self.stats.value = (f"{n_keys:,} keys · <b>no traffic data</b>: only the engine's own snapshots count "
                            "records per key (its heavy-hitter sketch). Rank by <b>bytes</b> or <b>entries</b> "
                            "to see the largest state.")
        self.table.value = ""

    def update(self) -> None:
        if not self.operator:
            return
        col = BY[self.by]
        ks = self.data.key_stats(self.operator)
        p, m = self.data.layout(self.operator)
        if col == "records" and not self.has_traffic():
            self._no_traffic(len(ks))
            return
        for fig in (self.hot_figure, self.lorenz_figure, self.salt_figure):
            show_drawn(fig)
        values, known, loads = self._loads(col, p)
        cand = np.flatnonzero(known)
        n = min(self.n, len(cand))
        # the top n without sorting a million values; ties by the analyses' one rule (explorer.analysis.rank_order)
        v = values[cand]
        if n < len(cand):
            cut = nth_largest(v, n)
            cand, v = cand[v >= cut], v[v >= cut]
        top_idx = cand[rank_order(v, ks["entries"].to_numpy()[cand], list(ks["key"].to_numpy()[cand]))][:n]
        # no hottest key where the largest value is shared (every key the same size): named, and not salted
        _, no_hottest = hottest_key(values[known], [None] * int(known.sum()), "records" if col == "records" else col)
        top = ks.iloc[top_idx]
        self.top = top.reset_index(drop=True)
        self.key_select.options = [(f"{i + 1}. {str(k)[:60]}", i) for i, k in enumerate(self.top["key"])]
        self.key_select.value = 0 if len(self.top) else None
        total = float(loads.sum())
        labels = [plot_text(k) for k in top["key"]]
        unit = "records" if col == "records" else col
        with self.hot_figure.batch_update():
            bar = self.hot_figure.data[0]
            bar.x = labels
            bar.y = values[top_idx]
            shown = formatter_for(unit)
            bar.customdata = [[int(sub), shown(v)] for sub, v in zip(top["subtask"], values[top_idx])]
            bar.marker.color = [subtask_colour(s) for s in top["subtask"]]
            self.hot_figure.layout.title.text = (f"Top {n} keys of {plot_text(self.operator)} by {self.by} "
                                                 "(colour: the subtask holding the key)")
            value_axis(self.hot_figure, unit, values[top_idx], per="key", hover=False)  # not bar.y: old inside a batch
            self.hot_figure.layout.xaxis.type = "category"
        kv = values[known]
        lc, g, t1 = self._skew(col, kv)
        with self.lorenz_figure.batch_update():
            self.lorenz_figure.data[1].x = lc["key_share"].to_numpy()
            self.lorenz_figure.data[1].y = lc["load_share"].to_numpy()
            self.lorenz_figure.data[1].name = f"keys (Gini {g:.2f})"
            self.lorenz_figure.layout.title.text = f"Lorenz curve of {measure_name(unit)} per key"
            self.lorenz_figure.layout.yaxis.title.text = f"share of {measure_name(unit)}"
        # salting what-if for the hottest key, on the measure ranked
        after = loads.copy()
        if len(top) and total > 0 and no_hottest is None:
            hot = top.iloc[0]
            hv = float(values[top_idx[0]])
            after[int(hot["subtask"])] -= hv
            subkeys = [salted_key(hot["key"], i) for i in range(self.salt)]
            subs = operator_indices_for_key_groups(m, p, assign_key_groups(subkeys, m))
            np.add.at(after, subs, hv / self.salt)
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
            self.salt_figure.data[0].customdata = [formatter_for(unit)(v) for v in loads]
            self.salt_figure.data[1].customdata = [formatter_for(unit)(v) for v in after]
            self.salt_figure.data[1].marker.color = [subtask_colour(s) for s in range(p)]
            # no hottest key: the reason in full is in the line above the figures (it ran off the 600 px figure)
            self.salt_figure.layout.title.text = (f"Salting {plot_text(hot_key)} into {self.salt} sub-keys: "
                                                  f"max/mean {self.imbalance_before:.2f} → {self.imbalance_after:.2f}"
                                                  if no_hottest is None else
                                                  f"No salting what-if: {plot_text(no_hottest.split(':')[0])}")
            # what it counts per subtask, in KB/MB or whole records, as the other figures (was "bytes", raw ticks)
            value_axis(self.salt_figure, unit, np.concatenate([loads, after]), per="subtask", hover=False)
        top1 = float(values[top_idx[0]] / total) if len(top_idx) and total else 0.0
        counted = ""
        if col == "records" and not known.all():
            counted = (f" <i>(traffic counted for {int(known.sum()):,} of {len(ks):,} keys, those the engine's "
                       "heavy-hitter sketch holds; the others are unknown, shown as –, and left out)</i>")
        elif col == "records":
            counted = " <i>(traffic: counts of the engine's heavy-hitter sketch, upper bounds)</i>"
        hot_text = "–" if hot_key is None else html.escape(str(hot_key))
        hottest = (f"hottest key <b>{hot_text}</b> holds <b>{top1:.1%}</b> of {unit}" if no_hottest is None
                   else f"<b>{html.escape(no_hottest)}</b> ({top1:.1%} of {unit} each)")
        self.stats.value = (
            f"{len(ks):,} keys · Gini <b>{g:.2f}</b> · top 1 % of keys hold <b>{t1:.0%}</b> · "
            f"{hottest}{counted}"
            f"<div style='font-size:11px;color:{MUTED}'>Gini: 0 when every key holds the same, towards 1 when one key "
            "holds everything. max/mean: the heaviest subtask's load over the mean subtask load (1.00 is perfect "
            "balance). Salting splits the hottest key into sub-keys <code>key#0…key#n-1</code> spread over their "
            "own key groups.</div>")
        shown = top[["key", "key_group", "subtask", "entries", "bytes", "records"]].copy()
        shown.insert(0, "rank", np.arange(1, len(shown) + 1))
        self.table.value = html_table(shown, max_rows=50,
                                      caption="records: the key's count in the heavy-hitter sketch; – unknown")

"""The Keys tab: search and page through keys, pick one to see all its state, key group and subtask."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as w
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import traitlets as t

from explorer.plots.format import MISSING, human_bytes, is_missing
from explorer.plots.palette import PAPER

from ._base import View, html_table, subtask_colour
from ._data import SnapshotData
from ._errors import ErrorArea

ORDERS = ("bytes", "entries", "key")


class KeysTab(View):
    """Per-key state: a searchable, sortable, paged key list and the picked key's entries in every state."""

    operator = t.Unicode(help="the keyed operator whose keys are listed")
    query = t.Unicode("", help="substring a key must contain (case-insensitive)")
    order = t.Enum(ORDERS, default_value="bytes", help="sort the keys by bytes, entries (largest first) or key")
    page = t.Int(0, help="the page shown, from 0")
    page_size = t.Int(20)
    key = t.Any(None, allow_none=True, help="the picked key (None: none picked)")
    #: how many keys match ``query``
    matches = t.Int(0, read_only=True)

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        self._strings: dict[str, pa.Array] = {}
        self._orders: dict[tuple[str, str], np.ndarray] = {}
        self._selected_rows = np.zeros(0, dtype=np.int64)
        self._page_rows = np.zeros(0, dtype=np.int64)
        ops = data.operator_names
        self.operator_select = self.own(w.Dropdown(options=ops, description="operator"))
        self.search = self.own(w.Text(placeholder="search keys (substring)", description="key",
                                      continuous_update=False))
        self.order_select = self.own(w.Dropdown(options=list(ORDERS), description="sort by",
                                                layout=w.Layout(width="200px")))
        self.prev_button = self.own(w.Button(description="◀ previous", layout=w.Layout(width="110px")))
        self.next_button = self.own(w.Button(description="next ▶", layout=w.Layout(width="110px")))
        self.page_label = self.own(w.HTML())
        self.key_list = self.own(w.Select(options=[], rows=self.page_size, layout=w.Layout(width="100%")))
        self.detail = self.own(w.HTML("<i>Pick a key to see all its state.</i>"))
        t.link((self.operator_select, "value"), (self, "operator"))
        t.link((self.search, "value"), (self, "query"))
        t.link((self.order_select, "value"), (self, "order"))
        self.prev_button.on_click(self.guarded(lambda _b: self._turn(-1), "turning the page"))
        self.next_button.on_click(self.guarded(lambda _b: self._turn(+1), "turning the page"))
        self.key_list.observe(self.guarded(self._picked, "picking a key"), names="value")
        self.on_change(["operator", "query", "order"], self._filter, "searching keys")
        self.on_change(["page"], self._show_page, "showing the page")
        self.on_change(["key"], self._show_key, "reading the key's state")
        self.children = [
            self.own(w.HBox([self.operator_select, self.search, self.order_select])),
            self.own(w.HBox([self.prev_button, self.next_button, self.page_label])),
            self.key_list,
            self.detail,
        ]
        if ops:
            self._filter()

    # --- model ------------------------------------------------------------------------------
    @t.validate("page")
    def _check_page(self, proposal: Any) -> int:
        page = int(proposal["value"])
        last = max(0, (self.matches - 1) // self.page_size)
        if not 0 <= page <= last:
            raise t.TraitError(f"page must be in 0..{last} ({self.matches} matching keys, {self.page_size} a page), "
                               f"found {page}")
        return page

    @property
    def keys_frame(self) -> pd.DataFrame:
        """The operator's keys: ``key, key_group, subtask, entries, bytes, records``."""
        return self.data.key_stats(self.operator)

    @property
    def page_keys(self) -> list[Any]:
        """The keys on the current page, in order."""
        return self.keys_frame["key"].to_numpy()[self._page_rows].tolist()

    def _key_strings(self) -> pa.Array:
        """The keys as lower-case Arrow strings (searched with Arrow kernels: fast on a million keys)."""
        if self.operator not in self._strings:
            keys = self.keys_frame["key"]
            try:
                arr = pa.array(keys.to_numpy(dtype=object), type=pa.string())
            except (pa.ArrowInvalid, pa.ArrowTypeError):  # non-string keys: search their str()
                arr = pa.array(keys.map(str).to_numpy(dtype=object), type=pa.string())
            self._strings[self.operator] = pc.utf8_lower(arr)
        return self._strings[self.operator]

    def _sorted(self) -> np.ndarray:
        k = (self.operator, self.order)
        if k not in self._orders:
            ks = self.keys_frame
            if self.order == "key":
                idx = pc.sort_indices(self._key_strings()).to_numpy()
            else:
                idx = np.argsort(-ks[self.order].to_numpy(), kind="stable")
            self._orders[k] = idx
        return self._orders[k]

    def _filter(self) -> None:
        order = self._sorted()
        q = self.query.strip().lower()
        if q:
            hit = pc.match_substring(self._key_strings(), q).to_numpy(zero_copy_only=False)
            order = order[hit[order]]
        self._selected_rows = order
        self.set_trait("matches", len(order))
        if self.page == 0:
            self._show_page()
        else:
            self.page = 0

    def _turn(self, step: int) -> None:
        last = max(0, (self.matches - 1) // self.page_size)
        self.page = min(max(self.page + step, 0), last)

    def _show_page(self) -> None:
        lo = self.page * self.page_size
        rows = self._selected_rows[lo: lo + self.page_size]
        self._page_rows = rows
        ks = self.keys_frame
        sub = ks.iloc[rows]
        labels = [f"{k!s}   ·  {e:,} entr{'y' if e == 1 else 'ies'}  ·  {human_bytes(b)}  ·  key group {g} → subtask {s}"
                  for k, e, b, g, s in zip(sub["key"], sub["entries"], sub["bytes"], sub["key_group"], sub["subtask"])]
        self.key_list.options = [(label, i) for i, label in enumerate(labels)]
        last = max(0, (self.matches - 1) // self.page_size)
        self.page_label.value = (f"&nbsp; page {self.page + 1} of {last + 1} &nbsp;·&nbsp; {self.matches:,} "
                                 f"key{'s' * (self.matches != 1)}{' matching ' + html.escape(repr(self.query)) if self.query else ''}")
        self.prev_button.disabled = self.page == 0
        self.next_button.disabled = self.page >= last

    def _picked(self, change: dict) -> None:
        i = change["new"]
        if i is None or i >= len(self._page_rows):
            return
        self.key = self.keys_frame["key"].iloc[int(self._page_rows[i])]

    def _show_key(self) -> None:
        key = self.key
        if key is None:
            self.detail.value = "<i>Pick a key to see all its state.</i>"
            return
        rows = self.data.snapshot.keyed_state(key=key)
        self.key_state = rows
        if not len(rows):
            self.detail.value = f"<b>{html.escape(repr(key))}</b>: no state in this snapshot."
            return
        kg = int(rows["key_group"].iloc[0])
        subs = sorted(set(int(s) for s in rows["subtask"]))
        badge = "".join(f"<span style='background:{subtask_colour(s)};color:{PAPER};padding:1px 6px;border-radius:3px;"
                        f"margin-right:4px'>subtask {s}</span>" for s in subs)
        per_state = rows.groupby(["operator", "state", "kind"], sort=True).agg(
            entries=("size_bytes", "size"), bytes=("size_bytes", "sum")).reset_index()
        shown = rows.drop(columns=["key", "key_group", "subtask"]).copy()
        shown["value"] = shown["value"].map(lambda v: MISSING if is_missing(v) else repr(v)[:120])
        self.detail.value = (
            f"<h4 style='margin:8px 0 4px'>{html.escape(repr(key))}</h4>"
            f"<div>key group <b>{kg}</b> of {self.data.layout(self.operator)[1]} &nbsp;{badge}</div>"
            + html_table(per_state) + "<div style='margin-top:6px'>entries:</div>" + html_table(shown, max_rows=200)
        )

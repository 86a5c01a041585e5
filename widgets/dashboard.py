"""The dashboard: one snapshot in tabs (Overview, Keys, Key groups, Hot keys, TTL, History, Diff).

``widgets.explore(path_or_snapshot)`` builds it. Each tab is a view with its
own traitlets model (see :mod:`widgets._base`); the dashboard shares one
loaded copy of the keyed state between them (:class:`widgets._data.SnapshotData`)
and one error area under the tabs.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import ipywidgets as w

from explorer.snapshot import Snapshot

from ._base import View
from ._data import SnapshotData
from ._errors import ErrorArea
from .diff import DiffTab
from .history import HistoryTab
from .hotkeys import HotKeysTab
from .keygroups import KeyGroupsTab
from .keys import KeysTab
from .overview import OverviewTab
from .ttl import TTLTab

#: (title, view class) of the tabs, in order
TABS = (
    ("Overview", OverviewTab),
    ("Keys", KeysTab),
    ("Key groups", KeyGroupsTab),
    ("Hot keys", HotKeysTab),
    ("TTL", TTLTab),
    ("History", HistoryTab),
    ("Diff", DiffTab),
)


class Dashboard(View):
    """All tabs over one snapshot; ``close()`` closes every widget in them."""

    def __init__(self, source: Snapshot | str | Path | SnapshotData, **kwargs: Any) -> None:
        errors = ErrorArea()
        super().__init__(errors, **kwargs)
        self._owns_errors = True
        self.data = SnapshotData.from_any(source)
        snap = self.data.snapshot
        self.add_class("state-explorer-dashboard")
        self.header = self.own(w.HTML(
            f"<div style='font-size:16px'><b>State Explorer</b> &nbsp;"
            f"<span style='color:#555'>{html.escape(snap.format)} {html.escape(snap.kind)}"
            f"{'' if snap.checkpoint_id is None else f' {snap.checkpoint_id}'} · "
            f"<code>{html.escape(str(snap.path))}</code></span></div>"))
        self.tabs: dict[str, View] = {}
        for title, cls in TABS:
            self.tabs[title] = self.own(cls(self.data, errors))
        self.tab = self.own(w.Tab(children=list(self.tabs.values()), titles=list(self.tabs)))
        self.children = [self.header, self.tab, errors]

    @property
    def overview_tab(self) -> OverviewTab:
        return self.tabs["Overview"]  # type: ignore[return-value]

    @property
    def keys_tab(self) -> KeysTab:
        return self.tabs["Keys"]  # type: ignore[return-value]

    @property
    def key_groups_tab(self) -> KeyGroupsTab:
        return self.tabs["Key groups"]  # type: ignore[return-value]

    @property
    def hot_keys_tab(self) -> HotKeysTab:
        return self.tabs["Hot keys"]  # type: ignore[return-value]

    @property
    def ttl_tab(self) -> TTLTab:
        return self.tabs["TTL"]  # type: ignore[return-value]

    @property
    def history_tab(self) -> HistoryTab:
        return self.tabs["History"]  # type: ignore[return-value]

    @property
    def diff_tab(self) -> DiffTab:
        return self.tabs["Diff"]  # type: ignore[return-value]

    def select(self, title: str) -> "Dashboard":
        """Show the tab called ``title``."""
        self.tab.selected_index = list(self.tabs).index(title)
        return self


def explore(source: Snapshot | str | Path, *, tab: str | None = None) -> Dashboard:
    """A dashboard over a snapshot, or a path to a checkpoint, savepoint or checkpoint directory.

    For a checkpoint directory (a folder of ``chk-N``) the newest checkpoint is shown and the
    History and Diff tabs cover all of them.
    """
    dash = Dashboard(source)
    if tab is not None:
        dash.select(tab)
    return dash

"""The dashboard: one snapshot in tabs (Overview, Keys, Key groups, Hot keys, TTL, History, Diff).

``widgets.explore(path_or_snapshot)`` builds it. Each tab is a view with its
own traitlets model (see :mod:`widgets._base`); the dashboard shares one
loaded copy of the keyed state between them (:class:`widgets._data.SnapshotData`)
and one error area under the tabs.

A tab is built the first time it is shown (or asked for, e.g. ``dash.ttl_tab``), once:
what the user sees first is not held up by figures of tabs not opened yet. plotly.js
itself goes to the page once per kernel (:mod:`widgets._plotly`), not with every figure.

What shows first costs least: this module imports only ipywidgets (the tabs, pandas, plotly and
the readers are imported when the first tab builds), a deferred dashboard opens its snapshot
after its loading line is on screen, the Overview answers from the metadata before the keyed
state is read, and a loading line moves while a tab builds (:mod:`widgets._progress`).
"""

from __future__ import annotations

import html
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ipywidgets as w

from explorer.plots.palette import MUTED

from ._errors import ErrorArea, failed_html
from ._progress import watching
from ._view import View, loading_html

if TYPE_CHECKING:
    from explorer.snapshot import Snapshot

    from ._data import SnapshotData

#: the tabs' titles, in order
TITLES = ("Overview", "Keys", "Key groups", "Hot keys", "TTL", "History", "Diff")


def tab_class(title: str) -> type[View]:
    """The view class of the tab called ``title``, imported when first needed: the tabs import pandas, plotly
    and the analyses (seconds in a fresh kernel), which must not delay a dashboard's loading line."""
    from .diff import DiffTab
    from .history import HistoryTab
    from .hotkeys import HotKeysTab
    from .keygroups import KeyGroupsTab
    from .keys import KeysTab
    from .overview import OverviewTab
    from .ttl import TTLTab

    return dict(zip(TITLES, (OverviewTab, KeysTab, KeyGroupsTab, HotKeysTab, TTLTab, HistoryTab, DiffTab)))[title]


def _kernel_shell() -> Any:
    """The IPython shell of a running Jupyter kernel, or None (plain Python, a terminal, tests)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython comes with ipywidgets
        return None
    shell = get_ipython()
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


class Dashboard(View):
    """All tabs over one snapshot; ``close()`` closes every widget in them.

    A tab is built the first time it is shown; while it builds, its pane shows what it is
    doing (a spinner and a line), sent to the browser before the work starts. In a Jupyter
    kernel the first tab is built just after the cell that made the dashboard has displayed
    it (``defer=True``, the default there), so the dashboard and its loading line appear at
    once and the snapshot is read after. ``defer=True`` outside a kernel builds no tab until one
    is asked for (``view``, ``select``, a ``*_tab`` property).
    """

    def __init__(self, source: Snapshot | str | Path | SnapshotData, tab: str = "Overview",
                 defer: bool | None = None, **kwargs: Any) -> None:
        options = {k: kwargs.pop(k) for k in ("ttl", "uids") if k in kwargs}
        errors = ErrorArea()
        super().__init__(errors, **kwargs)
        self._owns_errors = True
        self.titles = list(TITLES)
        if tab not in self.titles:
            raise ValueError(f"no tab {tab!r}; the tabs are {self.titles}")
        shell = _kernel_shell()
        if defer is None:
            defer = shell is not None
        self._source, self._options = source, options
        # a SnapshotData can only be passed once widgets._data was imported (not imported here: it is heavy)
        data_module = sys.modules.get("widgets._data")
        self._data: SnapshotData | None = (source if data_module is not None
                                           and isinstance(source, data_module.SnapshotData) else None)
        #: per tab, seconds (``time.perf_counter``) when it was asked for, first showed an answer and was complete
        self.timings: dict[str, dict[str, float]] = {}
        self.add_class("state-explorer-dashboard")
        self.header = self.own(w.HTML(self._header()))
        #: the tabs built so far, by title
        self.tabs: dict[str, View] = {}
        self._panes = {title: self.own(w.VBox()) for title in self.titles}
        self._loading = {title: self.own(w.HTML(loading_html(LOADING.get(title, f"Building {title}…"))))
                         for title in self.titles}
        for title, pane in self._panes.items():
            pane.children = [self._loading[title]]
        self.tab = self.own(w.Tab(children=list(self._panes.values()), titles=self.titles))
        self.tab.selected_index = self.titles.index(tab)
        self.tab.observe(self.guarded(self._selected, "opening a tab"), names="selected_index")
        self.children = [self.header, self.tab, errors]
        # A deferred dashboard shows its header and loading line before the snapshot is even opened (opening
        # one registers the readers, seconds on a cold kernel); a path that is not there still fails here.
        if not defer or (isinstance(source, (str, Path)) and not Path(source).exists()):
            self.data  # noqa: B018 - opened now: its errors raise from the constructor
        if not defer:
            self.view(tab)
        elif shell is not None:
            def build_first(*_args: Any) -> None:
                shell.events.unregister("post_execute", build_first)
                if self.tab is not None and self.tab.comm is not None:
                    self.guarded(self.view, f"building the {tab} tab")(tab)

            shell.events.register("post_execute", build_first)

    @property
    def data(self) -> SnapshotData:
        """The snapshot shown and its keyed state, opened on first use."""
        if self._data is None:
            from ._data import SnapshotData

            self._data = SnapshotData.from_any(self._source, **self._options)
            self.header.value = self._header()
        return self._data

    def _header(self, failed: bool = False) -> str:
        if self._data is None:
            what, path = "could not open" if failed else "opening", str(self._source)
        else:
            snap = self._data.snapshot
            what = (f"{snap.format} {snap.kind}{'' if snap.checkpoint_id is None else f' {snap.checkpoint_id}'}")
            path = str(snap.path)
        return (f"<div style='font-size:16px'><b>State Explorer</b> &nbsp;<span style='color:{MUTED}'>"
                f"{html.escape(what)} · <code>{html.escape(path)}</code></span></div>")

    def view(self, title: str) -> View:
        """The tab called ``title``, built now if it was not yet.

        The pane shows the tab's loading line, kept current while it builds (the time so far, the
        readers' progress bars, Spark's stages: :mod:`widgets._progress`). A tab with a cheap first
        answer (``STAGED``, the Overview's metadata) shows it before the expensive rest is computed.
        """
        if title not in self.tabs:
            cls = tab_class(title)
            pane = self._panes[title]
            loading = self._loading[title]
            pane.children = [loading]  # sent before the work starts
            times = self.timings.setdefault(title, {"asked": time.perf_counter()})
            what = LOADING.get(title, f"Building {title}…")
            try:
                with watching(loading, what, loading_html):
                    staged = getattr(cls, "STAGED", False)
                    built = self.own(cls(self.data, self.errors, **({"staged": True} if staged else {})))
                    self.tabs[title] = built
                    pane.children = [built]
                    times["first answer"] = time.perf_counter()
            except Exception as exc:
                # the loading line (and an "opening" header) must not spin on forever: the error replaces it
                opened = self._data is not None
                loading.value = failed_html(exc, f"building the {title} tab" if opened else "opening the snapshot")
                if not opened:
                    self.header.value = self._header(failed=True)
                raise
            if staged:
                with watching(built.pending, built.PENDING, loading_html):
                    built.fill()
            times["complete"] = time.perf_counter()
        return self.tabs[title]

    def _selected(self, change: dict) -> None:
        if change["new"] is not None:
            self.view(self.titles[change["new"]])

    def build_selected(self) -> View:
        """Build the selected tab now (what a deferred dashboard does once it has been displayed)."""
        return self.view(self.titles[self.tab.selected_index or 0])

    @property
    def overview_tab(self) -> OverviewTab:
        return self.view("Overview")  # type: ignore[return-value]

    @property
    def keys_tab(self) -> KeysTab:
        return self.view("Keys")  # type: ignore[return-value]

    @property
    def key_groups_tab(self) -> KeyGroupsTab:
        return self.view("Key groups")  # type: ignore[return-value]

    @property
    def hot_keys_tab(self) -> HotKeysTab:
        return self.view("Hot keys")  # type: ignore[return-value]

    @property
    def ttl_tab(self) -> TTLTab:
        return self.view("TTL")  # type: ignore[return-value]

    @property
    def history_tab(self) -> HistoryTab:
        return self.view("History")  # type: ignore[return-value]

    @property
    def diff_tab(self) -> DiffTab:
        return self.view("Diff")  # type: ignore[return-value]

    @property
    def snapshot(self) -> Snapshot:
        """The snapshot shown."""
        return self.data.snapshot

    def select(self, title: str) -> "Dashboard":
        """Show the tab called ``title`` (building it if needed)."""
        self.view(title)
        self.tab.selected_index = self.titles.index(title)
        return self


#: what each tab's loading line says
LOADING = {
    "Overview": "Reading the snapshot's keyed state…",
    "Keys": "Listing the keys…",
    "Key groups": "Summing the load per key group…",
    "Hot keys": "Ranking the keys…",
    "TTL": "Sorting expiry times…",
    "History": "Reading every checkpoint of the directory…",
    "Diff": "Comparing two checkpoints…",
}


def explore(source: Snapshot | str | Path, *, tab: str = "Overview", **options: Any) -> Dashboard:
    """A dashboard over a snapshot, or a path to a checkpoint, savepoint or checkpoint directory.

    For a checkpoint directory (a folder of ``chk-N``) the newest checkpoint is shown and the
    History and Diff tabs cover all of them. ``options`` go to :func:`explorer.open` for a path
    (``ttl={"state": timedelta(hours=1)}`` and ``uids=[...]`` for Apache Flink snapshots).
    """
    return Dashboard(source, tab=tab, **options)

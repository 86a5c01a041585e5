"""The Diff tab: pick two checkpoints and see keys added, removed and changed, and where the bytes went."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as w
import traitlets as t

from explorer.analysis import diff, diff_summary, growth_by_key
from explorer.plots import diff_waterfall
from explorer.snapshot import Snapshot, retained_checkpoints
from explorer.snapshot import open as open_snapshot

from ._base import View, figure, html_table, replace_figure
from ._data import SnapshotData
from ._errors import ErrorArea


class DiffTab(View):
    """Diff of checkpoint ``a`` to checkpoint ``b`` (paths), with a waterfall and the keys that grew most."""

    a = t.Unicode(help="path of the older snapshot")
    b = t.Unicode(help="path of the newer snapshot")

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        self._open: dict[str, Snapshot] = {str(data.snapshot.path): data.snapshot}
        options = [(p.name, str(p)) for p in retained_checkpoints(data.checkpoint_dir)] if data.checkpoint_dir else []
        if str(data.snapshot.path) not in [v for _, v in options]:
            options.append((f"opened: {data.snapshot.path.name}", str(data.snapshot.path)))
        if len(options) < 2:  # no figure made: each one costs the browser a plotly model
            self.children = [self.own(w.HTML(
                "<i>Diff needs two checkpoints: open a checkpoint directory (a folder of chk-N), or call "
                "<code>explorer.diff(explorer.open(a), explorer.open(b))</code>.</i>"))]
            return
        self.a_select = self.own(w.Dropdown(options=options, description="from a"))
        self.b_select = self.own(w.Dropdown(options=options, description="to b"))
        self.summary_table = self.own(w.HTML())
        self.growth_table = self.own(w.HTML())
        self.waterfall = self.own(figure(360))
        t.link((self.a_select, "value"), (self, "a"))
        t.link((self.b_select, "value"), (self, "b"))
        self.on_change(["a", "b"], self.update, "diffing the checkpoints")
        with self.hold_trait_notifications():
            self.a = options[-2][1]
            self.b = options[-1][1]
        self.children = [self.own(w.HBox([self.a_select, self.b_select])), self.waterfall,
                         self.own(w.HTML("<h4>Per state</h4>")), self.summary_table,
                         self.own(w.HTML("<h4>Keys that grew most</h4>")), self.growth_table]

    def snapshot(self, path: str) -> Snapshot:
        if path not in self._open:
            self._open[path] = open_snapshot(path)
        return self._open[path]

    def update(self) -> None:
        if not self.a or not self.b:
            return
        a, b = self.snapshot(self.a), self.snapshot(self.b)
        d = diff(a, b)
        self.result = d
        name_a, name_b = Path(self.a).name, Path(self.b).name
        fig = diff_waterfall(d, title=f"State serialized bytes from {name_a} to {name_b}: added, removed and changed keys")
        replace_figure(self.waterfall, fig)
        self.summary_table.value = html_table(diff_summary(d))
        self.growth_table.value = html_table(growth_by_key(d, 15))

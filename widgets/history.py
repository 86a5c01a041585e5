"""The History tab: checkpoint sizes, deltas and durations over a checkpoint directory."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import ipywidgets as w
import traitlets as t

from explorer.analysis import checkpoint_summary, history
from explorer.plots import PALETTE, checkpoint_history, legend_above, value_axis
from explorer.escape import plot_text

from ._base import View, figure, html_table, replace_figure
from ._data import SnapshotData
from ._errors import ErrorArea


#: the duration columns of a history and their colours
DURATIONS = (("duration_ms", PALETTE[1]), ("sync_ms", PALETTE[2]), ("async_ms", PALETTE[3]), ("alignment_ms", PALETTE[5]))

#: what the History tab's sizes are, by what the history's ``bytes`` count (its ``attrs["bytes_measure"]``):
#: the checkpoint's files (the engine's), a Flink state's serialized values (Flink stores no per-state file
#: sizes: the same measure as the Overview's), the files each Spark batch wrote
BYTES_MEASURE = {"file bytes": "bytes (files on disk)",
                 "serialized bytes": "serialized bytes (values, not files)",
                 "new file bytes": "new file bytes (written by each batch)"}


class HistoryTab(View):
    """Size (stacked by state), incremental and total deltas, and durations of every checkpoint."""

    metric = t.Enum(("bytes", "entries", "keys"), default_value="bytes")

    def __init__(self, data: SnapshotData, errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.data = data
        self.directory: Path | None = data.checkpoint_dir
        if self.directory is None:  # no figures made: each one costs the browser a plotly model
            self.history = None
            self.children = [self.own(w.HTML(
                "<i>History needs a checkpoint directory (a folder of chk-N): open one with "
                "<code>widgets.explore('path/to/checkpoints')</code>.</i>"))]
            return
        self.history = history(self.directory)
        self.summary = checkpoint_summary(self.history)
        self.metric_select = self.own(w.ToggleButtons(options=["bytes", "entries", "keys"], value="bytes",
                                                      description="size as", style={"button_width": "80px"}))
        self.size_figure = self.own(figure(340))
        self.delta_figure = self.own(figure(300, barmode="group", width=470))
        # Flink and Spark store no durations: no figure then (an empty one would be drawn), a line saying so
        self.duration_figure = self.own(figure(300, width=470)) if any(
            c in self.summary and self.summary[c].notna().any() for c, _ in DURATIONS) else None
        self.table = self.own(w.HTML())
        t.link((self.metric_select, "value"), (self, "metric"))
        self.on_change(["metric"], self.update, "drawing the checkpoint history")
        self._draw_static()
        self.update()
        durations = self.duration_figure if self.duration_figure is not None else self.own(w.HTML(
            "<i>No checkpoint durations: this format's checkpoints do not record them.</i>"))
        n = len(self.summary)
        # what the history could not tell (a checkpoint half deleted, bytes no state has of its own), said here
        notes = "".join(f"<br><i>{html.escape(str(note))}</i>" for note in self.history.attrs.get("notes") or [])
        self.children = [self.own(w.HTML(f"<b>{n}</b> checkpoint{'s' * (n != 1)} in "
                                         f"<code>{html.escape(str(self.directory))}</code>{notes}")),
                         self.metric_select, self.size_figure,
                         self.own(w.HBox([self.delta_figure, durations])), self.table]

    def _draw_static(self) -> None:
        s = self.summary
        x = [plot_text(c) for c in s["checkpoint_id"]]
        with self.delta_figure.batch_update():
            self.delta_figure.add_bar(x=x, y=s["incremental_bytes"].to_numpy(), name="new files (incremental)",
                                      marker_color=PALETTE[0])
            self.delta_figure.add_bar(x=x, y=s["delta_bytes"].to_numpy(), name="change in total size",
                                      marker_color=PALETTE[4])
            self.delta_figure.update_layout(title_text="File bytes each checkpoint added", xaxis_title="checkpoint")
            legend_above(self.delta_figure, width=400)
            value_axis(self.delta_figure, "delta_bytes", list(s["incremental_bytes"]) + list(s["delta_bytes"]),
                       per="checkpoint", title="bytes (files on disk) per checkpoint")
        if self.duration_figure is not None:
            with self.duration_figure.batch_update():
                for col, colour in DURATIONS:
                    if col in s and s[col].notna().any():
                        self.duration_figure.add_scatter(x=x, y=s[col].to_numpy(), mode="lines+markers",
                                                         name=col.replace("_ms", ""), line_color=colour)
                self.duration_figure.update_layout(title_text="Checkpoint durations", xaxis_title="checkpoint")
                legend_above(self.duration_figure, width=400)
                value_axis(self.duration_figure, "duration_ms",
                           [v for c, _ in DURATIONS if c in s for v in s[c]], per="checkpoint",
                           title="duration per checkpoint")
        self.table.value = html_table(s.drop(columns=["path"]))

    def update(self) -> None:
        h = self.history
        metric = self.metric
        if metric == "keys" and h["keys"].isna().all():
            raise ValueError("this history has no key counts (history(..., keys=False))")
        counted = h.attrs.get("bytes_measure", "bytes")
        measure = BYTES_MEASURE.get(counted, counted) if metric == "bytes" else metric
        fig = checkpoint_history(h, y=metric,
                                 title=f"State {measure} per checkpoint, stacked by operator / state")
        replace_figure(self.size_figure, fig)

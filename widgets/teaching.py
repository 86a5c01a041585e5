"""Teaching views: one checkpoint step by step from the engine's own trace, and how keys are routed.

* :class:`CheckpointStepper` replays one checkpoint of a job the engine ran
  with ``StreamEnvironment(trace=True)``: the job graph (one node per subtask,
  one line per channel), barriers travelling through the channels, a
  multi-input subtask blocking the channels whose barrier has arrived and
  buffering what comes in behind it while it aligns (exactly-once), or not
  blocking (at-least-once), or snapshotting at once with its in-flight records
  (unaligned), each subtask's snapshot, and the checkpoint completing. Nothing
  is simulated here: every step is a trace event the engine recorded.
* :class:`KeyRouting` shows keys falling into key groups
  (``murmur(javaHashCode(key)) % maxParallelism``) and key groups into
  subtasks (``keyGroup * parallelism // maxParallelism``) as you move the
  parallelism.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import ipywidgets as w
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import traitlets as t

from explorer.keygroups import assign_to_key_group, check_parallelism, java_hash_code, murmur_hash
from explorer.keygroups import operator_index_for_key_group
from explorer.plots.palette import GUIDE, INK, PALETTE, PAPER, QUIET, WAITING

from ._base import TABLE_CSS, TEMPLATE, View, figure, replace_figure, subtask_colour
from ._errors import ErrorArea

# --- checkpoint step-through ------------------------------------------------------------------

NODE_COLOURS = {"running": WAITING, "aligning": PALETTE[4], "snapshotted": PALETTE[2], "finished": QUIET}
CHANNEL_STYLES = {
    "idle": dict(color=GUIDE, width=1.5, dash="solid"),
    "barrier in flight": dict(color=PALETTE[1], width=3, dash="dash"),
    "blocked": dict(color=PALETTE[4], width=5, dash="solid"),
    "not blocked": dict(color=PALETTE[3], width=3, dash="dot"),
    "barrier passed": dict(color=PALETTE[2], width=2.5, dash="solid"),
}


_TAG = re.compile(r"<[^>]*>")


@dataclass
class Step:
    """The state of every subtask and channel just after one trace event."""

    index: int
    round: int
    kind: str
    subtask: str
    caption: str
    nodes: dict[str, str]
    channels: dict[tuple[str, str], str]
    #: records sent into a channel after its barrier, while its consumer had not snapshotted yet
    behind_barrier: dict[tuple[str, str], int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The caption as plain text (for ``print``): its HTML tags dropped and entities decoded."""
        return html.unescape(_TAG.sub("", self.caption))


def _mode_of(runtime: Any) -> str:
    cfg = getattr(runtime.env, "checkpoint_config", None)
    if cfg is None:
        return "exactly-once"
    if cfg.unaligned:
        return "unaligned"
    return "at-least-once" if cfg.mode.name == "AT_LEAST_ONCE" else "exactly-once"


def build_steps(events: pd.DataFrame, nodes: Sequence[str], channels: Sequence[tuple[str, str]], checkpoint: int,
                mode: str) -> list[Step]:
    """The steps of checkpoint ``checkpoint`` from a trace frame (``Trace.to_frame()``)."""
    ev = events.reset_index(drop=True)
    start = ev.index[(ev["kind"] == "checkpoint_triggered") & (ev["checkpoint"] == checkpoint)]
    if not len(start):
        found = sorted(int(c) for c in ev.loc[ev["kind"] == "checkpoint_triggered", "checkpoint"].dropna())
        raise ValueError(f"the trace has no checkpoint {checkpoint}; it has {found} "
                         "(was the job run with StreamEnvironment(trace=True) and checkpointing on?)")
    end = ev.index[(ev["kind"] == "checkpoint_completed") & (ev["checkpoint"] == checkpoint)]
    stop = int(end[0]) if len(end) else len(ev) - 1
    ev = ev.iloc[int(start[0]): stop + 1]
    node = {n: "running" for n in nodes}
    chan = {c: "idle" for c in channels}
    behind: dict[tuple[str, str], int] = {}
    outs: dict[str, list[tuple[str, str]]] = {}
    ins: dict[str, list[tuple[str, str]]] = {}
    for c in channels:
        outs.setdefault(c[0], []).append(c)
        ins.setdefault(c[1], []).append(c)
    steps: list[Step] = []

    def add(row: Any, name: str, caption: str) -> None:
        steps.append(Step(len(steps), int(row["round"]), row["kind"], name, caption, dict(node), dict(chan),
                          {k: v for k, v in behind.items() if v}))

    for row in ev.to_dict("records"):
        kind = row["kind"]
        name = f"{row['task']}[{int(row['subtask'])}]" if row["subtask"] >= 0 else "coordinator"
        if kind == "route":
            c = (name, row.get("to"))
            if chan.get(c) in ("blocked", "not blocked", "barrier passed") and node.get(c[1]) != "snapshotted":
                behind[c] = behind.get(c, 0) + int(row.get("records") or 0)
            continue
        if kind in ("watermark", "timer", "end_of_input") or row.get("checkpoint") != checkpoint:
            if kind == "end_of_input" and name in node:
                node[name] = "finished" if node[name] != "snapshotted" else node[name]
            continue
        if kind == "checkpoint_triggered":
            what = "savepoint" if row.get("savepoint") is True else "checkpoint"
            add(row, name, f"The checkpoint coordinator triggers {what} <b>{checkpoint}</b> ({mode}). Each "
                           "source will snapshot its read position and send a barrier into every output channel.")
        elif kind == "barrier_forwarded":
            for c in outs.get(name, []):
                if chan[c] == "idle":
                    chan[c] = "barrier in flight"
            n_out = len(outs.get(name, []))
            add(row, name, f"<b>{name}</b> sends the barrier downstream into all {n_out} of its output channels. "
                           "Records it emits from now on belong to the next checkpoint." if n_out else
                           f"<b>{name}</b> has no downstream channels: its part of the checkpoint is done.")
        elif kind == "barrier_received":
            c = (str(row.get("channel")), name)
            aligned, of = int(row.get("aligned") or 0), int(row.get("of") or 0)
            waiting = aligned < of
            if mode == "exactly-once" and waiting:
                chan[c] = "blocked"
                node[name] = "aligning"
                more = (f"It has {aligned} of {of} barriers: it <b>blocks</b> this channel and buffers whatever "
                        "arrives on it behind the barrier, while it keeps reading the channels whose barrier has "
                        "not come yet (alignment). That is what makes the snapshot exactly-once.")
            elif mode == "at-least-once" and waiting:
                chan[c] = "not blocked"
                node[name] = "aligning"
                more = (f"It has {aligned} of {of} barriers but does <b>not</b> block this channel: records behind "
                        "the barrier are processed before the snapshot, so after a failure they are replayed and "
                        "counted twice (at-least-once), in exchange for no alignment delay.")
            elif mode == "unaligned" and node[name] != "snapshotted":
                chan[c] = "barrier passed"
                more = ("Unaligned: the first barrier is enough. The barrier overtakes the records queued in the "
                        "channels, and those records are stored in the checkpoint as in-flight state.")
            elif mode == "unaligned":
                chan[c] = "barrier passed"
                more = (f"It has already snapshotted at the first barrier; this one ({aligned} of {of}) only "
                        "closes the channel's in-flight records for the checkpoint. Nothing waits: unaligned "
                        "checkpoints never align their inputs.")
            else:
                chan[c] = "barrier passed"
                for other in ins.get(name, []):
                    if chan[other] in ("blocked", "not blocked"):
                        chan[other] = "barrier passed"
                more = (f"That was the last one ({aligned} of {of}): its inputs are aligned."
                        if mode == "exactly-once" else
                        f"That was the last one ({aligned} of {of}): every input's barrier has arrived.")
            add(row, name, f"<b>{name}</b> receives the barrier from <b>{c[0]}</b>. {more}")
        elif kind == "snapshot":
            node[name] = "snapshotted"
            for other in ins.get(name, []):
                if chan[other] in ("blocked", "not blocked"):
                    chan[other] = "barrier passed"
            is_source = not ins.get(name)
            what = "its read position (source offsets)" if is_source else "its state"
            add(row, name, f"<b>{name}</b> snapshots {what} (synchronous part {row.get('sync_ms', 0):.2f} ms); "
                           "the copy is written asynchronously and acknowledged to the coordinator."
                + (" Its blocked channels are released." if mode == "exactly-once" and not is_source else ""))
        elif kind == "checkpoint_completed":
            for c in chan:
                if chan[c] != "idle":
                    chan[c] = "barrier passed"
            size = row.get("bytes")
            add(row, name, f"Every subtask has acknowledged: checkpoint <b>{checkpoint}</b> is <b>complete</b>"
                           + (f" ({int(size):,} bytes)" if size == size and size is not None else "")
                           + ". It is now the point a failed job restarts from.")
        elif kind == "checkpoint_aborted":
            reason = str(row.get("reason"))
            add(row, name, f"Checkpoint <b>{checkpoint}</b> is <b>aborted</b>: {reason}. "
                + ("A newer checkpoint completed first, so this one would never be restored from; its files are "
                   "removed once its writes end, and the output it staged is committed with the newer one."
                   if reason.startswith("subsumed") else
                   "Its files are removed; the last completed checkpoint stays the one a failed job restarts from."))
    return steps


def _graph(runtime: Any) -> tuple[list[str], list[tuple[str, str]], dict[str, tuple[float, float]], list[str]]:
    nodes, pos, tasks = [], {}, []
    for col, spec in enumerate(runtime.specs):
        subs = runtime.tasks[spec.id]
        tasks.append(spec.name)
        for i, st in enumerate(subs):
            nodes.append(st.name)
            pos[st.name] = (float(col), (len(subs) - 1) / 2.0 - i)
    channels = [(ch.source, ch.target) for st in runtime.subtasks for ch in st.inputs]
    return nodes, channels, pos, tasks


class CheckpointStepper(View):
    """Step through one checkpoint of a traced job: ``CheckpointStepper(result, checkpoint=1)``.

    ``result`` is what ``env.execute()`` returns or a ``JobClient`` (anything with a
    ``.runtime`` run with ``StreamEnvironment(trace=True)``).
    """

    step = t.Int(0, help="the step shown, from 0")

    def __init__(self, result: Any, checkpoint: int | None = None, errors: ErrorArea | None = None,
                 **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        runtime = result.runtime
        if not runtime.trace.enabled:
            raise ValueError("the job ran without a trace: build it with StreamEnvironment(trace=True)")
        events = runtime.trace.to_frame()
        triggered = events.loc[events["kind"] == "checkpoint_triggered", "checkpoint"] if len(events) else []
        if checkpoint is None:
            if not len(triggered):
                raise ValueError("the trace holds no checkpoint: enable checkpointing or trigger one")
            checkpoint = int(triggered.iloc[0])
        self.checkpoint = checkpoint
        self.mode = _mode_of(runtime)
        self.nodes, self.channels, self.positions, self.tasks = _graph(runtime)
        self.steps = build_steps(events, self.nodes, self.channels, checkpoint, self.mode)
        self.prev_button = self.own(w.Button(description="◀ previous", layout=w.Layout(width="110px")))
        self.next_button = self.own(w.Button(description="next ▶", layout=w.Layout(width="110px")))
        # the slider counts steps from 1, as the figure's title does ("step 6 of 22"); the model from 0
        self.slider = self.own(w.IntSlider(min=1, max=max(len(self.steps), 1), description="step",
                                           layout=w.Layout(width="420px")))
        self.caption = self.own(w.HTML(layout=w.Layout(min_height="60px")))
        self.graph = self.own(figure(120 + 90 * max(len(runtime.tasks[s.id]) for s in runtime.specs),
                                     showlegend=False))
        self._draw_static()
        t.link((self.slider, "value"), (self, "step"), transform=(lambda v: v - 1, lambda s: s + 1))
        self.prev_button.on_click(self.guarded(lambda _b: self._move(-1), "going back a step"))
        self.next_button.on_click(self.guarded(lambda _b: self._move(+1), "going forward a step"))
        self.on_change(["step"], self.update, "drawing the step")
        self.legend = self.own(w.HTML(self._legend_html()))
        self.children = [self.own(w.HBox([self.prev_button, self.next_button, self.slider])), self.caption,
                         self.graph, self.legend]
        self.update()

    @t.validate("step")
    def _check_step(self, proposal: Any) -> int:
        s = int(proposal["value"])
        if not 0 <= s < max(len(self.steps), 1):
            raise t.TraitError(f"step must be in 0..{len(self.steps) - 1}, found {s}")
        return s

    @property
    def current(self) -> Step:
        return self.steps[self.step]

    def _move(self, by: int) -> None:
        self.step = min(max(self.step + by, 0), len(self.steps) - 1)

    def _draw_static(self) -> None:
        fig = self.graph
        with fig.batch_update():
            for src, dst in self.channels:
                (x0, y0), (x1, y1) = self.positions[src], self.positions[dst]
                fig.add_scatter(x=[x0, x1], y=[y0, y1], mode="lines", hoverinfo="text",
                                text=f"{src} → {dst}", line=dict(CHANNEL_STYLES["idle"]))
            xs = [self.positions[n][0] for n in self.nodes]
            ys = [self.positions[n][1] for n in self.nodes]
            fig.add_scatter(x=xs, y=ys, mode="markers+text", text=self.nodes, textposition="top center",
                            marker=dict(size=26, line=dict(width=1.5, color=INK)), hoverinfo="text")
            fig.update_xaxes(visible=False, range=[-0.5, len(self.tasks) - 0.5])
            fig.update_yaxes(visible=False, range=[min(ys) - 0.7, max(ys) + 0.8])
            fig.update_layout(margin=dict(l=20, r=20, t=50, b=20))

    def _legend_html(self) -> str:
        chans = " ".join(f"<span style='border-bottom:{max(2, int(s['width']))}px {'dashed' if s['dash'] == 'dash' else 'dotted' if s['dash'] == 'dot' else 'solid'} {s['color']};margin-right:14px'>{k}</span>"
                         for k, s in CHANNEL_STYLES.items())
        nodes = " ".join(f"<span style='background:{c};padding:1px 6px;border-radius:8px;margin-right:8px'>{k}</span>"
                         for k, c in NODE_COLOURS.items())
        return f"<div style='font-size:12px'>subtasks: {nodes}<br>channels: {chans}</div>"

    def update(self) -> None:
        if not self.steps:
            self.caption.value = "<i>No steps.</i>"
            return
        s = self.current
        fig = self.graph
        annotations = []
        with fig.batch_update():
            for i, c in enumerate(self.channels):
                fig.data[i].line = CHANNEL_STYLES[s.channels[c]]
                n = s.behind_barrier.get(c, 0)
                if n and s.channels[c] in ("blocked", "not blocked"):
                    (x0, y0), (x1, y1) = self.positions[c[0]], self.positions[c[1]]
                    status = s.channels[c]
                    verb = "buffered" if status == "blocked" else "behind the barrier"
                    annotations.append(dict(x=x0 + 0.65 * (x1 - x0), y=y0 + 0.65 * (y1 - y0), text=f"{n} {verb}",
                                            showarrow=False, bgcolor=PAPER, font=dict(size=11)))
            nodes = fig.data[len(self.channels)]
            nodes.marker.color = [NODE_COLOURS[s.nodes[n]] for n in self.nodes]
            nodes.text = [f"{n}{' ✓' if s.nodes[n] == 'snapshotted' else ''}" for n in self.nodes]
            nodes.marker.line.width = [4 if n == s.subtask else 1.5 for n in self.nodes]
            fig.layout.annotations = annotations
            fig.layout.title.text = (f"Checkpoint {self.checkpoint} ({self.mode}): step {s.index + 1} of "
                                     f"{len(self.steps)}, round {s.round}")
        self.caption.value = f"<div style='font-size:14px;padding:4px 0'>{s.caption}</div>"
        self.prev_button.disabled = self.step == 0
        self.next_button.disabled = self.step >= len(self.steps) - 1


# --- key routing ---------------------------------------------------------------------------------

DEFAULT_KEYS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory",
                "niaj")


class KeyRouting(View):
    """Keys -> key groups -> subtasks, for a max parallelism and a parallelism you choose."""

    key_names = t.List(t.Any(), help="the keys routed (not ``keys``: that name is the widget's synced-state list)")
    max_parallelism = t.Int(16, help="the number of key groups")
    parallelism = t.Int(2, help="the number of subtasks")

    def __init__(self, keys: Sequence[Any] = DEFAULT_KEYS, max_parallelism: int = 16, parallelism: int = 2,
                 errors: ErrorArea | None = None, **kwargs: Any) -> None:
        super().__init__(errors, **kwargs)
        self.max_select = self.own(w.Dropdown(options=[4, 8, 16, 32, 64, 128], value=max_parallelism,
                                              description="max parallelism", style={"description_width": "110px"}))
        self.slider = self.own(w.IntSlider(value=parallelism, min=1, max=max_parallelism, description="parallelism",
                                           continuous_update=False, layout=w.Layout(width="420px")))
        self.keys_text = self.own(w.Text(value=", ".join(map(str, keys)), description="keys",
                                         continuous_update=False, layout=w.Layout(width="720px")))
        self.figure = self.own(figure(120 + 26 * max(len(keys), 12), showlegend=False))
        self.table = self.own(w.HTML())
        self.max_parallelism = max_parallelism
        self.parallelism = parallelism
        self.key_names = list(keys)
        t.link((self.max_select, "value"), (self, "max_parallelism"))
        t.link((self.slider, "value"), (self, "parallelism"))
        self.keys_text.observe(self.guarded(self._keys_typed, "reading the keys"), names="value")
        self.on_change(["key_names", "max_parallelism", "parallelism"], self.update, "routing the keys")
        self.children = [self.keys_text, self.own(w.HBox([self.max_select, self.slider])), self.figure, self.table]
        self.update()

    @t.validate("max_parallelism")
    def _check_max(self, proposal: Any) -> int:
        m = int(proposal["value"])
        if not 0 < m <= 32768:
            raise t.TraitError(f"max parallelism must be in 1..32768, found {m}")
        self.slider.max = m
        if self.parallelism > m:
            self.parallelism = m
        return m

    @t.validate("parallelism")
    def _check_parallelism(self, proposal: Any) -> int:
        p = int(proposal["value"])
        try:
            check_parallelism(p, self.max_parallelism)
        except Exception as exc:  # noqa: BLE001 - the key-group rule's own message
            raise t.TraitError(str(exc)) from exc
        return p

    def _keys_typed(self, change: dict) -> None:
        self.key_names = [k.strip() for k in change["new"].split(",") if k.strip()]

    def routes(self) -> pd.DataFrame:
        """``key, java_hash, key_group, subtask`` of every key."""
        m, p = self.max_parallelism, self.parallelism
        rows = []
        for k in self.key_names:
            kg = assign_to_key_group(k, m)
            rows.append({"key": k, "java_hash": java_hash_code(k), "murmur": murmur_hash(java_hash_code(k)),
                         "key_group": kg, "subtask": operator_index_for_key_group(m, p, kg)})
        return pd.DataFrame(rows, columns=["key", "java_hash", "murmur", "key_group", "subtask"])

    def update(self) -> None:
        m, p = self.max_parallelism, self.parallelism
        r = self.routes()
        self.result = r
        n = max(len(r), 1)
        key_y = np.linspace(1, 0, n) if n > 1 else np.array([0.5])
        kg_y = np.linspace(1, 0, m) if m > 1 else np.array([0.5])
        sub_y = np.linspace(1, 0, p) if p > 1 else np.array([0.5])
        owner = [operator_index_for_key_group(m, p, g) for g in range(m)]
        fig = go.Figure()
        for s in range(p):  # key group -> subtask lines, one colour per subtask
            xs, ys = [], []
            for g in range(m):
                if owner[g] == s:
                    xs += [1, 2, None]
                    ys += [kg_y[g], sub_y[s], None]
            fig.add_scatter(x=xs, y=ys, mode="lines", line=dict(color=subtask_colour(s), width=1), opacity=0.35,
                            hoverinfo="skip")
        for row, y in zip(r.itertuples(index=False), key_y):
            fig.add_scatter(x=[0, 1], y=[y, kg_y[row.key_group]], mode="lines",
                            line=dict(color=subtask_colour(row.subtask), width=2.5), hoverinfo="skip")
        fig.add_scatter(x=np.zeros(len(r)), y=key_y[: len(r)], mode="markers+text", text=[str(k) for k in r["key"]],
                        textposition="middle left", marker=dict(size=10, color=[subtask_colour(s) for s in r["subtask"]]),
                        hovertext=[f"{k}: java hash {h}, key group {g}, subtask {s}" for k, h, g, s in
                                   zip(r["key"], r["java_hash"], r["key_group"], r["subtask"])], hoverinfo="text")
        used = set(r["key_group"])
        fig.add_scatter(x=np.ones(m), y=kg_y, mode="markers+text" if m <= 32 else "markers",
                        text=[str(g) for g in range(m)], textposition="middle right",
                        marker=dict(size=9 if m <= 32 else 5, symbol="square",
                                    color=[subtask_colour(owner[g]) if g in used else PAPER for g in range(m)],
                                    line=dict(color=[subtask_colour(owner[g]) for g in range(m)], width=1.5)),
                        hovertext=[f"key group {g} → subtask {owner[g]}" for g in range(m)], hoverinfo="text")
        fig.add_scatter(x=np.full(p, 2), y=sub_y, mode="markers+text", text=[f"subtask {s}" for s in range(p)],
                        textposition="middle right", marker=dict(size=18, color=[subtask_colour(s) for s in range(p)]),
                        hoverinfo="skip")
        for x, label in ((0, "keys"), (1, f"{m} key groups"), (2, f"{p} subtasks")):
            fig.add_annotation(x=x, y=1.08, text=f"<b>{label}</b>", showarrow=False, yref="y")
        fig.update_xaxes(visible=False, range=[-0.8, 2.6])
        fig.update_yaxes(visible=False, range=[-0.05, 1.12])
        fig.update_layout(template=TEMPLATE, title=f"key group = murmur(javaHashCode(key)) % {m};  "
                                                   f"subtask = key group × {p} // {m}")
        replace_figure(self.figure, fig)
        per = pd.Series(owner).value_counts().reindex(range(p), fill_value=0)
        ranges = ", ".join(f"<span style='color:{subtask_colour(s)}'>subtask {s}: key groups "
                           f"{owner.index(s)}–{m - 1 - owner[::-1].index(s)}</span>" for s in range(p) if per[s])
        self.table.value = (f"<div style='font-size:13px'>{ranges}</div>"
                            + TABLE_CSS + r.to_html(index=False, border=0, classes="sx-table"))

"""A loading line that moves: what a long read is doing, while it runs, instead of a frozen spinner.

A tab's first build reads the snapshot in the kernel's main thread (a Spark checkpoint through
Spark can take half a minute). While it runs, :func:`watching` keeps a loading line current from
a daemon thread: the time so far, the progress bars the readers open (``tqdm``: "reading Spark state
through Spark 1/3 states, agg/default"), and, when a local Spark session is running jobs, its
active stages with their finished and total tasks (:func:`explorer.spark_session.spark_stages`,
the poll :func:`~explorer.spark_session.spark_progress` uses). The widget's new value is sent from that thread
(ipykernel sends comm messages from any thread); nothing is sent when the line has not changed.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator

import ipywidgets as w
from tqdm.std import tqdm

from explorer.spark_session import spark_stages

#: seconds between two updates of the line
INTERVAL = 0.5


def _bars(skip: set[int]) -> list[str]:
    """One line per live tqdm bar not in ``skip`` (ids of bars that existed before the watch began)."""
    with tqdm.get_lock():
        bars = [b for b in list(tqdm._instances) if id(b) not in skip]
    out = []
    for b in bars:
        if getattr(b, "disable", False):
            continue
        total = getattr(b, "total", None)
        n = getattr(b, "n", 0)
        unit = getattr(b, "unit", "it")
        postfix = getattr(b, "postfix", None)
        desc = getattr(b, "desc", "") or ""
        if getattr(b, "spark_progress", False):  # explorer.spark_session.spark_progress: the stages come once, below
            postfix = None
        if total == 1 and unit == "it":  # a step, not a count ("starting Spark")
            out.append(desc + (f" ({postfix})" if postfix else ""))
            continue
        done = f"{n:,.0f}/{total:,.0f} {unit}" if total else f"{n:,.0f} {unit}"
        out.append(f"{desc}: {done}" + (f" ({postfix})" if postfix else ""))
    return out


class ProgressLine:
    """The text of a loading line: ``what``, the time so far, live progress bars and Spark stages."""

    def __init__(self, what: str, render: Callable[[str], str]) -> None:
        self.what = what
        self.render = render
        self.started = time.monotonic()
        with tqdm.get_lock():
            self._skip = {id(b) for b in list(tqdm._instances)}

    def text(self) -> str:
        seconds = time.monotonic() - self.started
        parts = [f"{self.what} {seconds:.0f} s"] if seconds >= 1 else [self.what]
        return " · ".join(parts + _bars(self._skip) + spark_stages())

    def poll(self, widget: w.HTML) -> None:
        """Put the current line into ``widget`` (sends a message only when it changed)."""
        value = self.render(self.text())
        if widget.value != value:
            widget.value = value


@contextmanager
def watching(widget: w.HTML, what: str, render: Callable[[str], str]) -> Iterator[ProgressLine]:
    """Keep ``widget`` showing ``render(line)`` of the work in the ``with`` block, every :data:`INTERVAL` s."""
    line = ProgressLine(what, render)
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(INTERVAL):
            if widget.comm is None:  # closed meanwhile
                return
            try:
                line.poll(widget)
            except Exception:  # noqa: BLE001 - a progress line must never break the read it describes
                return

    thread = threading.Thread(target=run, name="state-explorer-progress", daemon=True)
    thread.start()
    try:
        yield line
    finally:
        stop.set()
        thread.join(timeout=2 * INTERVAL)

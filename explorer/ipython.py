"""The IPython extension: ``%load_ext explorer``.

* ``%explore PATH`` opens the snapshot at PATH and returns the dashboard
  (``widgets.explore(snapshot)``) when the ``widgets`` package is importable, so
  the notebook shows it once, as the cell's result (``dash = %explore out/sp``
  keeps it; ``dash.snapshot`` is the opened snapshot). Without ``widgets`` it
  prints the terminal summary (:func:`explorer.report.summary_text`) and returns
  nothing, so the summary is not followed by the snapshot's own display.
* Snapshots display richly in notebooks (``Snapshot._repr_html_``), and the
  extension registers the same for IPython's HTML formatter.

The explorer never imports ``widgets`` at module level (the import direction is
widgets -> explorer); the dashboard is looked up by name when ``%explore`` runs.
"""

from __future__ import annotations

import importlib
import shlex
from typing import Any, Callable

from .errors import StateExplorerError
from .report import summary_text
from .snapshot import Snapshot
from .snapshot import open as open_snapshot

#: how the dashboard is found: module and function name (looked up at call time)
DASHBOARD = ("widgets", "explore")


def find_dashboard() -> Callable[[Any], Any] | None:
    """``widgets.explore`` if the widgets package is installed and has it, else None."""
    module, name = DASHBOARD
    try:
        mod = importlib.import_module(module)
    except ImportError:
        return None
    fn = getattr(mod, name, None)
    return fn if callable(fn) else None


def explore(line: str, printer: Callable[[str], Any] = print) -> Any:
    """The body of ``%explore PATH``: open, then return the dashboard, or print the summary and return None.

    Nothing is displayed here: a dashboard returned is shown by the notebook as the cell's
    result, once (displaying it here as well showed it beside the snapshot's own display).
    """
    args = shlex.split(line)
    if len(args) != 1:
        printer("usage: %explore PATH  (a checkpoint, savepoint or checkpoint directory)")
        return None
    try:
        snap = open_snapshot(args[0])
    except StateExplorerError as exc:
        printer(f"state-explorer: {exc}")
        return None
    dashboard = find_dashboard()
    if dashboard is not None:
        return dashboard(snap)
    printer(summary_text(snap))
    return None


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%explore`` and the HTML display of snapshots on ``ipython`` (an InteractiveShell)."""
    def _explore(line: str) -> Any:
        return explore(line)

    _explore.__doc__ = explore.__doc__
    ipython.register_magic_function(_explore, magic_kind="line", magic_name="explore")
    formatter = ipython.display_formatter.formatters.get("text/html")
    if formatter is not None:
        formatter.for_type(Snapshot, lambda s: s._repr_html_())


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext explorer``: drop the HTML formatter (IPython keeps magics until restart)."""
    formatter = ipython.display_formatter.formatters.get("text/html")
    if formatter is not None:
        formatter.type_printers.pop(Snapshot, None)

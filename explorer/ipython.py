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
widgets -> explorer); the dashboard is looked up by name when ``%explore`` runs, from the folder the
installed ``explorer`` package lives in (:func:`import_installed`), never from the kernel's working folder:
that folder comes first on ``sys.path`` and may be a snapshot's, holding a ``widgets.py`` someone else wrote.
The notebook "Open in State Explorer" makes (widgets/labextension) starts with :func:`notebook_cell`'s code,
which drops the working folder from ``sys.path`` before it imports anything.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from .errors import StateExplorerError
from .report import summary_text
from .snapshot import Snapshot
from .snapshot import open as open_snapshot

#: how the dashboard is found: module and function name (looked up at call time)
DASHBOARD = ("widgets", "explore")


#: the folder the installed ``explorer`` (and ``widgets``, the same distribution) is imported from
INSTALLED_ROOT = Path(__file__).resolve().parents[1]

#: the first lines of a generated notebook: the working folder (the kernel's, maybe a snapshot's) off
#: ``sys.path`` before anything is imported (``sys`` and ``os`` are imported by Python itself at start-up)
SAFE_PRELUDE = ("import sys, os  # State Explorer: the installed package only, never a module beside this notebook\n"
                "sys.path[:] = [p for p in sys.path if p not in ('', '.') and os.path.abspath(p) != os.getcwd()]\n")


def import_installed(module: str) -> Any:
    """The module ``module`` of the installed distribution: found in :data:`INSTALLED_ROOT` only (never in the
    working folder, which comes first on ``sys.path``). A module of that name already imported from elsewhere
    is refused with a :class:`StateExplorerError`; ImportError when it is not installed."""
    have = sys.modules.get(module)
    if have is not None:
        places = [getattr(have, "__file__", None), *(getattr(have, "__path__", None) or ())]
        file = next((f for f in places if f and not Path(f).resolve().is_relative_to(INSTALLED_ROOT)), None)
        if file is not None:
            raise StateExplorerError(f"{file!r}: the module {module!r} was imported from there; expected "
                                     f"the installed one under {INSTALLED_ROOT} (a {module}.py beside a snapshot "
                                     "or notebook? restart the kernel)")
        return have
    spec = importlib.machinery.PathFinder.find_spec(module, [str(INSTALLED_ROOT)])
    if spec is None or spec.loader is None:
        raise ImportError(f"no module {module!r} under {INSTALLED_ROOT}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(module, None)
        raise
    return mod


def notebook_cell(snapshot: str) -> str:
    """The first cell of a notebook that opens ``snapshot`` (a path from the notebook's folder) in the dashboard:
    :data:`SAFE_PRELUDE`, then the installed ``widgets`` (what the JupyterLab command writes; its
    ``cellSource`` in widgets/labextension/src/index.js builds the same text)."""
    return SAFE_PRELUDE + "import widgets\n\nwidgets.explore(" + json.dumps(snapshot or ".", ensure_ascii=False) + ")"


def find_dashboard() -> Callable[[Any], Any] | None:
    """``widgets.explore`` if the widgets package is installed and has it, else None (from the installed
    distribution only: :func:`import_installed`)."""
    module, name = DASHBOARD
    try:
        mod = import_installed(module)
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
    try:
        dashboard = find_dashboard()
    except StateExplorerError as exc:
        printer(f"state-explorer: {exc}")
        return None
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

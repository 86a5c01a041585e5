"""ipywidgets dashboards over State Explorer snapshots.

>>> import widgets
>>> widgets.explore("sample_data/url_counts/checkpoints")   # doctest: +SKIP

``explore`` is the one entry point; the dashboard's tabs and the teaching views
(:class:`CheckpointStepper`, :class:`KeyRouting`) can be used on their own.
``widgets`` imports ``explorer``, never the reverse.
"""

import importlib

from ._errors import ErrorArea
from .dashboard import Dashboard, explore

#: the views, imported on first use (they import pandas, plotly and the analyses: ``import widgets`` and a
#: dashboard's loading line come first)
_LAZY = {
    "CheckpointStepper": "teaching", "KeyRouting": "teaching", "DiffTab": "diff", "HistoryTab": "history",
    "HotKeysTab": "hotkeys", "KeyGroupsTab": "keygroups", "KeysTab": "keys", "OverviewTab": "overview",
    "TTLTab": "ttl",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CheckpointStepper",
    "Dashboard",
    "DiffTab",
    "ErrorArea",
    "HistoryTab",
    "HotKeysTab",
    "KeyGroupsTab",
    "KeyRouting",
    "KeysTab",
    "OverviewTab",
    "TTLTab",
    "explore",
]

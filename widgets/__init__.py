"""ipywidgets dashboards over State Explorer snapshots.

>>> import widgets
>>> widgets.explore("sample_data/url_counts/checkpoints")   # doctest: +SKIP

``explore`` is the one entry point; the dashboard's tabs and the teaching views
(:class:`CheckpointStepper`, :class:`KeyRouting`) can be used on their own.
``widgets`` imports ``explorer``, never the reverse.
"""

from ._errors import ErrorArea
from .dashboard import Dashboard, explore
from .diff import DiffTab
from .history import HistoryTab
from .hotkeys import HotKeysTab
from .keygroups import KeyGroupsTab
from .keys import KeysTab
from .overview import OverviewTab
from .teaching import CheckpointStepper, KeyRouting
from .ttl import TTLTab

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

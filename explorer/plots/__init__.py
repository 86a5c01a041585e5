"""Plotly figures of the analyses, in the style of plotly express.

Each function is ``fn(data_frame, *, columns..., title=None) -> go.Figure`` and
takes the DataFrame an :mod:`explorer.analysis` function returns:

==========================  ================================================
function                    data frame
==========================  ================================================
:func:`key_group_bars`      ``key_group_distribution``
:func:`subtask_bars`        ``subtask_distribution`` or ``salting_whatif``
:func:`rescale_comparison`  ``rescale_whatif``
:func:`hot_key_bars`        ``hot_keys``
:func:`lorenz_curve`        ``key_stats``
:func:`ttl_timeline`        ``ttl_expiry``
:func:`checkpoint_history`  ``history``
:func:`diff_waterfall`      ``diff``
==========================  ================================================

``PALETTE`` (the one palette: subtask colours, cycled per trace), ``EXPIRED_COLOR``, ``INK`` and
``GUIDE`` are the colours the figures use (:mod:`explorer.plots.palette` names them all, ``COLOURS``); :func:`legend_above`,
:func:`value_axis` and :func:`measure_name` give their legends and value axes their look (counts
as integers, bytes in KB/MB, durations, "serialized bytes per subtask"), for dashboards that
draw beside them.
"""

from .palette import COLOURS, EXPIRED_COLOR, GUIDE, INK, PALETTE

#: the figure functions (the colours above are public too, for dashboards, but not figures)
__all__ = [
    "checkpoint_history",
    "diff_waterfall",
    "hot_key_bars",
    "key_group_bars",
    "lorenz_curve",
    "rescale_comparison",
    "subtask_bars",
    "ttl_timeline",
]

#: what :mod:`._charts` gives, loaded on first use (PEP 562): the palette and :mod:`.format` need no plotly,
#: so a dashboard's loading line and the CLI's ``ls`` take them without importing plotly
_CHART_NAMES = frozenset(__all__) | {"legend_above", "measure_name", "value_axis", "MEASURES"}


def __getattr__(name: str):
    if name in _CHART_NAMES:
        from . import _charts

        return getattr(_charts, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

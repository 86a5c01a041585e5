"""Finding 6: plotly reads labels as its own small HTML: a key ``<a href="https://evil.example">/api/search</a>``
showed as "/api/search" and was a live link in reports and dashboards. Every figure of :mod:`explorer.plots`, fed
the analyses of a crafted snapshot (keys and an operator name that are markup), holds no raw ``<a`` or ``<img`` in
any string of its JSON."""

from __future__ import annotations

import re

import pandas as pd
import pytest

import explorer
from explorer import plots
from explorer.analysis import checkpoint_summary, history, key_stats
from explorer.escape import plot_text
from tests.security.crafted import HOSTILE_HTML, HOSTILE_LINK, hostile_job

RAW = re.compile(r"<\s*(a|img)\b", re.I)


def _strings(node, path="fig"):
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, f"{path}.{k}")
    elif isinstance(node, (list, tuple)):
        for i, v in enumerate(node):
            yield from _strings(v, f"{path}[{i}]")
    elif hasattr(node, "tolist"):
        yield from _strings(node.tolist(), path)


def _raw_markup(fig) -> list[tuple[str, str]]:
    return [(p, s) for p, s in _strings(fig.to_plotly_json()) if RAW.search(s)]


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    sp, chk = hostile_job(tmp_path_factory.mktemp("hostile-plots"))
    return explorer.open(sp), chk


def _figures(crafted):
    snap, chk = crafted
    hot = snap.hot_keys(10)
    assert HOSTILE_LINK in set(hot["key"])  # the crafted keys are among the hottest
    a, b = sorted(p for p in chk.iterdir() if p.name.startswith("chk-"))[:2]
    ttl = pd.DataFrame({"operator": [HOSTILE_HTML] * 2, "state": [HOSTILE_LINK] * 2,
                        "window_start": pd.to_datetime(["2026-01-01", "2026-01-02"], utc=True),
                        "window_end": pd.to_datetime(["2026-01-02", "2026-01-03"], utc=True),
                        "bytes": [10, 20], "status": ["expiring", "expired"]})
    return {
        "key_group_bars": plots.key_group_bars(snap.key_group_distribution()),
        "subtask_bars": plots.subtask_bars(snap.subtask_distribution()),
        "subtask_bars(salting)": plots.subtask_bars(snap.salting_whatif(HOSTILE_LINK, 4)),
        "rescale_comparison": plots.rescale_comparison(snap.rescale_whatif([1, 2, 3])),
        "hot_key_bars": plots.hot_key_bars(hot),
        "lorenz_curve": plots.lorenz_curve(key_stats(snap)),
        "ttl_timeline": plots.ttl_timeline(ttl),
        "checkpoint_history": plots.checkpoint_history(history(chk)),
        "checkpoint_history(summary)": plots.checkpoint_history(checkpoint_summary(history(chk)), y="checkpoint_bytes"),
        "diff_waterfall": plots.diff_waterfall(explorer.diff(explorer.open(a), explorer.open(b))),
    }


def test_plotly_label_markup(crafted):
    figs = _figures(crafted)
    assert set(plots.__all__) <= {name.split("(")[0] for name in figs}  # every plot function is covered
    for name, fig in figs.items():
        assert not _raw_markup(fig), (name, _raw_markup(fig)[:3])
    hot = figs["hot_key_bars"].to_plotly_json()
    assert plot_text(HOSTILE_LINK) in hot["layout"]["xaxis"]["categoryarray"]  # shown, as text


def test_plotly_label_markup_in_the_dashboard(crafted):
    import widgets

    snap, chk = crafted
    dash = widgets.explore(chk)
    try:
        for tab in ("overview_tab", "keys_tab", "key_groups_tab", "hot_keys_tab", "ttl_tab", "history_tab",
                    "diff_tab"):
            getattr(dash, tab)
        from tests.support.widgets import all_widgets
        import plotly.graph_objects as go

        figs = [x for x in all_widgets(dash) if isinstance(x, go.FigureWidget)]
        assert figs
        for fig in figs:
            assert not _raw_markup(fig), _raw_markup(fig)[:3]
    finally:
        dash.close()


def test_plot_text_escapes_plotly_markup():
    assert plot_text(HOSTILE_LINK) == '&lt;a href="https://evil.example"&gt;/api/search&lt;/a&gt;'
    assert plot_text("a & b") == "a &amp; b" and plot_text(7) == "7"

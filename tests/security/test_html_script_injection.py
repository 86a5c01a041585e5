"""Finding 3: names from a snapshot reach the dashboard's HTML. An operator named ``<img src=x onerror=alert(1)>``
ran script in the Key groups tab; a checkpoint folder so named ran it in the History tab. Every HTML widget of
every tab, and the report page, must hold such a name only escaped."""

from __future__ import annotations

import ipywidgets as w
import pytest

import explorer
from explorer.report import build_report
from tests.security.crafted import HOSTILE_HTML, hostile_job
from tests.support.widgets import all_widgets

TABS = ("overview_tab", "keys_tab", "key_groups_tab", "hot_keys_tab", "ttl_tab", "history_tab", "diff_tab")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return hostile_job(tmp_path_factory.mktemp("hostile-html"))


def test_html_script_injection(hostile):
    import widgets

    _, chk = hostile
    dash = widgets.explore(chk)
    try:
        for name in TABS:
            getattr(dash, name)
        tab = dash.keys_tab
        tab.query = ""
        htmls = [x for x in all_widgets(dash) if isinstance(x, w.HTML)]
        assert htmls
        raw = [(type(x).__name__, x.value) for x in htmls if HOSTILE_HTML in (x.value or "")]
        assert not raw, raw
        shown = " ".join(x.value or "" for x in htmls)
        assert "&lt;img src=x onerror=alert(1)&gt;" in shown  # the name is there, escaped
    finally:
        dash.close()


def test_html_script_injection_in_the_report(hostile, tmp_path):
    sp, chk = hostile
    out = build_report(explorer.open(sp), tmp_path / "r.html", history_dir=chk)
    page = out.read_text() if hasattr(out, "read_text") else (tmp_path / "r.html").read_text()
    assert HOSTILE_HTML not in page

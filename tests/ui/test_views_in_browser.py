"""The HTML report of one snapshot of each format, drawn by headless chromium at 1,400 and 1,280 px.

Each report is written with ``state-explorer report`` (self-contained: plotly.js in the page) and
opened from its file; the test waits for every figure to be drawn and fails on what a reader should
never see (:mod:`tests.support.browser_checks`): an empty figure, markup shown as text, a None/NaN/NaT
cell, labels drawn over each other, a spinner outliving its error, a table or figure clipped by a box
that does not scroll. A full-page screenshot of every report at every width is kept as
``test-artifacts/views-in-browser/<format>-<width>.png`` (gitignored; the path is printed). The
dashboard's tabs get the same checks in tests/ui/test_dashboard_formats.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer.cli import main
from tests.support.browser_checks import PLOTS_DRAWN, VIEW_PROBLEMS

pytestmark = [pytest.mark.browser]

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "sample_data"
ARTIFACTS = REPO / "test-artifacts" / "views-in-browser"

#: one snapshot of each format (the Spark one is read without Spark's JVM)
REPORTS = {
    "engine": SAMPLES / "url_counts" / "checkpoints",  # a checkpoint directory: history and diff too
    "flink": SAMPLES / "flink" / "heap-canonical-savepoint",
    "spark": SAMPLES / "spark" / "agg-hdfs",
}
WIDTHS = (1400, 1280)


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    made = {}
    for name, path in REPORTS.items():
        made[name] = out / f"{name}.html"
        assert main(["report", str(path), "-o", str(made[name])]) == 0
    return made


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("fmt", list(REPORTS))
def test_a_report_reads_cleanly_in_the_browser(browser, reports, fmt, width):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / f"{fmt}-{width}.png"
    print(f"\nscreenshot: {shot}")
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        page.goto(reports[fmt].as_uri(), timeout=120_000)
        n = page.evaluate("() => document.querySelectorAll('.fig').length")
        assert n >= 4, f"only {n} figures in the {fmt} report"
        page.wait_for_function(f"() => ({PLOTS_DRAWN})('body')", timeout=120_000, polling=250)
        page.wait_for_timeout(300)  # plotly's responsive resize after the first draw
        page.screenshot(path=str(shot), full_page=True)
        assert page.evaluate("() => document.querySelectorAll('.js-plotly-plot').length") == n
        problems = page.evaluate(f"() => ({VIEW_PROBLEMS})(document.body)")
        assert problems == []
        assert page.evaluate("() => document.documentElement.scrollWidth <= document.documentElement.clientWidth")
        assert errors == []
    finally:
        page.close()

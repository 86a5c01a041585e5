"""The tour notebook in a real JupyterLab, driven with Debian's chromium through Playwright.

Starts ``jupyter lab`` on a free localhost port with a token (in a scratch root holding a copy of
the tour and a link to ``sample_data``, so nothing is written into the repository), opens the tour,
runs every cell, waits for the dashboard, moves the parallelism slider and checks that the
key-group chart changed. Screenshots go to ``test-artifacts/``.

The browser is the system's ``/usr/bin/chromium`` (``apt-get install -y chromium``); Playwright's
own browser download is never used. A missing chromium is a failure, not a skip: CI must install it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"

pytestmark = pytest.mark.browser


def _outputs_with_errors(page) -> list[str]:
    return page.evaluate("""() => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        const errors = [];
        for (const cell of nb.model.cells) {
            if (cell.type !== 'code') continue;
            for (const o of cell.outputs.toJSON()) {
                if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
            }
        }
        return errors;
    }""")


#: finds the key-group chart: in the dashboard with the parallelism slider, the plot titled "... per key group of ..."
KEY_GROUP_PLOT = """() => {
    const dash = [...document.querySelectorAll('.state-explorer-dashboard')].find(d => d.querySelector('.sx-parallelism'));
    return dash && [...dash.querySelectorAll('.js-plotly-plot')].find(
        p => (p.querySelector('.gtitle')?.textContent || '').includes('per key group of'));
}"""


def _title(page) -> str | None:
    return page.evaluate(f"() => ({KEY_GROUP_PLOT})()?.querySelector('.gtitle').textContent ?? null")


def _bar_colours(page) -> list[str]:
    return page.evaluate(f"""() => Array.from(({KEY_GROUP_PLOT})()?.querySelectorAll('.bars .point path') ?? [])
        .map(p => p.style.fill)""")


def test_tour_runs_and_the_parallelism_slider_redraws_the_key_groups(lab, browser):
    base, token, _root = lab
    ARTIFACTS.mkdir(exist_ok=True)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    console_errors: list[str] = []
    page.on("pageerror", lambda exc: console_errors.append(str(exc)))
    try:
        page.goto(f"{base}/lab/tree/notebooks/00_tour.ipynb?token={token}", timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                               " && window.jupyterapp.shell.currentWidget.sessionContext"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                               " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
                               timeout=120_000)
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
        # every code cell has run when no prompt shows [*] and every prompt has a number
        page.wait_for_function("""() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const code = nb.widgets.filter(c => c.model.type === 'code');
            return code.length > 0 && code.every(c => c.model.executionCount !== null)
                && !document.querySelector('.jp-InputPrompt')?.textContent.includes('*')
                && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle';
        }""", timeout=600_000, polling=1000)
        assert _outputs_with_errors(page) == []
        page.screenshot(path=str(ARTIFACTS / "tour-after-run.png"), full_page=False)

        dashboard = page.locator(".state-explorer-dashboard", has=page.locator(".sx-parallelism")).first
        dashboard.wait_for(timeout=120_000)
        dashboard.scroll_into_view_if_needed()
        page.wait_for_function(f"() => ({KEY_GROUP_PLOT})()?.querySelectorAll('.bars .point path').length === 128",
                               timeout=120_000)
        title_before = _title(page)
        colours_before = _bar_colours(page)
        dashboard.screenshot(path=str(ARTIFACTS / "dashboard-before.png"))

        readout = page.locator(".sx-parallelism .widget-readout").first
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type("5")
        page.keyboard.press("Enter")
        page.wait_for_function(f"() => ({KEY_GROUP_PLOT})()?.querySelector('.gtitle').textContent"
                               ".includes('5 subtasks')", timeout=60_000)
        title_after = _title(page)
        colours_after = _bar_colours(page)
        dashboard.screenshot(path=str(ARTIFACTS / "dashboard-after-parallelism-5.png"))

        assert title_before != title_after and "5 subtasks" in title_after
        assert len(colours_after) == len(colours_before) == 128
        assert colours_after != colours_before
        assert len(set(colours_after)) == 5  # one colour per subtask
        assert not [e for e in console_errors if "widget" in e.lower() or "plotly" in e.lower()], console_errors
    finally:
        page.screenshot(path=str(ARTIFACTS / "tour-final.png"), full_page=False)
        page.close()

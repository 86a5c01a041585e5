"""The tour notebook in a real JupyterLab, driven with Debian's chromium through Playwright.

Starts ``jupyter lab`` on a free localhost port with a token (in a scratch root holding a copy of
the tour and a link to ``sample_data``, so nothing is written into the repository), opens the tour,
runs every cell, waits for the dashboard, moves the parallelism slider and checks that the
key-group chart changed. Screenshots go to ``test-artifacts/``.

The browser is the system's ``/usr/bin/chromium`` (``apt-get install -y chromium``); Playwright's
own browser download is never used. A missing chromium is a failure, not a skip: CI must install it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path(os.environ.get("STATE_EXPLORER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on localhost: ``(base_url, token, root)``; stopped (by its pid) at the end."""
    root = tmp_path_factory.mktemp("lab-root")
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / "00_tour.ipynb", root / "notebooks" / "00_tour.ipynb")
    (root / "sample_data").symlink_to(REPO / "sample_data")
    # no "Jupyter news" prompt over the page
    settings = root / ".lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    # every cell in the DOM (no windowing), so the dashboard can be found wherever it is
    notebook = root / ".lab-settings" / "@jupyterlab" / "notebook-extension"
    notebook.mkdir(parents=True)
    (notebook / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    port, token = _free_port(), secrets.token_hex(16)
    env = {**os.environ, "JUPYTERLAB_SETTINGS_DIR": str(root / ".lab-settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".lab-workspaces"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime")}
    log = open(root / "jupyter.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--ServerApp.open_browser=False",
         "--LabApp.expose_app_in_browser=True", "--allow-root", "--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail("jupyter lab did not start:\n" + (root / "jupyter.log").read_text()[-3000:])
            time.sleep(0.5)
        yield base, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(root / "jupyter.log", ARTIFACTS / "jupyter.log")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} not found: the browser tests drive Debian's chromium; install it with "
                    "`apt-get update && apt-get install -y chromium` (Playwright's own browser download is not used)",
                    pytrace=False)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


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

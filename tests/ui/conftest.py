"""A JupyterLab server and Debian's chromium for the browser tests (``lab``, ``browser``).

``jupyter lab`` runs on a free localhost port with a token, in a scratch root holding a copy of
the tour and a link to ``sample_data`` (nothing is written into the repository). Its kernels
import this checkout's ``explorer`` and ``widgets`` (``PYTHONPATH``), and JupyterLab loads this
checkout's prebuilt extension (``JUPYTER_PATH``), as an installed wheel would provide them.

The browser is the system's ``/usr/bin/chromium`` (``apt-get install -y chromium``); Playwright's
own browser download is never used. A missing chromium is a failure, not a skip: CI must install it.
Screenshots and the server's log go to ``test-artifacts/`` (gitignored).
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

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = Path(os.environ.get("STATE_EXPLORER_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
LABEXTENSION = REPO / "widgets" / "labextension" / "prebuilt"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    """A JupyterLab server on localhost: ``(base_url, token, root)``; stopped (by its pid) at the end."""
    root = tmp_path_factory.mktemp("lab-root")
    (root / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / "00_tour.ipynb", root / "notebooks" / "00_tour.ipynb")
    # sample_data two levels deep as real folders, below that links: a notebook the file browser's
    # "Open in State Explorer" makes beside a snapshot lands in the scratch root, not in the repository
    for child in (REPO / "sample_data").iterdir():
        if child.is_dir():
            (root / "sample_data" / child.name).mkdir(parents=True)
            for grandchild in child.iterdir():
                (root / "sample_data" / child.name / grandchild.name).symlink_to(grandchild)
        else:
            (root / "sample_data").mkdir(exist_ok=True)
            (root / "sample_data" / child.name).symlink_to(child)
    # this checkout's prebuilt extension, where an installed wheel puts it (share/jupyter/labextensions);
    # STATE_EXPLORER_LAB_INSTALLED=1: the one the environment has installed (a wheel's, or an editable
    # install's link), to try an installation as it is
    jupyter_path = root / ".jupyter-path"
    (jupyter_path / "labextensions").mkdir(parents=True)
    if os.environ.get("STATE_EXPLORER_LAB_INSTALLED") != "1":
        (jupyter_path / "labextensions" / "state-explorer-labextension").symlink_to(LABEXTENSION)
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
           "JUPYTERLAB_WORKSPACES_DIR": str(root / ".lab-workspaces"), "JUPYTER_RUNTIME_DIR": str(root / ".runtime"),
           "JUPYTER_PATH": os.pathsep.join([str(jupyter_path), *filter(None, [os.environ.get("JUPYTER_PATH")])]),
           "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
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


@pytest.fixture(scope="session")
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



"""Finding 2: "Open in State Explorer" made a notebook beside the snapshot whose first cell ran ``import widgets``,
and ``%explore`` imported ``widgets`` by name: the kernel's working folder comes first on ``sys.path``, so a
``widgets.py`` shipped beside ``chk-2`` ran as the user. Both now import the installed package only, and the
notebook is made in the user's own ``state-explorer/`` folder, named after the snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.ipython import SAFE_PRELUDE, notebook_cell
from tests.security.crafted import hostile_job

REPO = Path(__file__).resolve().parents[2]
JS = REPO / "widgets" / "labextension" / "src" / "index.js"


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """A checkpoint directory with a ``widgets.py`` (and a ``widgets/`` decoy name) of the attacker's beside chk-N."""
    root = tmp_path_factory.mktemp("hostile-nb")
    _, chk = hostile_job(root, checkpoints="checkpoints")
    owned = root / "OWNED"
    (chk / "widgets.py").write_text(f"open({str(owned)!r}, 'w').write('ran')\ndef explore(p): return 'fake'\n")
    return chk, owned


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the installed package (an editable install's folder)
    # python -c puts the working folder first on sys.path, as a kernel does
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_notebook_imports_installed_package(planted):
    chk, owned = planted
    snap = sorted(p.name for p in chk.iterdir() if p.name.startswith("chk-"))[-1]
    # %explore run in a kernel whose working folder is the checkpoint directory
    out = _python(f"from explorer.ipython import explore\nd = explore({snap!r})\n"
                  "import widgets; print(type(d).__name__, widgets.__file__)", chk)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not owned.exists(), "the widgets.py beside the snapshot ran"
    assert out.stdout.split()[0] == "Dashboard" and out.stdout.split()[1].startswith(str(REPO / "widgets"))
    # the generated notebook's first cell, run there too
    out = _python(notebook_cell(snap) + "\nprint(type(_).__name__ if False else 'ok', widgets.__file__)", chk)
    assert out.returncode == 0, out.stderr[-2000:]
    assert not owned.exists(), "the widgets.py beside the snapshot ran"
    assert out.stdout.split()[1].startswith(str(REPO / "widgets"))


def test_notebook_imports_installed_package_refuses_a_planted_module_already_imported(planted, capsys):
    chk, owned = planted
    code = (f"import sys; sys.path.insert(0, {str(chk)!r}); import widgets\n"  # a kernel that already imported it
            f"from explorer.ipython import explore\nprint('->', explore({str(chk)!r}))")
    (owned.unlink() if owned.exists() else None)
    out = _python(code, REPO)
    owned.unlink(missing_ok=True)
    assert "-> None" in out.stdout and "expected the installed one" in out.stdout, out.stdout + out.stderr[-1500:]


def test_the_extension_writes_the_same_cell_into_the_users_own_folder():
    js = JS.read_text()
    assert "notebook:create-new" not in js and "export const NOTEBOOKS = 'state-explorer';" in js
    # the prelude of the JS is the Python's, line by line (JS string literals of the same text)
    for line in SAFE_PRELUDE.splitlines():
        assert json.dumps(line + "\n")[1:-1].replace('\\"', '"') in js.replace("\\'", "'"), line
    assert notebook_cell("../checkpoints/chk-2").startswith(SAFE_PRELUDE)
    assert notebook_cell("../checkpoints/chk-2").endswith('widgets.explore("../checkpoints/chk-2")')

"""The prebuilt JupyterLab extension ("Open in State Explorer") is complete, current and shipped.

The browser test (tests/ui/test_dashboard_formats.py) runs the command in a real JupyterLab;
here: the committed build matches its source and pyproject installs every built file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXT = REPO / "widgets" / "labextension"
SHARE = "share/jupyter/labextensions/state-explorer-labextension"


def test_the_prebuilt_extension_is_built_from_the_current_source():
    source = json.loads((EXT / "package.json").read_text())
    built = json.loads((EXT / "prebuilt" / "package.json").read_text())
    build = built["jupyterlab"].pop("_build")
    assert built == source, "package.json changed since the build: run widgets/labextension/build.sh"
    assert (EXT / "prebuilt" / build["load"]).is_file()
    code = "".join(p.read_text() for p in (EXT / "prebuilt" / "static").glob("*.js"))
    js = (EXT / "src" / "index.js").read_text()
    for literal in re.findall(r"'([^'\n]{12,})'", js):  # every long string literal of the source is in the build
        assert literal in code, f"{literal!r} is not in the build: run widgets/labextension/build.sh"


def test_pyproject_installs_every_built_file_where_jupyterlab_looks():
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    declared = {SHARE + "/" + Path(f).name: f for f in data_files[SHARE]}
    static = data_files[SHARE + "/static"]
    assert static == ["widgets/labextension/prebuilt/static/*"]
    assert declared == {SHARE + "/package.json": "widgets/labextension/prebuilt/package.json"}
    assert sum(p.stat().st_size for p in (EXT / "prebuilt").rglob("*") if p.is_file()) < 100_000  # small


def _minimum_jupyterlab() -> tuple[int, int, int]:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (spec,) = [d for d in deps if re.match(r"jupyterlab\b", d)]
    parts = [int(x) for x in re.fullmatch(r"jupyterlab>=([\d.]+)", spec).group(1).split(".")]
    return tuple((parts + [0, 0])[:3])  # type: ignore[return-value]


def test_the_extension_asks_for_the_jupyterlab_that_pyproject_allows():
    """The built extension's shared @jupyterlab packages and package.json accept pyproject's oldest JupyterLab.

    @jupyterlab/builder takes a shared package's required version from the JupyterLab it builds against
    (4.6 in the venv) unless package.json says otherwise: JupyterLab 4.2, which pyproject allows, then
    warned "Unsatisfied version" for the extension's shared modules.
    """
    lowest = _minimum_jupyterlab()
    code = "".join(p.read_text() for p in (EXT / "prebuilt" / "static").glob("remoteEntry.*.js"))
    # webpack's consume-shared table: ("default", "@jupyterlab/x", eager, [kind, major, minor, patch])
    required = re.findall(r'"(@jupyterlab/[a-z-]+)",!\d,\[\d+,(\d+),(\d+),(\d+)\]', code)
    assert required, "no shared @jupyterlab module found in the build"
    for name, *version in required:
        version = tuple(int(v) for v in version)
        assert version[0] == lowest[0] and version <= lowest, f"the build requires {name} {version}, pyproject allows {lowest}"
    source = json.loads((EXT / "package.json").read_text())
    ranges = {**source["dependencies"], **{k: v["requiredVersion"] for k, v in source["jupyterlab"]["sharedPackages"].items()}}
    for name, spec in ranges.items():
        version = tuple(int(v) for v in re.fullmatch(r"\^(\d+)\.(\d+)\.(\d+)", spec).groups())
        assert version[0] == lowest[0] and version <= lowest, f"package.json asks {name} {spec}, pyproject allows {lowest}"


def test_an_editable_install_gets_the_extension_where_jupyterlab_finds_it(tmp_path):
    """``pip install -e .`` installs no data files (setuptools' editable wheels carry none), so ``make venv``
    links the prebuilt extension into the venv (widgets._labextension); JupyterLab then lists it."""
    from widgets._labextension import PREBUILT, install_into

    target = install_into(tmp_path)
    assert target == tmp_path / "share" / "jupyter" / "labextensions" / "state-explorer-labextension"
    assert (target / "package.json").read_text() == (PREBUILT / "package.json").read_text()
    assert install_into(tmp_path) == target  # twice: nothing to do
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "share" / "jupyter"), "NO_COLOR": "1"}
    out = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], env=env, capture_output=True,
                         text=True, timeout=120)
    listing = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)
    block = listing.split(str(tmp_path / "share" / "jupyter" / "labextensions"), 1)
    assert len(block) == 2, listing
    first = block[1].strip().splitlines()[0]
    assert re.match(r"state-explorer-labextension v0\.1\.0 enabled\s+OK", first.strip()), listing
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"pip install .*-e .*\n\t\$\(BIN\)/python -m widgets\._labextension", makefile)


def _run_menu_rule(tmp_path, script: str) -> str:
    """Run ``script`` against the pure functions of src/index.js in node (its JupyterLab import left out)."""
    import shutil

    import pytest

    if shutil.which("node") is None:
        pytest.skip("needs node")
    src = (EXT / "src" / "index.js").read_text()
    src = "\n".join(line for line in src.splitlines() if not line.startswith("import "))
    src = "const IFileBrowserFactory = null;  // the token of the left-out import\n" + src
    module = tmp_path / "index.mjs"
    module.write_text(src)
    runner = tmp_path / "run.mjs"
    runner.write_text(f"import * as ext from {json.dumps(module.as_uri())};\n{script}\n")
    out = subprocess.run(["node", str(runner)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_the_command_is_offered_only_on_what_the_explorer_opens(tmp_path):
    """issue 30: the menu rule mirrors the readers' detect, from a folder's listing (the contents API)."""
    d, f = "directory", "file"
    cases = {
        "savepoint": ([("_metadata", f), ("keyed", d)], "snapshot"),
        "spark": ([("metadata", f), ("offsets", d), ("commits", d), ("state", d)], "spark"),
        "spark without commits": ([("metadata", f), ("offsets", d)], None),
        "checkpoint dir": ([("chk-2", d), ("chk-10", d), ("shared", d)], "checkpoints"),
        "chk-N as a file": ([("chk-2", f)], None),
        "any folder": ([("notes.txt", f), ("data", d)], None),
        "_metadata folder": ([("_metadata", d)], None),
    }
    listings = {k: [{"name": n, "type": t} for n, t in v[0]] for k, v in cases.items()}
    out = _run_menu_rule(tmp_path, f"""
const listings = {json.dumps(listings)};
const kinds = Object.fromEntries(Object.entries(listings).map(([k, v]) => [k, ext.snapshotKind(v)]));
const tree = {{ 'ckpts': [{{name: 'chk-1', type: 'directory'}}, {{name: 'chk-7', type: 'directory'}}],
               'ckpts/chk-7': [{{name: '_metadata', type: 'file'}}],
               // Flink's <job-id> folder of a running job: chk-6 being written (no _metadata yet), chk-5 retained
               'job': [{{name: 'chk-5', type: 'directory'}}, {{name: 'chk-6', type: 'directory'}},
                       {{name: 'shared', type: 'directory'}}, {{name: 'taskowned', type: 'directory'}}],
               'job/chk-6': [], 'job/chk-5': [{{name: '_metadata', type: 'file'}}],
               // the newest deleted by the job's retention between the two listings
               'retained': [{{name: 'chk-2', type: 'directory'}}, {{name: 'chk-3', type: 'directory'}}],
               'retained/chk-2': [{{name: '_metadata', type: 'file'}}],
               // only chk-1 complete, behind more in-progress chk-N than are looked into
               'aborted': [...Array(8).keys()].map(i => ({{name: `chk-${{i + 1}}`, type: 'directory'}})),
               'aborted/chk-1': [{{name: '_metadata', type: 'file'}}],
               'empty': [{{name: 'chk-3', type: 'directory'}}], 'empty/chk-3': [],
               'plain': [{{name: 'a.csv', type: 'file'}}] }};
for (let i = 2; i <= 8; i++) tree[`aborted/chk-${{i}}`] = [];
// the server routes '<path>/checkpoints' to its file checkpoints: such a folder cannot be listed
const asked = {{}};
const contents = {{ get: async path => {{ if (path.endsWith('checkpoints')) throw new Error('a file checkpoints list');
                                          const top = path.split('/')[0]; asked[top] = (asked[top] || 0) + 1;
                                          if (!(path in tree)) throw new Error('404: ' + path);
                                          return {{ content: tree[path] }}; }} }};
const opens = {{}};
for (const p of ['ckpts', 'job', 'retained', 'aborted', 'empty', 'plain', 'job/checkpoints']) {{
  opens[p] = await ext.opensInExplorer(contents, p);
}}
console.log(JSON.stringify({{ kinds, opens, asked, looks: ext.CHK_LOOKS, newest: ext.checkpointChild(tree['ckpts']),
  order: ext.checkpointChildren(tree['job']),
  file: ext.snapshotOf({{ type: 'file', name: '_metadata', path: 'a/sp/_metadata' }}),
  other: ext.snapshotOf({{ type: 'file', name: 'x.txt', path: 'a/x.txt' }}) }}));
""")
    got = json.loads(out)
    assert got["kinds"] == {k: v[1] for k, v in cases.items()}
    # a chk-N holding _metadata among the newest CHK_LOOKS: a running Flink job's <job-id> folder (its newest
    # chk-N still being written) is offered; a folder named checkpoints cannot be listed, so it is offered
    assert got["opens"] == {"ckpts": True, "job": True, "retained": True, "aborted": False, "empty": False,
                            "plain": False, "job/checkpoints": True}
    assert got["order"] == ["chk-6", "chk-5"]
    # cheap: one listing of the folder and at most CHK_LOOKS of its chk-N
    assert got["asked"]["aborted"] == 1 + got["looks"] and got["asked"]["job"] == 3 and got["asked"]["plain"] == 1
    assert got["newest"] == "chk-7" and got["file"] == "a/sp" and got["other"] is None

"""The prebuilt JupyterLab extension ("Open in State Explorer") is complete, current and shipped.

The browser test (tests/ui/test_dashboard_formats.py) runs the command in a real JupyterLab;
here: the committed build matches its source and pyproject installs every built file.
"""

from __future__ import annotations

import json
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

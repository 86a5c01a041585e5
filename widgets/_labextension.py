"""Put the prebuilt JupyterLab extension where JupyterLab looks, for an editable install.

A wheel installs ``widgets/labextension/prebuilt`` into ``share/jupyter/labextensions`` (pyproject's
data-files). ``pip install -e .`` does not: setuptools' editable wheels carry no data files, so
JupyterLab started from such a venv had no "Open in State Explorer". ``make venv`` runs this after
``pip install -e``; by hand::

    python -m widgets._labextension            # into this interpreter's prefix (the venv)

It links the prebuilt folder (a copy where links are not possible), so a rebuild
(``widgets/labextension/build.sh``) is seen without installing again. An existing installed copy
(from a wheel) is left alone.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

NAME = "state-explorer-labextension"
PREBUILT = Path(__file__).resolve().parent / "labextension" / "prebuilt"


def install_into(prefix: str | Path = sys.prefix) -> Path:
    """``prefix/share/jupyter/labextensions/state-explorer-labextension``, made a link to the prebuilt extension.

    Returns the path. Raises FileNotFoundError when the prebuilt extension is missing (run
    ``widgets/labextension/build.sh``).
    """
    if not (PREBUILT / "package.json").is_file():
        raise FileNotFoundError(f"{PREBUILT}/package.json: the prebuilt JupyterLab extension is missing; "
                                "build it with widgets/labextension/build.sh")
    target = Path(prefix) / "share" / "jupyter" / "labextensions" / NAME
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink():
        if target.resolve() == PREBUILT:
            return target
        target.unlink()
    elif target.exists():
        return target  # installed by a wheel: left as it is
    try:
        target.symlink_to(PREBUILT, target_is_directory=True)
    except OSError:
        shutil.copytree(PREBUILT, target)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m widgets._labextension", description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", type=Path, default=Path(sys.prefix), help="the environment (default: this one)")
    args = ap.parse_args(argv)
    print(f"JupyterLab extension: {install_into(args.prefix)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

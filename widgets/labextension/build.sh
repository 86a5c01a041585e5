#!/bin/sh
# Rebuild the prebuilt JupyterLab extension (widgets/labextension/prebuilt) from src/index.js.
# Needs Node >= 18 and npm (the npm registry); the Python side needs jupyterlab (the project's venv).
# node_modules live in a scratch folder ($BUILD, default .cache/labextension-build), not in the repository.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=${BUILD:-$repo/.cache/labextension-build}
python=${PYTHON:-$repo/.venv/bin/python}
mkdir -p "$build/src"
cp "$here/package.json" "$build/"
cp "$here/src/index.js" "$build/src/"
(cd "$build" && npm install --no-audit --no-fund --loglevel=error)
rm -rf "$build/prebuilt"
# @jupyterlab/builder's own entry point, against the installed JupyterLab's shared packages
# (`jupyter labextension build` would need the separate jupyter-builder Python package)
core=$("$python" -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')
(cd "$build" && node node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$core" .)
rm -rf "$here/prebuilt"
cp -r "$build/prebuilt" "$here/prebuilt"
echo "built $here/prebuilt:"; ls -la "$here/prebuilt" "$here/prebuilt/static"

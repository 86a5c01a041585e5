"""The import structure explorer/ARCHITECTURE.md draws, checked on the source.

Every ``import`` and ``from ... import`` of ``explorer`` and ``widgets`` (at
module level and inside functions; not under ``if TYPE_CHECKING:``) is read
with :mod:`ast`, so these hold whatever the test run happens to import:

* no import cycle between modules (a package's ``__init__`` re-exporting its
  own submodules aside);
* no module imports another module's private (``_name``) name, and nothing
  outside a package imports its private modules;
* each layer imports only layers below it (the table in ARCHITECTURE.md);
* imports inside functions are only of the heavy or optional dependencies
  that page lists, so a reader sees a module's dependencies at its top.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the layers, lowest first: a module may import modules of its own layer or of a lower one
LAYERS: list[tuple[str, ...]] = [
    ("explorer.errors",),
    ("explorer.keygroups", "explorer.numba_cache", "explorer.ranking", "explorer.escape", "explorer.format", "explorer.storage", "explorer.spark_session"),
    ("explorer.engine", "explorer.pipelines", "explorer.sample_data", "explorer.spark_engine"),
    ("explorer.readers",),
    ("explorer.stored", "explorer.catalog", "explorer.verification", "explorer.editing",
     "explorer.compatibility"),
    ("explorer.analysis", "explorer.distributed"),
    ("explorer.plots",),
    ("explorer.report",),
    ("explorer.snapshot",),
    ("explorer.spark", "explorer.ipython", "explorer.cli", "explorer.kernels", "explorer"),
    ("widgets",),
]

#: what may be imported inside a function: heavy or optional dependencies, or a deliberate lazy edge
LAZY_ALLOWED = (
    "pyspark", "py4j", "numba", "rocksdict", "IPython", "ipywidgets", "plotly", "tqdm",
    "nbformat", "nbclient", "playwright", "google",
)

#: project modules imported inside a function on purpose, each for the reason given
LAZY_EDGES = {
    ("explorer", "explorer.ipython"): "IPython's extension hook: IPython is loaded only by %load_ext",
    ("explorer.stored.registry", "explorer.readers.flink"): "readers registered at the first open: `import explorer` stays light",
    ("explorer.stored.registry", "explorer.readers.spark"): "readers registered at the first open: `import explorer` stays light",
    **{("explorer", f"explorer.{m}"): "`import explorer` is light (PEP 562): its heavy names (pandas, pyarrow, "
       "numba) load on first use" for m in ("analysis", "catalog", "keygroups", "readers.base", "snapshot")},
    **{("explorer.cli", f"explorer.{m}"): "each command imports what it needs when it runs: `--help`, usage "
       "errors and `ls` start without pandas, numba, plotly or Spark" for m in (
        "analysis", "catalog", "format.snapshot", "pipelines", "plots.format", "report", "snapshot", "spark.demo")},
    ("explorer.plots", "explorer.plots._charts"): "the figures load plotly on first use (PEP 562): the palette and "
    "plots.format, which a dashboard's loading line and the CLI take, do not",
    ("explorer.cli", "explorer.verification"): "`state-explorer verify` imports what it needs in its own command",
    ("explorer.cli", "explorer.compatibility"): "`state-explorer compatible` imports what it needs in its own command",
    ("explorer.cli", "explorer.editing"): "`state-explorer edit` imports what it needs in its own command",
    ("explorer", "explorer.verification"): "`import explorer` is light (PEP 562): verify loads on first use",
    ("explorer", "explorer.editing"): "`import explorer` is light (PEP 562): edit loads on first use",
    ("explorer", "explorer.compatibility"): "`import explorer` is light (PEP 562): compatible loads on first use "
    "(pandas and the Flink reader)",
    **{("widgets.dashboard", f"widgets.{m}"): "a dashboard's loading line shows before the tabs' pandas, plotly "
       "and analyses are imported" for m in ("_data", "diff", "history", "hotkeys", "keygroups", "keys", "overview",
                                             "ttl")},
}


def _modules() -> dict[str, Path]:
    mods = {}
    for pkg in ("explorer", "widgets"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _function_nodes(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out |= {id(n) for n in ast.walk(node) if n is not node}
    return out


def _imports(mod: str) -> list[tuple[str, str | None, int, bool]]:
    """(imported module or package, imported name or None, line, inside a function) of ``mod``."""
    path = MODULES[mod]
    tree = ast.parse(path.read_text(), str(path))
    skip, inside = _type_checking_nodes(tree), _function_nodes(tree)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno, id(node) in inside) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = mod.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                if full in MODULES:
                    out.append((full, None, node.lineno, id(node) in inside))
                else:
                    out.append((target, alias.name, node.lineno, id(node) in inside))
    return out


def _owner(name: str) -> str | None:
    """The project module ``name`` is, or lies in; None for other packages."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _package(mod: str) -> str:
    return mod if MODULES[mod].name == "__init__.py" else mod.rpartition(".")[0]


def _layer(mod: str) -> int:
    best, rank = "", None
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and len(p) > len(best):
                best, rank = p, i
    assert rank is not None, f"{mod} is in no layer of LAYERS"
    return rank


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for mod in MODULES:
        for target, _, _, _ in _imports(mod):
            owner = _owner(target)
            # a submodule importing its own package's __init__ (for a name it re-exports) is no cycle of modules
            if owner and owner != mod and not mod.startswith(owner + "."):
                graph[mod].add(owner)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_cycle_finder_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_another_modules_private_names():
    bad = []
    for mod in MODULES:
        for target, name, line, _ in _imports(mod):
            owner = _owner(target)
            if owner is None or owner == mod:
                continue
            if name and name.startswith("_") and not name.startswith("__"):
                bad.append(f"{mod}:{line} imports {name} from {owner}")
            private = any(p.startswith("_") and not p.startswith("__") for p in owner.split("."))
            if private and not (_package(mod) == _package(owner) or _package(mod).startswith(_package(owner) + ".")):
                bad.append(f"{mod}:{line} imports the private module {owner}")
    assert bad == []


def test_layers_import_only_downwards():
    bad = []
    for mod in MODULES:
        for target, _, line, _ in _imports(mod):
            owner = _owner(target)
            if owner and _layer(owner) > _layer(mod):
                bad.append(f"{mod}:{line} (layer {_layer(mod)}) imports {owner} (layer {_layer(owner)})")
    assert bad == []


def test_explorer_never_imports_widgets():
    assert [m for m in MODULES if m.startswith("explorer")
            for t, _, _, _ in _imports(m) if t.split(".")[0] == "widgets"] == []


def test_imports_inside_functions_are_heavy_or_optional():
    bad = []
    for mod in MODULES:
        for target, _, line, inside in _imports(mod):
            if not inside or target.split(".")[0] in LAZY_ALLOWED:
                continue
            owner = _owner(target)
            if owner is not None and (_is_lazy_kernel_or_spark(owner) or (mod, owner) in LAZY_EDGES):
                continue
            bad.append(f"{mod}:{line} imports {target} inside a function")
    assert bad == []


def _is_lazy_kernel_or_spark(owner: str) -> bool:
    """Project modules that load numba or pyspark when imported, so are imported where used."""
    text = MODULES[owner].read_text()
    return any(f"import {dep}" in text or f"from {dep}" in text for dep in ("numba", "pyspark", "rocksdict"))


@pytest.mark.parametrize("layer", range(len(LAYERS)))
def test_every_layer_names_existing_modules(layer):
    for prefix in LAYERS[layer]:
        assert any(m == prefix or m.startswith(prefix + ".") for m in MODULES), prefix


def test_architecture_page_names_only_paths_that_exist():
    """Every module or folder explorer/ARCHITECTURE.md names exists, so the page cannot drift."""
    page = (ROOT / "explorer" / "ARCHITECTURE.md").read_text()
    names = set(re.findall(r"`([\w/]+(?:\.py|/))`", page))
    rooted = [n for n in names if n.split("/")[0] in {
        "keygroups", "format", "engine", "readers", "analysis", "plots", "spark", "pipelines", "spark_engine",
        "distributed"}]
    assert len(rooted) > 20
    missing = [n for n in rooted if not (ROOT / "explorer" / n).exists()]
    bare = [n for n in names if "/" not in n.rstrip("/") and n.endswith(".py")]
    missing += [n for n in bare if not list((ROOT / "explorer").rglob(n))]
    assert missing == []

"""The public surface: what ``import explorer`` exports, sorted and complete.

As httpx's ``tests/test_exported_members.py``: ``__all__`` is exactly the public names a package
defines (no leading underscore, not a submodule), so nothing is exported by accident and nothing
public is left out of ``from explorer import *`` and the docs.
"""

import types

import explorer
import explorer.engine
import explorer.errors
import widgets


def public_names(module: types.ModuleType, lazy: dict | None = None) -> list[str]:
    """Sorted non-underscore, non-module names of ``module``, plus those its ``__getattr__`` imports on use."""
    names = {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    return sorted(names | set(lazy or ()))


def test_explorer_all_is_every_public_name_sorted():
    assert explorer.__all__ == public_names(explorer, explorer._LAZY)
    for name in explorer.__all__:
        assert getattr(explorer, name) is not None, name
    assert set(explorer.__all__) <= set(dir(explorer))


def test_explorer_exports_the_whole_error_tree():
    tree = {n for n, v in vars(explorer.errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    assert tree <= set(explorer.__all__)
    for name in tree:
        assert getattr(explorer, name) is getattr(explorer.errors, name)


def test_engine_all_is_every_public_name_sorted():
    assert explorer.engine.__all__ == public_names(explorer.engine)


def test_widgets_all_is_every_public_name_sorted():
    assert widgets.__all__ == public_names(widgets, widgets._LAZY)
    for name in widgets.__all__:
        assert getattr(widgets, name) is not None, name


def test_explorer_never_imports_widgets():
    import re
    from pathlib import Path

    root = Path(explorer.__file__).parent
    offenders = [
        str(p.relative_to(root))
        for p in root.rglob("*.py")
        if re.search(r"^\s*(from|import)\s+widgets\b", p.read_text(), re.M)
    ]
    assert offenders == []


def test_nothing_stored_is_pickled():
    import re
    from pathlib import Path

    root = Path(explorer.__file__).parent
    offenders = [
        str(p) for p in root.rglob("*.py") if re.search(r"^\s*(import|from)\s+(pickle|cloudpickle|dill)\b", p.read_text(), re.M)
    ]
    assert offenders == []


def test_changes_is_public():
    from explorer.analysis.changes import changes

    assert explorer.changes is changes and "changes" in explorer.__all__

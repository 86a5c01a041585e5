"""The public surface: what ``import explorer`` exports, sorted and complete."""

import explorer
import explorer.engine


def test_explorer_all_is_sorted_and_exported():
    assert explorer.__all__ == sorted(explorer.__all__)
    for name in explorer.__all__:
        assert hasattr(explorer, name), name


def test_engine_all_is_sorted_and_exported():
    names = explorer.engine.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(explorer.engine, name), name


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

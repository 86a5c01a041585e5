"""Helpers shared by the widget suites."""

from __future__ import annotations


def all_widgets(root):
    """Every widget reachable from ``root`` through children and the views' owned lists."""
    import ipywidgets as w

    seen, todo = {}, [root]
    while todo:
        x = todo.pop()
        if id(x) in seen or not isinstance(x, w.Widget):
            continue
        seen[id(x)] = x
        todo.extend(getattr(x, "children", ()) or ())
        todo.extend(getattr(x, "_owned", ()))
        if hasattr(x, "tabs") and isinstance(x.tabs, dict):
            todo.extend(x.tabs.values())
        errors = getattr(x, "errors", None)
        if errors is not None:
            todo.append(errors)
    return list(seen.values())

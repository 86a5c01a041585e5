"""Helpers shared by the widget suites."""

from __future__ import annotations


def _walk(root, owned: bool):
    import ipywidgets as w

    seen, todo = {}, [root]
    while todo:
        x = todo.pop()
        if id(x) in seen or not isinstance(x, w.Widget):
            continue
        seen[id(x)] = x
        todo.extend(getattr(x, "children", ()) or ())
        if owned:
            todo.extend(getattr(x, "_owned", ()))
            if hasattr(x, "tabs") and isinstance(x.tabs, dict):
                todo.extend(x.tabs.values())
            errors = getattr(x, "errors", None)
            if errors is not None:
                todo.append(errors)
    return list(seen.values())


def all_widgets(root):
    """Every widget reachable from ``root`` through children and the views' owned lists."""
    return _walk(root, owned=True)


def shown_widgets(root):
    """The widgets a browser would render from ``root``: children of the views and containers only."""
    return _walk(root, owned=False)


#: words a person must never read in a dashboard cell or caption
NULL_WORDS = ("None", "NaN", "NaT", "nan", "<NA>")


def visible_text(html_value: str) -> str:
    """The text of an HTML fragment, without its tags and its <style> blocks."""
    import html
    import re

    text = re.sub(r"<style>.*?</style>", " ", html_value, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", text))


def null_words(text: str) -> list[str]:
    import re

    return [w for w in NULL_WORDS if re.search(r"(?<![\w-])" + re.escape(w) + r"(?![\w-])", text)]


def figure_problems(fig) -> list[str]:
    """Why a figure would show empty axes: no trace with points and no message saying why."""
    has_points = any(getattr(tr, "visible", True) is not False and _points(tr) for tr in fig.data)
    message = any((a.text or "").strip() for a in (fig.layout.annotations or ()))
    if has_points or message:
        return []
    return [f"empty figure {fig.layout.title.text!r}"]


def _points(tr) -> int:
    for attr in ("x", "y", "values", "z"):
        v = getattr(tr, attr, None)
        if v is not None and len(v):
            return len(v)
    return 0

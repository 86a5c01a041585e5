"""Parameter docs written once and shared by every plot function (as plotly express does in ``_doc.py``).

A plot function's docstring gives its one-line purpose and what its data frame
holds; :func:`document` appends a ``Parameters`` section with the shared text
of every keyword the function takes.
"""

from __future__ import annotations

import inspect
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)

PARAMS: dict[str, str] = {
    "data_frame": "pandas.DataFrame\n    The analysis result to draw (see the function's summary for which one).",
    "x": "str\n    Column for the horizontal axis.",
    "y": "str\n    Column for the bar heights / line values (e.g. ``\"bytes\"``, ``\"entries\"``, ``\"records\"``).",
    "color": "str\n    Column whose values get one colour (one trace) each.",
    "operator": "str or None\n    The operator to draw; needed when the data holds several, else the only one.",
    "value": "str\n    The load column (``\"bytes\"``, ``\"entries\"`` or ``\"records\"``).",
    "by": "str\n    Column that splits the steps (``\"state\"`` or ``\"operator\"``).",
    "max_parallelism": "int or None\n    The max parallelism to draw; default: the snapshot's (the row marked current).",
    "title": "str or None\n    Figure title; a descriptive default when None.",
    "height": "int or None\n    Figure height in pixels.",
}


def document(fn: F) -> F:
    """Append the shared ``Parameters`` section for the keywords of ``fn``."""
    names = [p for p in inspect.signature(fn).parameters if p in PARAMS]
    lines = ["", "Parameters", "----------"]
    for n in names:
        head, _, rest = PARAMS[n].partition("\n")
        lines.append(f"{n} : {head}")
        lines.append(rest)
    lines += ["", "Returns", "-------", "plotly.graph_objects.Figure"]
    fn.__doc__ = inspect.cleandoc(fn.__doc__ or "") + "\n" + "\n".join(lines)
    return fn

"""Text from a snapshot, made safe to draw in a plotly figure or print in a terminal (one home for both sinks:
the plots, the dashboards, the report and the CLI import it; it imports nothing of the project, so the CLI
escapes what it prints without loading pandas or plotly).

Plotly reads every label, tick text, legend name, title, annotation and hover text as its own small
HTML (``<a href>``, ``<b>``, ``<br>``, ``<span style>``): a key ``<a href="https://evil.example">/api/search</a>``
would be drawn as the text ``/api/search`` and be a live link, in reports and in dashboards. Names and keys come
from whoever wrote the snapshot (docs/threat-model.md), so each string a figure draws from a snapshot passes
:func:`plot_text` first, which writes ``&``, ``<`` and ``>`` as the entities plotly shows as those characters.
The markup our own templates add (``<br>``, ``<extra>``) is written around the escaped values, never inside them.

The same strings printed in a terminal: an escape sequence in one retitles the terminal window, clears the
screen, moves the cursor over earlier lines, or plants a hidden hyperlink (OSC 8); a bidi override
(U+202A–U+202E, U+2066–U+2069) reorders what is shown. :func:`terminal_text` shows each such character
visibly instead, as Python writes it in a string literal (``\\x1b``, ``\\x9b``, ``\\u202e``): C0 controls but
the newline (the CLI's own line breaks), DEL, C1 controls and the bidi overrides and isolates. Every line the
CLI prints goes through it (:func:`explorer.cli.say`).
"""

from __future__ import annotations

import re
from typing import Any, Iterable

_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def plot_text(value: Any) -> str:
    """``str(value)`` with ``&``, ``<``, ``>`` escaped: shown by plotly as written, never as markup."""
    return str(value).translate(_ESCAPES)


def plot_texts(values: Iterable[Any]) -> list[str]:
    """:func:`plot_text` of each value."""
    return [plot_text(v) for v in values]


def plot_category(value: Any) -> Any:
    """A value drawn as a category or tick label: strings escaped, numbers (and times) kept as they are so
    that plotly still places them on a numeric or date axis."""
    return plot_text(value) if isinstance(value, str) else value


def plot_categories(values: Iterable[Any]) -> Any:
    """:func:`plot_category` of each value; a column (or array) of numbers or times comes back as its array,
    untouched."""
    dtype = getattr(values, "dtype", None)
    if dtype is not None and getattr(dtype, "kind", "O") not in "OUS":
        return values.to_numpy() if hasattr(values, "to_numpy") else values
    return [plot_category(v) for v in values]


_CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c <= 0xFF else f"\\u{c:04x}"


def terminal_text(text: object) -> str:
    """``str(text)`` with every terminal control character (but newline) and bidi override shown as an escape."""
    return _CONTROL.sub(_visible, str(text))

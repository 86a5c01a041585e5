"""Editing savepoints: from looking at state to fixing it.

``explorer.edit(path, **open_options)`` opens a Flink canonical savepoint (the options are
``explorer.open``'s) and returns an :class:`Editor`. Its operations record edits and return the
editor; :meth:`Editor.write` writes a new, self-contained savepoint that Flink restores into either
state backend. The input is never modified.

* :mod:`.editor`: the operations, checked and recorded in order (``Editor.steps``);
* :mod:`.flink`: the canonical savepoint written from the input's bytes, entries copied, not
  re-encoded (what it refuses, and why, is in its module doc);
* :mod:`.dataoutput`: Java ``DataOutput``, the mirror of the reader's ``DataInput``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .editor import EditStep, Editor

__all__ = ["EditStep", "Editor", "edit"]


def edit(path: str | Path, **open_options: Any) -> Editor:
    """An :class:`Editor` of the Flink canonical savepoint at ``path`` (``open_options``: as ``explorer.open``)."""
    return Editor(path, **open_options)

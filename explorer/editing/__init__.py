"""Editing savepoints: from looking at state to fixing it.

``explorer.edit(path, **open_options)`` opens a Flink canonical savepoint (the options are
``explorer.open``'s) or one of the engine's own savepoints, and returns an :class:`Editor`. Its
operations record edits and return the editor; :meth:`Editor.write` writes a new, self-contained
savepoint of the same format, which Flink restores into either state backend (or the engine
restores). The input is never modified.

* :mod:`.editor`: the operations, checked and recorded in order (``Editor.steps``);
* :mod:`.flink`: the canonical savepoint written from the input's bytes, entries copied, not
  re-encoded (what it refuses, and why, is in its module doc);
* :mod:`.values`: new values encoded by the serializer a Flink state declares (POJOs, Rows, Tuples,
  collections, java.time, BigDecimal, TTL wrappers), each read back before it is written;
* :mod:`.engine`: the engine's savepoint, rows re-encoded with the stored declared types;
* :mod:`.dataoutput`: Java ``DataOutput``, the mirror of the reader's ``DataInput``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .editor import EditStep, Editor

__all__ = ["EditStep", "Editor", "edit"]


def edit(path: str | Path, **open_options: Any) -> Editor:
    """An :class:`Editor` of the Flink canonical savepoint, or the engine savepoint, at ``path``
    (``open_options``: as ``explorer.open``, for Flink)."""
    return Editor(path, **open_options)

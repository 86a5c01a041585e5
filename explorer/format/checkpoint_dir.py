"""A checkpoint directory: the one home of the ``chk-N`` rule.

A job's checkpoint directory (the engine's, Apache Flink's) holds one ``chk-N`` folder per
checkpoint, ``N`` the checkpoint id in decimal, beside the areas checkpoints share
(``shared/``, ``taskowned/``). A ``chk-N`` folder is complete once its ``_metadata`` is
written (both engines write it last); a folder without it is being written or was aborted,
and the engines restore from the newest complete one.

Every module that lists checkpoints asks here: the engine's checkpoint storage, the readers,
``history``, the catalog and the dashboards. What "complete" means beyond a ``_metadata``
(the engine's magic and version, Flink's) is the caller's ``complete`` test.

Folders that vanish while they are looked at (a job's retention deleting old checkpoints)
are left out, not an error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["CHK_PATTERN", "METADATA_NAME", "checkpoint_folders", "checkpoint_id", "folder_name",
           "has_metadata", "newest_complete"]

#: the name of a checkpoint's folder: ``chk-`` and the checkpoint id
CHK_PATTERN = re.compile(r"^chk-(\d+)$")

#: the file a complete checkpoint (or savepoint) folder holds, written last
METADATA_NAME = "_metadata"


def checkpoint_id(name: str) -> int | None:
    """The checkpoint id a folder called ``name`` stands for (``chk-7`` -> 7), or None."""
    m = CHK_PATTERN.match(name)
    return int(m.group(1)) if m else None


def folder_name(checkpoint: int) -> str:
    """The folder name of checkpoint ``checkpoint`` (7 -> ``chk-7``)."""
    return f"chk-{int(checkpoint)}"


def has_metadata(folder: Any) -> bool:
    """Whether ``folder`` holds a ``_metadata`` file (False when it vanished meanwhile)."""
    try:
        return (folder / METADATA_NAME).is_file()
    except OSError:
        return False


def checkpoint_folders(directory: Any, complete: Callable[[Any], bool] | None = None,
                       ) -> list[tuple[int, Any]]:
    """``(N, folder)`` of the ``chk-N`` folders of ``directory``, oldest first.

    ``complete``: keep only folders it accepts (e.g. :func:`has_metadata`); a folder deleted or
    made unreadable between listing and testing is left out. ``directory`` is a ``pathlib.Path``
    or a :class:`~explorer.storage.StoragePath` (anything with ``iterdir`` and ``/``).
    """
    found = []
    for p in directory.iterdir():
        n = checkpoint_id(p.name)
        if n is None:
            continue
        if complete is not None:
            try:
                if not complete(p):
                    continue
            except OSError:  # deleted (or made unreadable) between listing and looking
                continue
        found.append((n, p))
    found.sort(key=lambda t: t[0])
    return found


def newest_complete(directory: Any, complete: Callable[[Any], bool] = has_metadata) -> Any | None:
    """The newest ``chk-N`` folder of ``directory`` that ``complete`` accepts, or None."""
    chks = checkpoint_folders(directory, complete)
    return chks[-1][1] if chks else None

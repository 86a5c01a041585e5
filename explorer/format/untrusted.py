"""Paths and bytes from a snapshot, which whoever wrote it controls (DESIGN.md, "Untrusted input").

Resolve, then confine: a path a snapshot names (in its metadata, an archive, a folder's
listing, a symlink) is resolved (every symlink followed) and opened only when the result
lies inside one of the folders the format allows (:class:`Roots`); a folder beyond those
only when the user names it (``allow_roots=[...]``, a trusted argument; beside a snapshot on a
remote store, a URL of that store). A file name that
must be a plain name (an SST file in Spark's ``SSTs/`` folder) is checked by
:func:`plain_name`. Error messages quote no more of a file than :func:`excerpt` gives:
a few bytes, escaped, with the length of the rest.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import StorageError, UnsafePathError
from ..storage import StoragePath, beside, is_remote_url

__all__ = ["ALLOW_OPTION", "Roots", "excerpt", "own_file", "plain_name"]

#: the open option that names extra folders a snapshot's files may be read from
ALLOW_OPTION = "allow_roots"


def _real(p: Any) -> Any:
    """``p`` with every symlink resolved (a :class:`~explorer.storage.StoragePath`: ``..`` taken out)."""
    return p.resolve() if hasattr(p, "store") else Path(p).resolve()


def _extra_root(root: Any, like: Any) -> Any:
    """A folder the user allowed, as the snapshot's paths are: a URL beside a snapshot on a remote store is a
    folder of that store (its filesystem and credentials), not a local path named ``s3:/...``."""
    if like is None or not is_remote_url(root):
        return root
    out = beside(root, like)
    if out is None:
        raise StorageError(f"{ALLOW_OPTION}={root!r}: not a folder of the store the snapshot {like} is on; expected "
                           "a URL of the same store (its files are read with the snapshot's own settings)")
    return out


def _inside(path: Any, root: Any) -> bool:
    return path == root or root in path.parents


class Roots:
    """The folders a snapshot's files may be read from.

    ``folders``: what the format defines (a savepoint's own folder; a checkpoint's ``chk-N``
    and its job's ``shared/`` and ``taskowned/``); ``extra``: folders the user allowed
    (the ``allow_roots`` option). Both are resolved once, here; a path is resolved when
    checked (:meth:`confine`), so a symlink whose target is inside is fine and one whose target
    is outside is refused, whatever its name says."""

    def __init__(self, folders: Iterable[Any], extra: Iterable[Any] | None = None,
                 what: str = "the snapshot folder") -> None:
        self.folders = [_real(f) for f in folders]
        remote = next((f for f in self.folders if isinstance(f, StoragePath)), None)
        self.extra = [_real(_extra_root(f, remote)) for f in (extra or ())]
        self.what = what

    @classmethod
    def of(cls, root: "Roots | Any") -> "Roots":
        """``root`` itself, or the roots of one folder."""
        return root if isinstance(root, Roots) else cls([root])

    def contains(self, path: Any) -> bool:
        """Whether ``path`` (resolved here) lies inside one of the roots."""
        real = _real(path)
        return any(_inside(real, r) for r in self.folders + self.extra)

    def confine(self, path: Any, named_by: Any = None, name: str | None = None, also: Iterable[Any] = ()) -> Any:
        """``path`` resolved, or :class:`UnsafePathError` when that lies outside every root.

        ``named_by``: the file (or folder) that named ``path``, where the error starts;
        ``name``: how it named it (a handle's path, an archive's entry), quoted escaped;
        ``also``: folders allowed for this path only (Flink: the other ``chk-M`` a handle names)."""
        real = _real(path)
        if any(_inside(real, r) for r in self.folders + self.extra + [_real(a) for a in also]):
            return real
        where = named_by if named_by is not None else path
        named = f"names {name!r}, which" if name is not None else "is a link that"
        allowed = ", ".join(str(r) for r in self.folders + self.extra)
        raise UnsafePathError(
            f"{where}: {named} resolves to {real}, outside {self.what}; expected a file under {allowed} "
            f"(symlinks resolved). To read it anyway, open with {ALLOW_OPTION}=[{str(real.parent)!r}]")

    def __repr__(self) -> str:
        return f"Roots({[str(f) for f in self.folders]}, extra={[str(f) for f in self.extra]})"


def own_file(folder: Any, name: str) -> Any:
    """``folder / name`` when it is the folder's own file, before a byte of it is read: a symlink whose target
    lies outside ``folder`` (a ``_metadata`` linking to another user's file) is :class:`UnsafePathError`,
    even when only a format's magic bytes would be compared (detection reads those first). Remote paths
    have no symlinks and come back as they are."""
    path = folder / name
    if isinstance(path, Path) and path.is_symlink():
        Roots([folder]).confine(path)
    return path


def plain_name(name: Any, where: Any, folder: str) -> str:
    """``name`` when it is a plain file name (no separator, not ``.``/``..``, no NUL, not empty, a
    string), to be joined to ``folder``; else :class:`UnsafePathError` naming ``where`` and the name."""
    ok = (isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\\" not in name
          and "\x00" not in name and not os.path.isabs(name))
    if not ok:
        raise UnsafePathError(f"{where}: names file {excerpt(name, 80)} in {folder}; expected a plain file name "
                              "(no '/', no '..', no NUL, not absolute)")
    return name


def excerpt(data: Any, limit: int = 16) -> str:
    """At most ``limit`` characters or bytes of ``data``, escaped (``repr``), with how many were left out:
    what an error message may quote of a file inside the snapshot (prefer offsets and lengths)."""
    if not isinstance(data, (str, bytes, bytearray, memoryview)):
        data = str(data)
    head = bytes(data[:limit]) if isinstance(data, (bytearray, memoryview)) else data[:limit]
    rest = len(data) - len(head)
    return repr(head) + (f" (and {rest} more)" if rest > 0 else "")

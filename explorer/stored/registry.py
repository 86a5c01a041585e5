"""Which reader opens a path: the readers known, a job's checkpoint directory, the newest checkpoint.

:data:`READERS` lists the reader classes tried in order. The engine's is always there; Apache
Flink's and Spark's are added by :func:`register_optional_readers` at the first path the engine's
does not recognise, so ``import explorer`` and opening an engine snapshot never import them.
:func:`register` adds a class once (idempotent), for those and for a user's own reader.

A job's checkpoint directory (``chk-N`` folders: the rule lives in
:mod:`explorer.format.checkpoint_dir`) opens as its newest ``chk-N`` that opens
(:func:`reader_for`); :func:`checkpoints_in` and :func:`retained_checkpoints` list them.

Paths are normalised here, at the door (:func:`explorer.storage.as_path`): a reader is given a
``pathlib.Path`` or a :class:`~explorer.storage.StoragePath`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterator

from ..errors import SnapshotError, SnapshotNotFoundError
from ..format import budget
from ..format.checkpoint_dir import METADATA_NAME, checkpoint_folders, has_metadata
from ..readers.base import SnapshotReader, convert_failure
from ..readers.engine import EngineSnapshotReader
from ..storage import FileCache, StoragePath, as_path
from .memory import parse_memory_budget
from .snapshot import StoredSnapshot

__all__ = ["READERS", "checkpoint_directory_of", "checkpoints_in", "open_stored", "reader_for", "register", "register_optional_readers",
           "retained_checkpoints"]

#: readers tried in order by :func:`reader_for` (add one with :func:`register`)
READERS: list[type[SnapshotReader]] = [EngineSnapshotReader]


def register(reader_cls: type[SnapshotReader]) -> None:
    """Add ``reader_cls`` to the end of :data:`READERS`, once: registering it again changes nothing."""
    if reader_cls not in READERS:
        READERS.append(reader_cls)


def register_optional_readers() -> None:
    """Register the Flink and Spark readers (imported at the first open they may serve, not with `explorer`)."""
    try:  # the Flink reader (pure Python)
        from ..readers.flink import FlinkSnapshotReader  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - optional module not present
        pass
    else:
        register(FlinkSnapshotReader)
    try:  # Spark checkpoints (needs a SparkSession only when read)
        from ..readers.spark import SparkCheckpointReader  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover
        pass
    else:
        register(SparkCheckpointReader)


def _readers_lazily() -> Iterator[type[SnapshotReader]]:
    """:data:`READERS` in order; the optional ones (Flink's, Spark's) registered, and so imported, only when
    the ones before them did not recognise the path (an engine snapshot opens without importing them)."""
    yield from list(READERS)
    register_optional_readers()
    yield from list(READERS)


def checkpoints_in(directory: Path) -> list[Path]:
    """Complete ``chk-N`` folders of an engine checkpoint directory, oldest first.

    Folders that vanish while they are looked at (a job's retention deleting old
    checkpoints) are left out, not an error.
    """
    return _engine_checkpoints(as_path(directory))


def _engine_checkpoints(directory: Any) -> list[Any]:
    try:
        return [p for _, p in checkpoint_folders(directory, EngineSnapshotReader.detect)]
    except FileNotFoundError as exc:
        raise SnapshotNotFoundError(f"{directory}: vanished while listing its chk-N folders") from exc


def retained_checkpoints(directory: Path) -> list[Path]:
    """The checkpoints of a job's checkpoint directory :func:`explorer.history` reads, oldest first.

    The engine's complete ``chk-N`` folders (:func:`checkpoints_in`); else the ``chk-N`` folders holding
    a ``_metadata`` (Apache Flink's retained checkpoints); else none (a snapshot, or not a directory).
    """
    directory = as_path(directory)
    if not directory.is_dir():
        return []
    return _engine_checkpoints(directory) or [p for _, p in checkpoint_folders(directory, has_metadata)]


def checkpoint_directory_of(snapshot: StoredSnapshot) -> Any | None:
    """What :func:`explorer.history` reads as the checkpoints of ``snapshot``'s job, or None.

    The folder of its retained ``chk-N`` when it is one of them (the engine's, Apache Flink's:
    :func:`retained_checkpoints`); the snapshot's own folder when that one folder holds every checkpoint
    (Spark's: ``in_chk_folders`` False, the reader has a history of its own); None for a snapshot on its
    own (a savepoint). The dashboards' History and Diff tabs ask here.
    """
    if not snapshot.reader.in_chk_folders:
        return snapshot.path
    parent = snapshot.path.parent  # a pathlib.Path, or a StoragePath (s3://...)
    return parent if retained_checkpoints(parent) else None


def _detect(reader_cls: type[SnapshotReader], p: Any) -> bool:
    try:
        return bool(reader_cls.detect(p))
    except Exception as exc:  # noqa: BLE001 - the error boundary of detection
        err = convert_failure(exc, p, what="detecting the format of")
        if err is exc:
            raise
        raise err from exc


def _newest_checkpoint(directory: Any, **options: Any) -> SnapshotReader | None:
    """The reader of the newest ``chk-N`` of ``directory`` that opens, whatever its format (the engine's,
    Flink's: a job's checkpoint directory of ``chk-N``, ``shared/``, ``taskowned/``), as the engines pick
    the checkpoint to restore; a newer one passed over (no ``_metadata`` yet: being written or aborted;
    or damaged) is said in a note of the reader and a warning."""
    passed: list[str] = []
    for n, p in checkpoint_folders(directory)[::-1]:
        try:
            cls = next((c for c in READERS if c.in_chk_folders and _detect(c, p)), None)
            if cls is None:
                passed.append(f"chk-{n} (no complete _metadata: being written, aborted or not a snapshot)")
                continue
            reader = cls(p, **options)
        except FileNotFoundError:
            passed.append(f"chk-{n} (vanished while opening it: removed by the job's retention?)")
            continue
        except SnapshotError as exc:
            passed.append(f"chk-{n} ({exc})")
            continue
        if passed:
            text = (f"{directory}: opened chk-{n}, the newest checkpoint that opens; passed over newer "
                    + "; ".join(passed))
            reader.notes.insert(0, text)
            warnings.warn(text, stacklevel=3)
        return reader
    if passed:
        raise SnapshotError(f"{directory}: no chk-N folder opens; found " + "; ".join(passed)
                            + "; expected at least one complete checkpoint")
    return None


def reader_for(path: str | Path, storage_options: dict[str, Any] | None = None,
               cache_dir: str | Path | None = None, cache_max_bytes: int | str | None = None,
               memory_budget: int | str | None = None, **options: Any) -> SnapshotReader:
    """The reader of a checkpoint, savepoint or checkpoint directory (its newest complete checkpoint).

    ``path``: a local path or a URL of a remote store (``s3://``, ``gs://``, ``hdfs://``,
    ``abfs://``; :mod:`explorer.storage`), whose files are fetched when first read into a local
    cache (``cache_dir``, ``cache_max_bytes``; ``storage_options`` for the filesystem).
    For a checkpoint directory, a newer ``chk-N`` that does not open is never passed over
    silently: the reader's notes and a warning say which one was opened and why.
    ``memory_budget`` (bytes, or a size such as ``"2GB"``): current while the snapshot is detected and
    its metadata read, so a metadata file or JSON too big for it is refused before it is read or parsed
    (:mod:`explorer.format.budget`).
    """
    with budget.using(None if memory_budget is None else parse_memory_budget(memory_budget)):
        return _reader_for(path, storage_options, cache_dir, cache_max_bytes, **options)


def _reader_for(path: str | Path, storage_options: dict[str, Any] | None, cache_dir: str | Path | None,
                cache_max_bytes: int | str | None, **options: Any) -> SnapshotReader:
    cache = FileCache(cache_dir, cache_max_bytes) if (cache_dir is not None or cache_max_bytes is not None) else None
    p = as_path(path, storage_options, cache)
    if not p.exists():
        raise SnapshotNotFoundError(f"{p}: no such file or directory; expected a checkpoint or savepoint folder")
    if p.is_dir() and not (p / METADATA_NAME).exists() and any(True for _ in checkpoint_folders(p)):
        register_optional_readers()  # a job's checkpoint directory may hold any format's chk-N
        reader = _newest_checkpoint(p, **options)
        if reader is not None:
            return reader
    tried: set[type[SnapshotReader]] = set()
    for reader_cls in _readers_lazily():
        if reader_cls in tried:
            continue
        tried.add(reader_cls)
        if _detect(reader_cls, p):
            if isinstance(p, StoragePath):
                return reader_cls.on_store(p, **options)
            return reader_cls(p, **options)
    listing = sorted(x.name for x in p.iterdir())[:10] if p.is_dir() else [p.name]
    raise SnapshotNotFoundError(
        f"{p}: found {listing}, which is no snapshot State Explorer knows; expected an engine checkpoint or "
        "savepoint (_metadata starting with SXSNAP), a checkpoint directory of chk-N folders, a Spark "
        "Structured Streaming checkpoint, or an Apache Flink savepoint/checkpoint (_metadata)"
    )


def open_stored(path: str | Path, memory_budget: int | str | None = None, **options: Any) -> StoredSnapshot:
    """A :class:`StoredSnapshot` of what :func:`reader_for` finds at ``path`` (``explorer.open``
    gives the same as an :class:`explorer.snapshot.Snapshot`)."""
    limit = parse_memory_budget(memory_budget)
    return StoredSnapshot(reader_for(path, memory_budget=limit, **options), memory_budget=limit)

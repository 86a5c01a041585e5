"""The one exception tree of State Explorer.

::

    StateExplorerError
    ├── KeyGroupError               parallelism / max parallelism / key-group rules broken
    ├── KeyTypeError                a key whose Java hashCode we cannot reproduce
    ├── StateError                  misuse of the state API at run time
    │   ├── StateNotDeclaredError   state used outside a keyed context or before open()
    │   └── SerializationError      a value that does not fit its declared type
    ├── JobError                    a pipeline that cannot be built or run
    │   └── CheckpointError         a checkpoint that could not be written (disk full, I/O error)
    ├── SnapshotError               anything wrong with a snapshot on disk
    │   ├── SnapshotNotFoundError   the path holds no snapshot we know
    │   ├── SnapshotFormatError     wrong magic number, unknown version, bad layout
    │   │   ├── FlinkFormatError    Flink bytes in a layout we do not know (also a ValueError)
    │   │   └── VersionGoneError    an older version whose files retention deleted (Spark's maintenance)
    │   ├── SnapshotCorruptError    checksum mismatch, torn or missing file
    │   │   └── FlinkCorruptError   a Flink state stream cut short or inconsistent (also a ValueError)
    │   ├── UnsafePathError         a path in metadata escapes the snapshot folder
    │   └── SnapshotTooLargeError   a declared or decompressed size over the memory budget, refused
    │                               before it is allocated (not a MemoryError: nothing was allocated)
    ├── RestoreError                a snapshot that does not fit the job restoring it
    │   └── StateMigrationError     renamed descriptor, changed kind, type or TTL
    ├── ReaderError                 a foreign format (Spark, Flink) we could not read
    ├── StorageError                a remote store (S3, GCS, HDFS, Azure) or the local cache of its
    │                               files refused, could not be reached, or failed
    ├── AnalysisError               an analysis asked of data that cannot answer it

Messages name the path or state, what was found and what was expected.
"""

from __future__ import annotations


class StateExplorerError(Exception):
    """Base of every error State Explorer raises on purpose."""


class KeyGroupError(StateExplorerError, ValueError):
    """A key-group rule was broken (for example parallelism > max parallelism)."""


class KeyTypeError(StateExplorerError, TypeError):
    """A key whose Java hashCode State Explorer cannot reproduce."""


class StateError(StateExplorerError):
    """The state API was misused at run time."""


class StateNotDeclaredError(StateError):
    """Keyed state was used outside a keyed context, or before open()."""


class SerializationError(StateError, TypeError):
    """A value does not fit the type its descriptor declares."""


class JobError(StateExplorerError):
    """A pipeline cannot be built or run."""


class CheckpointError(JobError):
    """A checkpoint could not be written (disk full, an I/O error); it is aborted, never completed."""


class SnapshotError(StateExplorerError):
    """Something is wrong with a snapshot on disk."""


class SnapshotNotFoundError(SnapshotError, FileNotFoundError):
    """The path holds no snapshot State Explorer knows."""


class SnapshotFormatError(SnapshotError):
    """Wrong magic number, unknown format version, or an unexpected layout."""


class FlinkFormatError(SnapshotFormatError, ValueError):
    """Bytes of a Flink snapshot in a layout the reader does not know (a magic number, a type code)."""


class VersionGoneError(SnapshotFormatError):
    """An older version of a store whose files the system's own retention deleted: not damage, not rebuildable."""


class SnapshotCorruptError(SnapshotError):
    """A checksum did not match, or a file is torn or missing."""


class FlinkCorruptError(SnapshotCorruptError, ValueError):
    """A Flink state stream cut short or inconsistent (an entry past its end, a short Snappy frame)."""


class UnsafePathError(SnapshotError):
    """A path named inside snapshot metadata escapes the snapshot folder."""


class SnapshotTooLargeError(SnapshotError):
    """A size in a snapshot (declared, decompressed or expanded) is over the memory budget; nothing was allocated."""


class RestoreError(StateExplorerError):
    """A snapshot does not fit the job that restores it."""


class StateMigrationError(RestoreError):
    """A state changed name, kind, type or TTL between snapshot and job."""


class ReaderError(StateExplorerError):
    """A foreign snapshot format (Spark, Flink) could not be read."""


class StorageError(StateExplorerError):
    """A remote store refused access, could not be reached or failed; or the local cache of its files did."""


class AnalysisError(StateExplorerError, ValueError):
    """An analysis was asked of data that cannot answer it (a missing column, an unknown operator)."""


class EditError(StateExplorerError, ValueError):
    """An edit names what the snapshot lacks, or would not be written back exactly."""

"""State Explorer: open stream-processing checkpoints and savepoints into pandas.

>>> import explorer
>>> snap = explorer.open("out/url_counts/heap/savepoint")
>>> snap.keyed_state(state="count").head()

What ``import explorer`` exports (``__all__``; ``tests/test_public_api.py`` checks it equals the
public names here): the entry points (``open``, ``list``, ``history``, ``diff``, ``changes``,
``Snapshot``, ``CONTRACT_COLUMNS``), the IPython extension's hook, every class of the error tree
(``explorer/errors.py``, so ``except explorer.SnapshotCorruptError`` works without knowing the
module), and Flink's three key-group rules for one key (``assign_to_key_group``,
``operator_index_for_key_group``, ``compute_default_max_parallelism``). The rest of the key-group
arithmetic (vectorised, Spark's partitioning, Java hash codes) lives in ``explorer.keygroups``.

Where each concept lives, the layers and what each may import: ``explorer/ARCHITECTURE.md``.
"""

from . import errors  # noqa: F401 - explorer.errors, the tree's module, stays an attribute
from .errors import (
    AnalysisError,
    CheckpointError,
    FlinkCorruptError,
    FlinkFormatError,
    JobError,
    KeyGroupError,
    KeyTypeError,
    ReaderError,
    RestoreError,
    SerializationError,
    SnapshotCorruptError,
    SnapshotError,
    SnapshotFormatError,
    SnapshotNotFoundError,
    SnapshotTooLargeError,
    StateError,
    StateExplorerError,
    StateMigrationError,
    StateNotDeclaredError,
    StorageError,
    UnsafePathError,
)
from .analysis import changes, diff, history
from .catalog import list_snapshots as list  # noqa: A004 - explorer.list(path), the public name
from .keygroups import assign_to_key_group, compute_default_max_parallelism, operator_index_for_key_group
from .readers.base import CONTRACT_COLUMNS
from .snapshot import Snapshot, open

__version__ = "0.1.0"

__all__ = [
    "AnalysisError",
    "CONTRACT_COLUMNS",
    "CheckpointError",
    "FlinkCorruptError",
    "FlinkFormatError",
    "JobError",
    "KeyGroupError",
    "KeyTypeError",
    "ReaderError",
    "RestoreError",
    "SerializationError",
    "Snapshot",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotFormatError",
    "SnapshotNotFoundError",
    "SnapshotTooLargeError",
    "StateError",
    "StateExplorerError",
    "StateMigrationError",
    "StateNotDeclaredError",
    "StorageError",
    "UnsafePathError",
    "assign_to_key_group",
    "changes",
    "compute_default_max_parallelism",
    "diff",
    "history",
    "list",
    "load_ipython_extension",
    "open",
    "operator_index_for_key_group",
]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's InteractiveShell
    """``%load_ext explorer``: the ``%explore PATH`` magic and rich display of snapshots."""
    from .ipython import load_ipython_extension as load

    load(ipython)

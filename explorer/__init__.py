"""State Explorer: open stream-processing checkpoints and savepoints into pandas.

>>> import explorer
>>> snap = explorer.open("out/url_counts/heap/savepoint")
>>> snap.keyed_state(state="count").head()

What ``import explorer`` exports (``__all__``; ``tests/test_public_api.py`` checks it equals the
public names here): the entry points (``open``, ``list``, ``history``, ``diff``, ``changes``,
``verify``, ``edit``, ``compatible``, ``Snapshot``, ``CONTRACT_COLUMNS``), the IPython extension's hook, every class of the error tree
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
    EditError,
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
    VersionGoneError,
)

__version__ = "0.1.0"

#: names imported on first use (PEP 562): they pull in pandas, pyarrow, numba and plotly, which a
#: command's ``--help``, the errors and ``explorer.keygroups`` do not need, so ``import explorer`` stays light
_LAZY = ("CONTRACT_COLUMNS", "Snapshot", "assign_to_key_group", "changes", "compatible",
         "compute_default_max_parallelism", "diff", "edit", "history", "list", "open", "operator_index_for_key_group", "verify")


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in ("changes", "diff", "history"):
        from . import analysis as module
    elif name == "list":
        from . import catalog

        value = catalog.list_snapshots
    elif name == "CONTRACT_COLUMNS":
        from .readers import base as module
    elif name in ("Snapshot", "open"):
        from . import snapshot as module
    elif name == "verify":
        from . import verification as module
    elif name == "edit":
        from . import editing as module
    elif name == "compatible":
        from . import compatibility as module
    else:
        from . import keygroups as module
    if name != "list":
        value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "AnalysisError",
    "CONTRACT_COLUMNS",
    "CheckpointError",
    "EditError",
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
    "VersionGoneError",
    "assign_to_key_group",
    "changes",
    "compatible",
    "compute_default_max_parallelism",
    "diff",
    "edit",
    "history",
    "list",
    "load_ipython_extension",
    "open",
    "operator_index_for_key_group",
    "verify",
]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's InteractiveShell
    """``%load_ext explorer``: the ``%explore PATH`` magic and rich display of snapshots."""
    from .ipython import load_ipython_extension as load

    load(ipython)

"""State Explorer: open stream-processing checkpoints and savepoints into pandas.

>>> import explorer
>>> snap = explorer.open("out/url_counts/heap/savepoint")
>>> snap.keyed_state(state="count").head()

Where each concept lives, the layers and what each may import: ``explorer/ARCHITECTURE.md``.
"""

from . import errors
from .errors import (
    SnapshotCorruptError,
    SnapshotError,
    SnapshotFormatError,
    SnapshotNotFoundError,
    StateExplorerError,
)
from .analysis import changes, diff, history
from .catalog import list_snapshots as list  # noqa: A004 - explorer.list(path), the public name
from .keygroups import assign_to_key_group, compute_default_max_parallelism
from .readers.base import CONTRACT_COLUMNS
from .snapshot import Snapshot, open

__version__ = "0.1.0"

__all__ = [
    "CONTRACT_COLUMNS",
    "Snapshot",
    "SnapshotCorruptError",
    "SnapshotError",
    "SnapshotFormatError",
    "SnapshotNotFoundError",
    "StateExplorerError",
    "assign_to_key_group",
    "changes",
    "compute_default_max_parallelism",
    "diff",
    "errors",
    "history",
    "list",
    "load_ipython_extension",
    "open",
]


def load_ipython_extension(ipython):  # noqa: ANN001 - IPython's InteractiveShell
    """``%load_ext explorer``: the ``%explore PATH`` magic and rich display of snapshots."""
    from .ipython import load_ipython_extension as load

    load(ipython)

"""What every snapshot reader gives the explorer.

A reader turns one on-disk format (our engine's checkpoints and savepoints,
Spark checkpoints, Apache Flink savepoints and checkpoints) into the same
model, so every analysis, chart and widget works on every format.

A reader is cheap to construct: it reads metadata only. Keyed state is read
on demand, in *pieces* (one Arrow table per operator/state/file), filtered
as close to the files as the format allows.

Every piece has the columns of the public contract, in this order
(:data:`CONTRACT_COLUMNS`):

==============  ===============================  ======================================
column          Arrow type                       meaning
==============  ===============================  ======================================
operator        string                           operator name (uid when no name)
state           string                           state descriptor name
kind            string                           one of :data:`STATE_KINDS`
key             any (per piece)                  the key, as a Python-native value
key_group       int32                            Flink key group (Spark: partition id)
subtask         int32                            owning subtask at the snapshot's parallelism
namespace       any (per piece), nullable        window / namespace, null for the default
user_key        any (per piece), nullable        map key (map state), list index (list)
value           any (per piece), nullable        value, list element or map value;
                                                 a timer's timestamp (int64 ms) for timers
last_access     timestamp[ms, tz=UTC], nullable  TTL last-access time
expires_at      timestamp[ms, tz=UTC], nullable  when TTL expires the entry
size_bytes      int64                            serialized size of this entry's value
==============  ===============================  ======================================

Columns whose type is "any" may differ between pieces (string keys in one
operator, int keys in another); :class:`explorer.snapshot.Snapshot` combines
pieces into one pandas DataFrame.
"""

from __future__ import annotations

import functools
import inspect
import json
import struct
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import cramjam
import numpy as np
import pandas as pd
import pyarrow as pa

from ..errors import ReaderError, SnapshotCorruptError, SnapshotFormatError, StateExplorerError
from ..format import budget
from ..storage import as_path

CONTRACT_COLUMNS: tuple[str, ...] = (
    "operator",
    "state",
    "kind",
    "key",
    "key_group",
    "subtask",
    "namespace",
    "user_key",
    "value",
    "last_access",
    "expires_at",
    "size_bytes",
)

STATE_KINDS: tuple[str, ...] = (
    "value",
    "list",
    "map",
    "reducing",
    "aggregating",
    "event_timer",
    "processing_timer",
)

TIMESTAMP = pa.timestamp("ms", tz="UTC")

#: piece schema metadata naming struct columns (``f0, f1, ...``) that stand for tuple keys
TUPLE_COLUMNS = b"explorer.tuple_columns"
#: piece schema metadata: a JSON object of the columns :func:`make_piece` was given one value for (operator,
#: state, kind) and that value, also for such columns the query left out; whoever combines pieces takes the
#: value from here instead of comparing every row, and can leave those columns out of what it reads
CONSTANT_VALUES = b"explorer.constant_values"


def struct_to_tuple(value):
    """``{"f0": a, "f1": b}`` (a tuple key as Arrow stores it) back to ``(a, b)``, recursively."""
    if isinstance(value, dict) and value and all(k == f"f{i}" for i, k in enumerate(value)):
        return tuple(struct_to_tuple(v) for v in value.values())
    return value

#: names of the union children that hold Python values Arrow has no type for, and what makes them
#: again: containers kept as lists, dicts with a None key as [key, value] pairs, ints beyond int64 as
#: decimals (or their digits beyond 76 of them)
PY_CONTAINER_KINDS = {"tuple": tuple, "set": set, "frozenset": frozenset, "dict_items": dict, "bigint": int,
                      "bigint_digits": int}


def has_union(t: pa.DataType, nested: bool = False) -> bool:
    """Whether a column of this Arrow type must become pandas values through :func:`python_values`:
    it holds a union anywhere (values of mixed Python types, kept typed), or a nanosecond timestamp
    inside a struct, list or map (Arrow's pandas conversion makes those integers or microseconds)."""
    if pa.types.is_union(t):
        return True
    if nested and pa.types.is_timestamp(t) and t.unit == "ns":
        return True
    if pa.types.is_struct(t):
        return any(has_union(t.field(i).type, True) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return has_union(t.key_type, True) or has_union(t.item_type, True)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return has_union(t.value_type, True)
    return False


def _union_below(t: pa.DataType) -> bool:
    return pa.types.is_union(t) or any(_union_below(t.field(i).type) for i in range(t.num_fields))


def python_values(arr: pa.Array | pa.ChunkedArray) -> list:
    """The Python values of an Arrow array that may hold unions: each value as it was before it was
    stored (a union child named ``tuple``/``set``/``frozenset`` gives back that container), maps as dicts."""
    if isinstance(arr, pa.ChunkedArray):
        return [v for c in arr.chunks for v in python_values(c)]
    t = arr.type
    if not _union_below(t):  # Arrow's own walk (nanosecond timestamps as pd.Timestamp)
        return arr.to_pylist(maps_as_pydicts="strict")
    if pa.types.is_union(t):
        n, at = len(arr), arr.offset  # type_codes/offsets do not follow a slice: read the buffers
        codes = np.frombuffer(arr.buffers()[1], dtype=np.int8)[at:at + n]
        kids = {}
        for i in range(t.num_fields):
            f = t.field(i)
            vals = python_values(arr.field(i))
            conv = PY_CONTAINER_KINDS.get(f.name)
            kids[t.type_codes[i]] = [None if v is None else conv(v) for v in vals] if conv else vals
        if t.mode == "dense":
            offs = np.frombuffer(arr.buffers()[2], dtype=np.int32)[at:at + n]
            return [kids[c][o] for c, o in zip(codes, offs)]
        return [kids[c][i] for i, c in enumerate(codes)]
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    if pa.types.is_struct(t):
        names = [t.field(i).name for i in range(t.num_fields)]
        cols = [python_values(arr.field(i)) for i in range(t.num_fields)]
        return [dict(zip(names, row)) if ok else None for ok, row in zip(valid, zip(*cols))] if cols \
            else [{} if ok else None for ok in valid]
    offs = arr.offsets.to_numpy(zero_copy_only=False)  # into the whole child (``values`` ignores slicing)
    if pa.types.is_map(t):
        entries = arr.values
        ks, its = python_values(entries.field(0)), python_values(entries.field(1))
        return [dict(zip(ks[a:b], its[a:b])) if ok else None for ok, a, b in zip(valid, offs[:-1], offs[1:])]
    flat = python_values(arr.values)
    return [flat[a:b] if ok else None for ok, a, b in zip(valid, offs[:-1], offs[1:])]


#: Arrow types of the columns whose type is fixed by the contract.
FIXED_TYPES: dict[str, pa.DataType] = {
    "operator": pa.string(),
    "state": pa.string(),
    "kind": pa.string(),
    "key_group": pa.int32(),
    "subtask": pa.int32(),
    "last_access": TIMESTAMP,
    "expires_at": TIMESTAMP,
    "size_bytes": pa.int64(),
}

#: Columns of :meth:`SnapshotReader.operators` (readers may add more after these).
OPERATOR_COLUMNS = ("operator", "operator_id", "uid", "parallelism", "max_parallelism")
#: Columns of :meth:`SnapshotReader.states` (readers may add more after these).
STATE_COLUMNS = ("operator", "state", "kind", "key_type", "value_type", "ttl_ms", "update_type", "visibility")
#: Columns of :meth:`SnapshotReader.subtasks` (readers may add more after these).
SUBTASK_COLUMNS = ("operator", "subtask", "key_group_start", "key_group_end")
#: metadata columns of whole numbers that may be missing (a TTL a format does not store, the key-group range of
#: an operator without keyed state): nullable Int64, never floats (``0.0 42.0``) or ``None`` in an object column
WHOLE_NUMBER_COLUMNS = ("ttl_ms", "key_group_start", "key_group_end", "parallelism", "max_parallelism")


def tidy_metadata(df: pd.DataFrame) -> pd.DataFrame:
    """A metadata frame (operators, states, subtasks) with missing values as ``<NA>`` in sensible dtypes:
    :data:`WHOLE_NUMBER_COLUMNS` as nullable Int64, text columns holding ``None`` as ``<NA>``."""
    out = df.copy()
    for c in out.columns:
        col = out[c]
        if c in WHOLE_NUMBER_COLUMNS and str(col.dtype) != "Int64":
            num = pd.to_numeric(col, errors="coerce")
            if num.notna().sum() == col.notna().sum() and (num.dropna() % 1 == 0).all():
                out[c] = num.round().astype("Int64")
        elif col.dtype == object and col.map(lambda v: v is None).any():
            out[c] = col.where(col.map(lambda v: v is not None), pd.NA)
    return out


#: Columns of :meth:`SnapshotReader.operator_state`.
OPERATOR_STATE_COLUMNS = ("operator", "state", "mode", "subtask", "user_key", "value", "size_bytes")


@dataclass(frozen=True)
class KeyedStateQuery:
    """What to read. ``None`` means "all"."""

    operators: frozenset[str] | None = None
    states: frozenset[str] | None = None
    key_groups: frozenset[int] | None = None
    keys: tuple[Any, ...] | None = None
    columns: tuple[str, ...] | None = None

    def wants_operator(self, operator: str) -> bool:
        return self.operators is None or operator in self.operators

    def wants_state(self, state: str) -> bool:
        return self.states is None or state in self.states


@dataclass
class SnapshotInfo:
    """Metadata of one snapshot, the same for every format."""

    path: Path
    format: str  # "engine-checkpoint", "engine-savepoint", "spark-checkpoint", "flink-savepoint", "flink-checkpoint"
    kind: str  # "checkpoint" or "savepoint"
    checkpoint_id: int | None = None
    created_at: pd.Timestamp | None = None
    job_id: str | None = None
    job_name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


#: the methods of a reader that :class:`SnapshotReader` puts behind the error boundary
BOUNDARY_METHODS = ("__init__", "info", "operators", "states", "subtasks", "keyed_pieces", "estimated_rows",
                    "operator_state", "metrics", "heavy_hitters", "timings")

#: failures that mean bytes are damaged (cut short, undecodable, absurd sizes), as opposed to a
#: structure the code did not expect (AttributeError, KeyError, ...: damage or an unsupported layout)
_CORRUPTION: tuple[type[BaseException], ...] = (
    struct.error, EOFError, UnicodeDecodeError, OverflowError, zlib.error, cramjam.DecompressionError,
    pa.ArrowInvalid, OSError,
)


class ConversionFailure(Exception):
    """Raised by a decoder for a value that decoded from its bytes but that State Explorer's own conversion
    cannot hold (a timestamp past pandas' years 1677-2262, ...). Not damaged input: the error boundary and the
    readers report it as a :class:`~explorer.errors.ReaderError` naming the conversion (not a ``ValueError``,
    so that no reader's tuple of damaged-input errors catches it)."""


def raised_by_conversion(exc: BaseException) -> bool:
    """Whether ``exc`` comes from State Explorer's own conversion of decoded values, not from their bytes:
    a :class:`ConversionFailure`, or an error raised inside pandas (which never reads snapshot bytes here;
    Arrow does, for Parquet, so Arrow's errors stay damage)."""
    if isinstance(exc, ConversionFailure):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    return isinstance(exc, (OverflowError, ValueError, TypeError)) and module.split(".")[0] == "pandas"


def conversion_error(exc: BaseException, where: str, what: str = "reading") -> ReaderError:
    """The :class:`ReaderError` for a failure of State Explorer's own conversion (see :func:`raised_by_conversion`)."""
    err = ReaderError(f"{where}: State Explorer could not convert a decoded value while {what} ({_found(exc)}); "
                      "the bytes decoded: this is a limit of State Explorer's conversion to pandas/Arrow, "
                      "not damaged input")
    err.__cause__ = exc
    return err


def _found(exc: BaseException) -> str:
    text = str(exc).strip() or "no message"
    if len(text) > 300:
        text = text[:300] + "…"
    return f"{type(exc).__module__}.{type(exc).__qualname__}: {text}"


def convert_failure(exc: BaseException, path: Path | str, file: Path | str | None = None,
                    what: str = "reading") -> StateExplorerError:
    """The :class:`StateExplorerError` a failure below the readers becomes (the error boundary).

    ``path`` is the snapshot; ``file`` the file being read when known (an ``OSError``'s own
    ``filename`` wins). A :class:`StateExplorerError` that already names the snapshot or the
    file passes through; one that names neither gets the path in front of its message (same class).
    """
    name = getattr(exc, "filename", None) or file or path
    if isinstance(exc, StateExplorerError):
        text = str(exc)
        if str(path) in text or (file is not None and str(file) in text) or str(name) in text:
            return exc
        try:
            clone = type(exc)(f"{name}: {text}")
        except Exception:  # noqa: BLE001 - a subclass with its own constructor: keep it as it is
            return exc
        clone.__cause__ = exc
        return clone
    if raised_by_conversion(exc):
        where = f"{name}" if str(name) == str(path) else f"{name} (snapshot {path})"
        return conversion_error(exc, where, what)
    if isinstance(exc, FileNotFoundError):
        err: StateExplorerError = SnapshotCorruptError(
            f"{name}: missing or vanished while {what} the snapshot {path} ({_found(exc)}); "
            "expected every file its metadata lists to stay in place")
    elif isinstance(exc, OSError) and getattr(exc, "filename", None):
        err = SnapshotCorruptError(f"{name}: unreadable while {what} the snapshot {path} ({_found(exc)})")
    elif type(exc).__module__.split(".")[0] in ("pyspark", "py4j"):
        err = ReaderError(f"{name}: Spark failed while {what} the snapshot {path} ({_found(exc)}); expected a "
                          "SparkSession that reads the checkpoint")  # not necessarily damage: Spark itself
    elif isinstance(exc, MemoryError):
        err = SnapshotCorruptError(
            f"{name}: a length or count in the file asks for more memory than there is (MemoryError) while {what} the "
            f"snapshot {path}; expected sizes that fit the file (damaged length field?)")
    elif isinstance(exc, _CORRUPTION):
        where = f"{name}" if str(name) == str(path) else f"{name} (snapshot {path})"
        err = SnapshotCorruptError(
            f"{where}: found bytes that do not decode ({_found(exc)}) while {what}; expected the layout "
            "the snapshot's format declares (the file is damaged or not what its metadata says)")
    else:  # a structure the code did not expect: damage, or a layout this reader does not handle yet
        where = f"{name}" if str(name) == str(path) else f"{name} (snapshot {path})"
        err = SnapshotFormatError(
            f"{where}: found a structure this reader does not handle ({_found(exc)}) while {what}; expected "
            "the layout the snapshot's format declares (the file is damaged, or uses a layout or serializer "
            "State Explorer does not read yet)")
    err.__cause__ = exc
    return err


def _reraise(exc: Exception, path: Any, file: Any, what: str = "reading"):
    err = convert_failure(exc, path, file, what)
    if err is exc:
        raise exc
    raise err from exc


def _guard_iter(reader: Any, it: Iterator) -> Iterator:
    limit = getattr(reader, "memory_budget", None)
    try:
        while True:  # the reader's budget is current while it works, not while the caller holds a piece
            with budget.using(limit):
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item
    except GeneratorExit:
        if hasattr(it, "close"):
            it.close()
        raise
    except Exception as exc:  # noqa: BLE001 - the boundary: everything below becomes the tree
        _reraise(exc, getattr(reader, "path", "?"), getattr(reader, "current_file", None))


def _raised_in(exc: BaseException, fn: Callable) -> bool:
    """Whether ``exc`` was raised by ``fn``'s own body (not by something it called)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code is fn.__code__


def _guard(name: str, fn: Callable) -> Callable:
    """``fn`` with every failure passed through :func:`convert_failure` (iterators it returns too)."""
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        try:
            with budget.using(getattr(self, "memory_budget", None)):
                out = fn(self, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the boundary: everything below becomes the tree
            if (name == "__init__" and isinstance(exc, (ValueError, TypeError))
                    and not isinstance(exc, UnicodeError) and _raised_in(exc, fn)):
                raise  # the constructor's own check of its options (a bad argument), not damaged input
            path = getattr(self, "path", None) or (args[0] if args else "?")
            _reraise(exc, path, getattr(self, "current_file", None), "opening" if name == "__init__" else "reading")
        if inspect.isgenerator(out):
            return _guard_iter(self, out)
        return out
    call.__boundary__ = True  # type: ignore[attr-defined]
    return call


class SnapshotReader(ABC):
    """One snapshot on disk, read lazily. Subclasses exist per format.

    *The error boundary*: every subclass's :data:`BOUNDARY_METHODS` are wrapped when the
    subclass is defined, so whatever fails below them (a decompressor, a decoder, Arrow, a
    vanished file, a numba kernel's status, an absurd length) reaches the caller as a
    :class:`~explorer.errors.StateExplorerError` naming the snapshot, the file when the
    reader set :attr:`current_file`, what was found (the original exception, chained) and
    what was expected. Readers raise their own, more precise errors where they can.
    """

    #: short name of the format, for messages and ``Snapshot.format``
    format_name: str = "unknown"
    #: the file being read, when the reader knows it (named by the error boundary)
    current_file: Path | None = None
    #: whether this format's snapshots are the ``chk-N`` folders of a job's checkpoint directory (the
    #: engine's, Flink's), so the newest of them is looked for with this reader; False for a format whose
    #: one folder holds every checkpoint (Spark's)
    in_chk_folders: bool = True

    #: bytes a declared or decompressed size may take (``memory_budget=``; set by the stored snapshot): the
    #: boundary makes it current for the decoders below (:mod:`explorer.format.budget`); None: unchecked
    memory_budget: int | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in BOUNDARY_METHODS:
            fn = cls.__dict__.get(name)
            if fn is not None and callable(fn) and not getattr(fn, "__boundary__", False):
                setattr(cls, name, _guard(name, fn))

    def __init__(self, path: str | Path) -> None:
        self.path = as_path(path)
        #: things the user should know (an unknown serializer, a skipped file)
        self.notes: list[str] = []

    @classmethod
    def on_store(cls, remote: Any, **options: Any) -> "SnapshotReader":
        """The reader of ``remote``, a :class:`~explorer.storage.StoragePath` this format detected.

        The default reads through the path itself (its files fetched into the local cache as they
        are read); a format that needs a local folder (Spark's) mirrors the files it reads first.
        """
        return cls(remote, **options)

    @classmethod
    @abstractmethod
    def detect(cls, path: Path) -> bool:
        """Cheaply tell whether ``path`` holds this format (look at names and magic bytes)."""

    @abstractmethod
    def info(self) -> SnapshotInfo:
        """Metadata: id, kind, times."""

    @abstractmethod
    def operators(self) -> pd.DataFrame:
        """One row per operator: :data:`OPERATOR_COLUMNS` first."""

    @abstractmethod
    def states(self) -> pd.DataFrame:
        """One row per (operator, state): :data:`STATE_COLUMNS` first."""

    @abstractmethod
    def subtasks(self) -> pd.DataFrame:
        """One row per (operator, subtask): :data:`SUBTASK_COLUMNS` first."""

    @abstractmethod
    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator[pa.Table]:
        """Keyed state as Arrow tables with :data:`CONTRACT_COLUMNS` (see module doc)."""

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        """How many rows :meth:`keyed_pieces` will yield, if known cheaply (for progress bars)."""
        return None

    def operator_state(self) -> pd.DataFrame:
        """Operator (list/union) and broadcast state: :data:`OPERATOR_STATE_COLUMNS`."""
        return pd.DataFrame(columns=list(OPERATOR_STATE_COLUMNS))

    def metrics(self) -> pd.DataFrame:
        """Per key group metrics the snapshot carries (records, entries, bytes), if any."""
        return pd.DataFrame(columns=["operator", "key_group", "records", "entries", "bytes"])

    def heavy_hitters(self) -> pd.DataFrame:
        """Hottest keys by traffic from the snapshot's sketch, if any: operator, key, count, error."""
        return pd.DataFrame(columns=["operator", "key", "count", "error"])

    def timings(self) -> dict[str, Any]:
        """Checkpoint timing figures (sync/async duration, alignment, bytes), if any."""
        return {}

    # --- optional abilities: each declared here with its default, overridden by the formats that have it ---
    #: whether :meth:`keyed_pieces` of a query with ``keys`` (from :meth:`key_query`) yields only the rows of
    #: those keys; False: the caller filters the rows it gets by key (the default)
    filters_keys: bool = False
    #: whether reading the entries (``namespace, user_key, value``) with the analysis columns costs little more
    #: (their Parquet columns beside the keys: the engine's); the analyses then hash them as they load, rather
    #: than read the state again for a diff. False: they are read when a diff asks (the default)
    entries_with_keys: bool = False

    def key_query(self, query: KeyedStateQuery, key: Any) -> KeyedStateQuery | None:
        """The query that reads the rows of ``key`` (``keyed_state(key=...)``), for a format that places
        keys its own way (Spark's partitions); None: keys are placed by key group, as Flink places them,
        and the caller restricts the query to ``key``'s key group (the default)."""
        return None

    def key_group_rows(self, query: KeyedStateQuery) -> np.ndarray | None:
        """Rows per key group ``0..M-1`` (``M`` the largest max parallelism asked) that :meth:`keyed_pieces`
        would yield, estimated from the metadata alone (what key-group ranges are planned from,
        :mod:`explorer.analysis._ranges`); None: not known without reading (the default)."""
        return None

    def parquet_files(self, query: KeyedStateQuery) -> list[dict[str, Any]] | None:
        """The Parquet files holding the keyed state asked for, for a Dataset over them, not a copy:
        ``file`` (a local path), ``operator``, ``state``, ``subtask``, ``key_group_start``,
        ``key_group_end`` each; None: the state is not stored as such files (the default)."""
        return None

    def stored_files(self) -> pd.DataFrame | None:
        """Every stored file (or piece of one) the snapshot names, for :func:`explorer.history`, from the
        metadata alone: ``operator`` (None for the snapshot's own files), ``file`` (an identity equal
        across the checkpoints of a job that share the file), ``bytes`` and ``inline`` (stored inside
        a file another row counts); None: the format lists none (the default)."""
        return None

    def file_bytes(self) -> dict[str, int] | None:
        """Bytes of each file the snapshot stores, by an identity equal across checkpoints that share the
        file's content (what :func:`explorer.history`'s incremental bytes compare); None: not known. The
        default: :meth:`stored_files`' rows not ``inline``."""
        files = self.stored_files()
        if files is None:
            return None
        stored = files[~files["inline"].astype(bool)] if "inline" in files else files
        return {str(f): int(b) for f, b in zip(stored["file"], stored["bytes"])}

    def state_bytes(self) -> dict[tuple[str, str], int] | None:
        """Bytes of the files of each ``(operator, state)`` (timers as state ``"timers"``), for a format
        that stores a state's rows in files of their own; None: the format does not (the default)."""
        return None

    def history(self, keys: bool = True, per_state: bool = True) -> pd.DataFrame | None:
        """Every checkpoint this one snapshot holds, as :func:`explorer.history` gives them, for a format
        whose one folder holds them all (Spark's); None: the reader has no history of its own (the
        default: the history is read from a checkpoint directory's snapshots)."""
        return None
    @classmethod
    def check_files(cls, path: Path, **options: Any) -> list:
        """Every file of the snapshot at ``path`` checked without decoding a value: a list of
        :class:`~explorer.readers.checks.FileCheck` (``explorer.verify``). A class method: a snapshot too
        damaged to open is still checked. Formats that cannot say so."""
        raise ReaderError(f"{path}: checking the files of a {cls.format_name} snapshot is not supported; "
                          "expected an engine, Apache Flink or Spark snapshot")


def empty_piece(columns: Sequence[str] = CONTRACT_COLUMNS) -> pa.Table:
    """A zero-row piece with the contract schema (null type for the free columns)."""
    return pa.table({c: pa.array([], type=FIXED_TYPES.get(c, pa.null())) for c in columns})


def constant_values(piece: pa.Table) -> dict[str, Any]:
    """The columns :func:`make_piece` was given one value for, and those values (:data:`CONSTANT_VALUES`)."""
    raw = (piece.schema.metadata or {}).get(CONSTANT_VALUES)
    return json.loads(raw) if raw else {}


def piece_value(piece: pa.Table, name: str) -> Any:
    """The value of a one-value column of ``piece`` (operator, state, kind), whether the piece holds the column
    or only its value (a query that left the column out); None when the piece has neither or no rows."""
    given = constant_values(piece)
    if name in given:
        return given[name]
    if name in piece.column_names and piece.num_rows:
        return piece.column(name)[0].as_py()
    return None


def _repeat_string(text: str, n: int) -> pa.Array:
    """``text`` ``n`` times as an Arrow string array, built from its buffers (~3x faster than pa.repeat)."""
    raw = text.encode("utf-8")
    if not raw or n * len(raw) >= 1 << 31:
        return pa.repeat(pa.scalar(text, pa.string()), n)
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(raw * n))


def make_piece(data: dict[str, Any], columns: Iterable[str] | None = None, *,
               leave_out: Iterable[str] = ()) -> pa.Table:
    """Build a contract piece from column arrays, casting fixed columns to their types.

    Missing columns become nulls. ``data`` values may be lists, NumPy arrays or Arrow arrays, or one
    ``str``/``int`` for the whole column: its value is recorded in :data:`CONSTANT_VALUES`, and the
    column is not built at all when ``columns`` or ``leave_out`` leaves it out.
    """
    n = None
    for v in data.values():
        if not isinstance(v, (str, int, type(None))):
            n = len(v)
            break
    if n is None:
        raise ValueError("make_piece needs at least one column array")
    keep = None if columns is None else set(columns)
    leave_out = set(leave_out)
    arrays = {}
    constant = {}
    for c in CONTRACT_COLUMNS:
        v = data.get(c)
        t = FIXED_TYPES.get(c)
        if v is None:
            arrays[c] = pa.nulls(n, type=t or pa.null())
        elif isinstance(v, (str, int)):
            constant[c] = v
            if (keep is None or c in keep) and c not in leave_out:  # not a Python list of n copies: that was
                # the slowest step of loading
                arrays[c] = _repeat_string(v, n) if isinstance(v, str) and t == pa.string() else \
                    pa.repeat(pa.scalar(v, type=t), n)
        else:
            arr = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v, from_pandas=True)
            if t is not None and arr.type != t:
                arr = arr.cast(t)
            arrays[c] = arr
    table = pa.table(arrays)
    if columns is not None:
        table = table.select(list(columns))
    if constant:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                               CONSTANT_VALUES: json.dumps(constant).encode()})
    return table

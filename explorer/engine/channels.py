"""What travels between subtasks: batches of records and stream events, through channels.

A :class:`Channel` connects one upstream subtask to one downstream subtask,
like a network channel in Flink. It carries, in order, :class:`Batch` es of
records (Flink's network buffers) and events: :class:`Watermark`,
:class:`Barrier` and :class:`EndOfInput`. Channels have a capacity in
batches; a full channel back-pressures its producer (credit-based flow
control), so memory stays bounded whatever the input size.
"""

from __future__ import annotations

import operator
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..keygroups import assign_key_groups, java_string_hash_codes, key_groups_for_hash_codes

MAX_WATERMARK = (1 << 63) - 1
MIN_WATERMARK = -(1 << 63)


class Batch:
    """Records with (optional) event timestamps; after a hash edge also their keys and key groups.

    A hash edge also factorises the keys once per batch: ``codes[i]`` is the
    position of record ``i``'s key in ``uniques`` (the batch's distinct keys in
    order of first appearance) and ``ukgs[j]`` the key group of ``uniques[j]``,
    so keyed operators can work per distinct key without hashing again.
    """

    __slots__ = ("values", "timestamps", "keys", "key_groups", "codes", "uniques", "ukgs", "ucodes", "dictionary")

    def __init__(
        self,
        values: list[Any],
        timestamps: list[int | None] | None = None,
        keys: list[Any] | None = None,
        key_groups: np.ndarray | None = None,
        codes: np.ndarray | None = None,
        uniques: list[Any] | None = None,
        ukgs: np.ndarray | None = None,
    ) -> None:
        self.values = values
        self.timestamps = timestamps
        self.keys = keys
        self.key_groups = key_groups
        self.codes = codes
        self.uniques = uniques
        self.ukgs = ukgs
        #: keys from a dictionary-encoded column: ``uniques[j] is dictionary.values[ucodes[j]]``
        self.ucodes: np.ndarray | None = None
        self.dictionary: KeyDictionary | None = None

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"Batch({len(self)} records)"


class KeyDictionary:
    """The distinct values of a dictionary-encoded column, shared by every batch cut from it
    (or the keys a hash edge has seen so far, in order of first appearance; values are only
    ever appended).

    Values are Python objects, made once. Key groups of all values are computed
    once per max parallelism (vectorised), so a batch of this column finds the
    key group of each of its keys by NumPy indexing; keyed state may likewise
    cache where each dictionary value is stored (see ``ColumnarValueTable``).
    """

    _ids = iter(range(1 << 62))

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.id = next(KeyDictionary._ids)
        self._key_groups: dict[int, np.ndarray] = {}

    def key_groups(self, max_parallelism: int) -> np.ndarray:
        """Key group of every value (values appended since the last call are hashed now)."""
        kgs = self._key_groups.get(max_parallelism)
        n = len(self.values)
        if kgs is None or len(kgs) < n:
            done = 0 if kgs is None else len(kgs)
            vals = self.values[done:n]
            if vals and all(type(v) is str for v in vals):
                new = key_groups_for_hash_codes(java_string_hash_codes(vals), max_parallelism).astype(np.int64)
            else:
                new = np.asarray(assign_key_groups(np.fromiter(vals, dtype=object, count=len(vals)), max_parallelism),
                                 dtype=np.int64)
            kgs = new if kgs is None else np.concatenate([kgs, new])
            self._key_groups[max_parallelism] = kgs
        return kgs

    def __len__(self) -> int:
        return len(self.values)


class DictUniques:
    """A batch's distinct keys as codes into a :class:`KeyDictionary`, made into objects only when read."""

    __slots__ = ("dictionary", "codes", "_list")

    def __init__(self, dictionary: KeyDictionary, codes: np.ndarray) -> None:
        self.dictionary = dictionary
        self.codes = codes
        self._list: list[Any] | None = None

    def tolist(self) -> list[Any]:
        if self._list is None:
            self._list = DictColumn(self.codes, self.dictionary).to_pylist()
        return self._list

    def __getitem__(self, i: int) -> Any:
        return self.dictionary.values[self.codes[i]]

    def __iter__(self):
        return iter(self.tolist())

    def __len__(self) -> int:
        return len(self.codes)

    def __eq__(self, other: Any) -> bool:
        return self.tolist() == (other.tolist() if isinstance(other, DictUniques) else other)

    __hash__ = None  # type: ignore[assignment]


class DictColumn:
    """A dictionary-encoded column: ``indices`` (NumPy) into a :class:`KeyDictionary`."""

    __slots__ = ("indices", "dictionary")

    def __init__(self, indices: np.ndarray, dictionary: KeyDictionary) -> None:
        self.indices = indices
        self.dictionary = dictionary

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, s: slice) -> "DictColumn":
        return DictColumn(self.indices[s], self.dictionary)

    def take(self, idx: np.ndarray) -> "DictColumn":
        return DictColumn(self.indices[idx], self.dictionary)

    def to_pylist(self) -> list[Any]:
        idx = self.indices.tolist()
        if len(idx) < 2:
            return [self.dictionary.values[i] for i in idx]
        return list(operator.itemgetter(*idx)(self.dictionary.values))


def pylist(column: Any) -> list[Any]:
    """A column (NumPy array, Arrow array, dictionary column or list) as a list of Python scalars."""
    if isinstance(column, np.ndarray):
        return column.tolist()
    if hasattr(column, "to_pylist"):
        return column.to_pylist()
    return column if isinstance(column, list) else list(column)


class ColumnBatch(Batch):
    """A batch held as columns (NumPy arrays or Python lists), one per record field.

    Operators that understand columns (hash routing, built-in keyed aggregates,
    sinks with ``write_batch``) read ``columns`` directly and never build
    per-record objects. Everything else reads ``values`` as usual: the records
    are then built once, as tuples of Python scalars in column order, and kept.
    ``keys`` likewise is built from ``codes``/``uniques`` only when asked for.
    """

    __slots__ = ("columns", "n", "names", "_values", "_keys")

    def __init__(
        self,
        columns: list[Any],
        n: int,
        names: list[str] | None = None,
        timestamps: list[int | None] | None = None,
        key_groups: np.ndarray | None = None,
        codes: np.ndarray | None = None,
        uniques: list[Any] | None = None,
        ukgs: np.ndarray | None = None,
    ) -> None:
        self.columns = columns
        self.n = n
        self.names = names
        self._values = None
        self._keys = None
        self.timestamps = timestamps
        self.key_groups = key_groups
        self.codes = codes
        self.uniques = uniques
        self.ukgs = ukgs
        self.ucodes = None
        self.dictionary = None

    @property
    def values(self) -> list[Any]:  # type: ignore[override]
        if self._values is None:
            cols = [pylist(c) for c in self.columns]
            self._values = list(zip(*cols)) if cols else [()] * self.n
        return self._values

    @property
    def keys(self) -> list[Any] | None:  # type: ignore[override]
        if self._keys is None and self.codes is not None:
            if self.dictionary is not None:
                vals = self.dictionary.values
                self._keys = [vals[i] for i in self.ucodes[self.codes].tolist()]
            else:
                u = self.uniques
                self._keys = [u[c] for c in self.codes.tolist()]
        return self._keys

    def take(self, idx: np.ndarray) -> list[Any]:
        """The columns restricted to the rows ``idx`` (in order)."""
        out = []
        for c in self.columns:
            if isinstance(c, np.ndarray):
                out.append(c[idx])
            elif hasattr(c, "take"):  # an Arrow array or a dictionary column
                out.append(c.take(idx))
            else:
                out.append([c[i] for i in idx.tolist()])
        return out

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"ColumnBatch({self.n} records, {len(self.columns)} columns)"


@dataclass(frozen=True, slots=True)
class Watermark:
    timestamp: int


@dataclass(frozen=True, slots=True)
class EndOfInput:
    pass


@dataclass(frozen=True, slots=True)
class Barrier:
    """A checkpoint barrier: everything before it belongs to checkpoint ``checkpoint_id``."""

    checkpoint_id: int
    timestamp: int
    savepoint: bool = False
    unaligned: bool = False
    #: unaligned: how many queued items this barrier jumped ahead of in its channel
    overtaken: int = 0


@dataclass
class Channel:
    """A FIFO between one producer subtask and one consumer subtask."""

    source: str  # "task[i]"
    target: str
    input_index: int = 0  # which logical input of the consumer (0, or 1 for broadcast)
    capacity: int = 4
    queue: deque = field(default_factory=deque)
    watermark: int = MIN_WATERMARK
    finished: bool = False
    blocked: bool = False  # held back during barrier alignment
    recording: list | None = None  # unaligned: batches processed here are in-flight state
    records_in: int = 0

    def has_room(self) -> bool:
        return len(self.queue) < self.capacity

    def put(self, item: Any) -> None:
        self.queue.append(item)
        if isinstance(item, Batch):
            self.records_in += len(item)

    def __len__(self) -> int:
        return len(self.queue)

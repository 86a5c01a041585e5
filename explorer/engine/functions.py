"""The functions users write, and the contexts the engine hands them.

Modelled on Flink's DataStream API in snake_case::

    class CountPerUrl(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, value, ctx, out):
            n = self.count.value(0) + 1
            self.count.update(n)
            out.collect((ctx.get_current_key(), n))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from ..errors import StateError
from .state import ListStateDescriptor, MapStateDescriptor, StateDescriptor

if TYPE_CHECKING:  # pragma: no cover
    from .timers import TimerService

__all__ = [
    "BroadcastProcessFunction",
    "Collector",
    "KeyedBroadcastProcessFunction",
    "KeyedProcessFunction",
    "KeyedRecords",
    "ProcessFunction",
    "RuntimeContext",
]


class Collector:
    """Where a function emits results: ``out.collect(value)``."""

    __slots__ = ("values", "timestamps", "_ts")

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.timestamps: list[int | None] = []
        self._ts: int | None = None

    def collect(self, value: Any) -> None:
        self.values.append(value)
        self.timestamps.append(self._ts)

    def collect_with_timestamp(self, value: Any, timestamp: int | None) -> None:
        """Emit ``value`` with this timestamp (in ``process_batch``: the record's, where
        ``process_element`` would have emitted it)."""
        self.values.append(value)
        self.timestamps.append(timestamp)

    def collect_all_with_timestamps(self, values: list[Any], timestamps: list[int | None]) -> None:
        """``collect_with_timestamp(values[i], timestamps[i])`` for each ``i`` in order."""
        if len(values) != len(timestamps):
            raise ValueError(f"{len(values)} values but {len(timestamps)} timestamps")
        self.values += values
        self.timestamps += timestamps

    def drain(self) -> tuple[list[Any], list[int | None]]:
        v, t = self.values, self.timestamps
        self.values, self.timestamps = [], []
        return v, t


class RuntimeContext:
    """What ``open(ctx)`` receives: where state comes from, and who we are."""

    def __init__(self, operator) -> None:
        self._op = operator

    @property
    def task_name(self) -> str:
        return self._op.name

    @property
    def index_of_this_subtask(self) -> int:
        return self._op.subtask_index

    @property
    def number_of_parallel_subtasks(self) -> int:
        return self._op.parallelism

    @property
    def max_number_of_parallel_subtasks(self) -> int:
        return self._op.max_parallelism

    def _keyed(self):
        backend = getattr(self._op, "backend", None)
        if backend is None:
            raise StateError(
                f"operator {self._op.name!r} is not keyed: keyed state needs key_by() before process(); "
                "use get_operator_list_state() for non-keyed operators"
            )
        return backend

    def get_state(self, descriptor: StateDescriptor):
        """Keyed state of any kind, by its descriptor."""
        return self._keyed().get_state(descriptor)

    get_list_state = get_state
    get_map_state = get_state
    get_reducing_state = get_state
    get_aggregating_state = get_state

    def get_operator_list_state(self, descriptor: ListStateDescriptor):
        """Operator list state, redistributed by even split on rescale."""
        return self._op.operator_state.get_list_state(descriptor, union=False)

    def get_union_list_state(self, descriptor: ListStateDescriptor):
        """Operator list state that every subtask receives whole on restore."""
        return self._op.operator_state.get_list_state(descriptor, union=True)

    def get_broadcast_state(self, descriptor: MapStateDescriptor):
        """Broadcast state (writable only in ``process_broadcast_element``)."""
        return self._op.operator_state.get_broadcast_state(descriptor, writable=False)


class ProcessContext:
    """The ``ctx`` of ``process_element`` and ``on_timer``."""

    __slots__ = ("_op", "_timestamp", "_domain", "_timer_service")

    def __init__(self, operator, timer_service: "TimerService | None") -> None:
        self._op = operator
        self._timestamp: int | None = None
        self._domain: str | None = None
        self._timer_service = timer_service

    def timestamp(self) -> int | None:
        """The event timestamp of the current record, or the firing timer's time."""
        return self._timestamp

    def timer_service(self) -> "TimerService":
        if self._timer_service is None:
            raise StateError(f"operator {self._op.name!r} is not keyed: timers need key_by() before process()")
        return self._timer_service

    def get_current_key(self) -> Any:
        backend = getattr(self._op, "backend", None)
        return None if backend is None else backend.ctx.key

    def time_domain(self) -> str | None:
        """In ``on_timer``: ``"event_time"`` or ``"processing_time"``."""
        return self._domain

    def output(self, tag: str, value: Any) -> None:
        """Emit to a side output named ``tag`` (collected as ``result.side_output(tag)``)."""
        self._op.side_output(tag, value, self._timestamp)

    def get_broadcast_state(self, descriptor: MapStateDescriptor):
        """Broadcast state: read-only here, writable in ``process_broadcast_element``."""
        return self._op.operator_state.get_broadcast_state(descriptor, writable=self._op.in_broadcast_side)


class ProcessFunction:
    """A function over a non-keyed stream."""

    def open(self, ctx: RuntimeContext) -> None:
        pass

    def process_element(self, value: Any, ctx: ProcessContext, out: Collector) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class KeyedRecords:
    """What :meth:`KeyedProcessFunction.process_batch` receives: one batch of a keyed stream.

    ``values``, ``keys``, ``key_groups`` and ``timestamps`` (None without event time) per record,
    in arrival order; ``uniques`` the batch's distinct keys in order of first appearance and
    ``unique_key_groups`` their key groups (plain lists); ``codes`` (a NumPy integer array, or
    None) each record's position in ``uniques``. When the keys came over a hash edge,
    ``key_dictionary`` is that edge's :class:`~explorer.engine.channels.KeyDictionary` (the keys
    it has seen, in order) and ``unique_codes`` (a NumPy array) each distinct key's position in
    it: the same key has the same code in every batch from that dictionary (its ``id`` tells
    dictionaries apart), so a function may index per-key arrays by it; both are None otherwise.
    """

    __slots__ = ("values", "keys", "_key_groups", "timestamps", "uniques", "unique_key_groups", "codes",
                 "unique_codes", "key_dictionary")

    def __init__(self, values: list[Any], keys: list[Any], key_groups: Any, timestamps: list[int] | None,
                 uniques: list[Any], unique_key_groups: list[int], codes: Any = None, unique_codes: Any = None,
                 key_dictionary: Any = None) -> None:
        self.values = values
        self.keys = keys
        #: a list, or a NumPy array made a list when first asked for (most functions never ask)
        self._key_groups = key_groups
        self.timestamps = timestamps
        self.uniques = uniques
        self.unique_key_groups = unique_key_groups
        #: per record, the position of its key in ``uniques`` (a NumPy integer array), or None
        self.codes = codes
        self.unique_codes = unique_codes
        self.key_dictionary = key_dictionary

    @property
    def key_groups(self) -> list[int]:
        """Each record's key group (a list)."""
        kgs = self._key_groups
        if not isinstance(kgs, list):
            kgs = self._key_groups = kgs.tolist()
        return kgs

    def __len__(self) -> int:
        return len(self.values)


class KeyedProcessFunction(ProcessFunction):
    """A function over a keyed stream, with keyed state and timers.

    A function may also define ``process_batch(records, ctx, out)`` (a :class:`KeyedRecords`):
    the engine then hands it each batch of records whole instead of calling
    ``process_element`` per record (unless a state's TTL cleanup runs on every record). It
    must leave exactly what ``process_element`` record by record would: the same outputs in
    the same order with the same timestamps (``out.collect_with_timestamp``), the same state
    and the same timers, registered in the same order (no timer fires inside a batch, so only
    the survivors and the order of their last registration matter). For a batch's distinct
    keys it uses the many-key state calls (``values_of``/``update_many``, ``get_many``/
    ``add_all_many``/``update_many``/``clear_many``) and the timer service's
    ``register_event_time_timers``/``delete_event_time_timers``; there is no current key.
    Likewise ``on_timer_batch(timers, ctx, out)`` gets the event-time timers due at a
    watermark as one :class:`~explorer.engine.timers.TimerBatch`, a sequence of
    :class:`~explorer.engine.timers.Timer` (timestamp, key, namespace, key group) in firing
    order that also hands out its columns (``timestamps``, ``keys``, ``namespaces``,
    ``key_groups``) without a Timer made per timer, and must do what ``on_timer`` for each in turn
    would; it may not delete timers (they are off the queue already) nor register one due
    before the last of its batch (both raise). Neither path runs when a state has TTL.
    ``explorer.pipelines.sessions_batch.BatchSessionWindowFunction`` is the worked example (the
    batch paths of ``explorer.pipelines.sessions.SessionWindowFunction``); its tests run both
    paths and compare outputs, state and timers.
    """

    def on_timer(self, timestamp: int, ctx: ProcessContext, out: Collector) -> None:
        pass


class BroadcastProcessFunction(ProcessFunction):
    """A non-keyed stream connected to a broadcast stream."""

    def process_broadcast_element(self, value: Any, ctx: ProcessContext, out: Collector) -> None:
        raise NotImplementedError


class KeyedBroadcastProcessFunction(KeyedProcessFunction):
    """A keyed stream connected to a broadcast stream (dynamic rules, say)."""

    def process_broadcast_element(self, value: Any, ctx: ProcessContext, out: Collector) -> None:
        raise NotImplementedError


def iter_or_empty(x: Iterable[Any] | None) -> Iterable[Any]:
    return () if x is None else x

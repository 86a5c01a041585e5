"""The testing kit: what a test of a stream job, or of one process function, needs.

* :class:`TestingSource`: records from a list, replayable (positions are
  offsets, checkpointed like any source's), with two markers:
  :data:`EOF` ends the input there and :data:`ABORT` makes the job fail
  there with :class:`TestingAbort`. Each marker takes effect once per source
  object, so a job restored from a checkpoint with the same source object goes
  on past the marker (a recovery test: abort mid-stream, resume, compare).
  These are the semantics of bytewax's ``TestingSource`` ("each abort will
  only trigger once"; after an EOF "the next execution will continue from
  the item after this").
* :data:`CollectingSink`: keeps results in memory (``sink.results``);
  transactional when the job checkpoints, so a resumed job delivers each
  result once. Share one sink object between the failed and the resumed job.
* :class:`ManualClock`: processing time that moves only when told to.
* :class:`KeyedProcessFunctionHarness`: runs one ``KeyedProcessFunction`` (or
  ``KeyedBroadcastProcessFunction``) on the real keyed operator and state
  backend, without a job: feed elements, move the watermark and the clock,
  look at output, side outputs, state and pending timers.

::

    h = KeyedProcessFunctionHarness(SessionWindowFunction(), key_selector=lambda e: e.user_id)
    h.process_element(Event("alice", 0, "view", "/"), timestamp=0)
    h.timers()                       # [PendingTimer("event_time", 1800000, "alice", ...)]
    h.advance_watermark(1_800_000)   # the timer fires
    h.output                         # [SessionSummary(...)]
    h.state("session")               # [] -- cleared on the timer
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable

import numpy as np
import pandas as pd

from ..errors import JobError, StateError
from ..keygroups import assign_to_key_group
from .backends.heap import HeapStateBackend
from .backends.rocksdb import RocksDBStateBackend
from .channels import MIN_WATERMARK, Batch
from .checkpoint.coordinator import InjectedCrash
from .clock import ManualClock
from .datastream import OperatorSpec
from .functions import KeyedBroadcastProcessFunction, KeyedProcessFunction
from .operators import KeyedProcessOperator
from .sinks import CollectSink
from .sources import Source
from .state import StateKind
from .timers import EVENT_TIME, PROCESSING_TIME
from .ttl import is_expired

__all__ = [
    "ABORT",
    "CollectingSink",
    "EOF",
    "KeyedProcessFunctionHarness",
    "ManualClock",
    "PendingTimer",
    "TestingAbort",
    "TestingSource",
    "run_source",
]


class _Marker:
    """A control record of :class:`TestingSource` (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"TestingSource.{self.name}"

    def __reduce__(self):  # copies stay the same marker
        return self.name


#: ends a :class:`TestingSource` split at this position
EOF = _Marker("EOF")
#: makes the job raise :class:`TestingAbort` at this position
ABORT = _Marker("ABORT")


class TestingAbort(InjectedCrash):
    """Raised when a :class:`TestingSource` reads an :data:`ABORT` marker (a simulated failure)."""

    __test__ = False  # not a pytest test class


class TestingSource(Source):
    """Records from a list, with :data:`EOF` and :data:`ABORT` markers.

    ``num_splits`` cuts the list into contiguous splits (like
    :class:`~explorer.engine.sources.CollectionSource`); a marker acts on
    the split it falls in. Records before an ABORT in the same read are
    delivered first; the next read raises. A marker acts once per source
    object (:meth:`rearm` makes it act again).
    """

    __test__ = False  # not a pytest test class
    name = "testing"
    EOF = EOF
    ABORT = ABORT

    def __init__(self, items: Iterable[Any], num_splits: int = 1) -> None:
        self.items = list(items)
        if num_splits <= 0:
            raise JobError(f"num_splits must be positive, found {num_splits}")
        n = len(self.items)
        self._bounds = [(n * i // num_splits, n * (i + 1) // num_splits) for i in range(num_splits)]
        self.fired: set[int] = set()  # positions (in items) of markers that took effect

    def rearm(self) -> None:
        """Make every marker take effect again."""
        self.fired.clear()

    def splits(self) -> list[str]:
        return [str(i) for i in range(len(self._bounds))]

    def read(self, split, offset, max_records):
        lo, hi = self._bounds[int(split)]
        i = lo + offset
        out: list[Any] = []
        while i < hi and len(out) < max_records:
            item = self.items[i]
            if item is EOF or item is ABORT:
                if i in self.fired:
                    i += 1
                    continue
                if item is EOF:
                    self.fired.add(i)
                    return out, i - lo, True
                if out:  # deliver what came before; fail on the next read
                    return out, i - lo, False
                self.fired.add(i)
                raise TestingAbort(f"testing source: ABORT marker at position {i - lo} of split {split}")
            out.append(item)
            i += 1
        return out, i - lo, i >= hi

    def describe(self):
        markers = sum(1 for x in self.items if x is EOF or x is ABORT)
        return {"type": "testing", "records": len(self.items) - markers, "markers": markers,
                "splits": len(self._bounds)}


#: A sink that keeps results in memory (``sink.results``), exactly once across a restore.
CollectingSink = CollectSink


@dataclass(frozen=True)
class PendingTimer:
    """A registered timer that has not fired yet."""

    domain: str  # "event_time" | "processing_time"
    timestamp: int
    key: Any
    key_group: int
    namespace: Any = None


class _HarnessSubtask:
    """What the operator needs from its subtask: somewhere to emit, side outputs, a trace."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self.timestamps: list[int | None] = []
        self.runtime = SimpleNamespace(side_outputs={})
        self.key_partitioner = None

    def emit(self, batch: Batch) -> None:
        self.values.extend(batch.values)
        self.timestamps.extend(batch.timestamps if batch.timestamps is not None else [None] * len(batch.values))

    def emit_side(self, tag: str, batch: Batch) -> bool:
        """Side outputs have no downstream here: the operator collects them (``side_output(tag)``)."""
        return False

    def trace(self, kind: str, **detail: Any) -> None:
        pass


class KeyedProcessFunctionHarness:
    """Run a keyed process function on the real operator and backend, one element at a time.

    ``key_selector`` extracts the key of an element; without it every element
    goes to the one key ``key`` (unless ``process_element`` names a key).
    ``state_backend`` is ``"heap"``, ``"rocksdb"`` (in a temporary folder) or
    a factory ``(max_parallelism, key_groups, clock, spec, index) -> backend``.
    ``clock`` is processing time (and TTL time), a :class:`ManualClock` at 0
    unless given.
    """

    __test__ = False

    def __init__(
        self,
        function: KeyedProcessFunction,
        key_selector: Callable[[Any], Any] | None = None,
        state_backend: str | Callable = "heap",
        clock: Any = None,
        *,
        key: Any = "key",
        max_parallelism: int = 128,
        name: str = "harness",
    ) -> None:
        if not isinstance(function, KeyedProcessFunction):
            raise JobError(f"{type(function).__name__} is not a KeyedProcessFunction")
        self.clock = clock if clock is not None else ManualClock(0)
        self.key_selector = key_selector
        self.default_key = key
        self.max_parallelism = max_parallelism
        self._tmp: tempfile.TemporaryDirectory | None = None
        spec = OperatorSpec(
            id=0,
            name=name,
            uid=name,
            operator_class=KeyedProcessOperator,
            parallelism=1,
            max_parallelism=max_parallelism,
            keyed=True,
            function=function,
            backend_factory=self._backend_factory(state_backend),
        )
        self._subtask = _HarnessSubtask()
        self.operator = KeyedProcessOperator(spec, 0, 1, max_parallelism, self.clock)
        self.operator.bind(self._subtask)  # type: ignore[arg-type]
        self.operator.open()
        self.current_key: Any = None  # the key of the last element processed
        self._closed = False

    def _backend_factory(self, state_backend: str | Callable) -> Callable:
        if callable(state_backend):
            return state_backend
        if state_backend == "heap":
            return lambda maxp, kgr, clock, spec, index: HeapStateBackend(maxp, kgr, clock)
        if state_backend == "rocksdb":
            self._tmp = tempfile.TemporaryDirectory(prefix="state-explorer-harness-")
            path = self._tmp.name

            return lambda maxp, kgr, clock, spec, index: RocksDBStateBackend(maxp, kgr, clock, f"{path}/db")
        raise JobError(f"unknown state backend {state_backend!r}; expected 'heap', 'rocksdb' or a factory")

    # --- the function and its backend -------------------------------------------------
    @property
    def function(self) -> KeyedProcessFunction:
        """The function instance the operator runs (a copy of the one given)."""
        return self.operator.fn

    @property
    def backend(self):
        return self.operator.backend

    # --- input ---------------------------------------------------------------------------
    def _key_of(self, value: Any, key: Any) -> Any:
        if key is not None:
            return key
        if self.key_selector is not None:
            return self.key_selector(value)
        return self.default_key

    def process_element(self, value: Any, timestamp: int | None = None, key: Any = None) -> list[Any]:
        """Process one element at event time ``timestamp`` under ``key`` (default: the key
        selector's, else the harness's one key); returns what it emitted."""
        self._check_open()
        k = self._key_of(value, key)
        kg = assign_to_key_group(k, self.max_parallelism)
        before = len(self._subtask.values)
        batch = Batch([value], [None if timestamp is None else int(timestamp)], [k], np.array([kg], dtype=np.int64))
        self.operator.process_batch(batch, 0)
        self.current_key = k
        return self._subtask.values[before:]

    def process_elements(self, values: Iterable[Any], timestamp_of: Callable[[Any], int] | None = None) -> list[Any]:
        """Process several elements in order; ``timestamp_of`` gives each one's event time."""
        out: list[Any] = []
        for v in values:
            out += self.process_element(v, None if timestamp_of is None else timestamp_of(v))
        return out

    def process_broadcast_element(self, value: Any, timestamp: int | None = None) -> list[Any]:
        """Feed the broadcast side of a :class:`KeyedBroadcastProcessFunction`."""
        self._check_open()
        if not isinstance(self.operator.fn, KeyedBroadcastProcessFunction):
            raise JobError(f"{type(self.operator.fn).__name__} is not a KeyedBroadcastProcessFunction")
        before = len(self._subtask.values)
        self.operator.process_batch(Batch([value], [timestamp]), 1)
        return self._subtask.values[before:]

    # --- time ----------------------------------------------------------------------------
    @property
    def watermark(self) -> int | None:
        """The current watermark (None before the first one)."""
        wm = self.operator.current_watermark
        return None if wm == MIN_WATERMARK else wm

    @property
    def processing_time(self) -> int:
        return self.clock.now_ms()

    def advance_watermark(self, timestamp: int) -> list[Any]:
        """Move event time to ``timestamp``: event-time timers up to it fire, in order."""
        self._check_open()
        ts = int(timestamp)
        if ts < self.operator.current_watermark:
            raise ValueError(f"a watermark cannot go backwards (from {self.operator.current_watermark} to {ts})")
        before = len(self._subtask.values)
        self.operator.process_watermark(ts)
        return self._subtask.values[before:]

    def set_processing_time(self, timestamp: int) -> list[Any]:
        """Move processing time to ``timestamp``: processing-time timers up to it fire."""
        self._check_open()
        if not hasattr(self.clock, "set"):
            raise StateError(f"the harness clock {self.clock!r} cannot be set; give it a ManualClock")
        self.clock.set(int(timestamp))
        return self._fire_processing()

    def advance_processing_time(self, ms: int) -> list[Any]:
        """Move processing time forward by ``ms``: processing-time timers up to then fire."""
        return self.set_processing_time(self.clock.now_ms() + int(ms))

    def _fire_processing(self) -> list[Any]:
        before = len(self._subtask.values)
        self.operator.on_processing_time(self.clock.now_ms())
        return self._subtask.values[before:]

    # --- what came out ---------------------------------------------------------------------
    @property
    def output(self) -> list[Any]:
        """Everything the function emitted on its main output so far, in order."""
        return self._subtask.values

    @property
    def output_with_timestamps(self) -> list[tuple[Any, int | None]]:
        """Main output with each record's timestamp (the element's, or the firing event timer's)."""
        return list(zip(self._subtask.values, self._subtask.timestamps))

    def extract_output(self) -> list[Any]:
        """The main output so far, which is then cleared."""
        out = list(self._subtask.values)
        self._subtask.values.clear()
        self._subtask.timestamps.clear()
        return out

    def side_output(self, tag: str) -> list[Any]:
        """What the function sent to side output ``tag`` (``ctx.output(tag, value)``)."""
        return self._subtask.runtime.side_outputs.get(tag, [])

    # --- state and timers ------------------------------------------------------------------
    def state_names(self) -> list[str]:
        return sorted(self.backend.tables)

    def state(self, name: str, key: Any = None) -> Any:
        """What state ``name`` holds for ``key`` (default: the key of the last element).

        Value, reducing state: the value or None; aggregating state: the result or None;
        list state: a list; map state: a dict. Expired TTL entries are hidden unless the
        descriptor returns them; reading here changes nothing (no TTL refresh, no cleanup).
        """
        table = self.backend.tables.get(name)
        if table is None:
            raise StateError(f"no state named {name!r}; the function declared {self.state_names()}")
        k = self._peek_key(key)
        kg = assign_to_key_group(k, self.max_parallelism)
        d = table.descriptor
        ttl = getattr(d, "ttl", None)
        now = self.clock.now_ms()

        def visible(entry):
            if ttl is None:
                return True, entry
            v, ts = entry
            return (ttl.return_expired or not is_expired(ts, ttl.ttl_ms, now)), v

        if d.kind is StateKind.MAP:
            out = {}
            for uk, e in table.map_items(kg, k, None):
                ok, v = visible(e)
                if ok:
                    out[uk] = v
            return out
        raw = table.get(kg, k, None)
        if d.kind is StateKind.LIST:
            vals = []
            for e in raw or ():
                ok, v = visible(e)
                if ok:
                    vals.append(v)
            return vals
        if raw is None:
            return None
        ok, v = visible(raw)
        if not ok:
            return None
        if d.kind is StateKind.AGGREGATING:
            return d.aggregate_function.get_result(v)
        return v

    def _peek_key(self, key: Any) -> Any:
        if key is not None:
            return key
        if self.current_key is None:
            if self.key_selector is None:
                return self.default_key
            raise StateError("no element processed yet: pass key= to say whose state to read")
        return self.current_key

    def state_rows(self) -> pd.DataFrame:
        """Every stored state entry (all keys), like ``JobResult.state()``, expired ones included."""
        rows = []
        for name, table in self.backend.tables.items():
            for kg, key, ns, uk, value, ts in table.rows():
                rows.append((name, table.kind.value, key, kg, ns, uk, value, ts))
        return pd.DataFrame(rows, columns=["state", "kind", "key", "key_group", "namespace", "user_key", "value",
                                           "last_access"])

    def timers(self, domain: str | None = None) -> list[PendingTimer]:
        """Pending timers in firing order (event time first on ties), optionally of one domain."""
        out = []
        for dom, q in ((EVENT_TIME, self.operator.event_timers), (PROCESSING_TIME, self.operator.processing_timers)):
            if domain is not None and dom != domain:
                continue
            out += [PendingTimer(dom, t.timestamp, t.key, t.key_group, t.namespace) for t in q]
        return sorted(out, key=lambda t: (t.timestamp, t.domain != EVENT_TIME))

    # --- lifecycle ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise JobError("the harness is closed")

    def close(self) -> None:
        """Close the function and the backend (and remove a RocksDB folder)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.operator.close()
        finally:
            if self._tmp is not None:
                self._tmp.cleanup()

    def __enter__(self) -> "KeyedProcessFunctionHarness":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def run_source(source: Source, batch_size: int = 1024) -> list[Any]:
    """Everything ``source`` yields, split by split (a quick check of a source in a test)."""
    out: list[Any] = []
    for split in source.splits():
        offset, done = 0, False
        while not done:
            records, offset, done = source.read(split, offset, batch_size)
            out += records
    return out

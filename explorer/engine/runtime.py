"""The local runtime: real subtasks, channels between them, one deterministic scheduler.

Every transformation of a job becomes a task with ``parallelism`` subtasks.
Each subtask owns its operator (and, if keyed, its key-group range and state
backend) and its input channels. The scheduler runs in *rounds*: in each
round every runnable subtask, in a fixed topological order, takes one step
(a source reads one batch; any other subtask takes one item from one input
channel, round-robin). Full channels back-pressure their producers. The same
job on the same input therefore always runs the same way, which makes tests
and teaching replayable; going past one machine is Spark's job, not ours.

The runtime records a :class:`Trace` of what happened (batches routed,
watermarks, timers fired, barriers, snapshots) when asked to.
"""

from __future__ import annotations

import gc
import itertools
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pandas as pd

from ..errors import JobError
from .channels import MAX_WATERMARK, MIN_WATERMARK, Barrier, Batch, Channel, EndOfInput, Watermark
from .operators import KeyedOperatorBase, SourceOperator, StreamOperator
from .routing import (
    BroadcastPartitioner,
    ForwardPartitioner,
    KeyGroupPartitioner,
    Partitioner,
    RebalancePartitioner,
)


#: CPython's collector thresholds while a job runs (at least these; see :func:`fewer_collections`)
JOB_GC_THRESHOLDS = (50_000, 10, 100)
_gc_lock = threading.Lock()
_gc_jobs = 0
_gc_saved: tuple[int, ...] | None = None


@contextmanager
def fewer_collections() -> Iterator[None]:
    """While a job runs, CPython's cyclic garbage collector runs less often.

    A job makes and drops containers all the time (batches, timer buckets, state lists) while
    its state grows, and with the default thresholds (700, 10, 10) the collector walks the young
    objects every 700 allocations and every live container of the state again and again:
    about a tenth of the CPU of the sessions pipeline. The thresholds are raised to at least
    :data:`JOB_GC_THRESHOLDS` (nothing is left uncollected, it is collected later) and put back
    when the last running job returns, however it returns.
    """
    global _gc_jobs, _gc_saved
    with _gc_lock:
        if _gc_jobs == 0:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0]:  # 0: automatic collection is off, and stays off
                gc.set_threshold(*(max(a, b) for a, b in zip(_gc_saved, JOB_GC_THRESHOLDS)))
        _gc_jobs += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_jobs -= 1
            if _gc_jobs == 0 and _gc_saved is not None:
                gc.set_threshold(*_gc_saved)
                _gc_saved = None


@dataclass
class TraceEvent:
    round: int
    kind: str
    task: str
    subtask: int
    detail: dict[str, Any] = field(default_factory=dict)


class Trace:
    """What happened during a run, step by step (for notebooks and tests)."""

    def __init__(self, enabled: bool, limit: int = 200_000) -> None:
        self.enabled = enabled
        self.limit = limit
        self.events: list[TraceEvent] = []
        self.dropped = 0

    def add(self, round_: int, kind: str, task: str, subtask: int, **detail: Any) -> None:
        if not self.enabled:
            return
        if len(self.events) >= self.limit:
            self.dropped += 1
            return
        self.events.append(TraceEvent(round_, kind, task, subtask, detail))

    def to_frame(self) -> pd.DataFrame:
        rows = [{"round": e.round, "kind": e.kind, "task": e.task, "subtask": e.subtask, **e.detail} for e in self.events]
        return pd.DataFrame(rows)

    def of_kind(self, kind: str) -> list[TraceEvent]:
        return [e for e in self.events if e.kind == kind]

    def __len__(self) -> int:
        return len(self.events)


class Subtask:
    """One parallel instance of one task."""

    def __init__(self, runtime: "Runtime", spec, index: int, operator: StreamOperator) -> None:
        self.runtime = runtime
        self.spec = spec
        self.index = index
        self.operator = operator
        self.inputs: list[Channel] = []
        self.outputs: list[tuple[Partitioner, list[Channel]]] = []
        #: side-output tag -> its consumers' channels (a tag without consumers is collected)
        self.side_outputs: dict[str, list[tuple[Partitioner, list[Channel]]]] = {}
        self.key_partitioner: KeyGroupPartitioner | None = None
        self.finished = False
        self.is_source = isinstance(operator, SourceOperator)
        self._rr = 0
        self.name = f"{spec.name}[{index}]"
        operator.bind(self)

    # --- output ------------------------------------------------------------------------
    def emit(self, batch: Batch) -> None:
        for partitioner, channels in self.outputs:
            for ch, b in partitioner.route(batch, channels, self.index):
                ch.put(b)
                if self.runtime.trace.enabled:
                    self.trace("route", to=ch.target, records=len(b),
                               key_groups=sorted(set(b.key_groups.tolist())) if b.key_groups is not None else None)

    def emit_side(self, tag: str, batch: Batch) -> bool:
        """Send a side-output batch to its consumers; False when the tag has none."""
        consumers = self.side_outputs.get(tag)
        if not consumers:
            return False
        for partitioner, channels in consumers:
            for ch, b in partitioner.route(batch, channels, self.index):
                ch.put(b)
        return True

    def all_outputs(self):
        yield from self.outputs
        for consumers in self.side_outputs.values():
            yield from consumers

    def emit_event(self, event: Any) -> None:
        for _, channels in self.all_outputs():
            for ch in channels:
                ch.put(event)

    def emit_watermark(self, wm: int) -> None:
        self.emit_event(Watermark(wm))

    def trace(self, kind: str, **detail: Any) -> None:
        self.runtime.trace.add(self.runtime.round, kind, self.spec.name, self.index, **detail)

    def outputs_have_room(self) -> bool:
        for _, channels in self.all_outputs():
            for ch in channels:
                if not ch.has_room():
                    return False
        return True

    # --- scheduling ----------------------------------------------------------------------
    def runnable(self) -> bool:
        if self.finished or not self.outputs_have_room():
            return False
        if self.is_source:
            return True
        for ch in self.inputs:
            if ch.queue and not ch.blocked:
                return True
        return False

    def step(self) -> None:
        if self.is_source:
            self._step_source()
            return
        n = len(self.inputs)
        for j in range(n):
            ch = self.inputs[(self._rr + j) % n]
            if ch.queue and not ch.blocked:
                self._rr = (self._rr + j + 1) % n
                self._handle(ch, ch.queue.popleft())
                return

    def _step_source(self) -> None:
        op: SourceOperator = self.operator  # type: ignore[assignment]
        hook = self.runtime.before_source_step
        if hook is not None and hook(self):
            return
        if not op.exhausted:
            op.read_next()
        if op.exhausted and not self.runtime.hold_sources_open:
            op.finish()
            self.emit_watermark(MAX_WATERMARK)
            self.emit_event(EndOfInput())
            self.finished = True
            self.trace("end_of_input")

    def _handle(self, ch: Channel, item: Any) -> None:
        op = self.operator
        if isinstance(item, Batch):
            if ch.recording is not None:
                ch.recording.append(item)
            op.process_batch(item, ch.input_index)
        elif isinstance(item, Watermark):
            ch.watermark = max(ch.watermark, item.timestamp)
            self._advance_watermark()
        elif isinstance(item, EndOfInput):
            ch.finished = True
            ch.watermark = MAX_WATERMARK
            if self.runtime.channel_finished_handler is not None:
                self.runtime.channel_finished_handler(self, ch)
            self._advance_watermark()
            if all(c.finished for c in self.inputs):
                op.finish()
                self.emit_event(EndOfInput())
                self.finished = True
                self.trace("end_of_input")
        elif isinstance(item, Barrier):
            self.runtime.on_barrier(self, ch, item)
        else:  # pragma: no cover - internal invariant
            raise JobError(f"{self.name}: unknown item {item!r} in channel {ch.source}->{ch.target}")

    def _advance_watermark(self) -> None:
        wm = min((c.watermark for c in self.inputs), default=MAX_WATERMARK)
        if wm > self.operator.current_watermark:
            self.operator.process_watermark(wm)
            self.trace("watermark", watermark=wm)
            self.emit_watermark(wm)


class Runtime:
    """Builds subtasks and channels from a job graph and runs them."""

    def __init__(self, env, specs: list, job_name: str) -> None:
        self.env = env
        self.job_name = job_name
        self.specs = specs
        self.clock = env.clock
        self.trace = Trace(env.trace)
        self.round = 0
        self.side_outputs: dict[str, list[Any]] = {}
        self.collected: dict[str, list[Any]] = {}
        self.tasks: dict[int, list[Subtask]] = {}
        self.before_source_step: Callable[[Subtask], bool] | None = None
        self.hold_sources_open = False
        self.barrier_handler: Callable[[Subtask, Channel, Barrier], None] | None = None
        self.channel_finished_handler: Callable[[Subtask, Channel], None] | None = None
        self.after_round: list[Callable[["Runtime"], None]] = []
        self.dropped_processing_timers = 0
        self._build()

    # --- building --------------------------------------------------------------------------
    def _build(self) -> None:
        env = self.env
        for spec in self.specs:
            p = spec.parallelism
            subtasks = []
            for i in range(p):
                op = spec.operator_class(spec, i, p, spec.max_parallelism, self.clock)
                subtasks.append(Subtask(self, spec, i, op))
            self.tasks[spec.id] = subtasks
        for spec in self.specs:
            downstream = self.tasks[spec.id]
            for input_index, edge in enumerate(spec.inputs):
                upstream = self.tasks[edge.spec.id]
                for up in upstream:
                    channels = []
                    for down in downstream:
                        ch = Channel(up.name, down.name, input_index=input_index, capacity=env.channel_capacity)
                        down.inputs.append(ch)
                        channels.append(ch)
                    route = (self._partitioner(edge, spec, len(upstream)), channels)
                    if edge.side_tag is None:
                        up.outputs.append(route)
                    else:
                        up.side_outputs.setdefault(edge.side_tag, []).append(route)
                if edge.kind == "hash":
                    for down in downstream:
                        down.key_partitioner = KeyGroupPartitioner(edge.key_selector, spec.max_parallelism,
                                                                   spec.parallelism, edge.key_field)

    def _partitioner(self, edge, spec, upstream_parallelism: int) -> Partitioner:
        if edge.kind == "hash":
            return KeyGroupPartitioner(edge.key_selector, spec.max_parallelism, spec.parallelism, edge.key_field)
        if edge.kind == "broadcast":
            return BroadcastPartitioner()
        if edge.kind == "forward":
            if upstream_parallelism != spec.parallelism:
                return RebalancePartitioner()
            return ForwardPartitioner()
        return RebalancePartitioner()

    @property
    def subtasks(self) -> list[Subtask]:
        return [st for spec in self.specs for st in self.tasks[spec.id]]

    def subtasks_of(self, name: str) -> list[Subtask]:
        for spec in self.specs:
            if spec.name == name or spec.uid == name:
                return self.tasks[spec.id]
        raise JobError(f"no operator named {name!r}; operators are {[s.name for s in self.specs]}")

    def open(self) -> None:
        for st in self.subtasks:
            st.operator.open()
        every = getattr(self.env, "background_cleanup_rounds", None)
        if every:
            self.after_round.append(BackgroundCleanup(every))

    # --- running ----------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        return all(st.finished for st in self.subtasks)

    def run_round(self) -> bool:
        """One round; returns whether anything happened."""
        self.round += 1
        progressed = False
        for st in self.subtasks:
            if st.runnable():
                st.step()
                progressed = True
        now = self.clock.now_ms()
        for st in self.subtasks:
            op = st.operator
            if op.keyed and not st.finished:
                t = op.next_processing_timer()
                if t is not None and t <= now:
                    op.on_processing_time(now)
                    progressed = True
        for fn in self.after_round:
            fn(self)
        return progressed

    def run(self, until: Callable[["Runtime"], bool] | None = None, max_rounds: int | None = None) -> None:
        rounds = itertools.count() if max_rounds is None else range(max_rounds)
        with fewer_collections():
            for _ in rounds:
                if self.finished or (until is not None and until(self)):
                    break
                if not self.run_round() and not self.finished:
                    if until is not None:
                        break
                    stuck = [st.name for st in self.subtasks if not st.finished]
                    raise JobError(f"job {self.job_name!r} stalled: no subtask can make progress ({stuck})")
        if self.finished:
            for st in self.subtasks:
                if st.operator.keyed:
                    self.dropped_processing_timers += len(st.operator.processing_timers)

    def close(self) -> None:
        for st in self.subtasks:
            st.operator.close()

    def on_barrier(self, subtask: Subtask, channel: Channel, barrier: Barrier) -> None:
        if self.barrier_handler is None:
            raise JobError(f"{subtask.name} received {barrier} but checkpointing is off")
        self.barrier_handler(subtask, channel, barrier)


class JobResult:
    """What ``env.execute()`` returns: outputs, metrics, live state, trace."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.job_name = runtime.job_name

    @property
    def outputs(self) -> dict[str, list[Any]]:
        return self.runtime.collected

    def output(self, name: str) -> list[Any]:
        try:
            return self.runtime.collected[name]
        except KeyError:
            raise JobError(f"no collecting sink named {name!r}; sinks are {sorted(self.runtime.collected)}") from None

    __getitem__ = output

    def side_output(self, tag: str) -> list[Any]:
        return self.runtime.side_outputs.get(tag, [])

    @property
    def trace(self) -> Trace:
        return self.runtime.trace

    def operators(self) -> pd.DataFrame:
        rows = []
        for spec in self.runtime.specs:
            sts = self.runtime.tasks[spec.id]
            rows.append(
                {
                    "operator": spec.name,
                    "uid": spec.uid,
                    "parallelism": spec.parallelism,
                    "max_parallelism": spec.max_parallelism,
                    "keyed": spec.keyed,
                    "records_in": sum(s.operator.records_in for s in sts),
                    "records_out": sum(s.operator.records_out for s in sts),
                }
            )
        return pd.DataFrame(rows)

    def key_group_metrics(self, operator: str | None = None) -> pd.DataFrame:
        """Records processed and state entries per key group, per keyed operator."""
        frames = []
        for spec in self.runtime.specs:
            if not spec.keyed or (operator is not None and operator not in (spec.name, spec.uid)):
                continue
            for st in self.runtime.tasks[spec.id]:
                op: KeyedOperatorBase = st.operator  # type: ignore[assignment]
                kgr = op.key_groups
                entries = np.zeros(len(kgr), dtype=np.int64)
                for table in op.backend.tables.values():
                    for kg, n in table.entries_per_key_group().items():
                        entries[kg - kgr.start] += n
                frames.append(
                    pd.DataFrame(
                        {
                            "operator": spec.name,
                            "subtask": st.index,
                            "key_group": np.arange(kgr.start, kgr.end + 1),
                            "records": op.metrics.records,
                            "entries": entries,
                        }
                    )
                )
        if not frames:
            return pd.DataFrame(columns=["operator", "subtask", "key_group", "records", "entries"])
        return pd.concat(frames, ignore_index=True)

    def heavy_hitters(self, operator: str, n: int = 10) -> pd.DataFrame:
        """Hottest keys by traffic (Space-Saving sketch merged over subtasks)."""
        sts = self.runtime.subtasks_of(operator)
        sketch = None
        for st in sts:
            s = st.operator.sketch
            sketch = s if sketch is None else sketch.merge(s)
        rows = [{"key": k, "count": c, "error": e} for k, c, e in sketch.top(n)] if sketch else []
        return pd.DataFrame(rows, columns=["key", "count", "error"])

    def state(self, operator: str | None = None, state: str | None = None) -> pd.DataFrame:
        """Live keyed state as rows: operator, state, kind, key, key_group, subtask, namespace, user_key, value, last_access."""
        rows = []
        for spec in self.runtime.specs:
            if not spec.keyed or (operator is not None and operator not in (spec.name, spec.uid)):
                continue
            for st in self.runtime.tasks[spec.id]:
                for name, table in st.operator.backend.tables.items():
                    if state is not None and name != state:
                        continue
                    for kg, key, ns, uk, value, ts in table.rows():
                        rows.append((spec.name, name, table.kind.value, key, kg, st.index, ns, uk, value, ts))
        return pd.DataFrame(
            rows,
            columns=["operator", "state", "kind", "key", "key_group", "subtask", "namespace", "user_key", "value", "last_access"],
        )


class BackgroundCleanup:
    """Runs the RocksDB TTL sweeper every ``every_rounds`` rounds, without any state being read.

    The stand-in for Flink's TTL compaction filter (rocksdict cannot install
    one): each running RocksDB subtask with a TTL state whose cleanup includes
    compaction cleanup (the default) gets
    :meth:`~explorer.engine.backends.rocksdb.RocksDBStateBackend.background_cleanup`.
    The heap backend has its own incremental cleanup and is left alone.
    """

    def __init__(self, every_rounds: int) -> None:
        if every_rounds <= 0:
            raise ValueError(f"background_cleanup_rounds must be positive, found {every_rounds}")
        self.every_rounds = every_rounds
        self.removed = 0

    def __call__(self, runtime: "Runtime") -> None:
        if runtime.round % self.every_rounds:
            return
        for st in runtime.subtasks:
            backend = getattr(st.operator, "backend", None)
            if backend is None or st.finished or backend.name != "rocksdb":
                continue
            if any(getattr(t.descriptor, "ttl", None) is not None and t.descriptor.ttl.cleanup.rocksdb_cleanup()
                   for t in backend.tables.values()):
                self.removed += backend.background_cleanup()


def iter_specs_topological(specs: Iterable) -> list:
    return sorted(specs, key=lambda s: s.id)

"""The DataStream API: build a job graph, then ``env.execute()`` it on the local runtime.

::

    env = StreamEnvironment(parallelism=2)
    (env.from_collection(lines)
        .map(parse)
        .key_by("url")
        .count(name="hits")
        .collect("counts"))
    result = env.execute("url counts")
    result.output("counts")
"""

from __future__ import annotations

import copy
import operator as _op
import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..errors import JobError
from ..keygroups import check_parallelism, compute_default_max_parallelism
from .backends.heap import HeapStateBackend
from .backends.rocksdb import RocksDBStateBackend, warm_kernels_in_background
from .checkpoint.config import CheckpointConfig
from .checkpoint.job import JobClient, run_with_checkpoints
from .clock import Clock, SystemClock
from .functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction, KeyedProcessFunction, ProcessFunction
from .operators import (
    BroadcastProcessOperator,
    FilterOperator,
    FlatMapOperator,
    KeyedAggregateOperator,
    KeyedProcessOperator,
    MapOperator,
    ProcessOperator,
    SinkOperator,
    SourceOperator,
)
from .routing import key_selector
from .runtime import JobResult, Runtime
from .sinks import CollectSink, FileSink, Sink
from .sources import CollectionSource, ColumnSource, FileSource, GeneratorSource, Source, WatermarkStrategy
from .state import ListStateDescriptor, MapStateDescriptor

__all__ = ["BroadcastStream", "DataStream", "KeyedStream", "StreamEnvironment"]

#: the operator state under which a source keeps its (split, offset) positions
SOURCE_OFFSETS = ListStateDescriptor("source-offsets", tuple[str, int])


@dataclass
class Edge:
    spec: "OperatorSpec"
    kind: str  # forward | hash | broadcast | rebalance
    key_selector: Callable[[Any], Any] | None = None
    side_tag: str | None = None  # read the upstream's side output of this tag, not its main output
    key_field: int | str | None = None  # key_by(position or name): the key column of columnar batches


@dataclass
class OperatorSpec:
    """One transformation of the job graph (what every subtask of it is built from)."""

    id: int
    name: str
    uid: str
    operator_class: type
    parallelism: int
    max_parallelism: int
    inputs: list[Edge] = field(default_factory=list)
    keyed: bool = False
    fn: Callable | None = None
    function: Any = None
    source: Source | None = None
    sink: Sink | None = None
    watermark_strategy: WatermarkStrategy | None = None
    batch_size: int = 1024
    offsets_descriptor: ListStateDescriptor = SOURCE_OFFSETS
    backend_factory: Callable | None = None
    sketch_capacity: int = 64
    # rolling aggregates
    aggregate: str | None = None
    state_name: str | None = None
    state_type: Any = None
    field_getter: Callable | None = None
    reduce_fn: Callable | None = None
    emit_every_record: bool = True
    columnar_state: bool = True
    batch_process: bool = True
    description: dict = field(default_factory=dict)

    def function_factory(self):
        return copy.deepcopy(self.function)


class StreamEnvironment:
    """Where a job is defined and executed.

    ``state_backend`` is ``"heap"`` (Python objects per key group) or
    ``"rocksdb"`` (embedded RocksDB, values as bytes). ``clock`` gives
    processing time (use :class:`~explorer.engine.clock.ManualClock` in tests).
    ``background_cleanup_rounds``: every that many scheduler rounds, RocksDB
    subtasks sweep expired TTL entries (Flink's compaction-filter cleanup);
    ``None`` turns the sweeper off. ``columnar_state``: the built-in count on the
    heap backend keeps its state in NumPy columns (the same state, snapshots and
    outputs as the ordinary table; ``False`` uses the ordinary table).
    ``batch_process``: keyed process functions that define ``process_batch`` get
    whole batches (the same outputs, state and timers; ``False`` calls
    ``process_element`` per record).
    """

    def __init__(
        self,
        parallelism: int = 1,
        max_parallelism: int | None = None,
        state_backend: str | Callable = "heap",
        clock: Clock | None = None,
        batch_size: int = 1024,
        channel_capacity: int = 4,
        trace: bool = False,
        state_dir: str | Path | None = None,
        background_cleanup_rounds: int | None = 100,
        columnar_state: bool = True,
        batch_process: bool = True,
    ) -> None:
        if max_parallelism is None:
            max_parallelism = compute_default_max_parallelism(parallelism)
        check_parallelism(parallelism, max_parallelism)
        if batch_size <= 0:
            raise JobError(f"batch_size must be positive, found {batch_size}")
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.clock = clock or SystemClock()
        self.batch_size = batch_size
        self.channel_capacity = max(1, channel_capacity)
        self.trace = trace
        self.state_backend = state_backend
        if background_cleanup_rounds is not None and background_cleanup_rounds <= 0:
            raise JobError(f"background_cleanup_rounds must be positive or None, found {background_cleanup_rounds}")
        self.background_cleanup_rounds = background_cleanup_rounds
        self.columnar_state = columnar_state
        self.batch_process = batch_process
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self.specs: list[OperatorSpec] = []
        self._names: set[str] = set()
        self.checkpoint_config = None  # set by enable_checkpointing (checkpointing layer)
        #: dataclasses that in-flight records of unaligned checkpoints may be rebuilt as
        self.record_types: dict[str, type] = {}

    # --- graph building ---------------------------------------------------------------
    def _unique(self, name: str) -> str:
        base, n = name, 1
        while name in self._names:
            n += 1
            name = f"{base}-{n}"
        self._names.add(name)
        return name

    def _add(self, name: str, operator_class: type, parallelism: int | None, uid: str | None, **kw) -> OperatorSpec:
        name = self._unique(name)
        p = parallelism or self.parallelism
        spec = OperatorSpec(
            id=len(self.specs),
            name=name,
            uid=uid or name,
            operator_class=operator_class,
            parallelism=p,
            max_parallelism=self.max_parallelism,
            batch_size=self.batch_size,
            batch_process=self.batch_process,
            **kw,
        )
        if spec.keyed:
            check_parallelism(p, self.max_parallelism)
            spec.backend_factory = self._backend_factory()
        self.specs.append(spec)
        return spec

    def state_dir(self) -> Path:
        if self._state_dir is None:
            scratch = tempfile.mkdtemp(prefix="state-explorer-")
            weakref.finalize(self, shutil.rmtree, scratch, ignore_errors=True)
            self._state_dir = Path(scratch)
        return self._state_dir

    def _backend_factory(self) -> Callable:
        sb = self.state_backend
        if callable(sb):
            return sb
        if sb == "heap":
            return lambda maxp, kgr, clock, spec, index: HeapStateBackend(maxp, kgr, clock)
        if sb == "rocksdb":
            def make(maxp, kgr, clock, spec, index):
                path = self.state_dir() / "rocksdb" / f"{spec.uid}-{index}"
                backend = RocksDBStateBackend(maxp, kgr, clock, path)
                cfg = self.checkpoint_config
                if cfg is not None and not cfg.incremental:  # canonical checkpoints: their kernels, ahead of time
                    warm_kernels_in_background()
                return backend

            return make
        raise JobError(f"unknown state backend {sb!r}; expected 'heap', 'rocksdb' or a factory")

    def from_source(
        self,
        source: Source,
        watermark_strategy: WatermarkStrategy | None = None,
        name: str | None = None,
        parallelism: int | None = None,
        uid: str | None = None,
    ) -> "DataStream":
        spec = self._add(
            name or source.name,
            SourceOperator,
            parallelism or 1,
            uid,
            source=source,
            watermark_strategy=watermark_strategy,
            description=source.describe(),
        )
        return DataStream(self, spec)

    def from_collection(self, items: Sequence[Any], watermark_strategy: WatermarkStrategy | None = None,
                        name: str | None = None, num_splits: int = 1, parallelism: int | None = None) -> "DataStream":
        return self.from_source(CollectionSource(items, num_splits), watermark_strategy, name or "collection", parallelism)

    def from_columns(self, data: Any, name: str | None = None, num_splits: int = 1,
                     parallelism: int | None = None) -> "DataStream":
        """Records held as columns (a pyarrow Table, a pandas DataFrame, or a dict of equal-length
        sequences); records are tuples in column order. Batches stay columnar through ``key_by`` (a
        column position or name) into the built-in aggregates (see :class:`ColumnSource`)."""
        return self.from_source(ColumnSource(data, num_splits), None, name or "columns", parallelism)

    def from_generator(self, batch_fn: Callable[[int, int, int], list[Any]], records_per_split: int | None,
                       num_splits: int = 1, watermark_strategy: WatermarkStrategy | None = None,
                       name: str | None = None, parallelism: int | None = None) -> "DataStream":
        return self.from_source(GeneratorSource(batch_fn, records_per_split, num_splits), watermark_strategy,
                                name or "generator", parallelism)

    def read_text_file(self, paths: str | Path | Sequence[str | Path], json_lines: bool = False,
                       watermark_strategy: WatermarkStrategy | None = None, name: str | None = None) -> "DataStream":
        return self.from_source(FileSource(paths, json_lines), watermark_strategy, name or "file")

    # --- running ------------------------------------------------------------------------
    def build_runtime(self, job_name: str = "job") -> Runtime:
        if not self.specs:
            raise JobError("the job has no operators; add a source first")
        return Runtime(self, list(self.specs), job_name)

    def register_record_type(self, *classes: type) -> "StreamEnvironment":
        """Declare the dataclasses records may be, so unaligned checkpoints can store and restore
        them in flight (the snapshot names them; only registered classes are rebuilt)."""
        for cls in classes:
            self.record_types[cls.__qualname__] = cls
        return self

    def enable_checkpointing(self, directory: str | Path, interval_ms: int | None = None, *,
                             interval_records: int | None = None, **options: Any) -> "StreamEnvironment":
        """Checkpoint into ``directory`` every ``interval_ms`` of processing time and/or every
        ``interval_records`` source records; ``options`` are :class:`CheckpointConfig` fields
        (mode, unaligned, min_pause_ms, timeout_ms, max_concurrent, retained, incremental)."""
        if interval_ms is None and interval_records is None:
            raise JobError("enable_checkpointing needs interval_ms or interval_records")
        self.checkpoint_config = CheckpointConfig(directory=Path(directory), interval_ms=interval_ms,
                                                  interval_records=interval_records, **options)
        return self

    def execute(self, job_name: str = "job", max_rounds: int | None = None, restore_from: str | Path | None = None,
                allow_non_restored_state: bool = False, memory_budget: int | str | None = None) -> JobResult:
        """Run the job to the end of its (bounded) input and return the result.

        ``restore_from`` names a checkpoint or savepoint folder to start from (at this
        environment's parallelism, which may differ from the snapshot's). A snapshot is untrusted
        input: what its Parquet files declare is checked against ``memory_budget`` (bytes or
        ``"2GB"``; default half the available memory) before it is decoded.
        """
        if self.checkpoint_config is not None or restore_from is not None:
            return run_with_checkpoints(self, job_name, max_rounds=max_rounds, restore_from=restore_from,
                                        allow_non_restored_state=allow_non_restored_state,
                                        memory_budget=memory_budget)
        runtime = self.build_runtime(job_name)
        runtime.open()
        try:
            runtime.run(max_rounds=max_rounds)
        finally:
            runtime.close()
        return JobResult(runtime)

    def execute_async(self, job_name: str = "job", restore_from: str | Path | None = None,
                      allow_non_restored_state: bool = False, memory_budget: int | str | None = None):
        """Start the job and return a :class:`~explorer.engine.checkpoint.job.JobClient` to drive it
        (``run``, ``trigger_checkpoint``, ``trigger_savepoint``, ``stop_with_savepoint``); ``restore_from`` and
        ``memory_budget`` as for :meth:`execute`."""
        return JobClient(self, job_name, restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
                         memory_budget=memory_budget)


class DataStream:
    """A stream of records between two operators."""

    def __init__(self, env: StreamEnvironment, spec: OperatorSpec, side_tag: str | None = None) -> None:
        self.env = env
        self.spec = spec
        self.side_tag = side_tag

    def _one_input(self, name, operator_class, edge_kind="forward", parallelism=None, uid=None, selector=None,
                   key_field=None, **kw):
        spec = self.env._add(name, operator_class, parallelism, uid, **kw)
        spec.inputs.append(Edge(self.spec, edge_kind, selector, self.side_tag, key_field))
        return spec

    def get_side_output(self, tag: str) -> "DataStream":
        """The records this operator emits with ``ctx.output(tag, value)``, as a stream of their own.

        Without a consumer, side outputs are collected as ``result.side_output(tag)``; with one,
        they travel through channels like any stream (and so are exactly-once into a sink).
        """
        if self.side_tag is not None:
            raise JobError("a side output has no side outputs of its own")
        return DataStream(self.env, self.spec, side_tag=tag)

    def map(self, fn: Callable[[Any], Any], name: str = "map", parallelism: int | None = None, uid: str | None = None) -> "DataStream":
        return DataStream(self.env, self._one_input(name, MapOperator, fn=fn, parallelism=parallelism, uid=uid))

    def filter(self, fn: Callable[[Any], bool], name: str = "filter", parallelism: int | None = None, uid: str | None = None) -> "DataStream":
        return DataStream(self.env, self._one_input(name, FilterOperator, fn=fn, parallelism=parallelism, uid=uid))

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], name: str = "flat_map", parallelism: int | None = None,
                 uid: str | None = None) -> "DataStream":
        return DataStream(self.env, self._one_input(name, FlatMapOperator, fn=fn, parallelism=parallelism, uid=uid))

    def rebalance(self) -> "DataStream":
        return _Repartitioned(self.env, self.spec, "rebalance", self.side_tag)

    def process(self, function: ProcessFunction, name: str | None = None, parallelism: int | None = None,
                uid: str | None = None) -> "DataStream":
        if isinstance(function, KeyedProcessFunction):
            raise JobError(f"{type(function).__name__} is a KeyedProcessFunction: call key_by() before process()")
        spec = self._one_input(name or type(function).__name__, ProcessOperator, self._edge_kind(),
                               parallelism=parallelism, uid=uid, function=function)
        return DataStream(self.env, spec)

    def _edge_kind(self) -> str:
        return "forward"

    def key_by(self, key: str | int | Callable[[Any], Any]) -> "KeyedStream":
        """Partition by key: records go to the subtask that owns their key group."""
        return KeyedStream(self.env, self.spec, key_selector(key), self.side_tag,
                           key if isinstance(key, (int, str)) and not isinstance(key, bool) else None)

    def broadcast(self, *descriptors: MapStateDescriptor) -> "BroadcastStream":
        return BroadcastStream(self.env, self.spec, descriptors)

    def connect(self, other: "BroadcastStream") -> "BroadcastConnectedStream":
        if not isinstance(other, BroadcastStream):
            raise JobError("connect() takes a BroadcastStream (stream.broadcast(descriptor))")
        return BroadcastConnectedStream(self, other)

    def sink_to(self, sink: Sink, name: str | None = None, parallelism: int | None = None) -> "DataStream":
        spec = self._one_input(name or f"sink:{sink.name}", SinkOperator, self._edge_kind(), parallelism=parallelism, sink=sink)
        return DataStream(self.env, spec)

    def collect(self, name: str = "output") -> "DataStream":
        """Collect results in memory, read back as ``result.output(name)``."""
        return self.sink_to(CollectSink(name), name=f"collect:{name}")

    def write_jsonl(self, directory: str | Path, name: str = "file") -> "DataStream":
        return self.sink_to(FileSink(directory, name), name=f"file:{name}")


class _Repartitioned(DataStream):
    def __init__(self, env, spec, kind, side_tag=None):
        super().__init__(env, spec, side_tag)
        self._kind = kind

    def _one_input(self, name, operator_class, edge_kind="forward", **kw):
        return super()._one_input(name, operator_class, self._kind, **kw)

    def _edge_kind(self):
        return self._kind


class KeyedStream(DataStream):
    """A stream partitioned by key; keyed state and timers live downstream of it."""

    def __init__(self, env: StreamEnvironment, spec: OperatorSpec, selector: Callable[[Any], Any],
                 side_tag: str | None = None, key_field: int | str | None = None) -> None:
        super().__init__(env, spec, side_tag)
        self.selector = selector
        self.key_field = key_field

    def _one_input(self, name, operator_class, edge_kind="hash", parallelism=None, uid=None, selector=None,
                   key_field=None, **kw):
        return super()._one_input(name, operator_class, "hash", parallelism, uid, self.selector, self.key_field, **kw)

    def _edge_kind(self):
        return "hash"

    def process(self, function: KeyedProcessFunction, name: str | None = None, parallelism: int | None = None,
                uid: str | None = None) -> DataStream:
        if not isinstance(function, KeyedProcessFunction):
            raise JobError(f"{type(function).__name__} is not a KeyedProcessFunction")
        spec = self._one_input(name or type(function).__name__, KeyedProcessOperator, parallelism=parallelism,
                               uid=uid, function=function, keyed=True)
        return DataStream(self.env, spec)

    def _aggregate(self, kind: str, name: str, state_type: Any, parallelism, uid, emit_every_record, **kw) -> DataStream:
        spec = self._one_input(name, KeyedAggregateOperator, parallelism=parallelism, uid=uid, keyed=True,
                               aggregate=kind, state_name=kw.pop("state_name", kind), state_type=state_type,
                               emit_every_record=emit_every_record, columnar_state=self.env.columnar_state, **kw)
        return DataStream(self.env, spec)

    def count(self, name: str = "count", parallelism: int | None = None, uid: str | None = None,
              emit_every_record: bool = True) -> DataStream:
        """Rolling count per key: emits ``(key, count)`` for every record."""
        return self._aggregate("count", name, int, parallelism, uid, emit_every_record)

    def sum(self, field: str | int | Callable[[Any], Any], value_type: type = int, name: str = "sum",
            parallelism: int | None = None, uid: str | None = None, emit_every_record: bool = True) -> DataStream:
        """Rolling sum of ``field`` per key: emits ``(key, sum)`` for every record."""
        return self._aggregate("sum", name, value_type, parallelism, uid, emit_every_record,
                               field_getter=_getter(field))

    def reduce(self, fn: Callable[[Any, Any], Any], value_type: Any, field: str | int | Callable | None = None,
               name: str = "reduce", parallelism: int | None = None, uid: str | None = None,
               emit_every_record: bool = True) -> DataStream:
        """Rolling reduce per key: emits ``(key, reduced)`` for every record."""
        return self._aggregate("reduce", name, value_type, parallelism, uid, emit_every_record,
                               reduce_fn=fn, field_getter=None if field is None else _getter(field))

    def connect(self, other: "BroadcastStream") -> "BroadcastConnectedStream":
        if not isinstance(other, BroadcastStream):
            raise JobError("connect() takes a BroadcastStream (stream.broadcast(descriptor))")
        return BroadcastConnectedStream(self, other)


def _getter(field: str | int | Callable[[Any], Any]) -> Callable[[Any], Any]:
    if callable(field):
        return field
    if isinstance(field, int):
        return _op.itemgetter(field)
    return key_selector(field)


class BroadcastStream:
    """A stream every downstream subtask receives whole, carrying broadcast state descriptors."""

    def __init__(self, env: StreamEnvironment, spec: OperatorSpec, descriptors: Sequence[MapStateDescriptor]) -> None:
        self.env = env
        self.spec = spec
        self.descriptors = tuple(descriptors)


class BroadcastConnectedStream:
    def __init__(self, data: DataStream, broadcast: BroadcastStream) -> None:
        self.data = data
        self.broadcast = broadcast

    def process(self, function, name: str | None = None, parallelism: int | None = None, uid: str | None = None) -> DataStream:
        env = self.data.env
        keyed = isinstance(self.data, KeyedStream)
        if keyed and not isinstance(function, KeyedBroadcastProcessFunction):
            raise JobError("a keyed stream connected to a broadcast stream needs a KeyedBroadcastProcessFunction")
        if not keyed and not isinstance(function, BroadcastProcessFunction):
            raise JobError("a non-keyed stream connected to a broadcast stream needs a BroadcastProcessFunction")
        spec = env._add(name or type(function).__name__, KeyedProcessOperator if keyed else BroadcastProcessOperator,
                        parallelism, uid, function=function, keyed=keyed)
        spec.inputs.append(Edge(self.data.spec, "hash" if keyed else "forward",
                                self.data.selector if keyed else None, self.data.side_tag,  # type: ignore[attr-defined]
                                self.data.key_field if keyed else None))  # type: ignore[attr-defined]
        spec.inputs.append(Edge(self.broadcast.spec, "broadcast"))
        spec.description["broadcast_states"] = [d.name for d in self.broadcast.descriptors]
        return DataStream(env, spec)

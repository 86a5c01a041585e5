"""Operators: the logic one subtask runs for one transformation.

Each operator processes whole :class:`~explorer.engine.channels.Batch` es
(the unit that travels through channels) and reacts to watermarks, the
clock and the end of input. Keyed operators own a keyed state backend for
their key-group range and a timer service.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Protocol

import numpy as np

from ..errors import JobError
from ..keygroups import key_group_range_for_operator
from .channels import MAX_WATERMARK, MIN_WATERMARK, Batch, ColumnBatch, DictColumn
from .functions import Collector, KeyedRecords, ProcessContext, RuntimeContext
from .metrics import KeyGroupMetrics, SpaceSaving
from .operator_state import OperatorStateStore
from .routing import factorize_keys
from .state import ValueStateDescriptor
from .timers import EVENT_TIME, PROCESSING_TIME, TimerQueue, TimerService

class SubtaskPort(Protocol):
    """What an operator uses of the subtask running it: :class:`explorer.engine.runtime.Subtask`
    in a job, a stand-in in the test harness (:mod:`explorer.engine.testing`)."""

    runtime: Any
    key_partitioner: Any

    def emit(self, batch: Batch) -> None: ...

    def emit_side(self, tag: str, batch: Batch) -> bool: ...

    def emit_watermark(self, wm: int) -> None: ...

    def trace(self, kind: str, **detail: Any) -> None: ...


class StreamOperator:
    """Base of every operator. ``emit`` hands results to the subtask's output."""

    keyed = False

    def __init__(self, spec, subtask_index: int, parallelism: int, max_parallelism: int, clock) -> None:
        self.spec = spec
        self.name: str = spec.name
        self.uid: str = spec.uid
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.clock = clock
        self.current_watermark = MIN_WATERMARK
        self.operator_state = OperatorStateStore()
        self.subtask: SubtaskPort | None = None
        self.records_in = 0
        self.records_out = 0
        self.in_broadcast_side = False

    # wiring -------------------------------------------------------------------------
    def bind(self, subtask: SubtaskPort) -> None:
        self.subtask = subtask

    def emit(self, values: list[Any], timestamps: list[int | None] | None = None) -> None:
        if values:
            self.records_out += len(values)
            self.subtask.emit(Batch(values, timestamps))

    def emit_batch(self, batch: Batch) -> None:
        if len(batch):
            self.records_out += len(batch)
            self.subtask.emit(batch)

    def side_output(self, tag: str, value: Any, timestamp: int | None) -> None:
        sub = self.subtask
        if not sub.emit_side(tag, Batch([value], None if timestamp is None else [timestamp])):
            sub.runtime.side_outputs.setdefault(tag, []).append(value)

    # lifecycle ----------------------------------------------------------------------
    def open(self) -> None:
        pass

    def process_batch(self, batch: Batch, input_index: int) -> None:
        raise NotImplementedError

    def process_watermark(self, watermark: int) -> None:
        self.current_watermark = watermark

    def on_processing_time(self, now_ms: int) -> None:
        pass

    def next_processing_timer(self) -> int | None:
        return None

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


class MapOperator(StreamOperator):
    def process_batch(self, batch, input_index):
        self.records_in += len(batch)
        self.emit(list(map(self.spec.fn, batch.values)), batch.timestamps)


class FilterOperator(StreamOperator):
    def process_batch(self, batch, input_index):
        self.records_in += len(batch.values)
        fn = self.spec.fn
        if batch.timestamps is None:
            self.emit([v for v in batch.values if fn(v)])
        else:
            pairs = [(v, t) for v, t in zip(batch.values, batch.timestamps) if fn(v)]
            self.emit([p[0] for p in pairs], [p[1] for p in pairs])


class FlatMapOperator(StreamOperator):
    def process_batch(self, batch, input_index):
        self.records_in += len(batch.values)
        fn = self.spec.fn
        out, ts_out = [], []
        tss = batch.timestamps or [None] * len(batch.values)
        for v, t in zip(batch.values, tss):
            for r in fn(v):
                out.append(r)
                ts_out.append(t)
        self.emit(out, ts_out if batch.timestamps is not None else None)


class SinkOperator(StreamOperator):
    def open(self):
        self.sink = self.spec.sink
        self.writer = self.sink.create_writer(self.subtask_index, self.parallelism, self.subtask.runtime)

    def process_batch(self, batch, input_index):
        self.records_in += len(batch)
        write_batch = getattr(self.writer, "write_batch", None)
        if write_batch is not None:
            write_batch(batch)
        else:
            self.writer.write(batch.values, batch.timestamps)

    def finish(self):
        self.writer.finish()

    def close(self):
        self.writer.close()


class ProcessOperator(StreamOperator):
    """A non-keyed :class:`ProcessFunction` (operator state allowed, no keyed state or timers)."""

    def open(self):
        self.fn = self.spec.function_factory()
        self.out = Collector()
        self.ctx = ProcessContext(self, None)
        self.fn.open(RuntimeContext(self))

    def process_batch(self, batch, input_index):
        self.records_in += len(batch.values)
        fn, ctx, out = self.fn.process_element, self.ctx, self.out
        tss = batch.timestamps or [None] * len(batch.values)
        for v, t in zip(batch.values, tss):
            ctx._timestamp = t
            out._ts = t
            fn(v, ctx, out)
        self._flush()

    def _flush(self):
        vals, ts = self.out.drain()
        self.emit(vals, ts)

    def close(self):
        self.fn.close()


class KeyedOperatorBase(StreamOperator):
    """Keyed state backend, timers, per-key-group metrics and a heavy-hitter sketch."""

    keyed = True

    def __init__(self, spec, subtask_index, parallelism, max_parallelism, clock) -> None:
        super().__init__(spec, subtask_index, parallelism, max_parallelism, clock)
        self.key_groups = key_group_range_for_operator(max_parallelism, parallelism, subtask_index)
        self.backend = spec.backend_factory(max_parallelism, self.key_groups, clock, spec, subtask_index)
        self.backend.operator_name = spec.uid
        self.event_timers = TimerQueue()
        self.processing_timers = TimerQueue()
        self.timer_service = TimerService(self)
        self.metrics = KeyGroupMetrics(self.key_groups.start, self.key_groups.end)
        self.sketch = SpaceSaving(spec.sketch_capacity)
        self.assigner = None  # set by the subtask when keys arrive without routing info

    def keys_for(self, batch: Batch) -> tuple[list[Any], np.ndarray]:
        if batch.keys is not None:
            return batch.keys, batch.key_groups
        part = self.subtask.key_partitioner
        keys = part.keys_of(batch.values)
        return keys, part.assigner.many(keys)

    def observe(self, keys: list[Any], kgs: np.ndarray, batch: Batch | None = None) -> None:
        self.metrics.add(kgs)
        if batch is not None and batch.codes is not None:  # the hash edge counted the keys already
            self.sketch.update_counts(batch.uniques, np.bincount(batch.codes, minlength=len(batch.uniques)))
        else:
            self.sketch.update_many(Counter(keys).items())

    def register_timer(self, domain: str, timestamp: int) -> None:
        ctx = self.backend.ctx
        q = self.event_timers if domain == EVENT_TIME else self.processing_timers
        q.register(timestamp, ctx.key, ctx.namespace, ctx.key_group)

    def delete_timer(self, domain: str, timestamp: int) -> None:
        ctx = self.backend.ctx
        q = self.event_timers if domain == EVENT_TIME else self.processing_timers
        q.delete(timestamp, ctx.key, ctx.namespace)

    def next_processing_timer(self):
        return self.processing_timers.peek_time()

    def close(self):
        self.backend.close()


class _NoCleanup:
    per_record_cleanup = False


_NO_CLEANUP = _NoCleanup()


class KeyedProcessOperator(KeyedOperatorBase):
    """Runs a :class:`KeyedProcessFunction` (and the keyed side of a keyed broadcast function)."""

    def open(self):
        self.fn = self.spec.function_factory()
        self.out = Collector()
        self.ctx = ProcessContext(self, self.timer_service)
        self.fn.open(RuntimeContext(self))
        self._per_record_cleanup = getattr(self.backend, "run_incremental_cleanup_for_record", None)
        #: the function's whole-batch path, if it has one (see KeyedProcessFunction)
        batches = getattr(self.spec, "batch_process", True)
        self._batch_fn = getattr(self.fn, "process_batch", None) if batches else None
        #: the function's whole-batch timer path, if it has one
        self._timer_batch_fn = getattr(self.fn, "on_timer_batch", None) if batches else None

    def _process_whole(self, batch, keys, kgs) -> None:
        ucodes = dictionary = None
        if batch.uniques is not None and batch.ukgs is not None and batch.codes is not None:
            uniques = batch.uniques if isinstance(batch.uniques, list) else batch.uniques.tolist()
            ukgs = batch.ukgs.tolist()
            codes = batch.codes
            ucodes, dictionary = getattr(batch, "ucodes", None), getattr(batch, "dictionary", None)
            if ucodes is None or dictionary is None or len(ucodes) != len(uniques):
                ucodes = dictionary = None
        else:
            codes, uniques = factorize_keys(keys)
            ukgs = kgs[_first_index(codes, len(uniques))].tolist()
        records = KeyedRecords(batch.values, keys, kgs, batch.timestamps, uniques, ukgs, codes, ucodes, dictionary)
        kctx, ctx, out = self.backend.ctx, self.ctx, self.out
        kctx._set = False  # no current key inside process_batch
        ctx._timestamp = out._ts = None
        self._batch_fn(records, ctx, out)

    def process_batch(self, batch, input_index):
        if input_index == 1:
            return self._process_broadcast(batch)
        values = batch.values
        n = len(values)
        self.records_in += n
        keys, kgs = self.keys_for(batch)
        if self._batch_fn is not None and not self.backend.has_ttl_state():
            self._process_whole(batch, keys, kgs)
            self.observe(keys, kgs, batch)
            self._flush()
            return
        kctx = self.backend.ctx
        fn, ctx, out = self.fn.process_element, self.ctx, self.out
        cleanup = self._per_record_cleanup
        backend = self.backend if cleanup is not None else _NO_CLEANUP
        kctx._set = True
        if batch.timestamps is not None:
            for v, k, g, t in zip(values, keys, kgs.tolist(), batch.timestamps):
                kctx.key = k
                kctx.key_group = g
                kctx.namespace = None
                ctx._timestamp = t
                out._ts = t
                fn(v, ctx, out)
                if backend.per_record_cleanup:
                    cleanup()
        else:
            ctx._timestamp = None
            out._ts = None
            for v, k, g in zip(values, keys, kgs.tolist()):
                kctx.key = k
                kctx.key_group = g
                kctx.namespace = None
                fn(v, ctx, out)
                if backend.per_record_cleanup:
                    cleanup()
        self.observe(keys, kgs, batch)
        self._flush()

    def _process_broadcast(self, batch):
        self.in_broadcast_side = True
        try:
            fn, ctx, out = self.fn.process_broadcast_element, self.ctx, self.out
            tss = batch.timestamps or [None] * len(batch.values)
            for v, t in zip(batch.values, tss):
                ctx._timestamp = t
                out._ts = t
                fn(v, ctx, out)
        finally:
            self.in_broadcast_side = False
        self._flush()

    def _flush(self):
        self.backend.end_batch()
        vals, ts = self.out.drain()
        self.emit(vals, ts)

    def _fire(self, timer, domain):
        self.backend.set_current_key(timer.key, timer.key_group, timer.namespace)
        self.ctx._timestamp = timer.timestamp if domain == EVENT_TIME else None
        self.ctx._domain = domain
        self.out._ts = self.ctx._timestamp
        try:
            self.fn.on_timer(timer.timestamp, self.ctx, self.out)
        finally:
            self.ctx._domain = None
        self.subtask.trace("timer", domain=domain, timestamp=timer.timestamp, key=timer.key, key_group=timer.key_group)

    def process_watermark(self, watermark):
        self.current_watermark = watermark
        q = self.event_timers
        trace = getattr(self.subtask.runtime, "trace", None)
        if self._timer_batch_fn is not None and trace is not None and not trace.enabled \
                and not self.backend.has_ttl_state():
            self._fire_batches(watermark)
        elif trace is None or trace.enabled:  # the test harness's stand-in subtask traces itself
            while True:
                t = q.pop_due(watermark)
                if t is None:
                    break
                self._fire(t, EVENT_TIME)
        else:  # _fire inlined: a timer per key and session in many jobs
            kctx, ctx, out, on_timer = self.backend.ctx, self.ctx, self.out, self.fn.on_timer
            kctx._set = True
            ctx._domain = EVENT_TIME
            try:
                while True:
                    t = q.pop_due(watermark)
                    if t is None:
                        break
                    kctx.key, kctx.key_group, kctx.namespace = t.key, t.key_group, t.namespace
                    ctx._timestamp = out._ts = ts = t.timestamp
                    on_timer(ts, ctx, out)
            finally:
                ctx._domain = None
        self._flush()

    def _fire_batches(self, watermark: int) -> None:
        """The event-time timers due at ``watermark`` handed to ``on_timer_batch`` a batch at a
        time, in firing order. A timer it registers that is due and earlier than the last one
        of its batch would have fired inside that batch: that is an error, not a reordering."""
        q, ctx, out, fire = self.event_timers, self.ctx, self.out, self._timer_batch_fn
        kctx, service = self.backend.ctx, self.timer_service
        while True:
            due = q.pop_all_due_columns(watermark)
            if not due:
                return
            kctx._set = False  # no current key: the batch has many
            ctx._domain = EVENT_TIME
            ctx._timestamp = out._ts = None
            service.firing_batch = True
            try:
                fire(due, ctx, out)
            finally:
                service.firing_batch = False
                ctx._domain = None
            nxt = q.peek_time()
            last = due.timestamps[-1]
            if nxt is not None and nxt <= watermark and nxt < last:
                raise JobError(f"operator {self.name!r}: on_timer_batch registered an event-time timer at {nxt}, "
                               f"due before the last timer of its batch ({last}); define only "
                               "on_timer for functions whose timers register earlier timers")

    def on_processing_time(self, now_ms):
        q = self.processing_timers
        fired = False
        while True:
            t = q.pop_due(now_ms)
            if t is None:
                break
            self._fire(t, PROCESSING_TIME)
            fired = True
        if fired:
            self._flush()

    def close(self):
        self.fn.close()
        super().close()


class BroadcastProcessOperator(ProcessOperator):
    """A non-keyed stream connected to a broadcast stream (input 1)."""

    def process_batch(self, batch, input_index):
        if input_index == 0:
            return super().process_batch(batch, input_index)
        self.in_broadcast_side = True
        try:
            fn, ctx, out = self.fn.process_broadcast_element, self.ctx, self.out
            for v in batch.values:
                fn(v, ctx, out)
        finally:
            self.in_broadcast_side = False
        self._flush()


class KeyedAggregateOperator(KeyedOperatorBase):
    """``key_by(...).count() / .sum(field) / .reduce(fn)``: a rolling aggregate per key.

    Like Flink's rolling aggregations it emits the updated aggregate for every
    input record, as ``(key, aggregate)``. It works a batch at a time on the
    batch's factorised keys (``codes``/``uniques`` from the hash edge): each
    distinct key's state is read once and written once per batch, and the
    running values are computed with NumPy (count and sum) or a dict (reduce).

    On the heap backend, count keeps its state in a
    :class:`~explorer.engine.backends.heap.ColumnarValueTable` (key -> slot,
    values in a NumPy array), so a batch costs one dict lookup per distinct key
    and NumPy arithmetic. Count and sum emit columnar batches. Other backends, sum,
    ``reduce``, and ``StreamEnvironment(columnar_state=False)`` use the ordinary
    table through ``get_many``/``put_many``; state, snapshots and outputs are the same.
    """

    def open(self):
        spec = self.spec
        dtype = np.int64 if spec.columnar_state and spec.aggregate == "count" else None
        self.state = self.backend.get_state(ValueStateDescriptor(spec.state_name, spec.state_type), columnar=dtype)
        self.columnar = hasattr(self.state.table, "slots_for")
        self.emit_records = spec.emit_every_record

    def _factorized(self, batch: Batch) -> tuple[np.ndarray, list[Any], np.ndarray, np.ndarray]:
        """``(codes, uniques, ukgs, kgs)`` of a batch (from its hash edge, or computed here)."""
        if batch.codes is not None:
            return batch.codes, batch.uniques, batch.ukgs, batch.key_groups
        keys, kgs = self.keys_for(batch)
        codes, uniques = factorize_keys(keys)
        return codes, uniques, kgs[_first_index(codes, len(uniques))], kgs

    def process_batch(self, batch, input_index):
        n = len(batch)
        if not n:
            return
        self.records_in += n
        codes, ukeys, ukgs_arr, kgs = self._factorized(batch)
        nu = len(ukeys)
        kind = self.spec.aggregate
        st = self.state
        table = st.table
        per_key = np.bincount(codes, minlength=nu)
        if kind == "reduce":
            ukgs = ukgs_arr.tolist()
            ukeys = list(ukeys)
            base = table.get_many(ukgs, ukeys)
            out, finals = self._reduce(batch.values, codes, base)
            for v in finals:
                if type(v) is not st._exact:
                    st.info.check(v, f"state {st.descriptor.name!r}")
            table.put_many(ukgs, ukeys, finals)
        else:
            if kind == "count":
                contrib = None
                dtype = np.dtype(np.int64)
            else:
                field = self.spec.field_getter
                contrib = np.asarray(list(map(field, batch.values)))
                dtype = contrib.dtype
            if self.columnar:
                # no TTL, default namespace: the values of this batch's distinct keys, in place
                if batch.dictionary is not None:
                    slots = table.slots_for_codes(batch.dictionary, batch.ucodes, ukeys, ukgs_arr)
                else:
                    slots = table.slots_for(ukeys, ukgs_arr)
                base_arr = table.values[slots].astype(dtype, copy=False)
            else:
                ukgs = ukgs_arr.tolist()
                ukeys = list(ukeys)
                base = table.get_many(ukgs, ukeys)
                zero = dtype.type(0)
                base_arr = np.array([zero if b is None else b for b in base], dtype=dtype)
            if contrib is None:
                totals = base_arr + per_key
            else:
                totals = base_arr + np.bincount(codes, weights=contrib, minlength=nu).astype(dtype)
            if self.columnar:
                table.values[slots] = totals
            else:
                table.put_many(ukgs, ukeys, totals.tolist())
            if self.emit_records:  # running values only when they are emitted
                ones = np.ones(n, dtype=np.int64) if contrib is None else contrib
                out = _segmented_cumsum(codes, ones, nu) + base_arr[codes]
        self.metrics.add(kgs)
        self.sketch.update_counts(ukeys, per_key)
        self.backend.end_batch()
        if self.emit_records:
            if kind == "reduce":
                keys = batch.keys if batch.keys is not None else [ukeys[c] for c in codes.tolist()]
                self.emit(list(zip(keys, out)), batch.timestamps)
            else:
                if not isinstance(batch, ColumnBatch) and batch.keys is not None:
                    key_col = batch.keys  # the records' own keys, already objects
                elif batch.dictionary is not None:
                    key_col = DictColumn(batch.ucodes[codes], batch.dictionary)
                else:
                    key_col = np.fromiter(ukeys, dtype=object, count=nu)[codes]
                self.emit_batch(ColumnBatch([key_col, out], n, None, batch.timestamps))

    def _reduce(self, values, codes, base):
        fn = self.spec.reduce_fn
        getter = self.spec.field_getter
        cur = list(base)
        out = []
        for v, c in zip(values, codes.tolist()):
            x = getter(v) if getter is not None else v
            prev = cur[c]
            cur[c] = x if prev is None else fn(prev, x)
            out.append(cur[c])
        return out, cur


def _first_index(codes: np.ndarray, n_unique: int) -> np.ndarray:
    """Position of each code's first occurrence (a reversed scatter: the last write, the first seen, wins)."""
    first = np.empty(n_unique, dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1, dtype=np.int64)
    return first


def _segmented_cumsum(codes: np.ndarray, values: np.ndarray, n_groups: int) -> np.ndarray:
    """Running sum of ``values`` within each group of ``codes``, in record order."""
    order = np.argsort(codes, kind="stable")
    sv = values[order]
    sc = codes[order]
    cs = np.cumsum(sv)
    starts = np.flatnonzero(np.r_[True, sc[1:] != sc[:-1]])
    offsets = np.zeros(n_groups, dtype=cs.dtype)
    offsets[sc[starts]] = cs[starts] - sv[starts]
    out = np.empty_like(cs)
    out[order] = cs - offsets[sc]
    return out


class SourceOperator(StreamOperator):
    """Reads the splits assigned to this subtask; their offsets are operator state."""

    def open(self):
        spec = self.spec
        self.source = spec.source
        self.batch_size = spec.batch_size
        st = self.operator_state.get_list_state(spec.offsets_descriptor, union=False)
        if not st.items and not self.operator_state_restored:
            all_splits = self.source.splits()
            mine = [s for i, s in enumerate(all_splits) if i % self.parallelism == self.subtask_index]
            st.update([(s, 0) for s in mine])
        self.offsets_state = st
        self.finished_splits: set[str] = set()
        ws = spec.watermark_strategy
        self.ts_fn: Callable[[Any], int] | None = ws.timestamp_assigner if ws else None
        self.delay = ws.max_out_of_orderness_ms if ws else 0
        self.max_ts = MIN_WATERMARK
        self._split_cursor = 0

    operator_state_restored = False

    @property
    def exhausted(self) -> bool:
        return all(s in self.finished_splits for s, _ in self.offsets_state.items)

    def read_next(self) -> int:
        """Read one batch from the next unfinished split. Returns records read."""
        items = self.offsets_state.items
        if not items:
            return 0
        for _ in range(len(items)):
            i = self._split_cursor % len(items)
            self._split_cursor += 1
            split, offset = items[i]
            if split in self.finished_splits:
                continue
            records, new_offset, done = self.source.read(split, offset, self.batch_size)
            items[i] = (split, new_offset)
            if done:
                self.finished_splits.add(split)
            if len(records):
                self.records_in += len(records)
                ts = None
                if self.ts_fn is not None:
                    ts = list(map(self.ts_fn, records.values if isinstance(records, ColumnBatch) else records))
                    m = max(ts)
                    if m > self.max_ts:
                        self.max_ts = m
                if isinstance(records, ColumnBatch):
                    records.timestamps = ts
                    self.emit_batch(records)
                else:
                    self.emit(records, ts)
                if self.ts_fn is not None:
                    wm = self.max_ts - self.delay - 1
                    if wm > self.current_watermark:
                        self.current_watermark = wm
                        self.subtask.emit_watermark(wm)
                return len(records)
        return 0

    def finish(self):
        self.current_watermark = MAX_WATERMARK


def check_spec_parallelism(spec, parallelism: int, max_parallelism: int) -> None:
    if parallelism > max_parallelism and spec.keyed:
        raise JobError(
            f"operator {spec.name!r}: parallelism {parallelism} exceeds max parallelism {max_parallelism}"
        )

"""The checkpoint coordinator: barriers, alignment, acknowledgements, completion.

1. *Trigger*: every source subtask snapshots its read positions and sends a
   :class:`~explorer.engine.channels.Barrier` down all its channels.
2. *Align* (exactly-once): a subtask with several input channels blocks each
   channel that delivered the barrier until all have, so no record from
   after the barrier mixes into the snapshot. At-least-once mode does not
   block: records behind an early barrier are processed before the snapshot
   and will be replayed after a restore. Unaligned mode snapshots at the
   first barrier and stores the records still in flight.
3. *Snapshot*: the subtask captures its state synchronously, forwards the
   barrier, and writes files asynchronously (a thread pool). In an
   incremental checkpoint a RocksDB subtask's keyed state is captured as
   RocksDB's own files instead, sharing unchanged ones (:mod:`.incremental`);
   a *full* checkpoint triggered while incremental checkpoints are on
   (``trigger(full=True)``, Flink's ``CheckpointType.FULL``) copies all of
   them into its own folder, sharing none.
4. *Complete*: once every subtask has acknowledged, ``_metadata`` is written
   last, via rename; only then does the checkpoint exist. Sinks commit the
   output staged for it (and for any older one). Older checkpoints beyond the
   retained count go, and so do older checkpoints still pending (with
   ``max_concurrent > 1``): as in Flink, a completed checkpoint *subsumes* them
   (``CHECKPOINT_SUBSUMED``; savepoints are never subsumed). Their folders are
   removed once their asynchronous writes have ended.
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import CheckpointError, JobError
from ...format.records import encode_record
from ...format.snapshot import write_metadata
from ..channels import Barrier, Batch, Channel
from .capture import capture_subtask, write_capture
from .incremental import NATIVE_FORMAT, capture_native, is_native_backend, upload_native
from .config import CheckpointConfig, CheckpointingMode
from .storage import CheckpointStorage


class InjectedCrash(RuntimeError):
    """Raised by the crash-injection harness to simulate a failure."""


@dataclass
class _Alignment:
    expected: set[int]
    received: set[int] = field(default_factory=set)
    started: float = field(default_factory=time.perf_counter)
    snapshotted: bool = False
    capture: Any = None  # unaligned: the state copied at the first barrier, written when all arrived
    recorded: dict[int, list] = field(default_factory=dict)  # unaligned: in-flight batches per channel
    submitted: bool = False


@dataclass
class PendingCheckpoint:
    id: int
    folder: Path
    savepoint: bool
    triggered_ms: int
    started: float
    full: bool = False  # CheckpointType.FULL: native files all copied into this checkpoint, none shared
    acks: dict[str, Future] = field(default_factory=dict)
    alignments: dict[str, _Alignment] = field(default_factory=dict)
    expected: set[str] = field(default_factory=set)
    on_complete: list[Callable[["PendingCheckpoint", Path], None]] = field(default_factory=list)


class CheckpointCoordinator:
    def __init__(self, runtime, config: CheckpointConfig, storage: CheckpointStorage, crash: Any = None) -> None:
        self.runtime = runtime
        self.config = config
        self.storage = storage
        self.clock = runtime.clock
        self.crash = crash
        self.pending: dict[int, PendingCheckpoint] = {}
        #: subsumed checkpoints whose asynchronous writes may still run: removed once they end
        self.discarding: list[PendingCheckpoint] = []
        self.completed: list[int] = []
        self.history: list[dict[str, Any]] = []
        self.next_id = storage.latest_id() + 1
        self._last_trigger_ms = self.clock.now_ms()
        self._last_complete_ms: int | None = None
        self._records_at_last_trigger = 0
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="snapshot") if config.asynchronous else None
        self.exactly_once = config.mode is CheckpointingMode.EXACTLY_ONCE
        runtime.barrier_handler = self.on_barrier
        runtime.channel_finished_handler = self.on_channel_finished
        runtime.after_round.append(self.tick)

    # --- triggering -------------------------------------------------------------------
    def source_records(self) -> int:
        return sum(st.operator.records_in for st in self.runtime.subtasks if st.is_source)

    def _due(self) -> bool:
        cfg = self.config
        if len(self.pending) >= cfg.max_concurrent:
            return False
        now = self.clock.now_ms()
        if self._last_complete_ms is not None and now - self._last_complete_ms < cfg.min_pause_ms:
            return False
        if cfg.interval_records is not None and self.source_records() - self._records_at_last_trigger >= cfg.interval_records:
            return True
        if cfg.interval_ms is not None and now - self._last_trigger_ms >= cfg.interval_ms:
            return True
        return False

    def trigger(self, savepoint: bool = False, target: Path | None = None, full: bool = False) -> PendingCheckpoint:
        """Start a checkpoint (or a savepoint into ``target``).

        ``full`` is Flink's ``CheckpointType.FULL``: with incremental checkpoints on, each
        RocksDB subtask's files are all copied into this checkpoint's own folder (none
        shared with other checkpoints, none reused); otherwise every checkpoint is full already.
        """
        cid = self.next_id
        self.next_id += 1
        folder = Path(target) if target is not None else self.storage.folder_for(cid)
        if folder.exists() and any(folder.iterdir()):
            raise JobError(f"{folder}: the target of checkpoint {cid} already exists and is not empty")
        folder.mkdir(parents=True, exist_ok=True)
        now = self.clock.now_ms()
        pc = PendingCheckpoint(cid, folder, savepoint, now, time.perf_counter(), full=full and not savepoint)
        self.pending[cid] = pc
        self._last_trigger_ms = now
        self._records_at_last_trigger = self.source_records()
        rt = self.runtime
        barrier = Barrier(cid, now, savepoint=savepoint, unaligned=self.config.unaligned)
        rt.trace.add(rt.round, "checkpoint_triggered", "coordinator", -1, checkpoint=cid, savepoint=savepoint)
        for st in rt.subtasks:
            pc.expected.add(st.name)
        for st in rt.subtasks:
            if st.finished:
                self._snapshot(pc, st, 0.0)
            elif st.is_source:
                self._snapshot(pc, st, 0.0)
                self._forward(st, barrier)
        return pc

    def _forward(self, subtask, barrier: Barrier) -> None:
        if barrier.unaligned:
            # the barrier overtakes the records queued in our output channels; those become in-flight state
            for _, channels in subtask.all_outputs():
                for ch in channels:
                    ch.queue.appendleft(dataclasses.replace(barrier, overtaken=len(ch.queue)))
        else:
            subtask.emit_event(barrier)
        subtask.trace("barrier_forwarded", checkpoint=barrier.checkpoint_id)

    # --- barriers at non-source subtasks ------------------------------------------------------
    def on_barrier(self, subtask, channel: Channel, barrier: Barrier) -> None:
        pc = self.pending.get(barrier.checkpoint_id)
        if pc is None:  # aborted or timed out: drop the barrier
            return
        al = pc.alignments.get(subtask.name)
        if al is None:
            expected = {i for i, ch in enumerate(subtask.inputs) if not ch.finished or ch is channel}
            al = pc.alignments[subtask.name] = _Alignment(expected)
        idx = subtask.inputs.index(channel)
        al.received.add(idx)
        subtask.trace("barrier_received", checkpoint=barrier.checkpoint_id, channel=channel.source,
                      aligned=len(al.received), of=len(al.expected))
        if barrier.unaligned:
            self._on_unaligned_barrier(pc, subtask, al, idx, channel, barrier)
            return
        if self.exactly_once:
            channel.blocked = True
            if self.crash is not None:
                self.crash.at("alignment", self.runtime)
        if al.received >= al.expected and not al.snapshotted:
            for ch in subtask.inputs:
                ch.blocked = False
            al.snapshotted = True
            self._snapshot(pc, subtask, (time.perf_counter() - al.started) * 1000)
            self._forward(subtask, barrier)

    def _on_unaligned_barrier(self, pc, subtask, al, idx: int, channel: Channel, barrier: Barrier) -> None:
        """Unaligned: snapshot at the first barrier and forward it at once; what was in flight is state.

        In flight are (a) the items each barrier jumped ahead of in its channel, and (b) what the
        subtask processes from a channel after its snapshot and before that channel's barrier.
        """
        if not al.snapshotted:
            al.snapshotted = True
            al.capture = self._capture(pc, subtask, 0.0)
            for i, ch in enumerate(subtask.inputs):
                if i in al.expected and i != idx:
                    ch.recording = al.recorded.setdefault(i, [])
            self._forward(subtask, barrier)
        channel.recording = None
        overtaken = [item for _, item in zip(range(barrier.overtaken), channel.queue) if isinstance(item, Batch)]
        al.recorded.setdefault(idx, []).extend(overtaken)
        self._maybe_submit_unaligned(pc, subtask, al)

    def _maybe_submit_unaligned(self, pc, subtask, al) -> None:
        if al.capture is None or al.submitted or not al.received >= al.expected:
            return
        al.submitted = True
        for ch in subtask.inputs:
            ch.recording = None
        inflight = [{"channel": i, "values": b.values, "timestamps": b.timestamps}
                    for i in sorted(al.recorded) for b in al.recorded[i]]
        self._submit(pc, subtask, al.capture, inflight)

    def on_channel_finished(self, subtask, channel: Channel) -> None:
        """An input ended without a barrier (its producer finished first): stop waiting for it."""
        idx = subtask.inputs.index(channel)
        for pc in list(self.pending.values()):
            al = pc.alignments.get(subtask.name)
            if al is not None and al.capture is not None and not al.submitted:
                al.expected.discard(idx)
                channel.recording = None
                self._maybe_submit_unaligned(pc, subtask, al)
                continue
            if al is None or al.snapshotted or idx not in al.expected or idx in al.received:
                continue
            al.expected.discard(idx)
            if al.received >= al.expected:
                for ch in subtask.inputs:
                    ch.blocked = False
                al.snapshotted = True
                self._snapshot(pc, subtask, (time.perf_counter() - al.started) * 1000)
                self._forward(subtask, Barrier(pc.id, pc.triggered_ms, pc.savepoint, self.config.unaligned))

    # --- snapshots and acknowledgements ---------------------------------------------------------
    def _native_capture(self, pc: PendingCheckpoint):
        """For an incremental (or a native full) checkpoint: how a RocksDB backend is captured natively (else None)."""
        if not self.config.incremental or pc.savepoint:
            return None

        def native(backend):
            if not is_native_backend(backend):
                return None
            staging = backend.path.parent / f".{backend.path.name}-chk-{pc.id}"
            return capture_native(backend, staging, self.storage, pc.id, full=pc.full)

        return native

    def _snapshot(self, pc: PendingCheckpoint, subtask, alignment_ms: float, inflight=None) -> None:
        self._submit(pc, subtask, self._capture(pc, subtask, alignment_ms), inflight)

    def _capture(self, pc: PendingCheckpoint, subtask, alignment_ms: float):
        """The synchronous part: copy the subtask's state, and stage its sink output."""
        now = self.clock.now_ms()
        cap = capture_subtask(subtask, now, native=self._native_capture(pc))
        cap.alignment_ms = alignment_ms
        writer = getattr(subtask.operator, "writer", None)
        if writer is not None and hasattr(writer, "pre_commit"):
            writer.pre_commit(pc.id)
        subtask.trace("snapshot", checkpoint=pc.id, sync_ms=round(cap.sync_ms, 3))
        return cap

    def _submit(self, pc: PendingCheckpoint, subtask, cap, inflight=None) -> None:
        """The asynchronous part: write the capture's files (in the pool)."""
        if inflight:
            registry = self.runtime.env.record_types
            cap.inflight = [{"channel": x["channel"], "values": [encode_record(v, registry) for v in x["values"]],
                             "timestamps": x["timestamps"]} for x in inflight]
        crash = self.crash

        def job():
            if crash is not None:
                try:
                    crash.at("snapshot_write", self.runtime)
                except BaseException:
                    if cap.native is not None:  # the hard-linked RocksDB checkpoint nobody will upload
                        shutil.rmtree(cap.native.staging, ignore_errors=True)
                    raise
            return write_capture(cap, pc.folder,
                                 upload=lambda nc: upload_native(nc, pc.folder, self.storage, pc.id, cap.uid, cap.index),
                                 savepoint=pc.savepoint)

        if self._pool is not None:
            pc.acks[subtask.name] = self._pool.submit(job)
        else:
            f: Future = Future()
            try:
                f.set_result(job())
            except BaseException as exc:  # noqa: BLE001 - handed to the coordinator
                f.set_exception(exc)
            pc.acks[subtask.name] = f

    @staticmethod
    def _capture_pending(pc: PendingCheckpoint, subtask) -> bool:
        al = pc.alignments.get(subtask.name)
        return al is not None and al.capture is not None and not al.submitted

    def tick(self, runtime) -> None:
        if self.discarding:
            self._discard_finished()
        for cid in sorted(self.pending):
            if cid not in self.pending:  # subsumed by a newer one completed in this tick
                continue
            pc = self.pending[cid]
            # a subtask that finished before its barrier came has its final state: snapshot it as is
            for st in runtime.subtasks:
                if st.finished and st.name not in pc.acks and not self._capture_pending(pc, st):
                    self._snapshot(pc, st, 0.0)
            if len(pc.acks) == len(pc.expected) and all(f.done() for f in pc.acks.values()):
                self._complete(pc)
            elif (time.perf_counter() - pc.started) * 1000 > self.config.timeout_ms:
                # wall-clock time: the job's clock may be simulated (ManualClock, replayed event time)
                self.abort(pc, f"timed out after {self.config.timeout_ms} ms")
        if self._due() and not runtime.finished and not any(p.savepoint for p in self.pending.values()):
            self.trigger()

    def wait_for(self, pc: PendingCheckpoint) -> None:
        """Block until all acks of ``pc`` are in, then complete it."""
        for st in self.runtime.subtasks:
            if st.finished and st.name not in pc.acks and not self._capture_pending(pc, st):
                self._snapshot(pc, st, 0.0)
        if len(pc.acks) < len(pc.expected):
            raise JobError(f"checkpoint {pc.id}: subtasks {sorted(pc.expected - set(pc.acks))} never acknowledged")
        for f in list(pc.acks.values()):
            try:
                f.result()
            except OSError as exc:
                raise self._write_failed(pc, exc) from exc
        if pc.id in self.pending:
            self._complete(pc)

    def abort(self, pc: PendingCheckpoint, why: str) -> None:
        self.pending.pop(pc.id, None)
        for st in self.runtime.subtasks:
            for ch in st.inputs:
                ch.blocked = False
        shutil.rmtree(pc.folder, ignore_errors=True)
        self.storage.release(pc.id)
        rt = self.runtime
        rt.trace.add(rt.round, "checkpoint_aborted", "coordinator", -1, checkpoint=pc.id, reason=why)
        self.history.append({"checkpoint_id": pc.id, "status": "aborted", "reason": why})

    def _write_failed(self, pc: PendingCheckpoint, exc: OSError) -> CheckpointError:
        """Abort ``pc`` after a failed write (its torn folder removed, never completed) and say why.

        The job's failure policy is Flink's default, no tolerable checkpoint failures: the
        error ends the job, which restarts from the last completed checkpoint.
        """
        errno_name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        where = getattr(exc, "filename", None) or pc.folder
        self.abort(pc, f"write failed: {errno_name} {exc.strerror or exc}")
        return CheckpointError(
            f"{where}: writing checkpoint {pc.id} failed with {errno_name} ({exc.strerror or exc}); expected "
            f"room and a writable {self.storage.directory}. "
            "The checkpoint was aborted and removed; the last completed checkpoint stays the one to restore")

    def _complete(self, pc: PendingCheckpoint) -> None:
        subtasks = {}
        try:
            for name, f in pc.acks.items():
                subtasks[name] = f.result()  # raises what the async write raised
            meta = self._metadata(pc, subtasks)
            if self.crash is not None:
                self.crash.at("metadata_commit", self.runtime)
            write_metadata(pc.folder, meta)
        except OSError as exc:  # disk full, I/O error: a clean error, the torn checkpoint removed
            raise self._write_failed(pc, exc) from exc
        self.storage.release(pc.id)  # the metadata names its shared files now
        del self.pending[pc.id]
        self._last_complete_ms = self.clock.now_ms()
        self.completed.append(pc.id)
        rt = self.runtime
        rt.trace.add(rt.round, "checkpoint_completed", "coordinator", -1, checkpoint=pc.id, savepoint=pc.savepoint,
                     bytes=meta["timing"]["bytes"])
        self.history.append({"checkpoint_id": pc.id, "status": "completed", "savepoint": pc.savepoint,
                             "path": str(pc.folder), **meta["timing"]})
        for st in rt.subtasks:
            writer = getattr(st.operator, "writer", None)
            if writer is not None and hasattr(writer, "commit"):
                writer.commit(pc.id)
        if not pc.savepoint:
            self._subsume(pc.id)
            self.storage.retain(self.config.retained, in_flight=self._in_flight())
        for fn in pc.on_complete:
            fn(pc, pc.folder)

    # --- subsumed checkpoints ----------------------------------------------------------------
    def _subsume(self, completed_id: int) -> None:
        """Abort the checkpoints still pending that are older than ``completed_id`` (Flink's
        ``dropSubsumedCheckpoints``: a newer completed checkpoint makes them useless; savepoints
        are never subsumed). Every barrier of theirs has passed (the newer one's came after them
        on every channel), so no channel waits for them; their writes may still be running, so
        their folders and shared-file holds go once those end (:meth:`_discard_finished`)."""
        rt = self.runtime
        for cid in sorted(self.pending):
            if cid >= completed_id:
                break
            pc = self.pending[cid]
            if pc.savepoint:
                continue
            del self.pending[cid]
            self.discarding.append(pc)
            reason = f"subsumed by checkpoint {completed_id}"
            rt.trace.add(rt.round, "checkpoint_aborted", "coordinator", -1, checkpoint=cid, reason=reason)
            self.history.append({"checkpoint_id": cid, "status": "aborted", "reason": reason})
        self._discard_finished()

    def _discard_finished(self, wait: bool = False) -> None:
        """Remove the folders of subsumed checkpoints whose writes have ended (all of them
        with ``wait``) and release their shared-file holds."""
        left = []
        for pc in self.discarding:
            futures = list(pc.acks.values())
            if wait:
                for f in futures:
                    f.exception()  # waits; what a discarded write raised does not matter
            elif not all(f.done() for f in futures):
                left.append(pc)
                continue
            shutil.rmtree(pc.folder, ignore_errors=True)
            self.storage.release(pc.id)
        self.discarding = left

    def _in_flight(self) -> set[int]:
        """Checkpoints whose folders are still being written: pending, or subsumed and not yet discarded."""
        return set(self.pending) | {pc.id for pc in self.discarding}

    def _metadata(self, pc: PendingCheckpoint, subtasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
        rt = self.runtime
        env = rt.env
        operators = []
        files: dict[str, Any] = {}
        for spec in rt.specs:
            subs = []
            states: dict[str, Any] = {}
            for st in rt.tasks[spec.id]:
                frag = dict(subtasks[st.name])
                files.update(frag.pop("files"))
                subs.append(frag)
                backend = getattr(st.operator, "backend", None)
                if backend is not None:
                    for name, table in backend.tables.items():
                        states.setdefault(name, table.descriptor.describe())
            operators.append({
                "uid": spec.uid,
                "name": spec.name,
                "kind": spec.operator_class.__name__,
                "parallelism": spec.parallelism,
                "max_parallelism": spec.max_parallelism,
                "keyed": spec.keyed,
                "states": [states[k] for k in sorted(states)],
                "subtasks": sorted(subs, key=lambda s: s["index"]),
                "description": spec.description,
            })
        total_bytes = sum(f["bytes"] for f in files.values())
        return {
            "format": "state-explorer-snapshot",
            "checkpoint_id": pc.id,
            "kind": "savepoint" if pc.savepoint else "checkpoint",
            "savepoint_format": "canonical",
            "created_at_ms": self.clock.now_ms(),
            "job": {"name": rt.job_name},
            "backend": _backend_name(rt),
            "mode": self.config.mode.value,
            "unaligned": self.config.unaligned,
            "incremental": not pc.full and any(s.get("state_format") == NATIVE_FORMAT for s in subtasks.values()),
            # Flink's CheckpointType: FULL (nothing shared with another checkpoint) or INCREMENTAL
            "checkpoint_type": "incremental" if not pc.full and any(
                s.get("state_format") == NATIVE_FORMAT for s in subtasks.values()) else "full",
            "operators": operators,
            "files": files,
            "timing": {
                "duration_ms": round((time.perf_counter() - pc.started) * 1000, 3),
                # the slowest subtask's, as Flink reports them: subtasks snapshot in parallel, so a sum
                # would be no duration at all (and could exceed the checkpoint's own duration)
                "sync_ms": round(max((s["sync_ms"] for s in subtasks.values()), default=0.0), 3),
                "async_ms": round(max((s["async_ms"] for s in subtasks.values()), default=0.0), 3),
                "alignment_ms": round(max((s["alignment_ms"] for s in subtasks.values()), default=0.0), 3),
                "bytes": total_bytes,
                "bytes_written": sum(s.get("bytes_written", s["bytes"]) for s in subtasks.values()),
                "inflight_records": 0,
            },
        }

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self._discard_finished(wait=True)


def _backend_name(rt) -> str:
    for st in rt.subtasks:
        b = getattr(st.operator, "backend", None)
        if b is not None:
            return b.name
    return "none"

"""Running a job with checkpoints, savepoints, restore, and injected crashes.

:class:`JobClient` is the handle of a running job: run it in rounds, trigger
a checkpoint or savepoint, stop with a savepoint. ``env.execute()`` uses it
when checkpointing is enabled. :class:`CrashInjector` makes a run fail at a
chosen point (between records, during alignment, while writing a snapshot,
while committing its metadata) so tests can prove recovery exactly-once.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable

from ...errors import JobError, SnapshotCorruptError, SnapshotError
from ..backends.rocksdb import RocksDBStateBackend
from ..runtime import JobResult
from .config import CheckpointConfig
from .coordinator import CheckpointCoordinator, InjectedCrash
from .restore import abort_restore, check_after_open, restore_runtime
from .storage import CheckpointStorage

log = logging.getLogger(__name__)

CRASH_POINTS = ("round", "alignment", "snapshot_write", "metadata_commit")


class CrashInjector:
    """Raise :class:`InjectedCrash` the ``after``-th time the job passes ``point``."""

    def __init__(self, point: str, after: int) -> None:
        if point not in CRASH_POINTS:
            raise ValueError(f"unknown crash point {point!r}; expected one of {CRASH_POINTS}")
        self.point = point
        self.after = after
        self.seen = 0
        self.fired = False

    def at(self, point: str, runtime: Any) -> None:
        if point != self.point or self.fired:
            return
        self.seen += 1
        if self.seen >= self.after:
            self.fired = True
            raise InjectedCrash(f"injected crash at {point} #{self.seen} (round {runtime.round})")


class JobClient:
    """A job being run by the local runtime, with checkpointing and savepoints."""

    def __init__(
        self,
        env,
        job_name: str = "job",
        restore_from: str | Path | None = None,
        allow_non_restored_state: bool = False,
        crash: CrashInjector | None = None,
        memory_budget: int | str | None = None,
    ) -> None:
        self.env = env
        self.crash = crash
        cfg: CheckpointConfig | None = env.checkpoint_config
        if cfg is None:  # savepoints only: checkpoint ids come from a scratch folder
            scratch = tempfile.mkdtemp(prefix="state-explorer-savepoints-")
            weakref.finalize(self, shutil.rmtree, scratch, ignore_errors=True)
            cfg = CheckpointConfig(directory=Path(scratch))
        self.config = cfg
        self.storage = CheckpointStorage(cfg.directory)
        self.runtime = env.build_runtime(job_name)
        self.runtime.checkpointing = env.checkpoint_config is not None
        self.restored_meta = None
        try:
            if restore_from is not None:
                self.restored_meta = restore_runtime(self.runtime, restore_from, allow_non_restored_state,
                                                     memory_budget=memory_budget)
            self.coordinator = CheckpointCoordinator(self.runtime, cfg, self.storage, crash)
            if self.restored_meta is not None:
                self.coordinator.next_id = max(self.coordinator.next_id, self.restored_meta["checkpoint_id"] + 1)
            if crash is not None:
                self.runtime.after_round.insert(0, lambda rt: crash.at("round", rt))
            self.runtime.open()
            check_after_open(self.runtime)
        except BaseException as e:
            # a damaged data file can surface as any error of the load (Parquet, RocksDB):
            # the checksum result, awaited here, decides and is the error reported
            corrupt = e if isinstance(e, SnapshotCorruptError) else None
            verification = getattr(self.runtime, "restore_verification", None)
            if corrupt is None and verification is not None:
                if isinstance(e, Exception):
                    corrupt = verification.finish()
                else:  # interrupted: stop hashing
                    verification.cancel()
            # no state of a snapshot that did not restore remains, and no database stays locked
            # (a second attempt in this process could not open it)
            _cleanup_failed_start(self.runtime, restored=restore_from is not None)
            if corrupt is not None and corrupt is not e:
                raise corrupt from e
            raise
        if self.restored_meta is not None:
            cid = self.restored_meta["checkpoint_id"]
            for spec in self.runtime.specs:
                if spec.sink is not None and hasattr(spec.sink, "recover"):
                    spec.sink.recover(cid)
        self.closed = False

    # --- running -------------------------------------------------------------------------
    def run(self, until: Callable[[Any], bool] | None = None, max_rounds: int | None = None) -> "JobClient":
        self.runtime.run(until=until, max_rounds=max_rounds)
        if self.runtime.finished:
            # the end of input is a final commit point: settle checkpoints still in flight
            for pc in list(self.coordinator.pending.values()):
                self.coordinator.wait_for(pc)
            for st in self.runtime.subtasks:
                writer = getattr(st.operator, "writer", None)
                if writer is not None and hasattr(writer, "commit_final"):
                    writer.commit_final()
        return self

    @property
    def finished(self) -> bool:
        return self.runtime.finished

    def result(self) -> JobResult:
        return JobResult(self.runtime)

    # --- checkpoints and savepoints ---------------------------------------------------------
    def _until_complete(self, pc) -> Path:
        while pc.id in self.coordinator.pending:
            if all(n in pc.acks for n in pc.expected):
                self.coordinator.wait_for(pc)
                break
            if not self.runtime.run_round():
                if all(n in pc.acks for n in pc.expected):
                    continue
                raise JobError(f"checkpoint {pc.id} cannot complete: the job made no progress")
        if pc.id not in self.coordinator.completed:
            reason = next((h.get("reason") for h in self.coordinator.history if h["checkpoint_id"] == pc.id), "unknown")
            raise JobError(f"checkpoint {pc.id} into {pc.folder} was aborted: {reason}")
        return pc.folder

    def trigger_checkpoint(self, full: bool = False) -> Path:
        """Take a checkpoint now and return its folder once complete.

        ``full=True`` is Flink's ``CheckpointType.FULL``: with incremental checkpoints on,
        the RocksDB subtasks' files are all copied into this checkpoint's folder, none
        shared with or reused from other checkpoints (without them it changes nothing).
        Raises :class:`~explorer.errors.JobError` if it does not complete: timed out, a write
        failed, or (with ``max_concurrent > 1``) a newer checkpoint completed first and
        subsumed it, as Flink aborts it with ``CHECKPOINT_SUBSUMED``.
        """
        return self._until_complete(self.coordinator.trigger(full=full))

    def trigger_savepoint(self, target: str | Path) -> Path:
        """Take a savepoint into ``target`` (a new folder) and keep running."""
        return self._until_complete(self.coordinator.trigger(savepoint=True, target=Path(target)))

    def stop_with_savepoint(self, target: str | Path) -> Path:
        """Take a savepoint, then stop the job (sources stop; nothing is drained).

        Like Flink's synchronous savepoint, a source emits nothing after the savepoint's
        barrier (no record, no watermark): otherwise a subtask that has taken its snapshot
        would go on processing records (and firing event-time timers) the savepoint does not
        account for while others still align, and a non-transactional sink would output them
        now and again after the restore.
        """
        self.runtime.hold_sources_open = True
        rt = self.runtime
        previous = rt.before_source_step
        rt.before_source_step = lambda subtask: True  # the barriers are emitted by trigger(), not by a step
        try:
            path = self.trigger_savepoint(target)
        finally:
            rt.before_source_step = previous
        self.close()
        return path

    @property
    def checkpoint_history(self) -> list[dict[str, Any]]:
        return list(self.coordinator.history)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.coordinator.close()
        self.runtime.close()


def _cleanup_failed_start(runtime, restored: bool) -> None:
    """A job failed to start: after a restore, remove what it built (:func:`.restore.abort_restore`);
    otherwise close its RocksDB backends. Errors here are logged, never raised over the real one."""
    try:
        if restored:
            abort_restore(runtime)
            return
        for st in runtime.subtasks:
            backend = getattr(st.operator, "backend", None)
            if isinstance(backend, RocksDBStateBackend):
                backend.close()
    except Exception:  # noqa: BLE001 - the start's own error is the one to report
        log.warning("cleaning up after a failed start of job %r failed", runtime.job_name, exc_info=True)


def run_with_checkpoints(env, job_name: str, max_rounds: int | None = None, restore_from=None,
                         allow_non_restored_state: bool = False, memory_budget: int | str | None = None) -> JobResult:
    client = JobClient(env, job_name, restore_from=restore_from, allow_non_restored_state=allow_non_restored_state,
                       memory_budget=memory_budget)
    try:
        client.run(max_rounds=max_rounds)
    finally:
        client.close()
    result = client.result()
    result.checkpoints = client.checkpoint_history  # type: ignore[attr-defined]
    return result


def run_with_recovery(make_env: Callable[[], Any], job_name: str, crash: CrashInjector | None,
                      max_restarts: int = 5, restore_from: str | Path | None = None) -> tuple[JobResult, int]:
    """Run a checkpointed job that crashes at ``crash``; restore from the latest good checkpoint
    and continue until the input ends. Returns the final result and how many restarts it took.

    ``make_env`` must return an environment for the same job wired to the same sinks and the
    same checkpoint directory each time. ``restore_from`` (a savepoint or checkpoint) is where
    the first run starts, and where a restart starts when no checkpoint of this run has
    completed yet (as Flink restarts a job started from a savepoint).

    Each restart restores the newest complete checkpoint, whose files the restore itself
    checks (sizes first, checksums while it loads); if one is damaged the restore fails with
    a :class:`~explorer.errors.SnapshotError`, leaves nothing behind (:func:`.restore.abort_restore`),
    and the next older checkpoint is tried, then ``restore_from``, then a start from scratch.
    So each file is hashed once per restart (checking a checkpoint with
    :meth:`CheckpointStorage.latest_valid` first and then restoring it hashed every file twice).
    """
    restarts = 0
    injector: CrashInjector | None = crash
    while True:
        client = _start(make_env, job_name, injector, recovering=restarts > 0, initial=restore_from)
        try:
            client.run()
            client.close()
            return client.result(), restarts
        except InjectedCrash:
            client.close()
            restarts += 1
            injector = None  # one crash per run
            if restarts > max_restarts:
                raise


def _start(make_env: Callable[[], Any], job_name: str, injector: CrashInjector | None, recovering: bool,
           initial: str | Path | None = None) -> JobClient:
    """A client of a fresh environment: started from ``initial``, or when ``recovering`` restored from
    the newest checkpoint that restores (then ``initial``, then nothing)."""
    env = make_env()
    if not recovering:
        return JobClient(env, job_name, restore_from=initial, crash=injector)
    storage = CheckpointStorage(env.checkpoint_config.directory)
    storage.clean_incomplete()
    for cid in reversed(storage.completed_ids()):
        folder = storage.folder_for(cid)
        try:
            return JobClient(env, job_name, restore_from=folder, crash=injector)
        except SnapshotError as e:
            log.warning("checkpoint %s cannot be restored, trying an older one: %s", folder, e)
            env = make_env()  # the failed attempt's runtime is spent
    return JobClient(env, job_name, restore_from=initial, crash=injector)

"""Sinks: where a job's results go.

* :class:`CollectSink` keeps results in memory (``result.output(name)``).
* :class:`FileSink` writes JSON lines, one file per subtask.

Exactly-once delivery across failures is provided by the checkpointing layer
(results are staged per checkpoint and committed when it completes).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


class SinkWriter:
    def write(self, values: list[Any], timestamps: list[int | None] | None) -> None:
        raise NotImplementedError

    def write_batch(self, batch) -> None:
        """Write one :class:`~explorer.engine.channels.Batch`; writers that can use a
        columnar batch's ``columns`` override this, the rest get its records."""
        self.write(batch.values, batch.timestamps)

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


class Sink:
    name = "sink"

    def create_writer(self, subtask_index: int, parallelism: int, runtime) -> SinkWriter:
        raise NotImplementedError


#: the epoch of what a checkpointed job writes after its last checkpoint, until its input ends
FINAL_EPOCH = 1 << 62


class _CollectWriter(SinkWriter):
    def __init__(self, target: list[Any]) -> None:
        self.target = target

    def write(self, values, timestamps):
        self.target.extend(values)


class _TransactionalCollectWriter(SinkWriter):
    """Exactly-once in memory: records become visible when the checkpoint after them completes."""

    def __init__(self, sink: "CollectSink", subtask_index: int) -> None:
        self.sink = sink
        self.index = subtask_index
        self.current: list[Any] = []

    def write(self, values, timestamps):
        self.current.extend(values)

    def pre_commit(self, checkpoint_id: int) -> None:
        # a subtask that finished before this checkpoint's snapshot of it: the snapshot (its state
        # after the end of input) covers its final epoch, which so becomes part of this checkpoint's
        final = self.sink.staged.pop((self.index, FINAL_EPOCH), None)
        self.sink.staged[(self.index, checkpoint_id)] = (final or []) + self.current
        self.current = []

    def commit(self, checkpoint_id: int) -> None:
        self.sink.commit_upto(self.index, checkpoint_id)

    def finish(self) -> None:
        # the end of input stages a last epoch; the job commits it once no checkpoint is pending
        self.sink.staged[(self.index, FINAL_EPOCH)] = self.current
        self.current = []

    def commit_final(self) -> None:
        self.sink.commit_upto(self.index, None)


class CollectSink(Sink):
    """Collects results in memory under ``name``.

    In a checkpointed job the sink is transactional: what is written between
    two checkpoints is staged and appears in the results only when the
    checkpoint completes (or the input ends), so a job restored after a
    failure produces each result exactly once.
    """

    def __init__(self, name: str = "output") -> None:
        self.name = name
        self.results: list[Any] = []
        self.staged: dict[tuple[int, int], list[Any]] = {}
        self.committed: set[tuple[int, int]] = set()

    def create_writer(self, subtask_index, parallelism, runtime):
        if getattr(runtime, "restored_from", None) is None and not getattr(runtime, "_collect_reset", set()).__contains__(self.name):
            runtime.__dict__.setdefault("_collect_reset", set()).add(self.name)
            self.results.clear()
            self.staged.clear()
            self.committed.clear()
        runtime.collected[self.name] = self.results
        if getattr(runtime, "checkpointing", False):
            return _TransactionalCollectWriter(self, subtask_index)
        return _CollectWriter(self.results)

    def commit_upto(self, subtask_index: int, checkpoint_id: int | None) -> None:
        for (idx, cid) in sorted(k for k in self.staged if k[0] == subtask_index):
            if checkpoint_id is not None and cid > checkpoint_id:
                continue
            if (idx, cid) not in self.committed:
                self.results.extend(self.staged[(idx, cid)])
                self.committed.add((idx, cid))
            del self.staged[(idx, cid)]

    def recover(self, checkpoint_id: int) -> None:
        """After a restore from ``checkpoint_id``: commit what it staged, drop what came later."""
        for (idx, cid) in sorted(self.staged):
            if cid <= checkpoint_id:
                self.commit_upto(idx, cid)
            else:
                del self.staged[(idx, cid)]


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


class _FileWriter(SinkWriter):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.f = open(path, "w", encoding="utf-8")

    def write(self, values, timestamps):
        w = self.f.write
        for v in values:
            w(json.dumps(v, default=_json_default))
            w("\n")

    def close(self):
        if not self.f.closed:
            self.f.close()


class _TransactionalFileWriter(SinkWriter):
    """Exactly-once files: each checkpoint epoch is staged in ``_pending/`` and renamed on commit."""

    def __init__(self, directory: Path, subtask_index: int) -> None:
        self.dir = directory
        self.index = subtask_index
        self.pending = directory / "_pending"
        self.pending.mkdir(parents=True, exist_ok=True)
        self.buffer: list[Any] = []

    def write(self, values, timestamps):
        self.buffer.extend(values)

    def _stage(self, tag: str, append: bool = False) -> None:
        path = self.pending / f"part-{self.index}-{tag}.jsonl"
        with open(path, "a" if append else "w", encoding="utf-8") as f:
            for v in self.buffer:
                f.write(json.dumps(v, default=_json_default))
                f.write("\n")
        self.buffer = []

    def pre_commit(self, checkpoint_id: int) -> None:
        final = self.pending / f"part-{self.index}-final.jsonl"
        if final.exists():
            # the subtask finished before this checkpoint's snapshot of it: the snapshot (its state
            # after the end of input, timers fired) covers the final epoch, so it becomes this
            # checkpoint's (a restore from it must not drop it as output after the checkpoint)
            final.replace(self.pending / f"part-{self.index}-{checkpoint_id:08d}.jsonl")
            if self.buffer:
                self._stage(f"{checkpoint_id:08d}", append=True)
            return
        self._stage(f"{checkpoint_id:08d}")

    def commit(self, checkpoint_id: int | None) -> None:
        for p in sorted(self.pending.glob(f"part-{self.index}-*.jsonl")):
            tag = p.stem.rsplit("-", 1)[1]
            if checkpoint_id is None or (tag.isdigit() and int(tag) <= checkpoint_id):
                p.replace(self.dir / p.name)

    def finish(self) -> None:
        self._stage("final")

    def commit_final(self) -> None:
        self.commit(None)


class FileSink(Sink):
    """JSON lines into ``directory``: ``part-<subtask>.jsonl``, or, in a checkpointed
    job, one committed file per subtask and checkpoint (exactly once)."""

    def __init__(self, directory: str | Path, name: str = "file") -> None:
        self.directory = Path(directory)
        self.name = name

    def create_writer(self, subtask_index, parallelism, runtime):
        if getattr(runtime, "checkpointing", False):
            return _TransactionalFileWriter(self.directory, subtask_index)
        return _FileWriter(self.directory / f"part-{subtask_index}.jsonl")

    def recover(self, checkpoint_id: int) -> None:
        """After a restore from ``checkpoint_id``: commit what it staged, drop what came later.

        The restored job emits every record after the checkpoint again, under epoch names of its
        own (its checkpoints need not fall where the first run's did). So output of later epochs
        is dropped even where it was committed already: epochs of checkpoints that were aborted
        and committed with a later one or at the end of input (``final``), or of a newer
        checkpoint that did not restore. Otherwise a run killed after its final commit and
        recovered would keep a first-run epoch the rerun does not overwrite (duplicates)."""
        pending = self.directory / "_pending"
        if pending.is_dir():
            for p in sorted(pending.glob("part-*.jsonl")):
                tag = p.stem.rsplit("-", 1)[1]
                if tag.isdigit() and int(tag) <= checkpoint_id:
                    p.replace(self.directory / p.name)
                else:
                    p.unlink()
        for p in sorted(self.directory.glob("part-*-*.jsonl")):
            tag = p.stem.rsplit("-", 1)[1]
            if not (tag.isdigit() and int(tag) <= checkpoint_id):
                p.unlink()

    def read_all(self) -> list[Any]:
        """Every committed record, in file order."""
        out = []
        for p in sorted(self.directory.glob("part-*.jsonl")):
            with open(p, encoding="utf-8") as f:
                out.extend(json.loads(line) for line in f if line.strip())
        return out

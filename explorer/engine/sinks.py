"""Sinks: where a job's results go.

* :class:`CollectSink` keeps results in memory (``result.output(name)``).
* :class:`FileSink` writes JSON lines, one file per subtask.

Exactly-once delivery across failures is provided by the checkpointing layer
(results are staged per checkpoint and committed when it completes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class SinkWriter:
    def write(self, values: list[Any], timestamps: list[int | None] | None) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


class Sink:
    name = "sink"

    def create_writer(self, subtask_index: int, parallelism: int, runtime) -> SinkWriter:
        raise NotImplementedError


class _CollectWriter(SinkWriter):
    def __init__(self, target: list[Any]) -> None:
        self.target = target

    def write(self, values, timestamps):
        self.target.extend(values)


class CollectSink(Sink):
    """Collects results in memory under ``name``."""

    def __init__(self, name: str = "output") -> None:
        self.name = name

    def create_writer(self, subtask_index, parallelism, runtime):
        return _CollectWriter(runtime.collected.setdefault(self.name, []))


def _json_default(o: Any) -> Any:
    import dataclasses

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
        self.f.close()


class FileSink(Sink):
    """JSON lines into ``directory/part-<subtask>.jsonl``."""

    def __init__(self, directory: str | Path, name: str = "file") -> None:
        self.directory = Path(directory)
        self.name = name

    def create_writer(self, subtask_index, parallelism, runtime):
        return _FileWriter(self.directory / f"part-{subtask_index}.jsonl")

"""The Spark part of ``make demo``: every example pipeline on local Spark, each checkpoint opened.

``run_spark_demo(out)`` runs each pipeline of :mod:`explorer.pipelines` through
:func:`explorer.spark.run_on_spark` (:mod:`explorer.spark_engine.pipelines`) over a small generated
input, compares its outputs with the engine's on the same records, opens every checkpoint
with :func:`explorer.open` and prints one line per pipeline::

    orders        2,000 records   4 batches   31.2 s  outputs = engine (orders 1,437, illegal 512, stuck 230)
                  order-state-machine: 1,203 rows, 1,203 keys, states order (4 partitions)

The JVM's log, Spark's warnings and the Python workers' own lines go to
``out/spark/spark.log``, not to the terminal: the JVM and its Python workers write to the
file descriptors they were started with, so the session is started while descriptors 1 and 2
point at the log (:func:`output_to`). A summary is also written as ``out/spark/summary.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from ..pipelines import PIPELINES
from ..snapshot import open as open_snapshot
from ..spark_engine.pipelines import PipelineRun, engine_outputs, run_pipeline_on_spark
from ..spark_session import get_spark

__all__ = ["output_to", "run_spark_demo"]

#: records per pipeline in the demo: enough for every output to have rows, small enough for a laptop
DEMO_RECORDS = 2000


@contextlib.contextmanager
def output_to(log_path: str | Path) -> Iterator[Callable[[str], None]]:
    """Point this process's file descriptors 1 and 2 at ``log_path``; yields a ``say(line)`` to the terminal.

    What starts inside (the JVM, and the Python workers it forks) keeps writing to the log
    after the block ends.
    """
    for f in (sys.stdout, sys.stderr):
        f.flush()
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(1), os.dup(2)
    term = os.fdopen(os.dup(saved[0]), "w", buffering=1)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    try:
        yield lambda line: print(line, file=term, flush=True)
    finally:
        for f in (sys.stdout, sys.stderr):
            f.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        term.close()


def _summarize(run: PipelineRun, engine: dict[str, list[Any]]) -> dict[str, Any]:
    diff = run.differences(engine)
    checkpoints = {}
    for uid, ckpt in run.checkpoints.items():
        try:
            snap = open_snapshot(ckpt)
            df = snap.keyed_state()
            checkpoints[uid] = {"path": str(ckpt), "rows": len(df), "keys": int(df.key.nunique()) if len(df) else 0,
                                "states": sorted(set(df.state)), "format": snap.format,
                                "partitions": int(df.key_group.nunique()) if len(df) else 0}
        except Exception as exc:  # reported per checkpoint, the demo goes on
            checkpoints[uid] = {"path": str(ckpt), "error": f"{type(exc).__name__}: {exc}"[:300]}
    return {
        "pipeline": run.pipeline, "records": len(run.records), "batches": run.batches,
        "seconds": round(run.seconds, 1), "outputs": {k: len(v) for k, v in run.outputs.items()},
        "same_as_engine": not diff, "differences": diff, "checkpoints": checkpoints,
    }


def _lines(s: dict[str, Any]) -> list[str]:
    outs = ", ".join(f"{k} {v:,}" for k, v in s["outputs"].items())
    verdict = "outputs = engine" if s["same_as_engine"] else f"OUTPUTS DIFFER from the engine {s['differences']}"
    lines = [f"{s['pipeline']:<13} {s['records']:>6,} records {s['batches']:>3} batches {s['seconds']:>7.1f} s  "
             f"{verdict} ({outs})"]
    for uid, c in s["checkpoints"].items():
        if "error" in c:
            lines.append(f"{'':<13} {uid}: could not open: {c['error']}")
        elif not c["rows"] and not PIPELINES[s["pipeline"]].keyed_state:
            lines.append(f"{'':<13} {uid}: opened ({c['format']}), no keyed state: a stateless query")
        elif not c["rows"]:
            lines.append(f"{'':<13} {uid}: opened ({c['format']}), no keyed state left: the end of input fired "
                         "every timer, which cleared it")
        else:
            lines.append(f"{'':<13} {uid}: {c['rows']:,} rows, {c['keys']:,} keys, states {', '.join(c['states'])} "
                         f"({c['partitions']} partitions)")
    return lines


def run_spark_demo(out: str | Path, n: int = DEMO_RECORDS, files: int = 4, seed: int = 0,
                   say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every example pipeline on Spark under ``out/spark/<pipeline>``; returns the summary."""
    base = Path(out) / "spark"
    shutil.rmtree(base, ignore_errors=True)
    log = base / "spark.log"
    summary: dict[str, Any] = {"log": str(log), "pipelines": []}
    with output_to(log) as term:
        say = say or term
        t = time.perf_counter()
        get_spark()
        say(f"Spark session started in {time.perf_counter() - t:.1f} s (JVM and worker output in {log})")
        for name, pipe in PIPELINES.items():
            records = pipe.generate(n, seed=seed)
            try:
                run = run_pipeline_on_spark(name, records, out=base / name, files=files)
            except Exception as exc:
                say(f"{name:<13} FAILED on Spark: {type(exc).__name__}: {str(exc)[:300]} (details in {log})")
                summary["pipelines"].append({"pipeline": name, "error": str(exc)[:2000]})
                continue
            s = _summarize(run, engine_outputs(name, records))
            for line in _lines(s):
                say(line)
            summary["pipelines"].append(s)
    (base / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary

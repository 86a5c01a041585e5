"""Build ``sample_data/``: small, reproducible snapshots made by the engine (``make sample-data``).

::

    python -m explorer.sample_data sample_data

What it writes (the notebooks, the widget tests and the browser tests use it):

=====================================  ==================================================================
folder                                 what it is
=====================================  ==================================================================
``url_counts/checkpoints/chk-N``       five checkpoints of ``url_counts`` (heap, parallelism 2), one
                                       every 2,000 input lines: for history and diff
``url_counts/savepoint-heap``          savepoints at the end of the same input, per state backend
``url_counts/savepoint-rocksdb``
``sessions/savepoint-heap``            ``sessions`` half way through (open sessions, pending timers)
``sessions/savepoint-rocksdb``
``fraud/savepoint-heap``               ``fraud``: keyed state, timers and broadcast rules
``dedup/savepoint-heap``               ``dedup``: a ValueState with a 24 h TTL, on replayed event time
=====================================  ==================================================================

Reproducible: every input comes from a fixed seed, processing time is a
:class:`~explorer.engine.ManualClock` (or the pipeline's replay clock), and
checkpoints are triggered by input position, never by wall-clock time. Reruns
give the same state entries, keys and times; only the measured durations in
each ``_metadata`` (sync/async milliseconds) differ.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .engine import ManualClock
from .pipelines import PIPELINES

#: 2026-01-01T00:00:00Z: the processing time the sample jobs start at
START_MS = 1_767_225_600_000
SEED = 2026


@dataclass(frozen=True)
class Sample:
    """One sample job: which pipeline, how much input, where its snapshots go."""

    pipeline: str
    records: int
    parallelism: int
    backends: tuple[str, ...] = ("heap",)
    #: take the savepoint after this share of the input (None: at the end)
    savepoint_at: float | None = None
    #: checkpoints every this many input records into ``<pipeline>/checkpoints`` (heap only)
    checkpoint_every: int | None = None


SAMPLES: tuple[Sample, ...] = (
    Sample("url_counts", 10_000, 2, ("heap", "rocksdb"), checkpoint_every=2_000),
    Sample("sessions", 6_000, 2, ("heap", "rocksdb"), savepoint_at=0.5),
    Sample("fraud", 6_000, 2),
    Sample("dedup", 6_000, 2),
)


def _records_read(runtime) -> int:
    return sum(st.operator.records_in for st in runtime.subtasks if st.is_source)


def build_sample(sample: Sample, backend: str, out: Path, scratch: Path) -> list[Path]:
    """Run one sample job on ``backend``; returns the snapshot folders it wrote under ``out``."""

    pipe = PIPELINES[sample.pipeline]
    records = pipe.generate(sample.records, seed=SEED)
    options = {} if pipe.replay_clock else {"clock": ManualClock(START_MS)}
    env = pipe.make_env(sample.parallelism, max_parallelism=128, state_backend=backend, batch_size=256,
                        state_dir=scratch / f"{sample.pipeline}-{backend}", **options)
    chk_dir = out / sample.pipeline / "checkpoints"
    checkpointing = sample.checkpoint_every is not None and backend == "heap"
    if checkpointing:
        # triggered below by input position; the huge interval only switches the directory on
        env.enable_checkpointing(chk_dir, interval_records=10**12, retained=100)
    pipe.build(env, records)
    client = env.execute_async(sample.pipeline)
    written = []
    try:
        if checkpointing:
            for target in range(sample.checkpoint_every, sample.records + 1, sample.checkpoint_every):
                client.run(until=lambda rt, t=target: _records_read(rt) >= t)
                written.append(client.trigger_checkpoint())
        if sample.savepoint_at is not None:
            client.run(until=lambda rt: _records_read(rt) >= sample.savepoint_at * sample.records)
        else:
            client.run()
        written.append(client.trigger_savepoint(out / sample.pipeline / f"savepoint-{backend}"))
    finally:
        client.close()
    return written


def build(out: Path, samples: Sequence[Sample] = SAMPLES, quiet: bool = False) -> list[Path]:
    """(Re)build every sample under ``out``; folders of other tools (``out/flink``) are left alone."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="sample-data-") as tmp:
        for sample in samples:
            target = out / sample.pipeline
            if target.exists():
                shutil.rmtree(target)
            for backend in sample.backends:
                paths = build_sample(sample, backend, out, Path(tmp))
                written.extend(paths)
                if not quiet:
                    for p in paths:
                        print(f"{p.relative_to(out)}  {_size(p) / 1024:,.0f} KB")
    (out / "README.md").write_text(_readme(), encoding="utf-8")
    return written


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _readme() -> str:
    table = __doc__.split("use it):", 1)[1].split("Reproducible:", 1)[0]
    body = table.strip("\n")
    return (
        "# sample_data\n\n"
        "Small, reproducible snapshots made by the engine for the notebooks and tests. Rebuild with\n"
        "`make sample-data` (`python -m explorer.sample_data sample_data`); do not edit by hand.\n"
        "`flink/` is made by the Flink generator (see `flink/*/EXPECTED.json`) and left alone here.\n\n"
        "```\n" + body.strip("\n") + "\n```\n\n"
        "Reproducible: every input comes from a fixed seed (" + str(SEED) + "), processing time is a manual\n"
        "clock starting 2026-01-01T00:00:00Z (or the pipeline's replay clock), and checkpoints are triggered\n"
        "by input position. Reruns give the same entries, keys and times; only measured durations differ.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.sample_data", description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="sample_data", type=Path, help="where to write (default sample_data)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    build(args.out, quiet=args.quiet)
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

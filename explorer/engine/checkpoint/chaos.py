"""Crash a checkpointed job at many random points and prove recovery is exactly once.

Each trial runs a job that checkpoints often, makes it crash once at a random
point — between records (a scheduler round), while a multi-input subtask is
aligning barriers, while a snapshot is being written, or while a checkpoint's
metadata is being committed — restores it from the newest good checkpoint,
runs it to the end, and compares the committed output with a failure-free run
of the same job: nothing may be lost and nothing duplicated.

    python -m explorer.engine.checkpoint.chaos --trials 1000 --report benchmarks/results/recovery.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..datastream import StreamEnvironment
from ..functions import KeyedProcessFunction
from ..sinks import CollectSink
from ..sources import WatermarkStrategy
from ..state import MapStateDescriptor, ValueStateDescriptor
from .job import CRASH_POINTS, CrashInjector, run_with_recovery


class _Counting(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))
        self.by_mod = ctx.get_state(MapStateDescriptor("by_mod", int, int))

    def process_element(self, value, ctx, out):
        n = self.count.value(0) + 1
        self.count.update(n)
        m = value[1] % 3
        self.by_mod[m] = self.by_mod.get(m, 0) + 1
        if value[1] % 7 == 0:
            ctx.timer_service().register_event_time_timer(value[1] + 20)
        out.collect((ctx.get_current_key(), n))

    def on_timer(self, timestamp, ctx, out):
        out.collect(("timer", ctx.get_current_key(), timestamp))


def _data(n: int) -> list[tuple[str, int]]:
    return [(f"k{(i * 7919) % 41}", i) for i in range(n)]


def _env(data, chk: Path | None, sink: CollectSink, every: int, backend: str, parallelism: int) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, batch_size=37, state_backend=backend)
    if chk is not None:
        env.enable_checkpointing(chk, interval_records=every, retained=2)
    ts = WatermarkStrategy.for_bounded_out_of_orderness(2).with_timestamp_assigner(lambda r: r[1])
    env.from_collection(data, ts, name="src", num_splits=2, parallelism=2).key_by(0).process(
        _Counting(), name="counting").sink_to(sink, name="sink")
    return env


def run_trials(trials: int, records: int = 1500, seed: int = 0, backends=("heap", "rocksdb"),
               progress: bool = True) -> dict[str, Any]:
    rng = random.Random(seed)
    data = _data(records)
    reference_sink = CollectSink("ref")
    _env(data, None, reference_sink, 1, "heap", 2).execute("reference")
    reference = Counter(map(repr, reference_sink.results))
    outcomes = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="state-explorer-chaos-") as tmp:
        for trial in tqdm(range(trials), desc="crash trials", disable=not progress):
            point = rng.choice(CRASH_POINTS)
            after = rng.randint(1, 30 if point == "round" else 4)
            every = rng.choice([150, 300, 500])
            backend = rng.choice(list(backends))
            parallelism = rng.choice([1, 2, 3])
            chk = Path(tmp) / f"t{trial}"
            sink = CollectSink("out")
            result, restarts = run_with_recovery(lambda: _env(data, chk, sink, every, backend, parallelism), "chaos",
                                                 CrashInjector(point, after))
            got = Counter(map(repr, sink.results))
            lost = sum((reference - got).values())
            dup = sum((got - reference).values())
            outcomes.append({"trial": trial, "point": point, "after": after, "interval_records": every,
                             "backend": backend, "parallelism": parallelism, "crashed": restarts > 0,
                             "lost": lost, "duplicated": dup})
            shutil.rmtree(chk, ignore_errors=True)
    crashed = [o for o in outcomes if o["crashed"]]
    by_point = Counter(o["point"] for o in crashed)
    return {
        "trials": trials,
        "crashes_injected": len(crashed),
        "crashes_by_point": dict(by_point),
        "records_per_trial": records,
        "lost_records": sum(o["lost"] for o in outcomes),
        "duplicated_records": sum(o["duplicated"] for o in outcomes),
        "failed_trials": [o for o in outcomes if o["lost"] or o["duplicated"]],
        "seconds": round(time.perf_counter() - t0, 1),
        "seed": seed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Inject crashes into checkpointed jobs and check exactly-once recovery")
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--report", default=None, help="write the report as JSON here")
    args = ap.parse_args(argv)
    report = run_trials(args.trials, args.records, args.seed)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=2))
    print(f"{report['trials']} trials, {report['crashes_injected']} crashes injected {report['crashes_by_point']}: "
          f"{report['lost_records']} records lost, {report['duplicated_records']} duplicated ({report['seconds']} s)")
    return 0 if not report["failed_trials"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

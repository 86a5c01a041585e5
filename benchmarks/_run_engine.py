"""One run of our engine for bench_peers, in its own process so its peak memory is its own.

``python -m benchmarks._run_engine INPUT.csv {count,count_process,sessions} {heap,rocksdb} [--checkpoint-dir DIR]``

Reads the CSV (not timed), moves the loaded records out of the garbage
collector's sight (``gc.freeze()``: a real source holds a batch, not the whole
stream, so full collections walking a million preloaded records would measure
the harness), runs the job at parallelism 1 and prints one JSON line: records,
output records, seconds (wall) and CPU seconds of the job, and the resident
memory after loading the input.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import time
from pathlib import Path

from benchmarks._inputs import read_events, sessions_digest
from explorer.engine import KeyedProcessFunction, StreamEnvironment, ValueStateDescriptor
from explorer.engine.sinks import Sink, SinkWriter

BATCH = 16384


class _Count(SinkWriter):
    def __init__(self, box: list) -> None:
        self.box = box

    def write(self, values, timestamps):
        self.box[0] += len(values)


class CountingSink(Sink):
    """Discards what it gets and counts it."""

    name = "counting"

    def __init__(self) -> None:
        self.box = [0]

    def create_writer(self, subtask_index, parallelism, runtime):
        return _Count(self.box)


class CountFn(KeyedProcessFunction):
    """Keyed count written as user code: a ValueState per key, (key, count) out per record."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))

    def process_element(self, value, ctx, out):
        c = self.count.value(0) + 1
        self.count.update(c)
        out.collect((value[0], c))


def vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("workload", choices=("count", "count_process", "sessions"))
    ap.add_argument("backend", choices=("heap", "rocksdb"))
    ap.add_argument("--checkpoint-dir", type=Path, default=None, help="checkpoint every second into DIR")
    args = ap.parse_args(argv)

    users, ts, kinds = read_events(args.input)
    env = StreamEnvironment(parallelism=1, batch_size=BATCH, state_backend=args.backend)
    if args.checkpoint_dir is not None:
        env.enable_checkpointing(args.checkpoint_dir, interval_ms=1000)
    sink = CountingSink()
    if args.workload == "sessions":
        from explorer.pipelines import sessions, sessions_batch

        records = [sessions.Event(u, t, k, "") for u, t, k in zip(users, ts, kinds)]
        del users, ts, kinds
        sessions_batch.build(env, records)
    else:
        records = list(zip(users, ts))
        del users, ts, kinds
        keyed = env.from_collection(records).key_by(0)
        out = keyed.count(emit_every_record=True) if args.workload == "count" else keyed.process(CountFn(), name="count")
        out.sink_to(sink)
    loaded = vm_hwm_mb()
    # The preloaded input is a benchmark artefact (a real source holds a batch, not the whole
    # stream): moved out of the collector's sight, as the JVM's old generation keeps Flink's input
    # out of its young collections, so full collections do not walk a million input records.
    gc.collect()
    gc.freeze()

    cpu0, t0 = time.process_time(), time.perf_counter()
    result = env.execute(args.workload)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if args.workload == "sessions":
        summaries = result.output("sessions")
        out_records, checksum = len(summaries), sum(s.events for s in summaries)
        digest = sessions_digest([(s.user_id, s.start_ms, s.end_ms, s.events, s.purchases) for s in summaries])
    else:
        out_records, checksum = sink.box[0], sink.box[0]
    report = {"records": len(records), "output_records": out_records, "checksum": checksum,
              "seconds": seconds, "cpu_seconds": cpu, "rss_after_load_mb": round(loaded, 1)}
    if args.workload == "sessions":
        report["output_digest"] = digest
    report["vm_hwm_mb"] = round(vm_hwm_mb(), 1)  # this process's own peak (the new image's, after exec)
    if args.checkpoint_dir is not None:
        report["checkpoints_completed"] = len(getattr(result, "checkpoints", None) or [])
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()

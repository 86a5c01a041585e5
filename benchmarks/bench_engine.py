"""Engine throughput: keyed count and the session pipeline, against a bare Python loop.

The same generated input (Zipf-skewed string keys with planted hot keys) is fed to

* a bare Python loop doing the same work with a dict (the physical limit of
  per-record work in CPython, the peer figure);
* the engine at parallelism 1 (one core): the built-in rolling ``count()``
  (emitting per record, and final-only), a KeyedProcessFunction with a
  ValueState (the per-record path user code takes), on the heap backend, on
  the RocksDB backend, and with checkpoints every second;
* the session pipeline (30-minute inactivity timers) on the engine, against a
  bare loop that sessionises the same events.

Run::

    python -m benchmarks.bench_engine           # 2 M records
    python -m benchmarks.bench_engine --smoke   # 100 k records

Writes ``benchmarks/results/engine.json``. Targets (issue 2): keyed count at
2 M records/s per core or more, within 4x of the bare loop.
"""

from __future__ import annotations

import argparse
import gc
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks._inputs import make_input
from benchmarks._machine import machine, result_path
from explorer.engine import KeyedProcessFunction, StreamEnvironment, ValueStateDescriptor
from explorer.engine.sinks import Sink, SinkWriter


class _Discard(SinkWriter):
    def __init__(self) -> None:
        self.n = 0

    def write(self, values, timestamps):
        self.n += len(values)


class DiscardSink(Sink):
    name = "discard"

    def create_writer(self, subtask_index, parallelism, runtime):
        return _Discard()


class CountFn(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", int))

    def process_element(self, value, ctx, out):
        self.count.update(self.count.value(0) + 1)


def best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bare_count(data):
    d: dict[str, int] = {}
    get = d.get
    for k, _ in data:
        d[k] = get(k, 0) + 1
    return d


def bare_rolling(data):
    d: dict[str, int] = {}
    out = []
    get, app = d.get, out.append
    for k, _ in data:
        c = d[k] = get(k, 0) + 1
        app((k, c))
    return out


def engine_count(data, emit: bool, backend: str = "heap", checkpoint_dir: Path | None = None, batch: int = 16384):
    env = StreamEnvironment(parallelism=1, batch_size=batch, state_backend=backend)
    if checkpoint_dir is not None:
        env.enable_checkpointing(checkpoint_dir, interval_ms=1000)
    s = env.from_collection(data).key_by(0).count(emit_every_record=emit)
    if emit:
        s.sink_to(DiscardSink())
    return env.execute("count")


def engine_process(data, backend: str = "heap"):
    env = StreamEnvironment(parallelism=1, batch_size=16384, state_backend=backend)
    env.from_collection(data).key_by(0).process(CountFn(), name="count")
    return env.execute("count-process")


SESSION_GAP = 30 * 60 * 1000


def bare_sessions(events):
    """Sessionise (user, ts) events in time order with a 30-minute gap, like the pipeline's output count."""
    last: dict[str, int] = {}
    count: dict[str, int] = {}
    closed = 0
    for user, ts in events:
        prev = last.get(user)
        if prev is not None and ts - prev > SESSION_GAP:
            closed += 1
            count[user] = 0
        last[user] = ts
        count[user] = count.get(user, 0) + 1
    return closed + len(last)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--records", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    n = args.records or (100_000 if args.smoke else 2_000_000)
    repeat = args.repeat or (1 if args.smoke else 3)
    data = make_input(n)
    rows: dict[str, Any] = {}

    def rate(seconds: float, records: int = n) -> dict[str, Any]:
        return {"value": round(records / seconds), "unit": "records/s", "seconds": round(seconds, 4)}

    bare = best(lambda: bare_count(data), repeat)
    rows["bare_python_count"] = rate(bare)
    rows["bare_python_rolling_count"] = rate(best(lambda: bare_rolling(data), repeat))
    rows["engine_heap_count_final"] = rate(best(lambda: engine_count(data, emit=False), repeat))
    rows["engine_heap_count_rolling"] = rate(best(lambda: engine_count(data, emit=True), repeat))
    rows["engine_heap_process_valuestate"] = rate(best(lambda: engine_process(data), repeat))
    small = data[: max(1, n // 10)]
    rows["engine_rocksdb_process_valuestate"] = rate(best(lambda: engine_process(small, "rocksdb"), 1), len(small))
    rows["engine_rocksdb_count_final"] = rate(best(lambda: engine_count(small, emit=False, backend="rocksdb"), 1), len(small))
    with tempfile.TemporaryDirectory() as tmp:
        rows["engine_heap_count_final_checkpoint_1s"] = rate(
            best(lambda: engine_count(data, emit=False, checkpoint_dir=Path(tmp) / f"chk-{time.time_ns()}"), 1))

    from explorer.pipelines import PIPELINES

    sessions = PIPELINES["sessions"]
    events = sessions.generate(n // 4, seed=3)
    pairs = sorted(((e.user_id, e.ts) for e in events), key=lambda p: p[1])

    def run_sessions():
        env = sessions.make_env(1, batch_size=16384)
        sessions.build(env, events)
        env.execute("sessions")

    rows["bare_python_sessions"] = rate(best(lambda: bare_sessions(pairs), repeat), len(events))
    rows["engine_heap_sessions"] = rate(best(run_sessions, 1), len(events))

    ratio = rows["bare_python_count"]["value"] / rows["engine_heap_count_final"]["value"]
    result = {
        "benchmark": "engine",
        "records": n,
        "input": "Zipf(1.2) over 100k string keys, 3 planted hot keys with 5% of the traffic",
        "results": rows,
        "peer": {"name": "bare Python dict loop, same input, same process", **rows["bare_python_count"]},
        "ratios": {
            "bare_loop_over_engine_count_final": round(ratio, 2),
            "bare_loop_over_engine_count_rolling": round(rows["bare_python_rolling_count"]["value"]
                                                         / rows["engine_heap_count_rolling"]["value"], 2),
            "bare_loop_over_engine_sessions": round(rows["bare_python_sessions"]["value"]
                                                    / rows["engine_heap_sessions"]["value"], 2),
        },
        "targets": {"engine_count_records_per_s_per_core": 2_000_000, "max_ratio_to_bare_loop": 4},
        "machine": machine(),
    }
    out = Path(args.out) if args.out else result_path("engine")
    out.write_text(json.dumps(result, indent=2))
    for name, r in rows.items():
        print(f"{name:<42} {r['value']:>12,} {r['unit']}")
    print(f"bare loop / engine count: {ratio:.2f}x   -> {out}")
    return result


if __name__ == "__main__":
    main()

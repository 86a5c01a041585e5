"""Bytewax side of bench_peers: the same keyed count and sessions, written with Bytewax's operators.

Runs inside Bytewax's own throwaway venv (``.cache/bench-venvs/bytewax``), so it
imports nothing from this project (standard library and bytewax only)::

    .cache/bench-venvs/bytewax/bin/python benchmarks/_run_bytewax.py INPUT.csv {count,sessions} [--recovery-dir DIR]

* count: ``key_on(user)`` -> ``stateful_map`` keeping the count, (user, count) out per record.
* sessions: ``collect_window`` with a ``SessionWindower(gap=30 min)`` and an
  ``EventClock`` on the event's timestamp waiting 5 s for late events (the
  5 s bounded out-of-orderness of the input), then a summary per session.

The input CSV is read into memory before the flow runs (not timed); the flow
runs single-worker with ``run_main``; ``--recovery-dir`` turns on Bytewax's
recovery snapshots at an epoch interval of one second. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from pathlib import Path

import bytewax.operators as op
from bytewax.dataflow import Dataflow
from bytewax.operators.windowing import EventClock, SessionWindower, collect_window
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import TestingSource, run_main

BATCH = 16384
SESSION_GAP = timedelta(minutes=30)
MAX_OUT_OF_ORDERNESS = timedelta(seconds=5)
COUNTS = {"outputs": [0, 0], "late": [0, 0]}  # items, sum of weights


class _CountingPartition(StatelessSinkPartition):
    def __init__(self, box, weigh):
        self.box, self.weigh = box, weigh

    def write_batch(self, items):
        self.box[0] += len(items)
        self.box[1] += sum(map(self.weigh, items))


class CountingSink(DynamicSink):
    """Discards what it gets; counts items into ``COUNTS[name]`` and adds up ``weigh(item)``."""

    def __init__(self, name="outputs", weigh=lambda item: 1):
        self.name, self.weigh = name, weigh

    def build(self, step_id, worker_index, worker_count):
        return _CountingPartition(COUNTS[self.name], self.weigh)


def count_flow(records) -> Dataflow:
    def add_one(count, _event):
        count = (count or 0) + 1
        return count, count

    flow = Dataflow("count")
    events = op.input("events", flow, TestingSource(records, batch_size=BATCH))
    keyed = op.key_on("key", events, lambda e: e[0])
    counts = op.stateful_map("count", keyed, add_one)
    op.output("out", counts, CountingSink())
    return flow


def sessions_flow(records) -> Dataflow:
    def event_time(e):
        return datetime.fromtimestamp(e[1] / 1000, tz=timezone.utc)

    def summarize(item):
        user, (_window_id, events) = item
        start = min(e[1] for e in events)
        return {"user_id": user, "session_id": f"{user}@{start}", "start_ms": start,
                "end_ms": max(e[1] for e in events), "events": len(events),
                "purchases": sum(1 for e in events if e[2] == "purchase")}

    flow = Dataflow("sessions")
    events = op.input("events", flow, TestingSource(records, batch_size=BATCH))
    keyed = op.key_on("key", events, lambda e: e[0])
    clock = EventClock(event_time, wait_for_system_duration=MAX_OUT_OF_ORDERNESS)
    windows = collect_window("sessions", keyed, clock, SessionWindower(gap=SESSION_GAP))
    summaries = op.map("summarize", windows.down, summarize)
    op.output("out", summaries, CountingSink("outputs", lambda s: s["events"]))
    op.output("late", windows.late, CountingSink("late"))
    return flow


def vm_hwm_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return -1.0


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("workload", choices=("count", "sessions"))
    ap.add_argument("--recovery-dir", type=Path, default=None)
    args = ap.parse_args(argv)

    with open(args.input, newline="") as f:
        r = csv.reader(f)
        next(r)
        records = [(u, int(t), k) for u, t, k in r]
    loaded = vm_hwm_mb()
    flow = count_flow(records) if args.workload == "count" else sessions_flow(records)
    options = {}
    if args.recovery_dir is not None:
        from bytewax.recovery import RecoveryConfig, init_db_dir

        args.recovery_dir.mkdir(parents=True, exist_ok=True)
        init_db_dir(args.recovery_dir, 1)
        options = {"epoch_interval": timedelta(seconds=1), "recovery_config": RecoveryConfig(str(args.recovery_dir))}

    cpu0, t0 = time.process_time(), time.perf_counter()
    run_main(flow, **options)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    report = {"records": len(records), "output_records": COUNTS["outputs"][0], "checksum": COUNTS["outputs"][1],
              "late_records": COUNTS["late"][0], "vm_hwm_mb": round(vm_hwm_mb(), 1),
              "seconds": seconds, "cpu_seconds": cpu, "rss_after_load_mb": round(loaded, 1),
              "bytewax_version": version("bytewax"), "python": sys.version.split()[0]}
    print(json.dumps(report), flush=True)
    return report


if __name__ == "__main__":
    main()

"""Bytewax side of bench_peers: the same keyed count and sessions, written with Bytewax's operators.

Runs inside Bytewax's own throwaway venv (``.cache/bench-venvs/bytewax``), so it
imports nothing from this project (standard library and bytewax only)::

    .cache/bench-venvs/bytewax/bin/python benchmarks/_run_bytewax.py INPUT.csv {count,sessions} [--recovery-dir DIR]

* count: ``key_on(user)`` -> ``stateful_map`` keeping the count, (user, count) out per record.
* sessions: ``fold_window`` with a ``SessionWindower(gap=30 min)`` keeping a
  running summary (start, end, events, purchases) per session, and an
  ``EventClock`` on the event's timestamp waiting 5 s for late events (the
  5 s bounded out-of-orderness of the input) whose ``to_system_utc`` returns
  None: a session closes on the key's next event past the gap or at EOF.
  Bytewax's clocks are per key, so this is its event-time model; the default
  (wake up at the close time read as a system time) wakes every key with an
  open session on every activation when replaying past events (see
  ``_no_wake_up``). ``--collect`` keeps every event (``collect_window``) instead.

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
from bytewax.operators.windowing import EventClock, SessionWindower, collect_window, fold_window
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


def _no_wake_up(_close_time):
    """EventClock's ``to_system_utc``: never wake up on the system clock to close a window.

    The default passes the window's close time (event time) through as the
    system time to wake the key at. Replaying recorded events, that time is
    months in the past, so Bytewax wakes every key holding an open session on
    every activation (and snapshots it): the run grows quadratically with the
    number of open keys (1 M records did not finish in 10 min). Returning
    None is Bytewax's documented way to close windows only on new items for the
    key or at EOF, which is what a replay of recorded events needs.
    """
    return None


def session_new():
    return None


def session_fold(acc, e):
    """Running summary (start, end, events, purchases): no per-session list of events to keep or copy."""
    ts, purchase = e[1], e[2] == "purchase"
    if acc is None:
        return (ts, ts, 1, int(purchase))
    start, end, n, p = acc
    return (ts if ts < start else start, ts if ts > end else end, n + 1, p + purchase)


def session_merge(a, b):
    if a is None or b is None:
        return a if b is None else b
    return (min(a[0], b[0]), max(a[1], b[1]), a[2] + b[2], a[3] + b[3])


def sessions_flow(records, collect: bool = False) -> Dataflow:
    """Per user, session windows of 30 min inactivity on the event's timestamp, a summary per session.

    ``fold_window`` keeps a running summary per session (what a Bytewax user
    writes for an aggregate); ``collect=True`` uses ``collect_window`` (every
    event of the session kept, summarized at close) instead.
    """
    def event_time(e):
        return datetime.fromtimestamp(e[1] / 1000, tz=timezone.utc)

    def summarize(item):
        user, (_window_id, acc) = item
        if collect:
            events = acc
            acc = (min(e[1] for e in events), max(e[1] for e in events), len(events),
                   sum(1 for e in events if e[2] == "purchase"))
        start, end, n, purchases = acc
        return {"user_id": user, "session_id": f"{user}@{start}", "start_ms": start,
                "end_ms": end, "events": n, "purchases": purchases}

    flow = Dataflow("sessions")
    events = op.input("events", flow, TestingSource(records, batch_size=BATCH))
    keyed = op.key_on("key", events, lambda e: e[0])
    clock = EventClock(event_time, wait_for_system_duration=MAX_OUT_OF_ORDERNESS, to_system_utc=_no_wake_up)
    windower = SessionWindower(gap=SESSION_GAP)
    if collect:
        windows = collect_window("sessions", keyed, clock, windower)
    else:
        windows = fold_window("sessions", keyed, clock, windower, session_new, session_fold, session_merge)
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
    ap.add_argument("--collect", action="store_true", help="sessions with collect_window instead of fold_window")
    args = ap.parse_args(argv)

    with open(args.input, newline="") as f:
        r = csv.reader(f)
        next(r)
        records = [(u, int(t), k) for u, t, k in r]
    loaded = vm_hwm_mb()
    flow = count_flow(records) if args.workload == "count" else sessions_flow(records, collect=args.collect)
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

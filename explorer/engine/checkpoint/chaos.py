"""Crash a checkpointed job at many random points and prove recovery is exactly once.

Each trial runs a job that checkpoints often, makes it crash once at a random
point — between records (a scheduler round), while a multi-input subtask is
aligning barriers, while a snapshot is being written, or while a checkpoint's
metadata is being committed — restores it from the newest good checkpoint,
runs it to the end, and compares the committed output with a failure-free run
of the same job: nothing may be lost and nothing duplicated.

A share of the trials (``--savepoint-share``, variant ``savepoint``) first
runs the job part-way on a random backend (heap or RocksDB) and parallelism
and stops it with a savepoint (the canonical format), then restores that
savepoint into the RocksDB backend, at a random parallelism (rescaling moves
key groups), taking full or incremental checkpoints, and crashes it: a crash
before its first checkpoint completes restores the savepoint into RocksDB
again, a later one a checkpoint of the restored job. Those trials draw their
own parameters from a second generator, so the ``checkpoint`` trials of a
seed are the same with or without them.

    python -m explorer.engine.checkpoint.chaos --trials 1000 --report benchmarks/results/recovery.json

``--kill`` runs *process-kill* trials instead (``make chaos-kill``): the job runs in a child
process (forked from a server that has imported everything, so the job starts at once) writing a transactional :class:`~explorer.engine.sinks.FileSink`, and the child is
killed with ``SIGKILL`` — at a random moment of the job (which lands in record processing,
Parquet and SST writes, renames and fsyncs alike), exactly at the k-th ``os.fsync`` or
``os.replace`` (the child kills itself there: mid-fsync, mid-rename of ``_metadata`` or of a
sink's part file), or after the input ended (``end``: at the k-th rename of the last
checkpoint's and the sink's final commits, or after all of them, just before the process
exits). A second child recovers from the newest checkpoint that restores (or the savepoint
the trial started from) and runs to the end; the committed output on disk is compared with
a failure-free run. Heap and RocksDB, full and incremental checkpoints, and starts from a
canonical savepoint (at another parallelism) are all drawn.

    python -m explorer.engine.checkpoint.chaos --kill --trials 1000 --report benchmarks/results/recovery-kill.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import multiprocessing
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from tqdm.auto import tqdm

from ..datastream import StreamEnvironment
from ..functions import KeyedProcessFunction
from ...errors import SnapshotError
from ..sinks import CollectSink, FileSink
from ..sources import WatermarkStrategy
from ..state import MapStateDescriptor, ValueStateDescriptor
from .job import CRASH_POINTS, CrashInjector, JobClient, run_with_recovery
from .storage import CheckpointStorage


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


VARIANTS = ("checkpoint", "savepoint")


def _env(data, chk: Path | None, sink: CollectSink, every: int, backend: str, parallelism: int,
         incremental: bool = False, asynchronous: bool = True) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=parallelism, batch_size=37, state_backend=backend)
    if chk is not None:
        env.enable_checkpointing(chk, interval_records=every, retained=2, incremental=incremental,
                                 asynchronous=asynchronous)
    ts = WatermarkStrategy.for_bounded_out_of_orderness(2).with_timestamp_assigner(lambda r: r[1])
    env.from_collection(data, ts, name="src", num_splits=2, parallelism=2).key_by(0).process(
        _Counting(), name="counting").sink_to(sink, name="sink")
    return env


#: where a kill trial's SIGKILL lands: a random moment, the k-th fsync or rename of the child, or
#: ``end``: the k-th rename after the job's input ended (the last checkpoint's commit, the sink's
#: final commit), or, when there are fewer, after the job closed and before the process exits
KILL_POINTS = ("random", "fsync", "rename", "end")

#: how many renames after the end of input an ``end`` trial draws from (more than any job here makes,
#: so that some trials are killed after all of them, just before the process exits)
END_RENAMES = 8
#: the k of an fsync or rename kill is drawn from 1..this: a 1,500-record job here makes 2-6 fsyncs
#: and 3-26 renames (counted over its configurations; 1..40 left 86 % and 70 % of them unkilled)
KILL_AT_MOST = {"fsync": 5, "rename": 14}


def _kill_self_at(op: str, k: int, armed: Callable[[], bool] | None = None) -> None:
    """Make the k-th call of ``os.fsync`` / ``os.replace`` in this process SIGKILL it instead
    (counting only calls made while ``armed()`` is true, when given)."""
    name = {"fsync": "fsync", "rename": "replace"}[op]
    real = getattr(os, name)
    calls = [0]

    def hook(*args, **kwargs):
        if armed is None or armed():
            calls[0] += 1
            if calls[0] >= k:
                os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(os, name, hook)


def _kill_child(spec: dict[str, Any], ready: Callable[[], None] | None = None) -> int:
    """One run of a kill trial's job in this (child) process: restore the newest checkpoint that
    restores, else the trial's savepoint, else start afresh; run to the end of the input.

    Calls ``ready()`` first, so that a random kill's delay counts from the start of the job."""
    if ready is not None:
        ready()
    running: list[JobClient] = []
    if spec.get("point") in ("fsync", "rename") and spec.get("k"):
        _kill_self_at(spec["point"], spec["k"])
    elif spec.get("point") == "end" and spec.get("k"):
        _kill_self_at("rename", spec["k"], armed=lambda: bool(running) and running[0].finished)
    data = _data(spec["records"])
    root = Path(spec["dir"])
    chk, out = root / "chk", root / "out"

    def make() -> StreamEnvironment:
        env = StreamEnvironment(parallelism=spec["parallelism"], batch_size=37, state_backend=spec["backend"])
        env.enable_checkpointing(chk, interval_records=spec["every"], retained=2, incremental=spec["incremental"],
                                 asynchronous=spec["asynchronous"])
        ts = WatermarkStrategy.for_bounded_out_of_orderness(2).with_timestamp_assigner(lambda r: r[1])
        env.from_collection(data, ts, name="src", num_splits=2, parallelism=2).key_by(0).process(
            _Counting(), name="counting").sink_to(FileSink(out), name="sink")
        return env

    env = make()
    client = None
    storage = CheckpointStorage(chk)
    storage.clean_incomplete()
    for cid in reversed(storage.completed_ids()):
        try:
            client = JobClient(env, "chaos-kill", restore_from=storage.folder_for(cid))
            break
        except SnapshotError:
            env = make()
    if client is None:
        # nothing of this run completed: what it staged can never commit (Flink aborts such transactions)
        shutil.rmtree(out / "_pending", ignore_errors=True)
        client = JobClient(env, "chaos-kill", restore_from=spec.get("savepoint"))
    running.append(client)
    client.run()
    client.close()
    if spec.get("point") == "end" and spec.get("k"):
        # fewer renames after the end than k: the job is done, its output committed; die before exiting
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


def _fork_context():
    """Children forked from a server process that has imported the engine and run nothing (a fresh
    interpreter spends longer importing than the job runs; forking this process, which has run jobs
    and may hold threads and their locks, could deadlock the child)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__ if __name__ != "__main__" else "explorer.engine.checkpoint.chaos"])
    return ctx


class _Forked:
    """A run of a kill trial's job in a child process started by :func:`_fork_context`."""

    def __init__(self, spec: dict[str, Any]) -> None:
        ctx = _fork_context()
        self._conn, w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_forked_main, args=(spec, w), name="chaos-kill-child")
        self.proc.start()
        w.close()

    def await_ready(self, timeout: float = 120.0) -> None:
        """Wait until the child is about to start the job (or has died)."""
        if self._conn.poll(timeout):
            try:
                self._conn.recv()
            except EOFError:
                pass

    def wait(self, timeout: float | None) -> int | None:
        self.proc.join(timeout)
        return self.proc.exitcode

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()

    def error(self) -> str:
        """What the child reported going wrong, if anything."""
        out = []
        try:
            while self._conn.poll(0):
                out.append(self._conn.recv())
        except EOFError:
            pass
        self._conn.close()
        return "".join(m for m in out if m != "ready")[-2000:]


def _forked_main(spec: dict[str, Any], conn) -> None:
    try:
        _kill_child(spec, ready=lambda: conn.send("ready"))
    except BaseException:  # noqa: BLE001 - reported to the parent, which counts the trial as failed
        conn.send(traceback.format_exc())
        conn.close()
        os._exit(1)
    conn.close()


def run_kill_trial(root: Path, spec: dict[str, Any], reference: Counter, first: list[Any] | None = None,
                   delay: float | None = None) -> dict[str, Any]:
    """One kill trial in ``root``: run the job of ``spec`` in a child, SIGKILL it ``delay`` seconds
    after it started (or let it kill itself at ``spec["point"]``), recover in a second child unless
    the first finished, and count the committed records lost and duplicated against ``reference``
    (``first``: what a savepoint the trial started from accounts for)."""
    first = first or []
    child = _Forked({**spec, "dir": str(root)})
    child.await_ready()
    if child.wait(delay if delay is not None else 300) is None:
        child.kill()
    code = child.proc.exitcode
    killed = code == -signal.SIGKILL
    errors = []
    if code not in (0, -signal.SIGKILL):
        errors.append(f"exit {code}: {child.error()}")
    else:
        child.error()
    finished_first = code == 0
    if not finished_first:  # recovery, not killed (a job that finished is not restarted)
        rec = _Forked({**spec, "dir": str(root), "point": None, "k": None})
        if rec.wait(600) is None:
            rec.kill()
        if rec.proc.exitcode != 0:
            errors.append(f"recovery exit {rec.proc.exitcode}: {rec.error()}")
        else:
            rec.error()
    got = _as_stored(first) + Counter(json.dumps(v) for v in FileSink(root / "out").read_all())
    outcome = {k: v for k, v in spec.items() if k not in ("dir", "records")}
    outcome.update({"killed": killed, "finished_first": finished_first,
                    "delay_s": None if delay is None else round(delay, 3), "errors": errors,
                    "lost": sum((reference - got).values()), "duplicated": sum((got - reference).values())})
    return outcome


def _as_stored(values: list[Any]) -> Counter:
    """Records as the file sink stores them (JSON lines), counted."""
    return Counter(json.dumps(v) for v in json.loads(json.dumps(values)))


def kill_reference(records: int) -> Counter:
    """The failure-free run's output, as stored."""
    sink = CollectSink("ref")
    _env(_data(records), None, sink, 1, "heap", 2).execute("reference")
    return _as_stored(sink.results)


def run_kill_trials(trials: int, records: int = 1500, seed: int = 0, progress: bool = True,
                    savepoint_share: float = 0.25, max_wait_s: float = 1.5, max_seconds: float | None = None,
                    checkpoint: Callable[[dict[str, Any]], None] | None = None,
                    kills: int | None = None) -> dict[str, Any]:
    """SIGKILL trials (see the module doc); returns the report. Stops after ``max_seconds`` (the
    report counts the trials run), or once ``kills`` trials were really killed (a trial whose job
    ended before its kill point still checks its output, but is not a kill); ``checkpoint(report)``
    gets the report so far every 20 trials."""
    rng = random.Random(f"kill-{seed}")
    data = _data(records)
    reference = kill_reference(records)
    outcomes: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="state-explorer-chaos-kill-") as tmp:
        for trial in tqdm(range(trials), desc="kill trials", disable=not progress):
            if max_seconds is not None and time.perf_counter() - t0 > max_seconds:
                break
            if kills is not None and sum(1 for o in outcomes if o["killed"]) >= kills:
                break
            if checkpoint is not None and trial and trial % 20 == 0:
                checkpoint(_kill_report(outcomes, records, seed, t0))
            root = Path(tmp) / f"t{trial}"
            root.mkdir()
            backend = rng.choice(["heap", "rocksdb"])
            point = rng.choice(KILL_POINTS)
            spec: dict[str, Any] = {
                "records": records, "every": rng.choice([150, 300, 500]), "backend": backend,
                "parallelism": rng.choice([1, 2, 3]), "incremental": backend == "rocksdb" and rng.random() < 0.5,
                "asynchronous": rng.random() < 0.7, "point": point,
                "k": (rng.randint(1, END_RENAMES) if point == "end" else rng.randint(1, KILL_AT_MOST[point])
                      if point != "random" else None),
                "savepoint": None,
            }
            first: list[Any] = []
            if rng.random() < savepoint_share:
                cut = rng.randint(records // 10, records * 9 // 10)
                writer_backend, writer_p = rng.choice(["heap", "rocksdb"]), rng.choice([1, 2, 3])
                spec["savepoint"] = str(root / "savepoint")
                first = _stop_with_savepoint(data, root / "savepoint", writer_backend, writer_p, cut)
                spec.update({"savepoint_backend": writer_backend, "savepoint_parallelism": writer_p, "cut": cut})
            delay = rng.uniform(0.0, max_wait_s) if point == "random" else None
            outcome = run_kill_trial(root, spec, reference, first, delay)
            outcome["trial"] = trial
            outcomes.append(outcome)
            shutil.rmtree(root, ignore_errors=True)
    return _kill_report(outcomes, records, seed, t0)


def _kill_report(outcomes: list[dict[str, Any]], records: int, seed: int, t0: float) -> dict[str, Any]:
    killed = [o for o in outcomes if o["killed"]]
    return {
        "trials": len(outcomes),
        "kills": len(killed),
        "kills_by_point": dict(Counter(o["point"] for o in killed)),
        # a trial not killed: its job ended before the delay, or made fewer fsyncs/renames than k
        "trials_by_point": dict(Counter(o["point"] for o in outcomes)),
        "kills_after_end_of_input": sum(1 for o in killed if o["point"] == "end"),
        "kills_by_backend": dict(Counter(f"{o['backend']}{' incremental' if o['incremental'] else ''}" for o in killed)),
        "kills_after_savepoint_restore": sum(1 for o in killed if o["savepoint"]),
        "records_per_trial": records,
        "lost_records": sum(o["lost"] for o in outcomes),
        "duplicated_records": sum(o["duplicated"] for o in outcomes),
        "trials_with_errors": [o for o in outcomes if o["errors"]][:20],
        "failed_trials": [o for o in outcomes if o["lost"] or o["duplicated"] or o["errors"]],
        "seconds": round(time.perf_counter() - t0, 1),
        "seed": seed,
    }


def _stop_with_savepoint(data, target: Path, backend: str, parallelism: int, cut: int) -> list[Any]:
    """Run the job until its sources have read ``cut`` records, stop it with a savepoint into
    ``target``; return what it output (exactly what the savepoint accounts for)."""
    sink = CollectSink("first")
    client = _env(data, None, sink, 1, backend, parallelism).execute_async("chaos")
    client.run(until=lambda rt: sum(s.operator.records_in for s in rt.subtasks if s.is_source) >= cut)
    client.stop_with_savepoint(target)
    return list(sink.results)


def run_trials(trials: int, records: int = 1500, seed: int = 0, backends=("heap", "rocksdb"),
               progress: bool = True, variants=VARIANTS, savepoint_share: float = 0.25) -> dict[str, Any]:
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        raise ValueError(f"unknown variants {unknown or list(variants)}; expected some of {VARIANTS}")
    rng = random.Random(seed)
    vrng = random.Random(f"savepoint-{seed}")  # the savepoint variant's own draws
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
            if "checkpoint" not in variants:
                variant = "savepoint"
            elif "savepoint" not in variants:
                variant = "checkpoint"
            else:
                variant = "savepoint" if vrng.random() < savepoint_share else "checkpoint"
            chk = Path(tmp) / f"t{trial}"
            sink = CollectSink("out")
            outcome: dict[str, Any] = {"trial": trial, "variant": variant, "point": point, "after": after,
                                       "interval_records": every, "parallelism": parallelism}
            first: list[Any] = []
            start = None
            incremental = False
            asynchronous = True
            if variant == "savepoint":
                writer_backend = vrng.choice(["heap", "rocksdb"])
                writer_parallelism = vrng.choice([1, 2, 3])
                cut = vrng.randint(records // 10, records * 9 // 10)
                incremental = vrng.random() < 0.5
                # synchronous snapshots complete at once, so more crashes come after a checkpoint of the
                # restored job (asynchronous RocksDB writes often outlast this short job's remaining rounds)
                asynchronous = vrng.random() < 0.5
                backend = "rocksdb"  # the savepoint is restored into RocksDB
                if point == "round":  # the restored job runs 20-120 rounds: crash anywhere in them
                    after = vrng.randint(1, 80)
                    outcome["after"] = after
                start = chk / "savepoint"
                first = _stop_with_savepoint(data, start, writer_backend, writer_parallelism, cut)
                outcome.update({"savepoint_backend": writer_backend, "savepoint_parallelism": writer_parallelism,
                                "savepoint_after_records": cut, "incremental": incremental,
                                "asynchronous": asynchronous})
            result, restarts = run_with_recovery(
                lambda: _env(data, chk / "chk", sink, every, backend, parallelism, incremental, asynchronous), "chaos",
                CrashInjector(point, after), restore_from=start)
            got = Counter(map(repr, first + sink.results))
            restored = getattr(result.runtime, "restored_meta", None)
            outcome.update({"backend": backend, "crashed": restarts > 0,
                            # what the last start restored: the savepoint again, a checkpoint, or nothing
                            "final_restore": None if restored is None else restored.get("kind"),
                            "lost": sum((reference - got).values()), "duplicated": sum((got - reference).values())})
            outcomes.append(outcome)
            shutil.rmtree(chk, ignore_errors=True)
    crashed = [o for o in outcomes if o["crashed"]]
    by_point = Counter(o["point"] for o in crashed)
    sp = [o for o in outcomes if o["variant"] == "savepoint"]
    sp_crashed = [o for o in sp if o["crashed"]]
    return {
        "trials": trials,
        "crashes_injected": len(crashed),
        "crashes_by_point": dict(by_point),
        "records_per_trial": records,
        "lost_records": sum(o["lost"] for o in outcomes),
        "duplicated_records": sum(o["duplicated"] for o in outcomes),
        "failed_trials": [o for o in outcomes if o["lost"] or o["duplicated"]],
        "savepoint_trials": {
            "trials": len(sp),
            "written_by": dict(Counter(f"{o['savepoint_backend']} p={o['savepoint_parallelism']}" for o in sp)),
            "restored_at_other_parallelism": sum(o["savepoint_parallelism"] != o["parallelism"] for o in sp),
            "incremental_checkpoints": sum(o["incremental"] for o in sp),
            "crashes_injected": len(sp_crashed),
            "crashes_by_point": dict(Counter(o["point"] for o in sp_crashed)),
            # a crash before the restored job's first checkpoint: the savepoint is restored into RocksDB again
            "recovered_from_savepoint": sum(o["final_restore"] == "savepoint" for o in sp_crashed),
            "recovered_from_checkpoint": sum(o["final_restore"] == "checkpoint" for o in sp_crashed),
            "lost_records": sum(o["lost"] for o in sp),
            "duplicated_records": sum(o["duplicated"] for o in sp),
        },
        "variants": list(variants),
        "savepoint_share": savepoint_share,
        "seconds": round(time.perf_counter() - t0, 1),
        "seed": seed,
    }


def _load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Inject crashes into checkpointed jobs and check exactly-once recovery")
    ap.add_argument("--trials", type=int, default=1000, help="at most this many trials")
    ap.add_argument("--kills", type=int, default=None,
                    help="with --kill: stop once this many trials were really killed (not every trial's job "
                         "reaches its kill point)")
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variants", default=",".join(VARIANTS),
                    help="comma-separated trial kinds: checkpoint (crash a job, restore its checkpoint), "
                         "savepoint (restore a canonical savepoint into RocksDB, then crash it)")
    ap.add_argument("--savepoint-share", type=float, default=0.25,
                    help="the share of trials that are savepoint trials when both variants run")
    ap.add_argument("--report", default=None, help="write the report as JSON here")
    ap.add_argument("--kill", action="store_true", help="SIGKILL trials: the job in a child process, killed")
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="with --kill: stop after this long (the report counts the trials run; it is rewritten every 20)")
    ap.add_argument("--merge", nargs="+", default=None, metavar="REPORT",
                    help="with --kill: merge these kill reports (runs of other seeds) into --report instead of running")
    args = ap.parse_args(argv)
    if args.kill:
        return _main_kill(args, argv)
    variants = tuple(v.strip() for v in args.variants.split(",") if v.strip())
    if not set(variants) <= set(VARIANTS) or not variants:
        ap.error(f"--variants: expected some of {', '.join(VARIANTS)}, found {args.variants!r}")
    if not 0 <= args.savepoint_share <= 1:
        ap.error(f"--savepoint-share: expected a number from 0 to 1, found {args.savepoint_share}")
    load_before = _load_average()
    report = run_trials(args.trials, args.records, args.seed, variants=variants, savepoint_share=args.savepoint_share)
    if args.report:
        sp = report["savepoint_trials"]
        report["command"] = "python -m explorer.engine.checkpoint.chaos " + " ".join(sys.argv[1:] if argv is None else argv)
        report["machine"] = {"platform": platform.platform(), "python": platform.python_version(),
                             "processor": platform.machine(), "cpus": os.cpu_count(),
                             "load_average": load_before, "load_average_at_end": _load_average(),
                             "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        report["results"] = {
            "lost_records": {"value": report["lost_records"], "unit": "records"},
            "duplicated_records": {"value": report["duplicated_records"], "unit": "records"},
            "crashes_injected": {"value": report["crashes_injected"], "unit": "crashes"},
            "savepoint_into_rocksdb_crashes": {"value": sp["crashes_injected"], "unit": "crashes"},
        }
        report["peer"] = {"name": "failure-free run of the same job", "lost_records": 0, "duplicated_records": 0}
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(json.dumps(report, indent=2))
    print(f"{report['trials']} trials, {report['crashes_injected']} crashes injected {report['crashes_by_point']}: "
          f"{report['lost_records']} records lost, {report['duplicated_records']} duplicated ({report['seconds']} s)")
    sp = report["savepoint_trials"]
    if sp["trials"]:
        print(f"  of which {sp['trials']} restored a canonical savepoint into RocksDB "
              f"({sp['restored_at_other_parallelism']} rescaled, {sp['incremental_checkpoints']} with incremental "
              f"checkpoints): {sp['crashes_injected']} crashes, {sp['recovered_from_savepoint']} recovered from the "
              f"savepoint again, {sp['recovered_from_checkpoint']} from a checkpoint; {sp['lost_records']} lost, "
              f"{sp['duplicated_records']} duplicated")
    return 0 if not report["failed_trials"] else 1


def merge_kill_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several kill runs (other seeds, run side by side): counts added."""
    out: dict[str, Any] = {"trials": 0, "kills": 0, "kills_by_point": Counter(), "trials_by_point": Counter(),
                           "kills_after_end_of_input": 0, "kills_by_backend": Counter(),
                           "kills_after_savepoint_restore": 0, "lost_records": 0, "duplicated_records": 0,
                           "trials_with_errors": [], "failed_trials": [], "seconds": 0.0}
    for r in reports:
        for k in ("trials", "kills", "kills_after_end_of_input", "kills_after_savepoint_restore", "lost_records",
                  "duplicated_records"):
            out[k] += r.get(k, 0)
        for k in ("kills_by_point", "trials_by_point", "kills_by_backend"):
            out[k].update(r.get(k, {}))
        out["trials_with_errors"] += r["trials_with_errors"]
        out["failed_trials"] += r["failed_trials"]
        out["seconds"] = max(out["seconds"], r["seconds"])  # the runs ran side by side
    for k in ("kills_by_point", "trials_by_point", "kills_by_backend"):
        out[k] = dict(out[k])
    out["records_per_trial"] = reports[0]["records_per_trial"]
    out["runs"] = [{k: r.get(k) for k in ("command", "seed", "trials", "kills", "lost_records", "duplicated_records",
                                          "seconds", "machine")} for r in reports]
    return out


def _main_kill(args, argv) -> int:
    if args.merge:
        report = merge_kill_reports([json.loads(Path(r).read_text()) for r in args.merge])
        report["command"] = "python -m explorer.engine.checkpoint.chaos " + " ".join(sys.argv[1:] if argv is None else argv)
        if args.report:
            Path(args.report).write_text(json.dumps(report, indent=2))
        print(f"{report['trials']} kill trials, {report['kills']} SIGKILLs {report['kills_by_point']}: "
              f"{report['lost_records']} records lost, {report['duplicated_records']} duplicated")
        return 0 if not report["failed_trials"] else 1
    load_before = _load_average()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")

    def write(report: dict[str, Any]) -> None:
        report["command"] = "python -m explorer.engine.checkpoint.chaos " + " ".join(sys.argv[1:] if argv is None else argv)
        report["machine"] = {"platform": platform.platform(), "python": platform.python_version(),
                             "processor": platform.machine(), "cpus": os.cpu_count(),
                             "load_average": load_before, "load_average_at_end": _load_average(), "date": started}
        if args.report:
            Path(args.report).parent.mkdir(parents=True, exist_ok=True)
            Path(args.report).write_text(json.dumps(report, indent=2))

    report = run_kill_trials(args.trials, args.records, args.seed, savepoint_share=args.savepoint_share,
                             max_seconds=args.max_seconds, checkpoint=write, kills=args.kills)
    write(report)
    print(f"{report['trials']} kill trials, {report['kills']} SIGKILLs {report['kills_by_point']}: "
          f"{report['lost_records']} records lost, {report['duplicated_records']} duplicated, "
          f"{len(report['trials_with_errors'])} trials with errors ({report['seconds']} s)")
    return 0 if not report["failed_trials"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

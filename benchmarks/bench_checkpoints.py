"""Checkpoint duration and size, full vs incremental, on the RocksDB backend; recovery time; disk bandwidth.

For each state size (10 MB, 100 MB, 1 GB; ``--smoke``: 1 MB, 10 MB) one job
runs at parallelism 1 with the RocksDB backend: a keyed operator with one
``ValueState[bytes]`` of ``--value-bytes`` random bytes per key (random, so
RocksDB's compression cannot shrink it and "1 GB of state" means 1 GB of SST
files). The state is loaded through the backend's own write batches
(``StateTable.load_rows``), not record by record through the job, and then
compacted once by hand (``RocksDBStateBackend.compact``), so the LSM tree
has the settled shape of a long-running job instead of a bulk load's pending
compactions. Then, for ``--rounds`` rounds, 1 % of the keys get new values
(again through ``load_rows``) and the job's real coordinator takes checkpoints
(``JobClient.trigger_checkpoint``: barriers, capture, async write, metadata):
an incremental one every round, a full one in the first and the last round
(its cost does not depend on the churn), of both full kinds:

* **full**: ``JobClient.trigger_checkpoint(full=True)`` with ``incremental=True``
  (Flink's ``CheckpointType.FULL``): flush + RocksDB checkpoint (hard links)
  synchronously, then every SST file copied (and hashed) into the checkpoint's
  own folder by a few threads, nothing shared or reused;
* **full canonical**: ``CheckpointConfig(incremental=False)``: the canonical
  Parquet of every entry (the savepoint format), measured beside it;
* **incremental**: ``incremental=True``: flush + RocksDB checkpoint (hard links)
  synchronously, then only the SST files not uploaded before are copied to ``shared/``.

All run in the same job on the same state; the only things changed between
them are the coordinator's frozen config (``dataclasses.replace(..., incremental=...)``),
which it reads at every trigger, and the trigger's ``full`` flag. Since that job starts out
incremental, it loads the numba kernels of canonical snapshots when it opens and waits for them,
as a job configured for canonical checkpoints does in the background (``engine_warm_up``);
otherwise the first canonical checkpoint of the process would time numba's one-off set-up. The first checkpoint of the job is an
incremental one that uploads everything (reported as ``incremental_first``).
An incremental checkpoint uploads the flushed churn plus whatever RocksDB's
own compactions rewrote since the last one (every few flushes a compaction
rewrites a level), so its cost varies by round: the median, the mean and
every round are reported.

Measured per checkpoint: wall-clock duration of ``trigger_checkpoint`` (trigger
to ``_metadata`` renamed), the process's CPU seconds over it (``cpu``: every
thread's, the figure other processes' load does not inflate), the sync and async phases summed over subtasks from
the checkpoint's own metadata, its total size (every file it names, shared ones
included) and the bytes it actually wrote. Recovery: a new job restoring the
last full, full canonical and incremental checkpoint (``JobClient(restore_from=...)``:
checksum verification of every file (a native checkpoint's SST files hashed beside the load), restore, the job opening and
registering its state), plus the verification alone; each also again as the first thing a new
Python process does (``restore_fresh_process``: what a restarted job meets, numba's one-off set-up
included; the process's start and imports reported apart). Disk: sequential write of
``--disk-mb`` in 4 MiB blocks, with and without fsync, best of 3 (the physical limit of
any checkpoint; without fsync it is the page cache, which is what checkpoint
writes here hit too: no data file is fsynced, only ``_metadata``).

Apache Flink beside it (``--flink``, on by default except in ``--smoke``):
``benchmarks/flink/CheckpointBench.java`` (compiled like bench_peers' job,
against the jars of the apache-flink-libraries wheel) runs the same experiment
on a MiniCluster with the embedded RocksDB backend: the same keys, 1,000-byte
random values, 1 % churn per round, checkpoints triggered by hand once the
operator has processed every record sent. Two jobs per size:

* ``incremental=true``: an INCREMENTAL checkpoint per round (only new SST
  files) and a FULL one (``CheckpointType.FULL``: every SST file) in the first
  and the last round;
* ``incremental=false`` (Flink's default for RocksDB): every checkpoint
  iterates the database and writes every entry - the counterpart of our full
  (canonical) checkpoint.

Flink's figures are its own checkpoint statistics (end-to-end duration,
checkpointed size) and the bytes that appeared in the checkpoint folder; its
recovery is a new job from the last checkpoint, timed from submission to the
keyed operator's ``open()`` (state restored; task deployment included, so the
same span of a job without state is reported beside it), with 1,000 keys read
back. The state is loaded record by record through the job (Flink has no bulk
load); RocksDB's compactions after that load are left to RocksDB.

Run::

    python -m benchmarks.bench_checkpoints            # 10 MB, 100 MB, 1 GB, ours and Flink's (minutes, ~8 GB of disk)
    python -m benchmarks.bench_checkpoints --smoke    # 1 MB, 10 MB, ours only
    python -m benchmarks.bench_checkpoints --no-flink # ours only
    python -m benchmarks.bench_checkpoints --sizes 1000 --busy --out benchmarks/results/checkpoints_busy.json
                                                      # the same with one core kept busy (a shell loop at nice 0)

Writes ``benchmarks/results/checkpoints.json`` (``--out``). Targets: every row
at or better than Flink's in the same run; an incremental checkpoint at 1 GB
with 1 % churn at least 20x faster than a canonical full one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gc
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # pragma: no cover - run as a script
    sys.path.insert(0, str(ROOT))

from explorer.engine import KeyedProcessFunction, ManualClock, StreamEnvironment, ValueStateDescriptor  # noqa: E402
from explorer.engine.backends.rocksdb import warm_kernels_in_background  # noqa: E402
from explorer.engine.checkpoint.job import JobClient  # noqa: E402
from explorer.format.snapshot import read_metadata, verify_snapshot  # noqa: E402
from explorer.keygroups import assign_key_groups  # noqa: E402

MB = 1_000_000
MAX_PARALLELISM = 128
CHURN = 0.01
NEVER = 10**12  # interval_records that never fires: checkpoints are triggered by hand


class Payload(KeyedProcessFunction):
    """The operator whose state is measured: one ValueState[bytes] per key."""

    def open(self, ctx):
        self.payload = ctx.get_state(ValueStateDescriptor("payload", bytes))

    def process_element(self, value, ctx, out):  # pragma: no cover - the state is loaded directly
        self.payload.update(value[1])


def make_env(chk_dir: Path, state_dir: Path, incremental: bool) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=1, max_parallelism=MAX_PARALLELISM, clock=ManualClock(1_000),
                            state_backend="rocksdb", state_dir=state_dir)
    env.enable_checkpointing(chk_dir, interval_records=NEVER, incremental=incremental, retained=3)
    env.from_collection([], name="src").key_by(0).process(Payload(), name="payload", uid="payload")
    return env


def open_job(chk_dir: Path, state_dir: Path, incremental: bool, restore_from: Path | None = None) -> JobClient:
    client = JobClient(make_env(chk_dir, state_dir, incremental), "bench", restore_from=restore_from)
    client.runtime.hold_sources_open = True  # an idle, running job: barriers still flow
    return client


def table_of(client: JobClient):
    return client.runtime.subtasks_of("payload")[0].operator.backend.tables["payload"]


def load(table, keys: list[str], kgs: np.ndarray, rng: np.random.Generator, value_bytes: int,
         chunk: int = 50_000) -> None:
    """Put a fresh random value under each key, through the backend's write batches."""
    for i in range(0, len(keys), chunk):
        blob = rng.bytes(value_bytes * len(keys[i:i + chunk]))
        table.load_rows(
            (int(kgs[j]), keys[j], None, None, blob[(j - i) * value_bytes:(j - i + 1) * value_bytes], None)
            for j in range(i, min(i + chunk, len(keys)))
        )


def checkpoint(client: JobClient, kind: str) -> dict[str, Any]:
    """One checkpoint of ``kind``: "incremental", "full" (CheckpointType.FULL with incremental checkpoints
    on: every SST file copied) or "canonical" (``incremental=False``: every entry re-encoded as Parquet)."""
    co = client.coordinator
    co.config = dataclasses.replace(co.config, incremental=kind != "canonical")
    gc.collect()
    t0, c0 = time.perf_counter(), _cpu_s()
    folder = client.trigger_checkpoint(full=kind == "full")
    wall, cpu = time.perf_counter() - t0, _cpu_s() - c0
    meta = read_metadata(folder)
    t = meta["timing"]
    assert meta["incremental"] == (kind == "incremental"), (folder, meta["incremental"])
    native = any(s.get("state_format") for o in meta["operators"] for s in o["subtasks"])
    assert native == (kind != "canonical"), (folder, kind)
    return {"path": folder, "duration_s": wall, "cpu_s": cpu, "sync_s": t["sync_ms"] / 1000,
            "async_s": t["async_ms"] / 1000, "bytes": t["bytes"], "bytes_written": t["bytes_written"]}


def _cpu_s() -> float:
    """CPU seconds of this process so far, every thread's (user + system): on a shared machine the
    figure that other processes' load does not inflate."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def recover(folder: Path, chk_dir: Path, state_dir: Path, n_keys: int) -> dict[str, float]:
    gc.collect()
    t0, c0 = time.perf_counter(), _cpu_s()
    verify_snapshot(folder)
    verify_s, verify_cpu_s = time.perf_counter() - t0, _cpu_s() - c0
    gc.collect()
    t0, c0 = time.perf_counter(), _cpu_s()
    client = open_job(chk_dir, state_dir, incremental=True, restore_from=folder)
    restore_s, restore_cpu_s = time.perf_counter() - t0, _cpu_s() - c0
    try:
        be = client.runtime.subtasks_of("payload")[0].operator.backend
        assert be.estimated_entries("payload") > 0
        # a spot check that the state is really there (outside the timing)
        t = table_of(client)
        got = sum(1 for _ in zip(t.addresses(), range(1000)))
        assert got == min(1000, n_keys), got
    finally:
        client.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    return {"restore_s": restore_s, "verify_only_s": verify_s, "restore_cpu_s": restore_cpu_s,
            "verify_only_cpu_s": verify_cpu_s}


def recover_fresh(folder: Path, chk_dir: Path, state_dir: Path, n_keys: int) -> dict[str, float]:
    """:func:`recover` in a new Python process (what a restarted job meets: numba's one-off set-up and
    every kernel loaded from its cache inside the restore, no page of the process touched before),
    that process's start and imports timed apart."""
    import subprocess

    got = subprocess.run([sys.executable, "-m", "benchmarks.bench_checkpoints", "--recover-child", str(folder),
                          str(chk_dir), str(state_dir), str(n_keys)], capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    if got.returncode != 0:
        raise RuntimeError(f"the fresh-process recovery of {folder} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def _recover_child(argv: list[str]) -> int:
    folder, chk_dir, state_dir, n_keys = Path(argv[0]), Path(argv[1]), Path(argv[2]), int(argv[3])
    started = time.perf_counter()
    r = recover(folder, chk_dir, state_dir, n_keys)
    r["start_and_imports_s"] = _process_age() - (time.perf_counter() - started)
    print(json.dumps(r))
    return 0


def _process_age() -> float:
    """Seconds since this process started (Linux: its start time in /proc, in clock ticks after boot)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def disk_bandwidth(folder: Path, total_mb: int, repeat: int = 3) -> dict[str, Any]:
    """Sequential write of ``total_mb`` in 4 MiB blocks, best of ``repeat`` (others load this machine)."""
    block = os.urandom(4 << 20)
    n = max(1, total_mb * MB // len(block))
    each: dict[str, list[float]] = {"page_cache": [], "with_fsync": []}
    for _ in range(repeat):
        for fsync in (False, True):
            path = folder / f"dd-{fsync}.bin"
            t0 = time.perf_counter()
            with open(path, "wb") as f:
                for _ in range(n):
                    f.write(block)
                if fsync:
                    f.flush()
                    os.fsync(f.fileno())
            dt = time.perf_counter() - t0
            path.unlink()
            each["with_fsync" if fsync else "page_cache"].append(round(n * len(block) / dt / MB, 1))
    out: dict[str, Any] = {k: {"value": max(v), "unit": "MB/s", "each": v} for k, v in each.items()}
    out["bytes"] = {"value": n * len(block), "unit": "B"}
    return out


def _v(x: float, unit: str, nd: int = 4) -> dict[str, Any]:
    return {"value": round(x, nd), "unit": unit}


def run_size(size_mb: int, value_bytes: int, rounds: int, work: Path, seed: int) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    n_keys = max(100, size_mb * MB // value_bytes)
    keys = [f"user-{i:010d}" for i in range(n_keys)]
    kgs = assign_key_groups(keys, MAX_PARALLELISM)
    chk_dir, state_dir = work / f"chk-{size_mb}", work / f"state-{size_mb}"
    client = open_job(chk_dir, state_dir, incremental=True)
    # The canonical checkpoints below are taken by this job, whose config starts out incremental; a job
    # configured for canonical checkpoints loads their numba kernels in the background when its RocksDB
    # backend opens (datastream._backend_factory), long before its first checkpoint in any real job.
    # Done here as that job would, and waited for, so the first canonical checkpoint of the process does
    # not time numba's one-off set-up (0.2-0.3 s; reported as engine_warm_up).
    t0 = time.perf_counter()
    warming = warm_kernels_in_background()
    if warming is not None:
        warming.join()
    warm_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    load(table_of(client), keys, kgs, rng, value_bytes)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    client.runtime.subtasks_of("payload")[0].operator.backend.compact()  # settle the bulk load's compactions
    compact_s = time.perf_counter() - t0
    first = checkpoint(client, "incremental")
    n_churn = max(1, int(n_keys * CHURN))
    fulls, canons, incs = [], [], []
    for r in range(rounds):
        idx = np.sort(rng.choice(n_keys, n_churn, replace=False))
        load(table_of(client), [keys[i] for i in idx], kgs[idx], rng, value_bytes)
        if r in (0, rounds - 1):  # a full checkpoint costs the same every round: measure it twice
            fulls.append(checkpoint(client, "full"))
            canons.append(checkpoint(client, "canonical"))
        incs.append(checkpoint(client, "incremental"))
    client.close()
    rec_full = recover(fulls[-1]["path"], work / f"rchk-full-{size_mb}", work / f"rstate-full-{size_mb}", n_keys)
    rec_canon = recover(canons[-1]["path"], work / f"rchk-canon-{size_mb}", work / f"rstate-canon-{size_mb}", n_keys)
    rec_inc = recover(incs[-1]["path"], work / f"rchk-inc-{size_mb}", work / f"rstate-inc-{size_mb}", n_keys)
    fresh = {kind: recover_fresh(runs[-1]["path"], work / f"rchk-fresh-{size_mb}", work / f"rstate-fresh-{size_mb}",
                                 n_keys) for kind, runs in (("full", fulls), ("full_canonical", canons),
                                                            ("incremental", incs))}
    shutil.rmtree(work / f"rchk-fresh-{size_mb}", ignore_errors=True)
    shutil.rmtree(work / f"rchk-full-{size_mb}", ignore_errors=True)
    shutil.rmtree(work / f"rchk-inc-{size_mb}", ignore_errors=True)
    shutil.rmtree(work / f"rchk-canon-{size_mb}", ignore_errors=True)

    result = {
        "state_mb": size_mb, "keys": n_keys, "value_bytes": value_bytes, "churned_keys_per_round": n_churn,
        "rounds": rounds, "load": _v(load_s, "s", 2), "settle_compaction": _v(compact_s, "s", 2),
        "engine_warm_up": _v(warm_s, "s", 3),
        "incremental_first": {"duration": _v(first["duration_s"], "s"), "bytes": _v(first["bytes"], "B", 0),
                              "bytes_written": _v(first["bytes_written"], "B", 0)},
    }
    for kind, runs in (("full", fulls), ("full_canonical", canons), ("incremental", incs)):
        result[kind] = {"checkpoints": len(runs)}
        for f, unit in (("duration_s", "s"), ("cpu_s", "CPU-s"), ("sync_s", "s"), ("async_s", "s"), ("bytes", "B"),
                        ("bytes_written", "B")):
            xs = [r[f] for r in runs]
            name = f.removesuffix("_s")
            nd = 4 if unit in ("s", "CPU-s") else 0
            result[kind][name] = _v(statistics.median(xs), unit, nd)
            result[kind][name + "_mean"] = _v(statistics.fmean(xs), unit, nd)
            result[kind][name + "_each"] = {"value": [round(x, nd) if nd else int(x) for x in xs], "unit": unit}
    fd, idur = result["full"]["duration"]["value"], result["incremental"]["duration"]["value"]
    result["speedup_full_over_incremental"] = {
        "median": _v(fd / idur, "x", 1),
        "mean": _v(result["full"]["duration_mean"]["value"] / result["incremental"]["duration_mean"]["value"], "x", 1),
        "worst": _v(min(r["duration_s"] for r in fulls) / max(r["duration_s"] for r in incs), "x", 1),
    }
    result["written_ratio_full_over_incremental_mean"] = _v(
        result["full"]["bytes_written_mean"]["value"] / max(1, result["incremental"]["bytes_written_mean"]["value"]), "x", 1)
    result["recovery"] = {
        kind: {"restore": _v(r["restore_s"], "s"), "verify_only": _v(r["verify_only_s"], "s"),
               "restore_cpu": _v(r["restore_cpu_s"], "CPU-s"), "verify_only_cpu": _v(r["verify_only_cpu_s"], "CPU-s")}
        for kind, r in (("full", rec_full), ("full_canonical", rec_canon), ("incremental", rec_inc))
    }
    for kind, r in fresh.items():  # the same recovery as the first thing a new process does
        result["recovery"][kind]["restore_fresh_process"] = _v(r["restore_s"], "s")
        result["recovery"][kind]["restore_fresh_process_cpu"] = _v(r["restore_cpu_s"], "CPU-s")
        result["recovery"][kind]["fresh_process_start_and_imports"] = _v(r["start_and_imports_s"], "s", 2)
    shutil.rmtree(chk_dir, ignore_errors=True)
    shutil.rmtree(state_dir, ignore_errors=True)
    return result


def _median(runs: list[dict[str, Any]], field: str) -> float | None:
    xs = [r[field] for r in runs if r.get(field) is not None]
    return statistics.median(xs) if xs else None


def flink_size(size_mb: int, value_bytes: int, rounds: int, work: Path, classpath: str,
               timeout_s: float) -> dict[str, Any]:
    """Flink's two jobs (incremental=true, incremental=false) at one state size, summarized like ours."""
    from benchmarks.bench_peers import run_child

    heap = os.environ.get("FLINK_BENCH_HEAP", "1g")
    out: dict[str, Any] = {"state_mb": size_mb}
    raw = {}
    for mode, n_rounds in (("incremental", rounds), ("full", 2)):
        folder = work / f"flink-{mode}-{size_mb}"
        shutil.rmtree(folder, ignore_errors=True)
        cmd = ["java", f"-Xmx{heap}", "-Dlog4j2.level=ERROR", "-cp", classpath, "CheckpointBench", mode,
               str(size_mb), str(value_bytes), str(n_rounds), str(folder)]
        try:
            raw[mode] = run_child(cmd, timeout_s=timeout_s)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    inc, full = raw["incremental"], raw["full"]
    out.update({"keys": inc["keys"], "value_bytes": value_bytes, "churned_keys_per_round": inc["churned_keys_per_round"],
                "rounds": inc["rounds"], "load": _v(inc["load_s"], "s", 2)})

    def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"checkpoints": len(runs),
                "duration": _v(_median(runs, "duration_s"), "s"),
                "duration_each": {"value": [r["duration_s"] for r in runs], "unit": "s"},
                "trigger_wall": _v(_median(runs, "trigger_wall_s"), "s"),
                "checkpointed_size": _v(_median(runs, "checkpointed_size_bytes"), "B", 0),
                "state_size": _v(_median(runs, "state_size_bytes"), "B", 0),
                "bytes_written": _v(_median(runs, "bytes_written"), "B", 0),
                "bytes_written_each": {"value": [r["bytes_written"] for r in runs], "unit": "B"}}

    out["full"] = summary(full["full"])  # incremental=false: Flink's full checkpoint
    out["full_all_sst"] = summary(inc["full"])  # CheckpointType.FULL on the incremental backend
    out["incremental"] = summary(inc["incremental"])
    out["incremental_first"] = summary([inc["incremental_first"]])
    fd, idur = out["full"]["duration"]["value"], out["incremental"]["duration"]["value"]
    out["speedup_full_over_incremental"] = {"median": _v(fd / idur, "x", 1) if fd and idur else None}
    fb, ib = out["full"]["bytes_written"]["value"], out["incremental"]["bytes_written"]["value"]
    out["written_ratio_full_over_incremental"] = _v(fb / max(1, ib), "x", 1) if fb else None
    out["recovery"] = {
        "full": {"restore": _v(full["recovery"]["full"]["restore_s"], "s"),
                 "probed_keys_found": full["recovery"]["full"]["probed_keys_found"]},
        "full_all_sst": {"restore": _v(inc["recovery"]["full"]["restore_s"], "s"),
                         "probed_keys_found": inc["recovery"]["full"]["probed_keys_found"]},
        "incremental": {"restore": _v(inc["recovery"]["incremental"]["restore_s"], "s"),
                        "probed_keys_found": inc["recovery"]["incremental"]["probed_keys_found"]},
        "job_start_without_state": _v(min(inc["warm_start_s"], full["warm_start_s"]), "s"),
        "first_job_start": _v(min(inc["fresh_start_s"], full["fresh_start_s"]), "s"),
        "probed_keys": inc["recovery"]["incremental"]["probed_keys"],
    }
    out["peak_rss_mb"] = {"value": max(inc["peak_rss_mb"], full["peak_rss_mb"]), "unit": "MB"}
    out["process_wall"] = _v(inc["process_wall_seconds"] + full["process_wall_seconds"], "s", 1)
    return out


def flink_ratios(ours: list[dict[str, Any]], flink: dict[str, Any]) -> dict[str, Any]:
    """Flink's time ÷ ours per size (above 1: ours is faster): full, incremental, recovery."""
    out: dict[str, Any] = {}
    by_size = {s["state_mb"]: s for s in flink.get("sizes", [])}
    for s in ours:
        f = by_size.get(s["state_mb"])
        if not f:
            continue
        pairs = {"full checkpoint": (val(f, "full", "duration"), val(s, "full", "duration")),
                 "full checkpoint, all SST files (Flink's CheckpointType.FULL)": (
                     val(f, "full_all_sst", "duration"), val(s, "full", "duration")),
                 "full checkpoint, canonical (ours incremental=False)": (
                     val(f, "full", "duration"), val(s, "full_canonical", "duration")),
                 "incremental checkpoint": (val(f, "incremental", "duration"), val(s, "incremental", "duration")),
                 "recovery from full": (val(f, "recovery", "full", "restore"), val(s, "recovery", "full", "restore")),
                 "recovery from full, all SST files (Flink's CheckpointType.FULL)": (
                     val(f, "recovery", "full_all_sst", "restore"), val(s, "recovery", "full", "restore")),
                 "recovery from full, canonical (ours incremental=False)": (
                     val(f, "recovery", "full", "restore"), val(s, "recovery", "full_canonical", "restore")),
                 "recovery from incremental": (val(f, "recovery", "incremental", "restore"),
                                               val(s, "recovery", "incremental", "restore"))}
        out[f"{s['state_mb']} MB"] = {k: round(a / b, 2) if a and b else None for k, (a, b) in pairs.items()}
    return out


def val(d: Any, *path: str) -> Any:
    for p in path:
        d = d.get(p) if isinstance(d, dict) else None
    return d.get("value") if isinstance(d, dict) else d


def run_flink(sizes: list[int], value_bytes: int, rounds: int, work: Path) -> dict[str, Any]:
    """Flink's side at every size; a size that fails or runs out of time is listed with the reason."""
    from benchmarks.bench_peers import FLINK_VERSION, java_version, setup_flink

    timeout_s = float(os.environ.get("BENCH_RUN_TIMEOUT_S", "600"))
    doc: dict[str, Any] = {"version": FLINK_VERSION, "java": java_version(), "sizes": [], "not_measured": {},
                           "job": "benchmarks/flink/CheckpointBench.java on a MiniCluster, embedded RocksDB, "
                                  "parallelism 1"}
    try:
        classpath = setup_flink()
    except Exception as exc:  # noqa: BLE001 - ours is still measured; say why Flink is not
        doc["not_measured"]["all sizes"] = f"Flink setup failed: {str(exc)[:300]}"
        return doc
    for size in sizes:
        t0 = time.perf_counter()
        try:
            r = flink_size(size, value_bytes, rounds, work, classpath, timeout_s)
        except Exception as exc:  # noqa: BLE001
            doc["not_measured"][f"{size} MB"] = str(exc)[:500]
            print(f"flink {size:>5} MB: FAILED {str(exc)[:200]}", flush=True)
            continue
        doc["sizes"].append(r)
        print(f"flink {size:>5} MB: full {r['full']['duration']['value']:.3f} s / "
              f"{r['full']['bytes_written']['value'] / MB:.1f} MB, FULL (all SST) {r['full_all_sst']['duration']['value']:.3f} s, "
              f"incremental median {r['incremental']['duration']['value']:.3f} s / "
              f"{r['incremental']['bytes_written']['value'] / MB:.2f} MB; recovery full "
              f"{r['recovery']['full']['restore']['value']:.2f} s, incremental "
              f"{r['recovery']['incremental']['restore']['value']:.2f} s (job start without state "
              f"{r['recovery']['job_start_without_state']['value']:.2f} s)  [{time.perf_counter() - t0:.0f} s]",
              flush=True)
    return doc


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--recover-child"]:  # recover_fresh's child process
        return _recover_child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="1 MB and 10 MB only")
    ap.add_argument("--sizes", type=int, nargs="*", help="state sizes in MB (default 10 100 1000)")
    ap.add_argument("--value-bytes", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=6, help="churn + incremental checkpoint rounds per size "
                    "(full checkpoints in the first and the last)")
    ap.add_argument("--disk-mb", type=int, default=None, help="size of the sequential-write test (default 500; smoke 200)")
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp folder)")
    ap.add_argument("--flink", action=argparse.BooleanOptionalAction, default=None,
                    help="run Apache Flink's checkpoints beside ours (default: on, off with --smoke)")
    ap.add_argument("--flink-rounds", type=int, default=3, help="churn rounds of Flink's incremental job")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoints.json")
    ap.add_argument("--busy", action="store_true", help="keep one core busy for the whole run (a shell loop at "
                    "nice 0, ours and Flink's alike): the figures of a busy machine")
    args = ap.parse_args(argv)
    sizes = args.sizes or ([1, 10] if args.smoke else [10, 100, 1000])
    work = Path(tempfile.mkdtemp(prefix="bench-checkpoints-", dir=args.work))
    free = shutil.disk_usage(work).free
    need = max(sizes) * MB * 6
    if free < need:
        print(f"only {free / 1e9:.1f} GB free in {work}, {need / 1e9:.1f} GB needed for {max(sizes)} MB; stopping",
              file=sys.stderr)
        return 1
    results = []
    flink: dict[str, Any] | None = None
    with_flink = args.flink if args.flink is not None else not args.smoke
    load_at_start = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    import subprocess

    burner = subprocess.Popen(["sh", "-c", "while :; do :; done"]) if args.busy else None
    try:
        disk = disk_bandwidth(work, args.disk_mb or (200 if args.smoke else 500))
        print(f"disk: {disk['page_cache']['value']} MB/s (page cache), {disk['with_fsync']['value']} MB/s (fsync)")
        for i, size in enumerate(sizes):
            rounds = max(1, args.rounds)
            t0 = time.perf_counter()
            r = run_size(size, args.value_bytes, rounds, work, seed=20261122 + i)
            results.append(r)
            print(f"{size:>5} MB: full {r['full']['duration']['value']:.3f} s / {r['full']['bytes_written']['value'] / MB:.1f} MB, "
                  f"incremental median {r['incremental']['duration']['value']:.3f} s / "
                  f"{r['incremental']['bytes_written']['value'] / MB:.2f} MB, mean "
                  f"{r['incremental']['duration_mean']['value']:.3f} s / {r['incremental']['bytes_written_mean']['value'] / MB:.2f} MB "
                  f"({r['speedup_full_over_incremental']['median']['value']}x median, "
                  f"{r['speedup_full_over_incremental']['mean']['value']}x mean); recovery full "
                  f"{r['recovery']['full']['restore']['value']:.2f} s, incremental "
                  f"{r['recovery']['incremental']['restore']['value']:.2f} s "
                  f"({r['recovery']['incremental']['restore_cpu']['value']:.2f} CPU-s, verification alone "
                  f"{r['recovery']['incremental']['verify_only_cpu']['value']:.2f} CPU-s)  [{time.perf_counter() - t0:.0f} s]",
                  flush=True)
        if with_flink:
            flink = run_flink(sizes, args.value_bytes, max(2, args.flink_rounds), work)
    finally:
        if burner is not None:
            burner.kill()
            burner.wait()
        shutil.rmtree(work, ignore_errors=True)
    if flink is not None:
        flink["ratios_ours_over_flink"] = flink_ratios(results, flink)
    doc = {
        "benchmark": "checkpoints",
        "description": "RocksDB backend, parallelism 1, ValueState[bytes] of random values; 1 % of keys changed "
                       "between checkpoints; full (CheckpointType.FULL: the SST files linked into the checkpoint, "
                       "XXH3-128 each), full canonical (incremental=False: Parquet) and incremental (shared SST files) "
                       "checkpoints taken by the job's coordinator on the same state; recovery = JobClient(restore_from=...) "
                       "including checksum verification of every file",
        "command": "python -m benchmarks.bench_checkpoints" + (" --smoke" if args.smoke else "")
                   + (f" --sizes {' '.join(map(str, sizes))}" if args.sizes else "") + ("" if with_flink else " --no-flink")
                   + (" --busy" if args.busy else ""),
        "peer": "full checkpoints of the same state; Apache Flink's full and incremental "
                "checkpoints and recovery of the same state (RocksDB backend) when measured (see 'flink')",
        "target": "every row at or better than Apache Flink's in the same run (issue 20); incremental at least "
                  "20x faster than the canonical full at 1 GB with 1 % churn",
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
                    "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                    "load_average_at_start": load_at_start,
                    "background": "one core kept busy by a shell loop at nice 0 for the whole run (--busy)"
                                  if args.busy else None},
        "disk_sequential_write": disk,
        "sizes": results,
        "flink": flink,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

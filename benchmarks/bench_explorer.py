"""Load time of engine savepoints to pandas, against pyarrow reading the same files raw, and each analysis.

Builds savepoints of 1 M and 10 M keys (``--smoke``: 1 M only) in the engine's
own snapshot format, writes them with the engine's format functions
(:func:`explorer.format.keyed.write_parquet_by_key_group`,
:func:`explorer.format.snapshot.write_metadata`, ``file_entry``) instead of
running a job per record, and checks that each is a real engine snapshot: its
Parquet schema equals the one a real job writes for the same descriptors, its
checksums verify, and ``explorer.open`` reads it.

The job it stands for: ``key_by(user).process(...)`` at parallelism 4, max
parallelism 128, with ``count`` (ValueState[int], TTL 1 day, one entry per key,
last access spread over the last day) and ``recent`` (ListState[int], 20
entries for 1 % of the keys, the hot ones, which also get 50x the traffic in
the heavy-hitter sketch and the per-key-group record counters). Diff is timed
against a variant of the savepoint (0.5 % keys removed, 0.5 % added, 1 % changed).

Timed first in fresh processes (``first_load_fresh_process``: what a user meets, one run
each, the raw read and ``explorer.open(path).keyed_state()`` with SHA-256 verification on;
target at least 0.8x the raw speed), then best of ``--repeat`` runs, in the same process:

* ``raw``: ``pyarrow.parquet.read_table(f).to_pandas()`` for every state file of
  the savepoint (the peer figure);
* ``explorer``: ``explorer.open(path).keyed_state()`` (the contract frame:
  subtask, sizes, expiry and timestamps computed, pieces combined);
* ``analysis columns``: the first analysis of a Snapshot reads the columns analyses
  need once, keys as Arrow dictionary codes, with a hash of each entry for diff, and
  keeps them on the Snapshot (timed on its own);
* each analysis after that, as a notebook calls it (``snap.hot_keys()``, ...), *cold*
  (what analyses keep on the Snapshot, such as per-key sums and key hashes, dropped
  before each run: the target figure) and *warm* (called again).

Run::

    python -m benchmarks.bench_explorer            # 1 M and 10 M keys (needs ~12 GB RAM)
    python -m benchmarks.bench_explorer --smoke    # 1 M keys only

Writes benchmarks/results/explorer.json (``--out``): seconds, rows/s and the
ratio explorer/raw speed, with units, the machine, its load average and the date.
Targets: loading at least half the raw speed; each analysis at 10 M keys < 2 s.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
PARALLELISM = 4
MAX_PARALLELISM = 128
T0_MS = 1_700_000_000_000
DAY_MS = 86_400_000
HOT_FRACTION = 0.01
LIST_LEN = 20
TARGET_LOAD_RATIO = 0.5
TARGET_FIRST_LOAD_RATIO = 0.8
TARGET_ANALYSIS_S = 2.0


def _descriptors():
    from explorer.engine import ListStateDescriptor, StateTtlConfig, ValueStateDescriptor

    return [ValueStateDescriptor("count", int, ttl=StateTtlConfig(DAY_MS)), ListStateDescriptor("recent", int)]


def _keys(ids: np.ndarray, key_type: str) -> pa.Array:
    if key_type == "int":
        return pa.array(ids * 7919 + 13)
    digits = pc.utf8_lpad(pc.cast(pa.array(ids), pa.string()), width=8, padding="0")
    return pc.binary_join_element_wise("user-", digits, "")


def _key_groups(keys: pa.Array) -> np.ndarray:
    from explorer.keygroups import key_groups_of

    return key_groups_of(keys, MAX_PARALLELISM).astype(np.int32)


def build_savepoint(folder: Path, n_keys: int, key_type: str = "str", variant: bool = False) -> Path:
    """Write an engine savepoint of ``n_keys`` keys into ``folder`` (see the module doc).

    Everything about a key follows from its id, so two builds agree key by key. The
    ``variant`` is the same job a little later: the first 0.5 % of the ids gone, 0.5 %
    new ids after the last, and the count of every id ending in 07 one higher (1 %).
    """
    from explorer.engine.metrics import SpaceSaving
    from explorer.format.keyed import write_parquet_by_key_group
    from explorer.format.snapshot import file_entry
    from explorer.keygroups import key_group_range_for_operator

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    shift = n_keys // 200 if variant else 0
    ids = np.arange(shift, shift + n_keys, dtype=np.int64)
    keys = _keys(ids, key_type)
    kg = _key_groups(keys)
    order = np.argsort(kg, kind="stable")
    keys, kg, ids = keys.take(pa.array(order)), kg[order], ids[order]
    mix = (ids * 2654435761) & 0xFFFFFFFF
    hot = (mix % 100) == 0  # 1 % of the keys
    counts = 1 + (mix >> 7) % 19
    counts[hot] *= 50
    if variant:
        counts[ids % 100 == 7] += 1
    last_access = T0_MS - (mix * 7) % DAY_MS
    descs = _descriptors()
    files: dict[str, Any] = {}
    subtasks = []
    for index in range(PARALLELISM):
        r = key_group_range_for_operator(MAX_PARALLELISM, PARALLELISM, index)
        lo, hi = np.searchsorted(kg, r.start, "left"), np.searchsorted(kg, r.end, "right")
        sl = slice(lo, hi)
        n = hi - lo
        k = keys.slice(lo, n)
        count_table = pa.table({
            "key_group": pa.array(kg[sl], pa.int32()), "key": k, "namespace": pa.nulls(n),
            "user_key": pa.nulls(n), "value": pa.array(counts[sl]), "last_access": pa.array(last_access[sl]),
        })
        hot_idx = np.flatnonzero(hot[sl])
        rep = np.repeat(hot_idx, LIST_LEN)
        m = len(rep)
        recent_table = pa.table({
            "key_group": pa.array(kg[sl][rep], pa.int32()), "key": k.take(pa.array(rep)), "namespace": pa.nulls(m),
            "user_key": pa.array(np.tile(np.arange(LIST_LEN, dtype=np.int32), len(hot_idx))),
            "value": pa.array(np.repeat(ids[sl][hot_idx], LIST_LEN) * 31 + np.tile(np.arange(LIST_LEN), len(hot_idx))),
            "last_access": pa.nulls(m, pa.int64()),
        })
        states = []
        for desc, table in zip(descs, (count_table, recent_table)):
            rel = f"keyed/process/{desc.name}/{index}.parquet"
            groups = write_parquet_by_key_group(table, folder / rel)
            files[rel] = file_entry(folder, folder / rel)
            states.append({"name": desc.name, "file": rel, "rows": table.num_rows, "row_groups": groups,
                           "key_kind": key_type, "namespace_kind": "null"})
        records = np.bincount(kg[sl] - r.start, weights=counts[sl], minlength=len(r)).astype(np.int64)
        sketch = SpaceSaving(64)
        top = np.argsort(counts[sl])[::-1][:64]
        for i in sorted(top, key=lambda j: -counts[sl][j]):
            sketch.update(k[int(i)].as_py(), int(counts[sl][i]))
        subtasks.append(subtask_entry(index, r, states, files, records, sketch))
    write_job_metadata(folder, files, descs, subtasks, job=f"bench-{n_keys}",
                       description="benchmark: key_by(user).process(count, recent)")
    return folder



def subtask_entry(index: int, r: Any, states: list[dict], files: dict, records: np.ndarray, sketch: Any) -> dict:
    """The metadata of one subtask of the benchmark's job: its key-group range ``r``, state files,
    traffic per key group and heavy-hitter sketch (no timers, no operator state, no timings)."""
    return {
        "index": index, "key_group_range": [r.start, r.end], "states": states, "timers": None,
        "operator_state": None, "records_per_key_group": records.tolist(), "heavy_hitters": sketch.to_json(),
        "source_positions": None, "sync_ms": 0.0, "async_ms": 0.0, "alignment_ms": 0.0,
        "bytes": sum(files[s["file"]]["bytes"] for s in states),
    }


def write_job_metadata(folder: Path, files: dict, descs: list, subtasks: list[dict], *, job: str, description: str,
                       checkpoint_id: int = 1, parallelism: int = PARALLELISM,
                       max_parallelism: int = MAX_PARALLELISM) -> None:
    """The canonical savepoint metadata of the benchmark's job (one keyed operator ``process``) over
    ``files`` and ``subtasks`` (:func:`subtask_entry`), written with its CRC."""
    from explorer.format.snapshot import write_metadata

    write_metadata(folder, {
        "format": "state-explorer-snapshot", "checkpoint_id": checkpoint_id, "kind": "savepoint",
        "savepoint_format": "canonical", "created_at_ms": T0_MS, "job": {"name": job}, "backend": "heap",
        "mode": "EXACTLY_ONCE", "unaligned": False, "incremental": False,
        "operators": [{
            "uid": "process", "name": "process", "kind": "KeyedProcessOperator", "parallelism": parallelism,
            "max_parallelism": max_parallelism, "keyed": True, "states": [d.describe() for d in descs],
            "subtasks": subtasks, "description": description,
        }],
        "files": files,
        "timing": {"duration_ms": 0.0, "sync_ms": 0.0, "async_ms": 0.0, "alignment_ms": 0.0,
                   "bytes": sum(f["bytes"] for f in files.values()), "inflight_records": 0},
    })

def reference_schemas(tmp: Path) -> dict[str, pa.Schema]:
    """Parquet schemas a real job writes for the benchmark's descriptors (a tiny run of the engine)."""
    import explorer.engine as eng

    class Fn(eng.KeyedProcessFunction):
        def open(self, ctx):
            d = _descriptors()
            self.count = ctx.get_state(d[0])
            self.recent = ctx.get_state(d[1])

        def process_element(self, value, ctx, out):
            self.count.update(self.count.value(0) + 1)
            self.recent.add(value[1])

    env = eng.StreamEnvironment(parallelism=1, max_parallelism=MAX_PARALLELISM, clock=eng.ManualClock(T0_MS))
    env.from_collection([("user-00000001", 1), ("user-00000002", 2)]).key_by(0).process(Fn(), name="process")
    client = env.execute_async("reference")
    client.run()
    shutil.rmtree(tmp / "reference", ignore_errors=True)
    sp = client.trigger_savepoint(tmp / "reference")
    client.close()
    return {d: pq.read_schema(sp / f"keyed/process/{d}/0.parquet") for d in ("count", "recent")}


def check_real(folder: Path, reference: dict[str, pa.Schema], key_type: str) -> None:
    from explorer.format.snapshot import verify_snapshot

    verify_snapshot(folder)
    for d, schema in reference.items():
        got = pq.read_schema(folder / f"keyed/process/{d}/0.parquet")
        want = schema if key_type == "str" else schema.set(schema.get_field_index("key"), pa.field("key", pa.int64()))
        if not got.remove_metadata().equals(want.remove_metadata()):
            raise SystemExit(f"{folder}: schema of {d} differs from a real engine snapshot:\n{got}\nvs\n{want}")


def best_of(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        result = None
        gc.collect()
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def raw_read(folder: Path) -> int:
    rows = 0
    for f in sorted((folder / "keyed").rglob("*.parquet")):
        df = pq.read_table(f).to_pandas()
        rows += len(df)
        del df
    return rows


_FRESH = """
import json, resource, sys, time
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
t_start, mode, folder = time.perf_counter(), sys.argv[1], sys.argv[2]
if mode == "raw":
    from pathlib import Path
    import pyarrow.parquet as pq
    t_import = time.perf_counter() - t_start
    t0, c0 = time.perf_counter(), cpu()
    rows = 0
    for f in sorted(Path(folder, "keyed").rglob("*.parquet")):
        df = pq.read_table(f).to_pandas()
        rows += len(df)
        del df
else:
    import explorer
    t_import = time.perf_counter() - t_start
    t0, c0 = time.perf_counter(), cpu()
    rows = len(explorer.open(folder).keyed_state(progress=False))
print(json.dumps({"seconds": round(time.perf_counter() - t0, 3), "cpu_seconds": round(cpu() - c0, 3),
                  "import_seconds": round(t_import, 3), "rows": rows}))
"""


def first_load_fresh(folder: Path) -> dict[str, Any]:
    """The first load in a fresh Python process (what a user meets), explorer (SHA-256 verified, the
    default) and the raw pyarrow read, each in its own process, one after the other."""
    import subprocess

    out: dict[str, Any] = {}
    for mode in ("raw", "explorer"):
        proc = subprocess.run([sys.executable, "-c", _FRESH, mode, str(folder)], cwd=ROOT, capture_output=True,
                              text=True, check=True)
        out[mode] = json.loads(proc.stdout.strip().splitlines()[-1])
    out["speed_ratio_explorer_over_raw"] = round(out["raw"]["seconds"] / out["explorer"]["seconds"], 3)
    out["cpu_ratio_explorer_over_raw"] = round(out["raw"]["cpu_seconds"] / out["explorer"]["cpu_seconds"], 3)
    out["note"] = ("one run each in a fresh process, after its imports (import_seconds); explorer.open(path)"
                   ".keyed_state() with SHA-256 verification on (the default) against pq.read_table(f).to_pandas() "
                   "per state file; cpu_seconds: user + system CPU of the process, all threads")
    return out


def analyses(snap, other) -> dict[str, Callable[[], Any]]:
    """Each analysis as a notebook calls it; ``other`` is the variant savepoint (for diff)."""
    from explorer import analysis

    return {
        "key_group_distribution": lambda: snap.key_group_distribution(),
        "imbalance": lambda: snap.imbalance(),
        "rescale_whatif (p'=1..16)": lambda: snap.rescale_whatif(list(range(1, 17))),
        "rescale_whatif (M'=256)": lambda: snap.rescale_whatif([4, 8], max_parallelism=256),
        "hot_keys (bytes)": lambda: snap.hot_keys(10, by="bytes"),
        "hot_keys (entries)": lambda: snap.hot_keys(10, by="entries"),
        "hot_keys (traffic)": lambda: snap.hot_keys(10, by="traffic"),
        "key_skew": lambda: snap.key_skew(),
        "salting_whatif": lambda: snap.salting_whatif(n=8),
        "ttl_expiry": lambda: snap.ttl_expiry(freq="1h"),
        "expired_not_cleaned": lambda: snap.expired_not_cleaned(),
        "history (with keys)": lambda: analysis.history([snap]),
        "diff (a, b = a 1 % later; every key listed)": lambda: analysis.diff(snap, other),
        "diff (a, b = a 1 % later; changed keys only)": lambda: analysis.diff(snap, other, unchanged=False),
    }


def analysis_diff_counts(a, b) -> dict[str, int]:
    from explorer import analysis

    d = analysis.diff(a, b, unchanged=False)
    return {str(k): int(v) for k, v in d["status"].value_counts().items()}


def machine() -> dict[str, Any]:
    """Where it ran (benchmarks/_machine.py: load average and date) plus the library versions."""
    import pandas

    from benchmarks._machine import machine as _machine

    return {**_machine(), "pandas": pandas.__version__, "pyarrow": pa.__version__, "numpy": np.__version__}


def run(sizes: list[int], repeat: int, key_type: str, workdir: Path, skip_analyses_above: int | None) -> dict:
    import explorer

    ref = reference_schemas(workdir)
    out: dict[str, Any] = {"sizes": []}
    for n in sizes:
        folder = workdir / f"savepoint-{n}"
        t_build = time.perf_counter()
        build_savepoint(folder, n, key_type)
        t_build = time.perf_counter() - t_build
        check_real(folder, ref, key_type)
        file_bytes = sum(p.stat().st_size for p in (folder / "keyed").rglob("*.parquet"))
        first = first_load_fresh(folder)
        print(f"{n:>11,} keys  first load in a fresh process: raw {first['raw']['seconds']:6.2f} s  explorer "
              f"{first['explorer']['seconds']:6.2f} s  ratio {first['speed_ratio_explorer_over_raw']:.2f} "
              f"(CPU {first['cpu_ratio_explorer_over_raw']:.2f})", flush=True)
        t_raw, rows_raw = best_of(lambda: raw_read(folder), repeat)
        t_exp, df = best_of(lambda: explorer.open(folder).keyed_state(progress=False), repeat)
        rows = len(df)
        assert rows == rows_raw, (rows, rows_raw)
        del df
        gc.collect()
        entry: dict[str, Any] = {
            "keys": n, "rows": rows, "key_type": key_type, "parquet_bytes": file_bytes,
            "build_seconds": round(t_build, 2),
            "load": {
                "explorer_keyed_state": {"seconds": round(t_exp, 3), "rows_per_second": round(rows / t_exp)},
                "raw_pyarrow_read_table_to_pandas": {"seconds": round(t_raw, 3), "rows_per_second": round(rows / t_raw)},
                "speed_ratio_explorer_over_raw": round(t_raw / t_exp, 3),
                "target_ratio_at_least": TARGET_LOAD_RATIO,
                "meets_target": bool(t_raw / t_exp >= TARGET_LOAD_RATIO),
                "first_load_fresh_process": {**first, "target_ratio_at_least": TARGET_FIRST_LOAD_RATIO,
                                             "meets_target": bool(first["speed_ratio_explorer_over_raw"]
                                                                  >= TARGET_FIRST_LOAD_RATIO)},
            },
        }
        print(f"{n:>11,} keys {rows:>11,} rows  raw {t_raw:6.2f} s  explorer {t_exp:6.2f} s  "
              f"ratio {t_raw / t_exp:.2f} (target >= {TARGET_LOAD_RATIO})", flush=True)
        if skip_analyses_above is None or n <= skip_analyses_above:
            from explorer.analysis._columns import cached_frame, drop_derived

            other_folder = workdir / f"savepoint-{n}-variant"
            build_savepoint(other_folder, n, key_type, variant=True)
            snap, other = explorer.open(folder), explorer.open(other_folder)
            gc.collect()
            t = time.perf_counter()
            cached_frame(snap)
            t_cols = time.perf_counter() - t
            cached_frame(other)
            entry["analysis_columns_once_per_snapshot"] = {
                "load_columns_keys_as_codes": {"seconds": round(t_cols, 3)},
                "note": "read once per Snapshot by its first analysis and kept on it: the analysis columns, keys as "
                        "Arrow dictionary codes, and a 64-bit hash of each entry for diff (hashed while the "
                        "entries are in memory anyway). Every analysis figure below excludes it.",
            }
            print(f"    {'(once) analysis columns + entry hashes':<44} {t_cols:7.3f} s", flush=True)

            def cold_run(fn: Callable[[], Any]) -> float:
                best = float("inf")
                for _ in range(repeat):
                    drop_derived(snap)
                    drop_derived(other)
                    gc.collect()
                    t0 = time.perf_counter()
                    fn()
                    best = min(best, time.perf_counter() - t0)
                return best

            times = {}
            for name, fn in analyses(snap, other).items():
                t_cold = cold_run(fn)
                fn()  # what an analysis keeps is there now (the kept per-key sums, key hashes)
                t_warm, _ = best_of(fn, repeat)
                times[name] = {"seconds": round(t_cold, 3), "warm_seconds": round(t_warm, 3),
                               "meets_target_2s": bool(t_cold < TARGET_ANALYSIS_S)}
                print(f"    {name:<44} cold {t_cold:7.3f} s  warm {t_warm:7.3f} s", flush=True)
            entry["analyses"] = times
            entry["analyses_note"] = (
                "seconds: cold, the first call on a Snapshot whose analysis columns are loaded (everything "
                "analyses keep on it dropped before each run: per-key sums, key hashes, key groups at other "
                "max parallelisms); warm_seconds: the same call again, reusing what the first call kept. "
                "Target: cold < 2 s at 10 M keys.")
            d = analysis_diff_counts(snap, other)
            entry["diff_statuses"] = d
            print(f"    diff statuses: {d}", flush=True)
            del snap, other
            gc.collect()
            shutil.rmtree(other_folder, ignore_errors=True)
        out["sizes"].append(entry)
        shutil.rmtree(folder, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="1 M keys only (CI)")
    ap.add_argument("--sizes", default=None, help="comma-separated key counts (overrides --smoke)")
    ap.add_argument("--repeat", type=int, default=2, help="runs per measurement; the best is kept")
    ap.add_argument("--key-type", choices=["str", "int"], default="str")
    ap.add_argument("--workdir", type=Path, default=None, help="where to build the savepoints (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/explorer.json")
    args = ap.parse_args(argv)
    if args.out is None:
        from benchmarks._machine import result_path

        args.out = result_path("explorer")
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else ([1_000_000] if args.smoke else
                                                                          [1_000_000, 10_000_000])
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-explorer-"))
    workdir.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc)
    at_start = machine()  # the load average when the run began (the end's is recorded too)
    try:
        result = run(sizes, args.repeat, args.key_type, workdir, None)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    report = {
        "benchmark": "explorer load and analyses (benchmarks/bench_explorer.py)",
        "command": "python -m benchmarks.bench_explorer " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": started.isoformat(timespec="seconds"),
        "units": {"seconds": "s, wall time, best of repeat", "rows_per_second": "rows/s", "parquet_bytes": "bytes"},
        "peer": "pyarrow.parquet.read_table(file).to_pandas() over the same state files, same process",
        "targets": {"load_speed_ratio_at_least": TARGET_LOAD_RATIO, "analysis_seconds_below": TARGET_ANALYSIS_S},
        "repeat": args.repeat,
        "machine": at_start,
        **result,
    }
    report["machine_at_end"] = {"load_average": list(os.getloadavg()),
                                "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

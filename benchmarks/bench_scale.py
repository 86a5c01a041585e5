"""Production-size state on one machine (issue 19): analyses of 100 M-key snapshots under a memory budget.

For each snapshot (``--keys`` keys, default 100 M; an engine savepoint built once and cached
under .cache/scale/ by :mod:`benchmarks._scale_inputs`, and the Flink canonical savepoints
found there, see ``--flink``), each question runs in a fresh Python process opened with
``memory_budget=--budget`` (default 1 GB), so that its figures are those a user meets:

* ``key_group_distribution``: ``snap.key_group_distribution()``;
* ``hot_keys``: ``snap.hot_keys(10, by="bytes")`` and ``by="traffic"`` (one pass: both come
  from what the first gathered, the second figure is the extra time);
* ``diff``: ``explorer.diff(a, b, unchanged=False)`` of the savepoint and its variant (0.5 %
  keys removed, 0.5 % added, 1 % changed);
* ``raw_read``: the peer and the limit, every Parquet file of the same snapshot(s) decoded
  to Arrow with ``pyarrow.parquet.ParquetFile.iter_batches`` (bounded memory too), in the
  same run.

Each records wall seconds, CPU seconds of the process (the fairer figure on a shared
machine), ``peak_rss_mb`` (the child's ``VmHWM``) and the keys, rows and bytes read, with
a summary of the answer. The target: peak RSS at most 2 GB for each.

The other parts of issue 19::

    python -m benchmarks.bench_scale                      # --part local: this machine, 100 M keys
    python -m benchmarks.bench_scale --keys 2000000       # a quick run
    python -m benchmarks.bench_scale --part spark         # (b) Spark local[2], benchmarks/_scale_spark.py
    python -m benchmarks.bench_scale --part s3            # (c) the local S3 server, benchmarks/_scale_s3.py
    python -m benchmarks.bench_scale --only flink         # the Flink savepoints only (python -m
                                                          # benchmarks._scale_flink builds them), keeping
                                                          # the engine's entries of scale.json

``--part spark`` and ``--part s3`` write their figures under the ``spark`` and ``s3`` keys of the same
scale.json, next to the ``local`` ones (each part keeps what the others wrote).

The full run takes long (building 2 x 100 M keys the first time, then each question reads
2.5 GB of Parquet): run it as ``flock /tmp/bench.lock nice -n 5 python -m benchmarks.bench_scale``.
Writes benchmarks/results/scale.json (``--out``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LIMIT_RSS_MB = 2048


def _peak_rss_mb() -> float:
    """This process's peak resident memory: ``VmHWM`` (reset by exec, unlike ``ru_maxrss``, which a
    child started by a big parent inherits)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # not Linux
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


#: files a generator leaves beside a snapshot's own (what it wrote, the build marker): not the snapshot's bytes
_NOT_SNAPSHOT = {"SCALE.json", ".complete", "EXPECTED.json"}


def _files(path: Path) -> list[Path]:
    path = Path(path)
    if (path / "keyed").is_dir():
        return sorted((path / "keyed").rglob("*.parquet"))
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name not in _NOT_SNAPSHOT)


def _is_flink(path: Path) -> bool:
    """A Flink snapshot: a ``_metadata`` and no engine ``keyed/`` folder (an engine savepoint has a ``_metadata``
    too: its raw read decodes its Parquet, it has no key-group streams to scan)."""
    return (Path(path) / "_metadata").exists() and not (Path(path) / "keyed").is_dir()


def _flink_scan(path: Path) -> dict[str, int]:
    """Every entry of a Flink snapshot's key-group streams found without decoding a value: each subtask's
    stream read a few key groups at a time (by range, as the analyses do) and walked with the reader's
    fastest path (``fullformat.scan``: Snappy frames undone, the vectorised entry walk)."""
    from explorer.readers.flink import fullformat
    from explorer.readers.flink.handles import KeyGroupsHandle
    from explorer.readers.flink.reader import FlinkSnapshotReader

    reader = FlinkSnapshotReader(path)
    entries = nbytes = 0
    for op in reader.meta.operators:
        for st in reader._keyed_subtasks(op):
            h = st.managed_keyed
            if not isinstance(h, KeyGroupsHandle) or h.stream is None:
                continue
            header = reader._header(op, st)
            prefix = 2 if op.max_parallelism > 128 else 1
            for lo in range(h.start, h.end + 1, 8):
                data, spans = reader.resolver.read_key_groups(h.stream, h.offsets, h.start, header.end,
                                                              frozenset(range(lo, min(lo + 8, h.end + 1))))
                nbytes += len(data)
                entries += len(fullformat.scan(data, spans, header.compressed, prefix)[1])
    return {"entries": entries, "stream_bytes": nbytes}


def child(task: str, path: str, other: str | None, budget: str) -> dict[str, Any]:
    """One question in this (fresh) process; returns its figures."""
    t0, c0 = time.perf_counter(), _cpu()
    out: dict[str, Any] = {"task": task}
    if task == "raw_read":
        import pyarrow.parquet as pq

        rows = nbytes = 0
        for p in [path] + ([other] if other else []):
            if _is_flink(Path(p)):  # Flink: the files' bytes, read in 16 MiB pieces (no decoding)
                for f in _files(Path(p)):
                    nbytes += f.stat().st_size
                    with open(f, "rb") as fh:
                        while fh.read(1 << 24):
                            pass
                continue
            for f in _files(Path(p)):
                nbytes += f.stat().st_size
                if f.suffix != ".parquet":
                    with open(f, "rb") as fh:
                        while fh.read(1 << 24):
                            pass
                    continue
                for b in pq.ParquetFile(f).iter_batches(batch_size=1 << 18):
                    rows += b.num_rows
        out.update(rows=rows, bytes=nbytes)
    elif task == "raw_scan":  # Flink: every entry found, no value decoded
        found = [_flink_scan(Path(p)) for p in [path] + ([other] if other else [])]
        out.update(rows=sum(f["entries"] for f in found), bytes=sum(f["stream_bytes"] for f in found))
    else:
        import explorer

        snap = explorer.open(path, memory_budget=budget)
        if task == "key_group_distribution":
            d = snap.key_group_distribution()
            imb = snap.imbalance()  # (one row per operator and metric: the worst operator's)
            out["answer"] = {"key_groups": int(len(d)), "keys": int(d["keys"].sum()), "entries": int(d["entries"].sum()),
                             "bytes": int(d["bytes"].sum()), "records": int(d["records"].sum()),
                             "max_over_mean_bytes": float(imb.loc[imb["metric"] == "bytes", "max_over_mean"].max())}
        elif task == "hot_keys":
            h = snap.hot_keys(10, by="bytes")
            t1 = time.perf_counter()
            h2 = snap.hot_keys(10, by="traffic")
            out["traffic_after_bytes_seconds"] = round(time.perf_counter() - t1, 3)
            out["answer"] = {"by_bytes_top3": [[str(k), int(b)] for k, b in zip(h["key"][:3], h["bytes"][:3])],
                             "by_traffic_top3": [[str(k), int(r)] for k, r in zip(h2["key"][:3], h2["records"][:3])]}
        elif task == "diff":
            d = explorer.diff(snap, explorer.open(other, memory_budget=budget), unchanged=False)
            out["answer"] = {"rows": int(len(d)),
                             "statuses": {str(k): int(v) for k, v in d["status"].value_counts().items()}}
        else:
            raise SystemExit(f"unknown task {task!r}")
        out["keys"] = out.get("answer", {}).get("keys")
    out["seconds"] = round(time.perf_counter() - t0, 3)
    out["cpu_seconds"] = round(_cpu() - c0, 3)
    out["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    return out


def _run_child(task: str, path: Path, other: Path | None, budget: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "benchmarks.bench_scale", "--child", task, "--path", str(path), "--budget", budget]
    if other is not None:
        cmd += ["--other", str(other)]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"task": task, "error": proc.stderr.strip()[-2000:], "seconds": round(time.perf_counter() - t, 3)}
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_seconds"] = round(time.perf_counter() - t, 3)  # with Python's start and imports
    return res


def _snapshot_figures(name: str, path: Path, other: Any, keys: int | None, budget: str,
                      save: Any = lambda entry: None) -> dict[str, Any]:
    """The figures of one snapshot; ``other()`` gives the variant for the diff (built when first needed),
    ``save(entry)`` is called after each question (a long run keeps what finished)."""
    files = _files(path)
    entry: dict[str, Any] = {"name": name, "path": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
                             "keys": keys, "files": len(files), "bytes": sum(f.stat().st_size for f in files)}
    raw = _run_child("raw_read", path, None, budget)
    entry["raw_read"] = raw
    entry["rows"] = raw.get("rows")
    print(f"  {name}: raw read {raw.get('seconds')} s, {raw.get('rows')} rows, peak {raw.get('peak_rss_mb')} MB",
          flush=True)
    flink = _is_flink(path)
    if flink:
        entry["raw_scan"] = _run_child("raw_scan", path, None, budget)
        entry["rows"] = entry["raw_scan"].get("rows")
        print(f"  {name}: raw scan {entry['raw_scan'].get('seconds')} s, {entry['rows']} entries", flush=True)
    tasks: dict[str, Any] = {}
    entry["tasks"] = tasks
    for task in ("key_group_distribution", "hot_keys") + (("diff",) if other is not None else ()):
        variant = None
        if task == "diff":
            variant = other()
            entry["variant_bytes"] = sum(f.stat().st_size for f in _files(variant))
        res = _run_child(task, path, variant, budget)
        limit = raw if task != "diff" else _run_child("raw_read", path, variant, budget)
        if task == "diff":
            res["raw_read_both"] = limit
            if flink:
                res["raw_scan_both"] = _run_child("raw_scan", path, variant, budget)
        if "error" not in res:
            res["keys"] = keys if keys is not None else res.get("keys")
            res["ratio_to_raw_read"] = round(limit["seconds"] / res["seconds"], 3) if res["seconds"] else None
            res["meets_rss_limit"] = bool(res["peak_rss_mb"] <= LIMIT_RSS_MB)
        tasks[task] = res
        print(f"  {name}: {task}: {res.get('seconds')} s (cpu {res.get('cpu_seconds')} s), peak "
              f"{res.get('peak_rss_mb')} MB {res.get('answer', res.get('error', ''))}", flush=True)
        save(entry)
    return entry


def _flink_snapshots(cache: Path) -> list[tuple[str, Path, Path | None, int | None]]:
    """Flink canonical savepoints under ``cache`` (``flink-*`` folders holding a ``_metadata``): (name, path,
    the same job's later savepoint for the diff or None, keys). ``benchmarks._scale_flink`` writes them in
    pairs, ``flink-<backend>-a`` and ``-b``, with a ``SCALE.json`` saying what the job wrote."""
    found = {p.name: p for p in sorted(cache.glob("flink-*")) if (p / "_metadata").exists()}
    out = []
    for name, p in found.items():
        if name.endswith("-b") and name[:-2] + "-a" in found:
            continue  # (the diff's other side)
        other = found.get(name[:-2] + "-b") if name.endswith("-a") else None
        keys = None
        if (p / "SCALE.json").exists():
            info = json.loads((p / "SCALE.json").read_text())
            keys = info.get("keys_a")
            name = f"Flink {info.get('flink_version', '')} canonical savepoint, {info.get('backend')} backend"
        out.append((name, p, other, keys))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=["local", "spark", "s3", "all"], default="local",
                    help="all: local, then spark and s3 where their modules are there")
    ap.add_argument("--keys", type=int, default=100_000_000, help="keys of the engine savepoint (default 100 M)")
    ap.add_argument("--budget", default="1GB", help="memory_budget= given to explorer.open (default 1GB)")
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/scale.json")
    ap.add_argument("--cache", type=Path, default=None, help="default: .cache/scale")
    ap.add_argument("--only", choices=["engine", "flink"], default=None,
                    help="--part local, spark or s3: measure only these snapshots, keeping the other entries of the "
                         "results "
                         "file")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--path", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--other", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.path, args.other, args.budget)))
        return 0
    from benchmarks._machine import machine, result_path
    from benchmarks._scale_inputs import CACHE, engine_savepoint

    cache = args.cache or CACHE
    out_path = args.out or result_path("scale")
    started = _dt.datetime.now(_dt.timezone.utc)
    report: dict[str, Any] = {}
    if out_path.exists():
        try:
            report = json.loads(out_path.read_text())
        except json.JSONDecodeError:
            report = {}
    report.update({
        "benchmark": "production-size state on one machine (benchmarks/bench_scale.py)",
        "units": {"seconds": "s, wall time of the question in its own process (after imports)",
                  "process_seconds": "s, the same with Python's start and imports",
                  "cpu_seconds": "s, user + system CPU of that process, all threads",
                  "peak_rss_mb": "MiB, peak resident memory of that process (VmHWM)", "bytes": "bytes of snapshot files"},
        "limit_peak_rss_mb": LIMIT_RSS_MB,
        "peer": "raw_read: every Parquet file of the same snapshot(s) decoded to Arrow with "
                "pyarrow.parquet.ParquetFile.iter_batches, in its own process, same run; for a Flink savepoint "
                "(no Parquet) raw_read is every file's bytes read in 16 MiB pieces (no decoding), and raw_scan "
                "every entry of its key-group streams found by the reader's fastest path (Snappy frames undone, "
                "the vectorised entry walk of fullformat.scan, a few key groups at a time) with no value decoded",
    })
    t_build = time.perf_counter()
    engine = args.only != "flink"
    path = engine_savepoint(args.keys, cache=cache) if engine or args.part not in ("local", "spark", "s3") else None
    built = round(time.perf_counter() - t_build, 1)

    def variant() -> Path:
        return engine_savepoint(args.keys, variant=True, cache=cache)

    def write() -> None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")

    for part in (("spark", "s3") if args.part == "all" else (args.part,) if args.part != "local" else ()):
        mod_name = f"benchmarks._scale_{part}"
        try:
            mod = importlib.import_module(mod_name)
        except ImportError:
            print(f"{mod_name} is not there yet: nothing to run for --part {part}", file=sys.stderr)
            if args.part != "all":
                return 1
            continue
        holder: dict[str, Any] = {}
        started_part = _dt.datetime.now(_dt.timezone.utc)
        if part == "s3":  # the engine savepoint and the Flink ones, each diffed with its twin, cold and warm
            mod.run_scale(path, variant, args.keys, _flink_snapshots(cache), report, write, args.budget, args.only)
            report["s3"].update(keys=args.keys, date=started_part.isoformat(timespec="seconds"),
                                command="python -m benchmarks.bench_scale " + " ".join(
                                    argv if argv is not None else sys.argv[1:]))
            write()
            continue
        command = "python -m benchmarks.bench_scale " + " ".join(argv if argv is not None else sys.argv[1:])

        def save_part(got: dict[str, Any], part: str = part) -> None:
            report[part] = {**got, "keys": args.keys, "command": command,
                            "date": started_part.isoformat(timespec="seconds")}
            write()

        if part == "spark":  # the engine savepoint and its variant, the Flink pairs; --only: some of them
            mod.run(path if args.only != "flink" else None, holder,
                    diff_with=variant() if args.only != "flink" else None,
                    flink=_flink_snapshots(cache) if args.only != "engine" else [], local=report.get("local"),
                    previous=report.get("spark"), save=save_part)
        else:
            mod.run(path, holder)
        save_part(holder.get(part, holder))
    if args.part in ("local", "all"):
        machine_at_start = machine()
        command = "python -m benchmarks.bench_scale " + " ".join(argv if argv is not None else sys.argv[1:])
        run = {"command": command, "date": started.isoformat(timespec="seconds"), "budget": args.budget,
               "machine": machine_at_start}
        # --only: this run's snapshots replace their own entries, the others' stay with their run's figures
        old = report.get("local") or {}
        kept = [dict(e, run=e.get("run") or {k: old.get(k) for k in ("command", "date", "budget", "machine")})
                for e in old.get("snapshots", []) if args.only is not None
                and (str(e.get("path", "")).split("/")[-1].startswith("flink-")) != (args.only == "flink")]
        local = {**run, "snapshots": kept}
        report["local"] = local

        def keep(entry: dict[str, Any]) -> None:
            if args.only is not None:
                entry["run"] = run
            if entry not in local["snapshots"]:
                local["snapshots"].append(entry)
            write()

        if engine:
            print(f"engine savepoint of {args.keys:,} keys: {path} (ready in {built} s)", flush=True)
            _snapshot_figures("engine savepoint (canonical Parquet)", path, variant, args.keys, args.budget, keep)
        if args.only != "engine":
            flink = _flink_snapshots(cache)
            for name, fpath, other, keys in flink:
                _snapshot_figures(name, fpath, (lambda o=other: o) if other is not None else None, keys,
                                  args.budget, keep)
            if not flink:
                local["flink_note"] = (f"no Flink canonical savepoint under {cache} (flink-*/ with a _metadata; "
                                       "python -m benchmarks._scale_flink builds them): none measured in this run")
        local["machine_at_end"] = {"load_average": list(os.getloadavg()),
                                   "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        report["local"] = local
    write()
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

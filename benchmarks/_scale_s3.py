"""Snapshots on an object store: what each question fetches, cold and with a warm cache (issue 19 (c)).

``run(path, results, other=...)`` uploads a local snapshot (any format ``explorer.open`` reads; only its
own files, not a generator's notes beside them) and, for the diff, its later twin to an S3 server on
localhost (moto's server mode, the test suite's: a real HTTP S3 endpoint reached through pyarrow's S3
client as AWS would be), then asks each question twice, each time in a fresh process opened with
``memory_budget="1GB"`` (a snapshot bigger than that is streamed key-group range by key-group range,
read by range from the store): first with an empty cache (``cold``), then again (``warm``: what the
file cache, its whole files and its byte ranges, saves). The questions:

* ``one_state``: ``key_group_distribution(operator=OP, state=ST)`` of the largest keyed state: bytes
  fetched against the bytes that state's files occupy (target: at most 1.1x; a Flink canonical
  savepoint writes every state of an operator interleaved in each key group's span, so there the
  bytes of the operator's key-group streams are the least a state can cost, and that is the
  denominator given);
* ``key_group_distribution``: every operator; ``hot_keys``: ``hot_keys(10, by="bytes")``;
* ``diff``: ``explorer.diff(a, b, unchanged=False)`` of the two snapshots, both read from S3.

Beside each, ``raw_read_same_objects``: the objects that question fetched (the cache's record of
them), each read whole in one GET from the same server with pyarrow's S3 filesystem alone, nothing
decoded, in its own process in the same run: the limit. (Read in 8 MiB pieces instead, as
``open_input_stream`` does, 2.2 GB took 263 s here: moto reads the whole object into memory for every
GET, ranged or not, a cost of the test server that a ranged reader pays per request.) Also recorded: the server's own peak memory (moto runs
in this process: its objects are spooled to temporary files on disk beyond 5 MiB, but every GET,
ranged or not, reads the whole object into memory to cut the range), upload time, load, date.

``benchmarks/bench_scale.py --part s3`` calls :func:`run_scale` for its snapshots; alone:

    python -m benchmarks._scale_s3 PATH [--other PATH_B] [--out benchmarks/results/scale_s3.json]
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from ._machine import machine, result_path

ROOT = Path(__file__).resolve().parents[1]
#: files a generator leaves beside a snapshot's own: not uploaded, not counted
NOT_SNAPSHOT = {"SCALE.json", ".complete", "EXPECTED.json"}
QUESTIONS = ("one_state", "key_group_distribution", "hot_keys", "diff")


def _peak_rss_mb() -> float:
    """This process's peak resident memory (``VmHWM``: reset by exec, unlike ``ru_maxrss``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _snapshot_files(folder: Path) -> list[Path]:
    return sorted(f for f in Path(folder).rglob("*") if f.is_file() and f.name not in NOT_SNAPSHOT)


def _folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in _snapshot_files(folder))


def _largest_state(path: Path, operator: str | None) -> dict[str, Any]:
    """The operator and state asked about (the keyed ones with the most bytes unless named) and the bytes
    they occupy: engine, the state's own files; Flink, the operator's key-group streams (its handles)."""
    import explorer

    snap = explorer.open(path)
    subs = snap.subtasks
    per_op: dict[str, int] = {}
    if "bytes" in subs:
        per_op = {str(k): int(v) for k, v in subs.groupby("operator")["bytes"].sum().items()}
    ops = snap.operators
    if not per_op and "bytes" in ops:
        per_op = {str(o): int(b) for o, b in zip(ops["operator"], ops["bytes"])}
    states = snap.states
    keyed = set(states["operator"])
    if operator is None:
        candidates = {o: b for o, b in per_op.items() if o in keyed} or {o: 0 for o in keyed}
        operator = max(candidates, key=lambda o: candidates[o])
    names = [str(s) for s, k in zip(states.loc[states["operator"] == operator, "state"],
                                   states.loc[states["operator"] == operator, "kind"]) if "timer" not in str(k)]
    per_state = {s: sum(f.stat().st_size for f in (Path(path) / "keyed" / operator / s).glob("*"))
                 for s in names if (Path(path) / "keyed" / operator / s).is_dir()}
    if per_state:  # engine: one folder of files per state
        state = max(per_state, key=lambda s: per_state[s])
        return {"operator": operator, "operator_state_bytes": per_op.get(operator), "state": state,
                "state_bytes": per_state[state], "state_bytes_are": "the state's own files"}
    state = names[0]
    return {"operator": operator, "operator_state_bytes": per_op.get(operator), "state": state,
            "state_bytes": per_op.get(operator),
            "state_bytes_are": "the operator's key-group streams: a canonical savepoint interleaves every state of "
                               "the operator within each key group's span, so no state can be fetched alone"}


# --- children (each a fresh process) -------------------------------------------------------

def _question(task: str, url: str, other: str, operator: str, state: str, budget: str) -> dict[str, Any]:
    import explorer
    from explorer.storage import fetch_stats

    t0, c0 = time.perf_counter(), time.process_time()
    snap = explorer.open(url, memory_budget=budget)
    opened = fetch_stats()["bytes_fetched"]
    out: dict[str, Any] = {"task": task}
    if task == "one_state":
        d = snap.key_group_distribution(operator=operator, state=state)
        out["question"] = f"key_group_distribution(operator={operator!r}, state={state!r})"
        out["answer"] = {"keys": int(d["keys"].sum()), "entries": int(d["entries"].sum()),
                         "entry_bytes": int(d["bytes"].sum())}
    elif task == "key_group_distribution":
        d = snap.key_group_distribution()
        out["question"] = "key_group_distribution()"
        out["answer"] = {"key_groups": int(len(d)), "keys": int(d["keys"].sum()), "entries": int(d["entries"].sum()),
                         "entry_bytes": int(d["bytes"].sum())}
    elif task == "hot_keys":
        h = snap.hot_keys(10, by="bytes")
        out["question"] = "hot_keys(10, by='bytes')"
        out["answer"] = {"by_bytes_top3": [[str(k), int(b)] for k, b in zip(h["key"][:3], h["bytes"][:3])]}
    elif task == "diff":
        d = explorer.diff(snap, explorer.open(other, memory_budget=budget), unchanged=False)
        out["question"] = "explorer.diff(a, b, unchanged=False)"
        out["answer"] = {"rows": int(len(d)), "statuses": {str(k): int(v) for k, v in d["status"].value_counts().items()}}
    else:
        raise SystemExit(f"unknown task {task!r}")
    out["keys"] = out["answer"].get("keys")
    out.update({"memory_budget": budget, "wall_seconds": round(time.perf_counter() - t0, 3),
                "cpu_seconds": round(time.process_time() - c0, 3), "peak_rss_mb": _peak_rss_mb(),
                "bytes_fetched_opening": opened, **fetch_stats()})
    return out


def _raw(urls: list[str]) -> dict[str, Any]:
    """The same objects read whole with pyarrow's S3 filesystem, one GET each, nothing decoded."""
    from explorer.storage import as_path

    t0, c0 = time.perf_counter(), time.process_time()
    total = 0
    for u in urls:  # one GET per object (moto reads a whole object for every GET, ranged or not)
        p = as_path(u)
        with p.store.fs.open_input_file(p.key) as f:
            total += len(f.read())
    return {"bytes": total, "objects": len(urls), "wall_seconds": round(time.perf_counter() - t0, 3),
            "cpu_seconds": round(time.process_time() - c0, 3), "peak_rss_mb": _peak_rss_mb()}


def _child(env: dict[str, str], *args: str) -> dict[str, Any]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "benchmarks._scale_s3", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip()[-3000:], "process_seconds": round(time.perf_counter() - t, 3)}
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process_seconds"] = round(time.perf_counter() - t, 3)  # with Python's start and imports
    return res


def _cached_objects(cache_dir: Path) -> list[str]:
    """The URLs of the objects in the cache: whole-file entries and byte-range entries."""
    return sorted({json.loads(side.read_text())["url"] for side in (cache_dir / "objects").glob("*/*.json")})


# --- one snapshot ------------------------------------------------------------------------

def run(snapshot_path: str | Path, results: dict, operator: str | None = None, other: str | Path | None = None,
        name: str | None = None, keys: int | None = None, budget: str = "1GB",
        questions: tuple[str, ...] = QUESTIONS, server: Any = None) -> dict:
    """Measure ``snapshot_path`` (and the diff against ``other``) served from a local S3 server (see module
    doc); the figures go to ``results["s3"]`` (also returned)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.s3 import S3Server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # (the server's line per request)
    snapshot_path = Path(snapshot_path)
    own_server = server is None
    server = server or S3Server()
    about = _largest_state(snapshot_path, operator)
    work = Path(tempfile.mkdtemp(prefix="state-explorer-bench-s3-"))
    cache = work / "cache"
    started = _dt.datetime.now(_dt.timezone.utc)
    entry: dict[str, Any] = {"name": name or snapshot_path.name, "snapshot": str(snapshot_path), "keys": keys,
                             "snapshot_bytes": _folder_bytes(snapshot_path), **about,
                             "memory_budget": budget, "date": started.isoformat(timespec="seconds"),
                             "load_before": list(os.getloadavg())}
    uploaded: list[tuple[str, str]] = []
    try:
        t = time.perf_counter()
        url = _upload(server, snapshot_path, uploaded)
        other_url = None
        if other is not None and "diff" in questions:
            other_url = _upload(server, Path(other), uploaded)
            entry.update(other=str(other), other_url=other_url, other_bytes=_folder_bytes(Path(other)))
        entry.update(url=url, upload_seconds=round(time.perf_counter() - t, 2),
                     server_peak_rss_mb_after_upload=_peak_rss_mb())
        env = {**os.environ, **server.env(), "STATE_EXPLORER_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT),
               "TQDM_DISABLE": "1"}
        entry["questions"] = {}
        raws: dict[tuple[str, ...], dict[str, Any]] = {}
        for task in questions:
            if task == "diff" and other_url is None:
                continue
            shutil.rmtree(cache, ignore_errors=True)
            args = ("--question", task, url, other_url or "", entry["operator"], entry["state"], budget)
            cold = _child(env, *args)
            objects = tuple(_cached_objects(cache))
            warm = _child(env, *args)
            if objects not in raws:
                raws[objects] = _child(env, "--raw", *objects) if objects else {}
            q = {"cold": cold, "warm_cache": warm, "raw_read_same_objects": raws[objects]}
            fetched = cold.get("bytes_fetched")
            if fetched is not None:
                q["cold_fetched_over_snapshot"] = round(fetched / (entry["snapshot_bytes"] + (
                    entry.get("other_bytes") or 0 if task == "diff" else 0)), 4)
                if task == "one_state" and entry.get("state_bytes"):
                    q["question_fetched_over_state_bytes"] = round(
                        (fetched - cold["bytes_fetched_opening"]) / entry["state_bytes"], 4)
                    q["target"] = "bytes fetched for a one-state question <= 1.1x the bytes that state occupies"
                raw_wall = raws[objects].get("wall_seconds")
                q["cold_over_raw_wall"] = round(cold["wall_seconds"] / raw_wall, 2) if raw_wall else None
                q["warm_fetched_over_cold_fetched"] = (round(warm.get("bytes_fetched", 0) / fetched, 4)
                                                       if fetched else None)
            entry["questions"][task] = q
            print(f"  {entry['name']}: {task}: cold {cold.get('wall_seconds')} s fetched "
                  f"{cold.get('bytes_fetched')} B peak {cold.get('peak_rss_mb')} MB; warm {warm.get('wall_seconds')} "
                  f"s fetched {warm.get('bytes_fetched')} B; raw {raws[objects].get('wall_seconds')} s "
                  f"{cold.get('answer', cold.get('error', ''))}", flush=True)
            entry["server_peak_rss_mb"] = _peak_rss_mb()
    finally:
        for bucket, key in uploaded:  # frees the server's spooled files
            try:
                server.client.delete_object(Bucket=bucket, Key=key)
            except Exception:  # noqa: BLE001 - a benchmark's clean-up
                pass
        if own_server:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    entry["load_after"] = list(os.getloadavg())
    entry["units"] = {"*_bytes, bytes_fetched*": "bytes", "*_seconds": "seconds",
                      "peak_rss_mb": "MiB, VmHWM of the process (server_*: this process, the S3 server's)"}
    entry["notes"] = ("cold, warm_cache and raw_read_same_objects each ran in a fresh process; the cache is emptied "
                      "before each question's cold run; the S3 server (moto, in the parent process) shares the "
                      "machine's 2 CPUs with them")
    results["s3"] = entry
    return entry


def _upload(server: Any, folder: Path, uploaded: list[tuple[str, str]]) -> str:
    """The snapshot's own files (not a generator's notes) to ``s3://bench/<folder name>/``."""
    from boto3.s3.transfer import TransferConfig

    single = TransferConfig(multipart_threshold=4 << 30, max_concurrency=1)  # one PUT per file
    bucket = server.bucket("bench")
    for f in _snapshot_files(folder):
        key = f"{folder.name}/{f.relative_to(folder).as_posix()}"
        server.client.upload_file(str(f), bucket, key, Config=single)
        uploaded.append((bucket, key))
    return f"s3://{bucket}/{folder.name}"


# --- what bench_scale measures --------------------------------------------------------------

def run_scale(engine: Path | None, engine_variant: Callable[[], Path] | None, engine_keys: int | None,
              flink: list[tuple[str, Path, Path | None, int | None]], report: dict[str, Any],
              save: Callable[[], None], budget: str = "1GB", only: str | None = None) -> dict[str, Any]:
    """The engine savepoint (diffed with its variant) and the Flink canonical savepoints (a diffed with b)
    from the S3 server, into ``report["s3"]["snapshots"]`` (``only``: "engine" or "flink" replaces only
    those entries, the others are kept); ``save()`` after each snapshot."""
    from tests.support.s3 import S3Server

    old = report.get("s3") or {}
    if old and "snapshots" not in old:
        report["s3_before_range_cache"] = old  # the figures of the run before ranged reads were cached
        old = {}
    kept = [e for e in old.get("snapshots", []) if only is not None
            and str(e.get("snapshot", "")).split("/")[-1].startswith("flink-") != (only == "flink")]
    out: dict[str, Any] = {"snapshots": kept, "machine": machine(), "memory_budget": budget}
    report["s3"] = out
    server = S3Server()
    try:
        todo: list[tuple[str, Path, Any, int | None]] = []
        if engine is not None and only != "flink":
            todo.append(("engine savepoint (canonical Parquet)", engine, engine_variant, engine_keys))
        if only != "engine":
            todo.extend((n, p, (lambda o=o: o) if o is not None else None, k) for n, p, o, k in flink)
        for name, path, other, keys in todo:
            holder: dict[str, Any] = {}
            print(f"S3: {name}: {path}", flush=True)
            entry = run(path, holder, other=other() if other is not None else None, name=name, keys=keys,
                        budget=budget, server=server)
            out["snapshots"] = [e for e in out["snapshots"] if e.get("snapshot") != entry["snapshot"]] + [entry]
            save()
    finally:
        server.stop()
    out["server_peak_rss_mb"] = _peak_rss_mb()
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--question":
        task, url, other, operator, state, budget = argv[1:7]
        print(json.dumps(_question(task, url, other, operator, state, budget)))
        return 0
    if argv and argv[0] == "--raw":
        print(json.dumps(_raw(argv[1:])))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", type=Path, metavar="PATH")
    ap.add_argument("--other", type=Path, default=None, help="the later snapshot, for the diff")
    ap.add_argument("--operator", default=None)
    ap.add_argument("--budget", default="1GB")
    ap.add_argument("--questions", default=",".join(QUESTIONS))
    ap.add_argument("--out", type=Path, default=result_path("scale_s3"))
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    run(args.path, results, args.operator, other=args.other, budget=args.budget,
        questions=tuple(args.questions.split(",")))
    report: dict[str, Any] = {"runs": []}
    if args.out.exists():  # the other snapshots' runs stay
        try:
            report = json.loads(args.out.read_text())
        except json.JSONDecodeError:
            pass
    entry = dict(results["s3"], command="python -m benchmarks._scale_s3 " + " ".join(map(str, argv)),
                 machine=machine())
    report["runs"] = [r for r in report.get("runs", []) if r.get("snapshot") != entry["snapshot"]] + [entry]
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The ``state-explorer`` command.

::

    state-explorer demo [--out out]                 run every example pipeline, checkpoint, savepoint, summarise
    state-explorer run NAME [--parallelism P] [--backend heap|rocksdb] [--from-savepoint PATH] ...
    state-explorer savepoint NAME --after-records N -o PATH   run, then stop with a savepoint
    state-explorer inspect PATH [--ttl STATE=1h] [--uids a,b]   summary of a checkpoint or savepoint
    state-explorer report PATH -o report.html       HTML report with the charts (every format)

PATH is a savepoint or checkpoint folder, a checkpoint directory, or a Flink ``_metadata``
file. Options are checked by argparse: a bad value is a usage error, never a traceback.
    state-explorer list                             the example pipelines
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

import pandas as pd

from . import analysis
from .errors import StateExplorerError
from .format.snapshot import read_metadata
from .pipelines import PIPELINES
from .plots.format import human_bytes as _human_bytes
from .report import build_report, summary_text
from .catalog import list_snapshots
from .snapshot import open as open_snapshot
from .spark.demo import run_spark_demo


# --- argparse types: a bad value is a usage error (exit 2 with the usage), not a traceback --------
def _whole_number(least: int):
    """An argparse type: an integer of at least ``least`` (a bad value is a usage error)."""
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"found {text!r}, expected a whole number of at least {least}") from None
        if v < least:
            raise argparse.ArgumentTypeError(f"found {v}, expected a whole number of at least {least}")
        return v
    return parse


#: an integer of at least 1
positive_int = _whole_number(1)
#: an integer of at least 0
non_negative_int = _whole_number(0)


def parallelism_list(text: str) -> list[int]:
    """Comma-separated parallelisms, each at least 1: ``2,4,8``."""
    out = []
    for part in text.split(","):
        try:
            out.append(positive_int(part.strip()))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"in {text!r}: {exc}; expected comma-separated parallelisms such as "
                                             "2,4,8") from None
    return out


def ttl_option(text: str) -> tuple[str, timedelta]:
    """``STATE=DURATION`` for ``--ttl``: ``last_seen=1h``, ``per_category=2d``, ``dedup=86400000`` (ms)."""
    name, sep, dur = text.partition("=")
    if not sep or not name.strip() or not dur.strip():
        raise argparse.ArgumentTypeError(f"found {text!r}, expected STATE=DURATION such as last_seen=1h")
    dur = dur.strip()
    try:
        td = pd.Timedelta(int(dur), unit="ms") if dur.isdigit() else pd.Timedelta(dur)
    except ValueError:
        raise argparse.ArgumentTypeError(f"in {text!r}: found the duration {dur!r}, expected a duration such as "
                                         "30min, 1h, 2d or milliseconds") from None
    if td <= pd.Timedelta(0):
        raise argparse.ArgumentTypeError(f"in {text!r}: expected a positive duration")
    return name.strip(), td.to_pytimedelta()


def uid_list(text: str) -> list[str]:
    """Comma-separated operator uids: ``user-state,bucket-state``."""
    uids = [u.strip() for u in text.split(",") if u.strip()]
    if not uids:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected comma-separated operator uids")
    return uids


def open_for_cli(path: str, ttl: list[tuple[str, timedelta]] | None = None, uids: list[str] | None = None):
    """Open ``path``; ``--ttl`` and ``--uids`` go to an Apache Flink snapshot (others store their TTLs
    and names themselves, and saying so is clearer than ignoring the options)."""
    snap = open_snapshot(path)
    options = {}
    if ttl:
        options["ttl"] = dict(ttl)
    if uids:
        options["uids"] = uids
    if not options:
        return snap
    if not snap.format.startswith("flink"):
        raise StateExplorerError(f"{path}: --ttl and --uids apply to Apache Flink snapshots; found a {snap.format}, "
                                 "which stores its TTLs and operator names itself")
    return open_snapshot(path, **options)


def run_pipeline(name: str, *, records: int | None, parallelism: int, backend: str, out: Path | None,
                 checkpoint_every: int | None = None, from_savepoint: Path | None = None,
                 savepoint_to: Path | None = None, stop_after: int | None = None, seed: int = 0,
                 max_parallelism: int | None = None, batch_size: int = 1024, quiet: bool = False,
                 savepoint_at: float | None = None) -> dict[str, Any]:
    """Run one example pipeline; optionally checkpoint, restore, and end with a savepoint."""
    pipes = PIPELINES
    if name not in pipes:
        raise StateExplorerError(f"no pipeline named {name!r}; the pipelines are {sorted(pipes)}")
    pipe = pipes[name]
    n = records or pipe.default_records
    t0 = time.perf_counter()
    data = pipe.generate(n, seed=seed)
    t_gen = time.perf_counter() - t0
    state_dir = (out / "rocksdb-working") if (out is not None and backend == "rocksdb") else None
    env = pipe.make_env(parallelism, max_parallelism=max_parallelism, state_backend=backend,
                        batch_size=batch_size, state_dir=state_dir)
    if checkpoint_every and out is not None:
        env.enable_checkpointing(out / "checkpoints", interval_records=checkpoint_every, retained=3)
    pipe.build(env, data)
    if out is not None:
        (out / "output").mkdir(parents=True, exist_ok=True)
    t1 = time.perf_counter()
    client = env.execute_async(name, restore_from=from_savepoint)
    read = lambda rt: sum(s.operator.records_in for s in rt.subtasks if s.is_source)  # noqa: E731
    sp = None
    if savepoint_to is not None and savepoint_to.exists():
        shutil.rmtree(savepoint_to)
    if stop_after is not None:
        client.run(until=lambda rt: read(rt) >= stop_after)
    elif savepoint_at is not None and savepoint_to is not None:
        # a savepoint while the job still has open sessions, pending timers and live keys
        client.run(until=lambda rt: read(rt) >= savepoint_at * n)
        sp = client.trigger_savepoint(savepoint_to)
        client.run()
    else:
        client.run()
    elapsed = time.perf_counter() - t1
    if savepoint_to is not None and sp is None:
        sp = client.trigger_savepoint(savepoint_to)
    client.close()
    result = client.result()
    summary = _summarise(name, result, n, elapsed, sp)
    summary["generate_s"] = round(t_gen, 3)
    summary["checkpoints"] = len([h for h in client.checkpoint_history if h["status"] == "completed" and not h.get("savepoint")])
    if out is not None:
        for sink_name, values in result.outputs.items():
            with open(out / "output" / f"{sink_name}.jsonl", "w", encoding="utf-8") as f:
                for v in values:
                    f.write(json.dumps(v, default=_json_default) + "\n")
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if not quiet:
        _print_summary(summary)
    return summary


def _json_default(o: Any) -> Any:
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    return str(o)


def _summarise(name: str, result, records: int, elapsed: float, savepoint: Path | None) -> dict[str, Any]:
    """What a run leaves: with a savepoint, its keys, entries and hottest keys are the savepoint's (what
    a user opens afterwards, taken mid-run by ``make demo``), else the live state at the end of the run."""
    summary = {
        "pipeline": name,
        "records": records,
        "seconds": round(elapsed, 3),
        "records_per_s": round(records / elapsed) if elapsed else None,
        "outputs": {k: len(v) for k, v in result.outputs.items()},
    }
    if savepoint is not None:
        meta = read_metadata(savepoint)
        snap = open_snapshot(savepoint)
        rows = snap.keyed_state(columns=["operator", "kind", "key"])
        rows = rows[~rows["kind"].isin(["event_timer", "processing_timer"])]
        hk = analysis.hot_keys(snap, n=5, by="traffic")
        summary.update({
            "described": "savepoint",
            "keys": int(rows["key"].map(repr).nunique()) if len(rows) else 0,
            "state_entries": int(len(rows)),
            "hottest_keys": [{"operator": r.operator, "key": str(r.key), "records": int(r.records)}
                             for r in hk.sort_values("records", ascending=False, kind="stable").itertuples()][:5],
            "savepoint": str(savepoint),
            "state_bytes": meta["timing"]["bytes"],
        })
        return summary
    ops = result.operators()
    keyed = ops[ops["keyed"]]
    state = result.state()
    hot = []
    for op in keyed["operator"]:
        hh = result.heavy_hitters(op, n=5)
        hot.extend({"operator": op, "key": str(k), "records": int(c)} for k, c in zip(hh["key"], hh["count"]))
    summary.update({
        "described": "end of run",
        "keys": int(state["key"].map(repr).nunique()) if len(state) else 0,
        "state_entries": int(len(state)),
        "hottest_keys": sorted(hot, key=lambda h: -h["records"])[:5],
    })
    return summary


def _print_summary(s: dict[str, Any]) -> None:
    where = "in the savepoint" if s.get("described") == "savepoint" else "at the end"
    line = (f"{s['pipeline']:<14} {s['records']:>9,} records  {s['seconds']:>7.2f} s  "
            f"{(s['records_per_s'] or 0):>10,} rec/s  {s['keys']:>7,} keys  {s['state_entries']:>8,} entries {where}")
    if "state_bytes" in s:
        line += f"  {_human_bytes(s['state_bytes']):>9} savepoint"
    print(line)
    if s["hottest_keys"]:
        tops = ", ".join(f"{h['key']} ({h['records']:,})" for h in s["hottest_keys"][:3])
        print(f"{'':<14} hottest keys {where}: {tops}")


def cmd_demo(args) -> int:
    out = Path(args.out)
    if out.exists():
        shutil.rmtree(out)
    pipes = PIPELINES
    print(f"State Explorer demo: {len(pipes)} pipelines, parallelism {args.parallelism}, backends {args.backends}")
    print(f"writing outputs, checkpoints and savepoints under {out}/\n")
    for backend in args.backends.split(","):
        print(f"== {backend} backend")
        for name, pipe in pipes.items():
            target = out / name / backend
            run_pipeline(name, records=args.records or None, parallelism=args.parallelism, backend=backend,
                         out=target, checkpoint_every=max(1, (args.records or pipe.default_records) // 4),
                         savepoint_to=target / "savepoint", seed=args.seed, max_parallelism=args.max_parallelism,
                         batch_size=args.batch_size, savepoint_at=0.8)
        print()
    if not args.no_spark:
        _spark_demo(out)
    print(f"Open a snapshot:  python -c \"import explorer; print(explorer.open('{out}/url_counts/heap/savepoint'))\"")
    print(f"Or in a terminal: state-explorer inspect {out}/url_counts/heap/savepoint")
    return 0


def _spark_demo(out: Path) -> None:
    """Every example pipeline on local Spark, compared with the engine, each checkpoint opened
    (one line each; the JVM's and Spark's own output go to out/spark/spark.log)."""
    print("== Spark (local[2], RocksDB state store): every pipeline, outputs compared with the engine")
    s = run_spark_demo(out)
    print(f"summary: {out}/spark/summary.json, Spark's log: {s['log']}")
    print()


def cmd_run(args) -> int:
    run_pipeline(args.name, records=args.records, parallelism=args.parallelism, backend=args.backend,
                 out=Path(args.out) if args.out else None, checkpoint_every=args.checkpoint_every,
                 from_savepoint=Path(args.from_savepoint) if args.from_savepoint else None,
                 savepoint_to=Path(args.savepoint) if args.savepoint else None, seed=args.seed,
                 max_parallelism=args.max_parallelism, batch_size=args.batch_size)
    return 0


def cmd_savepoint(args) -> int:
    s = run_pipeline(args.name, records=args.records, parallelism=args.parallelism, backend=args.backend,
                     out=None, savepoint_to=Path(args.output), stop_after=args.after_records, seed=args.seed,
                     max_parallelism=args.max_parallelism, batch_size=args.batch_size, quiet=True)
    print(f"savepoint written to {s['savepoint']} ({_human_bytes(s['state_bytes'])})")
    return 0


def cmd_inspect(args) -> int:
    snap = open_for_cli(args.path, args.ttl, args.uids)
    print(summary_text(snap, top=args.top))
    return 0


def cmd_ls(args) -> int:
    df = list_snapshots(args.path)
    if df.empty:
        print(f"{args.path}: no checkpoints or savepoints found")
        return 0
    out = df.copy()
    out["size"] = [_human_bytes(int(b)) for b in out["size_bytes"]]
    out["time"] = [t.strftime("%Y-%m-%d %H:%M:%S") if pd.notna(t) else "-" for t in out["time"]]
    out["complete"] = ["yes" if c else "NO" for c in out["complete"]]
    cols = ["id", "kind", "format", "time", "size", "files", "complete", "path"]
    print(out[cols].fillna("-").to_string(index=False))
    for _, r in df[df["note"].notna()].iterrows():
        print(f"note: {r['path']}: {r['note']}")
    return 0


def cmd_report(args) -> int:
    snap = open_for_cli(args.path, args.ttl, args.uids)
    history_dir = Path(args.path) if Path(args.path).is_dir() and not (Path(args.path) / "_metadata").exists() else None
    out = build_report(snap, Path(args.output), top=args.top, history_dir=history_dir, parallelisms=args.parallelisms,
                       plotly_js="inline" if args.self_contained else "shared")
    shared = "" if args.self_contained else " plus the shared plotly.js beside it"
    print(f"report written to {out} ({_human_bytes(out.stat().st_size)}{shared})")
    return 0


def cmd_list(args) -> int:
    for name, pipe in PIPELINES.items():
        print(f"{name:<14} {pipe.description}")
    return 0


def cmd_verify(args) -> int:
    """Check a snapshot's files without decoding values; exit 1 when any is missing, damaged or outside."""
    from .verification import verify  # (this command's own import, kept in its hunk)

    report = verify(args.path, allow_roots=args.allow_root or None)
    shown = report.checks if not args.problems else report.problems
    lines = [report.summary()] + [f"  {c.status:<8} {c.file}: {c.detail}" for c in shown]
    for line in lines:  # names come from the snapshot: control characters shown escaped, never sent to the terminal
        print("".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line))
    return 0 if report.ok else 1


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parallelism", "-p", type=positive_int, default=2)
    p.add_argument("--max-parallelism", type=positive_int, default=None)
    p.add_argument("--records", "-n", type=positive_int, default=None, help="input records (default: the pipeline's)")
    p.add_argument("--seed", type=non_negative_int, default=0)
    p.add_argument("--batch-size", type=positive_int, default=1024)


def _snapshot_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ttl", type=ttl_option, action="append", metavar="STATE=DURATION",
                   help="a Flink state's TTL, which Flink does not store (repeatable): --ttl last_seen=1h")
    p.add_argument("--uids", type=uid_list, default=None, metavar="UID,UID",
                   help="the job's operator uids, to name operators of Flink snapshots that store only IDs")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="state-explorer", description="Explore the state of stream jobs.")
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="run every example pipeline with checkpoints and a final savepoint")
    _common(d)
    d.add_argument("--out", default="out")
    d.add_argument("--backends", default="heap,rocksdb")
    d.add_argument("--no-spark", action="store_true", help="skip the local Spark part")
    d.set_defaults(fn=cmd_demo)
    r = sub.add_parser("run", help="run one example pipeline")
    r.add_argument("name")
    _common(r)
    r.add_argument("--backend", default="heap", choices=["heap", "rocksdb"])
    r.add_argument("--out", default=None)
    r.add_argument("--checkpoint-every", type=positive_int, default=None, help="checkpoint every N source records (needs --out)")
    r.add_argument("--from-savepoint", default=None)
    r.add_argument("--savepoint", default=None, help="take a savepoint into this folder at the end")
    r.set_defaults(fn=cmd_run)
    s = sub.add_parser("savepoint", help="run a pipeline and stop it with a savepoint")
    s.add_argument("name")
    _common(s)
    s.add_argument("--backend", default="heap", choices=["heap", "rocksdb"])
    s.add_argument("--after-records", type=positive_int, default=None)
    s.add_argument("--output", "-o", required=True)
    s.set_defaults(fn=cmd_savepoint)
    i = sub.add_parser("inspect", help="summarise a checkpoint or savepoint")
    i.add_argument("path", help="a checkpoint, savepoint, checkpoint directory or Flink _metadata file")
    i.add_argument("--top", type=positive_int, default=5, help="how many hot keys to list")
    _snapshot_options(i)
    i.set_defaults(fn=cmd_inspect)
    rp = sub.add_parser("report", help="write a self-contained HTML report with the charts")
    rp.add_argument("path", help="a checkpoint, savepoint, Flink _metadata file, or checkpoint directory (adds "
                                 "the history)")
    rp.add_argument("--output", "-o", default="report.html")
    rp.add_argument("--top", type=positive_int, default=10, help="how many hot keys to chart")
    rp.add_argument("--parallelisms", type=parallelism_list, default=None,
                    help="comma-separated candidates for the rescale what-if: 2,4,8")
    rp.add_argument("--self-contained", action="store_true",
                    help="put plotly.js in the page (one file that opens anywhere) instead of one shared copy beside it")
    _snapshot_options(rp)
    rp.set_defaults(fn=cmd_report)
    ls = sub.add_parser("ls", help="list the checkpoints and savepoints under a path (local, s3://, gs://, ...)")
    ls.add_argument("path", help="a folder: a job's checkpoint directory, a folder of savepoints, a bucket prefix")
    ls.set_defaults(fn=cmd_ls)
    lst = sub.add_parser("list", help="list the example pipelines")
    lst.set_defaults(fn=cmd_list)
    v = sub.add_parser("verify", help="check every file of a snapshot (checksums, sizes, paths) without decoding "
                                      "values; exit 1 when anything is wrong")
    v.add_argument("path", help="a checkpoint, savepoint, checkpoint directory or Spark checkpoint")
    v.add_argument("--allow-root", action="append", metavar="DIR",
                   help="a folder beyond the snapshot's own its files may lie in (repeatable): a Flink changelog's dstl/")
    v.add_argument("--problems", action="store_true", help="list only the files that are not ok")
    v.set_defaults(fn=cmd_verify)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except StateExplorerError as exc:
        print(f"state-explorer: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

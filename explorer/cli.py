"""The ``state-explorer`` command.

::

    state-explorer demo [--out out]                 run every example pipeline, checkpoint, savepoint, summarise
    state-explorer run NAME [--parallelism P] [--backend heap|rocksdb] [--from-savepoint PATH] ...
    state-explorer savepoint NAME --after-records N -o PATH   run, then stop with a savepoint
    state-explorer inspect PATH [--ttl STATE=1h] [--uids a,b]   summary of a checkpoint or savepoint
    state-explorer report PATH -o report.html       HTML report with the charts (every format)
    state-explorer ls PATH                          the checkpoints and savepoints under a path
    state-explorer list                             the example pipelines
    state-explorer compatible OLD NEW               will the new job version restore OLD? (per operator and state)
    state-explorer edit PATH -o OUT [--drop-key OP=KEY] [--drop-operator UID] [--rename-operator OLD=NEW]
                   [--max-parallelism N] [--parallelism P]
                                                    write an edited savepoint (explorer.edit)

PATH is a savepoint or checkpoint folder, a checkpoint directory, or a Flink ``_metadata``
file. Options are checked by argparse: a bad value is a usage error, never a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import sys
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any, Sequence

from .errors import StateExplorerError
from .escape import terminal_text

# Only the standard library and the error tree load at the top: ``--help``, a usage error and the
# parser cost no pandas, pyarrow, numba or plotly. Each command imports what it needs when it runs
# (the LAZY_EDGES of tests/test_architecture.py name them).


class UsageError(StateExplorerError):
    """An option that parses but does not fit the snapshot (``--ttl`` of a state it does not hold): shown
    with the usage, exit 2."""


def _human_bytes(n: Any) -> str:
    from .plots.format import human_bytes

    return human_bytes(n)


# --- argparse types: a bad value is a usage error (exit 2 with the usage), not a traceback --------
def say(*parts: Any, file: Any = None) -> None:
    """``print`` for the CLI: snapshot strings (keys, names, paths, notes, error messages) reach the terminal
    only through :func:`explorer.escape.terminal_text`, control characters shown as ``\\x1b``."""
    print(*(terminal_text(p) for p in parts), file=file)


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


#: a duration's parts, as ``--ttl`` takes them: ``90s``, ``30min``, ``1h``, ``1h30min``, ``2d``, ``1.5h``, ``1w``
_DURATION_UNITS = {
    "ms": 1, "milli": 1, "millis": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1_000, "sec": 1_000, "secs": 1_000, "second": 1_000, "seconds": 1_000,
    "m": 60_000, "min": 60_000, "mins": 60_000, "minute": 60_000, "minutes": 60_000, "t": 60_000,
    "h": 3_600_000, "hr": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
    "w": 604_800_000, "week": 604_800_000, "weeks": 604_800_000,
}
_DURATION_PART = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]+)\s*")


def parse_duration(text: str) -> timedelta:
    """``90s``, ``30min``, ``1h30min``, ``2d``, ``1.5h`` or whole milliseconds (``86400000``) as a timedelta
    (the units pandas' Timedelta takes; parsed here so the command line starts without pandas)."""
    text = text.strip()
    if text.isdigit():
        return timedelta(milliseconds=int(text))
    pos, ms = 0, 0.0
    for m in _DURATION_PART.finditer(text):
        unit = _DURATION_UNITS.get(m.group(2).lower())
        if m.start() != pos or unit is None:
            raise ValueError(text)
        ms += float(m.group(1)) * unit
        pos = m.end()
    if pos == 0 or pos != len(text):
        raise ValueError(text)
    return timedelta(milliseconds=ms)


def ttl_option(text: str) -> tuple[str, timedelta]:
    """``STATE=DURATION`` for ``--ttl``: ``last_seen=1h``, ``per_category=2d``, ``dedup=86400000`` (ms)."""
    name, sep, dur = text.partition("=")
    if not sep or not name.strip() or not dur.strip():
        raise argparse.ArgumentTypeError(f"found {text!r}, expected STATE=DURATION such as last_seen=1h")
    dur = dur.strip()
    try:
        td = parse_duration(dur)
    except ValueError:
        raise argparse.ArgumentTypeError(f"in {text!r}: found the duration {dur!r}, expected a duration such as "
                                         "30min, 1h, 2d or milliseconds") from None
    if td <= timedelta(0):
        raise argparse.ArgumentTypeError(f"in {text!r}: expected a positive duration")
    return name.strip(), td


def uid_list(text: str) -> list[str]:
    """Comma-separated operator uids: ``user-state,bucket-state``."""
    uids = [u.strip() for u in text.split(",") if u.strip()]
    if not uids:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected comma-separated operator uids")
    return uids


def open_for_cli(path: str, ttl: list[tuple[str, timedelta]] | None = None, uids: list[str] | None = None):
    """Open ``path``; ``--ttl`` and ``--uids`` go to an Apache Flink snapshot (others store their TTLs
    and names themselves, and saying so is clearer than ignoring the options)."""
    from .snapshot import open as open_snapshot

    snap = open_snapshot(path)
    options = {}
    if ttl:
        options["ttl"] = dict(ttl)
    if uids:
        options["uids"] = uids
    if not options:
        return snap
    if not snap.format.startswith("flink"):
        raise StateExplorerError(f"{path}: --ttl and --uids apply to Apache Flink snapshots; found {'an' if snap.format[:1] in 'aeiou' else 'a'} {snap.format}, "
                                 "which stores its TTLs and operator names itself")
    if ttl:
        states = sorted({str(s) for s in snap.states["state"]}) if len(snap.states) else []
        unknown = [name for name, _ in ttl if name not in states]
        if unknown:
            raise UsageError(f"--ttl names {', '.join(map(repr, unknown))}, which {path} does not hold; its states "
                             f"are {', '.join(states) or 'none'}")
    return open_snapshot(path, **options)


def run_pipeline(name: str, *, records: int | None, parallelism: int, backend: str, out: Path | None,
                 checkpoint_every: int | None = None, from_savepoint: Path | None = None,
                 savepoint_to: Path | None = None, stop_after: int | None = None, seed: int = 0,
                 max_parallelism: int | None = None, batch_size: int = 1024, quiet: bool = False,
                 savepoint_at: float | None = None) -> dict[str, Any]:
    """Run one example pipeline; optionally checkpoint, restore, and end with a savepoint."""
    from .pipelines import PIPELINES

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
    if savepoint_to is not None and savepoint_to.exists() and any(savepoint_to.iterdir()):
        # never deleted: it may be someone's savepoint (the demo clears only its own folders first)
        raise StateExplorerError(f"{savepoint_to}: the savepoint folder exists and is not empty; expected a new or "
                                 "empty folder (remove it yourself, or choose another)")
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
        from . import analysis
        from .format.snapshot import read_metadata
        from .snapshot import open as open_snapshot

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
            f"{(s['records_per_s'] or 0):>10,} rec/s  {s['keys']:>7,} distinct keys  {s['state_entries']:>8,} entries "
            f"{where}")
    if "state_bytes" in s:
        line += f"  {_human_bytes(s['state_bytes']):>9} savepoint"
    say(line)
    if s["hottest_keys"]:
        tops = ", ".join(f"{h['key']} in {h['operator']} ({h['records']:,})" for h in s["hottest_keys"][:3])
        say(f"{'':<14} hottest keys {where}: {tops}")


#: the file the demo writes into its --out folder: the entries of that folder it created (and only those are
#: replaced when it runs again into the same folder)
DEMO_MARKER = ".state-explorer-demo.json"


def _demo_folder(out: Path, planned: list[str]) -> list[str]:
    """Make ``out`` ready for the demo and return the names it may (re)create there. A new or empty folder is
    taken as it is; a folder an earlier demo wrote (its :data:`DEMO_MARKER`) has the entries that demo created
    removed, nothing else; any other folder with something in it is refused, nothing deleted."""
    marker = out / DEMO_MARKER
    if out.exists() and not out.is_dir():
        raise StateExplorerError(f"{out}: --out names a file; expected a new or empty folder, or one an earlier "
                                 "demo wrote")
    created: list[str] = []
    if marker.is_file():
        try:
            created = [str(n) for n in json.loads(marker.read_text(encoding="utf-8"))["created"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateExplorerError(f"{marker}: not the demo's record of what it created ({exc}); expected "
                                     "JSON with a 'created' list (remove the folder yourself to start again)") from exc
        for name in created:
            if not name or name in (".", "..") or "/" in name or "\0" in name:
                raise StateExplorerError(f"{marker}: lists {name!r}; expected the plain names of the folders the "
                                         "demo created in it")
            target = out / name
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.is_dir():
                shutil.rmtree(target)
    elif out.exists() and any(out.iterdir()):
        found = sorted(p.name for p in out.iterdir())
        raise StateExplorerError(f"{out}: --out is a folder that holds {found[:5]}{' …' if len(found) > 5 else ''} and "
                                 f"that no demo wrote (no {DEMO_MARKER}); expected a new or empty folder: the demo "
                                 "deletes nothing it did not create")
    taken = sorted(set(planned) & {p.name for p in out.iterdir()}) if out.exists() else []
    if taken:
        raise StateExplorerError(f"{out}: holds {taken}, which the demo would write and did not create; expected "
                                 "them absent (move them, or choose another --out)")
    out.mkdir(parents=True, exist_ok=True)
    names = sorted(set(created) | set(planned))
    marker.write_text(json.dumps({"created": names}, indent=1), encoding="utf-8")
    return names


def cmd_demo(args) -> int:
    out = Path(args.out)
    from .pipelines import PIPELINES

    pipes = PIPELINES
    _demo_folder(out, list(pipes) + ([] if args.no_spark else ["spark"]))
    say(f"State Explorer demo: {len(pipes)} pipelines, parallelism {args.parallelism}, backends {args.backends}")
    say(f"writing outputs, checkpoints and savepoints under {out}/\n")
    for backend in args.backends.split(","):
        say(f"== {backend} backend")
        for name, pipe in pipes.items():
            target = out / name / backend
            run_pipeline(name, records=args.records or None, parallelism=args.parallelism, backend=backend,
                         out=target, checkpoint_every=max(1, (args.records or pipe.default_records) // 4),
                         savepoint_to=target / "savepoint", seed=args.seed, max_parallelism=args.max_parallelism,
                         batch_size=args.batch_size, savepoint_at=0.8)
        say()
    if not args.no_spark:
        _spark_demo(out)
    say(f"Open a snapshot:  python -c \"import explorer; print(explorer.open('{out}/url_counts/heap/savepoint'))\"")
    say(f"Or in a terminal: state-explorer inspect {out}/url_counts/heap/savepoint")
    return 0


def _spark_demo(out: Path) -> None:
    """Every example pipeline on local Spark, compared with the engine, each checkpoint opened
    (one line each; the JVM's and Spark's own output go to out/spark/spark.log)."""
    say("== Spark (local[2], RocksDB state store): every pipeline, outputs compared with the engine")
    from .spark.demo import run_spark_demo

    s = run_spark_demo(out)
    say(f"summary: {out}/spark/summary.json, Spark's log: {s['log']}")
    say()


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
    say(f"savepoint written to {s['savepoint']} ({_human_bytes(s['state_bytes'])})")
    return 0


def cmd_inspect(args) -> int:
    from .report import summary_text

    snap = open_for_cli(args.path, args.ttl, args.uids)
    say(summary_text(snap, top=args.top))
    return 0


def cmd_ls(args) -> int:
    from .catalog import list_snapshots

    df = list_snapshots(args.path)
    if df.empty:
        say(f"{args.path}: no checkpoints or savepoints found")
        return 0
    out = df.copy()
    out["size"] = [_human_bytes(int(b)) for b in out["size_bytes"]]
    out["time (UTC)"] = [t.strftime("%Y-%m-%d %H:%M:%S") if t == t and t is not None else "-" for t in out["time"]]
    out["time of"] = out["time_from"].map({"snapshot": "snapshot", "file": "file mtime"})
    out["complete"] = ["yes" if c else "NO" for c in out["complete"]]
    cols = ["id", "kind", "format", "time (UTC)", "time of", "size", "files", "complete", "path"]
    say(out[cols].fillna("-").to_string(index=False))
    say("time of: 'snapshot' is when the snapshot was taken, from its own metadata (as inspect shows it); "
          "'file mtime' is when its metadata file was last written, for formats that store no time")
    for _, r in df[df["note"].notna()].iterrows():
        say(f"note: {r['path']}: {r['note']}")
    return 0


def cmd_report(args) -> int:
    from .report import build_report

    snap = open_for_cli(args.path, args.ttl, args.uids)
    history_dir = Path(args.path) if Path(args.path).is_dir() and not (Path(args.path) / "_metadata").exists() else None
    output = Path(args.output)
    if output.is_dir() or args.output.endswith(("/", "\\")):  # a folder: the report goes in it, named after the snapshot
        output = output / f"{_report_name(snap.path)}.html"
    out = build_report(snap, output, top=args.top, history_dir=history_dir, parallelisms=args.parallelisms,
                       plotly_js=args.plotly)
    how = {"inline": ", self-contained", "file": ", plus the shared plotly.js beside it",
           "cdn": ", loading plotly.js from its CDN"}[args.plotly]
    say(f"report written to {out} ({_human_bytes(out.stat().st_size)}{how})")
    return 0


def _report_name(path: Any) -> str:
    """A file name for the report of the snapshot at ``path``: ``chk-3`` of a checkpoint directory is
    ``<job folder>-chk-3``, a ``_metadata`` file its folder's name."""
    parts = [p for p in str(path).replace("\\", "/").rstrip("/").split("/") if p and p != "_metadata"]
    name = "-".join(parts[-3:]) if parts and parts[-1].startswith("chk-") else (parts[-1] if parts else "report")
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "report"


def cmd_list(args) -> int:
    from .pipelines import PIPELINES

    for name, pipe in PIPELINES.items():
        say(f"{name:<14} {pipe.description}")
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


def cmd_compatible(args) -> int:
    """Per operator and state of OLD: restores as is, needs migration, or will fail (exit 1 if anything will)."""
    from .compatibility import FAIL, compatible  # (this command's own import, kept in its hunk)

    report = compatible(args.old, args.new)
    for r in report.itertuples():
        where = r.operator if r.state is None else f"{r.operator} / {r.state}"
        say(f"{r.verdict:<16} {where}: {r.reason}")
    fails = int((report.verdict == FAIL).sum())
    say(f"{len(report)} checked, {fails} will fail" if fails else f"{len(report)} checked: the new job restores it")
    return 1 if fails else 0


def _pair(text: str) -> tuple[str, str]:
    """An argparse type: ``LEFT=RIGHT``, both non-empty."""
    left, sep, right = text.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"found {text!r}, expected LEFT=RIGHT")
    return left, right


def _edit_key(text: str) -> Any:
    """A key as typed: ``int:42`` an integer, anything else the string itself."""
    if text.startswith("int:"):
        try:
            return int(text[4:])
        except ValueError:
            raise UsageError(f"--drop-key: found {text!r}, expected int: followed by a whole number") from None
    return text


def cmd_edit(args) -> int:
    """Apply the edits in order (renames, dropped keys, dropped operators, max parallelism) and write OUT."""
    from .editing import edit  # (this command's own import, kept in its hunk)

    editor = edit(args.path)
    for old, new in args.rename_operator or ():
        editor.rename_operator(old, new)
    for op, key in args.drop_key or ():
        editor.drop_keys(operator=op, keys=[_edit_key(key)])
    for uid in args.drop_operator or ():
        editor.drop_operator(uid)
    if args.max_parallelism is not None:
        editor.with_max_parallelism(args.max_parallelism)
    if args.parallelism is not None:
        editor.with_parallelism(args.parallelism)
    if not editor.steps:
        raise UsageError("no edit given; expected --drop-key, --drop-operator, --rename-operator, --max-parallelism "
                         "or --parallelism")
    out = editor.write(args.output)
    for step in editor.steps:
        say(f"  {step}")
    say(f"wrote {out}")
    return 0


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
    p.set_defaults(subparser=p)


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
    rp.add_argument("--output", "-o", default="report.html",
                    help="the HTML file to write (default: report.html); an existing folder, or a path ending in /, "
                         "gets <snapshot>.html inside it, named after the snapshot's folder")
    rp.add_argument("--top", type=positive_int, default=10, help="how many hot keys to chart")
    rp.add_argument("--parallelisms", type=parallelism_list, default=None,
                    help="comma-separated candidates for the rescale what-if: 2,4,8")
    rp.add_argument("--plotly", choices=("inline", "file", "cdn"), default="inline",
                    help="how the page gets plotly.js: inline (the default: in the page once, one file that opens "
                         "anywhere offline), file (one shared plotly-*.min.js beside the reports, each report small) "
                         "or cdn (plotly's CDN: small, needs the network)")
    rp.add_argument("--self-contained", dest="plotly", action="store_const", const="inline",
                    help="the same as --plotly=inline (the default)")
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
    c = sub.add_parser("compatible", help="will a new job version restore a savepoint? per operator and state: "
                                          "restores as is, needs migration, or will fail (exit 1)")
    c.add_argument("old", help="the savepoint (or checkpoint) to restore")
    c.add_argument("new", help="a savepoint or checkpoint of the new job version")
    c.set_defaults(fn=cmd_compatible, subparser=c)
    e = sub.add_parser("edit", help="write an edited copy of a savepoint (the engine's or a Flink canonical one)")
    e.add_argument("path", help="the savepoint to edit (never modified)")
    e.add_argument("--output", "-o", required=True, help="a new or empty folder for the edited savepoint")
    e.add_argument("--drop-key", type=_pair, action="append", metavar="OP=KEY",
                   help="drop every state and timer of KEY in operator OP (repeatable; int:42 for an integer key)")
    e.add_argument("--drop-operator", action="append", metavar="UID", help="leave an operator out (repeatable)")
    e.add_argument("--rename-operator", type=_pair, action="append", metavar="OLD=NEW",
                   help="give an operator a new uid (repeatable; applied first, so other options name NEW)")
    e.add_argument("--max-parallelism", type=positive_int, default=None, metavar="N",
                   help="move every key to its key group under max parallelism N")
    e.add_argument("--parallelism", type=positive_int, default=None, metavar="P",
                   help="split the keyed state for P subtasks (operator state past P beside subtask index %% P)")
    e.set_defaults(fn=cmd_edit, subparser=e)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings(record=True) as caught:  # a warning is a one-line note, not a source line
            warnings.simplefilter("always", UserWarning)
            try:
                return args.fn(args)
            finally:
                for w in caught:
                    if issubclass(w.category, UserWarning):
                        say(f"state-explorer: note: {w.message}", file=sys.stderr)
                    else:
                        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    except UsageError as exc:
        sub = args.subparser  # shown as argparse shows its own usage errors
        say(f"{sub.format_usage()}{sub.prog}: error: {exc}", file=sys.stderr)
        return 2
    except StateExplorerError as exc:
        say(f"state-explorer: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

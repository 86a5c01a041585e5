"""Reader of the engine's own checkpoints and savepoints (:mod:`explorer.format.snapshot`)."""

from __future__ import annotations

import itertools
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..format.keyed import read_parquet_key_groups, rows_to_table
from ..format.parquet_pages import footer_chunks
from ..format.rocksdb.native import NATIVE_FORMAT, NativeFiles
from ..format.types import describe_type, type_from_description
from ..format.sizes import value_sizes
from ..errors import SnapshotCorruptError
from ..format.snapshot import (
    BackgroundVerification,
    check_file_size,
    is_snapshot_folder,
    read_metadata,
    referenced_files,
    resolve,
)
from ..keygroups import operator_indices_for_key_groups
from ..storage import StoragePath
from .checks import engine_checks
from .base import (
    CONTRACT_COLUMNS,
    TUPLE_COLUMNS,
    TIMESTAMP,
    KeyedStateQuery,
    SnapshotInfo,
    SnapshotReader,
    make_piece,
)


class EngineSnapshotReader(SnapshotReader):
    """One checkpoint (``chk-N``) or savepoint folder written by the engine."""

    format_name = "engine"
    entries_with_keys = True

    def __init__(self, path: str | Path, verify: bool = True) -> None:
        super().__init__(path)
        self.meta = read_metadata(self.path)
        self.verify = verify
        self._ops = {o["name"]: o for o in self.meta["operators"]}
        #: metadata path -> its ``files`` entry; a file the list does not name is never read
        self._files: dict[str, dict] = self.meta.get("files", {})
        if not isinstance(self._files, dict):
            raise SnapshotCorruptError(f"{self.path / '_metadata'}: found a files list of type "
                                       f"{type(self._files).__name__}, expected a mapping of paths to sizes and SHA-256")
        for rel in referenced_files(self.meta):
            if rel not in self._files:
                raise SnapshotCorruptError(
                    f"{self.path / '_metadata'}: names the data file {rel!r}, which its files list does not "
                    f"({len(self._files)} entries); expected every data file listed with its size and SHA-256 "
                    "(an unlisted file is never read)")
        #: files whose SHA-256 has been checked by this reader
        self._verified: set[str] = set()
        #: listed file -> its Parquet footer's row groups as parsed for the page checks (a file read range by
        #: range is parsed once; its bytes are those whose digest was checked)
        self._footers: dict[str, list] = {}
        if verify:
            for rel, entry in self._files.items():
                check_file_size(self.path, rel, entry)  # cheap; the digests are checked as files are read

    @contextmanager
    def _reading(self, rel: str, ranged: bool = False) -> Iterator[Any]:
        """The path of the listed file ``rel`` while it is read: its SHA-256 is checked in a thread
        at the same time (the first time only), and a mismatch wins over whatever the read raised.

        ``ranged``: only part of the file is wanted (some key groups' row groups); a remote file not
        in the cache is then read by range (a pyarrow file) and its digest is checked once it is read whole."""
        entry = self._files.get(rel)
        if entry is None:
            raise SnapshotCorruptError(f"{self.path / '_metadata'}: names {rel!r}, which its files list does not; "
                                       "expected every data file listed (an unlisted file is never read)")
        path = resolve(self.path, rel)
        self.current_file = path
        if ranged and isinstance(path, StoragePath) and path.store.cached(path.key) is None:
            check_file_size(self.path, rel, entry)
            with path.open_input() as f:
                yield f
            self.current_file = None
            return
        check = None
        if self.verify and rel not in self._verified:
            check_file_size(self.path, rel, entry)
            check = BackgroundVerification([(path, entry)])
        try:
            yield path
        except BaseException:
            if check is not None and check.finish() is not None:
                raise check.error from None
            raise
        if check is not None:
            check.wait()
            self._verified.add(rel)
        self.current_file = None

    @classmethod
    def detect(cls, path: Path) -> bool:
        return path.is_dir() and is_snapshot_folder(path)

    def info(self) -> SnapshotInfo:
        m = self.meta
        return SnapshotInfo(
            path=self.path,
            format=f"engine-{m['kind']}",
            kind=m["kind"],
            checkpoint_id=m["checkpoint_id"],
            created_at=pd.Timestamp(m["created_at_ms"], unit="ms", tz="UTC"),
            job_name=m["job"].get("name"),
            extra={"backend": m.get("backend"), "mode": m.get("mode"), "unaligned": m.get("unaligned"),
                   "incremental": m.get("incremental"), "checkpoint_type": m.get("checkpoint_type")},
        )

    def operators(self) -> pd.DataFrame:
        rows = []
        for o in self.meta["operators"]:
            rows.append({
                "operator": o["name"], "operator_id": o["uid"], "uid": o["uid"], "parallelism": o["parallelism"],
                "max_parallelism": o["max_parallelism"], "keyed": o["keyed"], "kind": o["kind"],
                "states": len(o["states"]),
                "bytes": sum(s["bytes"] for s in o["subtasks"]),
            })
        return pd.DataFrame(rows)

    def states(self) -> pd.DataFrame:
        rows = []
        for o in self.meta["operators"]:
            counts: dict[str, int] = {}
            for sub in o["subtasks"]:
                for s in sub["states"]:
                    counts[s["name"]] = counts.get(s["name"], 0) + s["rows"]
            for d in o["states"]:
                ttl = d.get("ttl")
                rows.append({
                    "operator": o["name"], "state": d["name"], "kind": d["kind"], "key_type": None,
                    "value_type": describe_type(d["value_type"], with_fields=False), "ttl_ms": ttl["ttl_ms"] if ttl else None,
                    "update_type": ttl["update_type"] if ttl else None, "visibility": ttl["visibility"] if ttl else None,
                    "entries": counts.get(d["name"], 0),
                })
        return pd.DataFrame(rows, columns=["operator", "state", "kind", "key_type", "value_type", "ttl_ms",
                                           "update_type", "visibility", "entries"])

    def subtasks(self) -> pd.DataFrame:
        rows = []
        for o in self.meta["operators"]:
            for sub in o["subtasks"]:
                kgr = sub.get("key_group_range") or [None, None]
                rows.append({
                    "operator": o["name"], "subtask": sub["index"], "key_group_start": kgr[0], "key_group_end": kgr[1],
                    "entries": sum(s["rows"] for s in sub["states"]), "bytes": sub["bytes"],
                    "sync_ms": sub["sync_ms"], "async_ms": sub["async_ms"], "alignment_ms": sub["alignment_ms"],
                })
        return pd.DataFrame(rows)

    def _ttl_ms(self, op: dict, state: str) -> int | None:
        for d in op["states"]:
            if d["name"] == state and d.get("ttl"):
                return d["ttl"]["ttl_ms"]
        return None

    def _kind(self, op: dict, state: str) -> str:
        for d in op["states"]:
            if d["name"] == state:
                return d["kind"]
        return "value"

    def estimated_rows(self, query: KeyedStateQuery) -> int | None:
        if query.key_groups is not None:  # the wanted key groups' share, from the row groups' spans
            rows = self.key_group_rows(query)
            wanted = np.fromiter((k for k in query.key_groups if 0 <= k < len(rows)), dtype=np.int64)
            return int(round(float(rows[wanted].sum()))) if len(wanted) else 0
        n = 0
        for o in self.meta["operators"]:
            if not query.wants_operator(o["name"]):
                continue
            for sub in o["subtasks"]:
                n += sum(s["rows"] for s in sub["states"] if query.wants_state(s["name"]))
        return n

    def key_group_rows(self, query: KeyedStateQuery) -> np.ndarray:
        """Rows per key group ``0..M-1`` (``M`` the largest max parallelism asked), from the metadata alone:
        each Parquet row group's rows spread evenly over the key groups it covers (exact where a row
        group holds one key group), a native subtask's over its range. Timers count too."""
        ops = [o for o in self.meta["operators"] if o["keyed"] and query.wants_operator(o["name"])]
        out = np.zeros(max([o["max_parallelism"] for o in ops], default=0), dtype=np.float64)
        timers = query.states is None or bool({"event_timers", "processing_timers"} & set(query.states))
        for o in ops:
            for sub in o["subtasks"]:
                lo, hi = sub["key_group_range"]
                spans = []
                for s in sub["states"]:
                    if not query.wants_state(s["name"]):
                        continue
                    if sub.get("state_format") == NATIVE_FORMAT or not s.get("row_groups"):
                        spans.append((lo, hi, s["rows"]))
                    else:
                        spans += [tuple(g) for g in s["row_groups"]]
                tm = sub.get("timers")
                if tm and timers:
                    spans += [tuple(g) for g in tm.get("row_groups") or []]
                for a, b, rows in spans:
                    if rows:
                        out[a: b + 1] += rows / (b - a + 1)
        return out

    def parquet_files(self, query: KeyedStateQuery) -> list[dict[str, Any]] | None:
        """The Parquet files holding the keyed states asked for: ``file, operator, state, subtask,
        key_group_start, key_group_end`` each (None when some are RocksDB's native files). Their
        SHA-256 is checked first when the reader verifies (every byte a dataset reads is verified)."""
        out = []
        for o in self.meta["operators"]:
            if not o["keyed"] or not query.wants_operator(o["name"]):
                continue
            for sub in o["subtasks"]:
                if sub.get("state_format") == NATIVE_FORMAT:
                    return None
                lo, hi = sub["key_group_range"]
                for s in sub["states"]:
                    if query.wants_state(s["name"]):
                        with self._reading(s["file"]) as f:
                            out.append({"file": f, "operator": o["name"], "state": s["name"], "subtask": sub["index"],
                                        "key_group_start": lo, "key_group_end": hi})
        return out

    def keyed_pieces(self, query: KeyedStateQuery) -> Iterator[pa.Table]:
        kgs = sorted(query.key_groups) if query.key_groups is not None else None
        if isinstance(self.path, StoragePath) and kgs is None:
            self.path.store.prefetch([resolve(self.path, rel).key for rel in self._files_for(query)])
        for o in self.meta["operators"]:
            if not o["keyed"] or not query.wants_operator(o["name"]):
                continue
            maxp, p = o["max_parallelism"], o["parallelism"]
            for sub in o["subtasks"]:
                lo, hi = sub["key_group_range"]
                if kgs is not None and not any(lo <= k <= hi for k in kgs):
                    continue
                if sub.get("state_format") == NATIVE_FORMAT:
                    yield from self._native_pieces(o, sub, kgs, maxp, p, query)
                for s in (sub["states"] if sub.get("state_format") != NATIVE_FORMAT else ()):
                    if not query.wants_state(s["name"]):
                        continue
                    with self._reading(s["file"], ranged=kgs is not None) as f:
                        cols = _parquet_columns(query)
                        t = read_parquet_key_groups(f, s["row_groups"], kgs, cols, footer=self._footer(s["file"], f))
                        missing = [c for c in cols or _STATE_COLUMNS if c not in t.column_names]
                        if missing:  # (Arrow reads the columns a file has of those asked, silently)
                            raise SnapshotCorruptError(f"{resolve(self.path, s['file'])}: a state file without the "
                                                       f"columns {missing}; expected {list(_STATE_COLUMNS)}")
                    if t.num_rows:
                        yield self._piece(o, s["name"], self._kind(o, s["name"]), t, s, maxp, p, query)
                tm = sub.get("timers")
                if tm and (query.states is None or {"event_timers", "processing_timers"} & set(query.states)):
                    with self._reading(tm["file"], ranged=kgs is not None) as f:
                        t = read_parquet_key_groups(f, tm["row_groups"], kgs, footer=self._footer(tm["file"], f))
                    for dom, name in (("event_time", "event_timers"), ("processing_time", "processing_timers")):
                        if not query.wants_state(name):
                            continue
                        part = t.filter(pc.equal(t.column("domain"), dom))
                        if part.num_rows:
                            yield self._timer_piece(o, name, part, tm, maxp, p, query)

    def _footer(self, rel: str, f: Any) -> list:
        """The footer of the listed file ``rel`` (open as ``f``), parsed on its first read."""
        if rel not in self._footers:
            self._footers[rel] = footer_chunks(f)
        return self._footers[rel]

    def _files_for(self, query: KeyedStateQuery) -> list[str]:
        """The listed files :meth:`keyed_pieces` reads for ``query`` (all its key groups), in reading order."""
        out: list[str] = []
        timers = query.states is None or bool({"event_timers", "processing_timers"} & set(query.states))
        for o in self.meta["operators"]:
            if not o["keyed"] or not query.wants_operator(o["name"]):
                continue
            for sub in o["subtasks"]:
                if sub.get("state_format") == NATIVE_FORMAT:
                    out.extend(sub["native"]["files"].values())
                    continue
                out.extend(s["file"] for s in sub["states"] if query.wants_state(s["name"]))
                if sub.get("timers") and timers:
                    out.append(sub["timers"]["file"])
        return out

    def _native_pieces(self, o, sub, kgs, maxp, p, query, chunk: int = 200_000) -> Iterator[pa.Table]:
        """Pieces of a subtask stored as RocksDB files (an incremental checkpoint): the files
        are linked into a temporary folder and opened read-only; wanted key groups are range scans."""
        lo, hi = sub["key_group_range"]
        wanted = [k for k in kgs if lo <= k <= hi] if kgs is not None else range(lo, hi + 1)
        descs = {d["name"]: d for d in o["states"]}
        if self.verify:
            for rel in sub["native"]["files"].values():
                with self._reading(rel):
                    pass  # RocksDB reads them itself: check their digests first
        with NativeFiles(self.path, sub["native"]) as nf:
            for s in sub["states"]:
                name = s["name"]
                if not query.wants_state(name) or name not in descs:
                    continue
                d = descs[name]
                info = type_from_description(d["value_type"])
                uk = "index" if d["kind"] == "list" else (
                    type_from_description(d["user_key_type"]) if d["kind"] == "map" else None)
                it = nf.rows(d, key_groups=wanted, value_info=info)
                while True:
                    rows = list(itertools.islice(it, chunk))
                    if not rows:
                        break
                    t, kinds = rows_to_table(rows, info, uk)
                    yield self._piece(o, name, d["kind"], t, kinds, maxp, p, query)

    def _keys(self, column, kind: str):
        # tuple keys stay a struct column (f0, f1, ...) here; Snapshot turns them back into tuples
        return column

    def _piece(self, o, state, kind, t: pa.Table, smeta, maxp, p, query) -> pa.Table:
        subtask = None  # not asked: the owner of each row's key group is not worked out
        if query.columns is None or "subtask" in query.columns:
            subtask = operator_indices_for_key_groups(maxp, p, t.column("key_group").to_numpy()).astype(np.int32)

        def col(name: str) -> pa.ChunkedArray | None:  # None: a column the query did not ask for (not read)
            return t.column(name) if name in t.column_names else None

        la = col("last_access")
        ttl = self._ttl_ms(o, state)
        expires = pc.add(la, ttl) if ttl is not None and la is not None else None
        value = col("value")
        ns = col("namespace")
        return _mark_tuples(make_piece({
            "operator": o["name"], "state": state, "kind": kind,
            "key": self._keys(t.column("key"), smeta["key_kind"]),
            "key_group": t.column("key_group"), "subtask": subtask,
            "namespace": None if ns is None else self._keys(ns, smeta["namespace_kind"]),
            "user_key": col("user_key"), "value": value,
            "last_access": la.cast(pa.timestamp("ms")).cast(TIMESTAMP) if la is not None and la.null_count < len(la)
            else None,
            "expires_at": expires.cast(pa.timestamp("ms")).cast(TIMESTAMP) if expires is not None else None,
            "size_bytes": value_sizes(value) if value is not None else None,
        }, _asked(query), leave_out=_left_out(query)), smeta)

    def _timer_piece(self, o, name, t: pa.Table, tmeta, maxp, p, query) -> pa.Table:
        kg = t.column("key_group").to_numpy()
        subtask = operator_indices_for_key_groups(maxp, p, kg).astype(np.int32)
        return _mark_tuples(make_piece({
            "operator": o["name"], "state": name,
            "kind": "event_timer" if name == "event_timers" else "processing_timer",
            "key": self._keys(t.column("key"), tmeta["key_kind"]), "key_group": t.column("key_group"),
            "subtask": subtask, "namespace": self._keys(t.column("namespace"), tmeta["namespace_kind"]),
            "value": t.column("timestamp"), "size_bytes": np.full(t.num_rows, 8, dtype=np.int64),
        }, _asked(query), leave_out=_left_out(query)), tmeta)

    def operator_state(self) -> pd.DataFrame:
        rows = []
        for o in self.meta["operators"]:
            for sub in o["subtasks"]:
                rel = sub.get("operator_state")
                if not rel:
                    continue
                with self._reading(rel) as f:
                    data = json.loads(f.read_text())
                for name, ls in data["lists"].items():
                    for i, v in enumerate(ls["items"]):
                        rows.append({"operator": o["name"], "state": name, "mode": ls["mode"], "subtask": sub["index"],
                                     "user_key": i, "value": v, "size_bytes": len(json.dumps(v, default=str))})
                for name, bs in data["broadcast"].items():
                    for k, v in bs["entries"]:
                        rows.append({"operator": o["name"], "state": name, "mode": "BROADCAST", "subtask": sub["index"],
                                     "user_key": k, "value": v, "size_bytes": len(json.dumps(v, default=str))})
        return pd.DataFrame(rows, columns=["operator", "state", "mode", "subtask", "user_key", "value", "size_bytes"])

    def metrics(self) -> pd.DataFrame:
        frames = []
        for o in self.meta["operators"]:
            for sub in o["subtasks"]:
                rec = sub.get("records_per_key_group")
                if rec is None:
                    continue
                lo, _ = sub["key_group_range"]
                frames.append(pd.DataFrame({"operator": o["name"], "subtask": sub["index"],
                                            "key_group": np.arange(lo, lo + len(rec)), "records": rec}))
        if not frames:
            return pd.DataFrame(columns=["operator", "subtask", "key_group", "records"])
        return pd.concat(frames, ignore_index=True)

    def heavy_hitters(self) -> pd.DataFrame:
        rows = []
        for o in self.meta["operators"]:
            merged: dict[Any, list[int]] = {}
            for sub in o["subtasks"]:
                hh = sub.get("heavy_hitters")
                if not hh:
                    continue
                for k, c, e in hh["entries"]:
                    key = tuple(k) if isinstance(k, list) else k
                    cur = merged.setdefault(key, [0, 0])
                    cur[0] += c
                    cur[1] += e
            for k, (c, e) in merged.items():
                rows.append({"operator": o["name"], "key": k, "count": c, "error": e})
        df = pd.DataFrame(rows, columns=["operator", "key", "count", "error"])
        return df.sort_values(["operator", "count"], ascending=[True, False], ignore_index=True)

    def timings(self) -> dict[str, Any]:
        return dict(self.meta.get("timing", {}))

    def file_bytes(self) -> dict[str, int] | None:
        """Bytes of each listed file by its content's digest (SHA-256, or XXH3-128 in checkpoints' files),
        else by its path: a checkpoint sharing a file's content with the previous one did not write it."""
        if "files" not in self.meta:
            return None
        return {e.get("sha256") or e.get("xxh3_128") or rel: int(e["bytes"]) for rel, e in self._files.items()}

    def state_bytes(self) -> dict[tuple[str, str], int] | None:
        """Bytes of each state's files (its Parquet files; an incremental checkpoint's RocksDB state, which has
        no file of its own: its SST bytes) and of the timers' (as state ``"timers"``), summed over subtasks."""
        files, out = self._files, {}
        for o in self.meta["operators"]:
            for sub in o.get("subtasks", []):
                for s in sub.get("states", []):
                    b = files.get(s["file"], {}).get("bytes", 0) if s.get("file") else s.get("bytes", 0)
                    out[(o["name"], s["name"])] = out.get((o["name"], s["name"]), 0) + int(b)
                tm = sub.get("timers")
                if tm:
                    b = int(files.get(tm["file"], {}).get("bytes", 0))
                    out[(o["name"], "timers")] = out.get((o["name"], "timers"), 0) + b
        return out


    @classmethod
    def check_files(cls, path: Path, **options: Any) -> list:
        """Every listed file checked: ``_metadata``'s CRC, each file inside the snapshot, its size and digest."""
        return engine_checks(path)  # normalised at the door (explorer.verify)

#: the Parquet columns of a state file each contract column is computed from (the rest are what they are named)
_FROM_PARQUET = {"size_bytes": ("value",), "expires_at": ("last_access",), "value": ("value",),
                 "last_access": ("last_access",), "namespace": ("namespace",), "user_key": ("user_key",),
                 "key": ("key",), "key_group": ("key_group",)}


#: the columns of a state file (:mod:`explorer.format.keyed`)
_STATE_COLUMNS = ("key_group", "key", "namespace", "user_key", "value", "last_access")


def _parquet_columns(query: KeyedStateQuery) -> list[str] | None:
    """The columns of a state file that ``query`` needs read (None: all): a query for the analysis columns
    reads neither the namespaces and user keys nor, without sizes or values, the values; the pieces then
    hold only the columns asked for."""
    if query.columns is None:
        return None
    cols = {"key_group", "key"}
    for c in query.columns:
        cols.update(_FROM_PARQUET.get(c, ()))
    return [c for c in _STATE_COLUMNS if c in cols]


def _asked(query: KeyedStateQuery) -> list[str] | None:
    """The contract columns a piece for ``query`` holds (None: all)."""
    return None if query.columns is None else [c for c in CONTRACT_COLUMNS if c in query.columns]


def _left_out(query: KeyedStateQuery) -> list[str]:
    """The one-value columns (operator, state, kind) ``query`` does not ask for: not built, only their values
    given (the others it does not ask for are not read: :func:`_parquet_columns`)."""
    return [] if query.columns is None else [c for c in ("operator", "state", "kind") if c not in query.columns]


def _mark_tuples(piece: pa.Table, smeta: dict) -> pa.Table:
    """Tell :class:`~explorer.snapshot.Snapshot` which struct columns hold tuple keys."""
    cols = [c for c, k in (("key", smeta.get("key_kind")), ("namespace", smeta.get("namespace_kind"))) if k == "tuple"]
    if not cols:
        return piece
    return piece.replace_schema_metadata({**(piece.schema.metadata or {}), TUPLE_COLUMNS: ",".join(cols).encode()})

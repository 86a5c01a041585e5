"""The engine's own savepoints (:mod:`explorer.format.snapshot`), written from an edited one.

What is written is what the engine itself writes for a savepoint: ``_metadata`` (the input's, with the
operators kept, each under its possibly new uid and max parallelism, and every file's size and SHA-256
recomputed), and per kept keyed state and subtask one Parquet file in :mod:`explorer.format.keyed`'s
layout, sorted by key group and cut into row groups at key-group boundaries, written with the savepoint
profile (zstd, SHA-256). Operator state files are copied byte for byte under the new uid's folder.

Keyed rows are decoded with the state's declared types (as stored in the metadata: no job code needed)
and encoded again with the same types, so a kept value is written exactly as it was read; a new value
(``map_values``, ``update``) must pass the declared type's check and come back equal from its encoding.
Keys move to the key group the engine computes under the new max parallelism (``explorer.keygroups``,
which every key type the engine stores supports) and to the subtask whose range holds it. A moved
operator's per-key-group record counts (a metric, not state) are not carried over; its heavy hitters
are, without the dropped keys.

Refused, with an error saying why: native RocksDB (incremental) checkpoints and checkpoints with
in-flight records of an unaligned checkpoint (take a savepoint: ``JobClient.trigger_savepoint``).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import EditError
from ..format.keyed import (SAVEPOINT, decode_keys, encode_keys, read_parquet_key_groups, rows_to_table,
                            write_parquet_by_key_group)
from ..format.snapshot import file_entry, resolve, verify_snapshot, write_metadata
from ..format.states import StoredState
from ..format.types import type_from_description, type_info
from ..keygroups import assign_to_key_group, key_group_range_for_operator, operator_index_for_key_group
from .flink import hashable_key
from .values import Touched

if TYPE_CHECKING:
    from .editor import EditStep, OperatorPlan


@dataclass
class EngineOperator:
    """One operator of an engine snapshot, with the attributes the editor asks of an operator."""

    uid: str
    name: str
    max_parallelism: int
    parallelism: int
    keyed: bool
    meta: dict = field(repr=False)

    @property
    def operator_id(self) -> str:  # the engine identifies operators by uid alone
        return self.uid


class EngineSavepoint:
    """An engine snapshot folder opened for editing: its checked metadata and operators."""

    def __init__(self, path: str | Path, **open_options: Any) -> None:
        if open_options:
            raise EditError(f"{path}: an engine snapshot is edited without options; found {sorted(open_options)}")
        self.folder = Path(path)
        self.meta = verify_snapshot(self.folder)  # every file's size and checksum, before anything is read
        self.operators = [EngineOperator(o["uid"], o.get("name", o["uid"]), o["max_parallelism"], o["parallelism"],
                                         bool(o.get("keyed")), o) for o in self.meta["operators"]]


def operator_id(uid: str) -> str:
    return uid


def check_editable(sp: EngineSavepoint) -> None:
    for o in sp.meta["operators"]:
        for sub in o.get("subtasks", ()):
            if sub.get("native") or sub.get("state_format") == "rocksdb-native":
                raise EditError(f"{sp.folder}: operator {o['uid']!r} holds native RocksDB files (an incremental "
                                "checkpoint); expected a savepoint or a full canonical checkpoint "
                                "(take one with JobClient.trigger_savepoint)")
    if sp.meta.get("unaligned") and sp.meta.get("timing", {}).get("inflight_records"):
        raise EditError(f"{sp.folder}: an unaligned checkpoint with in-flight records; expected a savepoint")


def state_names(sp: EngineSavepoint, op: EngineOperator) -> list[str]:
    return [s["name"] for s in op.meta.get("states", ())] if op.keyed else []


# -- rows --------------------------------------------------------------------------------------------------
def _user_key_info(st: StoredState) -> Any:
    if st.kind == "map":
        return type_from_description(st.user_key_type)
    if st.kind == "list":
        return "index"
    return None


def _plain(value: Any) -> Any:
    """A new value as the declared types without job code take it: dataclasses as dicts."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _read_checked(path: Path) -> Any:
    """A whole Parquet file of the savepoint, its row groups' declared sizes and page headers checked against the
    write's memory budget before a page is decoded (a small file can hold a value that inflates to gigabytes: the
    same checks as the readers', :func:`explorer.format.keyed.check_row_groups`)."""
    return read_parquet_key_groups(path, [], None)


def _read_rows(folder: Path, op: dict, name: str, st: StoredState) -> list[list]:
    """Every row of one state of one operator: ``[kg, key, ns, user_key, value, last_access]``."""
    uk_info = _user_key_info(st)
    out: list[list] = []
    for sub in op["subtasks"]:
        for s in sub.get("states", ()):
            if s["name"] != name:
                continue
            t = _read_checked(resolve(folder, s["file"]))
            if not t.num_rows:
                continue
            keys = decode_keys(t.column("key"), s["key_kind"])
            nss = decode_keys(t.column("namespace"), s["namespace_kind"])
            uks = t.column("user_key").to_pylist()
            if uk_info is not None and uk_info != "index":
                uks = [uk_info.from_arrow(u) for u in uks]
            vals = [st.value_info.from_arrow(v) for v in t.column("value").to_pylist()]
            for row in zip(t.column("key_group").to_pylist(), keys, nss, uks, vals, t.column("last_access").to_pylist()):
                out.append(list(row))
    return out


def _read_timers(folder: Path, op: dict) -> list[tuple]:
    out: list[tuple] = []
    for sub in op["subtasks"]:
        tm = sub.get("timers")
        if not tm:
            continue
        t = _read_checked(resolve(folder, tm["file"]))
        keys = decode_keys(t.column("key"), tm["key_kind"])
        nss = decode_keys(t.column("namespace"), tm["namespace_kind"])
        out.extend(zip(t.column("key_group").to_pylist(), keys, nss, t.column("timestamp").to_pylist(),
                       t.column("domain").to_pylist()))
    return out


def _row_dict(r: list) -> dict:
    return {"key": r[1], "namespace": r[2], "user_key": r[3], "value": r[4], "last_access": r[5]}


def _edit_rows(rows: list[list], plan: OperatorPlan, name: str, st: StoredState, where: str) -> list[list]:
    dropped = frozenset().union(*plan.dropped_keys) if plan.dropped_keys else frozenset()
    if dropped:
        rows = [r for r in rows if hashable_key(r[1]) not in dropped]
    for keep in plan.filters.get(name, ()):
        rows = [r for r in rows if keep(_row_dict(r))]
    fns = plan.mappers.get(name, ())
    if fns:
        info = st.value_info
        for r in rows:
            old = r[4]
            for fn in fns:
                new = fn(_row_dict(r))
                if isinstance(new, Touched):
                    raise EditError(f"{where}: last_access= is written into Flink savepoints only; the engine's "
                                    "savepoint keeps each row's last access")
                r[4] = _plain(new)
            if r[4] is not old:
                _check_value(info, r[4], f"{where}, key {r[1]!r}")
    if st.kind == "list" and (plan.filters.get(name) or dropped):  # kept elements renumbered in order
        pos: dict[tuple, int] = {}
        for r in rows:
            k = (hashable_key(r[1]), hashable_key(r[2]))
            r[3] = pos.get(k, 0)
            pos[k] = r[3] + 1
    return rows


def _check_value(info: Any, value: Any, where: str) -> None:
    if value is None:
        raise EditError(f"{where}: a new value None; expected a value of {info.name} (drop the key or filter the row "
                        "to remove it)")
    try:
        info.check(value, where)
        back = info.from_arrow(info.to_arrow_array([value]).to_pylist()[0])
    except (TypeError, ValueError, OverflowError, pa.ArrowException) as exc:
        raise EditError(f"{where}: cannot encode {value!r:.80} as {info.name} ({exc})") from exc
    except Exception as exc:  # the codec's SerializationError
        raise EditError(f"{where}: {exc}") from exc
    if back != value:
        raise EditError(f"{where}: {value!r:.80} does not come back equal from its encoding as {info.name} "
                        f"(found {back!r:.80}); expected a value the declared type holds exactly")


# -- writing -----------------------------------------------------------------------------------------------
def _safe(name: str) -> str:
    out = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return out or "_"


class _Out:
    """The new snapshot folder: files written, their entries, and what to remove if the write fails."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: dict[str, dict] = {}

    def add(self, rel: str) -> dict:
        self.files[rel] = entry = file_entry(self.folder, self.folder / rel)
        return entry


def write_savepoint(sp: EngineSavepoint, plans: list[OperatorPlan], out: Path,
                    steps: list[EditStep] | None = None) -> Path:
    """Write the engine savepoint the plans describe into ``out`` (see module doc); returns ``out``."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EditError(f"{out}: found an existing {'folder that is not empty' if out.is_dir() else 'file'}; "
                        "expected a new or empty folder for the edited savepoint")
    if out.resolve() == sp.folder.resolve():
        raise EditError(f"{out}: is the input savepoint's folder; expected another one")
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    w = _Out(out)
    try:
        kept = [p for p in plans if not p.dropped]
        uids = [p.uid for p in kept]
        if len(set(uids)) != len(uids):
            raise EditError(f"{sp.folder}: two operators would share a uid ({uids})")
        operators = [_write_operator(sp, w, p) for p in kept]
        meta = {k: v for k, v in sp.meta.items() if k not in ("operators", "files")}
        meta.update(operators=operators, files=w.files, kind="savepoint", checkpoint_type="full",
                    incremental=False, unaligned=False, savepoint_format="canonical")
        if steps:
            meta["edits"] = [str(s) for s in steps]
        write_metadata(out, meta)
    except BaseException:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:
            for child in list(out.iterdir()):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise
    return out


def _write_operator(sp: EngineSavepoint, w: _Out, plan: OperatorPlan) -> dict:
    src: EngineOperator = plan.source
    op = src.meta
    uid_dir = _safe(plan.uid)
    max_p, p = plan.max_parallelism, plan.parallelism or src.parallelism
    moved = max_p != src.max_parallelism
    rescaled = p != src.parallelism
    new = {k: v for k, v in op.items() if k != "subtasks"}
    new.update(uid=plan.uid, name=plan.name if plan.name is not None else plan.uid, max_parallelism=max_p,
               parallelism=p)
    dropped_keys = frozenset().union(*plan.dropped_keys) if plan.dropped_keys else frozenset()
    subtasks = []
    sources = op["subtasks"]
    if rescaled:
        if any(sub.get("source_positions") for sub in sources):
            raise EditError(f"{sp.folder}: operator {plan.uid!r} is a source with a position per subtask; "
                            f"with_parallelism({p}) would have to split them: restore at that parallelism instead")
        if any(sub.get("operator_state") for sub in sources) and not plan.operator_states:
            raise EditError(f"{sp.folder}: operator {plan.uid!r} holds operator state; with_parallelism({p}) "
                            "rewrites keyed state only: give its operator state for the new parallelism with "
                            "set_operator_state(), or restore at that parallelism (the engine redistributes it)")
        template = sources[0] if sources else {}
        # the subtasks at the new parallelism; heavy hitters and per-key-group records were counted per old
        # subtask, so they are not carried over (unknown, not a wrong count)
        sources = [{**{k: v for k, v in template.items() if k not in ("heavy_hitters", "operator_state")},
                    "index": i, "sync_ms": None, "async_ms": None, "alignment_ms": None} for i in range(p)]
    for sub in sources:
        s = {k: v for k, v in sub.items() if k not in ("states", "timers", "operator_state", "files")}
        s.update(states=[], timers=None, operator_state=None)
        rel = f"operator/{uid_dir}/{sub['index']}.json"
        if plan.operator_states:
            if _write_operator_state(sp, w, plan, sub, rel):
                s["operator_state"] = rel
        elif sub.get("operator_state"):
            (w.folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(resolve(sp.folder, sub["operator_state"]), w.folder / rel)
            w.add(rel)
            s["operator_state"] = rel
        if src.keyed:
            rng = key_group_range_for_operator(max_p, p, sub["index"])
            s["key_group_range"] = [rng.start, rng.end]
            if moved or rescaled:
                s["records_per_key_group"] = None
            hh = sub.get("heavy_hitters")
            if hh and dropped_keys:
                s["heavy_hitters"] = {**hh, "entries": [e for e in hh["entries"]
                                                         if hashable_key(e[0]) not in dropped_keys]}
        subtasks.append(s)
    if src.keyed:
        def regroup(rows, key_at=1):
            by_sub: dict[int, list] = {i: [] for i in range(p)}
            cache: dict[Any, int] = {}
            for r in rows:
                if moved:
                    k = hashable_key(r[key_at])
                    kg = cache.get(k)
                    if kg is None:
                        kg = cache[k] = assign_to_key_group(r[key_at], max_p)
                    r[0] = kg
                by_sub[operator_index_for_key_group(max_p, p, r[0])].append(r)
            return by_sub

        for desc in op.get("states", ()):
            name = desc["name"]
            if name in plan.dropped_states:
                continue
            st = StoredState.of(desc)
            where = f"operator {plan.uid!r}, state {name!r}"
            read = [list(r) for r in plan.bootstrapped[name]["rows"]] if name in plan.bootstrapped else \
                _read_rows(sp.folder, op, name, st)
            rows = _edit_rows(read, plan, name, st, where)
            for i, sub_rows in regroup(rows).items():
                table, kinds = rows_to_table([tuple(r) for r in sub_rows], st.value_info, _user_key_info(st))
                rel = f"keyed/{uid_dir}/{_safe(name)}/{i}.parquet"
                groups = write_parquet_by_key_group(table, w.folder / rel, profile=SAVEPOINT)
                w.add(rel)
                subtasks[i]["states"].append({"name": name, "file": rel, "rows": table.num_rows,
                                              "row_groups": groups, **kinds})
        for state, key, user_key, hits in plan.updates:
            if not hits:
                at = f", user key {user_key!r}" if user_key is not None else ""
                raise EditError(f"{sp.folder}: operator {plan.uid!r}, state {state!r} has no row of key {key!r}{at} "
                                "to update (adding state is not an edit of this kind)")
        new["states"] = [d for d in op.get("states", ()) if d["name"] not in plan.dropped_states]
        timers = [list(t) for t in _read_timers(sp.folder, op) if hashable_key(t[1]) not in dropped_keys]
        for i, sub_timers in regroup(timers).items():
            if not sub_timers:
                continue
            sub_timers.sort(key=lambda r: (r[0], r[3]))
            kgs, keys, nss, tss, doms = zip(*sub_timers)
            key_col, key_kind = encode_keys(list(keys))
            ns_col, ns_kind = encode_keys(list(nss))
            t = pa.table({"key_group": pa.array(kgs, pa.int32()), "key": key_col, "namespace": ns_col,
                          "timestamp": pa.array(tss, pa.int64()), "domain": pa.array(doms, pa.string())})
            rel = f"timers/{uid_dir}/{i}.parquet"
            groups = write_parquet_by_key_group(t, w.folder / rel, profile=SAVEPOINT)
            w.add(rel)
            subtasks[i]["timers"] = {"file": rel, "rows": t.num_rows, "row_groups": groups, "key_kind": key_kind,
                                     "namespace_kind": ns_kind}
    for s in subtasks:
        rels = [x["file"] for x in s["states"]] + ([s["timers"]["file"]] if s["timers"] else []) + \
               ([s["operator_state"]] if s["operator_state"] else [])
        s["bytes"] = s["bytes_written"] = sum(w.files[r]["bytes"] for r in rels)
    new["subtasks"] = subtasks
    return new



# -- operator and broadcast state --------------------------------------------------------------------------
OPERATOR_STATE_MODES = {"split": "SPLIT_DISTRIBUTE", "union": "UNION", "broadcast": "BROADCAST"}


def _json_default(o: Any) -> Any:  # as the engine's checkpoint writer stores operator state
    if isinstance(o, bytes):
        return {"$bytes": o.hex()}
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"{type(o).__name__} cannot be stored in operator state JSON")


def _operator_state_files(sp: EngineSavepoint, op: EngineOperator) -> dict[int, dict]:
    out = {}
    for sub in op.meta["subtasks"]:
        if sub.get("operator_state"):
            out[sub["index"]] = json.loads(resolve(sp.folder, sub["operator_state"]).read_text())
    return out


def _declared(values: list, given: Any, what: str, where: str) -> dict:
    """The type description of new values: ``given`` (a Python type, or a description), else the values' own."""
    if isinstance(given, dict):
        return given
    if given is None:
        kinds = {type(v) for v in values}
        if len(kinds) != 1:
            raise EditError(f"{where}: cannot infer the {what} type from values of types "
                            f"{sorted(k.__name__ for k in kinds) or 'none'}; pass {what}_type=")
        given = kinds.pop()
    try:
        return type_info(given).describe()
    except Exception as exc:
        raise EditError(f"{where}: {given!r} is not a type the engine stores ({exc})") from exc


def operator_state_spec(sp: EngineSavepoint, plan: OperatorPlan, name: str, values: Any, mode: str,
                        value_type: Any = None, key_type: Any = None) -> dict:
    """Check one ``set_operator_state`` and give what is written: per subtask index the JSON entry."""
    where = f"{sp.folder}: operator {plan.uid!r}, operator state {name!r}"
    if mode not in OPERATOR_STATE_MODES:
        raise EditError(f"{where}: found mode {mode!r}; expected one of {', '.join(OPERATOR_STATE_MODES)}")
    existing: dict | None = None
    is_broadcast = False
    for data in _operator_state_files(sp, plan.source).values():
        if name in data.get("lists", {}):
            existing = data["lists"][name]
        elif name in data.get("broadcast", {}):
            existing, is_broadcast = data["broadcast"][name], True
    if existing is not None:
        was = "broadcast" if is_broadcast else \
            {v: k for k, v in OPERATOR_STATE_MODES.items()}.get(existing.get("mode"), existing.get("mode"))
        if was != mode:
            raise EditError(f"{where}: the savepoint holds it as {was} state; expected mode={was!r} (the job "
                            "declares its mode: changing it is not an edit of this kind)")
    p = plan.parallelism or plan.source.parallelism
    if mode == "broadcast":
        if not isinstance(values, dict):
            raise EditError(f"{where}: broadcast state takes a dict of entries; found {type(values).__name__}")
        kdesc = existing["key_type"] if existing else _declared(list(values), key_type, "key", where)
        vdesc = existing["value_type"] if existing else _declared(list(values.values()), value_type, "value", where)
        kinfo, vinfo = type_from_description(kdesc), type_from_description(vdesc)
        entries = []
        for k, v in values.items():
            k, v = _plain(k), _plain(v)
            _check_value(kinfo, k, f"{where}, key {k!r}")
            _check_value(vinfo, v, f"{where}, key {k!r}")
            entries.append([kinfo.to_arrow(k), vinfo.to_arrow(v)])
        entry = {"key_type": kdesc, "value_type": vdesc, "entries": entries}
        return {"kind": "broadcast", "per_subtask": {i: entry for i in range(p)}}  # a copy on every subtask
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__iter__"):
        raise EditError(f"{where}: {mode} list state takes a list of values; found {type(values).__name__}")
    values = [_plain(v) for v in values]
    vdesc = existing["value_type"] if existing else _declared(values, value_type, "value", where)
    vinfo = type_from_description(vdesc)
    for i, v in enumerate(values):
        _check_value(vinfo, v, f"{where}, element {i}")
    items = [vinfo.to_arrow(v) for v in values]
    # an even split over the subtasks, as a restore at this parallelism deals them (union: each its share,
    # which a restore joins again)
    base, extra = divmod(len(items), p)
    per, pos = {}, 0
    for i in range(p):
        n = base + (1 if i < extra else 0)
        per[i] = {"mode": OPERATOR_STATE_MODES[mode], "value_type": vdesc, "items": items[pos : pos + n]}
        pos += n
    return {"kind": "lists", "per_subtask": per}


def _write_operator_state(sp: EngineSavepoint, w: _Out, plan: OperatorPlan, sub: dict, rel: str) -> bool:
    """The subtask's operator-state file with the plan's ``set_operator_state`` applied; False: none to write."""
    data = {"lists": {}, "broadcast": {}, "inflight": []}
    if sub.get("operator_state"):
        data = json.loads(resolve(sp.folder, sub["operator_state"]).read_text())
    for name, spec in plan.operator_states.items():
        data["lists"].pop(name, None)
        data["broadcast"].pop(name, None)
        data[spec["kind"]][name] = spec["per_subtask"][sub["index"]]
    if not (data["lists"] or data["broadcast"] or data.get("inflight")):
        return False
    (w.folder / rel).parent.mkdir(parents=True, exist_ok=True)
    (w.folder / rel).write_text(json.dumps(data, default=_json_default))
    w.add(rel)
    return True


# -- bootstrapping new keyed state -------------------------------------------------------------------------
BOOTSTRAP_KINDS = {"value": ("key", "value"), "list": ("key", "value"), "map": ("key", "user_key", "value")}


def new_operator(sp: EngineSavepoint, uid: str, parallelism: int | None, max_parallelism: int | None) -> EngineOperator:
    """A keyed operator the savepoint does not have: its parallelism and max parallelism given, else the
    savepoint's first keyed operator's (a job's operators usually share them)."""
    keyed = [o for o in sp.operators if o.keyed]
    p = parallelism or (keyed[0].parallelism if keyed else None)
    max_p = max_parallelism or (keyed[0].max_parallelism if keyed else None)
    if not p or not max_p:
        raise EditError(f"{sp.folder}: no keyed operator to take the new operator {uid!r}'s parallelism from; "
                        "pass parallelism= and max_parallelism=")
    if not 0 < p <= max_p:
        raise EditError(f"{sp.folder}: new operator {uid!r}: expected 0 < parallelism <= max parallelism, found "
                        f"{p} and {max_p}")
    subtasks = [{"index": i, "states": [], "timers": None, "operator_state": None, "records_per_key_group": None,
                 "heavy_hitters": None, "source_positions": None,
                 "key_group_range": list(key_group_range_for_operator(max_p, p, i))} for i in range(p)]
    meta = {"uid": uid, "name": uid, "kind": "bootstrapped", "keyed": True, "parallelism": p, "max_parallelism": max_p,
            "description": {}, "states": [], "subtasks": subtasks}
    return EngineOperator(uid, uid, max_p, p, True, meta)


def bootstrap_spec(sp: EngineSavepoint, plan: OperatorPlan, state: str, frame: Any, kind: str,
                   value_type: Any = None, user_key_type: Any = None) -> dict:
    """Check one ``bootstrap`` and give its state description and rows ``[kg, key, ns, user_key, value, ts]``
    (key groups as ``explorer.keygroups`` computes them under the operator's max parallelism, as Flink)."""
    where = f"{sp.folder}: operator {plan.uid!r}, state {state!r}"
    if kind not in BOOTSTRAP_KINDS:
        raise EditError(f"{where}: found kind {kind!r}; expected one of {', '.join(BOOTSTRAP_KINDS)}")
    cols = BOOTSTRAP_KINDS[kind]
    missing = [c for c in cols if c not in getattr(frame, "columns", ())]
    if missing:
        raise EditError(f"{where}: the frame has no column {missing}; a {kind} state is bootstrapped from "
                        f"columns {', '.join(cols)}" + (" (one row per element)" if kind == "list" else ""))
    if state in [d["name"] for d in plan.source.meta["states"]]:
        raise EditError(f"{where}: bootstrapped twice; expected one frame per state")
    keys = [_plain(k) for k in frame["key"].tolist()]
    values = [_plain(v) for v in frame["value"].tolist()]
    vdesc = _declared(values, value_type, "value", where)
    vinfo = type_from_description(vdesc)
    desc = {"kind": kind, "name": state, "ttl": None, "value_type": vdesc}
    uks: list = [None] * len(keys)
    if kind == "map":
        uks = [_plain(u) for u in frame["user_key"].tolist()]
        desc["user_key_type"] = _declared(uks, user_key_type, "user_key", where)
        ukinfo = type_from_description(desc["user_key_type"])
        for u in uks:
            _check_value(ukinfo, u, f"{where}, user key {u!r}")
    for k, v in zip(keys, values):
        _check_value(vinfo, v, f"{where}, key {k!r}")
    max_p = plan.source.max_parallelism
    rows, seen, pos = [], set(), {}
    for k, u, v in zip(keys, uks, values):
        hk = hashable_key(k)
        if kind == "list":
            u = pos[hk] = pos.get(hk, -1) + 1
        else:
            addr = (hk, u)
            if addr in seen:
                raise EditError(f"{where}: key {k!r}" + (f", user key {u!r}" if kind == "map" else "") +
                                " appears twice in the frame; expected one row each")
            seen.add(addr)
        try:
            kg = assign_to_key_group(k, max_p)
        except Exception as exc:
            raise EditError(f"{where}: key {k!r}: no key group for it ({exc})") from exc
        rows.append([kg, k, None, u, v, None])
    return {"desc": desc, "rows": rows}

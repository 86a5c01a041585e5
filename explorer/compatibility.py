"""``explorer.compatible(old, new)``: will the new job version restore the old savepoint?

``old`` is a savepoint (or checkpoint); ``new`` a savepoint or checkpoint of the new job version, which
declares the states as the new code does. Both are the engine's own snapshots, or both Flink's. The
answer is one row per operator and state of either:

* ``restores as is``: the same declaration (or state the new job adds, which starts empty; for Flink also a
  state the new job no longer declares, which Flink restores unused and carries along: checked by a real
  restore; the engine refuses one);
* ``needs migration``: a serializer change the restore handles (the engine: a dataclass that gains
  or loses fields, also inside lists and optionals; Flink: a POJO that gains or loses fields, an
  Avro schema change);
* ``will fail``: a changed kind, value type, map key type or TTL, an Avro schema that cannot read the
  old one (Avro's reader/writer resolution), an operator uid the new job lacks (the restore needs
  ``allow_non_restored_state`` / ``--allowNonRestoredState``), and for the engine a changed max
  parallelism (``explorer.edit(...).with_max_parallelism`` rewrites the savepoint for it).

Flink's verdicts for a changed value type (StateMigrationException), a missing uid, a POJO gaining a field
(migrated) and an undeclared state
are checked against real Flink 2.3 restores (``tests/edit/test_flink_restore.py``,
``test_compatible_agrees_with_the_real_flink_restore``). The engine's rules are those of its restore (``explorer/engine/checkpoint/migration.py`` and
``restore.py``); Flink's are read from the serializer snapshots the reader parses
(``readers/flink/statemeta.py``), which name a POJO's fields and an Avro schema.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from .errors import StateExplorerError
from .format.snapshot import is_snapshot_folder, read_metadata
from .format.types import describe_type
from .readers.flink.avro import AvroDecoder, avro_resolution
from .readers.flink.reader import FlinkSnapshotReader
from .readers.flink.serializers import ListDecoder, MapDecoder, PojoDecoder, TtlDecoder

__all__ = ["AS_IS", "FAIL", "MIGRATION", "compatible"]

AS_IS, MIGRATION, FAIL = "restores as is", "needs migration", "will fail"
COLUMNS = ["operator", "state", "verdict", "reason"]


def compatible(old: str | Path, new: str | Path) -> pd.DataFrame:
    """Per operator and state of ``old`` (and new states of ``new``): will a job that wrote ``new`` restore
    ``old``? Columns ``operator`` (uid), ``state`` (None: the operator itself), ``verdict`` (``"restores as
    is"``, ``"needs migration"``, ``"will fail"``) and ``reason``; failures first."""
    old, new = Path(old), Path(new)
    engine_old, engine_new = is_snapshot_folder(old), is_snapshot_folder(new)
    if engine_old != engine_new:
        raise StateExplorerError(f"{old} is {'an engine' if engine_old else 'a Flink'} snapshot and {new} "
                            f"{'an engine' if engine_new else 'a Flink'} one; expected two of the same kind")
    rows = _engine(old, new) if engine_old else _flink(old, new)
    df = pd.DataFrame(rows, columns=COLUMNS)
    order = {FAIL: 0, MIGRATION: 1, AS_IS: 2}
    return df.sort_values("verdict", key=lambda v: v.map(order), kind="stable", ignore_index=True)


# -- the engine --------------------------------------------------------------------------------------------
def _engine(old: Path, new: Path) -> list[tuple]:
    rows: list[tuple] = []
    new_ops = {o["uid"]: o for o in read_metadata(new)["operators"]}
    for o in read_metadata(old)["operators"]:
        uid = o["uid"]
        n = new_ops.get(uid)
        if n is None:
            rows.append((uid, None, FAIL, f"the new job has no operator with uid {uid!r}: restore with "
                                          "allow_non_restored_state=True to drop its state, or rename it "
                                          "(explorer.edit(...).rename_operator)"))
            continue
        if o.get("keyed") and n.get("keyed") and o["max_parallelism"] != n["max_parallelism"]:
            rows.append((uid, None, FAIL, f"max parallelism changed from {o['max_parallelism']} to "
                                          f"{n['max_parallelism']}: rewrite the savepoint with "
                                          f"explorer.edit(...).with_max_parallelism({n['max_parallelism']})"))
        else:
            rows.append((uid, None, AS_IS, "the operator is in the new job"))
        new_states = {s["name"]: s for s in n.get("states", ())}
        for s in o.get("states", ()):
            ns = new_states.pop(s["name"], None)
            rows.append((uid, s["name"], *_engine_state(s, ns)))
        for name in new_states:
            rows.append((uid, name, AS_IS, "a new state: it starts empty"))
    return rows


def _engine_state(s: dict, n: dict | None) -> tuple[str, str]:
    if n is None:
        return FAIL, ("the new job does not declare this state (renamed or removed): rename the descriptor "
                      "back, or restore with allow_non_restored_state=True to drop it")
    if s["kind"] != n["kind"]:
        return FAIL, f"kind changed from {s['kind']} to {n['kind']}"
    if s.get("ttl") != n.get("ttl"):
        return FAIL, f"TTL changed from {s.get('ttl')} to {n.get('ttl')}"
    if s.get("user_key_type") != n.get("user_key_type"):
        return FAIL, f"map key type changed from {_show(s.get('user_key_type'))} to {_show(n.get('user_key_type'))}"
    if s["value_type"] == n["value_type"]:
        return AS_IS, "the same declaration"
    changes: list[str] = []
    problem = _evolve(s["value_type"], n["value_type"], "value", changes)
    if problem:
        return FAIL, problem
    return MIGRATION, "; ".join(changes)


def _show(t: Any) -> str:
    return "none" if t is None else describe_type(t)


def _evolve(old: dict, new: dict, where: str, changes: list[str]) -> str | None:
    """None if the engine's migration takes ``old`` to ``new`` (what it does appended to ``changes``), else why not."""
    if old == new:
        return None
    if old.get("type") == "struct" and new.get("type") == "struct":
        of = {f["name"]: f["type"] for f in old["fields"]}
        nf = {f["name"]: f["type"] for f in new["fields"]}
        for name in of.keys() - nf.keys():
            changes.append(f"{where}.{name} removed")
        for name in [f for f in nf if f not in of]:
            changes.append(f"{where}.{name} added (restores when the new class gives it a default)")
        for name in of.keys() & nf.keys():
            problem = _evolve(of[name], nf[name], f"{where}.{name}", changes)
            if problem:
                return problem
        return None
    if old.get("type") == new.get("type") and old.get("type") in ("list", "optional"):
        return _evolve(old["of"], new["of"], where, changes)
    return f"{where}: type changed from {describe_type(old)} to {describe_type(new)}"


# -- Flink -------------------------------------------------------------------------------------------------
def _flink(old: Path, new: Path) -> list[tuple]:
    ro, rn = FlinkSnapshotReader(old), FlinkSnapshotReader(new)
    new_ops = {o.operator_id: o for o in rn.meta.operators}
    rows: list[tuple] = []
    for o in ro.meta.operators:
        label = o.uid or o.operator_id
        n = new_ops.get(o.operator_id)
        old_states = _flink_states(ro, o)
        has_state = bool(old_states) or any(st.managed_operator or st.raw_operator or st.raw_keyed
                                            for st in o.subtasks) or o.coordinator is not None
        if n is None:
            if has_state:
                # checked by a real restore ("compat_missing_uid"): Flink refuses it, "IllegalStateException:
                # Failed to rollback to checkpoint/savepoint ... Cannot map checkpoint/savepoint state for operator"
                rows.append((label, None, FAIL, f"the new job has no operator with uid {label!r} (operator id "
                                                f"{o.operator_id}), so Flink cannot map its state and refuses the "
                                                "restore: restore with --allowNonRestoredState to drop its "
                                                "state, or rename it (explorer.edit(...).rename_operator)"))
            else:
                rows.append((label, None, AS_IS, "the new job has no such operator, and it holds no state"))
            continue
        if old_states and n.max_parallelism != o.max_parallelism:
            rows.append((label, None, FAIL, f"max parallelism changed from {o.max_parallelism} to {n.max_parallelism}: "
                                            f"rewrite the savepoint with explorer.edit(...).with_max_parallelism"
                                            f"({n.max_parallelism})"))
        else:
            rows.append((label, None, AS_IS, "the operator is in the new job"))
        new_states = _flink_states(rn, n)
        for name, s in old_states.items():
            ns = new_states.pop(name, None)
            if ns is None:
                # checked by a real restore (tests/edit/test_flink_restore.py, "undeclared_state"): Flink restores
                # a state the new job does not register, keeps it unused and carries it into later snapshots
                rows.append((label, name, AS_IS, "the new job does not declare this state: Flink restores it "
                                                 "unused and carries it into later snapshots (a renamed descriptor "
                                                 "starts empty; explorer.edit(...).drop_state removes it)"))
            else:
                rows.append((label, name, *_flink_state(s, ns)))
        for name in new_states:
            rows.append((label, name, AS_IS, "a new state: it starts empty"))
    return rows


def _flink_states(reader: Any, op: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for st in op.subtasks:
        if st.finished or st.managed_keyed is None:
            continue
        for s in reader.keyed_header(op, st).states:
            out.setdefault(s.name, s)
    return out


def _flink_state(s: Any, n: Any) -> tuple[str, str]:
    if s.kind != n.kind:
        return FAIL, f"kind changed from {s.kind} to {n.kind}"
    if s.has_ttl != n.has_ttl:
        return FAIL, f"TTL {'removed' if s.has_ttl else 'added'} (Flink refuses a changed TTL setting)"
    changes: list[str] = []
    for role in ("NAMESPACE_SERIALIZER",):
        a, b = s.serializers.get(role), n.serializers.get(role)
        if a is not None and b is not None and a.describe() != b.describe():
            return FAIL, f"namespace type changed from {a.describe()} to {b.describe()}"
    problem = _flink_evolve(s.value_decoder, n.value_decoder, "value", changes)
    if problem:
        if "snapshot missing" not in problem:
            # checked by real restores (tests/edit/test_flink_restore.py, "compat_type_change"): Flink 2.3 fails
            # with "StateMigrationException: ... the new state serializer (StringSerializer) must not be
            # incompatible with the old state serializer (LongSerializer)", on HashMap and RocksDB
            problem += (": the new state serializer is incompatible with the old one, Flink fails the restore "
                        "(StateMigrationException)")
        return FAIL, problem
    return (MIGRATION, "; ".join(changes)) if changes else (AS_IS, "the same serializers")


def _flink_evolve(a: Any, b: Any, where: str, changes: list[str]) -> str | None:
    if a is None or b is None:
        return None if a is b else f"{where}: serializer snapshot missing on one side"
    if type(a) is not type(b):
        return f"{where}: type changed from {a.describe()} to {b.describe()}"
    if isinstance(a, TtlDecoder):
        return _flink_evolve(a.value, b.value, where, changes)
    if isinstance(a, ListDecoder):
        return _flink_evolve(a.elem, b.elem, where, changes)
    if isinstance(a, MapDecoder):
        if a.key.describe() != b.key.describe():
            return f"{where}: map key type changed from {a.key.describe()} to {b.key.describe()}"
        return _flink_evolve(a.value, b.value, where, changes)
    if isinstance(a, PojoDecoder):
        if a.cls != b.cls:
            return f"{where}: POJO class changed from {a.cls} to {b.cls}"
        fa, fb = dict(a.fields), dict(b.fields)
        for name in fa.keys() - fb.keys():
            changes.append(f"{where}.{name} removed (Flink's POJO serializer migrates it)")
        for name in [f for f in fb if f not in fa]:
            changes.append(f"{where}.{name} added (Flink's POJO serializer migrates it, the field starts null/0)")
        for name in fa.keys() & fb.keys():
            if fa[name] is not None and fb[name] is not None:
                problem = _flink_evolve(fa[name], fb[name], f"{where}.{name}", changes)
                if problem:
                    return problem
        return None
    if isinstance(a, AvroDecoder):
        if a.schema.source == b.schema.source:
            return None
        problem = avro_resolution(a.schema, b.schema)
        if problem:
            return f"{where}: the new Avro schema cannot read the old one ({problem})"
        changes.append(f"{where}: Avro schema changed; the new schema reads the old by Avro's resolution rules "
                       "(Flink migrates the values)")
        return None
    if a.describe() != b.describe():
        return f"{where}: type changed from {a.describe()} to {b.describe()}"
    return None

"""Edited savepoints restored by real Apache Flink (issue 32: "every edit is checked by a real Flink restore,
never only by our own reader").

Three inputs: the plain job's RocksDB canonical savepoint (below), the types job's heap canonical savepoint
(``TYPES``: POJOs, Rows, Tuples, collections, java.time, BigDecimal and TTL values changed by ``map_values`` /
``update``; restored into the types job, whose dump prints every value with the encoding EXPECTED.json holds and
every TTL entry's last access), and the Flink 1.20 plain job's heap canonical savepoint restored in Flink 1.20
(``V120_CASES``, a second JVM). Every restored key is checked by Flink's own ``KeyGroupRangeAssignment`` to lie in
the key groups of the subtask that holds it (``KEYGROUP`` lines).

The plain production job's canonical savepoint (``sample_data/flink/production/plain-rocksdb-canonical-savepoint``,
written by ``tools/flink/src/ProductionFixtures.java``) is edited here, then restored into the same job
(same uids and state descriptors; ``tools/flink/src/RestoreCheck.java``) on the HashMap and the RocksDB
backend without ``allowNonRestoredState``; the restored job prints every entry of every keyed state and
timer, which must equal the job's own EXPECTED.json with the edit applied. One JVM runs every restore.
``COMPAT_CASES`` run in it too: job versions that take their own savepoint (``explorer.compatible``'s new side)
and into which the savepoint is restored, some failing (StateMigrationException, an unmapped uid); compatible()'s
verdict must agree with each real outcome.
Marked ``flink``: needs Java 17 and Flink's jars (fetched from PyPI into .cache/flink); runs in CI, never
skipped (``make flink-restore-check`` runs these alone).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import tempfile
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.compatibility import AS_IS, FAIL, MIGRATION

from .expected import entry, expected_entries

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "sample_data" / "flink" / "production"
PLAIN = PRODUCTION / "plain-rocksdb-canonical-savepoint"
TYPES = PRODUCTION / "types-heap-canonical-savepoint"
PLAIN_120 = PRODUCTION / "flink-1.20-plain-heap-canonical-savepoint"
BACKENDS = ("hashmap", "rocksdb")
DROPPED_KEYS = ["user-00", "user-07", "user-13"]

#: edit name -> (the edit, the job's uids for user-activity / category-windows ("-": not in the job) [and for the
#: bootstrapped operator], what to expect)
CASES = {
    "drop_operator": (lambda e: e.drop_operator("category-windows"), ("user-activity", "-"),
                      dict(operators={"user-activity"})),
    "rename_operator": (lambda e: e.rename_operator("user-activity", "user-activity-v2"),
                        ("user-activity-v2", "category-windows"), dict(rename={"user-activity": "user-activity-v2"})),
    "drop_keys": (lambda e: e.drop_keys(operator="user-activity", keys=DROPPED_KEYS), ("user-activity", "category-windows"),
                  dict(keep=lambda op, st, e: not (op == "user-activity" and e["key"] in DROPPED_KEYS))),
    "with_max_parallelism": (lambda e: e.with_max_parallelism(256), ("user-activity", "category-windows"), {}),
    # the state split for 1 subtask (the source's split state of subtask 1 beside subtask 0's) and for 3
    "with_parallelism_1": (lambda e: e.with_parallelism(1), ("user-activity", "category-windows"), {}),
    "with_parallelism_3": (lambda e: e.with_parallelism(3).with_parallelism(3, operator="sequence"),
                           ("user-activity", "category-windows"), {}),
    "drop_state_and_filter": (
        lambda e: e.drop_state(operator="user-activity", state="total")
        .filter(operator="user-activity", state="per_category", where=lambda r: r["user_key"] != "books"),
        ("user-activity", "category-windows"),
        dict(keep=lambda op, st, e: st != "total" and not (st == "per_category" and e["user_key"] == "books"))),
    "map_values_and_update": (
        lambda e: e.map_values(operator="user-activity", state="total", fn=lambda r: r["value"] * 2)
        .map_values(operator="user-activity", state="stats",  # a POJO, with the field layout its snapshot records
                    fn=lambda r: {**r["value"], "count": r["value"]["count"] + 1000, "lastCategory": "é\"x"})
        .map_values(operator="user-activity", state="amounts", fn=lambda r: r["value"] + r["user_key"])
        .update(operator="user-activity", state="per_category", key="user-00", user_key="books", value=999),
        ("user-activity", "category-windows"), dict(change=lambda op, st, e: _changed(st, e))),
    # a new operator's value states (Long, String), keyed by user: the job declares it under uid "limits"
    # and its operator state: split and union list state, broadcast state
    "bootstrap": (lambda e: e.bootstrap("limits", "limit", pd.DataFrame(BOOT_LIMITS, columns=["key", "value"]))
                  .bootstrap("limits", "label", pd.DataFrame(BOOT_LABELS, columns=["key", "value"]))
                  .bootstrap("limits", "history", pd.DataFrame(BOOT_HISTORY, columns=["key", "value"]), kind="list",
                             value_type="Integer")
                  .bootstrap("limits", "flags", pd.DataFrame(BOOT_FLAGS, columns=["key", "user_key", "value"]), kind="map")
                  .set_operator_state("limits", "names", BOOT_NAMES, mode="split")
                  .set_operator_state("limits", "everyone", BOOT_EVERYONE, mode="union")
                  .set_operator_state("limits", "rules", BOOT_RULES, mode="broadcast"),
                  ("user-activity", "category-windows", "limits"), {}),
    # a second edit of the bootstrapped savepoint: operator state set next to the states the operators hold (the
    # split state of the source "sequence", kept byte for byte; "names" replaced, "everyone" and "rules" kept)
    "operator_state_merge": (lambda e: _second_edit(e), ("user-activity", "category-windows", "limits"), {}),
    # not an edit: the savepoint restored into a job version that no longer declares the state "total"
    # (explorer.compatible's verdict for it is checked against this restore)
    "undeclared_state": (lambda e: e, ("user-activity+without:total", "category-windows"),
                         dict(keep=lambda op, st, e: st != "total")),
}

#: explorer.compatible against real restores (RestoreCheck, Flink 2.3): name -> the new job version's uids for
#: user-activity / category-windows (RestoreCheck's job variants), the cases whose restores of PLAIN into that
#: version give Flink's outcome (label prefix, backends), and the row compatible() must give (operator, state,
#: verdict, reason pattern) with the pattern of Flink's FAILED line (None: it restores). The new job version also
#: takes its own canonical savepoint ("SAVED"), which is compatible()'s ``new`` side.
COMPAT_CASES = {
    # ValueState-like "total" declared with String instead of Long values: an incompatible serializer
    "compat_type_change": (("user-activity+without:long-total", "category-windows"), ("compat_type_change", BACKENDS),
                           ("user-activity", "total", FAIL,
                            r"value: type changed from Long to String: the new state serializer is incompatible.*"
                            r"StateMigrationException"),
                           r"^org\.apache\.flink\.util\.StateMigrationException: .*new state serializer "
                           r"\(org\.apache\.flink\.api\.common\.typeutils\.base\.StringSerializer@\w+\) must not be "
                           r"incompatible with the old state serializer \(org\.apache\.flink\.api\.common\.typeutils"
                           r"\.base\.LongSerializer@\w+\)"),
    # user-activity's uid renamed in the new job (the savepoint not edited), no allowNonRestoredState; refused
    # before any task runs, so on one backend
    "compat_missing_uid": (("user-activity-v2", "category-windows"), ("compat_missing_uid", ("hashmap",)),
                           ("user-activity", None, FAIL, r"Flink cannot map its state.*--allowNonRestoredState"),
                           r"^java\.lang\.IllegalStateException: Failed to rollback to checkpoint/savepoint .*"
                           r"Cannot map checkpoint/savepoint state for operator 65e1ebeeeb7ae973112c72d729725419 "
                           r"to the new program.*allowNonRestoredState"),
    # the Stats POJO of "stats" gains a field (tools/flink/src/stats-v2, the version's user jar): Flink migrates
    # the values on restore; the restored job sees them as the old job wrote them
    "compat_pojo_field_added": (("user-activity+without:stats-v2", "category-windows"),
                                ("compat_pojo_field_added", BACKENDS),
                                ("user-activity", "stats", MIGRATION, r"value\.tier added \(Flink's POJO serializer migrates"),
                                None),
    # the state "total" no longer declared: restores (CASES' "undeclared_state" restores, both backends)
    "compat_undeclared_state": (("user-activity+without:total", "category-windows"), ("undeclared_state", BACKENDS),
                                ("user-activity", "total", AS_IS, r"does not declare this state: Flink restores it"),
                                None),
}

BOOT_LIMITS = [("user-00", 100), ("user-05", 250), ("user-x", -3), ("user-13", 2**40)]
BOOT_LABELS = [("user-00", "gold"), ("user-07", 'a "quoted" é ☃\n')]
BOOT_HISTORY = [("user-00", 3), ("user-00", -1), ("user-00", 3), ("user-x", 2**31 - 1)]  # a list per key, in order
BOOT_FLAGS = [("user-00", "vip", "yes"), ("user-00", "é", 'q"'), ("user-13", "vip", "no")]
BOOT_NAMES = ["a", 'b"q', "c"]  # split over the job's 2 subtasks: a, b"q | c
BOOT_EVERYONE = [1, 2, 3, 2**40]  # union: every subtask restores all of them
BOOT_RULES = {"x": 1, "é": 2}  # broadcast: a copy on every subtask


def _bootstrapped() -> list[tuple]:
    """What the restored job prints of the bootstrapped operator: keyed entries, and per subtask (as the key)
    its operator state, the union's elements as a multiset (their order is Flink's to choose)."""
    keyed = [entry("limits", st, {"key": k, "value": v}) for st, rows in (("limit", BOOT_LIMITS),
                                                                          ("label", BOOT_LABELS)) for k, v in rows]
    keyed += [entry("limits", "history", {"key": k, "user_key": i, "value": v})
              for k in ("user-00", "user-x") for i, v in enumerate(v for kk, v in BOOT_HISTORY if kk == k)]
    keyed += [entry("limits", "flags", {"key": k, "user_key": uk, "value": v}) for k, uk, v in BOOT_FLAGS]
    names = [entry("limits", "op:names", {"key": sub, "user_key": i, "value": v})
             for sub, part in ((0, BOOT_NAMES[:2]), (1, BOOT_NAMES[2:])) for i, v in enumerate(part)]
    union = [entry("limits", "op:everyone", {"key": sub, "user_key": None, "value": v})
             for sub in (0, 1) for v in BOOT_EVERYONE]
    rules = [entry("limits", "op:rules", {"key": sub, "user_key": k, "value": v}) for sub in (0, 1)
             for k, v in BOOT_RULES.items()]
    return keyed + names + union + rules


def _second_edit(e: explorer.Editor) -> explorer.Editor:
    """The bootstrap case's savepoint, written, then edited again: operator state set where operators hold some."""
    first = Path(tempfile.mkdtemp(prefix="first-edit-")) / "savepoint"
    CASES["bootstrap"][0](e).write(first)
    return (explorer.edit(first).set_operator_state("limits", "names", ["z"], mode="split")
            .set_operator_state("limits", "extra", MERGED_EXTRA, mode="union")
            .set_operator_state("sequence", "extra", [7], mode="union")
            .set_operator_state("sequence", "SourceReaderState", [{**_split(), "from": MOVED_TO}]))  # the offset moved


MOVED_TO = 1_000_000


def _split() -> dict:
    """The sequence source's one split as the reader shows it (the number it resumes from, "from")."""
    state = explorer.open(PLAIN).operator_state()
    (split,) = state[state["state"] == "SourceReaderState"]["value"]
    return dict(split)


MERGED_EXTRA = ["e1", "é2", "e3"]


def _merged() -> list[tuple]:
    """What the restored job prints of "limits" after _second_edit."""
    out = [x for x in _bootstrapped() if x[1] != "op:names"]
    out.append(entry("limits", "op:names", {"key": 0, "user_key": 0, "value": "z"}))
    out += [entry("limits", "op:extra", {"key": sub, "user_key": None, "value": v}) for sub in (0, 1) for v in MERGED_EXTRA]
    return out


def _unordered_union(entries: list[tuple]) -> list[tuple]:
    return sorted(e[:4] + ("null",) + e[5:] if e[1] in ("op:everyone", "op:extra") else e for e in entries)


def _changed(state: str, e: dict) -> dict:
    if state == "total":
        e["value"] *= 2
    elif state == "amounts":
        e["value"] += e["user_key"]
    elif state == "per_category" and e["key"] == "user-00" and e["user_key"] == "books":
        e["value"] = 999
    elif state == "stats":
        e["value"] = {**e["value"], "fields": {**e["value"]["fields"], "count": e["value"]["fields"]["count"] + 1000,
                                                "lastCategory": 'é"x'}}
    return e


# -- the types job: every value kind the writer encodes, on a heap canonical savepoint -----------------------
FIRST_SEEN = pd.Timestamp("2024-01-02T03:04:05.123456789Z")
LAST_LOCAL = pd.Timestamp("2024-01-02 03:04:05.000000123")
LEGACY = pd.Timestamp("2024-01-02T03:04:05.123Z")
VISITS = pd.Timestamp("2024-01-02T03:04:05.500Z")
TTL_LIST_AT, TTL_MAP_AT = 1_700_000_000_000, 1_700_000_001_000


def types_edit(e: explorer.Editor) -> explorer.Editor:
    """One change to every state of the types job whose serializer the writer encodes (all but the Kryo ones);
    the savepoint's source chain (an older one, "events-source" and "drop-idle") is dropped, as RestoreCheck's
    job has today's."""
    op = "user-types"
    e.drop_operator("events-source").drop_operator("drop-idle")

    def m(state, fn, **kw):
        e.map_values(operator=op, state=state, fn=fn, **kw)

    m("basket", lambda r: {**r["value"], "items": [1, 2], "counts": {"a": 1}, "id": None})  # POJO: List, Map, POJO
    m("row", lambda r: {**r["value"], "f1": r["value"]["f1"] * 10, "f2": None})  # Row, a null field
    m("tuple", lambda r: (r["value"]["f0"], True, r["value"]["f2"]))  # Tuple3 given as a tuple
    m("list_value", lambda r: list(r["value"]) + [7])  # ValueState of a List
    m("map_value", lambda r: {**r["value"], "z": 1})  # ValueState of a Map
    m("tier", lambda r: "SILVER")  # enum
    m("spend", lambda r: r["value"] * 2)  # BigDecimal (scale kept)
    m("big", lambda r: r["value"] + 1)  # BigInteger
    m("day", lambda r: r["value"] + dt.timedelta(days=1))  # LocalDate
    m("first_seen", lambda r: FIRST_SEEN)  # Instant, nanoseconds
    m("last_local", lambda r: LAST_LOCAL)  # LocalDateTime, nanoseconds
    m("legacy_date", lambda r: LEGACY)  # java.util.Date
    m("sql_ts", lambda r: FIRST_SEEN)  # java.sql.Timestamp, nanoseconds
    m("either", lambda r: {"left": None, "right": 5})
    m("long_array", lambda r: list(r["value"])[::-1])
    m("names_array", lambda r: list(r["value"]) + ["é"])
    m("bytes", lambda r: r["value"] + b"!")
    m("by_day", lambda r: r["value"] + 100)  # MapState<LocalDate, Long>
    m("visit_times", lambda r: VISITS + pd.Timedelta(minutes=r["user_key"]))  # ListState<Instant>
    m("ttl_value", lambda r: r["value"] + 1)  # TTL: last access kept
    m("ttl_list", lambda r: r["value"].upper(), last_access=TTL_LIST_AT)  # TTL: last access set
    return e.update(operator=op, state="ttl_map", key="user-00", user_key="food", value=1, last_access=TTL_MAP_AT)


def _instant(ts: pd.Timestamp) -> str:
    """Java's ``Instant.toString``: the fraction of a second in groups of three digits, none when zero."""
    frac = f"{ts.value % 10**9:09d}"
    while frac.endswith("000"):
        frac = frac[:-3]
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + (f".{frac}" if frac else "") + "Z"


def _types_changed(state: str, e: dict) -> dict:
    """The edit of types_edit applied to one EXPECTED.json entry (values in Expect.enc's encoding)."""
    v = e["value"]
    ms = LEGACY.value // 10**6
    change = {
        "basket": lambda: {**v, "fields": {**v["fields"], "items": [1, 2], "counts": {"type": "map", "entries": [["a", 1]]},
                                           "id": None}},
        "row": lambda: {**v, "fields": {**v["fields"], "visits": v["fields"]["visits"] * 10, "score": None}},
        "tuple": lambda: {**v, "fields": [v["fields"][0], True, v["fields"][2]]},
        "list_value": lambda: v + [7],
        "map_value": lambda: {**v, "entries": v["entries"] + [["z", 1]]},
        "tier": lambda: {**v, "value": "SILVER"},
        "spend": lambda: {**v, "value": format(Decimal(v["value"]) * 2, "f")},
        "big": lambda: {**v, "value": str(int(v["value"]) + 1)},
        "day": lambda: {**v, "value": (dt.date.fromisoformat(v["value"]) + dt.timedelta(days=1)).isoformat()},
        "first_seen": lambda: {**v, "value": _instant(FIRST_SEEN)},
        "last_local": lambda: {**v, "value": "2024-01-02T03:04:05.000000123"},
        "legacy_date": lambda: {**v, "value": _instant(LEGACY), "epoch_ms": ms},
        "sql_ts": lambda: {**v, "value": _instant(FIRST_SEEN), "epoch_ms": ms, "nanos": 123456789},
        "either": lambda: {"type": "either", "side": "right", "value": 5},
        "long_array": lambda: {**v, "values": v["values"][::-1]},
        "names_array": lambda: {**v, "values": v["values"] + ["é"]},
        "bytes": lambda: {**v, "hex": v["hex"] + "21"},
        "by_day": lambda: v + 100,
        "visit_times": lambda: {**v, "value": _instant(VISITS + pd.Timedelta(minutes=e["user_key"]))},
        "ttl_value": lambda: v + 1,
        "ttl_list": lambda: v.upper(),
        "ttl_map": lambda: 1 if (e["key"], e["user_key"]) == ("user-00", "food") else v,
    }.get(state)
    if change is not None:
        e["value"] = change()
    return e


def _canon(entries: list[tuple]) -> list[tuple]:
    """Entries with every map's entries in one order (Expect.enc sorts them by their text, escapes and all)."""
    def fix(x):
        if isinstance(x, dict):
            x = {k: fix(v) for k, v in x.items()}
            if x.get("type") == "map":
                x["entries"] = sorted(x["entries"], key=json.dumps)
            return x
        return [fix(i) for i in x] if isinstance(x, list) else x
    return sorted(e[:2] + tuple(json.dumps(fix(json.loads(c)), sort_keys=True) for c in e[2:]) for e in entries)


def _types_last_access() -> dict[tuple, int]:
    """(state, key, user key) -> the last access (ms) each TTL entry must have after types_edit."""
    snap = explorer.open(TYPES)
    out = {}
    for state in ("ttl_value", "ttl_list", "ttl_map"):
        df = snap.keyed_state(operator="user-types", state=state)
        for r in df.to_dict("records"):
            uk = None if state == "ttl_value" else (int(r["user_key"]) if state == "ttl_list" else r["user_key"])
            at = r["last_access"].value // 10**6
            if state == "ttl_list":
                at = TTL_LIST_AT
            elif state == "ttl_map" and (r["key"], uk) == ("user-00", "food"):
                at = TTL_MAP_AT
            out[(state, r["key"], uk)] = at
    return out


# -- Flink 1.20: the 1.20 plain job's heap canonical savepoint, edited and restored in Flink 1.20 -------------
V120_CASES = {
    "drop_keys": (lambda e: e.drop_keys(operator="user-activity", keys=DROPPED_KEYS), ("user-activity", "category-windows"),
                  dict(keep=lambda op, st, e: not (op == "user-activity" and e["key"] in DROPPED_KEYS)), 128),
    "rename_operator": (lambda e: e.rename_operator("user-activity", "user-activity-v2"),
                        ("user-activity-v2", "category-windows"), dict(rename={"user-activity": "user-activity-v2"}), 128),
    "max_parallelism_256": (lambda e: e.with_max_parallelism(256), ("user-activity", "category-windows"), {}, 256),
    "max_parallelism_4096": (lambda e: e.with_max_parallelism(4096), ("user-activity", "category-windows"), {}, 4096),
}


def _run(specs: list[str], version: str) -> tuple[dict, dict, list[str]]:
    """One JVM restoring every spec: label -> printed entries (sorted), label -> status, the KEYGROUP and FIRST
    lines."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.fail("the Flink restore tests need Java 17 (java, javac) on PATH; they are never skipped", pytrace=False)
    env = dict(os.environ, FLINK_VERSION=version)
    proc = subprocess.run([str(ROOT / "tools" / "flink" / "restore_check.sh"), *specs], capture_output=True, text=True,
                          timeout=1500, env=env)
    got: dict[str, list] = {}
    status, keygroups = {}, []
    for line in proc.stdout.splitlines():
        if line.startswith("STATE "):
            _, label, rest = line.split(" ", 2)
            got.setdefault(label, []).append(json.loads(rest))
        elif line.startswith(("RESTORED ", "FAILED ", "SAVED ")):
            word, label, *why = line.split(" ", 2)
            status[label] = (word, why)
        elif line.startswith(("KEYGROUP ", "FIRST ")):
            keygroups.append(line)
    assert proc.returncode in (0, 3) and len(status) == len(specs), f"exit {proc.returncode}: {status}\n{proc.stderr[-3000:]}"
    return got, status, keygroups


@pytest.fixture(scope="module")
def restored(tmp_path_factory) -> dict[str, list[tuple]]:
    """label -> the entries the restored job printed (sorted), for every case on both backends (Flink 2.3)."""
    root = tmp_path_factory.mktemp("edited")
    specs = []
    for name, (edit, uids, _) in CASES.items():
        out = edit(explorer.edit(PLAIN)).write(root / name)
        for backend in BACKENDS:
            specs.append(f"{name}-{backend}={out},{backend},{','.join(uids)}")
    types_out = types_edit(explorer.edit(TYPES)).write(root / "types")
    specs += [f"types-{b}={types_out},{b},job:types,user-types" for b in BACKENDS]
    compat = set()  # the compat cases' labels: their restores may fail (the outcome compatible() is checked against)
    for name, (uids, (restore, backends), _, _) in COMPAT_CASES.items():
        specs.append(f"{name}-new=new:{root / (name + '-new')},hashmap,{','.join(uids)}")
        compat.add(f"{name}-new")
        if restore not in CASES:
            specs += [f"{restore}-{b}={PLAIN},{b},{','.join(uids)}" for b in backends]
            compat |= {f"{restore}-{b}" for b in backends}
    raw, status, keygroups = _run(specs, "2.3.0")
    assert all(w == "RESTORED" for label, (w, _) in status.items() if label not in compat), status
    assert keygroups and not [k for k in keygroups if " WRONG " in k]
    out = {label: sorted(entry(e["operator"], e["state"], e) for e in v) for label, v in raw.items()}
    out["keygroups"] = keygroups
    out["types-last-access"] = {b: {(e["state"], e["key"], e["user_key"]): e["last_access"] for e in raw[f"types-{b}"]
                                    if "last_access" in e} for b in BACKENDS}
    out["status"] = status
    return out | {label: [] for label in status if label not in out}


@pytest.fixture(scope="module")
def restored_120(tmp_path_factory) -> tuple[dict, list[str]]:
    """The Flink 1.20 cases: label -> printed entries (sorted), and the KEYGROUP lines."""
    root = tmp_path_factory.mktemp("edited-1.20")
    specs = []
    for name, (edit, uids, _, _) in V120_CASES.items():
        out = edit(explorer.edit(PLAIN_120)).write(root / name)
        specs += [f"{name}-{b}={out},{b},{','.join(uids)}" for b in BACKENDS]
    raw, status, keygroups = _run(specs, "1.20.3")
    assert all(w == "RESTORED" for w, _ in status.values()), status
    return {label: sorted(entry(e["operator"], e["state"], e) for e in v) for label, v in raw.items()}, keygroups


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_flink_restores_the_edited_savepoint_with_the_edit_applied(restored, name, backend):
    want = expected_entries(PLAIN, **CASES[name][2])
    got = restored[f"{name}-{backend}"]
    if name == "bootstrap":
        want, got = _unordered_union(want + _bootstrapped()), _unordered_union(got)
    if name == "operator_state_merge":
        want, got = _unordered_union(want + _merged()), _unordered_union(got)
    assert len(want) > 100
    assert got == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_flink_restores_edited_pojo_row_collection_time_and_ttl_values(restored, backend):
    """Every value kind the writer encodes, changed on a heap canonical savepoint, is what Flink restores; TTL
    entries keep their last access, or have the one the edit set."""
    want = _canon(expected_entries(TYPES, change=lambda op, st, e: _types_changed(st, e)))
    got = _canon(restored[f"types-{backend}"])
    assert len(want) > 1000
    assert got == want
    assert restored["types-last-access"][backend] == _types_last_access()


@pytest.mark.parametrize("backend", BACKENDS)
def test_flink_finds_every_moved_key_in_its_own_key_group(restored, backend):
    """After with_max_parallelism(256) the job runs at max parallelism 256, and every key of both operators lies in
    the key groups of the subtask that holds it by Flink's KeyGroupRangeAssignment."""
    mine = [k.split() for k in restored["keygroups"]
            if k.startswith("KEYGROUP ") and k.split()[1] == f"with_max_parallelism-{backend}"]
    assert {k[2] for k in mine} == {"user-activity", "category-windows"}
    assert all(k[3] == "256" and k[5] == "OK" for k in mine) and len(mine) > 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_flink_resumes_the_source_from_the_split_offset_the_edit_set(restored, backend):
    """The sequence source's split moved to MOVED_TO: the restored source emits MOVED_TO first; unedited, it
    resumes from the split the savepoint holds."""
    first = {k.split()[1]: int(k.split()[2]) for k in restored["keygroups"] if k.startswith("FIRST ")}
    assert first[f"operator_state_merge-{backend}"] == MOVED_TO
    assert first[f"drop_keys-{backend}"] == _split()["from"] != MOVED_TO


def test_a_pojo_with_kryo_fields_is_refused_not_written(tmp_path):
    """Profile's java.time fields are Kryo generic types inside the POJO: its values are refused, naming them."""
    e = explorer.edit(TYPES).map_values(operator="user-types", state="profile", fn=lambda r: {**r["value"], "visits": 1})
    with pytest.raises(explorer.EditError, match=r"POJO ProductionFixtures\$Profile.*Kryo"):
        e.write(tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(V120_CASES))
def test_flink_1_20_restores_the_edited_1_20_savepoint(restored_120, name, backend):
    got, keygroups = restored_120
    want = expected_entries(PLAIN_120, **V120_CASES[name][2])
    assert len(want) > 100
    assert got[f"{name}-{backend}"] == want
    mine = [k.split() for k in keygroups if k.startswith("KEYGROUP ") and k.split()[1] == f"{name}-{backend}"]
    assert mine and all(k[3] == str(V120_CASES[name][3]) and k[5] == "OK" for k in mine)


def test_compatible_says_a_state_the_new_job_no_longer_declares_restores(restored, tmp_path):
    """Flink restored the savepoint into a job version without the state "total" (the "undeclared_state" case, on
    both backends: it restored, and the job sees its other states); compatible() gives that verdict, with a new-job
    savepoint that lacks the state."""
    assert all(restored[f"undeclared_state-{b}"] for b in BACKENDS)
    new = explorer.edit(PLAIN).drop_state(operator="user-activity", state="total").write(tmp_path / "new")
    report = explorer.compatible(PLAIN, new)
    row = report[(report.operator == "user-activity") & (report.state == "total")].iloc[0]
    assert row.verdict == AS_IS and "does not declare" in row.reason


@pytest.mark.parametrize("name", list(COMPAT_CASES))
def test_compatible_agrees_with_the_real_flink_restore(restored, name):
    """Per case: the new job version (a RestoreCheck variant) took its own canonical savepoint, and PLAIN was
    restored into it without allowNonRestoredState on each backend. compatible(PLAIN, that savepoint) gives the
    case's row, and says "will fail" somewhere exactly when Flink's restore FAILED (with the exception expected)."""
    _, (restore, backends), (operator, state, verdict, reason), flink = COMPAT_CASES[name]
    word, why = restored["status"][f"{name}-new"]
    assert word == "SAVED", (word, why)
    report = explorer.compatible(PLAIN, why[0].removeprefix("file:"))
    rows = report[(report.operator == operator) & (report.state.isna() if state is None else report.state == state)]
    assert len(rows) == 1, report
    assert rows.iloc[0].verdict == verdict and re.search(reason, rows.iloc[0].reason), rows.iloc[0].reason
    fails = report[report.verdict == FAIL]
    for b in backends:
        word, why = restored["status"][f"{restore}-{b}"]
        assert word == ("FAILED" if len(fails) else "RESTORED"), (b, word, why, fails.to_dict("records"))
        if flink is not None:
            assert re.search(flink, why[0]), why
        if name == "compat_pojo_field_added":  # the migrated values are the ones the old job wrote
            want = expected_entries(PLAIN, keep=lambda op, st, e: st == "stats" or op == "category-windows")
            assert len(want) > 20 and restored[f"{restore}-{b}"] == want
    # the failure compatible() names is the only one (nothing else in the new version would fail)
    assert list(zip(fails.operator, fails.state)) == ([(operator, state)] if verdict == FAIL else [])

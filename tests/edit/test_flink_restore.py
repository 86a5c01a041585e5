"""Edited savepoints restored by real Apache Flink (issue 32: "every edit is checked by a real Flink restore,
never only by our own reader").

The plain production job's canonical savepoint (``sample_data/flink/production/plain-rocksdb-canonical-savepoint``,
written by ``tools/flink/src/ProductionFixtures.java``) is edited here, then restored into the same job
(same uids and state descriptors; ``tools/flink/src/RestoreCheck.java``) on the HashMap and the RocksDB
backend without ``allowNonRestoredState``; the restored job prints every entry of every keyed state and
timer, which must equal the job's own EXPECTED.json with the edit applied. One JVM runs every restore.
Marked ``flink``: needs Java 17 and Flink's jars (fetched from PyPI into .cache/flink); runs in CI, never
skipped (``make flink-restore-check`` runs these alone).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

import explorer

from .expected import entry, expected_entries

pytestmark = pytest.mark.flink

ROOT = Path(__file__).resolve().parents[2]
PLAIN = ROOT / "sample_data" / "flink" / "production" / "plain-rocksdb-canonical-savepoint"
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
    "drop_state_and_filter": (
        lambda e: e.drop_state(operator="user-activity", state="total")
        .filter(operator="user-activity", state="per_category", where=lambda r: r["user_key"] != "books"),
        ("user-activity", "category-windows"),
        dict(keep=lambda op, st, e: st != "total" and not (st == "per_category" and e["user_key"] == "books"))),
    "map_values_and_update": (
        lambda e: e.map_values(operator="user-activity", state="total", fn=lambda r: r["value"] * 2)
        .map_values(operator="user-activity", state="amounts", fn=lambda r: r["value"] + r["user_key"])
        .update(operator="user-activity", state="per_category", key="user-00", user_key="books", value=999),
        ("user-activity", "category-windows"), dict(change=lambda op, st, e: _changed(st, e))),
    # a new operator's value states (Long, String), keyed by user: the job declares it under uid "limits"
    # and its operator state: split and union list state, broadcast state
    "bootstrap": (lambda e: e.bootstrap("limits", "limit", pd.DataFrame(BOOT_LIMITS, columns=["key", "value"]))
                  .bootstrap("limits", "label", pd.DataFrame(BOOT_LABELS, columns=["key", "value"]))
                  .set_operator_state("limits", "names", BOOT_NAMES, mode="split")
                  .set_operator_state("limits", "everyone", BOOT_EVERYONE, mode="union")
                  .set_operator_state("limits", "rules", BOOT_RULES, mode="broadcast"),
                  ("user-activity", "category-windows", "limits"), {}),
}

BOOT_LIMITS = [("user-00", 100), ("user-05", 250), ("user-x", -3), ("user-13", 2**40)]
BOOT_LABELS = [("user-00", "gold"), ("user-07", 'a "quoted" é ☃\n')]
BOOT_NAMES = ["a", 'b"q', "c"]  # split over the job's 2 subtasks: a, b"q | c
BOOT_EVERYONE = [1, 2, 3, 2**40]  # union: every subtask restores all of them
BOOT_RULES = {"x": 1, "é": 2}  # broadcast: a copy on every subtask


def _bootstrapped() -> list[tuple]:
    """What the restored job prints of the bootstrapped operator: keyed entries, and per subtask (as the key)
    its operator state, the union's elements as a multiset (their order is Flink's to choose)."""
    keyed = [entry("limits", st, {"key": k, "value": v}) for st, rows in (("limit", BOOT_LIMITS),
                                                                          ("label", BOOT_LABELS)) for k, v in rows]
    names = [entry("limits", "op:names", {"key": sub, "user_key": i, "value": v})
             for sub, part in ((0, BOOT_NAMES[:2]), (1, BOOT_NAMES[2:])) for i, v in enumerate(part)]
    union = [entry("limits", "op:everyone", {"key": sub, "user_key": None, "value": v})
             for sub in (0, 1) for v in BOOT_EVERYONE]
    rules = [entry("limits", "op:rules", {"key": sub, "user_key": k, "value": v}) for sub in (0, 1)
             for k, v in BOOT_RULES.items()]
    return keyed + names + union + rules


def _unordered_union(entries: list[tuple]) -> list[tuple]:
    return sorted(e[:4] + ("null",) + e[5:] if e[1] == "op:everyone" else e for e in entries)


def _changed(state: str, e: dict) -> dict:
    if state == "total":
        e["value"] *= 2
    elif state == "amounts":
        e["value"] += e["user_key"]
    elif state == "per_category" and e["key"] == "user-00" and e["user_key"] == "books":
        e["value"] = 999
    return e


@pytest.fixture(scope="module")
def restored(tmp_path_factory) -> dict[str, list[tuple]]:
    """label -> the entries the restored job printed (sorted), for every case on both backends."""
    if shutil.which("java") is None or shutil.which("javac") is None:
        pytest.fail("the Flink restore tests need Java 17 (java, javac) on PATH; they are never skipped", pytrace=False)
    root = tmp_path_factory.mktemp("edited")
    specs = []
    for name, (edit, uids, _) in CASES.items():
        out = edit(explorer.edit(PLAIN)).write(root / name)
        for backend in BACKENDS:
            specs.append(f"{name}-{backend}={out},{backend},{','.join(uids)}")
    proc = subprocess.run([str(ROOT / "tools" / "flink" / "restore_check.sh"), *specs], capture_output=True, text=True,
                          timeout=1500)
    got: dict[str, list[tuple]] = {}
    status = {}
    for line in proc.stdout.splitlines():
        if line.startswith("STATE "):
            _, label, rest = line.split(" ", 2)
            e = json.loads(rest)
            got.setdefault(label, []).append(entry(e["operator"], e["state"], e))
        elif line.startswith(("RESTORED ", "FAILED ")):
            word, label, *why = line.split(" ", 2)
            status[label] = (word, why)
    assert proc.returncode == 0 and all(w == "RESTORED" for w, _ in status.values()), (
        f"exit {proc.returncode}: {status}\n{proc.stderr[-3000:]}")
    assert len(status) == len(specs)
    return {label: sorted(v) for label, v in got.items()} | {label: [] for label in status if label not in got}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(CASES))
def test_flink_restores_the_edited_savepoint_with_the_edit_applied(restored, name, backend):
    want = expected_entries(PLAIN, **CASES[name][2])
    got = restored[f"{name}-{backend}"]
    if name == "bootstrap":
        want, got = _unordered_union(want + _bootstrapped()), _unordered_union(got)
    assert len(want) > 100
    assert got == want

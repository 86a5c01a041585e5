"""Every state of every production-style Flink fixture, compared with the values the job computed.

The fixtures (``sample_data/flink/production/*``, written by real Flink jobs,
see ``tools/flink/README.md``) each carry an EXPECTED.json listing every state
entry the job wrote. One test per (fixture, operator, state) reads that state
with ``keyed_state`` and compares every expected entry
(:func:`tests.support.flink_expected.check_state`, the same comparison as the
survey ``tools/flink/check_fixtures.py``).

States that still fail for a reason outside the value decoders are listed in
:data:`EXPECTED_FAILURES` with the status they fail with today; their test
asserts that they still fail *that way*, so nothing is skipped silently and
whoever fixes one sees its test fail and removes the row.
"""

from __future__ import annotations

import json
from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path

import pytest

import explorer
from explorer.errors import StateExplorerError
from tests.support.flink_expected import check_state, resolve_operator

PRODUCTION = Path(__file__).resolve().parents[2] / "sample_data" / "flink" / "production"

#: (fixture pattern, state pattern, status the state fails with today, why and whose part it is).
#: Patterns are fnmatch patterns over the fixture folder name and the state name.
EXPECTED_FAILURES: list[tuple[str, str, str, str]] = [
    # Kryo: Flink writes no schema for a FieldSerializer class; without the job's jar or a type hint
    # (tests/readers/test_flink_kryo.py passes them) it stays raw, and on a heap checkpoint is skipped.
    # Kryo's default serializers (Optional, java.time fields) decode without either.
    ("*types-heap-checkpoint", "kryo", "MISSING", "Kryo value on a heap checkpoint: skipped (no length)"),
    ("*types-*", "kryo", "RAW", "Kryo FieldSerializer class without a jar or hint"),
]


def _cases():
    out = []
    for folder in sorted(PRODUCTION.iterdir()):
        f = folder / "EXPECTED.json"
        if not f.is_file():
            continue
        exp = json.loads(f.read_text())
        for uid, op in exp.get("operators", {}).items():
            for state in op["states"]:
                out.append(pytest.param(folder.name, uid, state, id=f"{folder.name}:{uid}:{state}"))
    return out


def _expected_failure(fixture: str, state: str) -> tuple[str, str] | None:
    for fpat, spat, status, why in EXPECTED_FAILURES:
        if fnmatch(fixture, fpat) and fnmatch(state, spat):
            return status, why
    return None


@lru_cache(maxsize=None)
def _expected(fixture: str) -> dict:
    return json.loads((PRODUCTION / fixture / "EXPECTED.json").read_text())


@lru_cache(maxsize=4)
def _open(fixture: str):
    """(snapshot, its operators with keyed state) or the StateExplorerError that opening raised."""
    exp = _expected(fixture)
    try:
        snap = explorer.open(PRODUCTION / fixture, uids=exp.get("uids") or None, **exp.get("open_options", {}))
        ops = snap.operators
        return snap, sorted(ops[ops["has_keyed_state"]]["operator"])
    except StateExplorerError as exc:
        return exc, []


def _status(fixture: str, uid: str, state: str) -> tuple[str, str]:
    exp = _expected(fixture)
    snap, ops = _open(fixture)
    if isinstance(snap, StateExplorerError):
        return "EXC", f"open: {snap}"
    real = resolve_operator(ops, uid, exp.get("operator_match", "uid"))
    if real is None:
        return "MISSING", f"operator {uid!r} not among {ops}"
    spec = exp["operators"][uid]["states"][state]
    if state not in set(snap.states.query("operator == @real")["state"]):
        return "MISSING", f"state {state!r} not listed for operator {real!r}"
    res = check_state(snap, real, state, spec, list(snap.notes))
    return res["status"], f"{res['example']} {res.get('note', '')}".strip()


@pytest.mark.parametrize(("fixture", "uid", "state"), _cases())
def test_state_equals_the_jobs_expected_values(fixture, uid, state):
    status, detail = _status(fixture, uid, state)
    known = _expected_failure(fixture, state)
    if known is None:
        assert status == "OK", f"{fixture} {uid}/{state}: {status}: {detail}"
    else:
        want, why = known
        assert status.startswith(want), (
            f"{fixture} {uid}/{state} is listed as failing with {want} ({why}) but now gives {status}: {detail}; "
            "if it is fixed, remove its row from EXPECTED_FAILURES")


@pytest.mark.parametrize("fixture", sorted(p.name for p in PRODUCTION.iterdir() if (p / "EXPECTED.json").is_file()))
def test_only_state_explorer_errors(fixture):
    """Whatever fails on a production snapshot fails as a StateExplorerError (naming the file)."""
    snap, _ = _open(fixture)
    if isinstance(snap, StateExplorerError):
        assert str(PRODUCTION / fixture) in str(snap) or fixture in str(snap)
        return
    for fn in (lambda: snap.states, lambda: snap.hot_keys(), lambda: snap.key_group_distribution()):
        try:
            fn()
        except StateExplorerError as exc:
            assert fixture in str(exc)


def test_notes_are_there_from_open_on():
    """What the snapshot's headers say comes with explorer.open(), before any state is read; a value
    left raw (a Kryo class without its jar) is noted once per state and subtask, saying what to pass."""
    snap = explorer.open(PRODUCTION / "flink-1.17-types-heap-canonical-savepoint", uids=["user-types"])
    assert any("metadata version 4" in n for n in snap.notes)
    snap.keyed_state(operator="user-types", state="kryo")
    kryo = [n for n in snap.notes if "'kryo'" in n]
    assert len(kryo) == len({n.split("subtask ")[1][:2] for n in kryo}) >= 1
    assert all("jars=" in n for n in kryo)


def test_heap_checkpoint_loses_only_the_undecodable_states():
    """Values are not length-prefixed on heap checkpoints: the Kryo states are skipped, every other state
    of the same key groups is read, and the note is one per state, not per key group."""
    snap = explorer.open(PRODUCTION / "types-heap-checkpoint", uids=["user-types"])
    df = snap.keyed_state(operator="user-types")
    got = set(df["state"])
    assert {"either", "day", "tier", "spend", "list_value", "map_value", "names_array", "basket"} <= got
    assert "kryo" not in got and "maybe" in got  # a FieldSerializer class without its jar; Optional decodes
    skipped = [n for n in snap.notes if "its entries are skipped" in n]
    assert skipped and len(skipped) == len({(n.split("subtask ")[1][:2], n.split("state ")[1][:12]) for n in skipped})


@pytest.mark.parametrize("fixture", ["joins-heap-canonical-savepoint", "joins-rocksdb-native-savepoint"])
def test_cep_nfa_state_and_shared_buffer_follow_the_jobs_events(fixture):
    """CEP's NFAState and SharedBufferNode decoded, checked against the job's own events (every event of a
    user is in the interval join's buffers of EXPECTED.json): pattern begin(big >= 80).next(small < 20), in
    processing time. Each big event starts a run: the start state's Dewey version is 1 + the user's big events;
    a user whose last event is big waits for "small", its run at version "<bigs>.0" started by that event,
    which the shared buffer holds as one node (page "big") with one edge of version "<bigs>"."""
    exp = _expected(fixture)
    events: dict[str, list[dict]] = {}
    for side in ("LEFT_BUFFER", "RIGHT_BUFFER"):
        for e in exp["operators"]["interval-join"]["states"][side]["entries"]:
            events.setdefault(e["key"], []).extend(b["element"]["fields"] for b in e["value"])
    snap, _ = _open(fixture)
    nfa = snap.keyed_state(operator="cep-big-then-small", state="nfaStateName")
    stored = snap.keyed_state(operator="cep-big-then-small", state="sharedBuffer-events")
    event_id = {k: uk for k, uk in zip(stored["key"], stored["user_key"])}
    nodes = snap.keyed_state(operator="cep-big-then-small", state="sharedBuffer-entries-with-lockable-edges")
    node = {k: (uk, v) for k, uk, v in zip(nodes["key"], nodes["user_key"], nodes["value"])}
    assert len(nfa) == sum(any(f["amount"] >= 80 for f in es) for es in events.values()) == 22
    waiting = 0
    for key, value in zip(nfa["key"], nfa["value"]):
        es = sorted(events[key], key=lambda f: f["seq"])
        bigs = sum(f["amount"] >= 80 for f in es)
        start = {"state": "big", "previous_entry": None, "version": str(bigs + 1), "start_timestamp": -1,
                 "previous_timestamp": -1, "start_event": None}
        got = [dict(m) for m in value["partial_matches"]]
        assert list(value["completed_matches"]) == []
        if es[-1]["amount"] >= 80:
            waiting += 1
            ev = event_id[key]
            pending = {"state": "small", "previous_entry": {"event": ev, "page": "big"}, "version": f"{bigs}.0",
                       "start_timestamp": ev["timestamp"], "previous_timestamp": ev["timestamp"], "start_event": ev}
            assert got == [pending, start], key
            node_id, lockable = node[key]
            assert node_id == {"event": ev, "page": "big"} and lockable["refs"] == 1
            assert [dict(e) for e in lockable["element"]["edges"]] == [{"refs": 1, "target": None, "version": str(bigs)}]
        else:
            assert got == [start], key
            assert key not in node
    assert waiting == len(node) == 5


@pytest.mark.parametrize("fixture", ["windows-heap-canonical-savepoint", "windows-rocksdb-incremental-checkpoint"])
def test_session_window_state_shows_the_real_session_bounds(fixture):
    """A session window's state lives under Flink's *state window* (the first element's window); each row of
    window-contents also carries the merged session's real bounds, equal to the session the job computed."""
    exp = _expected(fixture)["operators"]["session-process"]["states"]
    session_of = {}
    for e in exp["merging-window-set"]["entries"]:
        actual, state_window = e["value"]["fields"]
        session_of[(e["key"], state_window["start"], state_window["end"])] = (actual["start"], actual["end"])
    assert any(a != (s, e) for (_, s, e), a in session_of.items())  # some sessions did merge
    want = {}
    for e in exp["window-contents"]["entries"]:
        ns = e["namespace"]
        want.setdefault((e["key"], ns["start"], ns["end"]), 0)
        want[(e["key"], ns["start"], ns["end"])] += 1
    snap, _ = _open(fixture)
    df = snap.keyed_state(operator="session-process", state="window-contents")
    assert len(df) == sum(want.values())
    for key, ns in zip(df["key"], df["namespace"]):
        assert (ns["window_start"], ns["window_end"]) == session_of[(key, ns["start"], ns["end"])]
    timers = snap.keyed_state(operator="session-process", state="_timer_state/event_window-timers")
    assert all(set(ns) == {"start", "end"} for ns in timers["namespace"])  # timers are on the real windows already


SESSION_FIXTURES = sorted(p.name for p in PRODUCTION.iterdir() if p.name.startswith("sessions-"))


@pytest.mark.parametrize("fixture", SESSION_FIXTURES)
def test_every_keys_merged_sessions_equal_the_jobs_sessions(fixture):
    """Sessions merged by out-of-order events (two existing sessions bridged, a session extended backwards), late
    elements within the allowed lateness, sessions cleaned up: for each of the four session operators (process,
    aggregate, evictor, dynamic gap), the merged windows the reader puts on each row of window-contents are, key
    by key, the sessions of the job's own replay through Flink's MergingWindowSet, with as many rows each."""
    exp = _expected(fixture)
    snap, _ = _open(fixture)
    for op, stats in exp["model"]["entries"]:  # the job's replay says what happened, e.g. "existing sessions bridged 7, ..."
        counts = dict((" ".join(part.split()[:-1]), int(part.split()[-1])) for part in stats.split(", "))
        assert all(n > 0 for n in counts.values()), (op, stats)
    for op in ("session-process", "session-aggregate", "session-evictor", "session-dynamic"):
        states = exp["operators"][op]["states"]
        session_of = {}
        for e in states["merging-window-set"]["entries"]:
            actual, state_window = e["value"]["fields"]
            session_of[(e["key"], state_window["start"], state_window["end"])] = (actual["start"], actual["end"])
        assert any(a != k[1:] for k, a in session_of.items()), op  # some state windows differ from their session
        want: dict = {}
        for e in states["window-contents"]["entries"]:
            ns = e["namespace"]
            w = (e["key"], *session_of[(e["key"], ns["start"], ns["end"])])
            want[w] = want.get(w, 0) + 1
        df = snap.keyed_state(operator=op, state="window-contents")
        got: dict = {}
        for key, ns in zip(df["key"], df["namespace"]):
            w = (key, ns["window_start"], ns["window_end"])
            got[w] = got.get(w, 0) + 1
        assert got == want, op
        assert len({w[0] for w in got}) == len({k[0] for k in session_of})  # every key that holds a session


def test_flink_1_20_processing_time_deduplicate_is_named_by_its_state():
    """The last-row deduplication on processing time keeps one state, deduplicate-state: on 1.20 (no names
    stored) it is named Deduplicate[...] from it, beside the GroupAggregate it feeds."""
    snap = explorer.open(PRODUCTION / "flink-1.20-sqldistinct-retract-rocksdb-incremental-checkpoint")
    ops = snap.operators[snap.operators["has_keyed_state"]]
    assert sorted(o.split("[")[0] for o in ops["operator"]) == ["Deduplicate", "GroupAggregate"]
    assert ops["name_inferred"].all()


def test_operator_names_note_says_what_uids_left_unnamed():
    """Flink 1.x metadata (version 4) stores OperatorIDs only: without uids= the note says to pass them; with
    uids= it names only the operators with state that none of them matched, and with all of them there is none."""
    fixture = "flink-1.17-plain-heap-canonical-savepoint"
    path = PRODUCTION / fixture
    uids = _expected(fixture)["uids"]

    def v4_notes(snap):
        return [n for n in snap.notes if "metadata version 4" in n]

    (plain,) = v4_notes(explorer.open(path))
    assert "uids=[...]" in plain
    (partly,) = v4_notes(explorer.open(path, uids=uids))
    assert "1 operators with state match none of the uids passed" in partly
    snap = explorer.open(path, uids=[*uids, "sequence"])  # the job's source, which keeps operator state
    assert v4_notes(snap) == []
    assert {"sequence", *uids} <= set(snap.operators["operator"])


def test_flink_1_20_sql_operator_is_named_by_its_states():
    """Flink 1.20's metadata stores no operator names and SQL operators have no uids: the GroupAggregate is
    named from the states it holds (accState, distinctAcc_*), marked inferred in snap.operators and in a note;
    operators without such states keep their OperatorIDs; a 2.x snapshot's stored names are never replaced."""
    fixture = "flink-1.20-sqlagg-rocksdb-incremental-checkpoint"
    snap = explorer.open(PRODUCTION / fixture)
    ops = snap.operators.set_index("operator_id")
    keyed = ops[ops["has_keyed_state"]]
    assert len(keyed) == 1
    (oid,) = keyed.index
    assert keyed.loc[oid, "operator"] == f"GroupAggregate[{oid[:8]}]" and keyed.loc[oid, "name_inferred"]
    assert keyed.loc[oid, "name"] is None and keyed.loc[oid, "uid"] is None
    others = ops[~ops["has_keyed_state"]]
    assert list(others["operator"]) == list(others.index) and not others["name_inferred"].any()
    assert any("inferred" in n and "GroupAggregate" in n and "accState" in n for n in snap.notes)
    assert set(snap.states["operator"]) == {f"GroupAggregate[{oid[:8]}]"}
    stored = explorer.open(PRODUCTION / "sqlagg-heap-canonical-savepoint").operators
    assert not stored["name_inferred"].any() and any(o.startswith("GroupAggregate[") for o in stored["operator"])

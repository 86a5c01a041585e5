"""PyFlink's pickled state values, read by the restricted pickle interpreter, and pickles it must refuse.

``pickle.dumps`` here only *writes* test inputs; nothing in these tests (or in the reader) loads a pickle.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

import explorer
from explorer.errors import StateExplorerError
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.pickles import PickledBytesDecoder, PickleRefused, read_pickle
from explorer.readers.flink.serializers import UnknownLayout

ROOT = Path(__file__).resolve().parents[2]
PYFLINK = ROOT / "sample_data" / "flink" / "production" / "pyflink-heap-canonical-savepoint"

PLAIN = [None, True, False, 0, 255, 65535, -1, 2**31, -(2**70), 1.5, float("-inf"), "", "ü東🙂", b"", b"\x00x",
         (), (1,), (1, "a"), (1, "a", 2.5), (1, 2, 3, 4), [], [1, [2, [3]]], {}, {"a": [1, 2], 3: {"b": None}},
         {1, 2}, frozenset({"x"}), bytearray(b"ba")]


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
@pytest.mark.parametrize("value", PLAIN, ids=repr)
def test_plain_data_round_trips(value, protocol):
    if protocol < 4 and isinstance(value, (set, frozenset)) or protocol < 3 and isinstance(value, (bytes, bytearray)) \
            or protocol < 5 and isinstance(value, bytearray):
        with pytest.raises(PickleRefused, match="GLOBAL"):  # these protocols write this type through a global
            read_pickle(pickle.dumps(value, protocol=protocol))
        return
    got = read_pickle(pickle.dumps(value, protocol=protocol))
    assert got == value and type(got) is (bytes if isinstance(value, bytearray) else type(value))


def test_shared_objects_stay_shared():
    inner = [1]
    got = read_pickle(pickle.dumps([inner, inner], protocol=4))
    assert got == [[1], [1]] and got[0] is got[1]


class _Boom:
    def __reduce__(self):
        return (print, ("executed!",))


MALICIOUS = {
    "reduce to os.system (protocol 0)": b"cos\nsystem\n(S'echo pwned'\ntR.",
    "stack global + reduce": pickle.dumps(_Boom(), protocol=4),
    "a global inside a list": b"\x80\x04]\x94(K\x01cbuiltins\neval\n\x94e.",
    "inst": b"(S'echo'\nios\nsystem\n.",
    "obj": b"(cos\nsystem\nS'x'\no.",
    "newobj": b"\x80\x02cbuiltins\nobject\n)\x81.",
    "ext1": b"\x80\x02\x82\x01.",
    "persistent id": b"\x80\x02X\x01\x00\x00\x00xQ.",
    "build": b"\x80\x02}b.",
}


@pytest.mark.parametrize("name", MALICIOUS)
def test_pickles_that_import_or_call_are_refused_without_running_anything(name, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    monkeypatch.setattr(pickle, "loads", lambda *a, **k: calls.append(a))
    monkeypatch.setattr(pickle, "load", lambda *a, **k: calls.append(a))
    with pytest.raises(PickleRefused, match="would import or call|not one State Explorer reads") as err:
        read_pickle(MALICIOUS[name], "state 'x'")
    assert isinstance(err.value, StateExplorerError) and "state 'x'" in str(err.value)
    assert calls == [] and "executed" not in capsys.readouterr().out


def test_a_refused_pickle_in_state_stays_raw_through_the_decoder():
    blob = MALICIOUS["stack global + reduce"]
    with pytest.raises(UnknownLayout, match="nothing in it was run"):
        PickledBytesDecoder().read(DataInput(len(blob).to_bytes(4, "big") + blob))


@pytest.mark.parametrize("data,what", [(b"\x80\x04K\x01", "ends early"), (b"\x80\x04K\x01K\x02.", "2 items"),
                                       (b"\x80\x04a.", "stack empty"), (b"\x80\x04h\x07.", "GET 7"),
                                       (b"\x80\x04](]e}(]K\x01u.", "not hashable")])
def test_malformed_pickles_fail_with_a_reason(data, what):
    with pytest.raises(PickleRefused, match=what):
        read_pickle(data)


def test_a_byte_array_that_is_no_pickle_stays_bytes():
    assert PickledBytesDecoder().read(DataInput(b"\x00\x00\x00\x03abc")) == b"abc"
    assert PickledBytesDecoder(pyflink=True).read(DataInput(b"\x00\x00\x00\x08" + (7).to_bytes(8, "big"))) == 7
    assert PickledBytesDecoder().read(DataInput(b"\x00\x00\x00\x08" + (7).to_bytes(8, "big"))) == (7).to_bytes(8, "big")


# --- the PyFlink fixture (Row keys, pickled values), values computed by the job ----------------------------
def _key(k) -> tuple:
    """A decoded key ({'f0': user, 'f1': region}: the user's key Row) or an expected one."""
    if isinstance(k, dict) and k.get("type") == "row":
        return tuple(k["fields"])
    assert list(k) == ["f0", "f1"], k  # PyFlink's own one-field Row around the user's key is gone
    return tuple(k.values())


def _plain(v):
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


@pytest.fixture(scope="module")
def pyflink():
    """Opened as a user who knows the job would: the kinds the job declared (the snapshot does not store them)."""
    exp = json.loads((PYFLINK / "EXPECTED.json").read_text(encoding="utf-8"))
    snap = explorer.open(PYFLINK, uids=exp["uids"], pyflink_kinds={"summary": "value", "recent": "list"})
    return snap, exp["operators"]["py-track"]["states"]


def test_pyflink_states_show_as_declared(pyflink):
    snap, _ = pyflink
    st = snap.states.set_index("state")
    assert st.loc[["summary", "recent", "per_category"], "kind"].tolist() == ["value", "list", "map"]
    assert not any(s.startswith("python-state-") for s in st.index)
    assert not any("PyFlink keeps" in n for n in snap.notes)
    # without the kinds: shown as stored (lists), and the note says what to pass
    plain = explorer.open(PYFLINK, uids=["py-track"])
    assert plain.states.set_index("state").loc["summary", "kind"] == "list"
    (note,) = [n for n in plain.notes if "PyFlink keeps" in n]
    assert "pyflink_kinds=" in note and "'summary'" in note and "'recent'" in note
    df = plain.keyed_state(state="summary")
    assert df["user_key"].tolist() == [0] * 12  # one element per key, each its own row
    with pytest.raises(ValueError, match="pyflink_kinds"):
        explorer.open(PYFLINK, pyflink_kinds={"summary": "set"})


def test_pyflink_pickled_value_state(pyflink):
    snap, states = pyflink
    df = snap.keyed_state(operator="py-track", state="summary")
    assert df["user_key"].isna().all()
    got = {_key(k): _plain(v) for k, v in zip(df["key"], df["value"])}
    want = {_key(e["key"]): dict(e["value"]["entries"]) for e in states["summary"]["entries"]}
    assert got == want and len(got) == 12


def test_pyflink_pickled_list_state(pyflink):
    snap, states = pyflink
    df = snap.keyed_state(operator="py-track", state="recent")
    # one row per element, user_key its index in the key's list; the (int, str, float) tuples come back as tuples
    # of those types (an Arrow union keeps them typed; nothing is turned into text)
    got = {(_key(k), uk): v for k, uk, v in zip(df["key"], df["user_key"], df["value"])}
    assert all(type(t) is tuple and [type(x) for x in t] == [int, str, float] for t in got.values())
    want = {(_key(e["key"]), e["user_key"]): tuple(e["value"]["fields"]) for e in states["recent"]["entries"]}
    assert got == want and len(want) == 120


def test_pyflink_map_state_by_coder_shape(pyflink):
    snap, states = pyflink
    df = snap.keyed_state(operator="py-track", state="per_category")
    got = {(_key(k), uk): v for k, uk, v in zip(df["key"], df["user_key"], df["value"])}
    want = {(_key(e["key"]), e["user_key"]): e["value"] for e in states["per_category"]["entries"]}
    assert got == want and len(got) == 36

"""``bootstrap``: keyed state of a NEW operator written into the engine's savepoints from a DataFrame, checked
by restoring the edited savepoint in a job that declares that operator and its states: the job sees them."""

from __future__ import annotations

import pandas as pd
import pytest

import explorer
from explorer.engine import StreamEnvironment
from explorer.engine.functions import KeyedProcessFunction
from explorer.engine.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from explorer.errors import EditError
from explorer.format.snapshot import read_metadata
from explorer.keygroups import assign_to_key_group

KEYS = [f"user-{i % 7}" for i in range(30000)]


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", int))

    def process_element(self, key, ctx, out):
        self.n.update(self.n.value(0) + 1)


class Lookup(KeyedProcessFunction):
    def open(self, ctx):
        self.limit = ctx.get_state(ValueStateDescriptor("limit", int))
        self.tags = ctx.get_map_state(MapStateDescriptor("tags", str, str))
        self.history = ctx.get_list_state(ListStateDescriptor("history", float))

    def process_element(self, key, ctx, out):
        out.collect((key, self.limit.value(), dict(self.tags.items()), list(self.history.get())))


def job(with_lookup: bool) -> StreamEnvironment:
    env = StreamEnvironment(parallelism=2, max_parallelism=128)
    src = env.from_collection(KEYS, name="src")
    src.key_by(lambda k: k).process(Count(), name="count", uid="count")
    if with_lookup:
        src.key_by(lambda k: k).process(Lookup(), name="lookup", uid="lookup").collect("seen")
    return env


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    client = job(False).execute_async("j")
    client.run(max_rounds=1)
    return client.stop_with_savepoint(tmp_path_factory.mktemp("sp") / "sp")


def test_bootstrapped_states_are_what_the_new_operator_restores(savepoint, tmp_path):
    (src,) = [o for o in read_metadata(savepoint)["operators"] if o["uid"] == "src"]
    assert sum(n for _, n in src["subtasks"][0]["source_positions"]) < len(KEYS)  # input left for the new job
    limits = pd.DataFrame({"key": ["user-1", "user-2", "user-3"], "value": [10, 20, 30]})
    tags = pd.DataFrame({"key": ["user-1", "user-1", "user-4"], "user_key": ["tier", "region", "tier"],
                         "value": ["gold", "eu", "silver"]})
    history = pd.DataFrame({"key": ["user-2", "user-2", "user-2"], "value": [1.5, 2.5, 0.25]})
    editor = (explorer.edit(savepoint)
              .bootstrap("lookup", "limit", limits)
              .bootstrap("lookup", "tags", tags, kind="map")
              .bootstrap("lookup", "history", history, kind="list"))
    assert "bootstrap(uid='lookup', state='tags', rows=3, kind='map')" in str(editor)
    out = editor.write(tmp_path / "out")

    state = explorer.open(out).keyed_state(operator="lookup")
    limit = state[state["state"] == "limit"]
    assert dict(zip(limit["key"], limit["value"])) == {"user-1": 10, "user-2": 20, "user-3": 30}
    assert all(kg == assign_to_key_group(k, 128) for k, kg in zip(state["key"], state["key_group"]))

    client = job(True).execute_async("j", restore_from=out)  # every operator of the savepoint is declared
    client.run()
    seen = {k: (lim, tg, hist) for k, lim, tg, hist in client.result().output("seen")}
    client.close()
    assert seen["user-1"] == (10, {"tier": "gold", "region": "eu"}, [])
    assert seen["user-2"] == (20, {}, [1.5, 2.5, 0.25])
    assert seen["user-4"] == (None, {"tier": "silver"}, [])
    assert seen["user-0"] == (None, {}, [])


def test_bootstrap_is_refused_where_it_cannot_be_exact(savepoint):
    frame = pd.DataFrame({"key": ["a"], "value": [1]})
    with pytest.raises(EditError, match="is in the savepoint"):
        explorer.edit(savepoint).bootstrap("count", "limit", frame)
    with pytest.raises(EditError, match="user_key"):
        explorer.edit(savepoint).bootstrap("lookup", "tags", frame, kind="map")
    with pytest.raises(EditError, match="twice"):
        explorer.edit(savepoint).bootstrap("lookup", "limit", pd.DataFrame({"key": ["a", "a"], "value": [1, 2]}))
    with pytest.raises(EditError, match="value_type"):
        explorer.edit(savepoint).bootstrap("lookup", "limit", pd.DataFrame({"key": ["a", "b"], "value": [1, "x"]}))


PLAIN = "sample_data/flink/production/plain-rocksdb-canonical-savepoint"


def test_flink_bootstrap_reads_back_and_refuses_what_it_does_not_write(tmp_path):
    """Value, list and map states of String, Long and Integer values (real Flink restores them: test_flink_restore.py)."""
    limits = pd.DataFrame({"key": ["user-00", "user-x"], "value": [100, -3]})
    small = pd.DataFrame({"key": [7, 8], "value": [1, 2]})
    out = (explorer.edit(PLAIN).bootstrap("limits", "limit", limits)
           .bootstrap("by-id", "count", small, value_type="Integer").write(tmp_path / "out"))
    snap = explorer.open(out)
    state = snap.keyed_state(operator="limits")
    assert dict(zip(state["key"], state["value"])) == {"user-00": 100, "user-x": -3}
    assert all(kg == assign_to_key_group(k, 128) for k, kg in zip(state["key"], state["key_group"]))
    ids = snap.keyed_state(operator="by-id")
    assert dict(zip(ids["key"], ids["value"])) == {7: 1, 8: 2}
    lists = pd.DataFrame({"key": ["a", "b", "a"], "value": ["x", "y", "z"]})
    maps = pd.DataFrame({"key": ["a", "a"], "user_key": [1, 2], "value": ["p", "q"]})
    out = (explorer.edit(PLAIN).bootstrap("more", "seen", lists, kind="list").bootstrap("more", "tags", maps, kind="map")
           .write(tmp_path / "lists"))
    more = explorer.open(out).keyed_state(operator="more")
    assert sorted(zip(more["state"], more["key"], more["user_key"], more["value"])) == [
        ("seen", "a", 0, "x"), ("seen", "a", 1, "z"), ("seen", "b", 0, "y"), ("tags", "a", 1, "p"), ("tags", "a", 2, "q")]
    editor = explorer.edit(PLAIN)
    with pytest.raises(EditError, match="value, list or map state"):
        editor.bootstrap("n", "m", pd.DataFrame({"key": ["a"], "value": [1]}), kind="reducing")
    with pytest.raises(EditError, match="no column \\['user_key'\\]"):
        editor.bootstrap("n", "m", pd.DataFrame({"key": ["a"], "value": [1]}), kind="map")
    with pytest.raises(EditError, match="appears twice"):
        editor.bootstrap("n", "m", pd.DataFrame({"key": ["a", "a"], "user_key": ["b", "b"], "value": [1, 2]}), kind="map")
    with pytest.raises(EditError, match="String, Long or Integer"):
        editor.bootstrap("n", "s", pd.DataFrame({"key": ["a"], "value": [1.5]}))
    with pytest.raises(EditError, match="Integer"):
        editor.bootstrap("n", "s", pd.DataFrame({"key": ["a"], "value": [2**40]}), value_type="Integer")
    with pytest.raises(EditError, match="is in the savepoint"):
        editor.bootstrap("user-activity", "s", limits)
    editor.bootstrap("n", "s", limits)
    with pytest.raises(EditError, match="one key type"):
        editor.bootstrap("n", "t", small)

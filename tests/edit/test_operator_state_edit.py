"""``set_operator_state``: operator list state (split, union) and broadcast state written into the engine's
savepoints, checked by restoring the edited savepoint in the engine; refused on Flink savepoints for now."""

from __future__ import annotations

import pytest

import explorer
from explorer.engine import StreamEnvironment
from explorer.engine.functions import ProcessFunction
from explorer.engine.state import ListStateDescriptor
from explorer.errors import EditError
from explorer.format.snapshot import read_metadata
from explorer.pipelines import fraud


class Buffer(ProcessFunction):
    def __init__(self, union=False):
        self.union = union

    def open(self, ctx):
        d = ListStateDescriptor("buf", int)
        self.buf = ctx.get_union_list_state(d) if self.union else ctx.get_operator_list_state(d)

    def process_element(self, value, ctx, out):
        self.buf.add(value)
        out.collect(value)


def buffer_job(p, union, items):
    env = StreamEnvironment(parallelism=p)
    env.from_collection(items, name="src").rebalance().process(Buffer(union), name="buf", uid="buf", parallelism=p)
    return env


@pytest.mark.parametrize("union", [False, True])
def test_list_state_restores_split_or_unioned(tmp_path, union):
    client = buffer_job(2, union, list(range(10))).execute_async("j")
    client.run()
    sp = client.trigger_savepoint(tmp_path / "sp")
    client.close()
    mode = "union" if union else "split"
    with pytest.raises(EditError, match="mode="):
        explorer.edit(sp).set_operator_state("buf", "buf", [1], mode="split" if union else "union")
    with pytest.raises(EditError, match="int"):
        explorer.edit(sp).set_operator_state("buf", "buf", ["x"], mode=mode)
    out = explorer.edit(sp).set_operator_state("buf", "buf", [100, 101, 102, 103, 104], mode=mode).write(tmp_path / "out")
    client = buffer_job(2, union, []).execute_async("j", restore_from=out)
    parts = [list(st.operator.operator_state.lists["buf"].items) for st in client.runtime.subtasks_of("buf")]
    client.close()
    if union:
        assert parts == [[100, 101, 102, 103, 104]] * 2
    else:
        assert parts == [[100, 101, 102], [103, 104]]  # an even split, in order
    explorer.edit(out).write(tmp_path / "again")  # still an editable savepoint


def test_new_list_state_is_added_with_its_inferred_type(tmp_path):
    client = buffer_job(2, False, []).execute_async("j")
    client.run()
    sp = client.trigger_savepoint(tmp_path / "sp")
    client.close()
    with pytest.raises(EditError, match="value_type"):
        explorer.edit(sp).set_operator_state("buf", "extra", [], mode="split")
    out = explorer.edit(sp).set_operator_state("buf", "extra", [], mode="split", value_type=str).write(tmp_path / "e")
    out2 = explorer.edit(sp).set_operator_state("buf", "extra", ["a", "b", "c"]).write(tmp_path / "o")
    for folder, want in ((out, []), (out2, ["a", "b", "c"])):
        client = buffer_job(2, False, []).execute_async("j", restore_from=folder)
        # a state the job does not declare (yet) is handed to its subtasks, waiting for its descriptor
        got = [x for st in client.runtime.subtasks_of("buf")
               for x in st.operator.operator_state.restored_lists.get("extra", [])]
        client.close()
        assert got == want


def test_broadcast_rules_replaced_restore_in_the_fraud_job(tmp_path):
    txs = fraud.generate(20000, seed=3)
    env = StreamEnvironment(parallelism=2)
    fraud.build(env, txs)
    client = env.execute_async("fraud")
    client.run(max_rounds=2)
    sp = client.stop_with_savepoint(tmp_path / "sp")
    (src,) = [o for o in read_metadata(sp)["operators"] if o["uid"] == "transactions"]
    assert sum(n for _, n in src["subtasks"][0]["source_positions"]) < len(txs)  # input left to restore with
    strict = fraud.Rule(large_above=600.0, version=9)
    with pytest.raises(EditError, match="dict"):
        explorer.edit(sp).set_operator_state("fraud-detector", "rules", [strict], mode="broadcast")
    editor = explorer.edit(sp).set_operator_state("fraud-detector", "rules", {fraud.RULE_NAME: strict},
                                                  mode="broadcast")
    assert "set_operator_state(uid='fraud-detector', name='rules'" in str(editor)
    out = editor.write(tmp_path / "out")
    env = StreamEnvironment(parallelism=2)
    fraud.build(env, txs)
    client = env.execute_async("fraud", restore_from=out)
    client.run()
    subtasks = client.runtime.subtasks_of("fraud-detector")
    rules = [st.operator.operator_state.broadcast["rules"].entries for st in subtasks]
    alerts = list(client.result().output("alerts"))
    client.close()
    assert rules == [{fraud.RULE_NAME: strict}] * 2  # every subtask holds the new rule
    assert alerts and all(a.rule_version == 9 and a.amount > 600.0 for a in alerts)  # and applies it


PLAIN = "sample_data/flink/production/plain-rocksdb-canonical-savepoint"


def test_flink_operator_state_reads_back_and_refuses_what_it_does_not_write(tmp_path):
    """String, Long and Integer operator state of an operator that holds none yet (real Flink restores it:
    test_flink_restore.py, cases bootstrap and operator_state_merge); a held state keeps its serializer (the
    source's split state: byte[]) and its mode."""
    with pytest.raises(EditError, match=r"cannot encode 'x' as byte\[\]"):
        explorer.edit(PLAIN).set_operator_state("Source: sequence", "SourceReaderState", ["x"]).write(tmp_path / "no")
    with pytest.raises(EditError, match="holds it with mode SPLIT_DISTRIBUTE; found mode 'union'"):
        explorer.edit(PLAIN).set_operator_state("Source: sequence", "SourceReaderState", [b"x"], mode="union")
    with pytest.raises(EditError, match="String, Long or Integer"):
        explorer.edit(PLAIN).set_operator_state("user-activity", "f", [1.5])
    with pytest.raises(EditError, match="dict"):
        explorer.edit(PLAIN).set_operator_state("user-activity", "b", ["x"], mode="broadcast")
    out = (explorer.edit(PLAIN)
           .set_operator_state("user-activity", "names", ["a", "b", "c"])
           .set_operator_state("user-activity", "rules", {"x": 1}, mode="broadcast", value_type="Integer")
           .write(tmp_path / "out"))
    snap = explorer.open(out)
    got = snap.operator_state()
    got = got[got["operator"] == "user-activity"]
    assert sorted(zip(got["subtask"], got["state"], got["mode"], got["user_key"], got["value"])) == [
        (0, "names", "split", 0, "a"), (0, "names", "split", 1, "b"), (0, "rules", "broadcast", "x", 1),
        (1, "names", "split", 0, "c"), (1, "rules", "broadcast", "x", 1)]
    before = explorer.open(PLAIN).keyed_state(operator="user-activity")
    assert len(snap.keyed_state(operator="user-activity")) == len(before)  # its keyed state untouched


def test_a_source_split_is_moved_by_setting_its_decoded_fields(tmp_path):
    """The sequence source's split, given as operator_state() shows it with "from" changed, is written back in its
    serializer's layout (real Flink resumes there: test_flink_restore.py); splits of unknown layout are refused."""
    from explorer.readers.flink.splits import decode_split, encode_split

    state = explorer.open(PLAIN).operator_state()
    (split,) = state[state["state"] == "SourceReaderState"]["value"]
    moved = {**split, "from": 12345}
    out = explorer.edit(PLAIN).set_operator_state("Source: sequence", "SourceReaderState", [moved]).write(tmp_path / "o")
    got = explorer.open(out).operator_state()
    assert list(got[got["state"] == "SourceReaderState"]["value"]) == [moved]
    kafka = {"split_type": "KafkaPartitionSplit", "split_id": "orders-3", "topic": "orders", "partition": 3,
             "starting_offset": -2, "stopping_offset": None}
    assert decode_split(encode_split(kafka)) == ({**kafka, "serializer_version": 0}, None)
    with pytest.raises(EditError, match="writes NumberSequenceSplit and KafkaPartitionSplit"):
        explorer.edit(PLAIN).set_operator_state("Source: sequence", "SourceReaderState", [{**split, "split_type": "X"}])
    with pytest.raises(EditError, match="expected an int"):
        explorer.edit(PLAIN).set_operator_state("Source: sequence", "SourceReaderState", [{**split, "from": "12"}])

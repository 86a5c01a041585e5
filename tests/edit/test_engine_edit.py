"""explorer.edit over the engine's own savepoints, checked by restoring the edited savepoint in the engine.

The url_counts job runs part of its input and stops with a savepoint; the hot key is found with
``hot_keys()``, its state dropped and max parallelism raised 128 -> 256; the job restored from the
edited savepoint finishes its input. Every other key then holds exactly its count over the whole
input, the dropped key only its count over the input read after the savepoint (it started from zero).
"""

from __future__ import annotations

from collections import Counter

import pytest

import explorer
from explorer.engine import StreamEnvironment
from explorer.errors import EditError
from explorer.format.snapshot import read_metadata, verify_snapshot
from explorer.keygroups import assign_to_key_group
from explorer.pipelines import url_counts


def urls(lines):
    return Counter(log.url for log in map(url_counts.parse_line, lines) if log is not None)


@pytest.fixture(scope="module")
def lines():
    return url_counts.generate(6000, keys=40, seed=11, malformed_share=0.0)


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory, lines):
    env = StreamEnvironment(parallelism=2, max_parallelism=128)
    url_counts.build(env, lines)
    client = env.execute_async("url_counts")
    client.run(max_rounds=3)
    return client.stop_with_savepoint(tmp_path_factory.mktemp("sp") / "sp")


def position(sp) -> int:
    (src,) = [o for o in read_metadata(sp)["operators"] if o["uid"] == "access-log"]
    return sum(n for _, n in src["subtasks"][0]["source_positions"])


def counts(frame, operator):
    f = frame[(frame["operator"] == operator) & (frame["state"] == "count")]
    return dict(zip(f["key"], f["value"]))


def test_drop_hot_key_and_rescale_restores_in_the_engine(savepoint, lines, tmp_path):
    pos = position(savepoint)
    assert 0 < pos < len(lines)  # the job stopped part-way: the restore has input left
    snap = explorer.open(savepoint)
    hot = snap.hot_keys()
    hot_key = hot[hot["operator"] == "url-count"].iloc[0]["key"]
    before = snap.keyed_state()
    out = (explorer.edit(savepoint)
           .drop_keys(operator="url-count", keys=[hot_key])
           .drop_keys(operator="url-stats", keys=[hot_key])
           .with_max_parallelism(256)
           .write(tmp_path / "edited"))
    meta = verify_snapshot(out)  # every file listed with its size and SHA-256
    assert {o["max_parallelism"] for o in meta["operators"]} == {256}
    assert meta["edits"][0].startswith("drop_keys(")

    after = explorer.open(out).keyed_state()
    for op in ("url-count", "url-stats"):
        want = {k: v for k, v in counts(before, op).items() if k != hot_key}
        assert counts(after, op) == want
    assert hot_key not in set(after["key"])
    old_codes = before[(before.state == "status_codes") & (before.key != hot_key)]
    new_codes = after[after.state == "status_codes"]
    assert sorted(zip(old_codes.key, old_codes.user_key, old_codes.value)) == \
        sorted(zip(new_codes.key, new_codes.user_key, new_codes.value))

    env = StreamEnvironment(parallelism=2, max_parallelism=256)
    url_counts.build(env, lines)
    client = env.execute_async("url_counts", restore_from=out)
    client.run()
    assert client.finished
    state = client.result().state()
    total, rest = urls(lines), urls(lines[pos:])
    for op in ("url-count", "url-stats"):
        got = counts(state, op)
        assert got[hot_key] == rest[hot_key] < total[hot_key]  # started from zero at the savepoint
        assert {k: v for k, v in got.items() if k != hot_key} == {k: v for k, v in total.items() if k != hot_key}
    # every key lives in its key group under max parallelism 256
    assert all(kg == assign_to_key_group(k, 256) for k, kg in zip(state.key, state.key_group))
    assert state.key_group.max() >= 128


def test_rename_drop_state_and_update_restore(savepoint, tmp_path):
    out = (explorer.edit(savepoint)
           .rename_operator("url-count", "url-count-v2")
           .drop_state(operator="url-stats", state="status_codes")
           .update(operator="url-stats", state="count", key="/api/users/1", value=10_000)
           .map_values(operator="url-count-v2", state="count", fn=lambda row: row["value"] * 2)
           .write(tmp_path / "edited"))
    snap = explorer.open(out)
    assert "url-count-v2" in set(snap.operators["uid"]) and "url-count" not in set(snap.operators["uid"])
    orig = explorer.open(savepoint).keyed_state()
    new = snap.keyed_state()
    assert counts(new, "url-count-v2") == {k: 2 * v for k, v in counts(orig, "url-count").items()}
    assert counts(new, "url-stats")["/api/users/1"] == 10_000
    assert "status_codes" not in set(new.state)

    # restored by a job that declares url-stats with only "count" and the renamed operator
    from explorer.engine.checkpoint.job import JobClient

    env = StreamEnvironment(parallelism=2, max_parallelism=128)
    logs = env.from_source(url_counts.as_source([], 1), name="access-log", uid="access-log") \
        .map(url_counts.parse_line, name="parse", uid="parse", parallelism=1) \
        .filter(url_counts.is_valid, name="valid", uid="valid", parallelism=1)
    logs.key_by("url").count(name="url-count-v2", uid="url-count-v2").collect("url_counts")
    logs.key_by("url").process(url_counts.UrlStats(), name="url-stats", uid="url-stats").collect("url_stats")
    with pytest.raises(Exception):  # the old job's uid is no longer in the savepoint: it cannot take url-count-v2
        old = StreamEnvironment(parallelism=2, max_parallelism=128)
        url_counts.build(old, [])
        JobClient(old, "u", restore_from=out)
    client = JobClient(env, "u", restore_from=out)
    state = client.result().state()
    client.close()
    assert counts(state, "url-count-v2") == counts(new, "url-count-v2")
    assert counts(state, "url-stats") == counts(new, "url-stats")


def test_refusals(savepoint, tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(EditError, match="not empty"):
        explorer.edit(savepoint).write(tmp_path / "full")
    with pytest.raises(EditError, match="not empty|input savepoint"):
        explorer.edit(savepoint).write(savepoint)
    with pytest.raises(EditError, match="no operator"):
        explorer.edit(savepoint).drop_operator("nope")
    with pytest.raises(EditError, match="int"):
        explorer.edit(savepoint).update(operator="url-stats", state="count", key="/api/users/1",
                                        value="many").write(tmp_path / "a")
    assert not (tmp_path / "a").exists()  # a failed write leaves nothing behind
    with pytest.raises(EditError, match="no row"):
        explorer.edit(savepoint).update(operator="url-stats", state="count", key="/nowhere",
                                        value=1).write(tmp_path / "b")
    with pytest.raises(EditError):
        explorer.edit(savepoint).with_max_parallelism(1)


def test_with_parallelism_splits_keyed_state_for_the_new_subtasks_and_restores(savepoint, lines, tmp_path):
    from explorer.keygroups import operator_index_for_key_group

    pos = position(savepoint)
    before = explorer.open(savepoint).keyed_state()
    out = explorer.edit(savepoint).with_parallelism(3, operator="url-count").with_parallelism(
        3, operator="url-stats").write(tmp_path / "p3")
    meta = verify_snapshot(out)
    keyed = [o for o in meta["operators"] if o["keyed"]]
    assert {o["parallelism"] for o in keyed} == {3} and all(len(o["subtasks"]) == 3 for o in keyed)
    after = explorer.open(out).keyed_state()
    cols = ["operator", "state", "key", "user_key", "value", "key_group"]
    assert sorted(map(repr, after[cols].itertuples(index=False))) == sorted(map(repr, before[cols].itertuples(index=False)))
    # each row sits in the subtask whose key-group range holds its key group at parallelism 3
    assert all(operator_index_for_key_group(128, 3, int(kg)) == int(st)
               for kg, st in zip(after.key_group, after.subtask))
    env = StreamEnvironment(parallelism=3, max_parallelism=128)
    url_counts.build(env, lines)
    client = env.execute_async("url_counts", restore_from=out)
    client.run()
    assert client.finished
    state = client.result().state()
    total = urls(lines)
    for op in ("url-count", "url-stats"):
        assert counts(state, op) == dict(total)  # every key's count continued from the savepoint
    assert pos < len(lines)


def test_with_parallelism_refuses_what_it_cannot_split(savepoint, tmp_path):
    with pytest.raises(EditError, match="expected 0 < parallelism <= 128, found 129"):
        explorer.edit(savepoint).with_parallelism(129, operator="url-count")
    with pytest.raises(TypeError):
        explorer.edit(savepoint).with_parallelism("3")


def test_memory_budget_is_an_open_option_of_the_engine_editor_too(savepoint, tmp_path):
    editor = explorer.edit(savepoint, memory_budget="1GB")  # (explorer.open's option; the engine takes no other)
    assert editor.memory_budget == 1 << 30
    out = editor.write(tmp_path / "out")
    assert len(explorer.open(out).keyed_state()) == len(explorer.open(savepoint).keyed_state())

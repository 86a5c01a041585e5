"""Every stateful pipeline survives a failure: abort mid-stream, resume from the latest checkpoint,
and the main outputs equal those of a run without failure (each result exactly once)."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine.checkpoint.storage import CheckpointStorage
from explorer.engine.testing import ABORT, TestingAbort, TestingSource
from explorer.pipelines import PIPELINES

STATEFUL = [n for n in sorted(PIPELINES) if PIPELINES[n].keyed_state]
DAY = 86_400_000


def collect_sinks(env):
    return {spec.sink.name: spec.sink for spec in env.specs if spec.sink is not None}


@pytest.mark.parametrize("name", STATEFUL)
def test_abort_and_resume_gives_the_results_of_a_clean_run(name, tmp_path, backend_kind):
    p = PIPELINES[name]
    records = p.generate(2500, seed=21)
    source = TestingSource(records[:1700] + [ABORT] + records[1700:])

    def make():
        env = p.make_env(3, batch_size=64, state_backend=backend_kind, state_dir=tmp_path / "state")
        env.enable_checkpointing(tmp_path / "chk", interval_records=300, timeout_ms=365 * DAY, asynchronous=False)
        p.build(env, source)
        return env

    first = make()
    with pytest.raises(TestingAbort):
        first.execute(name)
    latest = CheckpointStorage(tmp_path / "chk").latest_valid()
    assert latest is not None
    second = make()
    second.execute(name, restore_from=latest)

    clean = p.run(records=records, parallelism=3)
    for out in p.outputs:
        before, after = collect_sinks(first)[out].results, collect_sinks(second)[out].results
        assert Counter(before) + Counter(after) == Counter(clean.output(out)), out
    assert 0 < sum(len(s.results) for s in collect_sinks(first).values())


@pytest.mark.parametrize("name", STATEFUL)
@pytest.mark.parametrize("before, after", [(3, 2), (2, 4)])
def test_stop_with_savepoint_and_resume_at_another_parallelism(name, before, after, tmp_path):
    p = PIPELINES[name]
    records = p.generate(2000, seed=3)

    def make(parallelism):
        env = p.make_env(parallelism, batch_size=64)
        # checkpointing on (never due) makes the sinks transactional, so the savepoint commits them
        env.enable_checkpointing(tmp_path / "chk", interval_records=10**9, timeout_ms=365 * DAY, asynchronous=False)
        p.build(env, records)
        return env

    client = make(before).execute_async(name)
    client.run(until=lambda rt: rt.round >= 15)
    assert not client.finished
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    first = client.result()
    second = make(after).execute(name, restore_from=savepoint)

    clean = p.run(records=records, parallelism=1)
    for out in p.outputs:
        assert Counter(first.output(out)) + Counter(second.output(out)) == Counter(clean.output(out)), out

"""The crash-injection harness (``make chaos``): its savepoint variant restores a canonical
savepoint into the RocksDB backend and crashes it; nothing may be lost or duplicated."""

from __future__ import annotations

from collections import Counter

import pytest

from explorer.engine import CollectSink
from explorer.engine.checkpoint import chaos


def test_savepoint_trials_restore_into_rocksdb_and_recover_exactly_once():
    report = chaos.run_trials(6, records=600, seed=5, variants=("savepoint",), progress=False)
    sp = report["savepoint_trials"]
    assert sp["trials"] == 6 and report["failed_trials"] == []
    assert report["lost_records"] == report["duplicated_records"] == 0
    assert sp["crashes_injected"] > 0
    assert sp["recovered_from_savepoint"] + sp["recovered_from_checkpoint"] == sp["crashes_injected"]


def test_the_savepoint_variant_leaves_the_checkpoint_trials_of_a_seed_unchanged(monkeypatch):
    runs: list[tuple] = []
    real = chaos.run_with_recovery

    def recording(make_env, name, crash, **kw):
        runs.append((crash.point, crash.after, make_env().parallelism, kw.get("restore_from") is None))
        return real(make_env, name, crash, **kw)

    monkeypatch.setattr(chaos, "run_with_recovery", recording)
    chaos.run_trials(8, records=200, seed=11, variants=("checkpoint",), progress=False)
    only, runs[:] = list(runs), []
    chaos.run_trials(8, records=200, seed=11, savepoint_share=0.5, progress=False)
    assert not all(r[3] for r in runs)  # some trials started from a savepoint
    same = [(a, b) for a, b in zip(only, runs) if b[3]]  # the checkpoint trials: the same draws
    assert same and all(a == b for a, b in same)


def test_unknown_variants_are_refused():
    with pytest.raises(ValueError, match="unknown variants"):
        chaos.run_trials(1, variants=("savepont",), progress=False)


@pytest.mark.parametrize("backend", ["heap", "rocksdb"])
def test_stop_with_savepoint_outputs_nothing_the_savepoint_does_not_account_for(tmp_path, backend):
    """Three keyed subtasks fed by two sources: before, a subtask that had taken its snapshot went on
    processing records the sources emitted after the barrier while the others aligned, and the
    (non-transactional) sink output them before the stop and again after the restore."""
    data = chaos._data(1500)
    reference = CollectSink("ref")
    chaos._env(data, None, reference, 1, "heap", 2).execute("reference")
    for cut in (317, 1330):
        first = chaos._stop_with_savepoint(data, tmp_path / f"sp-{cut}", backend, 3, cut)
        rest = CollectSink("rest")
        chaos._env(data, None, rest, 1, "rocksdb", 2).execute("chaos", restore_from=tmp_path / f"sp-{cut}")
        assert Counter(map(repr, first + rest.results)) == Counter(map(repr, reference.results)), cut

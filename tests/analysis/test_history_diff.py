"""History over checkpoints and diff between snapshots of one job: growth known from its input."""

import pandas as pd
import pytest

import explorer
from explorer.analysis import checkpoint_summary
from explorer.analysis.diff import diff_summary, growth_by_key
from explorer.snapshot import checkpoints_in

from tests.support.fixtures import source_position

from tests.support.truth import entries_per_key, records_per_key


def test_history_follows_the_input(planted_job):
    chks = checkpoints_in(planted_job.checkpoint_dir)
    assert len(chks) >= 2
    assert sorted(explorer.history(planted_job.checkpoint_dir)["checkpoint_id"].unique()) == [
        explorer.open(c).checkpoint_id for c in chks]
    chks = [*chks, planted_job.savepoint]
    h = explorer.history(chks)
    for c in chks:
        snap = explorer.open(c)
        seen = planted_job.records[: source_position(snap)]
        rows = h[h["checkpoint_id"] == snap.checkpoint_id].set_index("state")
        assert rows.loc["events", "entries"] == len(seen)
        assert rows.loc["events", "keys"] == len(records_per_key(seen))
        assert rows.loc["last_seen", "entries"] == len(records_per_key(seen))
        assert rows["checkpoint_bytes"].iloc[0] == snap.timings()["bytes"]
        assert (rows["bytes"] > 0).all()
    summary = checkpoint_summary(h)
    assert summary["entries"].is_monotonic_increasing
    assert summary["incremental_bytes"].iloc[0] == summary["checkpoint_bytes"].iloc[0]
    assert (summary["incremental_bytes"] <= summary["checkpoint_bytes"]).all()
    assert summary["delta_bytes"].iloc[1:].tolist() == summary["checkpoint_bytes"].diff().iloc[1:].astype(int).tolist()
    assert {"duration_ms", "alignment_ms", "sync_ms", "async_ms"} <= set(h.columns)


def test_history_one_row_per_checkpoint(planted_job):
    h = explorer.history(planted_job.checkpoint_dir, per_state=False, keys=True)
    assert h["checkpoint_id"].is_unique and h["keys"].is_monotonic_increasing
    assert h["keys"].iloc[-1] <= 202


def test_diff_finds_added_changed_and_growth(planted_job):
    first = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    last = explorer.open(planted_job.savepoint)
    p = source_position(first)
    before, after = planted_job.records[:p], planted_job.records
    d = explorer.diff(first, last)
    ev = d[d["state"] == "events"].set_index("key")
    added = set(records_per_key(after)) - set(records_per_key(before))
    assert set(ev.index[ev["status"] == "added"]) == added
    later = records_per_key(after[p:])
    changed = {k for k in later if k not in added}
    assert set(ev.index[ev["status"] == "changed"]) == changed
    assert set(ev.index[ev["status"] == "unchanged"]) == set(records_per_key(before)) - set(later)
    assert not (ev["status"] == "removed").any()
    for k, n in later.items():
        assert ev.loc[k, "entries_delta"] == n and ev.loc[k, "bytes_delta"] == 8 * n
    s = diff_summary(d).set_index("state")
    assert s.loc["events", "entries_growth"] == len(after) - p
    assert s.loc["events", "keys_added"] == len(added)
    g = growth_by_key(d, n=2)
    assert set(g["key"]) == {"hot-a", "hot-b"} or g["entries_delta"].iloc[0] == max(
        entries_per_key(after)[k] - entries_per_key(before).get(k, 0) for k in entries_per_key(after))


def test_diff_in_reverse_removes(planted_job):
    first = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    last = explorer.open(planted_job.savepoint)
    fwd = explorer.diff(first, last)
    rev = explorer.diff(last, first)
    assert (fwd["status"] == "added").sum() == (rev["status"] == "removed").sum()
    assert (fwd["status"] == "changed").sum() == (rev["status"] == "changed").sum()
    same = explorer.diff(last, last, unchanged=False)
    assert same.empty


def test_snapshot_diff_method(planted_job):
    last = explorer.open(planted_job.savepoint)
    first = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    assert last.diff(first, state="events").equals(explorer.diff(last, first, state="events"))


def test_history_of_a_missing_directory(tmp_path):
    with pytest.raises(explorer.errors.AnalysisError, match="no such"):
        explorer.history(tmp_path / "nope")


def test_frames_and_snapshots_give_the_same_diff(planted_job):
    a = explorer.open(checkpoints_in(planted_job.checkpoint_dir)[0])
    b = explorer.open(planted_job.savepoint)
    fast = explorer.diff(a, b)  # cached Arrow columns and hashes
    slow = explorer.diff(a.keyed_state(), b.keyed_state())  # plain DataFrames, pandas hashes
    cols = ["operator", "state", "key"]
    pd.testing.assert_frame_equal(fast.sort_values(cols).reset_index(drop=True),
                                  slow.sort_values(cols).reset_index(drop=True))
    assert set(fast["status"]) == {"added", "changed", "unchanged"}

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


def test_history_times_are_the_slowest_subtasks_and_the_snapshots_own(tmp_path):
    """Sync/async times are the slowest subtask's (as the engine's trace shows them), never a sum
    over subtasks that snapshot in parallel, so neither exceeds the checkpoint's duration; the
    checkpoint time comes from the job's clock through the snapshot, not from file times."""
    from explorer.engine import CollectionSource, KeyedProcessFunction, ManualClock, StreamEnvironment, \
        ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("count", int))

        def process_element(self, word, ctx, out):
            self.n.update(self.n.value(0) + 1)

    start = 1_767_225_600_000
    env = StreamEnvironment(parallelism=3, max_parallelism=16, clock=ManualClock(start), trace=True, batch_size=8)
    # synchronous writes: each checkpoint completes before the next trigger, so the count does not
    # depend on how fast a background writer runs on a loaded machine
    env.enable_checkpointing(tmp_path / "chk", interval_records=60, retained=10, asynchronous=False)
    env.from_source(CollectionSource([f"w{i % 40}" for i in range(600)], num_splits=1), name="words",
                    parallelism=1).key_by(lambda w: w).process(Count(), name="count", uid="count")
    result = env.execute("count")
    trace = result.trace.to_frame()
    snaps = trace[trace["kind"] == "snapshot"]
    h = explorer.history(tmp_path / "chk", per_state=False, keys=False)
    assert len(h) >= 2
    for row in h.itertuples():
        assert row.async_ms <= row.duration_ms and row.sync_ms <= row.duration_ms
        mine = snaps[snaps["checkpoint"] == row.checkpoint_id]
        assert mine["subtask"].nunique() > 1
        assert row.sync_ms == pytest.approx(mine["sync_ms"].max(), abs=1e-3)
        assert row.created_at == pd.Timestamp(start, unit="ms", tz="UTC")


def test_incremental_bytes_count_every_file_whose_content_changed(planted_job):
    """A checkpoint's new bytes are its files whose content no earlier checkpoint of the run had (read
    from the files themselves), whichever checksum (SHA-256, XXH3-128) the metadata records."""
    from explorer.format.snapshot import read_metadata, resolve, sha256_file

    chks = checkpoints_in(planted_job.checkpoint_dir)
    summary = checkpoint_summary(explorer.history(planted_job.checkpoint_dir)).set_index("checkpoint_id")
    seen: set[str] = set()
    for c in chks:
        meta = read_metadata(c)
        contents = {rel: sha256_file(resolve(c, rel)) for rel in meta["files"]}
        new = sum(int(e["bytes"]) for rel, e in meta["files"].items() if contents[rel] not in seen)
        assert summary.loc[explorer.open(c).checkpoint_id, "incremental_bytes"] == new, c
        seen = set(contents.values())

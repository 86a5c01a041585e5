"""SIGKILL trials (``make chaos-kill``): the job in a child process killed at a random moment or
at its k-th fsync / rename, recovered by a second child; the committed files hold every
record exactly once."""

from __future__ import annotations

from explorer.engine.checkpoint import chaos


def test_killed_jobs_recover_exactly_once():
    report = chaos.run_kill_trials(4, records=600, seed=11, progress=False, savepoint_share=0.5, max_wait_s=3.0)
    assert report["trials"] == 4
    assert report["trials_with_errors"] == []
    assert report["lost_records"] == 0 and report["duplicated_records"] == 0
    assert report["failed_trials"] == []


def test_kill_runs_can_count_kills_rather_than_trials():
    """``--kills N`` runs until N jobs were really killed: a trial whose job ends before its kill
    point checks its output but is no kill, and does not count towards N."""
    report = chaos.run_kill_trials(30, records=300, seed=5, progress=False, savepoint_share=0.0, kills=2)
    assert report["kills"] == 2
    assert report["trials"] >= 2 and report["failed_trials"] == []


def test_the_self_kill_hook_counts_calls(monkeypatch):
    import os

    calls = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    monkeypatch.setattr(os, "kill", lambda pid, sig: calls.append(("kill", sig)))
    chaos._kill_self_at("fsync", 2)
    os.fsync(5)
    os.fsync(6)
    assert calls[0] == 5 and calls[1][0] == "kill"


def test_a_kill_after_the_end_of_input_loses_and_duplicates_nothing(tmp_path):
    """The window after the job's input ended and before its process exits: the last checkpoint's
    metadata and sink commits, the sink's final commit (one rename per subtask: a kill between
    two of them leaves one subtask's last records committed, the other's still pending), and the
    moment after close. Recovery restores the newest checkpoint, drops what is pending beyond it
    and writes the rest again under the same names, so each record is committed once."""
    reference = chaos.kill_reference(600)
    outcomes = []
    for k in (1, 2, 3, chaos.END_RENAMES):
        spec = {"records": 600, "every": 150, "backend": "heap", "parallelism": 2, "incremental": False,
                "asynchronous": True, "point": "end", "k": k, "savepoint": None}
        root = tmp_path / f"k{k}"
        root.mkdir()
        outcomes.append(chaos.run_kill_trial(root, spec, reference))
    assert all(o["killed"] and not o["finished_first"] for o in outcomes), outcomes
    assert [o["errors"] for o in outcomes] == [[]] * 4
    assert [(o["lost"], o["duplicated"]) for o in outcomes] == [(0, 0)] * 4


def test_recovery_drops_committed_output_of_epochs_after_the_restored_checkpoint(tmp_path):
    """A first run that committed epochs beyond the checkpoint it is restored from (aborted
    checkpoints' epochs committed at the end of input, 'final', a newer checkpoint that did not
    restore) keeps none of them: the restored job writes all of that output again, under its own
    epoch names, so a leftover would be a duplicate."""
    from explorer.engine.sinks import FileSink

    out = tmp_path / "out"
    (out / "_pending").mkdir(parents=True)
    for name in ("part-0-00000002", "part-0-00000004", "part-0-00000005", "part-0-final", "part-1-00000003",
                 "part-0"):
        (out / f"{name}.jsonl").write_text(f'"{name}"\n')
    for name in ("part-1-00000004", "part-1-00000006", "part-1-final"):
        (out / "_pending" / f"{name}.jsonl").write_text(f'"{name}"\n')
    FileSink(out).recover(4)
    assert sorted(p.name for p in out.glob("*.jsonl")) == [
        "part-0-00000002.jsonl", "part-0-00000004.jsonl", "part-0.jsonl", "part-1-00000003.jsonl",
        "part-1-00000004.jsonl"]
    assert list((out / "_pending").iterdir()) == []


def test_a_checkpoint_taken_after_a_sink_finished_owns_its_final_epoch(tmp_path):
    """The 'lost records after the end of input' trial: a checkpoint completing after the input
    ended snapshots the finished subtasks as they are (timers fired, everything emitted), so the
    sink's final epoch, staged when it finished, belongs to that checkpoint. Before, it stayed
    'final': a kill before the final commit, a restore from that checkpoint, and the epoch was
    dropped as output after the checkpoint while the restored job had nothing left to emit."""
    from explorer.engine.sinks import CollectSink, FileSink

    out = tmp_path / "out"
    w = FileSink(out).create_writer(0, 1, type("Runtime", (), {"checkpointing": True})())
    w.write(["a", "b"], None)
    w.pre_commit(1)
    w.write(["c", "timer-fired"], None)
    w.finish()  # the input ended: "final" staged
    w.pre_commit(2)  # the checkpoint completing at the end takes the finished subtask's snapshot
    FileSink(out).recover(2)  # killed before the final commit; restored from checkpoint 2
    assert FileSink(out).read_all() == ["a", "b", "c", "timer-fired"]

    sink = CollectSink("out")
    cw = sink.create_writer(0, 1, type("Runtime", (), {"checkpointing": True, "restored_from": None, "collected": {}})())
    cw.write(["a"], None)
    cw.finish()
    cw.pre_commit(3)
    sink.recover(3)
    assert sink.results == ["a"]

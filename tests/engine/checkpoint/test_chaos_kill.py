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

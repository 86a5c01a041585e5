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

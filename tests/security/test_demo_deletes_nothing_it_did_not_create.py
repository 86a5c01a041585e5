"""Finding 8: ``state-explorer demo --out D`` ran ``shutil.rmtree(D)`` first: a user's savepoint in ``D/s/sp`` and an
unrelated ``NOTES.txt`` were deleted, and ``--out .`` deleted the working folder. The demo now refuses a folder
with something in it that no demo wrote, and on a re-run replaces only what it created itself. ``run`` and
``savepoint`` refuse an existing, non-empty savepoint folder instead of deleting it."""

from __future__ import annotations

import pytest

from explorer.cli import DEMO_MARKER, main

FAST = ["--records", "300", "--backends", "heap", "--no-spark", "--parallelism", "1"]


def _user_files(d):
    (d / "s" / "sp").mkdir(parents=True)
    (d / "s" / "sp" / "_metadata").write_bytes(b"someone's savepoint")
    (d / "NOTES.txt").write_text("mine")


def test_demo_deletes_nothing_it_did_not_create(tmp_path, capsys, monkeypatch):
    d = tmp_path / "D"
    _user_files(d)
    assert main(["demo", "--out", str(d), *FAST]) == 2
    err = capsys.readouterr().err
    assert "NOTES.txt" in err and "deletes nothing it did not create" in err
    assert (d / "s" / "sp" / "_metadata").read_bytes() == b"someone's savepoint" and (d / "NOTES.txt").is_file()
    # --out . in a folder with the user's files: refused, nothing deleted
    monkeypatch.chdir(d)
    assert main(["demo", "--out", ".", *FAST]) == 2
    assert (d / "NOTES.txt").is_file() and (d / "s" / "sp" / "_metadata").is_file()


def test_demo_runs_twice_into_its_own_folder_and_keeps_what_the_user_added(tmp_path, capsys):
    d = tmp_path / "out"
    assert main(["demo", "--out", str(d), *FAST]) == 0
    assert (d / DEMO_MARKER).is_file() and (d / "url_counts" / "heap" / "savepoint").is_dir()
    _user_files(d)  # added after the first run
    (d / "url_counts" / "heap" / "stale").write_text("made by the demo's folder, replaced")
    assert main(["demo", "--out", str(d), *FAST]) == 0, capsys.readouterr().err
    assert (d / "NOTES.txt").read_text() == "mine" and (d / "s" / "sp" / "_metadata").is_file()
    assert not (d / "url_counts" / "heap" / "stale").exists()
    assert (d / "url_counts" / "heap" / "savepoint").is_dir()


def test_demo_marker_cannot_name_paths_outside_its_folder(tmp_path, capsys):
    d = tmp_path / "out"
    d.mkdir()
    (tmp_path / "victim").mkdir()
    (d / DEMO_MARKER).write_text('{"created": ["../victim"]}')
    assert main(["demo", "--out", str(d), *FAST]) == 2
    assert (tmp_path / "victim").is_dir() and "../victim" in capsys.readouterr().err


def test_savepoint_command_does_not_delete_an_existing_folder(tmp_path, capsys):
    sp = tmp_path / "sp"
    sp.mkdir()
    (sp / "_metadata").write_bytes(b"someone's savepoint")
    assert main(["savepoint", "url_counts", "-o", str(sp), "--records", "200"]) == 2
    assert (sp / "_metadata").read_bytes() == b"someone's savepoint"
    assert "not empty" in capsys.readouterr().err

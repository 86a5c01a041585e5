"""The one chk-N rule (explorer.format.checkpoint_dir)."""

from pathlib import Path

from explorer.format.checkpoint_dir import (
    checkpoint_folders,
    checkpoint_id,
    folder_name,
    has_metadata,
    newest_complete,
)


def test_names_round_trip():
    assert checkpoint_id("chk-7") == 7
    assert checkpoint_id(folder_name(12)) == 12
    for other in ("chk-", "chk-x", "chk-7a", "CHK-7", "chk--1", "shared", "savepoint-1"):
        assert checkpoint_id(other) is None


def test_folders_oldest_first_and_only_complete(tmp_path: Path):
    for n in (10, 2, 9):
        (tmp_path / f"chk-{n}").mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "chk-2" / "_metadata").write_bytes(b"x")
    (tmp_path / "chk-9" / "_metadata").write_bytes(b"x")
    assert [n for n, _ in checkpoint_folders(tmp_path)] == [2, 9, 10]  # numeric, not lexical, order
    assert [n for n, _ in checkpoint_folders(tmp_path, has_metadata)] == [2, 9]
    assert newest_complete(tmp_path) == tmp_path / "chk-9"
    assert newest_complete(tmp_path / "shared") is None


def test_a_folder_that_vanishes_while_tested_is_left_out(tmp_path: Path):
    (tmp_path / "chk-1").mkdir()
    (tmp_path / "chk-2").mkdir()

    def gone(p):
        if p.name == "chk-1":
            raise FileNotFoundError(p)
        return True

    assert [n for n, _ in checkpoint_folders(tmp_path, gone)] == [2]

"""Issue 29, finding 8: every file the Spark reader opens resolves inside the checkpoint (a symlink whose target
is inside is fine; one whose target is outside is refused with UnsafePathError), and no error message quotes a
file's contents beyond a short escaped excerpt. The engine's reader resolves its metadata paths' symlinks too."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.errors import SnapshotError, UnsafePathError
from explorer.format.untrusted import Roots
from explorer.readers.spark import layout

SPARK = Path(__file__).resolve().parents[2] / "sample_data" / "spark"
ENGINE = Path(__file__).resolve().parents[2] / "sample_data" / "dedup" / "savepoint-heap"
KEY_LINE = "aws_access_key_id = AKIAIOSFODNN7EXAMPLE"


def _copy(tmp_path: Path, src: Path) -> Path:
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    return dst


def _credentials(tmp_path: Path) -> Path:
    f = tmp_path / "home" / ".aws" / "credentials"
    f.parent.mkdir(parents=True)
    f.write_text(f"[default]\n{KEY_LINE}\naws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    return f


def _link(f: Path, target: Path) -> None:
    """Replace ``f`` (and its checksum side files) by a symlink to ``target``."""
    for side in (f.with_name(f".{f.name}.crc"), f.with_name(f"{f.name}.crc")):
        side.unlink(missing_ok=True)
    if f.is_dir():
        shutil.rmtree(f)
    else:
        f.unlink()
    f.symlink_to(target)


def _no_secret(err: BaseException) -> str:
    text = str(err)
    assert "AKIA" not in text and "EXAMPLE" not in text and "aws_" not in text, text
    return text


# --- Spark --------------------------------------------------------------------------------------
def test_a_commit_log_linked_out_of_the_checkpoint_is_refused_unquoted(tmp_path):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    _link(ckpt / "commits" / "5", _credentials(tmp_path))
    with pytest.raises(UnsafePathError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    text = _no_secret(err.value)
    assert str(ckpt / "commits" / "5") in text and "allow_roots" in text


@pytest.mark.parametrize("rel", ["offsets/5", "metadata", "state/0/0/6.delta", "state/0/_metadata/metadata",
                                 "state/0/0/_metadata/schema"])
def test_any_file_linked_out_of_the_checkpoint_is_refused(tmp_path, rel):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    creds = _credentials(tmp_path)
    if not (ckpt / rel).exists():
        pytest.skip(f"{rel} not in the sample")
    _link(ckpt / rel, creds)
    with pytest.raises(SnapshotError) as err:  # (metadata: the query id is optional, so info() goes on)
        snap = explorer.open(ckpt, jvm=False)
        snap.keyed_state()
        snap.reader.info()
        if rel == "metadata":
            layout.verified_text(ckpt / rel, snap.reader.roots)
    assert isinstance(err.value, UnsafePathError), err.value
    _no_secret(err.value)


def test_a_checksum_side_file_linked_out_is_refused(tmp_path):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    side = ckpt / "commits" / ".5.crc"
    side.unlink()
    side.symlink_to(_credentials(tmp_path))
    with pytest.raises(UnsafePathError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    _no_secret(err.value)


def test_a_state_folder_linked_out_is_refused_unless_allowed(tmp_path):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    moved = tmp_path / "other-disk" / "state"
    shutil.move(str(ckpt / "state"), moved)
    (ckpt / "state").symlink_to(moved)
    with pytest.raises(UnsafePathError, match="allow_roots"):
        explorer.open(ckpt, jvm=False).keyed_state()
    rows = explorer.open(ckpt, jvm=False, allow_roots=[moved.parent]).keyed_state()
    assert len(rows) == len(explorer.open(SPARK / "agg-hdfs", jvm=False).keyed_state())


def test_a_link_whose_target_is_inside_the_checkpoint_is_fine(tmp_path):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    kept = ckpt / "kept"
    kept.mkdir()
    shutil.copy(ckpt / "commits" / "5", kept / "5")
    shutil.copy(ckpt / "commits" / ".5.crc", kept / ".5.crc")
    (ckpt / "commits" / "5").unlink()
    (ckpt / "commits" / "5").symlink_to(Path("..") / "kept" / "5")
    assert len(explorer.open(ckpt, jvm=False).keyed_state()) > 0


def test_links_out_are_found_before_spark_reads_the_folder(tmp_path):
    """Spark's JVM follows links itself: the reader looks for links out before handing it the folder."""
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    assert layout.links_outside(ckpt, Roots([ckpt])) == []
    _link(ckpt / "commits" / "5", _credentials(tmp_path))
    (ckpt / "inside").symlink_to(ckpt / "offsets")
    assert layout.links_outside(ckpt, Roots([ckpt])) == [ckpt / "commits" / "5"]
    with pytest.raises(UnsafePathError):
        layout.check_links(ckpt, Roots([ckpt]))
    layout.check_links(ckpt, Roots([ckpt], [tmp_path / "home"]))


def test_a_damaged_commit_log_is_described_not_quoted(tmp_path):
    """Inside the checkpoint, a file that is not what it should be is described by position and length."""
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    f = ckpt / "commits" / "5"
    f.write_text("v1\n" + KEY_LINE + "\n")
    for side in (f.with_name(".5.crc"),):
        side.unlink()
    with pytest.raises(SnapshotError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    _no_secret(err.value)


def test_a_damaged_checksum_side_file_is_described_not_quoted(tmp_path):
    ckpt = _copy(tmp_path, SPARK / "agg-hdfs")
    (ckpt / "commits" / ".5.crc").unlink()
    (ckpt / "commits" / "5.crc").write_text(KEY_LINE)  # Spark 4's JSON side file, here not JSON
    with pytest.raises(SnapshotError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    _no_secret(err.value)


# --- the engine ---------------------------------------------------------------------------------
def _engine_data_file(snap: Path) -> Path:
    return next(p for p in sorted(snap.rglob("*.parquet")))


def test_engine_data_file_linked_out_is_refused(tmp_path):
    snap = _copy(tmp_path, ENGINE)
    f = _engine_data_file(snap)
    outside = tmp_path / "outside.parquet"
    shutil.copy(f, outside)  # the same bytes: only where it lies is wrong
    f.unlink()
    f.symlink_to(outside)
    with pytest.raises(UnsafePathError, match="outside"):
        explorer.open(snap).keyed_state()


def test_engine_metadata_linked_out_is_refused(tmp_path):
    snap = _copy(tmp_path, ENGINE)
    outside = tmp_path / "elsewhere" / "_metadata"
    outside.parent.mkdir()
    shutil.copy(snap / "_metadata", outside)
    (snap / "_metadata").unlink()
    (snap / "_metadata").symlink_to(outside)
    with pytest.raises(SnapshotError) as err:
        explorer.open(snap)
    assert isinstance(err.value, UnsafePathError) or "no snapshot" in str(err.value)


def test_engine_data_file_linked_inside_is_fine(tmp_path):
    snap = _copy(tmp_path, ENGINE)
    f = _engine_data_file(snap)
    moved = snap / "moved.bin"
    shutil.move(str(f), moved)
    f.symlink_to(moved)
    assert len(explorer.open(snap).keyed_state()) == len(explorer.open(ENGINE).keyed_state())


# --- a _metadata linking out is refused before format detection reads its magic bytes ------------
def _audited_open(snap: Path) -> tuple[BaseException, list[str]]:
    """``explorer.open(snap)`` in a child process that records every file it opens (sys.addaudithook)."""
    import json
    import subprocess
    import sys

    probe = (
        "import json, sys, explorer\n"
        "opened = []\n"
        "sys.addaudithook(lambda ev, args: opened.append(str(args[0])) if ev == 'open' and isinstance(args[0], str) "
        "else None)\n"
        f"try:\n    explorer.open({str(snap)!r})\n    err = None\n"
        "except Exception as exc:\n    err = type(exc).__name__\n"
        "print(json.dumps({'err': err, 'opened': opened}))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return out["err"], out["opened"]


@pytest.mark.parametrize("sample", [ENGINE, ENGINE.parents[1] / "flink" / "heap-canonical-savepoint"],
                         ids=["engine", "flink"])
def test_a_metadata_linked_out_is_never_opened(tmp_path, sample):
    snap = _copy(tmp_path, sample)
    outside = tmp_path / "elsewhere" / "_metadata"
    outside.parent.mkdir()
    shutil.copy(snap / "_metadata", outside)
    (snap / "_metadata").unlink()
    (snap / "_metadata").symlink_to(outside)
    err, opened = _audited_open(snap)
    assert err == "UnsafePathError"
    assert not [f for f in opened if str(outside.parent) in str(Path(f).resolve())], opened

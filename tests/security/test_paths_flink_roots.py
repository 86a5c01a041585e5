"""Issue 29, finding 9: what a Flink checkpoint may open is exact. A ``chk-N`` folder's roots are itself and its
job folder's ``shared/`` and ``taskowned/`` (and another ``chk-M`` a handle names), never the whole job folder,
which may be a home folder (``~/chk-5``). Folders beyond those (the changelog's ``dstl/`` kept beside the job
folder) are read only when named with ``allow_roots=``, which the error names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.errors import UnsafePathError
from explorer.readers.flink.handles import StreamHandle

from tests.support.flink import FLINK_FIXTURES

INCREMENTAL = FLINK_FIXTURES / "rocksdb-incremental-checkpoint"
CHANGELOG = FLINK_FIXTURES / "production" / "plain-changelog-heap-checkpoint"
#: a shared SST file its _metadata names by absolute path: <job>/shared/<uuid>
SST = "shared/9fb39c86-1253-4192-8f8e-87af58f7f476"


def _home(tmp_path: Path) -> Path:
    """A home folder holding a copy of the checkpoint's chk-8 and shared/, and ~/.aws/credentials."""
    home = tmp_path / "home"
    for name in ("chk-8", "shared"):
        shutil.copytree(INCREMENTAL / name, home / name)
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n")
    return home


def _rename_handle(meta: Path, old: str, new: str) -> None:
    """Rename a handle's path in ``_metadata`` (the same length, so Java's UTF length prefix stays right)."""
    assert len(new) == len(old), (new, len(new), len(old))
    data = meta.read_bytes()
    assert data.count(old.encode()) >= 1
    meta.write_bytes(data.replace(old.encode(), new.encode()))


def _escape(prefix: str, length: int, target: str = ".aws/credentials") -> str:
    """``prefix`` + ``./`` padding + ``target`` of exactly ``length`` characters (a doubled slash if need be)."""
    pad = length - len(prefix) - len(target)
    head, tail = target.split("/", 1)
    return prefix + "./" * (pad // 2) + head + "/" * (1 + pad % 2) + tail


def _keyed(path: Path, **options) -> pd.DataFrame:
    return explorer.open(path, **options).keyed_state()


@pytest.mark.parametrize("anchor", ["shared/../", "taskowned/../", "chk-8/../", "chk-7/../../home/"])
def test_handles_climbing_into_the_job_folder_are_refused(tmp_path, anchor):
    home = _home(tmp_path)
    _rename_handle(home / "chk-8" / "_metadata", SST, _escape(anchor, len(SST)))
    with pytest.raises(UnsafePathError, match="outside the snapshot folder") as err:
        _keyed(home / "chk-8")
    assert "AKIA" not in str(err.value) and "EXAMPLE" not in str(err.value)


def test_another_retained_checkpoint_of_the_job_is_read(tmp_path):
    home = _home(tmp_path)
    name = "chk-7/" + "x" * (len(SST) - len("chk-7/"))
    (home / "chk-7").mkdir()
    shutil.move(str(home / SST), home / name)
    _rename_handle(home / "chk-8" / "_metadata", SST, name)
    assert _keyed(home / "chk-8").equals(_keyed(INCREMENTAL))


def test_the_untouched_copy_in_a_home_folder_reads(tmp_path):
    home = _home(tmp_path)
    assert _keyed(home / "chk-8").equals(_keyed(INCREMENTAL))


def _dstl_beside_the_job(tmp_path: Path) -> tuple[Path, Path]:
    """The changelog checkpoint with its dstl/ files beside the job folder (Flink's
    state.changelog.dstl.dfs.base-path set elsewhere): <root>/job/chk-15, <root>/dstlbs/changelog/<job>/dstl/."""
    root = tmp_path / "root"
    job = root / "job"
    shutil.copytree(CHANGELOG, job)
    shutil.move(str(job / "shared" / "changelog"), root / "dstlbs" / "changelog")
    meta = next(job.glob("chk-*/_metadata"))
    _rename_handle(meta, "/shared/changelog/", "/dstlbs/changelog/")  # (every handle of the changelog)
    return job, root / "dstlbs"


def test_a_dstl_folder_beside_the_job_is_refused_naming_the_option(tmp_path):
    job, _ = _dstl_beside_the_job(tmp_path)
    with pytest.raises(UnsafePathError, match="allow_roots") as err:
        _keyed(job)
    assert "dstl" in str(err.value)


def test_a_dstl_folder_beside_the_job_is_read_when_allowed(tmp_path):
    job, dstl = _dstl_beside_the_job(tmp_path)
    got = _keyed(job, allow_roots=[dstl])
    assert len(got) and got.equals(_keyed(CHANGELOG))


def test_allow_roots_does_not_widen_to_their_parents(tmp_path):
    job, dstl = _dstl_beside_the_job(tmp_path)
    other = tmp_path / "root" / "elsewhere"
    other.mkdir()
    with pytest.raises(UnsafePathError):
        _keyed(job, allow_roots=[other])


def test_a_savepoint_reads_only_its_own_folder(tmp_path):
    """A savepoint's relative handles stay in its folder (its parent is no root)."""
    sp = tmp_path / "savepoints" / "sp"
    shutil.copytree(FLINK_FIXTURES / "heap-canonical-savepoint", sp)
    (tmp_path / "savepoints" / "x").write_text("aws_access_key_id = AKIAIOSFODNN7EXAMPLE\n")
    reader = explorer.open(sp).reader
    with pytest.raises(UnsafePathError, match="outside the snapshot folder"):
        reader.resolver.local_path(StreamHandle("relative", "../x", 10))
    assert reader.resolver.roots.folders == [sp.resolve()]

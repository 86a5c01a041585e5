"""Finding 7: the file cache holds the bytes of snapshots and the names of buckets and keys. Whatever the umask,
its files are 0600 and its folders 0700 (whole-file entries, byte-range entries and their logs, the sidecar
JSON, the lock files, a range entry promoted to a whole-file entry, the folders of mirrors)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from explorer.storage.cache import FileCache


def _modes(root: Path) -> dict[str, int]:
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[p.relative_to(root).as_posix()] = stat.S_IMODE(p.lstat().st_mode)
    return out


@pytest.fixture(params=[0o022, 0o000])
def umask(request):
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def test_cache_file_modes(tmp_path, umask):
    cache = FileCache(tmp_path / "cache")
    body = bytes(range(256)) * 64
    cache.store(FileCache.key("s3", "s3://bucket/secret-name/whole"), "s3://bucket/secret-name/whole", len(body), 1,
                lambda f: f.write(body))
    ranged = FileCache.key("s3", "s3://bucket/secret-name/ranged")
    fetch = lambda a, n: body[a:a + n]  # noqa: E731
    cache.read_range(ranged, "s3://bucket/secret-name/ranged", len(body), 1, 0, 100, fetch)
    held = _modes(tmp_path / "cache")
    assert any(k.endswith(".part") for k in held) and any(k.endswith(".pieces") for k in held)
    cache.read_range(ranged, "s3://bucket/secret-name/ranged", len(body), 1, 100, len(body), fetch)  # promoted
    held.update(_modes(tmp_path / "cache"))
    assert (tmp_path / "cache" / "objects" / ranged[:2] / ranged).is_file()
    for rel, mode in _modes(tmp_path / "cache").items():
        is_dir = (tmp_path / "cache" / rel).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (rel, oct(mode))
    assert any(k.endswith(".json") for k in held) and any(k.endswith(".lock") for k in held)


def test_cache_file_modes_of_a_mirror(tmp_path, umask):
    """The folder a remote snapshot is mirrored into (Spark's reader needs files on disk): 0700, its files 0600."""
    import pyarrow.fs as pafs

    from explorer.storage.remote import Store, StoragePath

    src = tmp_path / "remote" / "state" / "0"
    src.mkdir(parents=True)
    (src / "1.delta").write_bytes(b"x" * 100)
    store = Store(pafs.LocalFileSystem(), "local", lambda k: f"file://{k}", cache=FileCache(tmp_path / "cache"))
    into = StoragePath(store, str(tmp_path / "remote")).mirror()
    assert (into / "state" / "0" / "1.delta").is_file()
    for rel, mode in _modes(tmp_path / "cache").items():
        is_dir = (tmp_path / "cache" / rel).is_dir()
        assert mode == (0o700 if is_dir else 0o600), (rel, oct(mode))

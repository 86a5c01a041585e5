"""URLs of every store become paths that print as the URL they came from; a store whose client
cannot be loaded is a clean error naming the URL."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from explorer.errors import StorageError
from explorer.storage import StoragePath, as_path, is_remote


def test_urls_of_each_store_print_as_themselves():
    gs = as_path("gs://bkt/jobs/a/", storage_options={"anonymous": True})
    assert isinstance(gs, StoragePath) and str(gs) == "gs://bkt/jobs/a" and gs.key == "bkt/jobs/a"
    assert str(gs / "chk-3" / "_metadata") == "gs://bkt/jobs/a/chk-3/_metadata" and str(gs.parent) == "gs://bkt/jobs"
    assert (gs / "x" / ".." / "y").resolve() == gs / "y" and gs in (gs / "y").parents
    abfs = as_path("abfs://cont@acct.dfs.core.windows.net/x/y")
    assert str(abfs / "z") == "abfs://cont@acct.dfs.core.windows.net/x/y/z" and abfs.key == "cont/x/y"
    assert as_path("file:///tmp/x") == Path("/tmp/x") and as_path("relative/x") == Path("relative/x")
    assert is_remote("s3a://b/k") and not is_remote("/tmp/x") and not is_remote(Path("s3:/b"))
    with pytest.raises(StorageError, match="s3:///x: found no bucket name"):
        as_path("s3:///x")


def test_a_store_whose_client_cannot_load_names_the_url():
    with pytest.raises(StorageError, match="hdfs://localhost:9/x"):
        explorer.open("hdfs://localhost:9/x")

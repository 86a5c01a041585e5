"""Finding 1: a remote object key with ``..`` components must not write outside the local mirror.

The crafted checkpoint: a real Spark checkpoint on the project's local S3 server plus one object whose key is
``state/`` + ``../`` x N + ``escaped/x.py``, N chosen so that the key, joined onto the mirror folder, lands in
this test's own temporary folder (the real attack aims at ``~/.ipython/profile_default/startup/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from explorer.errors import UnsafePathError
from explorer.storage import as_path
from explorer.storage.remote import confined

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"


def _plant(s3, tmp_path: Path, prefix: str) -> tuple[str, str]:
    url = s3.upload(SAMPLES / "spark" / "agg-hdfs", "untrusted", prefix)
    # the mirror is <cache>/trees/tree-XXXX = tmp_path/cache/trees/tree-XXXX: four levels up
    # from <mirror>/state is tmp_path
    key = f"{prefix}/state/" + "../" * 4 + "escaped/x.py"
    s3.client.put_object(Bucket="untrusted", Key=key, Body=b"print('owned')\n")
    # HTTP clients take ``..`` out of the request path: the fetch of that key asks for bucket
    # ``escaped``, key ``x.py``, which the attacker also owns
    s3.bucket("escaped")
    s3.client.put_object(Bucket="escaped", Key="x.py", Body=b"print('owned')\n")
    return url, key


def test_remote_mirror_path_escape(s3, tmp_path):
    url, key = _plant(s3, tmp_path, "agg-escape")
    with pytest.raises(UnsafePathError) as err:
        explorer.open(url).reader.checkpoint_ids()
    assert not (tmp_path / "escaped").exists()
    assert "escaped/x.py" in str(err.value) and ".." in str(err.value)


@pytest.mark.parametrize("bad", ["../x", "a/../../x"])
def test_remote_mirror_refuses_each_unsafe_relative_key(s3, tmp_path, bad):
    s3.bucket("untrusted")
    s3.client.put_object(Bucket="untrusted", Key="m/ok.txt", Body=b"ok")
    s3.client.put_object(Bucket="untrusted", Key=f"m/{bad}", Body=b"bad")
    s3.client.put_object(Bucket="untrusted", Key="x", Body=b"bad")  # what a normalised fetch reaches
    root = as_path("s3://untrusted/m")
    with pytest.raises(UnsafePathError):
        root.mirror()
    assert not (tmp_path / "cache" / "trees" / "x").exists()


@pytest.mark.parametrize("rel", ["/etc/x", "a//b", "", "a/./b", "a/\x00b", "a/../../b"])
def test_remote_mirror_confines_absolute_empty_and_nul_components(tmp_path, rel):
    with pytest.raises(UnsafePathError, match="s3://b/k"):
        confined(tmp_path, rel, "s3://b/k")


def test_remote_mirror_confines_symlinks_out_of_the_root(tmp_path):
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "link").symlink_to(tmp_path)
    with pytest.raises(UnsafePathError, match="outside the mirror"):
        confined(tmp_path / "root", "link/x.py", "s3://b/k")
    assert confined(tmp_path / "root", "a/b", "s3://b/k") == (tmp_path / "root" / "a" / "b").resolve()

"""Issue 29, left by session 11: ``allow_roots`` on object stores.

The folders a user allows were resolved as local paths, so ``allow_roots=["s3://bucket/dstlbs"]`` became a local
``s3:/bucket/dstlbs`` and a Flink changelog checkpoint on S3 whose ``dstl/`` lies beside the job folder could not
be read at all. A URL beside a snapshot on a remote store is now a folder of that store (the project's moto S3
server here), and containment stays exact: the error names the option, another folder allows nothing, a URL of
another kind of store is refused.
"""

from __future__ import annotations

import pytest

import explorer
from explorer.errors import StorageError, UnsafePathError

from tests.security.test_paths_flink_roots import CHANGELOG, _dstl_beside_the_job, _keyed


def _on_s3(s3, tmp_path, prefix):
    job, dstl = _dstl_beside_the_job(tmp_path)
    url = s3.upload(job.parent, "untrusted", prefix)
    return f"{url}/job", f"{url}/{dstl.name}"


def test_a_dstl_folder_beside_the_job_on_s3_is_read_when_allowed(s3, tmp_path):
    job, dstl = _on_s3(s3, tmp_path, "allowed")
    got = _keyed(job, allow_roots=[dstl])
    assert len(got) and got.equals(_keyed(CHANGELOG))


def test_a_dstl_folder_on_s3_is_refused_naming_the_option(s3, tmp_path):
    job, _ = _on_s3(s3, tmp_path, "refused")
    with pytest.raises(UnsafePathError, match="allow_roots") as err:
        _keyed(job)
    assert "dstl" in str(err.value) and "URL" in str(err.value)


def test_allow_roots_on_s3_does_not_widen(s3, tmp_path):
    job, dstl = _on_s3(s3, tmp_path, "narrow")
    s3.client.put_object(Bucket="untrusted", Key="narrow/elsewhere/x", Body=b"x")
    with pytest.raises(UnsafePathError):
        _keyed(job, allow_roots=[dstl.rsplit("/", 1)[0] + "/elsewhere"])


def test_allow_roots_of_another_store_is_refused(s3, tmp_path):
    job, _ = _on_s3(s3, tmp_path, "kind")
    with pytest.raises(StorageError, match="allow_roots"):
        explorer.open(job, allow_roots=["gs://bucket/dstlbs"])

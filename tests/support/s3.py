"""A real S3-compatible server on localhost for the storage tests: moto's server mode
(``moto[server]``'s :class:`ThreadedMotoServer`, an HTTP S3 endpoint the explorer reaches through
pyarrow's S3 client exactly as it reaches AWS), and uploading folders to it."""

from __future__ import annotations

import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

#: the environment the explorer takes its S3 settings from (explorer.storage.config)
S3_ENV_KEYS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
               "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE",
               "AWS_SHARED_CREDENTIALS_FILE", "AWS_EC2_METADATA_DISABLED", "AWS_CA_BUNDLE")


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class S3Server:
    """A running moto S3 server: ``endpoint``, a boto3 ``client``, :meth:`upload`."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer  # test dependency

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self._server.start()
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                                   aws_access_key_id="testing", aws_secret_access_key="testing")

    def env(self) -> dict[str, str]:
        """The environment a user sets to reach this server (what the AWS CLI would take)."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}

    def bucket(self, name: str) -> str:
        try:
            self.client.create_bucket(Bucket=name)
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            pass
        return name

    def upload(self, folder: Path, bucket: str, prefix: str) -> str:
        """Every file under ``folder`` to ``s3://bucket/prefix/...``; returns that URL."""
        from boto3.s3.transfer import TransferConfig

        # one PUT per file up to 4 GiB: moto joins the parts of a multipart upload in memory
        single = TransferConfig(multipart_threshold=4 << 30, max_concurrency=2)
        self.bucket(bucket)
        folder = Path(folder)
        for f in sorted(folder.rglob("*")):
            if f.is_file():
                key = f"{prefix}/{f.relative_to(folder).as_posix()}"
                self.client.upload_file(str(f), bucket, key, Config=single)
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        self._server.stop()


@contextmanager
def s3_environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` as the S3 settings of this process (the others unset) for the duration."""
    old = {k: os.environ.get(k) for k in S3_ENV_KEYS}
    try:
        for k in S3_ENV_KEYS:
            os.environ.pop(k, None)
        os.environ.update(env)
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --- fixtures, imported by name by the conftest.py of each suite that uses them ---------------------
@pytest.fixture(scope="session")
def s3_server():
    pytest.importorskip("moto.server", reason="moto[server] is a test dependency (pyproject [test])")
    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3(s3_server, tmp_path, monkeypatch):
    """The server reachable through the environment the AWS tools read, and a cache of this test's own."""
    monkeypatch.setenv("STATE_EXPLORER_CACHE_DIR", str(tmp_path / "cache"))
    with s3_environment(s3_server.env()):
        yield s3_server

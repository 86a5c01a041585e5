"""Fixtures of the security suites: the project's local S3 server (moto's server mode, as in tests/storage)."""

from __future__ import annotations

import pytest

from tests.support.s3 import S3Server, s3_environment


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

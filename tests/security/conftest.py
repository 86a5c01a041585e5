"""Fixtures of the security suites: the project's local S3 server (moto's server mode, as in tests/storage)."""

from tests.support.s3 import s3, s3_server  # noqa: F401 - fixtures, registered by name

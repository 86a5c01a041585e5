"""The S3 server and a fresh cache for the storage suites (fixtures in tests/support/s3.py)."""

from tests.support.s3 import s3, s3_server  # noqa: F401 - fixtures, registered by name

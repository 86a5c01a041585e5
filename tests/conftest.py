"""Registers the shared factory fixtures of ``tests/support/fixtures.py`` for every suite.

(Imported by name: ``pytest_plugins = ["fixtures"]`` would clash with pytest's
own plugin called ``fixtures``.)
"""

from tests.support.fixtures import backend, backend_kind, clock, keyed, make_backend  # noqa: F401
from tests.support.fixtures import planted_job, planted_ttl, snapshot_backend  # noqa: F401

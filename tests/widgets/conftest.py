"""Snapshots for the widget suites: the planted jobs of ``tests/support/fixtures.py`` on the heap backend only.

Widgets read snapshots through ``explorer.open``, so one backend is enough here; the
backends themselves are compared by the reader and analysis suites.
"""

from __future__ import annotations

import pytest

from tests.support.fixtures import PlantedSnapshots, run_planted


@pytest.fixture(scope="session")
def planted_heap(tmp_path_factory) -> PlantedSnapshots:
    return run_planted(tmp_path_factory.mktemp("widgets-planted"), "heap", parallelism=2, checkpoint_every=400,
                        move_clock=False)


@pytest.fixture(scope="session")
def planted_ttl_heap(tmp_path_factory) -> PlantedSnapshots:
    return run_planted(tmp_path_factory.mktemp("widgets-ttl"), "heap", parallelism=1, checkpoint_every=None,
                        move_clock=True)

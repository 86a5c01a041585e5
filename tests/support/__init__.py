"""Helpers the suites share, imported one way: ``from tests.support.<module> import ...``.

* :mod:`.fixtures`: the factory fixtures (backends, clocks, planted jobs) that
  ``tests/conftest.py`` registers for every suite;
* :mod:`.truth`: per-key answers computed the slow, obvious way, for the analyses to equal;
* :mod:`.flink`: the committed Apache Flink fixtures and their ``EXPECTED.json``;
* :mod:`.flink_expected`: decoded Flink state compared with a production fixture's ``EXPECTED.json``
  (shared with ``tools/flink/check_fixtures.py``);
* :mod:`.full_snapshot`: states planted in a RocksDB backend for the full-snapshot tests;
* :mod:`.spark_functions`: process functions sent to Spark's workers by value;
* :mod:`.widgets`: walking a dashboard's widget tree.
"""

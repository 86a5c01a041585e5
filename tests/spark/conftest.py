"""One SparkSession for the whole test session (starting a JVM costs ~10 s).

Spark tests never skip: without Java or pyspark they fail with the reason, so a
CI machine that lost its JDK shows up red instead of quietly green.
"""

from __future__ import annotations

import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    if shutil.which("java") is None:
        pytest.fail("the Spark tests need Java 17 on PATH (java not found); they are never skipped", pytrace=False)
    from explorer.spark import get_spark, stop_spark

    session = get_spark()
    yield session
    stop_spark()

"""The code blocks of README.md and docs/*.md tagged ``spark`` run as written, on the suite's SparkSession.

Per page, the ``spark`` blocks in order in one namespace of their own (each such block carries its
imports), in the same scratch folder as the other doc blocks (``tests/support/docs.py``). Never
skipped: without Java the ``spark`` fixture fails with the reason.
"""

from __future__ import annotations

import pytest

from tests.support.docs import DOCS, README, code_blocks, doc_pages, make_demo_dir, run_blocks

pytestmark = pytest.mark.spark

SPARK_PAGES = [p for p in [README, *doc_pages()] if any("spark" in b.tags for b in code_blocks(p))]


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    return make_demo_dir(tmp_path_factory.mktemp("docs-spark"))


@pytest.mark.parametrize("page", SPARK_PAGES, ids=lambda p: p.name if p.parent == DOCS else "README.md")
def test_every_spark_doc_block_runs(page, spark, demo_dir, monkeypatch, capsys):
    blocks = [b for b in code_blocks(page) if "spark" in b.tags]
    monkeypatch.chdir(demo_dir)
    assert run_blocks(blocks, {"__name__": f"spark:{page.name}"}, lambda: capsys.readouterr().err) >= len(blocks)

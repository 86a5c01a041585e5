"""Every code block of README.md and of every docs/*.md page runs as written, so the documentation cannot drift.

How blocks are run, and what their fence tags mean: :mod:`tests.support.docs`. In short: python
blocks in order, one namespace per page; ``state-explorer`` lines of bash blocks through
:func:`explorer.cli.main`; ``make`` lines are not run (they run the demo and this suite); blocks
tagged ``s3`` read a local S3 server started here; blocks tagged ``spark`` run in the Spark suite
(``tests/spark/test_doc_blocks.py``). Everything runs in a scratch folder laid out as the
repository is after ``make demo``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.cli import main, run_pipeline
from tests.support.docs import README, ROOT, S3_BUCKET, bash_commands, code_blocks, doc_pages, make_demo_dir, run_blocks

BLOCKS = code_blocks(README)
PAGES = doc_pages()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """A scratch folder with out/url_counts/heap/{checkpoints,savepoint} made as ``make demo`` makes them."""
    return make_demo_dir(tmp_path_factory.mktemp("readme"))


@pytest.fixture(scope="module")
def s3_out(demo_dir, tmp_path_factory):
    """A local S3 server (moto) holding the scratch folder's ``out/`` under ``s3://bucket/``, and its settings."""
    from tests.support.s3 import S3Server  # moto[server] and boto3: test dependencies, never skipped

    server = S3Server()
    server.upload(demo_dir / "out", S3_BUCKET, "out")
    env = dict(server.env(), STATE_EXPLORER_CACHE_DIR=str(tmp_path_factory.mktemp("s3-cache")))
    yield env
    server.stop()


def test_the_readme_has_the_blocks_it_documents():
    langs = [b.lang for b in BLOCKS]
    assert langs.count("python") >= 3 and langs.count("bash") >= 2
    assert not any(b.tags for b in BLOCKS), "the front door's blocks run everywhere, without Spark or S3"
    bash = "\n".join(b.code for b in BLOCKS if b.lang == "bash")
    assert "make demo" in bash and "make test" in bash


def test_every_readme_code_block_runs(demo_dir, monkeypatch, capsys):
    monkeypatch.chdir(demo_dir)
    ran = run_blocks(BLOCKS, {"__name__": "readme"}, lambda: capsys.readouterr().err)
    assert ran >= 5


def test_the_docs_have_pages_and_an_index():
    names = {p.name for p in PAGES}
    assert "README.md" in names and len(names) >= 8
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        if page.name != "README.md":
            assert f"({page.name})" in index, f"docs/README.md does not link {page.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_doc_code_block_runs(page, demo_dir, request, monkeypatch, capsys):
    """The page's blocks in order in one namespace, but for those tagged ``spark`` (the Spark suite runs them)."""
    blocks = [b for b in code_blocks(page) if "spark" not in b.tags]
    monkeypatch.chdir(demo_dir)
    if any("s3" in b.tags for b in blocks):
        for key, value in request.getfixturevalue("s3_out").items():
            monkeypatch.setenv(key, value)
    ran = run_blocks(blocks, {"__name__": f"docs/{page.name}"}, lambda: capsys.readouterr().err)
    code = [b for b in blocks if b.lang != "text"]
    assert ran >= len(code), f"{page.name}: a code block ran nothing"


def test_the_rescale_example_restores_live_state(demo_dir, monkeypatch, capsys):
    """The savepoint docs/cli.md rescales from holds entries, and the restored run reads the rest of
    the input (a savepoint taken at the end of a finished run would hold closed sessions only)."""
    monkeypatch.chdir(demo_dir)
    lines = [argv for page in [README, *PAGES] for b in code_blocks(page) if b.lang == "bash"
             for argv in bash_commands(b)]
    argv = next(a for a in lines if a[1:3] == ["savepoint", "sessions"])
    sp = Path(argv[argv.index("-o") + 1])
    shutil.rmtree(sp, ignore_errors=True)  # the page's own run made it: `savepoint -o` refuses a non-empty folder
    assert main(argv[1:]) == 0, capsys.readouterr().err
    assert explorer.open(sp).keyed_state()["key"].nunique() > 0
    rargv = next(a for a in lines if "--from-savepoint" in a)
    p = int(rargv[rargv.index("-p") + 1])
    summary = run_pipeline("sessions", records=None, parallelism=p, backend="heap", out=None,
                           from_savepoint=sp, quiet=True)
    assert sum(summary["outputs"].values()) > 0


def test_every_spark_block_is_run_by_the_spark_suite():
    """Blocks tagged spark are not skipped: tests/spark/test_doc_blocks.py runs each page that has them."""
    from tests.spark.test_doc_blocks import SPARK_PAGES

    assert SPARK_PAGES == [p for p in [README, *PAGES] if any("spark" in b.tags for b in code_blocks(p))]
    assert SPARK_PAGES, "docs/spark.md's examples are tagged spark"

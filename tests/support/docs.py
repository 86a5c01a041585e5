"""The code blocks of README.md and docs/*.md, and how the tests run them as written.

A fence's info string is a language and optional tags: ```` ```python ````, ```` ```bash ````,
```` ```python spark ````, ```` ```bash s3 ````, ```` ```text ````.

* ``python``: run in order, one namespace per page.
* ``bash``: each ``state-explorer`` line runs through :func:`explorer.cli.main`; ``make`` lines
  (``make demo``, ``make test``, ...) are the commands that run the demo and this suite themselves,
  and are the only lines not run. Any other command is an error.
* ``text``: not code (a folder tree, a diagram); nothing to run.
* tag ``s3``: the block reads ``s3://bucket/...``; the test serves the scratch folder's ``out/`` there
  from a local S3-compatible server (moto, as the storage tests do) and points the AWS settings at it.
* tag ``spark``: the block needs Java and a SparkSession; it runs in the Spark suite
  (``tests/spark/test_doc_blocks.py``, marked ``spark``, run in CI), never skipped.

All blocks run in a scratch folder laid out like the repository after ``make demo``:
``out/url_counts/heap/`` made by the same call on fewer records, and ``sample_data/`` linked in.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

LANGS = ("python", "bash", "text")
TAGS = ("spark", "s3")
#: lines of bash blocks that are not run, by their first word
NOT_RUN = ("make",)
#: the bucket s3-tagged blocks read; the scratch folder's out/ is uploaded to s3://bucket/
S3_BUCKET = "bucket"


@dataclass(frozen=True)
class Block:
    page: str
    index: int
    lang: str
    tags: frozenset[str]
    code: str

    @property
    def where(self) -> str:
        return f"{self.page} block {self.index}"


def code_blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order; an unknown language or tag is an error, never skipped."""
    page = path.relative_to(ROOT).as_posix()
    blocks = []
    for i, m in enumerate(re.finditer(r"^```([^\n]*)\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S)):
        lang, *tags = m.group(1).split() or [""]
        if lang not in LANGS or not set(tags) <= set(TAGS):
            raise ValueError(f"{page} block {i}: fence ```{m.group(1)} - expected one of {LANGS} "
                             f"with tags from {TAGS}")
        blocks.append(Block(page, i, lang, frozenset(tags), m.group(2)))
    return blocks


def doc_pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def make_demo_dir(root: Path) -> Path:
    """``root`` holding ``out/url_counts/heap/{checkpoints,savepoint}`` as ``make demo`` makes them, and ``sample_data``."""
    from explorer.cli import run_pipeline

    target = root / "out" / "url_counts" / "heap"
    records = 20_000
    run_pipeline("url_counts", records=records, parallelism=2, backend="heap", out=target,
                 checkpoint_every=records // 4, savepoint_to=target / "savepoint", savepoint_at=0.8, quiet=True)
    (root / "sample_data").symlink_to(ROOT / "sample_data", target_is_directory=True)
    return root


def bash_commands(block: Block) -> list[list[str]]:
    """The argv of each line of a bash block that is run (``state-explorer`` lines)."""
    out = []
    for line in block.code.splitlines():
        command = line.split("#", 1)[0].strip()
        if not command or command.split()[0] in NOT_RUN:
            continue
        argv = shlex.split(command)
        assert argv[0] == "state-explorer", f"{block.where}: {line!r} is no state-explorer command"
        out.append(argv)
    return out


def run_blocks(blocks: list[Block], namespace: dict[str, Any], errors: Callable[[], str]) -> int:
    """Run ``blocks`` in order in ``namespace``; the number of python blocks and commands run."""
    from explorer.cli import main

    ran = 0
    for block in blocks:
        if block.lang == "python":
            exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - our own docs
            ran += 1
        elif block.lang == "bash":
            for argv in bash_commands(block):
                assert main(argv[1:]) == 0, f"{block.where}: {shlex.join(argv)!r} failed: {errors()}"
                ran += 1
    return ran

"""Every code block of README.md runs as written, so the documentation cannot drift.

Python blocks run in order in one namespace; ``bash`` blocks run their ``state-explorer``
lines through :func:`explorer.cli.main`. Both run in a scratch folder holding what
``make demo`` leaves under ``out/url_counts/heap/`` (made here with the same call, on
fewer records). ``make`` lines (``make demo``, ``make test``) are the commands that run
this suite and the demo themselves, and are the only lines not run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

import explorer
from explorer.cli import main, run_pipeline

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: lines of bash blocks that are not run here, by their first word
NOT_RUN = ("make",)


def code_blocks(text: str) -> list[tuple[str, str]]:
    """``(language, code)`` of every fenced block, in order."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S)]


BLOCKS = code_blocks(README.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """A scratch folder with out/url_counts/heap/{checkpoints,savepoint} made as ``make demo`` makes them."""
    root = tmp_path_factory.mktemp("readme")
    target = root / "out" / "url_counts" / "heap"
    records = 20_000
    run_pipeline("url_counts", records=records, parallelism=2, backend="heap", out=target,
                 checkpoint_every=records // 4, savepoint_to=target / "savepoint", savepoint_at=0.8, quiet=True)
    return root


def test_the_readme_has_the_blocks_it_documents():
    langs = [lang for lang, _ in BLOCKS]
    assert langs.count("python") >= 3 and langs.count("bash") >= 2
    assert all(lang in ("python", "bash", "") for lang in langs)


def test_every_readme_code_block_runs(demo_dir, monkeypatch, capsys):
    monkeypatch.chdir(demo_dir)
    namespace: dict = {"__name__": "readme"}
    ran = 0
    for i, (lang, code) in enumerate(BLOCKS):
        if lang == "python":
            exec(compile(code, f"README.md block {i}", "exec"), namespace)  # noqa: S102 - our own README
            ran += 1
        elif lang == "bash":
            for line in code.splitlines():
                command = line.split("#", 1)[0].strip()
                if not command or command.split()[0] in NOT_RUN:
                    continue
                argv = shlex.split(command)
                assert argv[0] == "state-explorer", f"README block {i}: {line!r} is no state-explorer command"
                assert main(argv[1:]) == 0, f"README block {i}: {line!r} failed: {capsys.readouterr().err}"
                ran += 1
    assert ran >= 8


def test_the_readme_rescale_example_restores_live_state(demo_dir, monkeypatch, capsys):
    """The savepoint the README rescales from holds entries, and the restored run reads the rest of
    the input (a savepoint taken at the end of a finished run would hold closed sessions only)."""
    monkeypatch.chdir(demo_dir)
    bash = "\n".join(code for lang, code in BLOCKS if lang == "bash")
    sp_line = next(line for line in bash.splitlines() if "savepoint sessions" in line)
    argv = shlex.split(sp_line.split("#", 1)[0])
    assert main(argv[1:]) == 0
    sp = Path(argv[argv.index("-o") + 1])
    assert explorer.open(sp).keyed_state()["key"].nunique() > 0
    restore = next(line for line in bash.splitlines() if "--from-savepoint" in line)
    rargv = shlex.split(restore.split("#", 1)[0])
    p = int(rargv[rargv.index("-p") + 1])
    summary = run_pipeline("sessions", records=None, parallelism=p, backend="heap", out=None,
                           from_savepoint=sp, quiet=True)
    assert sum(summary["outputs"].values()) > 0

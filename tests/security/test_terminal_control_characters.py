"""Finding 5: keys and names reached the terminal raw in ``state-explorer inspect``: escape sequences retitled the
window, cleared the screen and planted hidden hyperlinks (OSC 8). Every CLI output of snapshot strings shows
control characters (C0 but newline, DEL, C1) and bidi overrides visibly, as ``\\x1b`` or ``\\u202e``."""

from __future__ import annotations

import re

import pytest

from explorer.cli import main
from explorer.escape import terminal_text
from tests.security.crafted import HOSTILE_TERMINAL, hostile_job

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    # the checkpoint folder's name is hostile too (it is printed by ls and inspect as a path)
    return hostile_job(tmp_path_factory.mktemp("hostile-terminal"), checkpoints="chk\x1b]0;pwned\x07dir")


def _run(capsys, *argv) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert not CONTROL.search(out + err), [m.group() for m in CONTROL.finditer(out + err)][:5]
    return f"{code}\n{out}{err}"


def test_terminal_control_characters(hostile, capsys):
    sp, chk = hostile
    shown = _run(capsys, "inspect", str(sp), "--top", "10")
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in shown and "\\u202eexe.txt" in shown  # the keys are shown, visibly
    shown = _run(capsys, "inspect", str(chk))
    assert "chk\\x1b]0;pwned\\x07dir" in shown
    _run(capsys, "ls", str(chk))
    shown = _run(capsys, "inspect", str(chk / "missing\x1b[2J"))
    assert shown.startswith("2\n") and "\\x1b[2J" in shown  # an error naming the path


def test_terminal_text_shows_each_control_class():
    assert terminal_text("a\x1b[2Jb\x07\x7f\x9b\u202e\u2066\u2069\nz") == "a\\x1b[2Jb\\x07\\x7f\\x9b\\u202e\\u2066\\u2069\nz"
    assert terminal_text("plain naïve ключ") == "plain naïve ключ"

"""Issue 29 (found by the fuzz harness's ``markup-name`` kind): a name in a snapshot holding an ANSI escape
reached ``state-explorer inspect``'s terminal summary raw. Control characters are now shown as ``\\x1b``
where the summary is made (``report.terminal_safe``)."""

import shutil

import explorer
from explorer.report import summary_text

SAMPLE = "sample_data/flink/heap-native-savepoint"
FILE, AT = "0a917e9e-1a1c-4067-849b-494265c0ae1d", 3510  # a name inside a state stream (fuzz seed 7, case 0)
MARKUP = b"<sx-x>\x1b[31m"


def test_an_escape_in_a_state_name_is_shown_not_sent_to_the_terminal(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    data = bytearray((snap / FILE).read_bytes())
    data[AT:AT + len(MARKUP)] = MARKUP
    (snap / FILE).write_bytes(bytes(data))
    text = summary_text(explorer.open(snap))
    assert "\x1b" not in text
    assert "\\x1b[31m" in text  # still visible, escaped

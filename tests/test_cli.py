"""``state-explorer inspect`` and ``state-explorer report`` on planted snapshots."""

import re

import pytest
from plotly.offline import get_plotlyjs

from explorer.cli import main

from tests.support.fixtures import PLANT_HOT_KEYS


def test_inspect_prints_the_summary(planted_job, capsys):
    assert main(["inspect", str(planted_job.savepoint)]) == 0
    out = capsys.readouterr().out
    assert "engine-savepoint" in out and "operators:" in out and "states:" in out
    assert "balance across subtasks" in out and "best parallelisms" in out
    hot = out[out.index("hottest keys by state bytes"):]
    first_two = re.findall(r"^\s+[12]\s+planted\s+(\S+)", hot, re.M)[:2]
    assert set(first_two) == set(PLANT_HOT_KEYS)
    assert "hottest keys by traffic" in out
    assert "states without TTL" in out and "planted/events" in out


def test_inspect_reports_expired_state(planted_ttl, capsys):
    assert main(["inspect", str(planted_ttl.savepoint), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"planted/last_seen: [1-9]\d* of 202 entries", out)


def test_inspect_of_a_missing_path_fails_cleanly(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err


def test_report_is_self_contained_html(planted_job, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out)]) == 0
    assert "report written to" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    js = get_plotlyjs()
    assert page.count(js[:500]) == 1  # plotly.js inlined exactly once
    # nothing fetched from the network (the library itself names a CDN only as the geo maps' default)
    assert page.count("cdn.plot.ly") == js.count("cdn.plot.ly") and "<script src=" not in page
    n_figs = page.count("Plotly.newPlot(")
    assert n_figs >= 7
    for section in ("Key groups of planted", "Rescale what-if for planted", "Hot keys of planted", "TTL expiry"):
        assert section in page
    assert "hot-a" in page and "hot-b" in page


def test_report_of_a_checkpoint_directory_adds_history_and_diff(planted_job, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.checkpoint_dir), "-o", str(out), "--parallelisms", "1,2,4"]) == 0
    page = out.read_text()
    assert "Checkpoint history of" in page and "Diff from chk-" in page
    assert page.count(get_plotlyjs()[:500]) == 1


@pytest.mark.parametrize("cmd", [["list"], ["inspect", "--help"]])
def test_existing_commands_still_work(cmd, capsys):
    try:
        assert main(cmd) == 0
    except SystemExit as exc:  # --help exits 0
        assert exc.code == 0

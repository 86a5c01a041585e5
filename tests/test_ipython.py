"""``%load_ext explorer``: the ``%explore`` magic and the notebook display of snapshots."""

import sys
import types

import pytest
from IPython.core.interactiveshell import InteractiveShell

import explorer
from explorer import ipython as ext


@pytest.fixture
def ip():
    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("explorer")
    yield shell
    shell.extension_manager.unload_extension("explorer")


def test_explore_prints_the_summary_without_widgets(ip, planted_job, capsys, monkeypatch):
    monkeypatch.setattr(ext, "find_dashboard", lambda: None)
    # issue 18: the summary was followed by the returned snapshot's own display (shown twice)
    assert ip.run_line_magic("explore", str(planted_job.savepoint)) is None
    out = capsys.readouterr().out
    assert "hottest keys" in out and "hot-a" in out


def test_explore_returns_the_dashboard_and_displays_nothing_itself(ip, planted_job, monkeypatch):
    """``%explore PATH`` showed the dashboard and then the returned snapshot: everything twice.

    Now the magic displays nothing itself and returns the dashboard, which the notebook shows
    once as the cell's result.
    """
    shown = []

    class View:
        def __init__(self, snap):
            self.snapshot = snap

    fake = types.ModuleType("widgets")
    fake.explore = View
    monkeypatch.setitem(sys.modules, "widgets", fake)
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(a))
    assert ext.find_dashboard() is View
    view = ip.run_line_magic("explore", str(planted_job.savepoint))
    assert isinstance(view, View) and view.snapshot.path == explorer.open(planted_job.savepoint).path
    assert shown == []
    data, _ = ip.display_formatter.format(view)
    assert "engine-savepoint" not in data.get("text/html", "")  # no snapshot display beside the dashboard


def test_explore_reports_errors_and_usage(ip, tmp_path, capsys):
    assert ip.run_line_magic("explore", str(tmp_path / "nope")) is None
    assert "no such file or directory" in capsys.readouterr().out
    assert ip.run_line_magic("explore", "") is None
    assert "usage: %explore PATH" in capsys.readouterr().out


def test_snapshot_html_display(ip, planted_job):
    snap = explorer.open(planted_job.savepoint)
    html = snap._repr_html_()
    assert "engine-savepoint" in html and "<table" in html and "last_seen" in html
    data, _ = ip.display_formatter.format(snap)
    assert data["text/html"] == html


def test_find_dashboard_without_the_package(monkeypatch):
    monkeypatch.setattr(ext, "DASHBOARD", ("no_such_widgets_package_xyz", "explore"))
    assert ext.find_dashboard() is None


def test_extension_entry_point_is_exported():
    assert callable(explorer.load_ipython_extension)

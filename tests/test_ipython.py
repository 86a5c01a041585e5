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
    snap = ip.run_line_magic("explore", str(planted_job.savepoint))
    assert isinstance(snap, explorer.Snapshot)
    out = capsys.readouterr().out
    assert "hottest keys by state bytes" in out and "hot-a" in out


def test_explore_shows_the_dashboard_when_widgets_exist(ip, planted_job, monkeypatch):
    shown = []

    class View:
        def __init__(self, snap):
            self.snap = snap

    fake = types.ModuleType("widgets")
    fake.explore = View
    monkeypatch.setitem(sys.modules, "widgets", fake)
    assert ext.find_dashboard() is View
    snap = ext.explore(str(planted_job.savepoint), display=shown.append)
    assert len(shown) == 1 and isinstance(shown[0], View) and shown[0].snap.path == snap.path


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

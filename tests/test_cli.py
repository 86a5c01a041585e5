"""``state-explorer inspect`` and ``state-explorer report`` on planted snapshots."""

import re
from pathlib import Path

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


def test_report_loads_one_shared_plotly_copy(planted_job, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out)]) == 0
    assert "report written to" in capsys.readouterr().out
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>")
    js = get_plotlyjs()
    assert page.count(js[:500]) == 0  # not inlined: loaded from the one copy beside the report
    scripts = re.findall(r"<script[^>]*src='([^']+)'", page)
    assert len(scripts) == 1 and scripts[0].startswith("plotly-") and (out.parent / scripts[0]).read_text() == js
    assert "cdn.plot.ly" not in page and "http" not in scripts[0]
    assert len(page.encode()) < 1_000_000
    n_figs = page.count("Plotly.newPlot(")
    assert n_figs >= 7
    for section in ("Key groups of planted", "Rescale what-if for planted", "Hot keys of planted", "TTL expiry"):
        assert section in page
    assert "hot-a" in page and "hot-b" in page
    # a second report in the folder reuses the copy
    assert main(["report", str(planted_job.savepoint), "-o", str(out.parent / "again.html")]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["report.html", "again.html", scripts[0]])


def test_report_self_contained_inlines_plotly_once(planted_job, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out), "--self-contained"]) == 0
    page = out.read_text()
    js = get_plotlyjs()
    assert page.count(js[:500]) == 1
    assert page.count("cdn.plot.ly") == js.count("cdn.plot.ly") and "<script src=" not in page


def _cells(page):
    return re.findall(r"<td[^>]*>([^<]*)</td>", page)


def test_report_is_a_page_with_summary_contents_and_formatted_numbers(planted_job, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out)]) == 0
    page = out.read_text()
    nav = page[page.index("<nav>"):page.index("</nav>")]
    anchors = re.findall(r"href='#(s\d+)'", nav)
    assert len(anchors) >= 5 and all(f"<section id='{a}'>" in page for a in anchors)
    assert "Summary" in nav and "state entries" in page and "traffic data" in page
    cells = _cells(page)
    assert cells
    assert not [c for c in cells if re.fullmatch(r"-?[\d,]+\.000", c)]  # counts without decimals
    assert not [c for c in cells if c in ("None", "nan", "NaN", "NaT", "<NA>")]  # nulls shown as a dash
    assert "max-width:1200px" in page and "overflow-x:auto" in page  # fits the window, tables scroll
    assert "overload: the load of the key" in page  # the ratio explained where it appears


def test_report_of_a_checkpoint_directory_adds_history_and_diff(planted_job, tmp_path):
    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.checkpoint_dir), "-o", str(out), "--parallelisms", "1,2,4"]) == 0
    page = out.read_text()
    assert "Checkpoint history of" in page and "Diff from chk-" in page
    assert len(re.findall(r"<script[^>]*src='plotly-", page)) == 1


SAMPLES = Path(__file__).resolve().parents[1] / "sample_data"
EVERY_FORMAT = [
    "url_counts/savepoint-heap", "url_counts/savepoint-rocksdb",
    "flink/heap-canonical-savepoint", "flink/heap-canonical-savepoint/_metadata",
    "flink/rocksdb-incremental-checkpoint", "flink/rocksdb-native-savepoint", "flink/sql-groupby-savepoint",
    "flink/production/plain-rocksdb-canonical-savepoint",
]


@pytest.mark.parametrize("rel", EVERY_FORMAT)
def test_report_on_every_format(rel, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(SAMPLES / rel), "-o", str(out)]) == 0, capsys.readouterr().err
    page = out.read_text()
    assert "Key groups of" in page and "Hot keys of" in page
    assert page.count("Plotly.newPlot(") >= 5
    if rel.startswith("flink"):
        assert "no traffic data" in page
        assert "state entries</td><td class=''>0<" not in page


@pytest.mark.parametrize("argv, says", [
    (["report", "PATH", "--parallelisms", "2,x"], "--parallelisms"),
    (["report", "PATH", "--parallelisms", "0,2"], "--parallelisms"),
    (["inspect", "PATH", "--top", "0"], "--top"),
    (["inspect", "PATH", "--top", "-3"], "--top"),
    (["inspect", "PATH", "--ttl", "last_seen"], "--ttl"),
    (["inspect", "PATH", "--ttl", "last_seen=soon"], "--ttl"),
    (["run", "url_counts", "-p", "two"], "--parallelism"),
])
def test_bad_options_are_usage_errors_not_tracebacks(argv, says, planted_job, capsys):
    argv = [str(planted_job.savepoint) if a == "PATH" else a for a in argv]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and says in err and "Traceback" not in err


def test_inspect_flink_ttl_states_are_not_listed_as_without_ttl(capsys):
    path = SAMPLES / "flink" / "heap-canonical-savepoint"
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    no_ttl = next(line for line in out.splitlines() if line.startswith("states without TTL"))
    for name in ("last_seen", "per_category", "recent_amounts"):  # Ttl<...> values: TTL set, duration not stored
        assert name not in no_ttl
    assert "user-state/stats" in no_ttl
    assert "hint:" in out and "ttl=" in out and "--ttl last_seen=1h" in out


def test_inspect_takes_flink_ttls_and_metadata_paths(capsys):
    path = SAMPLES / "flink" / "heap-canonical-savepoint" / "_metadata"
    assert main(["inspect", str(path), "--ttl", "last_seen=1h", "--ttl", "per_category=2d",
                 "--ttl", "recent_amounts=1800000"]) == 0
    out = capsys.readouterr().out
    assert "hint:" not in out
    assert re.search(r"last_seen .*\b1 h\b", out) and re.search(r"per_category .*\b2 d\b", out)
    assert "created unknown" in out  # Flink stores no time; never the file's modification time


def test_ttl_option_is_refused_for_snapshots_that_store_their_ttls(planted_job, capsys):
    assert main(["inspect", str(planted_job.savepoint), "--ttl", "x=1h"]) == 2
    assert "apply to Apache Flink snapshots" in capsys.readouterr().err


@pytest.mark.parametrize("cmd", [["list"], ["inspect", "--help"]])
def test_existing_commands_still_work(cmd, capsys):
    try:
        assert main(cmd) == 0
    except SystemExit as exc:  # --help exits 0
        assert exc.code == 0


def test_demo_summary_describes_the_savepoint_it_wrote(tmp_path, capsys):
    """make demo takes its savepoint at 80 % of the input: the keys and entries it prints are the
    savepoint's (what a user then opens), not the state at the end of the run."""
    import explorer
    from explorer.cli import run_pipeline

    target = tmp_path / "url_counts"
    s = run_pipeline("url_counts", records=6000, parallelism=2, backend="heap", out=target, checkpoint_every=1500,
                     savepoint_to=target / "savepoint", savepoint_at=0.5)
    rows = explorer.open(target / "savepoint").keyed_state(columns=["kind", "key"])
    rows = rows[~rows["kind"].isin(["event_timer", "processing_timer"])]
    assert s["described"] == "savepoint"
    assert s["keys"] == rows["key"].nunique() and s["state_entries"] == len(rows)
    assert "entries in the savepoint" in capsys.readouterr().out


def test_verify_prints_every_file_and_exits_0_when_whole(capsys):
    root = Path(__file__).resolve().parents[1] / "sample_data"
    assert main(["verify", str(root / "flink" / "rocksdb-incremental-checkpoint")]) == 0
    out = capsys.readouterr().out
    assert ": OK: " in out.splitlines()[0] and "  ok       _metadata:" in out


def test_verify_exits_1_naming_the_damaged_file(tmp_path, capsys):
    import shutil

    snap = tmp_path / "sp"
    shutil.copytree(Path(__file__).resolve().parents[1] / "sample_data" / "sessions" / "savepoint-heap", snap)
    f = sorted(snap.rglob("*.parquet"))[0]
    f.unlink()
    (snap / "x\x1b[31m").write_text("")  # (not listed: never looked at)
    assert main(["verify", str(snap), "--problems"]) == 1
    out = capsys.readouterr().out
    assert "NOT OK" in out and f"missing  {f.relative_to(snap).as_posix()}" in out
    assert len(out.splitlines()) == 2 and "\x1b" not in out


def test_verify_of_a_missing_path_fails_cleanly(tmp_path, capsys):
    assert main(["verify", str(tmp_path / "nope")]) == 2
    assert "no such file or directory" in capsys.readouterr().err

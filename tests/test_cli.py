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
    assert main(["report", str(planted_job.savepoint), "-o", str(out), "--plotly=file"]) == 0
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
    assert n_figs >= 6
    # the two planted hot keys carry 250 records each: a tie, named, and no key salted (issue 30)
    assert "No salting what-if: no hottest key: 2 keys tie at 250 records" in page
    for section in ("Key groups of planted", "Rescale what-if for planted", "Hot keys of planted", "TTL expiry"):
        assert section in page
    assert "hot-a" in page and "hot-b" in page
    # a second report in the folder reuses the copy
    assert main(["report", str(planted_job.savepoint), "-o", str(out.parent / "again.html"), "--plotly", "file"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == sorted(["report.html", "again.html", scripts[0]])


@pytest.mark.parametrize("flag", [[], ["--self-contained"], ["--plotly=inline"]])
def test_report_is_self_contained_by_default_plotly_inlined_once(planted_job, tmp_path, capsys, flag):
    """`report --help` says self-contained: by default the page carries plotly.js (once, not per figure) and
    nothing is written beside it (issue 30: it wrote a separate plotly file)."""
    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out), *flag]) == 0
    assert "self-contained" in capsys.readouterr().out
    page = out.read_text()
    js = get_plotlyjs()
    assert page.count(js[:500]) == 1
    assert page.count("cdn.plot.ly") == js.count("cdn.plot.ly") and "<script src=" not in page
    assert not re.findall(r"<script[^>]*src=", page)
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]
    assert len(page.encode()) < len(js.encode()) + 1_000_000  # plotly.js once, and the report's own small part


def test_report_can_load_plotly_from_its_cdn(planted_job, tmp_path):
    from plotly.offline import get_plotlyjs_version

    out = tmp_path / "report.html"
    assert main(["report", str(planted_job.savepoint), "-o", str(out), "--plotly=cdn"]) == 0
    page = out.read_text()
    assert re.findall(r"<script[^>]*src='([^']+)'", page) == [
        f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"]
    assert len(page.encode()) < 1_000_000 and [p.name for p in tmp_path.iterdir()] == ["report.html"]


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
    assert main(["report", str(planted_job.checkpoint_dir), "-o", str(out), "--parallelisms", "1,2,4",
                 "--plotly=file"]) == 0
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
    out = capsys.readouterr().out
    assert "entries in the savepoint" in out and "distinct keys" in out
    # one key hot in two operators is named with each operator, not listed twice alike (issue 30)
    assert re.search(r"hottest keys in the savepoint: \S+ in url-[\w-]+ \([\d,]+\)", out), out


HEAVY = ("pandas", "pyarrow", "numba", "plotly", "pyspark")


@pytest.mark.parametrize("code", ["import explorer.cli; explorer.cli.build_parser()", "import explorer"])
def test_the_command_line_and_import_explorer_load_no_heavy_dependency(code):
    """`state-explorer --help` and usage errors start without pandas, pyarrow, numba or plotly (issue 30):
    the commands import them when they run, and `import explorer` loads its heavy names on first use."""
    import subprocess
    import sys

    probe = f"import sys; {code}; print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1], check=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_lazy_names_of_explorer_are_listed_and_load_on_use():
    import explorer

    assert set(explorer.__all__) <= set(dir(explorer))
    assert explorer.open is explorer.snapshot.open and explorer.list.__name__ == "list_snapshots"


@pytest.mark.parametrize("text, ms", [("86400000", 86_400_000), ("1h", 3_600_000), ("30min", 1_800_000),
                                      ("2d", 172_800_000), ("1h30min", 5_400_000), ("1.5h", 5_400_000),
                                      ("90s", 90_000), ("250ms", 250), ("1 w", 604_800_000)])
def test_ttl_durations_parse_as_pandas_would(text, ms):
    import pandas as pd

    from explorer.cli import parse_duration

    assert parse_duration(text).total_seconds() * 1000 == ms == pd.Timedelta(text if not text.isdigit() else
                                                                              int(text), unit=None if not
                                                                              text.isdigit() else "ms") / pd.Timedelta(1, "ms")


def test_a_ttl_for_a_state_the_snapshot_does_not_hold_is_a_usage_error(capsys):
    path = SAMPLES / "flink" / "heap-canonical-savepoint"
    assert main(["inspect", str(path), "--ttl", "nosuch=1h", "--ttl", "last_seen=1h"]) == 2
    err = capsys.readouterr().err
    assert "usage: state-explorer inspect" in err and "'nosuch'" in err
    assert "last_seen" in err and "per_category" in err and "Traceback" not in err


def test_report_into_a_folder_is_named_after_the_snapshot(tmp_path, capsys):
    folder = tmp_path / "rep"
    folder.mkdir()
    assert main(["report", str(SAMPLES / "url_counts" / "checkpoints"), "-o", str(folder)]) == 0
    assert (folder / "url_counts-checkpoints-chk-5.html").read_text().startswith("<!DOCTYPE html>")
    assert main(["report", str(SAMPLES / "flink" / "heap-canonical-savepoint" / "_metadata"), "-o",
                 str(tmp_path / "new") + "/"]) == 0
    assert (tmp_path / "new" / "heap-canonical-savepoint.html").exists()
    assert "report written to" in capsys.readouterr().out


def test_report_names_a_tie_at_the_top_instead_of_failing(tmp_path, capsys):
    """The PyFlink savepoint's two largest keys (Rows) hold 567 bytes each: no hottest key to salt, and the
    report says so; it failed before with "no state for the keys ['f0', 'f1']" (a Row taken apart)."""
    path = SAMPLES / "flink" / "production" / "pyflink-heap-canonical-savepoint"
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    assert "No salting what-if: no hottest key: 2 keys tie at 567 bytes" in (tmp_path / "r.html").read_text()


def test_report_salts_the_hottest_key_that_holds_state(tmp_path, capsys):
    """By traffic the sketch's hottest key may hold no state any more (a session that closed): the
    what-if takes the hottest key that holds state rather than failing the report."""
    import explorer
    from explorer.analysis import key_stats
    from explorer.cli import run_pipeline

    target = tmp_path / "sessions"
    run_pipeline("sessions", records=6000, parallelism=2, backend="heap", out=target, checkpoint_every=1500,
                 quiet=True)
    # the newest checkpoint that holds sessions (the last may hold none: every session closed at the end)
    folder = next(f for f in sorted((target / "checkpoints").glob("chk-*"), key=lambda f: -int(f.name[4:]))
                  if len(explorer.open(f).keyed_state(operator="sessions")))
    chk = explorer.open(folder)
    hot = chk.hot_keys(5, by="traffic", operator="sessions")
    holding = set(key_stats(chk, operator="sessions")["key"])
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    salted = re.search(r"Salting the hottest key holding state \(([^)]*)\)", page)
    assert salted or "No salting what-if: no hottest key" in page
    if salted:  # a key with state, whatever the sketch ranked first (which may have closed its session)
        assert salted.group(1) in {str(k) for k in holding}
    assert len(hot)


def test_ls_says_which_time_it_shows(capsys):
    assert main(["ls", str(SAMPLES / "flink" / "heap-unaligned-checkpoint")]) == 0
    out = capsys.readouterr().out
    header = out.splitlines()[0]
    assert "time (UTC)" in header and "time of" in header
    assert "file mtime" in out and "'snapshot' is when the snapshot was taken" in out
    assert main(["ls", str(SAMPLES / "url_counts" / "checkpoints")]) == 0
    assert " snapshot " in capsys.readouterr().out.splitlines()[1]


def test_a_warning_is_a_one_line_note_not_a_source_line(capsys):
    """A checkpoint directory whose newest chk-N is incomplete: the note, without Python's source line."""
    assert main(["inspect", str(SAMPLES / "flink" / "heap-unaligned-checkpoint")]) == 0
    err = capsys.readouterr().err
    assert err.startswith("state-explorer: note: ") and "passed over newer chk-2" in err
    assert "UserWarning" not in err and "return " not in err and len(err.strip().splitlines()) == 1


def test_wording_of_articles_sizes_and_missing_metadata():
    import pandas as pd

    import explorer
    from explorer.errors import AnalysisError
    from explorer.storage.sizes import format_size

    assert format_size(1024) == "1.0 KB" and format_size(512) == "512 B" and format_size(2 << 30) == "2.0 GB"
    snap = explorer.open(SAMPLES / "url_counts" / "savepoint-heap")
    with pytest.raises(AnalysisError, match=r"an engine-savepoint snapshot"):
        explorer.changes(snap)
    small = explorer.open(SAMPLES / "url_counts" / "savepoint-heap", memory_budget="1KB")
    with pytest.raises(AnalysisError, match=r"memory budget of 1\.0 KB"):
        small.keyed_state()
    for frame in (snap.states, snap.subtasks, explorer.open(SAMPLES / "flink" / "heap-canonical-savepoint").states):
        assert not frame.map(lambda v: v is None).any().any()
    assert str(snap.subtasks["key_group_start"].dtype) == "Int64" and str(snap.states["ttl_ms"].dtype) == "Int64"
    assert pd.isna(snap.subtasks["key_group_start"]).any()  # operators without keyed state: no range




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

"""The State Processor API peer of the benchmarks (benchmarks/_spa.py): where it reads from, and its
rows when no jar is given. A real run of Flink's API needs its jar (FLINK_SPA_JAR: Maven Central only)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from benchmarks import _spa

ROOT = Path(__file__).resolve().parents[1]
INCREMENTAL = ROOT / "sample_data" / "flink" / "rocksdb-incremental-checkpoint"
CANONICAL = ROOT / "sample_data" / "flink" / "heap-canonical-savepoint"


def test_metadata_dir_is_the_savepoint_or_its_checkpoint_folder():
    assert _spa.metadata_dir(CANONICAL) == CANONICAL
    assert _spa.metadata_dir(INCREMENTAL) == INCREMENTAL / "chk-8"


def test_metadata_dir_names_the_folder_without_metadata(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        _spa.metadata_dir(tmp_path)


def test_a_moved_incremental_checkpoint_is_linked_where_flink_wrote_it_and_unlinked_after(tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(INCREMENTAL, moved)
    found = _spa._SHARED.search((moved / "chk-8" / "_metadata").read_bytes())
    original = Path(found.group(1).decode())
    assert not original.exists()  # the folder the fixture job wrote to is gone
    shared = next((moved / "shared").iterdir()).name
    with _spa.where_written(moved):
        assert (original / "shared" / shared).is_file()
        assert original.resolve() == moved.resolve()
    assert not original.exists() and not original.is_symlink()
    assert not original.parent.exists()  # the folders made for the link are removed too


def test_a_savepoint_that_names_no_shared_files_is_left_alone():
    with _spa.where_written(CANONICAL):
        pass


def test_the_peer_row_says_why_it_was_not_run(monkeypatch):
    from benchmarks.bench_flink_reader import _spa_peer

    monkeypatch.delenv(_spa.ENV_VAR, raising=False)
    assert _spa.spa_jar(None) is None
    row = _spa_peer(CANONICAL, "heap canonical savepoint", 1, 1, [], None, None)
    assert row == {"status": "not run: SPA jar not given (--spa-jar or FLINK_SPA_JAR)"}
    monkeypatch.setenv(_spa.ENV_VAR, "/x/spa.jar")
    assert _spa.spa_jar(None) == Path("/x/spa.jar")


def test_a_missing_jar_is_named():
    with pytest.raises(FileNotFoundError, match="no-such.jar"):
        _spa.classpath(Path("/nonexistent/no-such.jar"))


@pytest.mark.skipif(not os.environ.get(_spa.ENV_VAR), reason="Flink's State Processor API jar not given "
                    f"({_spa.ENV_VAR}); it is published only on Maven Central")
def test_flinks_api_reads_as_many_rows_as_the_explorer():
    import explorer

    cp = _spa.classpath(Path(os.environ[_spa.ENV_VAR]))
    got = _spa.run_jvm(cp, "SpaReadBench", [str(CANONICAL), "fixtures", "hashmap"], heap="1g")
    assert got["rows"] == len(explorer.open(CANONICAL).keyed_state())


def test_the_edit_bench_extrapolates_memory_along_its_two_largest_runs():
    from benchmarks.bench_edit import _rss_estimate

    assert _rss_estimate([], 10) is None
    assert _rss_estimate([(100, 50.0)], 300) == 150.0  # one run: in proportion
    # two runs: the line through them (a fixed 100 MB plus 2 MB per MB), not the proportion of the last
    assert _rss_estimate([(50, 200.0), (100, 300.0)], 400) == 900.0
    assert _rss_estimate([(10, 1.0), (50, 200.0), (100, 300.0)], 400) == 900.0

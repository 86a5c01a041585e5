"""The benchmark suite cannot rot: CI runs its tiny smoke version and renders the page.

No timing is asserted here (figures live in benchmarks/RESULTS.md, measured by
``make bench``); these tests check that the benchmarks still run and write the
JSON the renderer reads. The smoke covers the benchmarks that need neither
network nor a peer environment: ``engine`` and ``peers`` (``--smoke`` runs only
our engine and the bare loops; Bytewax's venv, the Flink jars and the javac
compile are set up by the full ``make bench`` only). The other benchmarks have
their own smoke modes and tests, or none (``flink_reader`` needs generated
Flink snapshots).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-smoke")
    results = out / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "--smoke", "--only", "engine", "peers",
                           "--results-dir", str(results)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_engine_smoke_writes_its_figures(smoke_run):
    res = json.loads((smoke_run / "results" / "engine.json").read_text())
    assert res["benchmark"] == "engine"
    for key in ("bare_python_count", "engine_heap_count_final", "engine_heap_count_rolling",
                "engine_rocksdb_count_final", "engine_heap_count_final_checkpoint_1s", "engine_heap_sessions"):
        assert res["results"][key]["value"] > 0
        assert res["results"][key]["unit"] == "records/s"
    assert set(res["ratios"]) >= {"bare_loop_over_engine_count_final", "bare_loop_over_engine_sessions"}
    assert {"date", "load_average", "cpus"} <= set(res["machine"])


@pytest.mark.slow
def test_peers_smoke_runs_our_engine_on_the_shared_input(smoke_run):
    res = json.loads((smoke_run / "results" / "peers.json").read_text())
    assert res["benchmark"] == "peers"
    rows = res["results"]
    for key in ("count/bare_python", "count/engine/heap", "count/engine/rocksdb/checkpoint_1s",
                "sessions/bare_python", "sessions/engine/heap"):
        assert rows[key]["value"] > 0, key
        assert rows[key]["unit"] == "records/s per core"
    for key in ("count/engine/heap", "sessions/engine/heap"):
        assert rows[key]["peak_rss_mb"] > 0
        assert rows[key]["checksum"] == res["records"]  # every input record reached the output
    # the engine and the bare loop agree on the sessions they find
    assert res["checks"]["sessions"]["same_output_records_everywhere"]
    assert res["checks"]["count"]["every_record_accounted"]
    assert "count: bare_python / engine/heap" in res["ratios"]
    assert {"python", "state_explorer"} <= set(res["versions"])
    assert res["machine"]["load_average"] is not None


@pytest.mark.slow
def test_smoke_page_has_headline_and_charts(smoke_run):
    page = (smoke_run / "RESULTS.md").read_text()
    assert "## Headline ratios" in page
    assert "Engine vs bare Python loop" in page
    assert "![" in page and (smoke_run / "charts" / "peers-count.svg").is_file()
    runlog = json.loads((smoke_run / "results" / "_runlog.json").read_text())
    assert runlog["engine"]["status"] == runlog["peers"]["status"] == "ok"


def test_committed_results_render(tmp_path):
    """Whatever JSONs benchmarks/results/ holds (other benchmarks' shapes too) render without an error."""
    from benchmarks.__main__ import load_results
    from benchmarks._render import render

    results = load_results(ROOT / "benchmarks" / "results")
    page = render(results, tmp_path / "charts")
    assert page.startswith("# Benchmark results")
    assert "section renderer failed" not in page
    for name in results:
        assert f"`benchmarks/results/{name}.json`" in page


def _checkpoint_doc(flink: dict | None) -> dict:
    def size(mb: int, full: float, inc: float) -> dict:
        return {"state_mb": mb, "full": {"duration": {"value": full}, "bytes_written": {"value": mb * 1e6}},
                "incremental": {"duration": {"value": inc}, "bytes_written": {"value": mb * 1e4}},
                "speedup_full_over_incremental": {"median": {"value": full / inc}},
                "written_ratio_full_over_incremental_mean": {"value": 100.0},
                "recovery": {"full": {"restore": {"value": full * 2}}, "incremental": {"restore": {"value": inc * 2}}}}

    return {"benchmark": "checkpoints", "machine": {"load_average": [1.0, 1.0, 1.0]},
            "disk_sequential_write": {"with_fsync": {"value": 500.0}, "page_cache": {"value": 900.0}},
            "sizes": [size(10, 0.5, 0.05), size(1000, 40.0, 0.4)], "flink": flink}


def test_checkpoint_page_puts_flink_beside_ours_or_says_why_not(tmp_path):
    from benchmarks._render import render
    from benchmarks.bench_checkpoints import flink_ratios

    doc = _checkpoint_doc(None)
    flink_size = {"state_mb": 1000, "full": {"duration": {"value": 20.0}, "bytes_written": {"value": 1.0e9}},
                  "full_all_sst": {"duration": {"value": 3.0}}, "incremental": {"duration": {"value": 0.2},
                                                                                "bytes_written": {"value": 1e7}},
                  "recovery": {"full": {"restore": {"value": 30.0}}, "full_all_sst": {"restore": {"value": 2.0}},
                               "incremental": {"restore": {"value": 2.0}, "probed_keys_found": 1000},
                               "job_start_without_state": {"value": 0.3}, "probed_keys": 1000}}
    ratios = flink_ratios(doc["sizes"], {"sizes": [flink_size]})
    # only the size Flink measured is compared; Flink's time over ours
    assert set(ratios) == {"1000 MB"}
    assert ratios["1000 MB"]["full checkpoint"] == 0.5 and ratios["1000 MB"]["incremental checkpoint"] == 0.5
    assert ratios["1000 MB"]["recovery from full"] == 0.38

    without = render({"checkpoints": doc}, tmp_path / "a")
    assert "Apache Flink beside it: not measured in this run" in without
    assert "Apache Flink: not measured in this run" in without  # the headline says so too

    doc["flink"] = {"version": "2.3.0", "sizes": [flink_size], "ratios_ours_over_flink": ratios,
                    "not_measured": {"10 MB": "did not finish in 600 s"}}
    page = render({"checkpoints": doc}, tmp_path / "b")
    assert "section renderer failed" not in page
    assert "### Apache Flink 2.3.0 on the same state" in page
    assert "| 1000 MB | 20.0 | 3 | 0.2 |" in page
    assert "- **10 MB**: did not finish in 600 s" in page
    assert "Apache Flink on the same state: incremental 0.2 s median (ours 2x slower)" in page


def test_spark_end_of_input_markers_come_last_and_close_every_session(tmp_path):
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from benchmarks._run_spark import END_KEY, end_of_input_markers
    from explorer.pipelines import sessions
    from explorer.spark_engine.adapter import write_input

    events = [sessions.Event(f"u{i % 3}", 1_000 + 7_000 * i, "view", "") for i in range(9)]
    src = write_input(events, tmp_path / "input", files=3)
    end_of_input_markers(src, max(e.ts for e in events), tmp_path)
    files = sorted(src.glob("*.parquet"), key=lambda f: f.stat().st_mtime)  # the file source's order
    assert len(files) == 5
    tail = [pq.read_table(f).to_pylist() for f in files[-2:]]
    assert [len(t) for t in tail] == [1, 1] and {t[0]["user_id"] for t in tail} == {END_KEY}
    first_marker = tail[0][0]["ts"]
    # the watermark (5 s behind the marker) lies past every session's timer (last event + 30 min)
    assert first_marker - sessions.MAX_OUT_OF_ORDERNESS_MS > max(e.ts for e in events) + sessions.SESSION_GAP_MS
    assert tail[1][0]["ts"] > first_marker
    assert all(r["user_id"] != END_KEY for f in files[:-2] for r in pq.read_table(f).to_pylist())


def test_every_row_of_the_issue_is_listed_measured_or_with_the_reason_it_is_missing():
    from benchmarks._render import coverage

    peers = {"results": {"count/engine/heap": {"records": 10, "load_average_1min_at_start": 1.5},
                         "count/spark/rocksdb/checkpoint_per_microbatch/head": {
                             "records": 5, "system": "spark", "state_read": {"error": "no state folder"}}},
             "not_measured": {"count/bytewax/memory": "stopped with SIGTERM", "flink": "setup failed: no javac"}}
    lines = "\n".join(coverage({"peers": peers, "checkpoints": _checkpoint_doc(None)}))
    assert "| count: our engine, heap | measured | 1.5 |" in lines
    assert "| count: Spark transformWithStateInPandas (a prefix of the input) | measured (first 5 records) |" in lines
    assert "| count: Bytewax | **missing**: stopped with SIGTERM |" in lines
    assert "| count: Apache Flink, hashmap | **missing**: setup failed: no javac |" in lines
    assert "| sessions: our engine, heap | **missing**: not run in the latest peers run |" in lines
    assert "| loading: Spark state data source → pandas | **missing**: no state folder |" in lines
    assert "| checkpoints at 100 MB: ours full vs incremental, recovery | **missing**" in lines
    assert "Apache Flink full vs incremental, recovery | **missing**: Flink not run" in lines
    assert "| interaction: dashboard update latency p50/p95 at 1 M keys | **missing**: no widgets result |" in lines


def test_scale_only_flink_measures_the_flink_pairs_and_keeps_the_engine_entries(tmp_path):
    """``bench_scale --only flink`` on a real (small) Flink savepoint pair: the Flink entry gets its raw read,
    raw scan, the three questions (the diff against the pair's ``-b``) with their peak RSS, and the engine
    entry already in the results file stays, with the figures of its own run."""
    import shutil

    from benchmarks import bench_scale

    cache = tmp_path / "cache"
    src = ROOT / "sample_data/flink/heap-canonical-savepoint"
    for side in ("a", "b"):
        shutil.copytree(src, cache / f"flink-hashmap-{side}")
    engine = {"name": "engine savepoint (canonical Parquet)", "path": ".cache/scale/engine-100", "keys": 100}
    out = tmp_path / "scale.json"
    out.write_text(json.dumps({"local": {"command": "python -m benchmarks.bench_scale", "date": "then",
                                         "budget": "1GB", "machine": {"cpus": 2}, "snapshots": [engine]}}))
    assert bench_scale.main(["--only", "flink", "--cache", str(cache), "--out", str(out), "--budget", "64MB"]) == 0
    local = json.loads(out.read_text())["local"]
    kept, flink = local["snapshots"]
    assert kept["name"] == engine["name"] and kept["run"]["date"] == "then"
    assert flink["path"].endswith("flink-hashmap-a") and flink["raw_read"]["bytes"] == flink["bytes"] > 0
    rows = len(__import__("explorer").open(src).keyed_state())
    assert 0 < flink["raw_scan"]["rows"] <= rows  # (stream entries: a list state's elements are one entry)
    assert set(flink["tasks"]) == {"key_group_distribution", "hot_keys", "diff"}
    for task in flink["tasks"].values():
        assert "error" not in task and task["meets_rss_limit"] is True
    assert 0 < flink["tasks"]["key_group_distribution"]["answer"]["entries"] <= rows
    assert flink["tasks"]["diff"]["answer"]["rows"] == 0  # (the same savepoint twice, unchanged=False)

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

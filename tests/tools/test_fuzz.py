"""A short fixed-seed run of the fuzz harness (tools/fuzz/fuzz.py) in the suite: damaged
snapshots of several formats, each read in a forked child under a memory limit and a timeout."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("state_explorer_fuzz", ROOT / "tools" / "fuzz" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = fuzz  # its dataclasses look their module up
_spec.loader.exec_module(fuzz)


def test_mutations_change_the_bytes_they_say():
    rng = random.Random(3)
    data = bytes(range(256)) * 4
    assert len(fuzz.mutate(data, "truncate", rng)) < len(data)
    assert len(fuzz.mutate(data, "insert", rng)) > len(data)
    flipped = fuzz.mutate(data, "bitflip", rng)
    assert len(flipped) == len(data) and sum(a != b for a, b in zip(flipped, data)) == 1


def test_a_short_fixed_seed_run_finds_no_bug(tmp_path):
    # formats whose checksums need nothing beyond the base install (CRC-32C, SHA-256)
    formats = ["engine-heap", "engine-checkpoints", "flink-heap-snappy", "flink-sql", "spark-hdfs"]
    report = tmp_path / "fuzz.json"
    # In a fresh process, as `make fuzz` runs it: the harness forks one child per case, and a fork of
    # this test process (threads of earlier tests' Spark sessions) may inherit a lock held by another thread.
    code = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz" / "fuzz.py"), "--n", "30", "--seed", "16",
                           "--formats", ",".join(formats), "--timeout", "120", "--report", str(report)],
                          cwd=ROOT, timeout=900).returncode
    result = json.loads(report.read_text())
    assert result["cases"] == 30 and sum(result["totals"].values()) == 30
    assert set(result["counts"]) == set(formats)
    assert result["bugs"] == 0, result["examples"]
    assert code == 0
    assert result["totals"].get("clean-error", 0) > 0  # the damage was noticed, not only missed


def test_reports_of_several_seeds_merge():
    a = {"cases": 2, "seed": 1, "counts": {"x": {"ok-same": 1, "clean-error": 1}}, "examples": {},
         "seconds_per_case": {"value": 0.5, "by_format": {"x": 0.5}}}
    b = {"cases": 3, "seed": 2, "counts": {"x": {"clean-error": 2}, "y": {"crash": 1}},
         "examples": {"crash": [{"format": "y"}]}, "seconds_per_case": {"value": 1.0, "by_format": {"x": 1.0, "y": 1.0}}}
    m = fuzz.merge([a, b])
    assert m["cases"] == 5 and m["totals"] == {"ok-same": 1, "clean-error": 3, "crash": 1} and m["bugs"] == 1
    assert m["examples"]["crash"] == [{"format": "y", "seed": 2}]
    assert m["seconds_per_case"]["value"] == round((0.5 * 2 + 1.0 * 3) / 5, 4)

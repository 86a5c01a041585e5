"""A short fixed-seed run of the fuzz harness (tools/fuzz/fuzz.py) in the suite: damaged
snapshots of several formats, each read in a forked child under a memory limit and a timeout."""

from __future__ import annotations

import importlib.util
import json
import os
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
                           "--formats", ",".join(formats), "--kinds", ",".join(fuzz.BYTE_MUTATIONS),
                           "--timeout", "120", "--report", str(report)],
                          cwd=ROOT, timeout=900).returncode
    result = json.loads(report.read_text())
    assert result["cases"] == 30 and sum(result["totals"].values()) == 30
    assert set(result["counts"]) == set(formats)
    assert result["bugs"] == 0, result["examples"]
    assert code == 0
    assert result["totals"].get("clean-error", 0) > 0  # the damage was noticed, not only missed


def test_hostile_mutations_keep_lengths_and_leave_the_snapshot():
    rng = random.Random(29)
    data = b"\x00\x05" + b"state/0a917e9e-1a1c.bin" + b"\x00name-of-a-state\x00"
    out = fuzz.path_rewrite(data, [b"state/0a917e9e-1a1c.bin"], rng)
    assert len(out) == len(data) and out != data
    path = out[2:2 + len(b"state/0a917e9e-1a1c.bin")]
    assert path.startswith((b"/", b"..")) and path.endswith(b"etc/hostname")
    for length in (3, 7, 14, 15, 16, 17, 40):
        assert len(fuzz._escaping_path(length, rng)) == length
    assert fuzz.markup_name(data, rng).count(fuzz.MARKUP) == 1 and len(fuzz.markup_name(data, rng)) == len(data)
    assert fuzz.path_rewrite(b"no names here", [b"state/x.bin"], rng) == b"no names here"


def test_a_size_bomb_zip_declares_and_inflates_past_the_budget():
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("metadata", "v1\n{}")
    bomb = fuzz.size_bomb(buf.getvalue(), Path("1.zip"), random.Random(1))
    assert len(bomb) < 2 << 20
    with zipfile.ZipFile(io.BytesIO(bomb)) as zf:
        assert zf.getinfo("metadata").file_size > fuzz.BUDGET_MB << 20


def test_a_read_outside_the_snapshot_is_an_outside_read(tmp_path):
    # in a fresh process (the harness forks; see below): a read_all that also opens a file beside the snapshot
    snap, outside = tmp_path / "snap", tmp_path / "secret"
    snap.mkdir()
    (snap / "f").write_bytes(b"x")
    outside.write_bytes(b"y")
    code = f"""
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("fz", {str(ROOT / "tools" / "fuzz" / "fuzz.py")!r})
fz = importlib.util.module_from_spec(spec); sys.modules["fz"] = fz; spec.loader.exec_module(fz)
fz.read_all = lambda path, budget=None, render=False: ((), [Path({str(outside)!r}).read_bytes().decode()])
fz.same_as = lambda a, b: True
t = fz.Target("x", Path({str(snap)!r}), [Path({str(snap / "f")!r})])
print(fz.run_child(t, t.files[0], 60, 3072, "bitflip", fz._allowed_roots(t, Path({str(tmp_path)!r})))[0])
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "outside-read", out.stderr[-2000:]


def test_a_short_run_of_the_hostile_kinds_finds_no_bug(tmp_path):
    formats = ["engine-heap", "engine-checkpoints", "spark-hdfs", "flink-heap-snappy"]
    report = tmp_path / "fuzz.json"
    code = subprocess.run([sys.executable, str(ROOT / "tools" / "fuzz" / "fuzz.py"), "--n", "16", "--seed", "29",
                           "--formats", ",".join(formats), "--kinds", ",".join(fuzz.HOSTILE_MUTATIONS),
                           "--timeout", "120", "--report", str(report)], cwd=ROOT, timeout=900).returncode
    result = json.loads(report.read_text())
    assert result["cases"] == 16 and set(result["by_kind"]) == set(fuzz.HOSTILE_MUTATIONS)
    assert result["bugs"] == 0, result["examples"]
    assert code == 0


def test_reports_of_several_seeds_merge():
    a = {"cases": 2, "seed": 1, "counts": {"x": {"ok-same": 1, "clean-error": 1}}, "examples": {},
         "seconds_per_case": {"value": 0.5, "by_format": {"x": 0.5}}}
    b = {"cases": 3, "seed": 2, "counts": {"x": {"clean-error": 2}, "y": {"crash": 1}},
         "examples": {"crash": [{"format": "y"}]}, "seconds_per_case": {"value": 1.0, "by_format": {"x": 1.0, "y": 1.0}}}
    m = fuzz.merge([a, b])
    assert m["cases"] == 5 and m["totals"] == {"ok-same": 1, "clean-error": 3, "crash": 1} and m["bugs"] == 1
    assert m["examples"]["crash"] == [{"format": "y", "seed": 2}]
    assert m["seconds_per_case"]["value"] == round((0.5 * 2 + 1.0 * 3) / 5, 4)


def test_a_case_that_computes_past_its_cpu_seconds_is_a_hang(tmp_path, monkeypatch):
    # the timeout counts the child's CPU seconds (RLIMIT_CPU), so a run at low priority on a busy
    # machine is not a hang, and a child that spins is one, named by its CPU seconds
    def spin(*args, **kwargs):
        while True:
            pass

    monkeypatch.setattr(fuzz, "read_all", spin)
    target = fuzz.Target(name="t", root=tmp_path, files=[])
    status, detail = fuzz.run_child(target, tmp_path / "x", timeout=1, memory_mb=3072, roots=None)
    assert status == "hang" and "CPU seconds" in detail


def test_the_fuzz_waits_while_a_timing_run_holds_the_benchmark_lock(tmp_path):
    import fcntl
    import threading
    import time

    lock = tmp_path / "bench.lock"
    assert fuzz.wait_for_quiet(str(lock)) == 0.0  # no lock file: nothing is timed
    lock.touch()
    assert fuzz.wait_for_quiet(str(lock)) < 0.5
    fd = os.open(lock, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as `flock /tmp/bench.lock <benchmark>` holds it
    threading.Timer(1.5, lambda: fcntl.flock(fd, fcntl.LOCK_UN)).start()
    try:
        t0 = time.monotonic()
        waited = fuzz.wait_for_quiet(str(lock))
        assert waited >= 1.0 and time.monotonic() - t0 >= 1.0
    finally:
        time.sleep(0.6)
        os.close(fd)

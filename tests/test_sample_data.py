"""``python -m explorer.sample_data``: small snapshots, the same on every run; the committed ones open."""

from __future__ import annotations

from pathlib import Path

import pytest

import explorer
from explorer.sample_data import SAMPLES, Sample, build
from explorer.snapshot import checkpoints_in

REPO = Path(__file__).resolve().parents[1]
TINY = (Sample("url_counts", 600, 2, ("heap", "rocksdb"), checkpoint_every=200),)


def test_a_rebuild_gives_the_same_state(tmp_path):
    a = build(tmp_path / "a", TINY, quiet=True)
    b = build(tmp_path / "b", TINY, quiet=True)
    assert [p.relative_to(tmp_path / "a") for p in a] == [p.relative_to(tmp_path / "b") for p in b]
    assert [p.name for p in checkpoints_in(tmp_path / "a" / "url_counts" / "checkpoints")] == ["chk-1", "chk-2", "chk-3"]
    for pa, pb in zip(a, b):
        sa, sb = explorer.open(pa), explorer.open(pb)
        assert sa.created_at == sb.created_at
        assert sa.keyed_state().astype(str).equals(sb.keyed_state().astype(str))
    assert (tmp_path / "a" / "README.md").read_text().startswith("# sample_data")


def test_a_rebuild_leaves_other_folders_alone(tmp_path):
    (tmp_path / "flink").mkdir(parents=True)
    (tmp_path / "flink" / "keep.txt").write_text("not ours")
    build(tmp_path, TINY, quiet=True)
    assert (tmp_path / "flink" / "keep.txt").read_text() == "not ours"


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.pipeline for s in SAMPLES])
def test_the_committed_samples_open_and_are_small(sample):
    folder = REPO / "sample_data" / sample.pipeline
    snaps = [folder / f"savepoint-{b}" for b in sample.backends]
    if sample.checkpoint_every:
        snaps.append(folder / "checkpoints")
    for path in snaps:
        snap = explorer.open(path)
        assert len(snap.keyed_state()) > 0, path
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    assert size < 1_000_000, f"{folder} is {size:,} bytes; sample data should stay small"
    assert f"``{sample.pipeline}/" in (REPO / "sample_data" / "README.md").read_text()

"""``explorer.verify``: every sample is whole; crafted copies report their missing, damaged and outside files.
No value is decoded and no JVM is started (Spark checkpoints are checked from their files)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import explorer
from explorer.readers.checks import DAMAGED, MISSING, OK, OUTSIDE

from tests.security.test_paths_flink_roots import SST, _escape, _home, _rename_handle
from tests.security.test_paths_spark_ssts import _rename_first_sst

SAMPLES = Path(__file__).resolve().parents[2] / "sample_data"
#: the samples damaged on purpose, and what verify says of them
DAMAGED_SAMPLES = {"spark/damaged-missing-partition": ("state/0/2/", MISSING)}


def _samples() -> list[str]:
    out = []
    for top in sorted(SAMPLES.iterdir()):
        if not top.is_dir():
            continue
        for d in sorted(top.iterdir()):
            if d.name == "production":
                out += [f"{top.name}/production/{p.name}" for p in sorted(d.iterdir()) if p.is_dir()]
            elif d.is_dir():
                out.append(f"{top.name}/{d.name}")
    return out


@pytest.fixture(autouse=True)
def _no_jvm(monkeypatch):
    import explorer.readers.spark.jvm as spark_jvm

    def refuse(*a, **k):
        raise AssertionError("verify started Spark")

    monkeypatch.setattr(spark_jvm, "get_spark", refuse)


@pytest.mark.parametrize("name", _samples())
def test_every_sample_verifies(name):
    report = explorer.verify(SAMPLES / name)
    if name in DAMAGED_SAMPLES:
        file, status = DAMAGED_SAMPLES[name]
        assert not report.ok and [(c.file, c.status) for c in report.problems] == [(file, status)]
        return
    assert report.ok, str(report)
    assert len(report.checks) >= 1 and set(report.to_frame()["status"]) == {OK}


def _copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / Path(name).name
    shutil.copytree(SAMPLES / name, dst)
    return dst


def _flip(f: Path, at: int) -> None:
    data = bytearray(f.read_bytes())
    data[at] ^= 0x40
    f.write_bytes(bytes(data))


def _status(report, file_part: str) -> str:
    found = [c for c in report.checks if file_part in c.file]
    assert found, (file_part, str(report))
    return found[0].status


# --- the engine ---------------------------------------------------------------------------------
def test_engine_flipped_byte_missing_file_and_link_out(tmp_path):
    snap = _copy(tmp_path, "sessions/savepoint-heap")
    files = sorted(snap.rglob("*.parquet"))
    _flip(files[0], files[0].stat().st_size // 2)
    files[1].unlink()
    outside = tmp_path / "outside.parquet"
    shutil.copy(files[2], outside)
    files[2].unlink()
    files[2].symlink_to(outside)
    report = explorer.verify(snap)
    assert not report.ok
    rel = [f.relative_to(snap).as_posix() for f in files[:3]]
    assert [_status(report, r) for r in rel] == [DAMAGED, MISSING, OUTSIDE]
    assert "SHA-256" in next(c.detail for c in report.checks if c.file == rel[0]) or \
        "XXH3" in next(c.detail for c in report.checks if c.file == rel[0])
    assert sum(c.status != OK for c in report.checks) == 3


def test_engine_damaged_metadata(tmp_path):
    snap = _copy(tmp_path, "sessions/savepoint-heap")
    _flip(snap / "_metadata", 40)
    report = explorer.verify(snap)
    assert [(c.file, c.status) for c in report.checks] == [("_metadata", DAMAGED)]
    assert "checksum" in report.checks[0].detail


def test_a_checkpoint_directory_is_verified_at_its_newest_checkpoint(tmp_path):
    report = explorer.verify(SAMPLES / "url_counts" / "checkpoints")
    assert report.ok and Path(str(report.path)).name.startswith("chk-")


# --- Flink --------------------------------------------------------------------------------------
def test_flink_deleted_shared_sst_and_flipped_sst_block(tmp_path):
    ckpt = _copy(tmp_path, "flink/rocksdb-incremental-checkpoint")
    shared = sorted((ckpt / "shared").iterdir(), key=lambda f: f.stat().st_size)
    shared[-1].unlink()
    _flip(shared[-2], 10)  # (the first data block)
    report = explorer.verify(ckpt)
    assert _status(report, shared[-1].name) == MISSING
    assert _status(report, shared[-2].name) == DAMAGED
    assert "checksum" in next(c.detail for c in report.checks if shared[-2].name in c.file)


def test_flink_truncated_state_file(tmp_path):
    sp = _copy(tmp_path, "flink/heap-canonical-savepoint")
    f = max((p for p in sp.iterdir() if p.name != "_metadata" and p.is_file()), key=lambda p: p.stat().st_size)
    f.write_bytes(f.read_bytes()[:-10])
    report = explorer.verify(sp)
    assert _status(report, f.name) == DAMAGED and "truncated" in str(report)


def test_flink_handle_outside_its_roots(tmp_path):
    home = _home(tmp_path)
    _rename_handle(home / "chk-8" / "_metadata", SST, _escape("shared/../", len(SST)))
    report = explorer.verify(home / "chk-8")
    bad = report.problems
    assert len(bad) == 1 and bad[0].status == OUTSIDE and "credentials" in bad[0].detail
    assert "AKIA" not in str(report)


# --- Spark --------------------------------------------------------------------------------------
def test_spark_flipped_delta_missing_delta_and_link_out(tmp_path):
    ckpt = _copy(tmp_path, "spark/agg-hdfs")
    part = ckpt / "state" / "0" / "0"
    newest = max(int(f.stem) for f in part.glob("*.delta"))
    _flip(part / f"{newest}.delta", 30)
    (part.parent / "1" / f"{newest}.delta").unlink()
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(str(ckpt / "commits" / "0"), outside / "0")
    (ckpt / "commits" / "0").symlink_to(outside / "0")
    report = explorer.verify(ckpt)
    assert _status(report, f"state/0/0/{newest}.delta") == DAMAGED
    assert _status(report, f"state/0/1/{newest}.delta") == MISSING
    assert _status(report, "commits/0") == OUTSIDE


def test_spark_zip_naming_an_sst_outside(tmp_path):
    ckpt = _copy(tmp_path, "spark/agg-rocksdb")
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    _rename_first_sst(zip_file, "../../1/SSTs/x.sst")
    report = explorer.verify(ckpt)
    assert _status(report, "state/0/0/6.zip") == OUTSIDE


def test_spark_zip_whose_sst_is_gone(tmp_path):
    ckpt = _copy(tmp_path, "spark/agg-rocksdb")
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    old = _rename_first_sst(zip_file, "000099-gone.sst")
    assert old
    report = explorer.verify(ckpt)
    assert _status(report, "state/0/0/6.zip") == MISSING


def test_report_frame_and_text(tmp_path):
    report = explorer.verify(SAMPLES / "spark" / "agg-hdfs")
    df = report.to_frame()
    assert list(df.columns) == ["file", "status", "detail"] and len(df) == len(report.checks)
    assert str(report).splitlines()[0].endswith("OK: %d ok" % len(df))


def test_a_path_without_a_snapshot(tmp_path):
    with pytest.raises(explorer.SnapshotNotFoundError):
        explorer.verify(tmp_path)

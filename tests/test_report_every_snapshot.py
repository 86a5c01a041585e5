"""`state-explorer inspect` and `report` answer on every snapshot under sample_data/ (issue 30).

The snapshots are those :func:`explorer.list` finds (every savepoint folder, ``chk-N``, Flink
``_metadata`` and Spark checkpoint); an incomplete ``chk-N`` (no ``_metadata``) is listed as such
and refused cleanly, which is the answer for it; so is a sample damaged on purpose so that
no read could be whole (:data:`REFUSED`). Spark checkpoints need Spark's JVM for some reads:
they run under the ``spark`` marker.
"""

from pathlib import Path

import pytest

import explorer
from explorer.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_data"
_FOUND = explorer.list(SAMPLES)
_COMPLETE = _FOUND[_FOUND["complete"]]
ENGINE_AND_FLINK = sorted(p for p, f in zip(_COMPLETE["path"], _COMPLETE["format"]) if not f.startswith("spark"))
#: samples damaged on purpose so that nothing can be read without losing keys (sample_data/spark/README)
REFUSED = {"damaged-missing-partition"}
SPARK = sorted(p for p, f in zip(_COMPLETE["path"], _COMPLETE["format"]) if f.startswith("spark"))


def _both(path: str, tmp_path: Path, capsys) -> None:
    if Path(path).name in REFUSED:  # damaged on purpose: the answer is a clean refusal naming why
        assert main(["inspect", path]) == 2
        err = capsys.readouterr().err
        assert err.startswith("state-explorer: ") and "missing" in err and "Traceback" not in err
        return
    assert main(["inspect", path]) == 0, capsys.readouterr().err
    assert main(["report", path, "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr().err
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_the_walk_finds_every_kind_of_sample():
    assert len(ENGINE_AND_FLINK) >= 35 and len(SPARK) >= 20
    assert any(p.endswith("pyflink-heap-canonical-savepoint") for p in ENGINE_AND_FLINK)


@pytest.mark.slow
@pytest.mark.parametrize("path", ENGINE_AND_FLINK, ids=lambda p: str(Path(p).relative_to(SAMPLES)))
def test_inspect_and_report_answer_on_every_sample(path, tmp_path, capsys):
    _both(path, tmp_path, capsys)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("path", SPARK, ids=lambda p: str(Path(p).relative_to(SAMPLES)))
def test_inspect_and_report_answer_on_every_spark_sample(path, tmp_path, capsys):
    _both(path, tmp_path, capsys)

"""``state-explorer inspect`` and ``report`` on real Spark checkpoints (sample_data/spark)."""

from pathlib import Path

import pytest

from explorer.cli import main

pytestmark = pytest.mark.spark

SPARK = Path(__file__).resolve().parents[2] / "sample_data" / "spark"


@pytest.mark.parametrize("name", ["tws-rows"])
def test_report_on_a_spark_checkpoint(name, spark, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(SPARK / name), "-o", str(out)]) == 0, capsys.readouterr().err
    page = out.read_text()
    assert "Key groups of" in page and "Hot keys of" in page and "no traffic data" in page
    assert page.count("Plotly.newPlot(") >= 5
    assert main(["inspect", str(SPARK / name)]) == 0
    assert "spark" in capsys.readouterr().out
